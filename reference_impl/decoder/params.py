"""Context parameters and the values llama.cpp derives from them at context creation."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import torch

from reference_impl.batch.types import LLAMA_MAX_SEQ
from reference_impl.decoder.pooling import PoolingType
from reference_impl.errors import DecoderError
from reference_impl.spec_links import implements

N_CTX_PAD = 256  # llama.cpp pads n_ctx (and n_ctx_seq) to a multiple of 256


class AttentionType(IntEnum):
    UNSPECIFIED = -1
    CAUSAL = 0
    NON_CAUSAL = 1


@implements("DEC-009")
@dataclass(frozen=True)
class ContextParams:
    """What a caller asks for (llama_context_params). Defaults follow llama.cpp, except the K/V
    dtype: the reference keeps float32 K/V (llama.cpp defaults to F16) for exact comparisons."""

    n_ctx: int = 512
    n_batch: int = 2048
    n_ubatch: int = 512
    n_seq_max: int = 1
    n_outputs_max: int = 0
    embeddings: bool = False
    pooling: PoolingType = PoolingType.UNSPECIFIED
    attention_type: AttentionType = AttentionType.UNSPECIFIED
    kv_unified: bool = False
    swa_full: bool = True
    n_threads: int | None = None
    kv_dtype: torch.dtype = torch.float32
    attention_backend: str = "torch"  # "torch", or "triton" / "triton-1pass" / "triton-2pass"
    # one-token ubatches: "auto" runs the native C step when it can (see Context.native_reason),
    # "native" requires it, "torch" always runs the torch forward
    decode_path: str = "auto"
    n_outputs_max_per_seq: int = 1  # outputs per batch of a sequence that has a sampler
    graph_reuse: bool = True
    trace: bool = False


@dataclass(frozen=True)
class Derived:
    """The effective values (llama_context's cparams) the decode flow uses."""

    n_ctx: int
    n_ctx_seq: int
    n_batch: int
    n_ubatch: int
    n_seq_max: int
    n_outputs_max: int
    causal_attn: bool
    pooling: PoolingType
    embeddings: bool
    kv_unified: bool


@implements("DEC-002", "DEC-007")
def pad(x: int, n: int = N_CTX_PAD) -> int:
    return (x + n - 1) // n * n


@implements("DEC-001", "DEC-002", "DEC-003", "DEC-004", "DEC-005", "DEC-006", "DEC-007", "DEC-008")
def derive(
    p: ContextParams,
    *,
    n_ctx_train: int,
    model_causal: bool = True,
    model_pooling: PoolingType | None = None,
    has_encoder: bool = False,
) -> Derived:
    """llama_context's constructor arithmetic (DEC-001 .. DEC-008)."""
    if p.n_seq_max > LLAMA_MAX_SEQ:
        raise DecoderError(
            "DEC_N_SEQ_MAX",
            f"n_seq_max must be <= {LLAMA_MAX_SEQ}, got {p.n_seq_max}",
            field="n_seq_max",
        )
    for name in ("n_ctx", "n_batch", "n_ubatch", "n_outputs_max"):
        if getattr(p, name) < 0:
            raise DecoderError("DEC_PARAM", f"{name} must be >= 0", field=name)
    n_seq_max = max(1, p.n_seq_max)
    n_ctx_req = p.n_ctx if p.n_ctx else n_ctx_train
    if p.attention_type == AttentionType.UNSPECIFIED:
        causal = model_causal
    else:
        causal = p.attention_type == AttentionType.CAUSAL
    n_batch = min(n_ctx_req, p.n_batch) if causal else p.n_batch
    n_ubatch = min(n_batch, p.n_ubatch if p.n_ubatch else p.n_batch)
    if n_batch <= 0 or n_ubatch <= 0:
        raise DecoderError("DEC_PARAM", "n_batch and n_ubatch must be positive", field="n_batch")
    n_outputs_max = n_batch if (p.n_outputs_max == 0 or has_encoder) else p.n_outputs_max
    n_ctx = pad(n_ctx_req)
    if p.kv_unified:
        n_ctx_seq = n_ctx
    else:
        n_ctx_seq = pad(n_ctx // n_seq_max)
        if n_ctx_seq == 0:
            raise DecoderError("DEC_PARAM", "n_ctx_seq == 0", field="n_ctx")
        n_ctx = n_ctx_seq * n_seq_max
    pooling = p.pooling
    if pooling == PoolingType.UNSPECIFIED:
        pooling = model_pooling if model_pooling is not None else PoolingType.NONE
    return Derived(
        n_ctx=n_ctx,
        n_ctx_seq=n_ctx_seq,
        n_batch=n_batch,
        n_ubatch=n_ubatch,
        n_seq_max=n_seq_max,
        n_outputs_max=n_outputs_max,
        causal_attn=causal,
        pooling=pooling,
        embeddings=p.embeddings,
        kv_unified=p.kv_unified,
    )
