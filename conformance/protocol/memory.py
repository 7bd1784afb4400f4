"""Protocol of the memory area (spec/memory.md): memory statuses, the memory kinds behind
``llama_memory_i`` and the decoder's memory coordinator, for engines that expose them.

Statuses are integers: SUCCESS 0, NO_UPDATE 1, FAILED_PREPARE 2, FAILED_COMPUTE 3; ubatch compute
statuses ALLOC_FAILED -2, FAILED -1, ABORTED 1.
"""

from __future__ import annotations

from typing import Any, Protocol

from conformance.protocol import capability, optional, role
from conformance.protocol.kv import SequenceOps
from reference_impl.batch.types import UBatch


class Statuses(Protocol):
    def memory_status_combine(self, s0: int, s1: int) -> int: ...
    def memory_status_is_fail(self, s: int) -> bool: ...
    def decode_code_for_init_batch(self, s: int) -> int: ...
    def decode_code_for_ubatch_failure(self, compute_status: int) -> int: ...


@role("memory_context")
class MemoryContext(Protocol):
    """The result of ``init_batch`` / ``init_update`` / ``init_full`` (``n_kv`` for a KV
    batch or full context, read after ``apply``: before the first one its value is unspecified,
    and reading it may fail, as llama.cpp leaves it unset)."""

    @property
    def ubatches(self) -> list[UBatch]: ...
    @property
    def n_kv(self) -> int: ...

    def get_status(self) -> int: ...
    def apply(self) -> bool: ...
    def next(self) -> bool: ...
    def get_ubatch(self) -> UBatch: ...


@role("memory")
class Memory(SequenceOps, Protocol):
    """``llama_memory_i``: sequence operations and the three ways to start using it."""

    def init_batch(self, splitter: Any, n_ubatch: int, embd_all: bool) -> MemoryContext: ...
    def init_update(self, optimize: bool) -> MemoryContext: ...
    def init_full(self) -> MemoryContext: ...
    def get_can_shift(self) -> bool:
        """Whether positions may be shifted (``llama_memory_can_shift``)."""
        ...

    @optional
    def state(self) -> Any:
        """A snapshot comparable with ``==`` (``kv`` and ``recurrent`` memories only)."""
        ...


class Kinds(Protocol):
    def new_memory(self, kind: str, **config: Any) -> Memory:
        """``kind``: ``kv``, ``iswa``, ``recurrent``, ``hybrid``. Config: the ``kv.cache`` keys
        for the attention part, plus ``n_ubatch`` (iswa; default 512) and ``swa_full`` (iswa;
        default true) and ``n_rs_seq`` (recurrent, hybrid); a recurrent memory takes
        ``n_seq_max`` and ``n_rs_seq`` only."""
        ...


@role("coordinator")
class Coordinator(Protocol):
    def update(self, optimize: bool) -> bool: ...

    def prepare_batch(self, splitter: Any, n_ubatch: int, output_all: bool = False) -> Any:
        """A record with ``code``, ``status``, ``context`` and ``retried``."""
        ...

    def rollback_ubatch(self, ubatch: UBatch) -> Any: ...
    def ubatch_failed(self, ubatch: UBatch, status: Any) -> int:
        """``status``: the failed ubatch's ComputeStatus."""
        ...


class Coordination(Protocol):
    def new_memory_coordinator(self, memory: Any) -> Coordinator:
        """A coordinator over *any* object with the memory shape (tests pass scripted ones)."""
        ...


CAPABILITIES = (
    capability("memory.status", Statuses, "memory statuses and their decode codes"),
    capability("memory.kinds", Kinds, "kv, iSWA, recurrent and hybrid memories"),
    capability("memory.coordinator", Coordination, "update/optimize, retry and rollback"),
)
