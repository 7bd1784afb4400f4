"""Sequence operations across memory kinds: recurrent ``seq_keep``, where a recurrent memory
looks for a free cell (its head), sequence sets sharing a state, ids the memory has no cell
for, hybrid and iSWA forwarding, full contexts of every kind and ``get_can_shift``."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.assertions import raises_code, unchanged
from conformance.memory.test_memories import NEEDS, decode, splitter

SUCCESS, FAILED_PREPARE = 0, 2


def cells(mem: Any) -> list[tuple[int, int, int, tuple[int, ...]]]:
    """Each recurrent cell as (pos, src, tail, sequences)."""
    return [tuple(c) for c in mem.state().cells]


def holders(mem: Any) -> list[tuple[int, ...]]:
    """The sequence set of each recurrent cell."""
    return [c[3] for c in mem.state().cells]


def positions(mem: Any, n: int) -> list[tuple[int, int]]:
    return [(mem.seq_pos_min(s), mem.seq_pos_max(s)) for s in range(n)]


# -------------------------------------------------------------------------------- seq_keep


@pytest.mark.invariant("MEM-021", "MEM-022")
@pytest.mark.requires(*NEEDS)
def test_recurrent_seq_keep_frees_every_other_cell(target: Any) -> None:
    """Seqs 0..3 in cells 0..3 at position 0, then seq 2 moves on to position 1 (head -> 2)
    and seq 3 joins its cell. seq_keep(2): cells 0 and 1 are freed (their states at position
    0 count as used), cell 3 was already free, cell 2 keeps seq 2 only, every other sequence
    loses its state index, and the head drops to cell 0 (the first cell without seq 2)."""
    rec = target.new_memory("recurrent", n_seq_max=4)
    decode(target, rec, [[0], [1], [2], [3]], 4, 8)
    decode(target, rec, [[2]], 4, 8)
    rec.seq_cp(2, 3)
    st = rec.state()
    assert cells(rec) == [(0, 0, 0, (0,)), (0, 1, 1, (1,)), (1, 2, 2, (2, 3)), (-1, -1, 2, ())]
    assert (st.head, st.used) == (2, 3)
    rec.seq_keep(2)
    st = rec.state()
    assert cells(rec) == [
        (-1, -1, -1, ()),
        (-1, -1, -1, ()),
        (1, 2, 2, (2,)),
        (-1, -1, -1, ()),
    ]
    assert (st.head, st.used) == (0, 1)
    assert positions(rec, 4) == [(-1, -1), (-1, -1), (1, 1), (-1, -1)]
    # seq 3 lost its index into cell 2: it starts a new state, searched for from cell 0
    decode(target, rec, [[3], [0]], 4, 8)
    assert holders(rec) == [(3,), (0,), (2,), ()]
    assert positions(rec, 4) == [(0, 0), (-1, -1), (1, 1), (0, 0)]


@pytest.mark.invariant("MEM-021", "MEM-022")
@pytest.mark.requires(*NEEDS)
def test_recurrent_seq_keep_never_raises_the_head(target: Any) -> None:
    """Seqs 0 and 1 in cells 0 and 1, head at cell 0: seq_keep(0) frees cell 1, above the
    head, so the head stays. With one cell holding the kept sequence, nothing is freed and
    nothing changes."""
    rec = target.new_memory("recurrent", n_seq_max=2)
    decode(target, rec, [[0], [1]], 2, 8)
    assert rec.state().head == 0
    rec.seq_keep(0)
    st = rec.state()
    assert (st.head, st.used) == (0, 1)
    assert cells(rec) == [(0, 0, 0, (0,)), (-1, -1, -1, ())]
    one = target.new_memory("recurrent", n_seq_max=1)
    decode(target, one, [[0]] * 3, 1, 8)
    with unchanged(one.state, "one-cell recurrent memory after seq_keep of its sequence"):
        one.seq_keep(0)
    assert positions(one, 1) == [(2, 2)]


# -------------------------------------------------------------------------------- head


@pytest.mark.invariant("MEM-022")
@pytest.mark.requires(*NEEDS)
@pytest.mark.parametrize(("n_seq_max", "cell"), [(6, 0), (5, 3)], ids=["reset", "no-reset"])
def test_recurrent_search_restarts_at_cell_zero(target: Any, n_seq_max: int, cell: int) -> None:
    """Every sequence has a cell; the last one decoded again puts the head at its cell
    (n_seq_max - 2); seq_cp from the last sequence then frees every cell but the last (the
    head stays), so one cell is used. Seq 0 needs a cell of its own: with 6 cells the head
    (4) exceeds used + 2 * 1 = 3 and the search starts at cell 0; with 5 cells the head (3)
    does not, and the search starts at cell 3."""
    rec = target.new_memory("recurrent", n_seq_max=n_seq_max)
    last = n_seq_max - 1
    decode(target, rec, [[s] for s in range(n_seq_max)], n_seq_max, 8)
    decode(target, rec, [[last - 1]], n_seq_max, 8)
    for s in range(last):
        rec.seq_cp(last, s)
    st = rec.state()
    assert (st.head, st.used) == (last - 1, 1)
    decode(target, rec, [[0]], n_seq_max, 8)
    assert holders(rec)[cell] == (0,)
    assert rec.state().head == cell
    assert positions(rec, 1) == [(1, 1)]


@pytest.mark.invariant("MEM-022")
@pytest.mark.requires(*NEEDS)
def test_recurrent_seq_rm_lowers_the_head(target: Any) -> None:
    """Seqs 0..3 in cells 0..3; seq 1 decoded again puts the head at cell 1. Removing seq 3
    (cell 3, above the head) leaves the head; so does removing seq 3 again after it joined
    seq 0's cell 0, below the head (that cell keeps seq 0: nothing is freed); removing seq 0
    then lowers it to cell 0, so the next new state goes to cell 0, not to cell 3 (the first
    free cell from cell 1)."""
    rec = target.new_memory("recurrent", n_seq_max=4)
    decode(target, rec, [[0], [1], [2], [3]], 4, 8)
    decode(target, rec, [[1]], 4, 8)
    assert rec.state().head == 1
    assert rec.seq_rm(3, -1, -1) is True
    assert rec.state().head == 1
    rec.seq_cp(0, 3)
    assert holders(rec) == [(0, 3), (1,), (2,), ()]
    assert rec.seq_rm(3, -1, -1) is True
    assert holders(rec) == [(0,), (1,), (2,), ()]
    assert rec.state().head == 1
    assert rec.seq_rm(0, -1, -1) is True
    assert rec.state().head == 0
    decode(target, rec, [[3]], 4, 8)
    assert holders(rec) == [(3,), (1,), (2,), ()]


# -------------------------------------------------------------------------------- shared sets


@pytest.mark.invariant("MEM-023")
@pytest.mark.requires(*NEEDS)
def test_recurrent_coupled_token_shares_one_cell(target: Any) -> None:
    """Seqs 0, 1, 2 in cells 0, 1, 2 at position 0; a token of seqs 0 and 1 (every token an
    output: split by sequence) moves seq 1 out of its cell, which is freed, and into seq 0's
    cell at the token's position."""
    rec = target.new_memory("recurrent", n_seq_max=3)
    decode(target, rec, [[0], [1], [2]], 3, 8)
    sp = splitter(target, rec, [[0, 1]], n_seq_max=3, embd_all=True)
    ctx = rec.init_batch(sp, 8, True)
    assert ctx.get_status() == SUCCESS
    assert ctx.apply()
    assert cells(rec) == [(1, 0, 0, (0, 1)), (-1, -1, 0, ()), (0, 2, 2, (2,))]
    assert rec.state().used == 2
    assert positions(rec, 3) == [(1, 1), (1, 1), (0, 0)]


@pytest.mark.invariant("MEM-023", "MEM-008")
@pytest.mark.requires(*NEEDS)
def test_recurrent_sequence_without_a_cell_fails_the_batch(target: Any) -> None:
    """Two cells; the batch admits ids up to 3 (the bound is the batch's, not the memory's):
    a ubatch naming seq 2 (the number of cells, the first id without one) or seq 3 finds no
    slot, and the memory is as before."""
    rec = target.new_memory("recurrent", n_seq_max=2)
    decode(target, rec, [[0], [1]], 2, 8)
    for seq_id in (2, 3):
        with unchanged(rec.state, f"recurrent memory after a batch naming seq {seq_id}"):
            ctx = rec.init_batch(splitter(target, rec, [[0], [seq_id]], n_seq_max=4), 8, False)
        assert ctx.get_status() == FAILED_PREPARE, seq_id
    ctx = rec.init_batch(splitter(target, rec, [[0], [1]], n_seq_max=4), 8, False)
    assert ctx.get_status() == SUCCESS


# -------------------------------------------------------------------------------- moves


@pytest.mark.invariant("MEM-025")
@pytest.mark.requires(*NEEDS)
def test_recurrent_seq_add_and_div_move_the_state_in_range(target: Any) -> None:
    """Three cells; seq 0's state at position 4 (shared with seq 2), seq 1's at 0. Ranges
    that start after the state, end at it or are empty (p0 == p1, or p1 == 0, which bounds
    the range rather than leaving it open) move nothing, nor do ids outside
    [0, 3); a range from the state on moves it (seq 2 reads it too), and seq 1 stays."""
    rec = target.new_memory("recurrent", n_seq_max=3)
    decode(target, rec, [[0]] * 5, 3, 8)
    decode(target, rec, [[1]], 3, 8)
    rec.seq_cp(0, 2)
    assert positions(rec, 3) == [(4, 4), (0, 0), (4, 4)]
    with unchanged(rec.state, "recurrent memory after moves that reach no state"):
        rec.seq_div(0, 5, -1, 2)  # starts after the state
        rec.seq_add(0, 5, -1, 3)
        rec.seq_div(0, 0, 4, 2)  # ends at it
        rec.seq_add(0, 4, 4, 3)  # empty
        rec.seq_add(0, 0, 0, 3)  # p1 == 0 is a bound, not "no bound": empty
        rec.seq_add(0, 2, 0, 3)  # p1 == 0 below p0: empty
        rec.seq_div(0, 0, 0, 2)
        for s in (3, -1):  # one past the last cell, and -1
            rec.seq_add(s, -1, -1, 3)
            rec.seq_div(s, -1, -1, 2)
    rec.seq_div(0, 4, 5, 2)
    assert positions(rec, 3) == [(2, 2), (0, 0), (2, 2)]
    rec.seq_add(2, -1, -1, 3)  # seq 2 shares seq 0's state
    assert positions(rec, 3) == [(5, 5), (0, 0), (5, 5)]


@pytest.mark.invariant("MEM-025", "MEM-013")
@pytest.mark.requires(*NEEDS)
def test_recurrent_open_ranges_end_before_the_largest_position(target: Any) -> None:
    """A negative ``p1`` reads as llama_pos's maximum 2**31 - 1, itself excluded (as KV-013):
    seq 1's state moved to 2**31 - 1 is in no range, so seq_add, seq_div and seq_rm with open
    ranges leave it (seq_rm still returns true), while seq 0's state at 2**31 - 2 is in
    range."""
    top = 2**31 - 1
    rec = target.new_memory("recurrent", n_seq_max=2, n_rs_seq=2)
    decode(target, rec, [[0], [1]], 2, 8)  # both states at position 0
    rec.seq_add(0, -1, -1, top - 1)
    rec.seq_add(1, -1, -1, top - 1)
    rec.seq_add(1, -1, -1, 1)  # top - 1 is in range: seq 1 reaches the top
    assert positions(rec, 2) == [(top - 1, top - 1), (top, top)]
    with unchanged(rec.state, "recurrent memory after open ranges over a state at 2**31 - 1"):
        rec.seq_add(1, -1, -1, -5)
        rec.seq_add(1, top - 3, -1, -5)
        rec.seq_div(1, -1, -1, 2)
        assert rec.seq_rm(1, top - 1, -1) is True  # no rollback: the range ends before it
        assert rec.seq_rm(1, -1, -1) is True  # nothing removed
    assert positions(rec, 2) == [(top - 1, top - 1), (top, top)]
    rec.seq_div(0, -1, -1, 2)
    assert positions(rec, 2) == [((top - 1) // 2, (top - 1) // 2), (top, top)]
    assert rec.seq_rm(0, -1, -1) is True
    assert positions(rec, 2) == [(-1, -1), (top, top)]


@pytest.mark.invariant("MEM-025")
@pytest.mark.requires(*NEEDS)
def test_recurrent_seq_div_refuses_a_divisor_below_one(target: Any) -> None:
    """Two cells; seq 0's state at position 2, seq 1 without one. d = 0 or -2 raises
    KV_DIVISOR and moves nothing, before the sequence and range are looked at: for the state in
    range, a range past it, an empty range, seq 1, an id without a cell (2) and -1."""
    rec = target.new_memory("recurrent", n_seq_max=2)
    decode(target, rec, [[0]] * 3, 2, 8)
    for d in (0, -2):
        for s, p0, p1 in (
            (0, -1, -1),
            (0, 5, -1),
            (0, 1, 1),
            (1, -1, -1),
            (2, -1, -1),
            (-1, -1, -1),
        ):
            with (
                unchanged(rec.state, f"recurrent memory after seq_div({s}, {p0}, {p1}, {d})"),
                raises_code("KV_DIVISOR", what=f"seq_div({s}, {p0}, {p1}, {d})"),
            ):
                rec.seq_div(s, p0, p1, d)
    assert positions(rec, 2) == [(2, 2), (-1, -1)]


# -------------------------------------------------------------------------------- forwarding


@pytest.mark.invariant("MEM-014")
@pytest.mark.requires(*NEEDS)
def test_hybrid_copy_and_keep_reach_both_parts(target: Any) -> None:
    """Positions combine the parts (max of the minimums, min of the maximums), so a part that
    missed a copy or a keep shows: seq 1 would read (4, -1) or (0, -1) instead of (4, 4), and
    seq 0 (0, -1) or (4, -1) instead of (-1, -1)."""
    mem = target.new_memory("hybrid", kv_size=16, n_seq_max=2, unified=True)
    decode(target, mem, [[0]] * 5, 2, 8)
    mem.seq_cp(0, 1)
    assert positions(mem, 2) == [(4, 4), (4, 4)]
    mem.seq_keep(1)
    assert positions(mem, 2) == [(-1, -1), (4, 4)]
    decode(target, mem, [[1]], 2, 8)
    assert positions(mem, 2) == [(-1, -1), (5, 5)]


@pytest.mark.invariant("MEM-015")
@pytest.mark.requires(*NEEDS)
def test_iswa_copy_keep_and_div_reach_both_caches(target: Any) -> None:
    """Both caches have 16 cells and a window wider than the batch, so each is a plain cache.
    seq_cp and seq_div show in the positions (read from the window cache); seq_keep must free
    seq 1's cells in both caches for eight more tokens of seq 0 to fit."""
    mem = target.new_memory(
        "iswa", kv_size=16, n_seq_max=2, unified=True, n_swa=64, swa_type=1, n_ubatch=8
    )
    decode(target, mem, [[0]] * 8 + [[1]] * 8, 2, 16)
    mem.seq_cp(0, 1, 4, -1)  # seq 1 also holds seq 0's positions 4..7
    assert positions(mem, 2) == [(0, 7), (0, 7)]
    mem.seq_div(1, -1, -1, 2)  # every cell of seq 1, shared ones included
    assert positions(mem, 2) == [(0, 3), (0, 3)]
    mem.seq_keep(0)
    assert positions(mem, 2) == [(0, 3), (-1, -1)]
    # seq 0 still holds 8 cells of each cache, seq 1's other 8 are free again
    ctx = mem.init_batch(splitter(target, mem, [[0]] * 8, n_seq_max=2), 16, False)
    assert ctx.get_status() == SUCCESS
    ctx = mem.init_batch(splitter(target, mem, [[0]] * 9, n_seq_max=2), 16, False)
    assert ctx.get_status() == FAILED_PREPARE


# -------------------------------------------------------------------------------- full contexts


@pytest.mark.invariant("MEM-018")
@pytest.mark.requires(*NEEDS)
@pytest.mark.parametrize("kind", ["recurrent", "hybrid"])
def test_full_context_of_a_recurrent_memory_places_nothing(target: Any, kind: str) -> None:
    config = {"kv_size": 16} if kind == "hybrid" else {}
    mem = target.new_memory(kind, n_seq_max=2, **config)
    decode(target, mem, [[0], [0], [1]], 2, 8)
    snapshot = mem.state if kind == "recurrent" else (lambda: positions(mem, 2))
    with unchanged(snapshot, f"{kind} memory after applying init_full()"):
        full = mem.init_full()
        assert full.get_status() == SUCCESS
        assert full.apply() is True
    decode(target, mem, [[1], [0]], 2, 8)
    assert positions(mem, 2) == [(2, 2), (1, 1)]


# -------------------------------------------------------------------------------- can shift


@pytest.mark.invariant("MEM-024")
@pytest.mark.requires(*NEEDS)
@pytest.mark.parametrize(
    ("kind", "config", "can_shift"),
    [
        ("kv", {"kv_size": 16}, True),
        ("kv", {"kv_size": 16, "n_pos_per_embd": 4}, False),
        # window cache min(256, 4 + 8) rounded up to 256 == kv_size
        (
            "iswa",
            {"kv_size": 256, "n_swa": 4, "swa_type": 1, "n_ubatch": 8, "swa_full": False},
            True,
        ),
        (
            "iswa",
            {"kv_size": 1024, "n_swa": 4, "swa_type": 1, "n_ubatch": 8, "swa_full": False},
            False,
        ),
        ("iswa", {"kv_size": 1024, "n_swa": 4, "swa_type": 1, "swa_full": True}, True),
        ("iswa", {"kv_size": 256, "n_swa": 4, "swa_type": 1, "n_pos_per_embd": 4}, False),
        ("recurrent", {}, True),
        ("hybrid", {"kv_size": 16}, True),
        ("hybrid", {"kv_size": 16, "n_pos_per_embd": 4}, False),
    ],
    ids=[
        "kv",
        "kv-mrope",
        "iswa-equal-sizes",
        "iswa-smaller-window",
        "iswa-full",
        "iswa-mrope",
        "recurrent",
        "hybrid",
        "hybrid-mrope",
    ],
)
def test_can_shift(target: Any, kind: str, config: dict[str, Any], can_shift: bool) -> None:
    assert target.new_memory(kind, **config).get_can_shift() is can_shift
