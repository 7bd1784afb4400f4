"""Memories by kind (kv, iswa, recurrent, hybrid): update statuses, the split each init_batch
uses, FAILED_PREPARE with nothing changed, batch contexts, and the recurrent / hybrid / iSWA
rules. Batches go through the target's own sanitizer and splitter (batch area)."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.assertions import unchanged
from conformance.strategies.kv import RecordingSplitter
from reference_impl.batch.types import Batch

SUCCESS, NO_UPDATE, FAILED_PREPARE = 0, 1, 2
N_VOCAB = 32
NEEDS = ("memory.kinds", "batch.sanitize", "batch.split")


def splitter(
    target: Any,
    mem: Any,
    seq_ids: list[list[int]],
    *,
    n_seq_max: int,
    embd_all: bool = False,
) -> RecordingSplitter:
    """A recording splitter over a token batch (positions continue each sequence)."""
    batch = Batch.from_lists([1] * len(seq_ids), seq_ids=seq_ids)
    sb = target.batch_sanitize(
        batch, n_vocab=N_VOCAB, n_seq_max=n_seq_max, memory=mem, output_all=embd_all
    )
    return RecordingSplitter(target.batch_splitter(sb))


def decode(target: Any, mem: Any, seq_ids: list[list[int]], n_seq_max: int, n_ubatch: int) -> Any:
    """init_batch + apply every ubatch; returns the context."""
    ctx = mem.init_batch(splitter(target, mem, seq_ids, n_seq_max=n_seq_max), n_ubatch, False)
    assert ctx.get_status() == SUCCESS
    while True:
        assert ctx.apply()
        if not ctx.next():
            return ctx


# -------------------------------------------------------------------------------- updates


@pytest.mark.invariant("MEM-004")
@pytest.mark.requires(*NEEDS)
def test_kv_update_status(target: Any) -> None:
    mem = target.new_memory("kv", kv_size=16, n_seq_max=2)
    decode(target, mem, [[0], [0], [1]], 2, 8)
    for optimize in (False, True):
        assert mem.init_update(optimize).get_status() == NO_UPDATE
    mem.seq_add(0, -1, -1, 3)
    ctx = mem.init_update(False)
    assert ctx.get_status() == SUCCESS
    ctx.apply()
    assert mem.init_update(True).get_status() == NO_UPDATE
    mem.seq_cp(0, 1, -1, -1)  # a stream copy is scheduled
    ctx = mem.init_update(False)
    assert ctx.get_status() == SUCCESS
    ctx.apply()
    assert mem.init_update(False).get_status() == NO_UPDATE
    assert (mem.seq_pos_min(1), mem.seq_pos_max(1)) == (3, 4)


@pytest.mark.invariant("MEM-005")
@pytest.mark.requires(*NEEDS)
def test_composite_update_status(target: Any) -> None:
    rec = target.new_memory("recurrent", n_seq_max=2)
    decode(target, rec, [[0], [0]], 2, 8)
    rec.seq_add(0, -1, -1, 2)
    before = rec.state()
    ctx = rec.init_update(True)
    assert ctx.get_status() == NO_UPDATE
    assert ctx.apply() is True  # nothing to do, and nothing failed
    assert rec.state() == before
    assert rec.seq_pos_max(0) == 3
    for kind, extra in (("hybrid", {}), ("iswa", {"n_swa": 4, "swa_type": 1})):
        mem = target.new_memory(kind, kv_size=16, n_seq_max=1, **extra)
        decode(target, mem, [[0], [0], [0]], 1, 8)
        assert mem.init_update(False).get_status() == NO_UPDATE
        mem.seq_add(0, 1, -1, 5)
        ctx = mem.init_update(False)
        assert ctx.get_status() == SUCCESS, kind
        assert ctx.apply() is True, kind  # a hybrid's recurrent part (NO_UPDATE) must not veto it
        assert mem.init_update(False).get_status() == NO_UPDATE, kind


# -------------------------------------------------------------------------------- splits

U = 4
TWO_SEQS = [[0], [1], [0], [1], [0], [1]]

SPLIT_TABLE = [
    ("kv", {"kv_size": 32, "n_seq_max": 2, "unified": True}, False, [("split_simple", U)]),
    ("kv", {"kv_size": 32, "n_seq_max": 2}, False, [("split_equal", U, True, 0)]),
    ("kv", {"kv_size": 32, "n_seq_max": 2}, True, [("split_equal", U, True, 0)]),
    (
        "iswa",
        {"kv_size": 32, "n_seq_max": 2, "unified": True, "n_swa": 2, "swa_type": 1},
        False,
        [("split_simple", U)],
    ),
    (
        "iswa",
        {"kv_size": 32, "n_seq_max": 2, "n_swa": 2, "swa_type": 1},
        False,
        [("split_equal", U, True, 0)],
    ),
    ("recurrent", {"n_seq_max": 2}, False, [("split_equal", U, True, 0)]),
    ("recurrent", {"n_seq_max": 2, "n_rs_seq": 2}, False, [("split_equal", U, True, 3)]),
    ("recurrent", {"n_seq_max": 2, "n_rs_seq": 2}, True, [("split_seq", U)]),
    (
        "hybrid",
        {"kv_size": 32, "n_seq_max": 2, "unified": True},
        False,
        [("split_equal", U, False, 0)],
    ),
    (
        "hybrid",
        {"kv_size": 32, "n_seq_max": 2, "n_rs_seq": 1},
        False,
        [("split_equal", U, True, 2)],
    ),
    ("hybrid", {"kv_size": 32, "n_seq_max": 2}, True, [("split_seq", U)]),
]


@pytest.mark.invariant("MEM-007", "MEM-008")
@pytest.mark.requires(*NEEDS)
@pytest.mark.parametrize(("kind", "config", "embd_all", "calls"), SPLIT_TABLE)
def test_split_per_memory_kind(
    target: Any, kind: str, config: dict[str, Any], embd_all: bool, calls: list[tuple[Any, ...]]
) -> None:
    mem = target.new_memory(kind, **config)
    sp = splitter(target, mem, TWO_SEQS, n_seq_max=2, embd_all=embd_all)
    ctx = mem.init_batch(sp, U, embd_all)
    assert ctx.get_status() == SUCCESS
    assert sp.methods() == calls
    assert sp.calls[0] == ("split_reset",)
    # the context holds exactly what the split produced, in order, covering every token once
    idxs = sorted(int(i) for ub in ctx.ubatches for i in ub.idxs)
    assert idxs == list(range(len(TWO_SEQS)))


@pytest.mark.invariant("MEM-007", "MEM-008")
@pytest.mark.requires(*NEEDS)
def test_iswa_falls_back_to_equal_split(target: Any) -> None:
    """One stream, caches nearly full: the simple split fails its slot search, then the
    non-sequential equal split is tried before FAILED_PREPARE."""
    mem = target.new_memory(
        "iswa", kv_size=256, n_seq_max=2, unified=True, n_swa=300, swa_type=1, swa_full=True
    )
    decode(target, mem, [[0]] * 250, 2, 256)
    with unchanged(lambda: (mem.seq_pos_max(0), mem.seq_pos_max(1)), "seq_pos_max"):
        sp = splitter(target, mem, TWO_SEQS + TWO_SEQS, n_seq_max=2)
        ctx = mem.init_batch(sp, U, False)
    assert ctx.get_status() == FAILED_PREPARE
    assert sp.methods() == [("split_simple", U), ("split_equal", U, False, 0)]


@pytest.mark.invariant("MEM-008")
@pytest.mark.requires(*NEEDS)
def test_batch_that_does_not_fit(target: Any) -> None:
    mem = target.new_memory("kv", kv_size=8)
    decode(target, mem, [[0]] * 5, 1, 8)
    with unchanged(mem.state, "memory after a failed init_batch"):
        ctx = mem.init_batch(splitter(target, mem, [[0]] * 4, n_seq_max=1), 2, False)
    assert ctx.get_status() == FAILED_PREPARE
    with unchanged(mem.state, "memory after init_batch"):  # planning changes nothing
        ctx = mem.init_batch(splitter(target, mem, [[0]] * 3, n_seq_max=1), 2, False)
    assert ctx.get_status() == SUCCESS


@pytest.mark.invariant("MEM-008")
@pytest.mark.requires(*NEEDS)
def test_unplaced_tokens_fail_the_batch(target: Any) -> None:
    """A coupled token cannot go through a sequential equal split (recurrent memory)."""
    rec = target.new_memory("recurrent", n_seq_max=2)
    decode(target, rec, [[0], [1]], 2, 4)
    with unchanged(rec.state, "memory after a failed init_batch"):
        sp = splitter(target, rec, [[0, 1], [0]], n_seq_max=2)
        ctx = rec.init_batch(sp, 4, False)
    assert ctx.get_status() == FAILED_PREPARE
    assert sp.n_used < sp.n_tokens


# -------------------------------------------------------------------------------- contexts


@pytest.mark.invariant("MEM-009")
@pytest.mark.requires(*NEEDS)
def test_batch_context_walk(target: Any) -> None:
    mem = target.new_memory("kv", kv_size=300)
    ctx = mem.init_batch(splitter(target, mem, [[0]] * 6, n_seq_max=1), 4, False)
    assert ctx.get_status() == SUCCESS
    assert [ub.n_tokens for ub in ctx.ubatches] == [4, 2]
    assert ctx.get_ubatch() is ctx.ubatches[0]
    assert mem.seq_pos_max(0) == -1  # nothing placed yet
    assert ctx.apply()
    assert mem.seq_pos_max(0) == 3 and ctx.n_kv == 256
    assert ctx.next() is True and ctx.get_ubatch() is ctx.ubatches[1]
    assert ctx.apply()
    assert mem.seq_pos_max(0) == 5
    assert ctx.next() is False
    full = mem.init_full()
    assert full.get_status() == SUCCESS and full.n_kv == 300


@pytest.mark.invariant("MEM-009")
@pytest.mark.requires(*NEEDS)
@pytest.mark.parametrize(
    ("kind", "config", "n_seq_max", "fill", "overflow"),
    [
        ("kv", {"kv_size": 16}, 1, [[0]] * 16, [[0]]),
        ("iswa", {"kv_size": 16, "n_swa": 4, "swa_type": 1}, 1, [[0]] * 16, [[0]]),
        ("recurrent", {}, 2, [[0], [1]], [[0, 1], [0]]),  # a coupled token: no split places it
        ("hybrid", {"kv_size": 16}, 1, [[0]] * 16, [[0]]),
    ],
    ids=["kv", "iswa", "recurrent", "hybrid"],
)
def test_context_without_success_has_no_ubatches(
    target: Any,
    kind: str,
    config: dict[str, Any],
    n_seq_max: int,
    fill: list[list[int]],
    overflow: list[list[int]],
) -> None:
    """A failed init_batch context and a NO_UPDATE init_update context have no ubatches to
    walk: asking for the current ubatch or the next one is refused, and the memory keeps what
    it holds (llama.cpp asserts a SUCCESS status in every context's next and get_ubatch)."""
    mem = target.new_memory(kind, n_seq_max=n_seq_max, **config)
    decode(target, mem, fill, n_seq_max, 8)
    seqs = sorted({s for ids in fill for s in ids})
    held = [(mem.seq_pos_min(s), mem.seq_pos_max(s)) for s in seqs]
    failed = mem.init_batch(splitter(target, mem, overflow, n_seq_max=n_seq_max), 8, False)
    assert failed.get_status() == FAILED_PREPARE
    no_update = mem.init_update(False)
    assert no_update.get_status() == NO_UPDATE
    for ctx, what in ((failed, "failed init_batch"), (no_update, "NO_UPDATE init_update")):
        with pytest.raises(Exception):  # noqa: B017 -- any engine-specific error counts here
            ctx.next()
        with pytest.raises(Exception):  # noqa: B017 -- any engine-specific error counts here
            ctx.get_ubatch()
        assert [(mem.seq_pos_min(s), mem.seq_pos_max(s)) for s in seqs] == held, what


# -------------------------------------------------------------------------------- recurrent


@pytest.mark.invariant("MEM-012")
@pytest.mark.requires(*NEEDS)
def test_recurrent_one_state_per_sequence(target: Any) -> None:
    rec = target.new_memory("recurrent", n_seq_max=3)
    decode(target, rec, [[2], [0], [1], [2], [0], [1], [0]], 3, 8)
    assert [(rec.seq_pos_min(s), rec.seq_pos_max(s)) for s in range(3)] == [(2, 2), (1, 1), (1, 1)]
    st = rec.state()
    assert len(st.cells) == 3
    assert sorted(c[3] for c in st.cells) == [(0,), (1,), (2,)]
    assert rec.init_full().get_status() == SUCCESS


@pytest.mark.invariant("MEM-012")
@pytest.mark.requires(*NEEDS)
def test_recurrent_ubatch_cells_follow_ubatch_order(target: Any) -> None:
    """A state cell found out of order is moved so that the ubatch's cells are consecutive in
    ubatch order, and the search for an empty cell wraps around past the last cell."""
    rec = target.new_memory("recurrent", n_seq_max=2)
    decode(target, rec, [[1]], 2, 8)  # seq 1 takes cell 0
    decode(target, rec, [[0], [1]], 2, 8)  # seq 0 found at cell 1, then moved before seq 1
    assert [c[3] for c in rec.state().cells] == [(0,), (1,)]
    assert [(rec.seq_pos_min(s), rec.seq_pos_max(s)) for s in range(2)] == [(0, 0), (1, 1)]
    decode(target, rec, [[1]], 2, 8)  # head -> cell 1
    rec.seq_cp(1, 0)  # cell 0 empties, seq 0 shares cell 1
    assert [c[3] for c in rec.state().cells] == [(), (0, 1)]
    decode(target, rec, [[0]], 2, 8)  # seq 0 needs its own cell: the search wraps to cell 0
    assert [c[3] for c in rec.state().cells] == [(0,), (1,)]
    assert [(rec.seq_pos_min(s), rec.seq_pos_max(s)) for s in range(2)] == [(3, 3), (2, 2)]


@pytest.mark.invariant("MEM-012", "MEM-019")
@pytest.mark.requires(*NEEDS)
def test_recurrent_sequence_leaves_a_shared_cell_zero(target: Any) -> None:
    """seq 1 shares seq 0's state in cell 0 (seq_cp); a ubatch of seq 1 alone gives it a cell
    of its own (cell 1) and takes it out of cell 0, which keeps seq 0 at its position: cell 0
    is a tail like any other, so seq 1 has one position, not one in each cell."""
    rec = target.new_memory("recurrent", n_seq_max=2)
    decode(target, rec, [[0]], 2, 8)  # seq 0 -> cell 0, position 0
    rec.seq_cp(0, 1)
    assert [c[3] for c in rec.state().cells] == [(0, 1), ()]
    decode(target, rec, [[1]], 2, 8)  # seq 1 at position 1
    assert [(c[0], c[3]) for c in rec.state().cells] == [(0, (0,)), (1, (1,))]
    assert [(rec.seq_pos_min(s), rec.seq_pos_max(s)) for s in range(2)] == [(0, 0), (1, 1)]
    assert rec.state().used == 2


@pytest.mark.invariant("MEM-012")
@pytest.mark.requires(*NEEDS)
def test_recurrent_gather_keeps_the_displaced_state(target: Any) -> None:
    """Seqs 0, 2, 1 sit in cells 0, 1, 2; a ubatch of seqs 0 and 1 gathers their states into
    cells 0 and 1, so seq 2's state changes places with seq 1's: it moves to cell 2 with its
    position and seq 2's index, and seq 1 is left in cell 1 only."""
    rec = target.new_memory("recurrent", n_seq_max=3)
    decode(target, rec, [[0]], 3, 8)  # seq 0 -> cell 0
    decode(target, rec, [[2], [2]], 3, 8)  # seq 2 -> cell 1, position 1
    decode(target, rec, [[1]] * 3, 3, 8)  # seq 1 -> cell 2, position 2
    assert [c[3] for c in rec.state().cells] == [(0,), (2,), (1,)]
    decode(target, rec, [[0], [1]], 3, 8)
    assert [(c[0], c[3]) for c in rec.state().cells] == [(1, (0,)), (3, (1,)), (1, (2,))]
    assert [(rec.seq_pos_min(s), rec.seq_pos_max(s)) for s in range(3)] == [(1, 1), (3, 3), (1, 1)]
    assert [c[2] for c in rec.state().cells] == [0, 1, 2]  # seq s's index: the cell of its state
    rec.seq_add(2, -1, -1, 5)  # follows seq 2's index to cell 2
    assert [(rec.seq_pos_min(s), rec.seq_pos_max(s)) for s in range(3)] == [(1, 1), (3, 3), (6, 6)]


@pytest.mark.invariant("MEM-013")
@pytest.mark.requires(*NEEDS)
def test_recurrent_seq_rm_rules(target: Any) -> None:
    rec = target.new_memory("recurrent", n_seq_max=2, n_rs_seq=2)
    decode(target, rec, [[0]] * 5, 2, 8)  # state of seq 0 at position 4
    assert rec.seq_rm(2, -1, -1) is False
    assert rec.seq_rm(-1, -1, -1) is False
    assert rec.seq_rm(0, 1, -1) is False  # 4 positions back: more than n_rs_seq
    assert rec.seq_pos_max(0) == 4
    assert rec.seq_rm(0, 3, -1) is True  # roll back 2 positions
    assert rec.seq_pos_max(0) == 2
    assert rec.seq_rm(0, 2, -1) is False  # a rollback is already pending
    assert rec.seq_rm(0, 0, -1) is True
    assert rec.seq_pos_max(0) == -1
    # removing every position ended the pending rollback: the next state can be rolled back
    decode(target, rec, [[0]] * 5, 2, 8)
    assert rec.seq_rm(0, 3, -1) is True
    assert rec.seq_pos_max(0) == 2
    plain = target.new_memory("recurrent", n_seq_max=1)
    decode(target, plain, [[0]] * 3, 1, 8)
    assert plain.seq_rm(0, 2, -1) is False and plain.seq_pos_max(0) == 2
    one = target.new_memory("recurrent", n_seq_max=1, n_rs_seq=1)
    decode(target, one, [[0]] * 3, 1, 8)
    assert one.seq_rm(0, 2, -1) is True  # a rollback of exactly one position
    assert one.seq_pos_max(0) == 1
    # a range ending at the state's position removes nothing and keeps seq 0's index to it
    four = target.new_memory("recurrent", n_seq_max=2)
    decode(target, four, [[0]] * 4, 2, 8)  # seq 0: cell 0, position 3
    assert four.seq_rm(0, 0, 3) is True
    # also from p0 > 0: a range [p0, pos) that ends at the state cuts nothing short, so it is
    # neither refused nor a rollback (n_rs_seq 0 would refuse one)
    assert four.seq_rm(0, 2, 3) is True
    # p1 == 0 is an empty range, not "no bound": nothing removed, no rollback attempted
    assert four.seq_rm(0, 0, 0) is True and four.seq_rm(0, 2, 0) is True
    assert four.seq_pos_max(0) == 3
    four.seq_add(0, -1, -1, 2)  # follows the index
    assert (four.seq_pos_min(0), four.seq_pos_max(0)) == (5, 5)
    # only removing every position ends a pending rollback, also for a state that seq 2 gets
    # from seq 1 by seq_cp (no ubatch of seq 2 in between); a range from 0 with an upper bound
    # leaves the rollback pending
    shared = target.new_memory("recurrent", n_seq_max=3, n_rs_seq=2)
    decode(target, shared, [[1]] * 5, 3, 8)  # seq 1 at position 4
    shared.seq_cp(1, 2)
    assert shared.seq_rm(2, 4, -1) is True  # the shared state goes back to position 3
    assert shared.seq_rm(2, 0, 3) is True  # ends at the state's position: nothing removed
    assert shared.seq_rm(2, 3, -1) is False  # seq 2's rollback is still pending
    assert shared.seq_rm(2, -1, -1) is True  # seq 2 leaves the cell, seq 1 keeps it
    assert shared.seq_pos_max(1) == 3 and shared.seq_pos_max(2) == -1
    shared.seq_cp(1, 2)
    assert shared.seq_rm(2, 3, -1) is True  # a new rollback: the pending one was ended
    assert shared.seq_pos_max(1) == shared.seq_pos_max(2) == 2
    # removing a whole state at position 0 ends seq 0's index too: seq 1 takes the freed cell,
    # and seq 0's next state goes to another cell instead of taking seq 1's over
    zero = target.new_memory("recurrent", n_seq_max=2)
    decode(target, zero, [[0]], 2, 8)  # seq 0: cell 0, position 0
    assert zero.seq_rm(0, -1, -1) is True
    decode(target, zero, [[1]] * 3, 2, 8)  # seq 1: cell 0, position 2
    decode(target, zero, [[0]], 2, 8)
    assert [(zero.seq_pos_min(s), zero.seq_pos_max(s)) for s in range(2)] == [(0, 0), (2, 2)]


@pytest.mark.invariant("MEM-026")
@pytest.mark.requires(*NEEDS)
def test_recurrent_rollback_is_consumed_by_the_next_ubatch(target: Any) -> None:
    rec = target.new_memory("recurrent", n_seq_max=3, n_rs_seq=2)
    decode(target, rec, [[0]] * 5 + [[1]] * 5, 3, 8)  # seq 0 and seq 1 at position 4
    assert rec.seq_rm(0, 3, -1) is True and rec.seq_rm(1, 4, -1) is True
    decode(target, rec, [[0]], 3, 8)  # seq 0's next state reads the snapshot once
    assert rec.seq_pos_max(0) == 3
    assert rec.seq_rm(0, 3, -1) is True  # a new rollback of one position
    assert rec.seq_rm(1, 3, -1) is False  # seq 1 was not in that ubatch: still pending
    decode(target, rec, [[1], [1]], 3, 8)
    assert rec.seq_rm(1, 4, -1) is True  # consumed by seq 1's ubatch
    # seqs 1 and 2 share a cell, each with a rollback pending: a ubatch of that cell ends the
    # lower id's rollback only
    shared = target.new_memory("recurrent", n_seq_max=3, n_rs_seq=2)
    decode(target, shared, [[1]] * 5, 3, 8)
    shared.seq_cp(1, 2)
    assert shared.seq_rm(1, 4, -1) is True and shared.seq_rm(2, 3, -1) is True
    assert [c[3] for c in shared.state().cells if c[3]] == [(1, 2)]
    sp = splitter(target, shared, [[1, 2]], n_seq_max=3, embd_all=True)
    ctx = shared.init_batch(sp, 8, True)  # one token of both, at position 3
    assert ctx.get_status() == SUCCESS and ctx.apply()
    assert [c[3] for c in shared.state().cells if c[3]] == [(1, 2)]
    assert shared.seq_rm(2, 3, -1) is False  # seq 2's rollback is still pending
    assert shared.seq_rm(1, 3, -1) is True


# -------------------------------------------------------------------------------- hybrid, iSWA


@pytest.mark.invariant("MEM-014")
@pytest.mark.requires(*NEEDS)
def test_hybrid_asks_the_recurrent_part_first(target: Any) -> None:
    mem = target.new_memory("hybrid", kv_size=16, n_seq_max=1)
    decode(target, mem, [[0]] * 5, 1, 8)
    assert (mem.seq_pos_min(0), mem.seq_pos_max(0)) == (4, 4)  # max of mins, min of maxes
    assert mem.seq_rm(0, 2, -1) is False
    assert (mem.seq_pos_min(0), mem.seq_pos_max(0)) == (4, 4)
    mem.seq_rm(0, -1, -1)
    assert (mem.seq_pos_min(0), mem.seq_pos_max(0)) == (-1, -1)
    assert mem.seq_rm(3, -1, -1) is False


@pytest.mark.invariant("MEM-014")
@pytest.mark.requires(*NEEDS)
def test_hybrid_positions_after_seq_div(target: Any) -> None:
    """seq_div over the whole sequence (p1 < 0: no upper bound) moves both parts: attention
    positions 0..4 become 0, 0, 1, 1, 2 and the recurrent state moves from 4 to 2. After a
    move by 10 (attention 10..12, recurrent 12) a second division gives attention 5..6 and
    recurrent 6; an attention part that missed both divisions (10..14) would read (10, 6)."""
    mem = target.new_memory("hybrid", kv_size=16, n_seq_max=1)
    decode(target, mem, [[0]] * 5, 1, 8)
    mem.seq_div(0, -1, -1, 2)
    assert (mem.seq_pos_min(0), mem.seq_pos_max(0)) == (2, 2)  # max(0, 2), min(2, 2)
    mem.seq_add(0, -1, -1, 10)
    assert (mem.seq_pos_min(0), mem.seq_pos_max(0)) == (12, 12)
    mem.seq_div(0, -1, -1, 2)
    assert (mem.seq_pos_min(0), mem.seq_pos_max(0)) == (6, 6)  # max(5, 6), min(6, 6)


@pytest.mark.invariant("MEM-015")
@pytest.mark.requires(*NEEDS)
@pytest.mark.parametrize(
    ("swa_full", "n_swa", "n_ubatch", "n_tokens", "pos_min"),
    [
        (True, 4, 8, 300, 0),
        (None, 4, 8, 300, 0),
        (False, 4, 8, 300, 44),
        (False, 4, 253, 300, 0),
        (False, 256, None, 800, 32),
        (False, 1, None, 600, 0),
    ],
)
def test_iswa_window_cache_size(
    target: Any,
    swa_full: bool | None,
    n_swa: int,
    n_ubatch: int | None,
    n_tokens: int,
    pos_min: int,
) -> None:
    """Window 4, n_ubatch 8: the window cache has 256 cells (not 1024) unless swa_full, so
    300 tokens wrap around it and the oldest 44 positions are purged from it. With n_ubatch
    253 it wants 4 + 253 = 257 cells, rounded up to 512: the 300 tokens fit. A config
    without ``swa_full`` (None) gets llama.cpp's default, true; one without ``n_ubatch``
    (None) gets llama.cpp's default, 512: window 256 wants 256 + 512 = 768 cells exactly (one
    more would round up to 1024), so 800 tokens purge the oldest 32 positions; window 1 wants
    513, rounded up to 768 (one less would stay 512), so 600 tokens fit."""
    opts: dict[str, Any] = {} if swa_full is None else {"swa_full": swa_full}
    if n_ubatch is not None:
        opts["n_ubatch"] = n_ubatch
    mem = target.new_memory("iswa", kv_size=1024, n_swa=n_swa, swa_type=1, **opts)
    decode(target, mem, [[0]] * n_tokens, 1, 8)
    assert (mem.seq_pos_min(0), mem.seq_pos_max(0)) == (pos_min, n_tokens - 1)
    mem.seq_rm(0, 100, -1)
    mem.seq_add(0, -1, -1, 1)
    assert mem.seq_pos_max(0) == 100


@pytest.mark.invariant("MEM-017", "MEM-026")
@pytest.mark.requires(*NEEDS)
@pytest.mark.parametrize(("n_seq_max", "n_rs_seq"), [(1, 0), (3, 0), (3, 2)])
def test_recurrent_clear_restores_the_initial_state(
    target: Any, n_seq_max: int, n_rs_seq: int
) -> None:
    rec = target.new_memory("recurrent", n_seq_max=n_seq_max, n_rs_seq=n_rs_seq)
    fresh = target.new_memory("recurrent", n_seq_max=n_seq_max, n_rs_seq=n_rs_seq).state()
    seqs = list(range(n_seq_max))
    decode(target, rec, [[s] for s in seqs for _ in range(3)], n_seq_max, 8)
    decode(target, rec, [[seqs[-1]]], n_seq_max, 8)  # head moves past the first cell
    if n_seq_max > 1:
        rec.seq_cp(1, 0)  # cells shared and emptied
    if n_rs_seq:
        assert rec.seq_rm(2, 3, -1) is True  # seq 2's rollback is pending
    assert rec.state() != fresh, "the decodes left no trace in the state: the check is empty"
    rec.clear()
    assert rec.state() == fresh
    if n_rs_seq:
        # clear() ended seq 2's pending rollback too: its next state, in a cell it shares with
        # seq 1 (whose ubatches end only seq 1's rollback, MEM-026), can be rolled back
        for _ in range(2):
            sp = splitter(target, rec, [[1, 2]], n_seq_max=n_seq_max, embd_all=True)
            ctx = rec.init_batch(sp, 8, True)
            assert ctx.get_status() == SUCCESS and ctx.apply()
        assert (rec.seq_pos_max(1), rec.seq_pos_max(2)) == (1, 1)
        assert rec.seq_rm(2, 1, -1) is True
        assert rec.seq_pos_max(1) == 0


@pytest.mark.invariant("MEM-016")
@pytest.mark.requires(*NEEDS)
@pytest.mark.parametrize(
    ("kind", "config", "n_seq_max", "seq_ids"),
    [
        ("kv", {"kv_size": 16}, 1, [[0]] * 16),
        ("iswa", {"kv_size": 16, "n_swa": 4, "swa_type": 1, "n_ubatch": 8}, 1, [[0]] * 16),
        ("recurrent", {}, 2, [[0], [1]]),
        ("hybrid", {"kv_size": 16}, 1, [[0]] * 16),
    ],
    ids=["kv", "iswa", "recurrent", "hybrid"],
)
def test_clear_empties_every_part(
    target: Any, kind: str, config: dict[str, Any], n_seq_max: int, seq_ids: list[list[int]]
) -> None:
    """A batch that fills the memory, clear(), then the same batch again: it must fit."""
    mem = target.new_memory(kind, n_seq_max=n_seq_max, **config)
    decode(target, mem, seq_ids, n_seq_max, 8)
    full = mem.init_batch(splitter(target, mem, seq_ids, n_seq_max=n_seq_max), 8, False)
    if kind != "recurrent":  # a recurrent memory keeps one state per sequence, never full
        assert full.get_status() == FAILED_PREPARE, f"{kind}: the memory should be full"
    mem.clear()
    seqs = sorted({s for ids in seq_ids for s in ids})
    assert [(mem.seq_pos_min(s), mem.seq_pos_max(s)) for s in seqs] == [(-1, -1)] * len(seqs)
    decode(target, mem, seq_ids, n_seq_max, 8)
    assert [mem.seq_pos_max(s) for s in seqs] == [
        sum(1 for ids in seq_ids if s in ids) - 1 for s in seqs
    ]


# -------------------------------------------------------------------------------- full contexts


@pytest.mark.invariant("MEM-018")
@pytest.mark.requires(*NEEDS)
@pytest.mark.parametrize(
    ("kind", "config"),
    [("kv", {"kv_size": 300}), ("iswa", {"kv_size": 300, "n_swa": 4, "swa_type": 1})],
    ids=["kv", "iswa"],
)
def test_full_context_apply_places_nothing(target: Any, kind: str, config: dict[str, Any]) -> None:
    """The worst-case context is for graph reservation: applying it reports true and leaves
    every sequence, and where the next batch goes, as they were."""
    mem = target.new_memory(kind, n_seq_max=2, **config)
    decode(target, mem, [[0], [0], [1], [0]], 2, 8)

    def positions() -> list[tuple[int, int]]:
        return [(mem.seq_pos_min(s), mem.seq_pos_max(s)) for s in range(2)]

    with unchanged(positions, f"{kind} sequence positions after applying init_full()"):
        full = mem.init_full()
        assert full.get_status() == SUCCESS
        assert full.apply() is True
    decode(target, mem, [[1], [0]], 2, 8)
    assert positions() == [(0, 3), (0, 1)]


# -------------------------------------------------------------------------------- recurrent copy


@pytest.mark.invariant("MEM-019")
@pytest.mark.requires(*NEEDS)
def test_recurrent_seq_cp_shares_the_source_cell(target: Any) -> None:
    """seq 0's state sits in cell 0 (the first cell is an ordinary source); seq 1's own state
    is dropped, its cell freed; copying from a sequence without state leaves dst without one."""
    rec = target.new_memory("recurrent", n_seq_max=3)
    decode(target, rec, [[0], [0], [1]], 3, 8)  # seq 0 -> cell 0 at pos 1, seq 1 -> cell 1

    def cells() -> tuple[list[tuple[int, tuple[int, ...]]], int]:
        """Each cell's (pos, sequence set), and the used-cell count."""
        st = rec.state()
        return [(c[0], c[3]) for c in st.cells], st.used

    assert cells() == ([(1, (0,)), (0, (1,)), (-1, ())], 2)
    rec.seq_cp(0, 1)
    assert [(rec.seq_pos_min(s), rec.seq_pos_max(s)) for s in range(3)] == [
        (1, 1),
        (1, 1),
        (-1, -1),
    ]
    assert cells() == ([(1, (0, 1)), (-1, ()), (-1, ())], 1)  # seq 1's old cell is freed
    assert [c[2] for c in rec.state().cells] == [0, 0, -1]  # seq s's state index: its cell
    rec.seq_cp(2, 1)  # seq 2 has no state: seq 1 loses its share of cell 0
    assert [(rec.seq_pos_min(s), rec.seq_pos_max(s)) for s in range(3)] == [
        (1, 1),
        (-1, -1),
        (-1, -1),
    ]
    assert cells() == ([(1, (0,)), (-1, ()), (-1, ())], 1)
    assert [c[2] for c in rec.state().cells] == [0, -1, -1]  # seq 1 has no index, as seq 2


@pytest.mark.invariant("MEM-019", "MEM-012")
@pytest.mark.requires(*NEEDS)
def test_recurrent_seq_cp_out_of_range_does_nothing(target: Any) -> None:
    """Ids are checked against the cell count (here 2): one past the last cell or -1, as
    source or destination, and the copy is a no-op that raises nothing. A memory for one
    sequence has max(1, 1) = 1 cell, so a copy to seq 1 is out of range there too."""
    rec = target.new_memory("recurrent", n_seq_max=2)
    decode(target, rec, [[0], [0], [1]], 2, 8)
    with unchanged(rec.state, "recurrent memory after seq_cp with an id outside [0, 2)"):
        for src, dst in ((0, 2), (2, 0), (1, -1), (-1, 1)):
            rec.seq_cp(src, dst)
    assert [(rec.seq_pos_min(s), rec.seq_pos_max(s)) for s in range(2)] == [(1, 1), (0, 0)]
    one = target.new_memory("recurrent", n_seq_max=1)
    decode(target, one, [[0], [0]], 1, 8)
    with unchanged(one.state, "one-cell recurrent memory after seq_cp(0, 1)"):
        one.seq_cp(0, 1)
    assert [(one.seq_pos_min(s), one.seq_pos_max(s)) for s in range(2)] == [(1, 1), (-1, -1)]


# -------------------------------------------------------------------------------- recurrent frees


@pytest.mark.invariant("MEM-020")
@pytest.mark.requires(*NEEDS)
def test_recurrent_seq_rm_frees_the_emptied_cell(target: Any) -> None:
    """Removing seq 1 (alone in cell 1, at position 0) frees that cell: position and source
    back to -1, one cell fewer in use; removing seq 2 from the cell it shares with seq 0
    frees nothing."""
    rec = target.new_memory("recurrent", n_seq_max=3)
    decode(target, rec, [[0], [0], [1]], 3, 8)  # seq 0 -> cell 0 (pos 1), seq 1 -> cell 1
    rec.seq_cp(0, 2)  # seq 2 shares cell 0
    st = rec.state()
    assert [(c[0], c[1], c[3]) for c in st.cells] == [(1, 0, (0, 2)), (0, 1, (1,)), (-1, -1, ())]
    assert st.used == 2
    assert rec.seq_rm(1, -1, -1) is True
    st = rec.state()
    assert [(c[0], c[1], c[3]) for c in st.cells] == [(1, 0, (0, 2)), (-1, -1, ()), (-1, -1, ())]
    assert st.used == 1
    assert rec.seq_rm(2, -1, -1) is True
    st = rec.state()
    assert [(c[0], c[1], c[3]) for c in st.cells] == [(1, 0, (0,)), (-1, -1, ()), (-1, -1, ())]
    assert st.used == 1
    assert [(rec.seq_pos_min(s), rec.seq_pos_max(s)) for s in range(3)] == [
        (1, 1),
        (-1, -1),
        (-1, -1),
    ]
