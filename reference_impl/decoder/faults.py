"""Failures on demand, for tests: the decode flow's error paths that a healthy model and memory
never take.

A :class:`FaultInjector` given to a context (``Context(model, faults=FaultInjector())``) makes
three of its parts able to fail: the memory coordinator's prepare status, the output
reservation, and the compute step of the ubatch executor (status, expected and reported row
counts). Each part keeps its class; the injector shadows one method per part with a version
that fails when armed and otherwise calls the original. A context created without one
(production) has no fault checks anywhere in its flow.

One injector serves one context. The conformance targets expose it as ``inject_failure`` and
``inject_fault`` (``conformance/targets/areas/decoder.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from reference_impl.batch.types import UBatch
from reference_impl.decoder.outputs import OutputBuffers, OutputError
from reference_impl.decoder.ubatch_executor import UBatchExecutor, UBatchResult, failed
from reference_impl.memory import status as mstatus
from reference_impl.memory.coordinator import BatchPlan, MemoryCoordinator
from reference_impl.memory.status import ComputeStatus, MemoryStatus

# one-shot flow failures: kind -> what it breaks
KINDS = {
    "memory_no_update": "the batch's memory prepare reports NO_UPDATE",
    "memory_failed_compute": "the batch's memory prepare reports FAILED_COMPUTE",
    "output_reserve": "the next output reservation fails",
    "output_rows": "the next ubatch computed expects one row more than it extracts",
    "output_total": "the next ubatch computed reports one row fewer than it extracted, so the "
    "decode's total disagrees with the batch",
}

_MEMORY_FAULTS = (
    ("memory_no_update", MemoryStatus.NO_UPDATE),
    ("memory_failed_compute", MemoryStatus.FAILED_COMPUTE),
)


class FaultInjector:
    def __init__(self) -> None:
        self._armed: set[str] = set()  # one-shot flow failures (KINDS)
        self._failing: dict[int, ComputeStatus] = {}  # ubatch number -> injected status
        self._n_computed = 0  # ubatches computed so far (their numbers: 0, 1, ...)
        self._attached = False

    # -- what tests call ----------------------------------------------------------------------

    def fail_ubatch(self, ubatch: int, status: ComputeStatus) -> None:
        """Make the ``ubatch``-th ubatch computed from now on fail with ``status``."""
        if status not in (ComputeStatus.ALLOC_FAILED, ComputeStatus.FAILED):
            raise ValueError("inject ALLOC_FAILED or FAILED (use the abort callback for ABORTED)")
        self._failing[self._n_computed + ubatch] = ComputeStatus(status)

    def arm(self, kind: str) -> None:
        """Make the next decode hit one failure of the flow (one of :data:`KINDS`)."""
        if kind not in KINDS:
            raise ValueError(f"unknown fault {kind!r}; one of {', '.join(KINDS)}")
        self._armed.add(kind)

    # -- what the context calls once, at creation -----------------------------------------------

    def attach(
        self, coordinator: MemoryCoordinator, outputs: OutputBuffers, executor: UBatchExecutor
    ) -> None:
        """Route the failures through these parts of one context."""
        if self._attached:
            raise RuntimeError("a FaultInjector serves one context")
        self._attached = True
        _shadow(coordinator, "prepare_batch", self._prepare_batch)
        _shadow(outputs, "reserve", self._reserve)
        _shadow(executor, "compute", self._compute)

    # -- the shadowing methods ------------------------------------------------------------------

    def _take(self, kind: str) -> bool:
        if kind in self._armed:
            self._armed.discard(kind)
            return True
        return False

    def _prepare_batch(self, prepare_batch: Callable[..., BatchPlan]) -> Callable[..., BatchPlan]:
        def faulty(*args: Any, **kwargs: Any) -> BatchPlan:
            plan = prepare_batch(*args, **kwargs)
            for kind, status in _MEMORY_FAULTS:
                if self._take(kind):
                    code = mstatus.init_batch_decode_code(status)
                    plan = dataclasses.replace(plan, status=status, code=code, context=None)
            return plan

        return faulty

    def _reserve(self, reserve: Callable[[int], int]) -> Callable[[int], int]:
        def faulty(n_outputs: int) -> int:
            if self._take("output_reserve"):
                raise OutputError("OUT_CAPACITY", "injected output reservation failure")
            return reserve(n_outputs)

        return faulty

    def _compute(self, compute: Callable[..., UBatchResult]) -> Callable[..., UBatchResult]:
        def faulty(
            mctx: Any, ub: UBatch, row0: int, n_outputs: int, all_outputs: bool
        ) -> UBatchResult:
            k = self._n_computed
            self._n_computed += 1
            status = self._failing.pop(k, None)
            if status is not None:
                return failed(status, "injected failure")
            if self._take("output_rows"):
                n_outputs += 1
            result = compute(mctx, ub, row0, n_outputs, all_outputs)
            if result.status == ComputeStatus.SUCCESS and self._take("output_total"):
                result = dataclasses.replace(result, n_rows=result.n_rows - 1)
            return result

        return faulty


def _shadow(part: object, method: str, wrap: Callable[[Any], Any]) -> None:
    """Give ``part`` (this instance only) ``wrap(part.method)`` in place of its class's method."""
    setattr(part, method, wrap(getattr(part, method)))
