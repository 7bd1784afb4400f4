"""Batch input, sanitizer (llama_batch_allocr::init) and splitter (split_simple/equal/seq)."""

from reference_impl.batch.types import LLAMA_MAX_SEQ, Batch, MemoryView, UBatch

__all__ = ["LLAMA_MAX_SEQ", "Batch", "MemoryView", "UBatch"]
