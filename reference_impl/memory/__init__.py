"""Memories and the memory side of decode: statuses, contexts, the KV / iSWA / recurrent /
hybrid memories and the coordinator (update, init_batch with one-shot retry, rollback)."""

from reference_impl.memory.base import MemoryContext, plan_batch
from reference_impl.memory.coordinator import BatchPlan, MemoryCoordinator, make_memory
from reference_impl.memory.status import ComputeStatus, MemoryStatus, status_combine, status_is_fail

__all__ = [
    "BatchPlan",
    "ComputeStatus",
    "MemoryContext",
    "MemoryCoordinator",
    "MemoryStatus",
    "make_memory",
    "plan_batch",
    "status_combine",
    "status_is_fail",
]
