"""Slots: ring-order search, contiguous search, multi-stream groups, prepare/apply/restore,
and the typed errors for ubatches and slots that do not match the cache."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from conformance.kv.helpers import (
    cells,
    expect_code,
    exts,
    place,
    place_run,
    stream,
    unchanged_cache,
)
from conformance.strategies.kv import grouped, run_of, ubatch_from_lists

E = (-1, ())


@pytest.mark.invariant("KV-005")
@pytest.mark.requires("kv.cache")
def test_find_slot_ring_order_from_head(target: Any) -> None:
    c = target.new_kv_cache(kv_size=8, n_seq_max=2, unified=True)
    place_run(c, 0, 0, 6)
    c.seq_rm(0, 1, 2)  # hole at cell 1, head -> 1
    place_run(c, 1, 0, 1)  # takes the hole; head -> 2
    assert stream(c).head == 2
    slot = c.find_slot(run_of(1, 1, 2))
    assert slot is not None and list(slot.idxs[0]) == [6, 7]
    assert c.find_slot(run_of(1, 1, 3)) is None  # only 2 free cells
    assert c.find_slot(run_of(1, 1, 9)) is None  # more than kv_size


@pytest.mark.invariant("KV-005")
@pytest.mark.requires("kv.cache")
def test_find_slot_in_a_one_cell_cache(target: Any) -> None:
    """The smallest cache: one token fits, two (n > kv_size) do not."""
    c = target.new_kv_cache(kv_size=1)
    slot = c.find_slot(run_of(0, 0, 1))
    assert slot is not None and list(slot.idxs[0]) == [0]
    assert c.find_slot(run_of(0, 0, 2)) is None
    place_run(c, 0, 0, 1)
    assert cells(c) == [(0, (0,))]


@pytest.mark.invariant("KV-005", "KV-018")
@pytest.mark.requires("kv.cache")
def test_head_heuristic(target: Any) -> None:
    """The search starts at 0 when head > used + 2 * n_tokens, else at the head (also when
    head == used + 2 * n_tokens exactly)."""
    c = target.new_kv_cache(kv_size=16, n_seq_max=2, unified=True)
    toks = [(p, [1]) for p in range(8)] + [(0, [0]), (1, [0]), (10, [0]), (11, [0])]
    place(c, ubatch_from_lists([p for p, _ in toks], [s for _, s in toks]))  # cells 0..11
    c.seq_rm(1, -1, -1)  # frees cells 0..7: head 0
    c.seq_add(0, 0, 2, -5)  # empties cells 8, 9: head 8 (the first emptied cell)
    assert stream(c).head == 8 and stream(c).used == 2
    assert list(c.find_slot(run_of(0, 12, 1)).idxs[0]) == [0]  # 8 > 2 + 2
    assert list(c.find_slot(run_of(0, 12, 2)).idxs[0]) == [0, 1]  # 8 > 2 + 4
    assert list(c.find_slot(run_of(0, 12, 3)).idxs[0]) == [8, 9, 12]  # 8 == 2 + 6: from the head
    assert list(c.find_slot(run_of(0, 12, 4)).idxs[0]) == [8, 9, 12, 13]  # 8 < 2 + 8


@pytest.mark.invariant("KV-007", "KV-005")
@pytest.mark.requires("kv.cache")
def test_find_slot_contiguous_wraps_from_a_head_at_the_end(target: Any) -> None:
    """A full cache (head 8 = kv_size) whose window frees cells 1..4: the first window passes the
    end and restarts at 0, and the cells skipped from the head to the end count as tested (none
    here), so after cell 0 (two sequences: not usable) fails, window 1..3 is still tried.
    With cell 0 usable as well, the restarted window starting at cell 0 is the one found."""
    c = target.new_kv_cache(kv_size=8, n_seq_max=2, unified=True, n_swa=4, swa_type=1)
    place(c, ubatch_from_lists(list(range(8)), [[0, 1]] + [[0]] * 7))  # cells 0..7, head 8
    assert stream(c).head == 8
    # query position 8: positions <= 4 are past the window of 4, cells 1..4 are usable
    assert list(c.find_slot(run_of(0, 8, 3), True).idxs[0]) == [1, 2, 3]
    assert list(c.find_slot(run_of(0, 8, 4), True).idxs[0]) == [1, 2, 3, 4]
    assert c.find_slot(run_of(0, 8, 5), True) is None
    d = target.new_kv_cache(kv_size=8, n_swa=4, swa_type=1)
    place_run(d, 0, 0, 8)  # one sequence: cells 0..4 are usable for position 8, head 8
    assert stream(d).head == 8
    assert list(d.find_slot(run_of(0, 8, 3), True).idxs[0]) == [0, 1, 2]
    assert list(d.find_slot(run_of(0, 8, 5), True).idxs[0]) == [0, 1, 2, 3, 4]
    assert d.find_slot(run_of(0, 8, 6), True) is None


@pytest.mark.invariant("KV-007")
@pytest.mark.requires("kv.cache")
def test_find_slot_contiguous(target: Any) -> None:
    c = target.new_kv_cache(kv_size=10)
    place_tokens = [0, 1, 2, 3, 4, 5, 6, 7]
    place(c, ubatch_from_lists(place_tokens, [[0]] * 8))  # cells 0..7, head 8
    c.seq_rm(0, 1, 2)  # hole at 1
    c.seq_rm(0, 3, 6)  # holes at 3, 4, 5; head -> 1
    assert stream(c).head == 1
    ub3 = run_of(0, 8, 3)
    assert list(c.find_slot(ub3).idxs[0]) == [1, 3, 4]  # non-contiguous: first three usable
    assert list(c.find_slot(ub3, True).idxs[0]) == [3, 4, 5]
    ub2 = run_of(0, 8, 2)
    assert list(c.find_slot(ub2, True).idxs[0]) == [3, 4]
    ub4 = run_of(0, 8, 4)
    assert c.find_slot(ub4, True) is None  # 1, 3-5, 8-9: no run of four
    c.seq_rm(0, 0, 1)  # frees cell 0, head -> 0: the run 0, 1 comes first
    assert list(c.find_slot(run_of(0, 8, 2), True).idxs[0]) == [0, 1]
    assert cells(c)[2] == (2, (0,))
    # A window ending exactly at the last cell does not pass the end: it is taken.
    e = target.new_kv_cache(kv_size=8)
    place_run(e, 0, 0, 6)  # cells 0..5, head 6
    assert list(e.find_slot(run_of(0, 6, 2), True).idxs[0]) == [6, 7]


@pytest.mark.invariant("KV-006", "KV-004")
@pytest.mark.requires("kv.cache")
def test_multi_stream_slot_groups(target: Any) -> None:
    c = target.new_kv_cache(kv_size=6, n_seq_max=3)
    place_run(c, 1, 0, 2)
    ub = grouped([(0, 0, 2), (1, 2, 2), (2, 0, 2)])
    slot = c.find_slot(ub)
    assert list(slot.strm) == [0, 1, 2]
    assert [list(ix) for ix in slot.idxs] == [[0, 1], [2, 3], [0, 1]]
    place(c, ub)
    assert [stream(c, s).head for s in range(3)] == [2, 4, 2]
    assert cells(c, 1)[:4] == [(0, (1,)), (1, (1,)), (2, (1,)), (3, (1,))]
    assert all(seqs in ((), (t,)) for t in range(3) for _, seqs in cells(c, t))


@pytest.mark.invariant("KV-004", "KV-012")
@pytest.mark.requires("kv.cache")
def test_bad_ubatch_layouts(target: Any) -> None:
    c = target.new_kv_cache(kv_size=6, n_seq_max=2)
    place_run(c, 0, 0, 2)
    # not sequence-major
    interleaved = ubatch_from_lists([2, 0, 3, 1], [[0], [1], [0], [1]], n_groups=2)
    expect_code(c, "KV_UBATCH_LAYOUT", c.find_slot, interleaved, field="seq_id", index=1, seq_id=0)
    expect_code(c, "KV_UBATCH_LAYOUT", c.prepare, [run_of(0, 2, 1), interleaved])
    # only the last token is out of place: it is the one named, with the sequence it should be in
    stray = ubatch_from_lists([2, 3, 0, 1], [[0], [0], [1], [0]], n_groups=2)
    expect_code(c, "KV_UBATCH_LAYOUT", c.find_slot, stray, field="seq_id", index=3, seq_id=1)
    # a token in two sequences that live in different streams
    coupled = ubatch_from_lists([2], [[0, 1]])
    expect_code(c, "KV_UBATCH_LAYOUT", c.find_slot, coupled)
    # unequal groups
    uneven = ubatch_from_lists([2, 3, 0], [[0], [0], [1]], n_groups=2)
    expect_code(c, "KV_UBATCH_LAYOUT", c.find_slot, uneven, field="n_seqs_unq")
    # no stream group at all: the count names the field, it is not divided by
    groupless = replace(run_of(0, 2, 2), n_seqs_unq=0)
    expect_code(c, "KV_UBATCH_LAYOUT", c.find_slot, groupless, field="n_seqs_unq")
    expect_code(c, "KV_SEQ_ID_RANGE", c.find_slot, run_of(2, 0, 1))
    expect_code(c, "KV_POS_RANGE", c.find_slot, ubatch_from_lists([-3], [[0]]))
    # the error names the first bad token, wherever it is
    orphan = ubatch_from_lists([2, 3, 4], [[0], [], [0]])
    expect_code(c, "KV_UBATCH_LAYOUT", c.find_slot, orphan, field="n_seq_id", index=1)
    far = ubatch_from_lists([2, 3, 4], [[0], [0], [5]])
    expect_code(c, "KV_SEQ_ID_RANGE", c.find_slot, far, field="seq_id", index=2, seq_id=5)
    late = ubatch_from_lists([2, 3, -1], [[0], [0], [0]])
    expect_code(c, "KV_POS_RANGE", c.find_slot, late, field="pos", index=2)
    expect_code(c, "KV_UBATCH_EMPTY", c.find_slot, ubatch_from_lists([], []))


@pytest.mark.invariant("KV-004", "KV-012")
@pytest.mark.requires("kv.cache")
def test_bad_slots(target: Any) -> None:
    c = target.new_kv_cache(kv_size=6, n_seq_max=2)
    place_run(c, 0, 0, 2)
    ub0 = run_of(0, 2, 2)
    good = c.find_slot(ub0)
    other = c.find_slot(run_of(1, 0, 2))
    assert list(good.strm) == [0] and list(other.strm) == [1]
    expect_code(c, "KV_STREAM_MISMATCH", c.apply_ubatch, other, ub0)
    expect_code(c, "KV_SLOT_MISMATCH", c.apply_ubatch, good, run_of(0, 2, 3))
    bad = type(good)(strm=(0,), idxs=((2, 2),))
    expect_code(c, "KV_SLOT_MISMATCH", c.apply_ubatch, bad, ub0)
    bad = type(good)(strm=(0,), idxs=((5, 6),))
    expect_code(c, "KV_SLOT_MISMATCH", c.apply_ubatch, bad, ub0)
    # a negative cell is out of range too, even next to a valid one (no wrap to the last cell)
    bad = type(good)(strm=(0,), idxs=((-1, 2),))
    expect_code(c, "KV_SLOT_MISMATCH", c.apply_ubatch, bad, ub0)
    bad = type(good)(strm=(4,), idxs=((2, 3),))
    expect_code(c, "KV_STREAM_RANGE", c.apply_ubatch, bad, ub0)
    u = target.new_kv_cache(kv_size=6, n_seq_max=2, unified=True)
    place(u, ubatch_from_lists([0], [[0, 1]]))
    # The error's index is the slot position of the shared cell (here the second slot cell).
    shared = type(good)(strm=(0,), idxs=((1, 0),))
    expect_code(u, "KV_SLOT_MISMATCH", u.apply_ubatch, shared, run_of(0, 1, 2), index=1)


@pytest.mark.invariant("KV-009", "KV-010")
@pytest.mark.requires("kv.cache")
def test_apply_then_restore(target: Any) -> None:
    c = target.new_kv_cache(kv_size=8, n_seq_max=2, unified=True, n_swa=2, swa_type=1)
    place_run(c, 0, 0, 4)
    ubs = [run_of(0, 4, 3), ubatch_from_lists([7, 8], [[0], [0, 1]])]
    with unchanged_cache(c, "the cache after apply and restore"):
        slots = c.prepare(ubs)
        assert slots is not None
        undos = [c.apply_ubatch(s, u) for s, u in zip(slots, ubs)]
        after = cells(c)
        assert after[4:7] == [(4, (0,)), (5, (0,)), (6, (0,))]
        assert after[7] == (7, (0,)) and after[0] == (8, (0, 1))  # cell 0 reused (out of window)
        assert stream(c).head == list(slots[1].idxs[0])[-1] + 1
        for u in reversed(undos):
            c.restore(u)


@pytest.mark.invariant("KV-010")
@pytest.mark.requires("kv.cache")
def test_restore_puts_back_the_shift_flag(target: Any) -> None:
    """A shift of only the cells a ubatch wrote, then the restore: the cache is as before the
    apply, with no pending shift left (the flag comes from the undo record)."""
    c = target.new_kv_cache(kv_size=4)
    with unchanged_cache(c, "the cache after apply, shift and restore"):
        ub = run_of(0, 0, 2)
        undo = c.apply_ubatch(c.find_slot(ub), ub)
        c.seq_add(0, 0, -1, 3)
        assert stream(c).has_shift
        c.restore(undo)


@pytest.mark.invariant("KV-009")
@pytest.mark.requires("kv.cache")
@pytest.mark.parametrize("n_pos", [3, 4])
def test_apply_writes_2d_extension(target: Any, n_pos: int) -> None:
    """Positions are 2-D from 3 sections on (llama_ubatch::is_pos_2d): x is section 2 and y
    section 1 whatever the section count (with 3 sections, section 2 is the last one)."""
    c = target.new_kv_cache(kv_size=4, n_pos_per_embd=n_pos)
    ub = ubatch_from_lists([[5, 5], [1, 2], [3, 4], [0, 0]][:n_pos], [[0], [0]])
    place(c, ub)
    s = stream(c)
    assert s.pos[:2] == (5, 5)
    assert [tuple(e) for e in s.ext[:2]] == [(3, 1), (4, 2)]  # (x, y) = (section 2, section 1)


@pytest.mark.invariant("KV-008", "KV-009", "KV-010")
@pytest.mark.requires("kv.cache")
def test_prepare_and_restore_put_back_2d_extensions(target: Any) -> None:
    """M-RoPE ubatches: ``prepare``, and ``apply_ubatch`` then ``restore``, leave both parts of
    every cell's 2-D extension as before, in an empty cell and in a reused (out of window) cell
    whose old extension was not (0, 0)."""
    c = target.new_kv_cache(kv_size=4, n_pos_per_embd=4, n_swa=2, swa_type=1)
    place(c, ubatch_from_lists([[0, 1, 2], [1, 2, 3], [4, 5, 6], [0, 0, 0]], [[0], [0], [0]]))
    assert exts(c) == [(4, 1), (5, 2), (6, 3), (0, 0)]
    ub = ubatch_from_lists([[3, 4], [7, 8], [9, 10], [0, 0]], [[0], [0]])
    with unchanged_cache(c, "the cache after prepare of M-RoPE ubatches"):
        assert c.prepare([ub]) is not None
    with unchanged_cache(c, "the cache after an M-RoPE apply and restore"):
        slot = c.find_slot(ub)
        assert slot is not None and list(slot.idxs[0]) == [3, 0]  # cell 0 reused (out of window)
        undo = c.apply_ubatch(slot, ub)
        assert exts(c) == [(10, 8), (5, 2), (6, 3), (9, 7)]
        c.restore(undo)


@pytest.mark.invariant("KV-009")
@pytest.mark.requires("kv.cache")
def test_purge_can_drop_a_position_just_written(target: Any) -> None:
    """A reused cell held position 0 of seq 0; the ubatch writes seq 0 at position 0 again, so
    the purge of [seq_pos_min, 0] removes seq 0 from that fresh cell too (llama.cpp does)."""
    c = target.new_kv_cache(kv_size=8, n_seq_max=2, unified=True, n_swa=2, swa_type=1)
    place_run(c, 0, 0, 7)
    slot = place(c, ubatch_from_lists([7, 0], [[0], [1, 0]]))
    assert [list(ix) for ix in slot.idxs] == [[7, 0]]
    assert cells(c)[0] == (0, (1,)) and cells(c)[7] == (7, (0,))
    assert (c.seq_pos_min(0), c.seq_pos_max(0)) == (1, 7)
