"""Memory-coordinator mutants: the reference with one deliberate defect each (see tests/meta)."""

from __future__ import annotations

from typing import Any

from conformance.mutants import Mutant, replace


def _combine_second_first(target: Any) -> Any:
    from reference_impl.memory import status as st

    def combine(s0: Any, s1: Any) -> Any:
        if st.status_is_fail(s1):
            return s1
        if st.status_is_fail(s0):
            return s0
        return (
            st.MemoryStatus.SUCCESS
            if st.MemoryStatus.SUCCESS in (s0, s1)
            else st.MemoryStatus.NO_UPDATE
        )

    replace("reference_impl.memory.status", "status_combine", combine)
    replace("reference_impl.memory.kv", "status_combine", combine)
    return target


def _no_slot_is_fatal(target: Any) -> Any:
    from reference_impl.memory import status as st

    original = st.init_batch_decode_code

    def code(s: Any) -> int:
        return st.DECODE_FATAL if s == st.MemoryStatus.FAILED_PREPARE else original(s)

    replace("reference_impl.memory.status", "init_batch_decode_code", code)
    return target


def _retry_twice(target: Any) -> Any:
    replace("reference_impl.memory.coordinator", "retry_after_optimize", lambda n: n <= 2)
    return target


def _retry_without_update(target: Any) -> Any:
    """Retries init_batch after a failed prepare even when the optimizing update did nothing."""
    from reference_impl.memory.coordinator import MemoryCoordinator

    original = MemoryCoordinator.update

    def update(self: Any, optimize: bool) -> bool:
        applied = original(self, optimize)
        return True if optimize else applied

    MemoryCoordinator.update = update  # type: ignore[method-assign]
    return target


def _kv_update_always(target: Any) -> Any:
    from reference_impl.memory import kv
    from reference_impl.memory.status import MemoryStatus

    original = kv.KVUpdateContext.__init__

    def init(self: Any, cache: Any, k_shift_fn: Any) -> None:
        original(self, cache, k_shift_fn)
        self.status = MemoryStatus.SUCCESS

    kv.KVUpdateContext.__init__ = init  # type: ignore[method-assign]
    return target


def _rollback_first_seq(target: Any) -> Any:
    """llama.cpp's rule: only each token's first sequence id is rolled back."""

    def positions(ubatch: Any) -> dict[int, int]:
        out: dict[int, int] = {}
        for i in range(ubatch.n_tokens):
            s, p = int(ubatch.seq_id[i, 0]), ubatch.pos_of(i)
            out[s] = min(out.get(s, p), p)
        return out

    replace("reference_impl.memory.coordinator", "rollback_positions", positions)
    return target


def _update_ignores_status(target: Any) -> Any:
    from reference_impl.memory.coordinator import MemoryCoordinator

    def update(self: Any, optimize: bool) -> bool:
        ctx = self.memory.init_update(optimize)
        ctx.apply()
        return bool(ctx.get_status() == 0)

    MemoryCoordinator.update = update  # type: ignore[method-assign]
    return target


def _kv_uses_equal_split(target: Any) -> Any:
    from reference_impl.memory import base

    def plan_batch(kind: str, *args: Any, **kw: Any) -> Any:
        return base.plan_batch("recurrent" if kind == "kv" else kind, *args, **kw)

    replace("reference_impl.memory.kv", "plan_batch", plan_batch)
    return target


def _recurrent_partial_rm(target: Any) -> Any:
    from reference_impl.memory.recurrent import RecurrentMemory

    original = RecurrentMemory.seq_rm

    def seq_rm(self: Any, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        saved = self.n_rs_seq
        self.n_rs_seq = 1 << 20  # any rollback depth accepted
        try:
            return original(self, seq_id, p0, p1)
        finally:
            self.n_rs_seq = saved

    RecurrentMemory.seq_rm = seq_rm  # type: ignore[method-assign]
    return target


def _recurrent_clear_keeps_head(target: Any) -> Any:
    from reference_impl.memory.recurrent import RecurrentMemory

    original = RecurrentMemory.clear

    def clear(self: Any, data: bool = True) -> None:
        head = self.head
        original(self, data)
        self.head = head  # the defect: the next search starts where the old one stopped

    RecurrentMemory.clear = clear  # type: ignore[method-assign]
    return target


def _hybrid_attention_first(target: Any) -> Any:
    from reference_impl.memory.hybrid import HybridMemory

    def seq_rm(self: Any, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        if seq_id < self.mem_attn.n_seq_max or self.mem_attn.n_stream == 1:
            self.mem_attn.seq_rm(seq_id, p0, p1)
        return bool(self.mem_recr.seq_rm(seq_id, p0, p1))

    HybridMemory.seq_rm = seq_rm  # type: ignore[method-assign]
    return target


def _iswa_window_cache_one_window(target: Any) -> Any:
    from reference_impl.memory import kv

    original = kv.ISWAMemory.__init__

    def init(self: Any, config: Any, *, n_ubatch: int, swa_full: bool = True, **kw: Any) -> None:
        original(self, config, n_ubatch=n_ubatch, swa_full=swa_full, **kw)
        if not swa_full:
            size = -(-min(config.kv_size, config.n_swa + n_ubatch) // 256) * 256
            self.swa = kv.KVMemory(kv._replace(config, kv_size=size), kw.get("k_shift_fn"))

    kv.ISWAMemory.__init__ = init  # type: ignore[method-assign]
    return target


def _iswa_clear_keeps_base(target: Any) -> Any:
    from reference_impl.memory.kv import ISWAMemory

    def clear(self: Any, data: bool = True) -> None:
        self.swa.clear(data)  # the defect: the full-attention cache keeps its cells

    ISWAMemory.clear = clear  # type: ignore[method-assign]
    return target


def _abort_code_minus_three(target: Any) -> Any:
    import reference_impl.memory.status as mod

    original = mod.ubatch_failure_decode_code

    def ubatch_failure_decode_code(status: Any) -> int:
        if status == mod.ComputeStatus.ABORTED:
            return mod.DECODE_COMPUTE_FAILED  # an abort reported as a compute failure
        return int(original(status))

    # the coordinator reads it from its module; the decoder imported it by name
    for module in ("reference_impl.memory.status", "reference_impl.decoder.context"):
        replace(module, "ubatch_failure_decode_code", ubatch_failure_decode_code)
    return target


# -- black-box mutants: defects the decode-level tests (test_blackbox_*.py) catch ---------------


def _update_never_applied(target: Any) -> Any:
    """The coordinator's update never applies the memory's pending work."""
    from reference_impl.memory.coordinator import MemoryCoordinator

    MemoryCoordinator.update = lambda self, optimize: False  # type: ignore[method-assign]
    return target


def _shift_stays_pending(target: Any) -> Any:
    """Applying a K-shift leaves the shifts pending, so every later update rotates again."""
    from reference_impl.kv.cells import KVCells

    KVCells.reset_shift = lambda self: None  # type: ignore[method-assign]
    return target


def _batch_context_skips_first_ubatch(target: Any) -> Any:
    """A KV batch context of several ubatches starts at the second one."""
    from reference_impl.memory.kv import KVBatchContext

    original = KVBatchContext.__init__

    def __init__(self: KVBatchContext, cache: Any, sinfos: Any, ubatches: Any) -> None:
        original(self, cache, sinfos, ubatches)
        if len(ubatches) > 1:
            self.i_cur = 1

    KVBatchContext.__init__ = __init__  # type: ignore[method-assign]
    return target


def _final_no_slot_reported_as_no_update(target: Any) -> Any:
    """The coordinator reports a final FAILED_PREPARE as NO_UPDATE (decode then returns -2)."""
    import dataclasses

    from reference_impl.memory.coordinator import MemoryCoordinator
    from reference_impl.memory.status import MemoryStatus

    original = MemoryCoordinator.prepare_batch

    def prepare_batch(self: MemoryCoordinator, *args: Any, **kw: Any) -> Any:
        plan = original(self, *args, **kw)
        if plan.status == MemoryStatus.FAILED_PREPARE:
            return dataclasses.replace(plan, code=-2, status=MemoryStatus.NO_UPDATE)
        return plan

    MemoryCoordinator.prepare_batch = prepare_batch  # type: ignore[method-assign]
    return target


def _full_context_apply_clears(target: Any) -> Any:
    """Applying a KV memory's init_full() context empties the cache it describes."""
    from reference_impl.memory.kv import KVFullContext

    def apply(self: KVFullContext) -> bool:
        self.cache.clear()
        return True

    KVFullContext.apply = apply  # type: ignore[method-assign]
    return target


def _recurrent_cp_skips_cell_zero(target: Any) -> Any:
    """A recurrent seq_cp from a sequence whose state is in cell 0 leaves dst without state
    (the source test is ``tail > 0`` instead of ``tail >= 0``)."""
    from reference_impl.memory.recurrent import RecurrentMemory

    original = RecurrentMemory.seq_cp

    def seq_cp(
        self: RecurrentMemory, seq_id_src: int, seq_id_dst: int, p0: int = -1, p1: int = -1
    ) -> None:
        original(self, seq_id_src, seq_id_dst, p0, p1)
        src, dst = seq_id_src, seq_id_dst
        in_range = src != dst and 0 <= src < self.size and 0 <= dst < self.size
        if in_range and self.cells[src].tail == 0:
            self.cells[0].seq_id.discard(dst)
            self.cells[dst].tail = -1

    RecurrentMemory.seq_cp = seq_cp  # type: ignore[method-assign]
    return target


def _recurrent_rm_leaves_stale_cell(target: Any) -> Any:
    """A recurrent seq_rm that empties a cell keeps its position, source and used count (the
    cell looks free by its sequence set only)."""
    from reference_impl.memory.recurrent import RecurrentMemory, RSCell

    def free_if_empty(self: RecurrentMemory, c: RSCell) -> bool:
        return c.is_empty()

    RecurrentMemory._free_if_empty = free_if_empty  # type: ignore[method-assign]
    return target


def _recurrent_rm_keeps_freed_index(target: Any) -> Any:
    """A recurrent seq_rm that frees a sequence's state leaves the sequence's index pointing at
    the freed cell (llama.cpp clears it)."""
    from reference_impl.memory.recurrent import RecurrentMemory

    original = RecurrentMemory.seq_rm

    def seq_rm(self: RecurrentMemory, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        tail = self.cells[seq_id].tail if 0 <= seq_id < self.size else -1
        removed = original(self, seq_id, p0, p1)
        if tail >= 0 and self.cells[tail].is_empty():
            self.cells[seq_id].tail = tail
        return removed

    RecurrentMemory.seq_rm = seq_rm  # type: ignore[method-assign]
    return target


def _recurrent_rollback_stays_pending(target: Any) -> Any:
    """A recurrent ubatch never reads the rollback index, so a rollback stays pending until the
    whole sequence is removed (the reference before MEM-026)."""
    from reference_impl.memory.recurrent import RecurrentMemory

    RecurrentMemory.consume_rollbacks = lambda self: None  # type: ignore[method-assign]
    return target


def _recurrent_keep_leaves_shared(target: Any) -> Any:
    """A recurrent seq_keep(s) leaves the other sequences of the cell that holds s in it."""
    from reference_impl.memory.recurrent import RecurrentMemory

    original = RecurrentMemory.seq_keep

    def seq_keep(self: RecurrentMemory, seq_id: int) -> None:
        shared = [set(c.seq_id) if seq_id in c.seq_id else None for c in self.cells]
        original(self, seq_id)
        for c, kept in zip(self.cells, shared, strict=True):
            if kept is not None:
                c.seq_id = kept

    RecurrentMemory.seq_keep = seq_keep  # type: ignore[method-assign]
    return target


def _recurrent_search_never_restarts(target: Any) -> Any:
    """A recurrent slot search always starts at the head, never back at cell 0."""
    from reference_impl.memory.recurrent import RecurrentMemory

    original = RecurrentMemory.find_slot

    def find_slot(self: RecurrentMemory, ub: Any) -> bool:
        # An inflated used count fails the reset test; find_slot recounts it at the end.
        self.used += self.size
        return original(self, ub)

    RecurrentMemory.find_slot = find_slot  # type: ignore[method-assign]
    return target


def _recurrent_slot_for_any_sequence(target: Any) -> Any:
    """A recurrent ubatch naming a sequence id the memory has no cell for counts as placed."""
    from reference_impl.memory.recurrent import RecurrentMemory

    original = RecurrentMemory.find_slot

    def find_slot(self: RecurrentMemory, ub: Any) -> bool:
        ids = {s for i in range(ub.n_tokens) for s in ub.seq_ids_of(i)}
        if any(not 0 <= s < self.size for s in ids):
            return True
        return original(self, ub)

    RecurrentMemory.find_slot = find_slot  # type: ignore[method-assign]
    return target


def _iswa_can_shift_any_sizes(target: Any) -> Any:
    """An iSWA memory can shift whenever both caches can, whatever their sizes."""
    from reference_impl.memory.kv import ISWAMemory

    def get_can_shift(self: ISWAMemory) -> bool:
        return self.base.get_can_shift() and self.swa.get_can_shift()

    ISWAMemory.get_can_shift = get_can_shift  # type: ignore[method-assign]
    return target


def _recurrent_move_ignores_range(target: Any) -> Any:
    """A recurrent seq_add / seq_div moves the sequence's state whatever the range."""
    from reference_impl.memory.recurrent import RecurrentMemory

    add, div = RecurrentMemory.seq_add, RecurrentMemory.seq_div

    def seq_add(self: RecurrentMemory, seq_id: int, p0: int, p1: int, delta: int) -> None:
        add(self, seq_id, -1, -1, delta)

    def seq_div(self: RecurrentMemory, seq_id: int, p0: int, p1: int, d: int) -> None:
        div(self, seq_id, -1, -1, d)

    RecurrentMemory.seq_add = seq_add  # type: ignore[method-assign]
    RecurrentMemory.seq_div = seq_div  # type: ignore[method-assign]
    return target


def _no_update_apply_fails(target: Any) -> Any:
    """Applying a NO_UPDATE context (a recurrent memory's update) reports failure, so a
    hybrid memory's update context reports failure after applying its KV part."""
    from reference_impl.memory.base import NoUpdateContext

    NoUpdateContext.apply = lambda self: False  # type: ignore[method-assign]
    return target


MUTANTS = [
    Mutant(
        "mem-abort-code-minus-three",
        "memory",
        "an aborted ubatch makes decode return -3 instead of 2",
        kills=("MEM-003", "DEC-029"),
        apply=_abort_code_minus_three,
        black_box=True,
    ),
    Mutant(
        "mem-combine-second-first",
        "memory",
        "combining statuses reports the second part's failure before the first's",
        ("MEM-002",),
        _combine_second_first,
    ),
    Mutant(
        "mem-no-slot-fatal",
        "memory",
        "a final FAILED_PREPARE makes decode return -2 instead of 1",
        ("MEM-003", "MEM-010"),
        _no_slot_is_fatal,
    ),
    Mutant(
        "mem-retry-twice",
        "memory",
        "a failed prepare is retried after optimizing more than once",
        ("MEM-010",),
        _retry_twice,
    ),
    Mutant(
        "mem-retry-without-update",
        "memory",
        "a failed prepare is retried even when the optimizing update did nothing",
        ("MEM-010",),
        _retry_without_update,
    ),
    Mutant(
        "mem-kv-update-always",
        "memory",
        "a KV memory reports SUCCESS for init_update with nothing pending",
        ("MEM-004",),
        _kv_update_always,
    ),
    Mutant(
        "mem-rollback-first-seq",
        "memory",
        "the rollback of a failed ubatch looks only at each token's first sequence (llama.cpp)",
        ("MEM-011",),
        _rollback_first_seq,
        black_box=True,
    ),
    Mutant(
        "mem-update-ignores-status",
        "memory",
        "the coordinator applies an update context whatever its status",
        ("MEM-006",),
        _update_ignores_status,
    ),
    Mutant(
        "mem-kv-equal-split",
        "memory",
        "a single-stream KV memory splits with split_equal instead of split_simple",
        ("MEM-007",),
        _kv_uses_equal_split,
        black_box=True,
    ),
    Mutant(
        "mem-recurrent-clear-keeps-head",
        "memory",
        "clear() on a recurrent memory leaves its head where the last search stopped",
        ("MEM-017",),
        _recurrent_clear_keeps_head,
    ),
    Mutant(
        "mem-recurrent-partial-rm",
        "memory",
        "a recurrent memory accepts rolling back any number of positions",
        ("MEM-013",),
        _recurrent_partial_rm,
    ),
    Mutant(
        "mem-recurrent-rm-keeps-freed-index",
        "memory",
        "a recurrent seq_rm that frees a sequence's state leaves its index on the freed cell",
        ("MEM-013",),
        _recurrent_rm_keeps_freed_index,
    ),
    Mutant(
        "mem-recurrent-rollback-stays-pending",
        "memory",
        "a recurrent ubatch leaves the rollback of its sequences pending",
        ("MEM-026",),
        _recurrent_rollback_stays_pending,
    ),
    Mutant(
        "mem-hybrid-attention-first",
        "memory",
        "a hybrid memory removes from the attention cache even when the recurrent part refuses",
        ("MEM-014",),
        _hybrid_attention_first,
    ),
    Mutant(
        "mem-iswa-clear-keeps-base",
        "memory",
        "clear() on an iSWA memory empties the sliding-window cache only",
        ("MEM-016",),
        _iswa_clear_keeps_base,
    ),
    Mutant(
        "mem-update-never-applied",
        "memory",
        "the coordinator's update never applies pending memory work",
        ("MEM-006", "DEC-034"),
        _update_never_applied,
        black_box=True,
    ),
    Mutant(
        "mem-shift-stays-pending",
        "memory",
        "an applied K-shift stays pending, so every later update rotates the keys again",
        ("MEM-004",),
        _shift_stays_pending,
        black_box=True,
    ),
    Mutant(
        "mem-batch-skips-first-ubatch",
        "memory",
        "a KV batch context of several ubatches starts at the second one",
        ("MEM-009",),
        _batch_context_skips_first_ubatch,
        black_box=True,
    ),
    Mutant(
        "mem-no-slot-as-no-update",
        "memory",
        "a final FAILED_PREPARE is reported as NO_UPDATE, so decode returns -2 instead of 1",
        ("MEM-010",),
        _final_no_slot_reported_as_no_update,
        black_box=True,
    ),
    Mutant(
        "mem-iswa-window-cache-one-window",
        "memory",
        "a unified window cache without swa_full holds one window, not n_seq_max of them",
        ("MEM-015",),
        _iswa_window_cache_one_window,
        black_box=True,
    ),
    Mutant(
        "mem-full-apply-clears",
        "memory",
        "applying a KV memory's init_full() context empties the cache",
        ("MEM-018",),
        _full_context_apply_clears,
    ),
    Mutant(
        "mem-recurrent-cp-skips-cell-zero",
        "memory",
        "a recurrent seq_cp from a sequence whose state is in cell 0 leaves dst without state",
        ("MEM-019",),
        _recurrent_cp_skips_cell_zero,
    ),
    Mutant(
        "mem-recurrent-rm-leaves-stale-cell",
        "memory",
        "a recurrent seq_rm that empties a cell leaves its position, source and used count",
        ("MEM-020",),
        _recurrent_rm_leaves_stale_cell,
    ),
    Mutant(
        "mem-recurrent-keep-leaves-shared",
        "memory",
        "a recurrent seq_keep leaves the other sequences of the kept sequence's cell in it",
        ("MEM-021",),
        _recurrent_keep_leaves_shared,
    ),
    Mutant(
        "mem-recurrent-search-never-restarts",
        "memory",
        "a recurrent slot search never goes back to cell 0, however far the head is",
        ("MEM-022",),
        _recurrent_search_never_restarts,
    ),
    Mutant(
        "mem-recurrent-slot-for-any-sequence",
        "memory",
        "a recurrent ubatch naming a sequence id without a cell counts as placed",
        ("MEM-023",),
        _recurrent_slot_for_any_sequence,
    ),
    Mutant(
        "mem-iswa-can-shift-any-sizes",
        "memory",
        "an iSWA memory reports it can shift when its two caches differ in size",
        ("MEM-024",),
        _iswa_can_shift_any_sizes,
    ),
    Mutant(
        "mem-recurrent-move-ignores-range",
        "memory",
        "a recurrent seq_add / seq_div moves the sequence's state whatever the range",
        ("MEM-025",),
        _recurrent_move_ignores_range,
    ),
    Mutant(
        "mem-no-update-apply-fails",
        "memory",
        "applying a recurrent memory's NO_UPDATE context returns false (and so a hybrid update)",
        ("MEM-005",),
        _no_update_apply_fails,
    ),
]
