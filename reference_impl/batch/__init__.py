"""Batch input, sanitizer (llama_batch_allocr::init) and splitter (split_simple/equal/seq)."""

from reference_impl.batch.sanitize import SanitizedBatch, sanitize
from reference_impl.batch.split import (
    BatchSplitter,
    SplitPlan,
    split_all,
    split_plan,
    ubatch_reserve,
)
from reference_impl.batch.types import LLAMA_MAX_SEQ, Batch, MemoryView, UBatch

__all__ = [
    "LLAMA_MAX_SEQ",
    "Batch",
    "BatchSplitter",
    "MemoryView",
    "SanitizedBatch",
    "SplitPlan",
    "UBatch",
    "sanitize",
    "split_all",
    "split_plan",
    "ubatch_reserve",
]
