"""Batch input, sanitizer (llama_batch_allocr::init) and splitter (split_simple/equal/seq).

The sanitizer function lives in :mod:`reference_impl.batch.sanitize` (``sanitize``); it is not
re-exported here so that the submodule name is not shadowed (mutants patch the module).
"""

from reference_impl.batch.sanitize import SanitizedBatch
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
    "split_all",
    "split_plan",
    "ubatch_reserve",
]
