"""The cell table of one KV stream (llama.cpp's ``llama_kv_cells``).

A cell holds one token's K/V row. Per cell ``i``: ``pos[i]`` (-1 = empty), the set of sequences
that see it (a bit mask, bit ``s`` = sequence ``s``), the pending K-shift ``shift[i]`` and the
2-D M-RoPE extension ``(ext_x[i], ext_y[i])``. Aggregates kept in step with every change:

* the number of used cells and the index one past the last used cell (``used_max_p1``);
* per sequence, the multiset of its positions (a position may occur in several cells of one
  sequence, e.g. after ``seq_div`` or with repeated M-RoPE positions) and the set of its cells.

A used cell may briefly hold no sequence (between ``pos_set`` and ``seq_add``), exactly as in
llama.cpp. Every mutation goes through the methods below, which optionally record the
original state of each touched cell in a :class:`CellJournal` so that any sequence of changes
can be undone exactly (``prepare`` and ``restore`` rely on it).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from reference_impl.spec_links import implements

POS_NONE = -1


@implements("KV-001")
class PosMultiset:
    """Positions of one sequence with multiplicity; O(log n) add/remove, amortised min/max."""

    __slots__ = ("_counts", "_max_heap", "_min_heap")

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}
        self._min_heap: list[int] = []
        self._max_heap: list[int] = []  # negated positions

    def __len__(self) -> int:
        return len(self._counts)

    def add(self, p: int) -> None:
        c = self._counts.get(p, 0)
        self._counts[p] = c + 1
        if c == 0:
            heapq.heappush(self._min_heap, p)
            heapq.heappush(self._max_heap, -p)

    def remove(self, p: int) -> None:
        c = self._counts[p]
        if c == 1:
            del self._counts[p]
            # Stale heap entries are dropped lazily; compact when they dominate.
            if len(self._min_heap) > 2 * len(self._counts) + 32:
                self._min_heap = list(self._counts)
                heapq.heapify(self._min_heap)
                self._max_heap = [-q for q in self._counts]
                heapq.heapify(self._max_heap)
        else:
            self._counts[p] = c - 1

    def min(self) -> int:
        h = self._min_heap
        while h and h[0] not in self._counts:
            heapq.heappop(h)
        return h[0] if h else POS_NONE

    def max(self) -> int:
        h = self._max_heap
        while h and -h[0] not in self._counts:
            heapq.heappop(h)
        return -h[0] if h else POS_NONE


# One cell's full state: (pos, seq mask, ext_x, ext_y, shift).
CellState = tuple[int, int, int, int, int]


@implements("KV-010")
@dataclass
class CellJournal:
    """The original state of every cell touched since the journal was opened (first touch wins).

    Keys are ``(stream, cell)``; ``heads`` and ``has_shift`` hold the stream heads and shift
    flags at opening time. Replaying a journal with :meth:`KVCells.set_state` restores the
    cells bit for bit, whatever happened in between.
    """

    cells: dict[tuple[int, int], CellState] = field(default_factory=dict)
    heads: list[int] = field(default_factory=list)
    has_shift: list[bool] = field(default_factory=list)


class KVCells:
    """Cells of one stream. Mirrors ``llama_kv_cells``; see the module docstring."""

    def __init__(self, size: int, stream: int = 0) -> None:
        self.stream = stream
        self.pos = np.full(size, POS_NONE, dtype=np.int32)
        self.shift = np.zeros(size, dtype=np.int32)
        self.ext_x = np.zeros(size, dtype=np.int32)
        self.ext_y = np.zeros(size, dtype=np.int32)
        self.seq: list[int] = [0] * size
        self.has_shift = False
        self.journal: CellJournal | None = None
        self._seq_pos: dict[int, PosMultiset] = {}
        self._seq_cells: dict[int, set[int]] = {}
        self._n_used = 0
        self._used_max_p1 = 0

    # ------------------------------------------------------------------ queries

    def size(self) -> int:
        return int(self.pos.shape[0])

    @implements("KV-002")
    def get_used(self) -> int:
        return self._n_used

    @implements("KV-002")
    def used_max_p1(self) -> int:
        return self._used_max_p1

    def seq_count(self, i: int) -> int:
        return self.seq[i].bit_count()

    def seq_get(self, i: int) -> int:
        """The only sequence of a single-sequence cell."""
        m = self.seq[i]
        return m.bit_length() - 1

    @implements("KV-001")
    def seq_pos_min(self, s: int) -> int:
        ms = self._seq_pos.get(s)
        return ms.min() if ms else POS_NONE

    @implements("KV-001")
    def seq_pos_max(self, s: int) -> int:
        ms = self._seq_pos.get(s)
        return ms.max() if ms else POS_NONE

    def seq_cells(self, s: int) -> list[int]:
        """Cells holding sequence ``s``, ascending."""
        return sorted(self._seq_cells.get(s, ()))

    def cells_in(self, p0: int, p1: int) -> np.ndarray:
        """Indices of non-empty cells with ``p0 <= pos < p1`` (``p0 >= 0``), ascending."""
        return np.flatnonzero((self.pos >= p0) & (self.pos < p1))

    def used_cells(self) -> np.ndarray:
        return np.flatnonzero(self.pos != POS_NONE)

    def state_of(self, i: int) -> CellState:
        return (
            int(self.pos[i]),
            self.seq[i],
            int(self.ext_x[i]),
            int(self.ext_y[i]),
            int(self.shift[i]),
        )

    # ------------------------------------------------------------------ mutations

    def _touch(self, i: int) -> None:
        j = self.journal
        if j is not None and (self.stream, i) not in j.cells:
            j.cells[(self.stream, i)] = self.state_of(i)

    def _index_add(self, i: int, p: int, mask: int) -> None:
        for s in _bits(mask):
            ms = self._seq_pos.get(s)
            if ms is None:
                ms = self._seq_pos[s] = PosMultiset()
                self._seq_cells[s] = set()
            ms.add(p)
            self._seq_cells[s].add(i)

    def _index_remove(self, i: int, p: int, mask: int) -> None:
        for s in _bits(mask):
            ms = self._seq_pos[s]
            ms.remove(p)
            cells = self._seq_cells[s]
            cells.discard(i)
            if not cells:
                del self._seq_pos[s]
                del self._seq_cells[s]

    @implements("KV-002")
    def _mark_used(self, i: int) -> None:
        self._n_used += 1
        if i + 1 > self._used_max_p1:
            self._used_max_p1 = i + 1

    @implements("KV-002")
    def _mark_unused(self, i: int) -> None:
        self._n_used -= 1
        if i + 1 == self._used_max_p1:
            # Scan back (vectorised) only when the last used cell goes away.
            nz = np.flatnonzero(self.pos[:i] != POS_NONE)
            self._used_max_p1 = int(nz[-1]) + 1 if nz.size else 0

    def _empty(self, i: int) -> None:
        """Clear a non-empty cell completely (no index bookkeeping of its sequences)."""
        self.seq[i] = 0
        self.pos[i] = POS_NONE
        self.ext_x[i] = 0
        self.ext_y[i] = 0
        self.shift[i] = 0
        self._mark_unused(i)

    def rm(self, i: int) -> None:
        """Empty a non-empty cell, whatever sequences it holds."""
        self._touch(i)
        self._index_remove(i, int(self.pos[i]), self.seq[i])
        self._empty(i)

    def seq_rm(self, i: int, s: int) -> bool:
        """Remove ``s`` from a cell holding it; True when the cell became empty."""
        self._touch(i)
        bit = 1 << s
        self._index_remove(i, int(self.pos[i]), bit)
        self.seq[i] &= ~bit
        if self.seq[i] == 0:
            self._empty(i)
            return True
        return False

    @implements("KV-017")
    def seq_keep(self, i: int, s: int) -> bool:
        """Keep only ``s`` in the used cell ``i``; empty it when it lacks ``s``. True when
        emptied. Between operations a used cell always holds a sequence (apply rejects tokens
        without one), so llama.cpp's third case, a used cell without sequences, cannot occur."""
        m = self.seq[i]
        if (m >> s) & 1:
            if m != 1 << s:
                self._touch(i)
                self._index_remove(i, int(self.pos[i]), m & ~(1 << s))
                self.seq[i] = 1 << s
            return False
        self.rm(i)
        return True

    def seq_add(self, i: int, s: int) -> None:
        """Add ``s`` to a non-empty cell (no-op when already present)."""
        bit = 1 << s
        if self.seq[i] & bit:
            return
        self._touch(i)
        self.seq[i] |= bit
        self._index_add(i, int(self.pos[i]), bit)

    def pos_set(self, i: int, p: int) -> None:
        """Give an empty cell a position (no sequences yet); does not touch ``has_shift``."""
        self._touch(i)
        self.pos[i] = p
        self._mark_used(i)

    def ext_set(self, i: int, x: int, y: int) -> None:
        self._touch(i)
        self.ext_x[i] = x
        self.ext_y[i] = y

    @implements("KV-018", "KV-025")
    def pos_add(self, i: int, d: int) -> bool:
        """``pos += d`` and ``shift += d`` for every sequence of the cell; True when emptied."""
        self._touch(i)
        p_old = int(self.pos[i])
        m = self.seq[i]
        self._index_remove(i, p_old, m)
        p_new = p_old + d
        self.has_shift = True
        if p_new < 0:
            self._empty(i)
            return True
        self.pos[i] = p_new
        self.shift[i] += d
        self._index_add(i, p_new, m)
        return False

    @implements("DEC-054", "KV-019", "KV-025")
    def pos_div(self, i: int, d: int) -> None:
        """``pos //= d``; the pending shift accumulates ``new - old`` (see spec KV decision D1)."""
        self._touch(i)
        p_old = int(self.pos[i])
        m = self.seq[i]
        self._index_remove(i, p_old, m)
        p_new = p_old // d
        self.pos[i] = p_new
        self.shift[i] += shift_delta_div(p_old, p_new)
        self._index_add(i, p_new, m)
        self.has_shift = True

    @implements("KV-010")
    def set_state(self, i: int, state: CellState) -> None:
        """Overwrite cell ``i`` with a saved state, keeping every aggregate consistent."""
        self._touch(i)
        p_old = int(self.pos[i])
        if p_old != POS_NONE:
            self._index_remove(i, p_old, self.seq[i])
            self._mark_unused(i)
        p, m, x, y, sh = state
        self.pos[i] = p
        self.seq[i] = m
        self.ext_x[i] = x
        self.ext_y[i] = y
        self.shift[i] = sh
        if p != POS_NONE:
            self._mark_used(i)
            self._index_add(i, p, m)

    @implements("KV-025")
    def reset_shift(self) -> None:
        # Only update() resets shifts, never inside apply/prepare (the only journals).
        assert self.journal is None, "reset_shift under a journal would not be undone"
        self.shift[:] = 0
        self.has_shift = False

    def reset(self) -> None:
        if self.journal is not None:
            for i in self.used_cells():
                self._touch(int(i))
        self.pos[:] = POS_NONE
        self.shift[:] = 0
        self.ext_x[:] = 0
        self.ext_y[:] = 0
        self.seq = [0] * self.size()
        self.has_shift = False
        self._seq_pos.clear()
        self._seq_cells.clear()
        self._n_used = 0
        self._used_max_p1 = 0


@implements("DEC-054", "KV-025")
def shift_delta_div(p_old: int, p_new: int) -> int:
    """The K-shift that ``pos_div`` accumulates: the rotation still owed to the key, ``new - old``.

    llama.cpp accumulates ``old - new`` here (a sign flip relative to ``pos_add``); the
    reference keeps one convention, ``shift == pos - rotated position``, for both.
    """
    return p_new - p_old


def _bits(mask: int) -> tuple[int, ...]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return tuple(out)
