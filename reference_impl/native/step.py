"""The native one-token decode step, bound to one model's fused weights.

:class:`NativeDecodeStep` hands the C step (``decode_step.c``) pointers to the tensors the torch
forward already owns -- the fused, norm-folded layer matrices of
:class:`~reference_impl.model.llama.LlamaForward`, the RoPE table, the KV cache -- so both paths
read the same weights and write the same cache. :func:`unsupported` says why a model cannot use
it (the decoder then stays on the torch forward).
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from reference_impl.native.build import NativeLibrary, load
from reference_impl.spec_links import implements

if TYPE_CHECKING:
    from reference_impl.model.llama import FusedLayer, LlamaForward

_F = ctypes.POINTER(ctypes.c_float)
_FF = ctypes.POINTER(_F)


class _Model(ctypes.Structure):
    _fields_ = [
        ("n_layer", ctypes.c_int),
        ("n_embd", ctypes.c_int),
        ("n_head", ctypes.c_int),
        ("n_head_kv", ctypes.c_int),
        ("head_dim", ctypes.c_int),
        ("n_ff", ctypes.c_int),
        ("n_vocab", ctypes.c_int),
        ("eps", ctypes.c_float),
        ("kq_scale", ctypes.c_float),
        ("token_embd", _F),
        ("wqkv", _FF),
        ("wo", _FF),
        ("wgu", _FF),
        ("wdown", _FF),
        ("output_norm", _F),
        ("output", _F),
    ]


class _Step(ctypes.Structure):
    _fields_ = [
        ("token", ctypes.c_int),
        ("x_in", _F),
        ("rope", _F),
        ("k_cache", _FF),
        ("v_cache", _FF),
        ("cell", ctypes.c_int),
        ("n_kv", ctypes.c_int),
        ("mask", _F),
        ("hidden", _F),
        ("logits", _F),
        ("scratch", _F),
    ]


def _ptr(t: torch.Tensor) -> Any:
    return ctypes.cast(t.data_ptr(), _F)


def _ptrs(ts: list[torch.Tensor]) -> ctypes.Array[Any]:
    return (_F * len(ts))(*(_ptr(t) for t in ts))


def _f32_contiguous(t: torch.Tensor) -> bool:
    return t.dtype == torch.float32 and t.device.type == "cpu" and t.is_contiguous()


def _layer_matrices(layer: FusedLayer) -> dict[str, torch.Tensor]:
    """The layer's fused matrices as the C step reads them: row-major ``[n_out, n_in]``."""
    return {
        "wqkv": layer.wqkv_t.t(),
        "wo": layer.wo_t.t(),
        "w_gate_up": layer.w_gate_up_t.t(),
        "w_down": layer.w_down_t.t(),
    }


@implements("DEC-062")
def unsupported(graph: LlamaForward) -> str | None:
    """Why ``graph`` cannot run natively, or None when it can."""
    hp = graph.hparams
    if hp.n_rot != hp.head_dim:
        return f"partial RoPE (n_rot {hp.n_rot} != head_dim {hp.head_dim})"
    # The C step is the plain llama layer: NORM RoPE without factors, no bias.
    if hp.rope_neox:
        return f"NEOX RoPE ({hp.arch})"
    if graph.rope_freqs is not None:
        return "rope_freqs (RoPE frequency factors)"
    for il, layer in enumerate(graph.layers):
        if layer.has_bias:
            return f"layer {il} has biases"
    for il, layer in enumerate(graph.layers):
        for name, t in _layer_matrices(layer).items():
            if not _f32_contiguous(t):
                return f"layer {il} {name} is not a contiguous float32 CPU matrix"
    for name, t in (("token_embd", graph.token_embd), ("output", graph.output)):
        if not _f32_contiguous(t):
            return f"{name} is not a contiguous float32 CPU matrix"
    return None


@implements("DEC-060")
class NativeDecodeStep:
    """Runs one token through every layer and the output head in one C call."""

    def __init__(self, graph: LlamaForward, library: NativeLibrary | None = None) -> None:
        why = unsupported(graph)
        if why is not None:
            raise ValueError(why)
        self.library = library if library is not None else load()
        if self.library.lib is None:
            raise RuntimeError(self.library.reason)
        lib = self.library.lib
        lib.dc_decode_one.restype = ctypes.c_int
        lib.dc_decode_one.argtypes = [
            ctypes.POINTER(_Model),
            ctypes.POINTER(_Step),
            _F,
            ctypes.c_int,
        ]
        lib.dc_scratch_floats.restype = ctypes.c_long
        self._lib = lib
        self.graph = graph
        hp = graph.hparams
        layers = graph.layers
        mats = [_layer_matrices(la) for la in layers]
        self._keep = [  # the pointer arrays must outlive the struct (order: _Model's fields)
            _ptrs([m[name] for m in mats]) for name in ("wqkv", "wo", "w_gate_up", "w_down")
        ]
        self.output_norm = graph.output_norm.to(torch.float32).contiguous()
        self.model = _Model(
            hp.n_layer,
            hp.n_embd,
            hp.n_head,
            hp.n_head_kv,
            hp.head_dim,
            layers[0].w_down_t.shape[0] if layers else 0,
            hp.n_vocab,
            hp.rms_eps,
            hp.kq_scale,
            _ptr(graph.token_embd),
            *self._keep,
            _ptr(self.output_norm),
            _ptr(graph.output),
        )
        self.scratch = torch.empty(int(lib.dc_scratch_floats(ctypes.byref(self.model))))
        self.scores = torch.empty(0)
        self.hidden = torch.empty(1, hp.n_embd)
        self._cache_ptrs: tuple[object, ...] = ()

    def _cache_arrays(
        self, k: list[torch.Tensor], v: list[torch.Tensor], stream: int
    ) -> tuple[ctypes.Array[Any], ctypes.Array[Any]]:
        key = (stream, *(t.data_ptr() for t in k), *(t.data_ptr() for t in v))
        if self._cache_ptrs[:1] != (key,):  # a new cache: check it once
            hp = self.graph.hparams
            for t in (*k, *v):
                if t.ndim != 4 or t.shape[2:] != (hp.n_head_kv, hp.head_dim):
                    raise ValueError(
                        f"K/V caches must be [n_stream, kv_size, {hp.n_head_kv}, {hp.head_dim}]"
                    )
                if not _f32_contiguous(t):
                    raise ValueError("K/V caches must be contiguous float32 CPU tensors")
            if len(k) != hp.n_layer or len(v) != hp.n_layer:
                raise ValueError(f"one K and one V cache per layer ({hp.n_layer})")
            if not 0 <= stream < k[0].shape[0]:
                raise ValueError(f"stream {stream} not in [0, {k[0].shape[0]})")
            self._cache_ptrs = (key, _ptrs([t[stream] for t in k]), _ptrs([t[stream] for t in v]))
        return self._cache_ptrs[1], self._cache_ptrs[2]  # type: ignore[return-value]

    @implements("DEC-060", "DEC-061")
    def __call__(
        self,
        *,
        token: int | None,
        embd: np.ndarray | None,
        position: int,
        k_cache: list[torch.Tensor],
        v_cache: list[torch.Tensor],
        stream: int,
        cell: int,
        mask: torch.Tensor,
        logits: np.ndarray | None,
        n_threads: int,
    ) -> torch.Tensor:
        """One step: writes this token's K/V at ``cell`` of ``stream`` in every layer's
        ``k_cache``/``v_cache`` (``[n_stream, kv_size, n_head_kv, head_dim]`` float32),
        attends the first ``mask.shape[-1]`` cells (``mask``: contiguous additive row), writes
        the logits into ``logits`` (a float32 ``[n_vocab]`` row) unless None, and returns the
        final normalized hidden state ``[1, n_embd]`` (a buffer reused by the next call)."""
        graph = self.graph
        hp = graph.hparams
        n_kv = int(mask.shape[-1])
        k_arr, v_arr = self._cache_arrays(k_cache, v_cache, stream)
        kv_size = k_cache[0].shape[1]
        if not 0 <= cell < kv_size or not 0 < n_kv <= kv_size:
            raise ValueError(f"cell {cell} / n_kv {n_kv} outside the cache (kv_size {kv_size})")
        if mask.dtype != torch.float32 or not mask.is_contiguous() or mask.numel() != n_kv:
            raise ValueError("mask must be one contiguous float32 row")
        if self.scores.shape[0] < n_kv * n_threads:  # one row of scores per thread
            self.scores = torch.empty(max(n_kv, 256) * n_threads)
        if token is not None and not 0 <= token < hp.n_vocab:
            raise ValueError(f"token id {token} is outside the vocabulary [0, {hp.n_vocab})")
        x_in = None
        if token is None:
            if embd is None:
                raise ValueError("pass a token id or an embedding row")
            row = np.ascontiguousarray(embd, dtype=np.float32).reshape(hp.n_embd)
            x_in = row.ctypes.data_as(_F)
        rot = graph.rope.rotations(np.array([position], dtype=np.int64))
        # [1, 1, hd/2, 2] (cos, sin): a view of the table (contiguous() copies only if it is not)
        rope = torch.view_as_real(rot).contiguous()
        if logits is not None:
            assert logits.dtype == np.float32 and logits.flags.c_contiguous
            assert logits.shape == (hp.n_vocab,)
        step = _Step(
            -1 if token is None else int(token),
            x_in,
            _ptr(rope),
            k_arr,
            v_arr,
            int(cell),
            n_kv,
            _ptr(mask),
            _ptr(self.hidden),
            logits.ctypes.data_as(_F) if logits is not None else None,
            _ptr(self.scratch),
        )
        rc = self._lib.dc_decode_one(
            ctypes.byref(self.model), ctypes.byref(step), _ptr(self.scores), int(n_threads)
        )
        if rc != 0:
            raise RuntimeError(f"native decode step rejected its arguments (rc {rc})")
        return self.hidden
