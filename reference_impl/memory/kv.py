"""KV-cache memories: a single cache (``KVMemory``) and the interleaved sliding-window pair
(``ISWAMemory``: a full cache for the global-attention layers and a windowed one for the SWA
layers), with their contexts (llama.cpp ``llama_kv_cache_context`` / ``..._iswa_context``)."""

from __future__ import annotations

from collections.abc import Callable

from reference_impl.batch.split import Splitter
from reference_impl.batch.types import UBatch
from reference_impl.kv.cache import KShiftFn, KVCache, KVCacheConfig, SlotInfo, UpdateResult
from reference_impl.kv.cells import CellJournal
from reference_impl.kv.swa import SWAType
from reference_impl.memory.base import MemoryContext, plan_batch
from reference_impl.memory.status import MemoryStatus, status_combine
from reference_impl.spec_links import implements


class KVBatchContext(MemoryContext):
    """Ubatches with their planned slots; ``apply()`` writes the current one into the cache."""

    def __init__(self, cache: KVCache, sinfos: list[SlotInfo], ubatches: list[UBatch]) -> None:
        super().__init__(MemoryStatus.SUCCESS, ubatches)
        self.cache = cache
        self.sinfos = sinfos
        self.n_kv = 0
        self.undos: list[CellJournal] = []

    @property
    def sinfo(self) -> SlotInfo:
        return self.sinfos[self.i_cur]

    @implements("MEM-009")
    def apply(self) -> bool:
        self.undos.append(self.cache.apply_ubatch(self.sinfo, self.get_ubatch()))
        self.n_kv = self.cache.get_n_kv(self.sinfo)
        return True


@implements("MEM-004")
class KVUpdateContext(MemoryContext):
    """Pending stream copies and K-shift; ``apply()`` runs ``KVCache.update``."""

    def __init__(self, cache: KVCache, k_shift_fn: KShiftFn | None) -> None:
        pending = cache.get_has_shift() or bool(cache.pending_copies)
        super().__init__(MemoryStatus.SUCCESS if pending else MemoryStatus.NO_UPDATE)
        self.cache = cache
        self.k_shift_fn = k_shift_fn
        self.result: UpdateResult | None = None

    def apply(self) -> bool:
        if self.status == MemoryStatus.SUCCESS:
            self.result = self.cache.update(self.k_shift_fn)
        return True


class KVFullContext(MemoryContext):
    """The whole cache (worst-case reservation): ``n_kv = kv_size``, one dummy cell per stream."""

    def __init__(self, cache: KVCache) -> None:
        super().__init__(MemoryStatus.SUCCESS)
        self.cache = cache
        self.n_kv = cache.kv_size
        self.sinfos = [SlotInfo(tuple(range(cache.n_stream)), ((0,),) * cache.n_stream)]

    @implements("MEM-018")
    def apply(self) -> bool:
        return True


class KVMemory(KVCache):
    """A single KV cache as a memory (llama_kv_cache). ``k_shift_fn`` is the decoder's RoPE
    re-rotation, used when an update applies pending K-shifts."""

    kind = "kv"

    def __init__(self, config: KVCacheConfig, k_shift_fn: KShiftFn | None = None) -> None:
        super().__init__(config)
        self.k_shift_fn = k_shift_fn

    def init_batch(
        self, splitter: Splitter, n_ubatch: int, embd_all: bool = False
    ) -> MemoryContext:
        def place(ubatches: list[UBatch]) -> MemoryContext | None:
            sinfos = self.prepare(ubatches)
            return None if sinfos is None else KVBatchContext(self, sinfos, ubatches)

        return plan_batch(
            "kv", splitter, n_ubatch, place, unified=self.n_stream == 1, embd_all=embd_all
        )

    @implements("MEM-004")
    def init_update(self, optimize: bool = False) -> MemoryContext:
        # llama.cpp's KV cache has nothing to optimize (defragmentation was removed).
        return KVUpdateContext(self, self.k_shift_fn)

    def init_full(self) -> MemoryContext:
        return KVFullContext(self)


class ISWABatchContext(MemoryContext):
    def __init__(
        self,
        base: KVCache,
        swa: KVCache,
        sinfos_base: list[SlotInfo],
        sinfos_swa: list[SlotInfo],
        ubatches: list[UBatch],
    ) -> None:
        super().__init__(MemoryStatus.SUCCESS, ubatches)
        self.base = KVBatchContext(base, sinfos_base, ubatches)
        self.swa = KVBatchContext(swa, sinfos_swa, ubatches)

    def next(self) -> bool:
        self.base.next()
        self.swa.next()
        return super().next()

    def apply(self) -> bool:
        return self.base.apply() & self.swa.apply()


@implements("MEM-005")
class PairContext(MemoryContext):
    """Two contexts driven together; the status combines theirs (base first)."""

    def __init__(self, first: MemoryContext, second: MemoryContext) -> None:
        super().__init__(status_combine(first.status, second.status))
        self.first = first
        self.second = second

    @implements("MEM-005")
    def apply(self) -> bool:
        return self.first.apply() & self.second.apply()


@implements("MEM-015")
class ISWAMemory:
    """Interleaved SWA: every op goes to both caches; positions are reported by the SWA cache
    (the base cache holds a superset). The SWA cache has ``min(kv_size, n_swa * (n_seq_max if
    unified else 1) + n_ubatch)`` cells rounded up to 256, or ``kv_size`` when ``swa_full``."""

    kind = "iswa"

    def __init__(
        self,
        config: KVCacheConfig,
        *,
        n_ubatch: int,
        swa_full: bool = True,
        k_shift_fn: KShiftFn | None = None,
    ) -> None:
        base_cfg = _replace(config, n_swa=0, swa_type=SWAType.NONE)
        size_swa = config.kv_size
        if not swa_full:
            want = config.n_swa * (config.n_seq_max if config.unified else 1) + n_ubatch
            size_swa = -(-min(config.kv_size, want) // 256) * 256
        self.base = KVMemory(base_cfg, k_shift_fn)
        self.swa = KVMemory(_replace(config, kv_size=size_swa), k_shift_fn)
        self.n_stream = self.base.n_stream

    def init_batch(
        self, splitter: Splitter, n_ubatch: int, embd_all: bool = False
    ) -> MemoryContext:
        def place(ubatches: list[UBatch]) -> MemoryContext | None:
            sinfos_base = self.base.prepare(ubatches)
            if sinfos_base is None:
                return None
            sinfos_swa = self.swa.prepare(ubatches)
            if sinfos_swa is None:
                return None
            return ISWABatchContext(self.base, self.swa, sinfos_base, sinfos_swa, ubatches)

        return plan_batch(
            "iswa", splitter, n_ubatch, place, unified=self.n_stream == 1, embd_all=embd_all
        )

    @implements("MEM-005")
    def init_update(self, optimize: bool = False) -> MemoryContext:
        return PairContext(self.base.init_update(optimize), self.swa.init_update(optimize))

    def init_full(self) -> MemoryContext:
        return PairContext(self.base.init_full(), self.swa.init_full())

    @implements("MEM-024")
    def get_can_shift(self) -> bool:
        return (
            self.base.get_can_shift()
            and self.swa.get_can_shift()
            and self.base.get_size() == self.swa.get_size()
        )

    @implements("MEM-016")
    def clear(self, data: bool = True) -> None:
        self.base.clear(data)
        self.swa.clear(data)

    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        return self._both(lambda c: c.seq_rm(seq_id, p0, p1))

    def seq_cp(self, seq_id_src: int, seq_id_dst: int, p0: int = -1, p1: int = -1) -> None:
        self._both(lambda c: c.seq_cp(seq_id_src, seq_id_dst, p0, p1))

    def seq_keep(self, seq_id: int) -> None:
        self._both(lambda c: c.seq_keep(seq_id))

    def seq_add(self, seq_id: int, p0: int, p1: int, delta: int) -> None:
        self._both(lambda c: c.seq_add(seq_id, p0, p1, delta))

    def seq_div(self, seq_id: int, p0: int, p1: int, d: int) -> None:
        self._both(lambda c: c.seq_div(seq_id, p0, p1, d))

    def seq_pos_min(self, seq_id: int) -> int:
        return self.swa.seq_pos_min(seq_id)

    def seq_pos_max(self, seq_id: int) -> int:
        return self.swa.seq_pos_max(seq_id)

    def _both(self, op: Callable[[KVCache], object]) -> bool:
        # Both caches validate identically, so a bad argument fails on the base cache before
        # either is modified.
        r0 = op(self.base)
        r1 = op(self.swa)
        return bool(r0) & bool(r1) if isinstance(r0, bool) else True


def _replace(config: KVCacheConfig, **changes: object) -> KVCacheConfig:
    from dataclasses import replace

    return replace(config, **changes)  # type: ignore[arg-type]
