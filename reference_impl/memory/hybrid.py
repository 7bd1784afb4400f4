"""Hybrid memory: an attention KV cache plus recurrent states (llama.cpp
``llama_memory_hybrid``). Both parts see every operation; ``seq_rm`` asks the recurrent part
first because it is the one that can refuse, and then leaves the attention part alone."""

from __future__ import annotations

from reference_impl.batch.split import Splitter
from reference_impl.batch.types import UBatch
from reference_impl.kv.cache import KShiftFn, KVCacheConfig
from reference_impl.memory.base import MemoryContext, plan_batch
from reference_impl.memory.kv import KVBatchContext, KVMemory, PairContext
from reference_impl.memory.recurrent import RecurrentBatchContext, RecurrentMemory
from reference_impl.memory.status import MemoryStatus
from reference_impl.spec_links import implements


class HybridBatchContext(MemoryContext):
    def __init__(self, attn: KVBatchContext, recr: RecurrentBatchContext) -> None:
        super().__init__(MemoryStatus.SUCCESS, attn.ubatches)
        self.attn = attn
        self.recr = recr

    def next(self) -> bool:
        self.attn.next()
        self.recr.next()
        return super().next()

    def apply(self) -> bool:
        return self.attn.apply() & self.recr.apply()


class HybridMemory:
    kind = "hybrid"

    def __init__(
        self, attn: KVCacheConfig, *, n_rs_seq: int = 0, k_shift_fn: KShiftFn | None = None
    ) -> None:
        self.mem_attn = KVMemory(attn, k_shift_fn)
        self.mem_recr = RecurrentMemory(attn.n_seq_max, n_rs_seq)
        self.n_rs_seq = n_rs_seq

    def init_batch(
        self, splitter: Splitter, n_ubatch: int, embd_all: bool = False
    ) -> MemoryContext:
        def place(ubatches: list[UBatch]) -> MemoryContext | None:
            # The recurrent part first: it is the one that can refuse a split.
            if not self.mem_recr.prepare(ubatches):
                return None
            sinfos = self.mem_attn.prepare(ubatches)
            if sinfos is None:
                return None
            return HybridBatchContext(
                KVBatchContext(self.mem_attn, sinfos, ubatches),
                RecurrentBatchContext(self.mem_recr, ubatches),
            )

        return plan_batch(
            "hybrid",
            splitter,
            n_ubatch,
            place,
            unified=self.mem_attn.n_stream == 1,
            embd_all=embd_all,
            n_rs_seq=self.n_rs_seq,
        )

    @implements("MEM-005")
    def init_update(self, optimize: bool = False) -> MemoryContext:
        return PairContext(self.mem_attn.init_update(optimize), self.mem_recr.init_update(optimize))

    @implements("MEM-018")
    def init_full(self) -> MemoryContext:
        return PairContext(self.mem_attn.init_full(), self.mem_recr.init_full())

    @implements("MEM-024")
    def get_can_shift(self) -> bool:
        return self.mem_attn.get_can_shift()

    @implements("MEM-016")
    def clear(self, data: bool = True) -> None:
        self.mem_attn.clear(data)
        self.mem_recr.clear(data)

    @implements("MEM-014")
    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        if not self.mem_recr.seq_rm(seq_id, p0, p1):
            return False
        return self.mem_attn.seq_rm(seq_id, p0, p1)

    @implements("MEM-014")
    def seq_cp(self, seq_id_src: int, seq_id_dst: int, p0: int = -1, p1: int = -1) -> None:
        self.mem_attn.seq_cp(seq_id_src, seq_id_dst, p0, p1)
        self.mem_recr.seq_cp(seq_id_src, seq_id_dst, p0, p1)

    @implements("MEM-014")
    def seq_keep(self, seq_id: int) -> None:
        self.mem_attn.seq_keep(seq_id)
        self.mem_recr.seq_keep(seq_id)

    @implements("MEM-014")
    def seq_add(self, seq_id: int, p0: int, p1: int, delta: int) -> None:
        self.mem_attn.seq_add(seq_id, p0, p1, delta)
        self.mem_recr.seq_add(seq_id, p0, p1, delta)

    @implements("MEM-014")
    def seq_div(self, seq_id: int, p0: int, p1: int, d: int) -> None:
        self.mem_attn.seq_div(seq_id, p0, p1, d)
        self.mem_recr.seq_div(seq_id, p0, p1, d)

    @implements("MEM-014")
    def seq_pos_min(self, seq_id: int) -> int:
        # Both parts must still hold a position for it to be usable.
        return max(self.mem_attn.seq_pos_min(seq_id), self.mem_recr.seq_pos_min(seq_id))

    @implements("MEM-014")
    def seq_pos_max(self, seq_id: int) -> int:
        return min(self.mem_attn.seq_pos_max(seq_id), self.mem_recr.seq_pos_max(seq_id))
