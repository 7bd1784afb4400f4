"""A small typed wrapper over llama.cpp's C API (through llama-cpp-python's ctypes bindings).

It is the one place that speaks ctypes: the ``llamacpp`` target, the parity tests and the
benchmarks build on :class:`LlamaCppModel` and :class:`LlamaCppContext`.

* a :class:`~reference_impl.batch.types.Batch` is handed to ``llama_decode`` as is: fields that
  are ``None`` in the record are passed as NULL pointers, so llama.cpp applies its own
  defaults (positions from memory, sequence 0, last-token output), exactly like a C caller;
* the KV cache defaults to F32 K and V (``GGML_TYPE_F32``), the most precise setting for
  differential tests;
* llama.cpp's log output is silenced unless ``DC_LLAMACPP_LOG=1``.

Importing this module requires ``llama_cpp``; tests import it behind
``pytest.importorskip("llama_cpp")``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import llama_cpp as lc
import numpy as np

from reference_impl.batch.types import Batch

GGML_TYPE_F32 = 0
GGML_TYPE_F16 = 1
GGML_TYPE_Q4_0 = 2
GGML_TYPE_Q8_0 = 8

GRAPH_REUSE_DISABLE = "LLAMA_GRAPH_REUSE_DISABLE"

FLASH_ATTN = {None: lc.LLAMA_FLASH_ATTN_TYPE_AUTO, False: 0, True: 1}


class LlamaCppError(RuntimeError):
    """llama.cpp refused an operation (model or context creation, a failed call)."""


_BACKEND_READY = False
_LOG_CALLBACK: Any = None  # keep the ctypes callback alive for the process


def _init_backend() -> None:
    global _BACKEND_READY, _LOG_CALLBACK
    if _BACKEND_READY:
        return
    if os.environ.get("DC_LLAMACPP_LOG") != "1":

        @lc.llama_log_callback
        def _quiet(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
            return None

        _LOG_CALLBACK = _quiet
        lc.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))
    lc.llama_backend_init()
    _BACKEND_READY = True


def version() -> str:
    return str(getattr(lc, "__version__", "unknown"))


class LlamaCppModel:
    """A loaded GGUF model (``llama_model``) with its vocabulary."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        vocab_only: bool = False,
        use_extra_bufts: bool = False,
        check_tensors: bool = False,
    ) -> None:
        _init_backend()
        self.path = Path(path)
        params = lc.llama_model_default_params()
        params.n_gpu_layers = 0
        params.vocab_only = vocab_only
        params.check_tensors = check_tensors  # refuse NaN/Inf tensor data (ggml_validate_row_data)
        # Extra CPU buffer types repack quantized weights for AMX / SIMD kernels. The bundled
        # build's AMX Q4_0/Q8_0 matmul segfaults on machines whose kernel does not grant AMX
        # tile state to the process, so the plain CPU path is the default here.
        params.use_extra_bufts = use_extra_bufts
        ptr = lc.llama_model_load_from_file(str(self.path).encode(), params)
        if not ptr:
            raise LlamaCppError(f"llama.cpp could not load model {self.path}")
        self._ptr: Any = ptr
        self._vocab: Any = lc.llama_model_get_vocab(ptr)

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def ptr(self) -> Any:
        if self._ptr is None:
            raise LlamaCppError("model is closed")
        return self._ptr

    def close(self) -> None:
        if self._ptr is not None:
            lc.llama_model_free(self._ptr)
            self._ptr = None

    def __enter__(self) -> LlamaCppModel:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:  # best effort; explicit close() is preferred
        with contextlib.suppress(Exception):
            self.close()

    # -- metadata -----------------------------------------------------------------------------

    @property
    def n_vocab(self) -> int:
        return int(lc.llama_vocab_n_tokens(self._vocab))

    def info(self) -> dict[str, int]:
        p = self.ptr
        return {
            "n_vocab": self.n_vocab,
            "n_embd": int(lc.llama_model_n_embd(p)),
            "n_layer": int(lc.llama_model_n_layer(p)),
            "n_head": int(lc.llama_model_n_head(p)),
            "n_head_kv": int(lc.llama_model_n_head_kv(p)),
            "n_ctx_train": int(lc.llama_model_n_ctx_train(p)),
            "eos": self.eos,
        }

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(4096)
        n = lc.llama_model_meta_val_str(self.ptr, key.encode(), buf, len(buf))
        return None if n < 0 else buf.value.decode("utf-8", errors="replace")

    @property
    def bos(self) -> int:
        return int(lc.llama_vocab_bos(self._vocab))

    @property
    def eos(self) -> int:
        return int(lc.llama_vocab_eos(self._vocab))

    # -- tokenizer ----------------------------------------------------------------------------

    def tokenize(
        self, text: str, add_special: bool = True, parse_special: bool = False
    ) -> list[int]:
        raw = text.encode("utf-8")
        cap = len(raw) + 8
        buf = (lc.llama_token * cap)()
        n = lc.llama_tokenize(self._vocab, raw, len(raw), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (lc.llama_token * cap)()
            n = lc.llama_tokenize(self._vocab, raw, len(raw), buf, cap, add_special, parse_special)
        if n < 0:
            raise LlamaCppError(f"llama_tokenize failed ({n})")
        return [int(buf[i]) for i in range(n)]

    def token_to_piece(self, token: int, special: bool = False, lstrip: int = 0) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = lc.llama_token_to_piece(self._vocab, token, buf, len(buf), lstrip, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = lc.llama_token_to_piece(self._vocab, token, buf, len(buf), lstrip, special)
        return bytes(buf.raw[:n])

    def detokenize(
        self, tokens: Sequence[int], remove_special: bool = False, unparse_special: bool = False
    ) -> bytes:
        arr = (lc.llama_token * max(1, len(tokens)))(*tokens)
        cap = 16 + 8 * len(tokens)
        for _ in range(2):
            buf = ctypes.create_string_buffer(cap)
            n = lc.llama_detokenize(
                self._vocab, arr, len(tokens), buf, cap, remove_special, unparse_special
            )
            if n >= 0:
                return bytes(buf.raw[:n])
            cap = -n
        raise LlamaCppError("llama_detokenize failed")


class _BatchArrays:
    """The ctypes ``llama_batch`` for one :class:`Batch`, keeping its arrays alive."""

    def __init__(self, batch: Batch) -> None:
        n = batch.n_tokens
        self.keep: list[Any] = []
        b = lc.llama_batch()
        b.n_tokens = n
        b.token = self._ptr(batch.token, np.int32, ctypes.c_int32)
        b.embd = self._ptr(batch.embd, np.float32, ctypes.c_float)
        pos = None if batch.pos is None else np.asarray(batch.pos).reshape(-1)
        b.pos = self._ptr(pos, np.int32, ctypes.c_int32)
        b.n_seq_id = self._ptr(batch.n_seq_id, np.int32, ctypes.c_int32)
        if batch.seq_id is None:
            b.seq_id = ctypes.POINTER(ctypes.POINTER(ctypes.c_int32))()  # type: ignore[assignment]
        else:
            rows = np.ascontiguousarray(batch.seq_id, dtype=np.int32)
            self.keep.append(rows)
            row_ptrs = (ctypes.POINTER(ctypes.c_int32) * n)(
                *[rows[i].ctypes.data_as(ctypes.POINTER(ctypes.c_int32)) for i in range(n)]
            )
            self.keep.append(row_ptrs)
            b.seq_id = ctypes.cast(row_ptrs, ctypes.POINTER(ctypes.POINTER(ctypes.c_int32)))  # type: ignore[assignment]
        b.logits = self._ptr(batch.logits, np.int8, ctypes.c_int8)
        self.batch = b

    def _ptr(self, arr: np.ndarray | None, dtype: Any, ctype: Any) -> Any:
        if arr is None:
            return ctypes.POINTER(ctype)()
        a = np.ascontiguousarray(arr, dtype=dtype)
        self.keep.append(a)
        return a.ctypes.data_as(ctypes.POINTER(ctype))


class LlamaCppContext:
    """A ``llama_context`` over a :class:`LlamaCppModel`: decode, logits, memory operations."""

    def __init__(
        self,
        model: LlamaCppModel,
        *,
        n_ctx: int = 512,
        n_batch: int = 512,
        n_ubatch: int = 512,
        n_seq_max: int = 1,
        n_threads: int | None = None,
        type_k: int = GGML_TYPE_F32,
        type_v: int = GGML_TYPE_F32,
        flash_attn: bool | None = False,
        embeddings: bool = False,
        kv_unified: bool = False,
        swa_full: bool = True,
        n_outputs_max: int = 0,
        pooling: int = -1,
        attention_type: int = -1,
        graph_reuse: bool = True,
    ) -> None:
        self.model = model
        threads = n_threads or os.cpu_count() or 1
        p = lc.llama_context_default_params()
        p.n_ctx = n_ctx
        p.n_batch = n_batch
        p.n_ubatch = n_ubatch
        p.n_seq_max = n_seq_max
        p.n_threads = threads
        p.n_threads_batch = threads
        p.type_k = type_k
        p.type_v = type_v
        p.flash_attn_type = FLASH_ATTN[flash_attn]
        p.embeddings = embeddings
        p.kv_unified = kv_unified
        p.swa_full = swa_full
        p.pooling_type = pooling
        p.attention_type = attention_type
        p.no_perf = True
        if hasattr(p, "n_outputs_max"):
            p.n_outputs_max = n_outputs_max
        # llama.cpp reads its graph-reuse switch from the environment when a context is made.
        saved = os.environ.pop(GRAPH_REUSE_DISABLE, None)
        if not graph_reuse:
            os.environ[GRAPH_REUSE_DISABLE] = "1"
        try:
            ctx = lc.llama_init_from_model(model.ptr, p)
        finally:
            os.environ.pop(GRAPH_REUSE_DISABLE, None)
            if saved is not None:
                os.environ[GRAPH_REUSE_DISABLE] = saved
        if not ctx:
            raise LlamaCppError("llama.cpp could not create a context with these parameters")
        self._ptr: Any = ctx
        self.n_vocab = model.n_vocab
        self.n_embd = int(lc.llama_model_n_embd(model.ptr))

    @property
    def ptr(self) -> Any:
        if self._ptr is None:
            raise LlamaCppError("context is closed")
        return self._ptr

    def close(self) -> None:
        if self._ptr is not None:
            lc.llama_free(self._ptr)
            self._ptr = None

    def __enter__(self) -> LlamaCppContext:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    # -- parameters ---------------------------------------------------------------------------

    def n_reused(self) -> int:
        """Graphs reused since creation (counted whether or not timings are)."""
        return int(lc.llama_perf_context(self.ptr).n_reused)

    @property
    def n_ctx(self) -> int:
        return int(lc.llama_n_ctx(self.ptr))

    @property
    def n_batch(self) -> int:
        return int(lc.llama_n_batch(self.ptr))

    @property
    def n_ubatch(self) -> int:
        return int(lc.llama_n_ubatch(self.ptr))

    @property
    def n_seq_max(self) -> int:
        return int(lc.llama_n_seq_max(self.ptr))

    def set_threads(self, n_threads: int) -> None:
        lc.llama_set_n_threads(self.ptr, n_threads, n_threads)

    # -- decode and outputs -------------------------------------------------------------------

    def decode(self, batch: Batch) -> int:
        """``llama_decode``: 0 ok, 1 no KV slot, 2 aborted, -1 invalid batch, < -1 fatal."""
        arrays = _BatchArrays(batch)
        return int(lc.llama_decode(self.ptr, arrays.batch))

    def encode(self, batch: Batch) -> int:
        """``llama_encode``: 0 ok, -1 invalid batch, 2 aborted, < -1 fatal."""
        arrays = _BatchArrays(batch)
        return int(lc.llama_encode(self.ptr, arrays.batch))

    def has_memory(self) -> bool:
        return bool(lc.llama_get_memory(self.ptr))

    def logits_ith(self, i: int) -> np.ndarray | None:
        """A copy of the logits of batch token ``i`` (negative: the i-th output from the end),
        or None when that token has no logits (``llama_get_logits_ith``)."""
        ptr = lc.llama_get_logits_ith(self.ptr, i)
        if not ptr:
            return None
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()

    def embeddings_ith(self, i: int) -> np.ndarray | None:
        ptr = lc.llama_get_embeddings_ith(self.ptr, i)
        if not ptr:
            return None
        return np.ctypeslib.as_array(ptr, shape=(self.n_embd,)).copy()

    def embeddings_seq(self, seq_id: int) -> np.ndarray | None:
        ptr = lc.llama_get_embeddings_seq(self.ptr, seq_id)
        if not ptr:
            return None
        return np.ctypeslib.as_array(ptr, shape=(self.n_embd,)).copy()

    def logits_all(self, tokens: Sequence[int]) -> np.ndarray:
        """Clear the memory and decode ``tokens`` as sequence 0 at positions 0.. with every
        logit requested (one batch); returns ``[n_tokens, n_vocab]`` float32."""
        n = len(tokens)
        self.memory_clear()
        batch = Batch.from_lists(
            list(tokens), pos=list(range(n)), seq_ids=[[0]] * n, logits=[1] * n
        )
        rc = self.decode(batch)
        if rc != 0:
            raise LlamaCppError(f"llama_decode returned {rc}")
        out = np.empty((n, self.n_vocab), dtype=np.float32)
        for i in range(n):
            row = self.logits_ith(i)
            if row is None:
                raise LlamaCppError(f"no logits for output {i}")
            out[i] = row
        return out

    # -- memory -------------------------------------------------------------------------------

    @property
    def _mem(self) -> Any:
        return lc.llama_get_memory(self.ptr)

    def memory_clear(self, data: bool = True) -> None:
        lc.llama_memory_clear(self._mem, data)

    def seq_rm(self, seq_id: int, p0: int, p1: int) -> bool:
        return bool(lc.llama_memory_seq_rm(self._mem, seq_id, p0, p1))

    def seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None:
        lc.llama_memory_seq_cp(self._mem, src, dst, p0, p1)

    def seq_keep(self, seq_id: int) -> None:
        lc.llama_memory_seq_keep(self._mem, seq_id)

    def seq_add(self, seq_id: int, p0: int, p1: int, delta: int) -> None:
        lc.llama_memory_seq_add(self._mem, seq_id, p0, p1, delta)

    def seq_div(self, seq_id: int, p0: int, p1: int, d: int) -> None:
        lc.llama_memory_seq_div(self._mem, seq_id, p0, p1, d)

    def seq_pos_min(self, seq_id: int) -> int:
        return int(lc.llama_memory_seq_pos_min(self._mem, seq_id))

    def seq_pos_max(self, seq_id: int) -> int:
        return int(lc.llama_memory_seq_pos_max(self._mem, seq_id))
