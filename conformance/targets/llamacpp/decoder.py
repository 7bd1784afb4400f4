"""The decoder area of the llamacpp target: ``llama_context`` through llama-cpp-python.

llama.cpp stops the process (``GGML_ASSERT``) on some inputs instead of returning an error. The
adapter refuses those inputs itself, before llama.cpp sees them, and reports what llama.cpp would
have done to a caller that survived: a batch larger than ``n_batch`` or than ``n_ubatch`` under
non-causal attention, and sequence ids outside the context's streams in memory operations, give
-1 / an exception (spec/decoder.md D1). Invalid output reads (NULL pointers in C) raise
:class:`InvalidOutput`. The K/V cache is F32 and flash attention is off, so the target's
tolerance class is ``f32`` (decode_phase.md D1).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np

from conformance.targets.base import TargetLoadError
from reference_impl.batch.types import Batch
from reference_impl.errors import EngineError


def runtime_module() -> Any:
    try:
        from conformance.targets.llamacpp import runtime
    except ImportError as exc:  # llama-cpp-python missing
        raise TargetLoadError(
            "target 'llamacpp' needs llama-cpp-python: install the 'llamacpp' extra "
            "(pip install -e '.[llamacpp]'; it builds llama.cpp from source)"
        ) from exc
    return runtime


_KV_TYPES = {"torch.float32": "GGML_TYPE_F32", "torch.float16": "GGML_TYPE_F16"}


class InvalidOutput(EngineError):
    """llama.cpp returned NULL for an output read."""


class EncodeUnsupported(EngineError):
    """llama_encode on a context with memory, which llama.cpp 0.3.36 does not survive (so the
    target claims ``decoder.encode`` without ``decoder.encode_with_memory``)."""


def _refuse_aborting_context(model: Any, params: dict[str, Any]) -> None:
    """llama.cpp 0.3.36 aborts the process while creating some contexts; refuse them instead:
    more sequences than output rows (n_seq_max > n_outputs_max, output_reserve's assert), and a
    MEAN/RANK-pooling context whose n_ubatch is not a multiple of n_seq_max (the worst-case
    reservation rounds n_tokens up past n_ubatch: GGML_ASSERT in ggml_mul_mat)."""
    from reference_impl.decoder.params import ContextParams, derive

    known = {
        k: v
        for k, v in params.items()
        if k in ContextParams.__dataclass_fields__ and k != "pooling"
    }
    d = derive(ContextParams(**known), n_ctx_train=int(model.info()["n_ctx_train"]))
    if d.n_seq_max > d.n_outputs_max:
        raise EngineError(
            "LLAMACPP_WOULD_ABORT",
            f"llama.cpp aborts creating a context with n_seq_max={d.n_seq_max} above "
            f"n_outputs_max={d.n_outputs_max} (output_reserve's GGML_ASSERT)",
            field="n_seq_max",
        )
    if (
        params.get("embeddings")
        and params.get("pooling", -1) in (1, 4)
        and d.n_ubatch % d.n_seq_max
    ):
        raise EngineError(
            "LLAMACPP_WOULD_ABORT",
            f"llama.cpp aborts creating a pooled-embeddings context with n_ubatch={d.n_ubatch} "
            f"not a multiple of n_seq_max={d.n_seq_max}",
            field="n_ubatch",
        )


class LlamaCppDecodeContext:
    """The decode-context protocol (conformance/targets/areas/decode.py) over llama.cpp."""

    def __init__(self, model: Any, **params: Any) -> None:
        rt = runtime_module()
        self._lc = rt.lc
        ignored = {"trace", "attention_backend"}
        for key in ignored:
            params.pop(key, None)
        if "kv_dtype" in params:  # a torch dtype: float32 or float16 (decoder.kv_dtype)
            kind = _KV_TYPES[str(params.pop("kv_dtype"))]
            params["type_k"] = params["type_v"] = getattr(rt, kind)
        self._embeddings = bool(params.get("embeddings", False))
        self._non_causal = params.get("attention_type", -1) == 1
        # llama_context_default_params, where our runtime wrapper defaults differ
        params.setdefault("n_batch", 2048)
        _refuse_aborting_context(model, params)
        self._n_outputs = 0
        self._abort_cb: Any = None
        self._ctx = rt.LlamaCppContext(model, **params)
        self.last_error: EngineError | None = None

    # -- sizes -----------------------------------------------------------------------------
    def n_ctx(self) -> int:
        return self._ctx.n_ctx

    def n_ctx_seq(self) -> int:
        return int(self._lc.llama_n_ctx_seq(self._ctx.ptr))

    def n_batch(self) -> int:
        return self._ctx.n_batch

    def n_ubatch(self) -> int:
        return self._ctx.n_ubatch

    def n_seq_max(self) -> int:
        return self._ctx.n_seq_max

    def pooling_type(self) -> int:
        return int(self._lc.llama_pooling_type(self._ctx.ptr))

    # -- decode ----------------------------------------------------------------------------
    def decode(self, batch: Batch) -> int:
        if not isinstance(batch, Batch):
            raise TypeError(f"decode expects a Batch, got {type(batch).__name__}")
        if batch.n_tokens > self.n_batch():
            return -1  # llama.cpp: GGML_ASSERT(n_tokens_all <= n_batch) would abort
        if self._non_causal and batch.n_tokens > self.n_ubatch():
            return -1  # llama.cpp: GGML_ASSERT(causal_attn || n_ubatch >= n_tokens) would abort
        code = self._ctx.decode(batch)
        if code == 0:
            self._n_outputs = self._count_outputs(batch)
        elif code not in (-1, 1):
            self._n_outputs = 0
        return code

    def encode(self, batch: Batch) -> int:
        """``llama_encode`` on a context without memory (an encoder-only model such as bert):
        every token an output. llama.cpp 0.3.36 crashes on the rest, so they are refused here
        first: a context with memory (a decoder model: llama_encode ends in a segmentation
        fault, measured on the ``gqa`` fixture) and a batch above n_ubatch
        (GGML_ASSERT(n_ubatch >= n_tokens)), which returns -1 as decode does."""
        if not isinstance(batch, Batch):
            raise TypeError(f"encode expects a Batch, got {type(batch).__name__}")
        if self._ctx.has_memory():
            raise EncodeUnsupported(
                "DEC_ENCODE_UNSUPPORTED",
                "llama_encode on a context with memory (a decoder model) crashes llama.cpp",
            )
        if batch.n_tokens > self.n_ubatch():
            return -1
        code = self._ctx.encode(batch)
        if code == 0:
            self._n_outputs = batch.n_tokens
        elif code != -1:
            self._n_outputs = 0
        return code

    def _count_outputs(self, batch: Batch) -> int:
        n = batch.n_tokens
        if self._embeddings or batch.logits is None:
            return n if self._embeddings else 1
        return int(np.count_nonzero(batch.logits))

    def n_outputs(self) -> int:
        return self._n_outputs

    def n_reused(self) -> int:
        return self._ctx.n_reused()

    def get_logits_ith(self, i: int) -> np.ndarray:
        row = self._ctx.logits_ith(i)
        if row is None:
            raise InvalidOutput("OUT_INVALID", f"llama_get_logits_ith({i}) returned NULL", index=i)
        return row

    def get_logits(self) -> np.ndarray:
        n = self._n_outputs
        ptr = self._lc.llama_get_logits(self._ctx.ptr)
        if n == 0 or not ptr:
            return np.zeros((0, self._ctx.n_vocab), dtype=np.float32)
        return np.ctypeslib.as_array(ptr, shape=(n, self._ctx.n_vocab)).copy()

    def get_embeddings_ith(self, i: int) -> np.ndarray:
        row = self._ctx.embeddings_ith(i)
        if row is None:
            raise InvalidOutput(
                "OUT_INVALID", f"llama_get_embeddings_ith({i}) returned NULL", index=i
            )
        return row

    def get_embeddings_seq(self, seq_id: int) -> np.ndarray:
        row = self._ctx.embeddings_seq(seq_id)
        if row is None:
            raise InvalidOutput(
                "OUT_INVALID", f"llama_get_embeddings_seq({seq_id}) returned NULL", seq_id=seq_id
            )
        return row

    # -- memory ----------------------------------------------------------------------------
    def _check_seq(self, seq_id: int) -> None:
        # llama.cpp asserts on a sequence outside seq_to_stream (n_seq_max streams, or 256 unified)
        limit = 256 if self.n_ctx_seq() == self.n_ctx() else self.n_seq_max()
        if not 0 <= seq_id < limit:
            raise EngineError(
                "KV_SEQ_ID_RANGE", f"sequence id {seq_id} is not in [0, {limit})", seq_id=seq_id
            )

    def memory_clear(self, data: bool = True) -> None:
        self._ctx.memory_clear(data)

    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        if seq_id != -1:
            self._check_seq(seq_id)
        return self._ctx.seq_rm(seq_id, p0, p1)

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        self._check_seq(src)
        self._check_seq(dst)
        self._ctx.seq_cp(src, dst, p0, p1)

    def seq_keep(self, seq_id: int) -> None:
        self._check_seq(seq_id)
        self._ctx.seq_keep(seq_id)

    def seq_add(self, seq_id: int, p0: int, p1: int, delta: int) -> None:
        self._check_seq(seq_id)
        self._ctx.seq_add(seq_id, p0, p1, delta)

    def seq_div(self, seq_id: int, p0: int, p1: int, d: int) -> None:
        self._check_seq(seq_id)
        self._ctx.seq_div(seq_id, p0, p1, d)

    def seq_pos_min(self, seq_id: int) -> int:
        self._check_seq(seq_id)
        return self._ctx.seq_pos_min(seq_id)

    def seq_pos_max(self, seq_id: int) -> int:
        self._check_seq(seq_id)
        return self._ctx.seq_pos_max(seq_id)

    # -- abort -----------------------------------------------------------------------------
    def set_abort_callback(self, callback: Callable[[], bool] | None) -> None:
        lc = self._lc
        if callback is None:
            self._abort_cb = None
            lc.llama_set_abort_callback(self._ctx.ptr, lc.ggml_abort_callback(0), None)
            return

        @lc.ggml_abort_callback
        def cb(_data: ctypes.c_void_p) -> bool:
            return bool(callback())

        self._abort_cb = cb  # keep the ctypes callback alive
        lc.llama_set_abort_callback(self._ctx.ptr, cb, None)

    def close(self) -> None:
        self._ctx.close()
