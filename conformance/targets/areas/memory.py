"""Target protocol for the memory area (spec/memory.md).

Capabilities and what a target implements for each:

``memory.status`` -- pure functions over integer statuses (SUCCESS 0, NO_UPDATE 1,
FAILED_PREPARE 2, FAILED_COMPUTE 3; ubatch compute statuses ALLOC_FAILED -2, FAILED -1,
ABORTED 1): ``memory_status_combine(s0, s1)``, ``memory_status_is_fail(s)``,
``decode_code_for_init_batch(s)``, ``decode_code_for_ubatch_failure(compute_status)``.

``memory.kinds`` -- ``new_memory(kind, **config)`` for ``kind`` in ``kv``, ``iswa``,
``recurrent``, ``hybrid``. Config: the KV cache keys of ``kv.cache`` (``kv_size``, ``n_seq_max``,
``unified``, ``n_swa``, ``swa_type``) for the attention part, plus ``n_ubatch`` and
``swa_full`` (iswa) and ``n_rs_seq`` (recurrent, hybrid); a recurrent memory takes
``n_seq_max`` and ``n_rs_seq`` only. The memory has llama.cpp's ``llama_memory_i`` shape:
``seq_rm`` / ``seq_cp`` / ``seq_keep`` / ``seq_add`` / ``seq_div`` / ``seq_pos_min`` /
``seq_pos_max`` / ``clear``, ``init_batch(splitter, n_ubatch, embd_all) -> context``,
``init_update(optimize) -> context``, ``init_full() -> context``. A context has
``get_status()``, ``apply()``, ``next()``, ``get_ubatch()``, ``ubatches`` and, for a KV batch
or full context, ``n_kv``. ``kv`` and ``recurrent`` memories also have ``state()``, a snapshot
comparable with ``==`` (a ``kv`` memory is a ``kv.cache`` handle). Splitters come from the
batch area (``batch.sanitize`` + ``batch.split``).

``memory.coordinator`` -- ``new_memory_coordinator(memory) -> coordinator`` for *any* object with
the memory shape (the tests pass scripted memories): ``update(optimize) -> bool``,
``prepare_batch(splitter, n_ubatch, output_all=False)`` returning an object with ``code``,
``status``, ``context`` and ``retried``; ``rollback_ubatch(ubatch)`` and
``ubatch_failed(ubatch, compute_status) -> int``.
"""

from __future__ import annotations

from typing import Any

CAPABILITIES = {
    "memory.status": (
        "memory_status_combine",
        "memory_status_is_fail",
        "decode_code_for_init_batch",
        "decode_code_for_ubatch_failure",
    ),
    "memory.kinds": ("new_memory",),
    "memory.coordinator": ("new_memory_coordinator",),
}

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

    def new_memory_coordinator(self, memory: Any) -> Any:
        from reference_impl.memory import coordinator

        return coordinator.MemoryCoordinator(memory)
