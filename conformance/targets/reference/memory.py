"""The memory area of the reference target: :mod:`conformance.protocol.memory` over ``reference_impl``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reference_impl.memory.coordinator import MemoryCoordinator


_KV_KEYS = ("kv_size", "n_seq_max", "unified", "n_swa", "swa_type", "n_pos_per_embd")


class Reference:
    def memory_status_combine(self, s0: int, s1: int) -> int:
        from reference_impl.memory import status

        return int(status.status_combine(status.MemoryStatus(s0), status.MemoryStatus(s1)))

    def memory_status_is_fail(self, s: int) -> bool:
        from reference_impl.memory import status

        return status.status_is_fail(status.MemoryStatus(s))

    def decode_code_for_init_batch(self, s: int) -> int:
        from reference_impl.memory import status

        return status.init_batch_decode_code(status.MemoryStatus(s))

    def decode_code_for_ubatch_failure(self, compute_status: int) -> int:
        from reference_impl.memory import status

        return status.ubatch_failure_decode_code(status.ComputeStatus(compute_status))

    def new_memory(self, kind: str, **config: Any) -> Any:
        from reference_impl.kv.cache import KVCacheConfig
        from reference_impl.memory import coordinator

        if kind == "recurrent":
            return coordinator.make_memory(kind, None, **config)
        kv = {k: config.pop(k) for k in _KV_KEYS if k in config}
        return coordinator.make_memory(kind, KVCacheConfig(**kv), **config)

    def new_memory_coordinator(self, memory: Any) -> MemoryCoordinator:
        from reference_impl.memory import coordinator

        return coordinator.MemoryCoordinator(memory)
