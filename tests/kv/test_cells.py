"""Unit tests of the cell-table internals (reference_impl.kv.cells)."""

from __future__ import annotations

import random

from reference_impl.kv.cells import CellJournal, KVCells, PosMultiset


def _mask(seqs: list[int]) -> int:
    return sum(1 << s for s in set(seqs))


def _seqs(mask: int) -> tuple[int, ...]:
    return tuple(s for s in range(mask.bit_length()) if mask >> s & 1)


def test_pos_multiset_matches_a_counter() -> None:
    rng = random.Random(0)
    ms = PosMultiset()
    ref: dict[int, int] = {}
    for _ in range(5000):
        if ref and rng.random() < 0.45:
            p = rng.choice(list(ref))
            ms.remove(p)
            ref[p] -= 1
            if not ref[p]:
                del ref[p]
        else:
            p = rng.randrange(50)
            ms.add(p)
            ref[p] = ref.get(p, 0) + 1
        assert ms.min() == (min(ref) if ref else -1)
        assert ms.max() == (max(ref) if ref else -1)
        assert dict(ms._counts) == ref
    # stale heap entries are compacted away
    assert len(ms._min_heap) <= 2 * len(ms) + 33


def test_used_max_p1_follows_removals() -> None:
    c = KVCells(10)
    for i in (0, 3, 7):
        c.pos_set(i, i)
        c.seq_add(i, 0)
    assert (c.get_used(), c.used_max_p1()) == (3, 8)
    c.rm(7)
    assert c.used_max_p1() == 4
    c.seq_rm(3, 0)
    assert c.used_max_p1() == 1
    c.rm(0)
    assert (c.get_used(), c.used_max_p1()) == (0, 0)


def positions(c: KVCells, s: int) -> dict[int, int]:
    """The position multiset of sequence ``s`` (position -> cells), as the cells keep it."""
    ms = c._seq_pos.get(s)
    return dict(ms._counts) if ms else {}


def test_journal_restores_any_mix_of_changes() -> None:
    c = KVCells(6)
    for i in range(4):
        c.pos_set(i, i)
        c.seq_add(i, 0)
    c.seq_add(1, 2)
    before = [c.state_of(i) for i in range(6)], positions(c, 0), positions(c, 2)
    j = CellJournal()
    c.journal = j
    c.pos_add(0, -5)
    c.pos_div(2, 2)
    c.seq_keep(1, 2)
    c.pos_set(5, 9)
    c.seq_add(5, 1)
    c.reset()
    c.journal = None
    for (_, i), state in j.cells.items():
        c.set_state(i, state)
    assert ([c.state_of(i) for i in range(6)], positions(c, 0), positions(c, 2)) == before
    assert c.get_used() == 4 and c.used_max_p1() == 4
    assert c.seq_cells(2) == [1]


def test_bit_helpers() -> None:
    c = KVCells(2)
    c.pos_set(0, 5)
    for s in (255, 3, 0):
        c.seq_add(0, s)
    assert _seqs(c.seq[0]) == (0, 3, 255)
    assert c.seq[0] == _mask([0, 3, 255])
    assert c.seq_count(0) == 3
    c.seq_add(0, 3)  # already present: unchanged
    assert positions(c, 3) == {5: 1}
