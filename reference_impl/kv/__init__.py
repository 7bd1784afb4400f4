"""KV cache: per-stream cells, slots, apply/restore, sequence ops, sliding window, KQ mask,
K-shift bookkeeping and per-layer K/V tensors (llama.cpp ``llama_kv_cache``)."""

from reference_impl.kv.cache import (
    INT32_MAX,
    N_KV_PAD,
    KVCache,
    KVCacheConfig,
    KVState,
    SlotInfo,
    StreamState,
    UpdateResult,
)
from reference_impl.kv.cells import CellJournal, KVCells
from reference_impl.kv.mask import build_kq_mask
from reference_impl.kv.swa import SWAType, is_masked_swa

__all__ = [
    "INT32_MAX",
    "N_KV_PAD",
    "CellJournal",
    "KVCache",
    "KVCacheConfig",
    "KVCells",
    "KVState",
    "SWAType",
    "SlotInfo",
    "StreamState",
    "UpdateResult",
    "build_kq_mask",
    "is_masked_swa",
]
