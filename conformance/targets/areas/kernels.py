"""Kernels area of the target protocol: quantized KV formats, the policy string, decode kernels.

Tensors cross the adapter as torch CPU tensors (or the device the target's kernels use).

``kernels.quant``
    ``kv_quant_impls() -> tuple[str, ...]``: the implementations the target offers (each is
    checked, e.g. ``("torch", "triton")``).
    ``kv_quantize(x, kind, qblock, impl) -> (codes, scales)``: per-token formats ``q8_0``,
    ``q4_0``, ``nf4`` along the last dim (spec/kv_quant.md); ``kv_dequantize(codes, scales, kind,
    qblock, dim, impl) -> fp32 tensor``. ``ggml_quantize(x, qtype, impl) -> uint8 bytes`` and
    ``ggml_dequantize(data, qtype, impl) -> fp32`` for GGML ``Q8_0``/``Q4_0`` rows.
``kernels.policy``
    ``parse_kv_policy(text) -> {"k_sem": "kind@qb", "k_geo": ..., "v": ..., "resid": int,
    "fused": bool}``; ``format_kv_policy(mapping) -> str`` (canonical string). Errors are
    EngineError subclasses with ``code`` and ``field``.
``kernels.gqa_decode``
    ``gqa_decode_paths() -> tuple[str, ...]``: the fused paths offered (``triton-1pass``,
    ``triton-2pass``). ``gqa_decode(q, k, v, mask, scale, path, partition_size,
    two_pass_min_tokens=None) -> (out, record)``; ``record.path`` names the path that ran and
    ``record.reason`` why.
``kernels.decoupled_cache``
    ``decoupled_cache(policy, n_head, head_dims, batch, max_len)`` -> a cache with
    ``append(k_sem, k_geo, v)``, ``length``, ``prefix_len``, ``tail_len`` and the buffers of
    :class:`kernels.decoupled_cache.DecoupledKVCache` (token-major ``[B, L, H·hd]``; per tensor
    ``codes``/``scales`` or ``buf``, and the fp16 ``ring``), which the oracle reads directly.
``kernels.decoupled_decode``
    ``decoupled_decode_paths()`` as above; ``decoupled_decode(q_sem, q_geo, cache, null, path,
    partition_size, sem_scale=None, geo_scale=None, two_pass_min_tokens=None) -> (out,
    record)`` over a :class:`kernels.decoupled_cache.DecoupledKVCache` (layout documented
    there) and an optional :class:`kernels.decoupled_cache.NullKV`.
"""

from __future__ import annotations

from typing import Any

import torch

CAPABILITIES: dict[str, tuple[str, ...]] = {
    "kernels.quant": (
        "kv_quant_impls",
        "kv_quantize",
        "kv_dequantize",
        "ggml_quantize",
        "ggml_dequantize",
    ),
    "kernels.policy": ("parse_kv_policy", "format_kv_policy"),
    "kernels.gqa_decode": ("gqa_decode_paths", "gqa_decode"),
    "kernels.decoupled_cache": ("decoupled_cache",),
    "kernels.decoupled_decode": ("decoupled_decode_paths", "decoupled_decode"),
}


def _quant_module(impl: str) -> Any:
    if impl == "torch":
        from kernels import quant

        return quant
    if impl == "triton":
        from kernels import quant_triton

        return quant_triton
    raise ValueError(f"unknown quantization implementation {impl!r}")


def _config(two_pass_min_tokens: int | None) -> Any:
    from kernels import dispatch

    if two_pass_min_tokens is None:
        return None
    return dispatch.DispatchConfig(two_pass_min_tokens=two_pass_min_tokens)


class Reference:
    """The suite's own kernels (``kernels/``) through the adapter protocol."""

    # -- kernels.quant ---------------------------------------------------------------------
    def kv_quant_impls(self) -> tuple[str, ...]:
        from kernels._triton import triton_available

        return ("torch", "triton") if triton_available() else ("torch",)

    def kv_quantize(
        self, x: torch.Tensor, kind: str, qblock: int, impl: str = "torch"
    ) -> tuple[torch.Tensor, torch.Tensor]:
        qt = _quant_module(impl).quantize(x, kind, qblock)
        return qt.codes, qt.scales

    def kv_dequantize(
        self,
        codes: torch.Tensor,
        scales: torch.Tensor,
        kind: str,
        qblock: int,
        dim: int,
        impl: str = "torch",
    ) -> torch.Tensor:
        from kernels import quant

        quant.check_format(kind, qblock)
        qt = quant.QuantizedTensor(kind, qblock, dim, codes, scales)
        return _quant_module(impl).dequantize(qt)

    def ggml_quantize(self, x: torch.Tensor, qtype: str, impl: str = "torch") -> torch.Tensor:
        return _quant_module(impl).ggml_quantize(x, qtype)

    def ggml_dequantize(self, data: torch.Tensor, qtype: str, impl: str = "torch") -> torch.Tensor:
        return _quant_module(impl).ggml_dequantize(data, qtype)

    # -- kernels.policy --------------------------------------------------------------------
    def parse_kv_policy(self, text: str) -> dict[str, Any]:
        from kernels import policy

        p = policy.parse_policy(text)
        return {
            "k_sem": p.k_sem.short(),
            "k_geo": p.k_geo.short(),
            "v": p.v.short(),
            "resid": p.residual_len,
            "fused": p.is_fused_layout(),
        }

    def format_kv_policy(self, fields: dict[str, Any]) -> str:
        from kernels import policy

        def fmt(text: str) -> policy.TensorFormat:
            kind, _, qb = text.partition("@")
            return policy.TensorFormat(kind, int(qb) if qb else policy.DEFAULT_QBLOCK)

        p = policy.KVCachePolicy(
            fmt(fields["k_sem"]), fmt(fields["k_geo"]), fmt(fields["v"]), int(fields["resid"])
        )
        return p.short()

    # -- kernels.gqa_decode ----------------------------------------------------------------
    def gqa_decode_paths(self) -> tuple[str, ...]:
        from kernels import dispatch

        return dispatch.FUSED_PATHS

    def gqa_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor,
        scale: float,
        path: str = "auto",
        partition_size: int | None = None,
        two_pass_min_tokens: int | None = None,
    ) -> tuple[torch.Tensor, Any]:
        from kernels import decode_attention

        trace: list[Any] = []
        out = decode_attention.gqa_decode(
            q,
            k,
            v,
            mask,
            scale,
            path=path,
            partition_size=partition_size,
            config=_config(two_pass_min_tokens),
            trace=trace,
        )
        return out, trace[-1]

    # -- kernels.decoupled_cache -----------------------------------------------------------
    def decoupled_cache(
        self,
        policy: str,
        n_head: int,
        head_dims: tuple[int, int, int],
        batch: int,
        max_len: int,
    ) -> Any:
        from kernels._triton import kernel_device
        from kernels.decoupled_cache import DecoupledDims, DecoupledKVCache

        dims = DecoupledDims(n_head, *head_dims)
        return DecoupledKVCache(policy, dims, batch, max_len, device=kernel_device())

    # -- kernels.decoupled_decode ----------------------------------------------------------
    def decoupled_decode_paths(self) -> tuple[str, ...]:
        from kernels import dispatch

        return dispatch.FUSED_PATHS

    def decoupled_decode(
        self,
        q_sem: torch.Tensor,
        q_geo: torch.Tensor,
        cache: Any,
        null: Any = None,
        path: str = "auto",
        partition_size: int | None = None,
        sem_scale: float | None = None,
        geo_scale: float | None = None,
        two_pass_min_tokens: int | None = None,
    ) -> tuple[torch.Tensor, Any]:
        from kernels import decoupled

        trace: list[Any] = []
        out = decoupled.decoupled_decode(
            q_sem,
            q_geo,
            cache,
            null=null,
            sem_scale=sem_scale,
            geo_scale=geo_scale,
            path=path,
            partition_size=partition_size,
            config=_config(two_pass_min_tokens),
            trace=trace,
        )
        return out, trace[-1]
