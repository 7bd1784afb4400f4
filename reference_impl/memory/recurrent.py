"""Recurrent-state memory bookkeeping (llama.cpp ``llama_memory_recurrent``), without tensors.

A recurrent model keeps one state per sequence, not one cell per token. There are ``size =
max(1, n_seq_max)`` cells; cell ``i`` holds a state (``pos`` = position of the last token folded
into it, the set of sequences sharing it, ``src`` = the cell its state is copied from) and, as the
per-sequence index for sequence ``i``, ``tail`` = the cell holding sequence ``i``'s state.

Only whole-sequence removal is generally possible; ``seq_rm`` of a suffix succeeds only as a
rollback of at most ``n_rs_seq`` tokens through the per-token snapshots (single use until the
next ubatch consumes it). Positions move with ``seq_add`` / ``seq_div`` (no K-shift needed).
Invalid sequence ids make ``seq_rm`` return False and other ops do nothing, as in llama.cpp.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from reference_impl.batch.split import Splitter
from reference_impl.batch.types import UBatch
from reference_impl.errors import KVCacheError
from reference_impl.kv.cache import INT32_MAX
from reference_impl.memory.base import (
    FailedContext,
    MemoryContext,
    NoUpdateContext,
    plan_batch,
)
from reference_impl.memory.status import MemoryStatus
from reference_impl.spec_links import implements


@dataclass
class RSCell:
    pos: int = -1
    src: int = -1
    tail: int = -1
    seq_id: set[int] = field(default_factory=set)

    def is_empty(self) -> bool:
        return not self.seq_id


@dataclass(frozen=True)
class RSState:
    """A comparable snapshot (tests)."""

    cells: tuple[tuple[int, int, int, tuple[int, ...]], ...]  # (pos, src, tail, seqs)
    head: int
    used: int
    rs_idx: tuple[int, ...]


class RecurrentBatchContext(MemoryContext):
    def __init__(self, mem: RecurrentMemory, ubatches: list[UBatch]) -> None:
        super().__init__(MemoryStatus.SUCCESS, ubatches)
        self.mem = mem

    def apply(self) -> bool:
        self.mem.find_slot(self.get_ubatch())
        self.mem.consume_rollbacks()
        return True


class RecurrentFullContext(MemoryContext):
    """The whole-memory context (worst-case graph reservation). llama.cpp's keeps the memory and
    its cell count for graph building; without tensors nothing reads them, so it holds neither."""

    def __init__(self) -> None:
        super().__init__(MemoryStatus.SUCCESS)

    @implements("MEM-018")
    def apply(self) -> bool:
        return True


class RecurrentMemory:
    kind = "recurrent"

    @implements("MEM-012")
    def __init__(self, n_seq_max: int = 1, n_rs_seq: int = 0) -> None:
        self.n_seq_max = n_seq_max
        self.size = max(1, n_seq_max)
        self.n_rs_seq = n_rs_seq
        self.cells = [RSCell() for _ in range(self.size)]
        self.head = 0
        self.used = 0
        self.n = 0
        self.rs_idx = [0] * n_seq_max

    # ------------------------------------------------------------------ sequence ops

    @implements("MEM-016", "MEM-017")
    def clear(self, data: bool = True) -> None:
        for c in self.cells:
            c.pos, c.src, c.tail = -1, -1, -1
            c.seq_id.clear()
        self.head = 0
        self.used = 0
        self.rs_idx = [0] * self.n_seq_max

    @implements("MEM-020")
    def _free_if_empty(self, c: RSCell) -> bool:
        if c.is_empty():
            if c.pos >= 0:
                self.used -= 1
            c.pos = -1
            c.src = -1
            return True
        return False

    @implements("MEM-013", "MEM-022")
    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        p0 = 0 if p0 < 0 else p0
        p1 = INT32_MAX if p1 < 0 else p1
        # llama.cpp compares the id as unsigned, so -1 ("every sequence") is rejected too.
        if not 0 <= seq_id < self.n_seq_max:
            return False
        if p0 == 0 and p1 == INT32_MAX:
            self.rs_idx[seq_id] = 0
        tail_id = self.cells[seq_id].tail
        if tail_id >= 0:
            cell = self.cells[tail_id]
            # A suffix can only be dropped by rolling back through the snapshots.
            if 0 < p0 <= cell.pos < p1:
                rollback = cell.pos - (p0 - 1)
                if self.rs_idx[seq_id] == 0 and 1 <= rollback <= self.n_rs_seq:
                    self.rs_idx[seq_id] = rollback
                    cell.pos = p0 - 1
                    return True
                return False
            if p0 <= cell.pos < p1:
                self.cells[seq_id].tail = -1
        new_head = self.size
        for i, c in enumerate(self.cells):
            if not p0 <= c.pos < p1 or seq_id not in c.seq_id:
                continue
            c.seq_id.discard(seq_id)
            if self._free_if_empty(c) and new_head == self.size:
                new_head = i
        if new_head != self.size and new_head < self.head:
            self.head = new_head
        return True

    @implements("MEM-019")
    def seq_cp(self, seq_id_src: int, seq_id_dst: int, p0: int = -1, p1: int = -1) -> None:
        if seq_id_src == seq_id_dst:
            return
        if not (0 <= seq_id_dst < self.size and 0 <= seq_id_src < self.size):
            return
        tail_src = self.cells[seq_id_src]
        tail_dst = self.cells[seq_id_dst]
        if tail_dst.tail >= 0:
            cell_dst = self.cells[tail_dst.tail]
            cell_dst.seq_id.discard(seq_id_dst)
            tail_dst.tail = -1
            if cell_dst.is_empty():
                cell_dst.pos = -1
                cell_dst.src = -1
                self.used -= 1
        if tail_src.tail >= 0:
            self.cells[tail_src.tail].seq_id.add(seq_id_dst)
            tail_dst.tail = tail_src.tail

    @implements("MEM-021", "MEM-022")
    def seq_keep(self, seq_id: int) -> None:
        new_head = self.size
        for i, c in enumerate(self.cells):
            if i != seq_id:
                c.tail = -1
            if seq_id not in c.seq_id:
                if c.pos >= 0:
                    self.used -= 1
                c.pos = -1
                c.src = -1
                c.seq_id.clear()
                if new_head == self.size:
                    new_head = i
            else:
                c.seq_id = {seq_id}
        if new_head != self.size and new_head < self.head:
            self.head = new_head

    @implements("MEM-025")
    def _tail_cell(self, seq_id: int, p0: int, p1: int) -> RSCell | None:
        if not 0 <= seq_id < self.size:
            return None
        tail_id = self.cells[seq_id].tail
        if tail_id < 0:
            return None
        cell = self.cells[tail_id]
        return cell if seq_id in cell.seq_id and p0 <= cell.pos < p1 else None

    @implements("MEM-025")
    def seq_add(self, seq_id: int, p0: int, p1: int, delta: int) -> None:
        if delta == 0:
            return
        p0, p1 = (0 if p0 < 0 else p0), (INT32_MAX if p1 < 0 else p1)
        cell = self._tail_cell(seq_id, p0, p1) if p0 != p1 else None
        if cell is not None:
            cell.pos += delta

    @implements("MEM-025")
    def seq_div(self, seq_id: int, p0: int, p1: int, d: int) -> None:
        if d <= 0:
            raise KVCacheError("KV_DIVISOR", f"divisor must be positive, got {d}", field="d")
        if d == 1:
            return
        p0, p1 = (0 if p0 < 0 else p0), (INT32_MAX if p1 < 0 else p1)
        cell = self._tail_cell(seq_id, p0, p1) if p0 != p1 else None
        if cell is not None:
            cell.pos //= d

    def seq_pos_min(self, seq_id: int) -> int:
        ps = [c.pos for c in self.cells if seq_id in c.seq_id]
        return min(ps) if ps else -1

    def seq_pos_max(self, seq_id: int) -> int:
        ps = [c.pos for c in self.cells if seq_id in c.seq_id]
        return max(ps) if ps else -1

    @implements("MEM-024")
    def get_can_shift(self) -> bool:
        # Only positions move; a state has nothing to re-rotate.
        return True

    # ------------------------------------------------------------------ slots

    @implements("MEM-012", "MEM-022", "MEM-023")
    def find_slot(self, ub: UBatch) -> bool:
        """Give every sequence set of an equal-split ubatch its own state cell (mutates)."""
        n_seq_tokens, n_seqs = ub.n_seq_tokens, ub.n_seqs
        if self.head > self.used + 2 * n_seqs:
            self.head = 0
        cells = self.cells
        for s in range(n_seqs):
            i = s * n_seq_tokens
            for j, seq_id in enumerate(ub.seq_ids_of(i)):
                if not 0 <= seq_id < self.size:
                    return False
                if j > 0 and cells[seq_id].tail >= 0:
                    # A sequence that becomes shared loses its own state cell.
                    cell = cells[cells[seq_id].tail]
                    cell.seq_id.discard(seq_id)
                    cells[seq_id].tail = -1
                    if cell.is_empty():
                        cell.pos = -1
                        cell.src = -1
                        self.used -= 1
        next_empty = self.head
        for _ in range(self.size):
            if next_empty >= self.size:
                next_empty -= self.size
            if cells[next_empty].is_empty():
                break
            next_empty += 1
        lo, hi = self.size - 1, 0
        for s in range(n_seqs):
            seq_id = int(ub.seq_id[s * n_seq_tokens, 0])
            meta = cells[seq_id]
            has_cell = meta.tail >= 0 and len(cells[meta.tail].seq_id) == 1
            if not has_cell:
                empty = cells[next_empty]
                if meta.tail >= 0:
                    orig = cells[meta.tail]
                    empty.pos, empty.src = orig.pos, orig.src
                    orig.seq_id.discard(seq_id)
                    empty.seq_id.add(seq_id)
                meta.tail = next_empty
                if s + 1 < n_seqs:
                    for _ in range(self.size):
                        next_empty += 1
                        if next_empty >= self.size:
                            next_empty -= self.size
                        if cells[next_empty].is_empty():
                            break
            lo, hi = min(lo, meta.tail), max(hi, meta.tail)
        # Gather the states of this ubatch into cells lo .. lo + n_seqs - 1, in ubatch order.
        for s in range(n_seqs):
            dst_id = s + lo
            src_id = cells[int(ub.seq_id[s * n_seq_tokens, 0])].tail
            if dst_id != src_id:
                d, c = cells[dst_id], cells[src_id]
                d.pos, c.pos = c.pos, d.pos
                d.src, c.src = c.src, d.src
                d.seq_id, c.seq_id = c.seq_id, d.seq_id
                for cell in cells:
                    if cell.tail == src_id:
                        cell.tail = dst_id
                    elif cell.tail == dst_id:
                        cell.tail = src_id
        for s in range(n_seqs):
            i = s * n_seq_tokens
            cell = cells[s + lo]
            cell.pos = ub.pos_of(i + n_seq_tokens - 1)
            cell.seq_id = set(ub.seq_ids_of(i))
            for seq_id in cell.seq_id:
                cells[seq_id].tail = s + lo
        # llama.cpp also picks here the cell each state is copied from (src0, a zeroed one for a
        # new sequence) for the graph's state copy; the reference keeps no state tensors, so only
        # the source index that the cells record is kept.
        for i in range(lo, hi + 1):
            cells[i].src = i
        self.head = lo
        self.n = hi - lo + 1
        self.used = sum(1 for c in cells if not c.is_empty())
        return self.n >= n_seqs

    @implements("MEM-026")
    def consume_rollbacks(self) -> None:
        """The ubatch just placed reads each of its cells' snapshot once: llama.cpp's state-copy
        input takes the rollback index of the cell's lowest sequence id and clears it."""
        for cell in self.cells[self.head : self.head + self.n]:
            if cell.seq_id:
                self.rs_idx[min(cell.seq_id)] = 0

    def prepare(self, ubatches: list[UBatch]) -> bool:
        saved = (copy.deepcopy(self.cells), self.used, self.head)
        try:
            return all(self.find_slot(ub) for ub in ubatches)
        finally:
            self.cells, self.used, self.head = saved

    # ------------------------------------------------------------------ contexts

    def init_batch(
        self, splitter: Splitter, n_ubatch: int, embd_all: bool = False
    ) -> MemoryContext:
        def place(ubatches: list[UBatch]) -> MemoryContext | None:
            return RecurrentBatchContext(self, ubatches) if self.prepare(ubatches) else None

        return plan_batch(
            "recurrent",
            splitter,
            n_ubatch,
            place,
            unified=True,
            embd_all=embd_all,
            n_rs_seq=self.n_rs_seq,
        )

    @implements("MEM-005")
    def init_update(self, optimize: bool = False) -> MemoryContext:
        return NoUpdateContext()

    def init_full(self) -> MemoryContext:
        return RecurrentFullContext()

    def state(self) -> RSState:
        return RSState(
            cells=tuple((c.pos, c.src, c.tail, tuple(sorted(c.seq_id))) for c in self.cells),
            head=self.head,
            used=self.used,
            rs_idx=tuple(self.rs_idx),
        )


__all__ = ["FailedContext", "RSState", "RecurrentMemory"]
