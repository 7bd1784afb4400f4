"""What every memory offers the decoder (llama.cpp ``llama_memory_i`` / ``llama_memory_context_i``)
and how ``init_batch`` turns a batch into ubatches.

A memory owns sequence state (KV cells, recurrent states) and answers three requests, each with
a *context* that carries a :class:`~reference_impl.memory.status.MemoryStatus`:

* ``init_batch(splitter, n_ubatch, embd_all)``: split the batch (the split depends on the memory
  kind: the batch area's ``split_plan`` / ``split_all``), plan where every ubatch goes
  (``prepare``, which changes nothing) and return a context whose ``apply()`` places the current
  ubatch and ``next()`` moves on;
* ``init_update(optimize)``: pending work (K-shift, stream copies) or ``NO_UPDATE``;
* ``init_full()``: a context describing the whole memory (worst-case graph reservation).

The splitter is the batch area's ``BatchSplitter`` (``split_reset``, ``split_simple``,
``split_equal``, ``split_seq``, ``n_tokens``, ``n_used``); any object with those names works.
Memory kinds: ``kv``, ``iswa``, ``recurrent``, ``hybrid`` (``split.MEMORY_KINDS``).
"""

from __future__ import annotations

from collections.abc import Callable

from reference_impl.batch import split
from reference_impl.batch.split import Splitter
from reference_impl.batch.types import UBatch
from reference_impl.memory.status import MemoryStatus
from reference_impl.spec_links import implements


@implements("MEM-007", "MEM-008", "SPL-023")
def plan_batch(
    kind: str,
    splitter: Splitter,
    n_ubatch: int,
    place: Callable[[list[UBatch]], MemoryContext | None],
    *,
    unified: bool,
    embd_all: bool,
    n_rs_seq: int = 0,
) -> MemoryContext:
    """The shared body of every ``init_batch``: split the batch as the memory kind requires
    (``split_plan``), place the ubatches (``place`` returns None when they do not fit), and fall
    back to the plan's alternative split (iSWA) before giving up with FAILED_PREPARE. A split
    that leaves tokens unplaced fails the same way."""
    plan: split.SplitPlan | None = split.split_plan(
        kind, unified=unified, embd_all=embd_all, n_rs_seq=n_rs_seq
    )
    while plan is not None:
        ubatches = split.split_all(splitter, plan, n_ubatch)
        if ubatches is not None:
            ctx = place(ubatches)
            if ctx is not None:
                return ctx
        plan = plan.fallback
    return FailedContext(MemoryStatus.FAILED_PREPARE)


@implements("MEM-009")
class MemoryContext:
    """A memory's answer to one request. ``status`` says whether ``apply`` may be used.

    Batch contexts walk their ubatches: ``get_ubatch()`` is the current one, ``apply()`` places
    it in the memory, ``next()`` advances and is False after the last.
    """

    def __init__(self, status: MemoryStatus, ubatches: list[UBatch] | None = None) -> None:
        self.status = status
        self.ubatches: list[UBatch] = ubatches or []
        self.i_cur = 0

    def get_status(self) -> MemoryStatus:
        return self.status

    def get_ubatch(self) -> UBatch:
        self._require_success()
        return self.ubatches[self.i_cur]

    def next(self) -> bool:
        self._require_success()
        self.i_cur += 1
        return self.i_cur < len(self.ubatches)

    def apply(self) -> bool:
        raise NotImplementedError

    def _require_success(self) -> None:
        if self.status != MemoryStatus.SUCCESS:
            raise RuntimeError(f"memory context with status {self.status.name} has no ubatches")


class FailedContext(MemoryContext):
    def __init__(self, status: MemoryStatus = MemoryStatus.FAILED_PREPARE) -> None:
        super().__init__(status)

    def apply(self) -> bool:
        raise RuntimeError(f"cannot apply a memory context with status {self.status.name}")


class NoUpdateContext(MemoryContext):
    def __init__(self) -> None:
        super().__init__(MemoryStatus.NO_UPDATE)

    @implements("MEM-005")
    def apply(self) -> bool:
        return True  # nothing to apply is not a failure: a hybrid ANDs this with its KV part
