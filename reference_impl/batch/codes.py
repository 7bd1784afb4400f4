"""Stable error codes of the batch sanitizer (SAN_*) and splitter (SPL_*).

Each code is documented in ``spec/batch.md`` / ``spec/batch.md`` next to the
invariant that raises it. Codes never change meaning once released.
"""

from __future__ import annotations

from reference_impl.errors import BatchError
from reference_impl.spec_links import implements

# sanitizer, in the order the checks run
SAN_EMPTY = "SAN_EMPTY"  # n_tokens == 0 (llama_decode returns -1 before the allocator runs)
SAN_N_SEQ_MAX = "SAN_N_SEQ_MAX"  # n_seq_max outside [1, LLAMA_MAX_SEQ]
SAN_PARAM = "SAN_PARAM"  # n_vocab < 0 or n_pos_per_embd outside [1, 4]
SAN_SHAPE = "SAN_SHAPE"  # a field with the wrong rank, length or dtype
SAN_TOKEN_RANGE = "SAN_TOKEN_RANGE"  # token id outside [0, n_vocab)
SAN_N_SEQ_ID = "SAN_N_SEQ_ID"  # n_seq_id[i] < 1, wider than the seq_id row, or given without seq_id
SAN_SEQ_ID_RANGE = "SAN_SEQ_ID_RANGE"  # seq id outside [0, n_seq_max)
SAN_POS_MEMORY = "SAN_POS_MEMORY"  # first batch position does not continue the memory
SAN_POS_GAP = "SAN_POS_GAP"  # positions of a sequence are not continuous
SAN_SEQ_DIVERGED = "SAN_SEQ_DIVERGED"  # coupled sequences differ in the memory
SAN_POS_DECREASING = "SAN_POS_DECREASING"  # positions of a sequence decrease in batch order

SAN_CODES = (
    SAN_EMPTY,
    SAN_N_SEQ_MAX,
    SAN_PARAM,
    SAN_SHAPE,
    SAN_TOKEN_RANGE,
    SAN_N_SEQ_ID,
    SAN_SEQ_ID_RANGE,
    SAN_POS_MEMORY,
    SAN_POS_GAP,
    SAN_SEQ_DIVERGED,
    SAN_POS_DECREASING,
)

# splitter
SPL_N_UBATCH = "SPL_N_UBATCH"  # n_ubatch < 1
SPL_KEEP_TAIL = "SPL_KEEP_TAIL"  # n_keep_tail < 0 or n_keep_tail >= n_ubatch
SPL_COUPLED_SEQUENTIAL = "SPL_COUPLED_SEQUENTIAL"  # sequential split_equal with coupled seqs
SPL_RESERVE = "SPL_RESERVE"  # ubatch_reserve with a non-positive size or n_seqs > LLAMA_MAX_SEQ
SPL_MEMORY_KIND = "SPL_MEMORY_KIND"  # split_plan for an unknown memory kind

SPL_CODES = (SPL_N_UBATCH, SPL_KEEP_TAIL, SPL_COUPLED_SEQUENTIAL, SPL_RESERVE, SPL_MEMORY_KIND)


@implements("SAN-026")
def fail(
    code: str,
    message: str,
    *,
    field: str | None = None,
    index: int | None = None,
    seq_id: int | None = None,
) -> BatchError:
    """Build (not raise) a BatchError; ``raise fail(...)`` keeps tracebacks at the rule."""
    return BatchError(code, message, field=field, index=index, seq_id=seq_id)
