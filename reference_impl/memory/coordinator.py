"""The memory side of ``decode`` (llama.cpp ``llama_context::decode`` / ``memory_update``).

:class:`MemoryCoordinator` drives any memory with the ``llama_memory_i`` shape (``init_batch``,
``init_update``, ``init_full``, ``seq_rm`` ...; see :mod:`reference_impl.memory.base`):

1. ``update(optimize)``: ask the memory for pending work; ``NO_UPDATE`` or a failure -> False,
   ``SUCCESS`` -> apply it and return True.
2. ``prepare_batch(splitter, n_ubatch, output_all)``: run ``update(False)`` (pending K-shift and
   stream copies first), then ``init_batch``. ``FAILED_PREPARE`` is retried exactly once, and
   only when ``update(True)`` reports that it changed something; the decode code follows
   :func:`~reference_impl.memory.status.init_batch_decode_code`.
3. ``ubatch_failed(ubatch, status)``: when computing a ubatch fails, remove from memory every
   sequence of that ubatch from its smallest position in the ubatch on (earlier ubatches of the
   batch stay), and return decode's code for the failure.

:func:`make_memory` builds a memory by kind: ``kv``, ``iswa``, ``recurrent`` or ``hybrid``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference_impl.batch.types import UBatch
from reference_impl.kv.cache import KShiftFn, KVCacheConfig
from reference_impl.memory import status as mstatus
from reference_impl.memory.base import MemoryContext
from reference_impl.memory.status import ComputeStatus, MemoryStatus
from reference_impl.spec_links import implements


@dataclass
class BatchPlan:
    """Outcome of :meth:`MemoryCoordinator.prepare_batch`."""

    code: int  # decode's return code so far: 0 (go on), 1 (no slot) or -2
    status: MemoryStatus  # status of the last init_batch
    context: MemoryContext | None  # the batch context when code == 0
    retried: bool  # init_batch ran a second time after an optimizing update
    updates: list[tuple[bool, bool]] = field(default_factory=list)  # (optimize, applied)


class MemoryCoordinator:
    def __init__(self, memory: Any) -> None:
        self.memory = memory

    @implements("DEC-035", "MEM-006")
    def update(self, optimize: bool) -> bool:
        """Apply pending memory work; True iff the memory reported some (status SUCCESS)."""
        ctx = self.memory.init_update(optimize)
        if ctx.get_status() != MemoryStatus.SUCCESS:
            return False  # NO_UPDATE, or a failure to prepare the update
        ctx.apply()
        return True

    @implements("DEC-024", "DEC-034", "MEM-010")
    def prepare_batch(self, splitter: Any, n_ubatch: int, output_all: bool = False) -> BatchPlan:
        updates = [(False, self.update(False))]
        n_failed = 0
        retried = False
        while True:
            ctx = self.memory.init_batch(splitter, n_ubatch, output_all)
            st = MemoryStatus(ctx.get_status())
            if st == MemoryStatus.FAILED_PREPARE:
                n_failed += 1
                if retry_after_optimize(n_failed):
                    applied = self.update(True)
                    updates.append((True, applied))
                    if applied:
                        retried = True
                        continue
            code = mstatus.init_batch_decode_code(st)
            return BatchPlan(
                code=code,
                status=st,
                context=ctx if code == mstatus.DECODE_OK else None,
                retried=retried,
                updates=updates,
            )

    @implements("DEC-028", "MEM-011")
    def rollback_ubatch(self, ubatch: UBatch) -> dict[int, int]:
        """Drop the failed ubatch's sequences from their first position in it; returns
        ``{seq_id: p0}`` for every ``seq_rm(seq_id, p0, -1)`` issued, in sequence order."""
        p_min = rollback_positions(ubatch)
        for s in sorted(p_min):
            self.memory.seq_rm(s, p_min[s], -1)
        return p_min

    def ubatch_failed(self, ubatch: UBatch, status: ComputeStatus) -> int:
        self.rollback_ubatch(ubatch)
        return mstatus.ubatch_failure_decode_code(status)


@implements("DEC-024", "MEM-010")
def retry_after_optimize(n_failed: int) -> bool:
    """Only the first failed prepare of a batch earns an optimizing update (and, if that
    update did something, a retry)."""
    return n_failed == 1


@implements("DEC-028", "MEM-011")
def rollback_positions(ubatch: UBatch) -> dict[int, int]:
    """Smallest position of each sequence in the ubatch, over *all* sequence ids of every token
    (spec decision MEM D1; llama.cpp looks only at each token's first sequence id)."""
    out: dict[int, int] = {}
    for i in range(ubatch.n_tokens):
        p = ubatch.pos_of(i)
        for s in ubatch.seq_ids_of(i):
            out[s] = min(out.get(s, p), p)
    return out


@implements("MEM-015")
def make_memory(kind: str, config: KVCacheConfig | None = None, **options: Any) -> Any:
    """A memory of ``kind``. ``config`` describes the attention cache (kv, iswa, hybrid);
    recurrent memories take ``n_seq_max`` and ``n_rs_seq``. ``k_shift_fn`` is passed through."""
    from reference_impl.memory.hybrid import HybridMemory
    from reference_impl.memory.kv import ISWAMemory, KVMemory
    from reference_impl.memory.recurrent import RecurrentMemory

    k_shift_fn: KShiftFn | None = options.pop("k_shift_fn", None)
    memory: Any
    if kind == "recurrent":
        memory = RecurrentMemory(options.pop("n_seq_max", 1), options.pop("n_rs_seq", 0))
    elif config is None:
        raise ValueError(f"a {kind!r} memory needs a KVCacheConfig")
    elif kind == "kv":
        memory = KVMemory(config, k_shift_fn)
    elif kind == "iswa":
        memory = ISWAMemory(
            config,
            n_ubatch=options.pop("n_ubatch", 512),
            swa_full=options.pop("swa_full", True),
            k_shift_fn=k_shift_fn,
        )
    elif kind == "hybrid":
        memory = HybridMemory(config, n_rs_seq=options.pop("n_rs_seq", 0), k_shift_fn=k_shift_fn)
    else:
        raise ValueError(f"unknown memory kind {kind!r}")
    if options:
        raise ValueError(f"unknown options for a {kind!r} memory: {', '.join(sorted(options))}")
    return memory
