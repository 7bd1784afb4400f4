"""Memory statuses (llama.cpp ``llama_memory_status``) and what ``decode`` returns for them.

The status of a memory context drives the decode flow:

* ``init_update`` -> ``NO_UPDATE`` (nothing pending) or ``SUCCESS`` (apply it);
* ``init_batch`` -> ``SUCCESS`` (ubatches placed), ``FAILED_PREPARE`` (no slot: retryable once
  after an optimizing update, then decode returns 1), ``NO_UPDATE`` / ``FAILED_COMPUTE``
  (unexpected: decode returns -2).

Composite memories (hybrid, iSWA) combine the statuses of their parts with
:func:`status_combine`.
"""

from __future__ import annotations

from enum import IntEnum

from reference_impl.spec_links import implements


@implements("MEM-001")
class MemoryStatus(IntEnum):
    SUCCESS = 0
    NO_UPDATE = 1
    FAILED_PREPARE = 2
    FAILED_COMPUTE = 3


class ComputeStatus(IntEnum):
    """Outcome of computing one ubatch (ggml's ``ggml_status`` values)."""

    ALLOC_FAILED = -2
    FAILED = -1
    SUCCESS = 0
    ABORTED = 1


# llama_decode return codes (llama.h)
DECODE_OK = 0
DECODE_NO_SLOT = 1  # no memory slot for the batch; memory unchanged
DECODE_ABORTED = 2  # aborted; ubatches already processed stay in memory
DECODE_INVALID = -1  # invalid batch
DECODE_FATAL = -2  # memory / allocation failure
DECODE_COMPUTE_FAILED = -3


@implements("MEM-001")
def status_is_fail(status: MemoryStatus) -> bool:
    return status in (MemoryStatus.FAILED_PREPARE, MemoryStatus.FAILED_COMPUTE)


@implements("MEM-002")
def status_combine(s0: MemoryStatus, s1: MemoryStatus) -> MemoryStatus:
    """A failure of the first part wins, then a failure of the second; otherwise SUCCESS when
    either part has an update, else NO_UPDATE."""
    if status_is_fail(s0):
        return s0
    if status_is_fail(s1):
        return s1
    if MemoryStatus.SUCCESS in (s0, s1):
        return MemoryStatus.SUCCESS
    return MemoryStatus.NO_UPDATE


@implements("DEC-023", "DEC-025", "MEM-003")
def init_batch_decode_code(status: MemoryStatus) -> int:
    """Decode's return code for the final ``init_batch`` status (after any retry)."""
    if status == MemoryStatus.SUCCESS:
        return DECODE_OK
    if status == MemoryStatus.FAILED_PREPARE:
        return DECODE_NO_SLOT
    return DECODE_FATAL  # NO_UPDATE is unexpected here, FAILED_COMPUTE is fatal


@implements("DEC-027", "MEM-003")
def ubatch_failure_decode_code(status: ComputeStatus) -> int:
    """Decode's return code when computing a ubatch fails (after the memory rollback)."""
    if status == ComputeStatus.ABORTED:
        return DECODE_ABORTED
    if status == ComputeStatus.ALLOC_FAILED:
        return DECODE_FATAL
    if status == ComputeStatus.FAILED:
        return DECODE_COMPUTE_FAILED
    raise ValueError("a successful ubatch has no failure code")
