"""Golden scenarios for every sequence operation (spec/kv.md KV-013 .. KV-021)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from conformance.kv.helpers import (
    cache_state,
    cells,
    expect_code,
    exts,
    place,
    place_run,
    place_tokens,
    stream,
    unchanged_cache,
)
from conformance.strategies.kv import state_tuple, ubatch_from_lists

E = (-1, ())  # an empty cell


@pytest.fixture
def cache(target: Any) -> Any:
    """16 cells, one stream: seq 0 at positions 0..5 in cells 0..5."""
    c = target.new_kv_cache(kv_size=16, n_seq_max=4, unified=True)
    place_run(c, 0, 0, 6)
    return c


@pytest.mark.invariant("KV-014")
@pytest.mark.requires("kv.cache")
def test_seq_rm_partial_range_moves_head_down(cache: Any) -> None:
    assert stream(cache).head == 6
    assert cache.seq_rm(0, 2, 4) is True
    assert cells(cache)[:6] == [(0, (0,)), (1, (0,)), E, E, (4, (0,)), (5, (0,))]
    assert stream(cache).head == 2  # lowest emptied cell
    assert (cache.seq_pos_min(0), cache.seq_pos_max(0)) == (0, 5)


@pytest.mark.invariant("KV-001", "KV-014")
@pytest.mark.requires("kv.cache")
def test_seq_pos_bounds_after_many_removals(target: Any) -> None:
    """Forty positions removed one at a time from the middle out: the bounds stay exact however
    many removed positions the cache has seen (the first placed, 38, is neither end)."""
    c = target.new_kv_cache(kv_size=48)
    order = [38, 0, 39, *range(1, 38)]
    place(c, ubatch_from_lists(order, [[0]] * len(order)))
    for p in [*range(1, 38), 38, 0, 39]:
        c.seq_rm(0, p, p + 1)
        held = [q for q, seqs in cells(c) if 0 in seqs]
        want = (min(held), max(held)) if held else (-1, -1)
        assert (c.seq_pos_min(0), c.seq_pos_max(0)) == want, f"after removing position {p}"


@pytest.mark.invariant("KV-014", "KV-013")
@pytest.mark.requires("kv.cache")
def test_seq_rm_negative_bounds_mean_open_ends(cache: Any) -> None:
    top = 2**31 - 2  # the largest position whose successor is still an int32 (llama_pos)
    place_tokens(cache, [(top, [0])])  # cell 6
    cache.seq_rm(0, -1, 2)  # [0, 2)
    assert cells(cache)[:3] == [E, E, (2, (0,))]
    cache.seq_rm(0, 4, -1)  # [4, +inf): also the cell at the top position
    assert (cache.seq_pos_min(0), cache.seq_pos_max(0)) == (2, 3)
    assert cells(cache)[4:7] == [E, E, E]
    assert stream(cache).head == 0


@pytest.mark.invariant("KV-013")
@pytest.mark.requires("kv.cache")
def test_open_ranges_end_before_the_largest_position(cache: Any) -> None:
    """A negative ``p1`` is llama_pos's maximum 2**31 - 1, itself excluded: a cell at that
    position is in no range (llama.cpp `pos_in`), while one at 2**31 - 2 is."""
    top = 2**31 - 1
    place_tokens(cache, [(top - 1, [0]), (top, [0])])  # cells 6 and 7
    cache.seq_cp(0, 1, -1, -1)
    assert cells(cache)[5:8] == [(5, (0, 1)), (top - 1, (0, 1)), (top, (0,))]
    cache.seq_add(0, -1, -1, -3)  # cells 0..2 fall below 0 and are emptied
    shifted = [(0, (0, 1)), (1, (0, 1)), (2, (0, 1)), (top - 4, (0, 1)), (top, (0,))]
    assert cells(cache)[:8] == [E, E, E, *shifted]
    cache.seq_rm(0, 1, -1)
    assert cells(cache)[3:8] == [(0, (0, 1)), (1, (1,)), (2, (1,)), (top - 4, (1,)), (top, (0,))]
    cache.seq_rm(-1, -1, -1)
    assert cells(cache)[:8] == [E] * 7 + [(top, (0,))]
    assert (cache.seq_pos_min(0), cache.seq_pos_max(0)) == (top, top)


@pytest.mark.invariant("KV-014")
@pytest.mark.requires("kv.cache")
def test_seq_rm_keeps_cells_shared_with_other_sequences(cache: Any) -> None:
    cache.seq_cp(0, 1, 0, 3)
    head = stream(cache).head
    cache.seq_rm(0, -1, -1)
    assert cells(cache)[:6] == [(0, (1,)), (1, (1,)), (2, (1,)), E, E, E]
    assert stream(cache).head == min(head, 3)
    assert cache.seq_pos_max(0) == -1 and cache.seq_pos_max(1) == 2


@pytest.mark.invariant("KV-014")
@pytest.mark.requires("kv.cache")
def test_seq_rm_all_sequences_in_every_stream(target: Any) -> None:
    c = target.new_kv_cache(kv_size=8, n_seq_max=2)
    place_run(c, 0, 0, 4)
    place_run(c, 1, 0, 3)
    assert c.seq_rm(-1, 1, 3) is True
    assert cells(c, 0)[:4] == [(0, (0,)), E, E, (3, (0,))]
    assert cells(c, 1)[:3] == [(0, (1,)), E, E]
    assert (stream(c, 0).head, stream(c, 1).head) == (1, 1)


@pytest.mark.invariant("KV-013")
@pytest.mark.requires("kv.cache")
@pytest.mark.parametrize(
    "op",
    [
        ("seq_rm", 0, 4, 2),
        ("seq_rm", -1, 3, 3),
        ("seq_cp", 0, 1, 5, 1),
        ("seq_add", 0, 4, 2, 3),
        ("seq_add", 0, 3, 3, -2),
        ("seq_div", 0, 5, 1, 2),
    ],
)
def test_reversed_or_empty_range_changes_nothing(cache: Any, op: tuple[Any, ...]) -> None:
    name, *args = op
    with unchanged_cache(cache):
        result = getattr(cache, name)(*args)
    if name == "seq_rm":
        assert result is True


@pytest.mark.invariant("KV-015")
@pytest.mark.requires("kv.cache")
def test_seq_cp_same_stream_shares_cells(cache: Any) -> None:
    cache.seq_cp(0, 2, 1, 4)
    assert cells(cache)[:6] == [
        (0, (0,)),
        (1, (0, 2)),
        (2, (0, 2)),
        (3, (0, 2)),
        (4, (0,)),
        (5, (0,)),
    ]
    assert (cache.seq_pos_min(2), cache.seq_pos_max(2)) == (1, 3)
    before = state_tuple(cache.state())
    cache.seq_cp(0, 2, 0, -1)  # cells 1..3 already hold 2: unchanged, the others gain it
    cache.seq_cp(0, 0, -1, -1)  # src == dst: nothing
    assert cells(cache)[0] == (0, (0, 2)) and cells(cache)[5] == (5, (0, 2))
    assert state_tuple(cache.state()) != before
    cache.seq_rm(2, 0, 1)
    assert cache.seq_pos_min(2) == 1  # one cell per position, no double count


@pytest.mark.invariant("KV-016")
@pytest.mark.requires("kv.cache")
def test_seq_cp_across_streams_full_range(target: Any) -> None:
    c = target.new_kv_cache(kv_size=8, n_seq_max=3)
    place_run(c, 0, 0, 4)
    place_run(c, 2, 0, 2)
    c.seq_rm(0, 1, 2)
    c.seq_add(0, 2, -1, 1)  # cells 2, 3 -> positions 3, 4 with pending shift 1
    c.seq_cp(0, 2, -1, -1)
    s0, s2 = stream(c, 0), stream(c, 2)
    assert cells(c, 2)[:4] == [(0, (2,)), E, (3, (2,)), (4, (2,))]
    assert s2.shift[:4] == s0.shift[:4] == (0, 0, 1, 1)
    assert s2.head == s0.head
    assert s2.has_shift is True
    assert tuple(c.state().pending_copies) == ((0, 2),)
    assert c.update().copied == ((0, 2),)
    assert tuple(c.state().pending_copies) == ()


@pytest.mark.invariant("KV-016")
@pytest.mark.requires("kv.cache")
def test_seq_cp_across_streams_copies_2d_extensions(target: Any) -> None:
    """M-RoPE cells copied to another stream keep their 2-D extension (llama.cpp copies
    ``ext`` with the cell); the destination's own cells, and their extensions, are gone."""
    c = target.new_kv_cache(kv_size=4, n_seq_max=2, n_pos_per_embd=4)
    place(c, ubatch_from_lists([[4, 5, 6], [1, 2, 3], [3, 7, 9], [0, 0, 0]], [[0], [0], [0]]))
    c.seq_rm(0, 5, 6)  # a hole at cell 1
    place(c, ubatch_from_lists([[0, 1, 2, 3], [5] * 4, [6] * 4, [0] * 4], [[1]] * 4))
    assert exts(c, 1) == [(6, 5)] * 4
    c.seq_cp(0, 1, -1, -1)
    assert cells(c, 1) == [(4, (1,)), E, (6, (1,)), E]
    assert exts(c, 1) == [(3, 1), (0, 0), (9, 3), (0, 0)]
    assert exts(c, 0) == [(3, 1), (0, 0), (9, 3), (0, 0)]


@pytest.mark.invariant("KV-016")
@pytest.mark.requires("kv.cache")
@pytest.mark.parametrize(
    ("p0", "p1", "full"),
    [
        (0, -1, True),
        (-1, 0, True),
        (7, 8, True),
        (0, 7, True),
        (1, -1, False),
        (0, 6, False),
        (6, -1, False),
    ],
)
def test_seq_cp_across_streams_needs_full_range(target: Any, p0: int, p1: int, full: bool) -> None:
    c = target.new_kv_cache(kv_size=8, n_seq_max=2)
    place_run(c, 0, 0, 3)
    if full:
        c.seq_cp(0, 1, p0, p1)
        assert c.seq_pos_max(1) == 2
    else:
        expect_code(c, "KV_CROSS_STREAM_PARTIAL", c.seq_cp, 0, 1, p0, p1, seq_id=1)


@pytest.mark.invariant("KV-017")
@pytest.mark.requires("kv.cache")
def test_seq_keep_drops_other_sequences(cache: Any) -> None:
    cache.seq_cp(0, 1, 2, 4)
    place_tokens(cache, [(0, [3]), (1, [3])])
    cache.seq_rm(0, 0, 2)
    assert stream(cache).head == 0
    place_tokens(cache, [(9, [2])])  # head -> 1
    cache.seq_keep(1)
    assert cells(cache)[:8] == [E, E, (2, (1,)), (3, (1,)), E, E, E, E]
    assert stream(cache).head == 0
    assert [cache.seq_pos_max(s) for s in range(4)] == [-1, 3, -1, -1]


@pytest.mark.invariant("KV-017")
@pytest.mark.requires("kv.cache")
def test_seq_keep_leaves_other_streams(target: Any) -> None:
    c = target.new_kv_cache(kv_size=8, n_seq_max=2)
    place_run(c, 0, 0, 2)
    place_run(c, 1, 0, 3)
    c.seq_keep(0)
    assert c.seq_pos_max(1) == 2 and c.seq_pos_max(0) == 1


@pytest.mark.invariant("KV-018")
@pytest.mark.requires("kv.cache")
def test_seq_add_shifts_all_sharing_sequences_and_evicts_negative(cache: Any) -> None:
    cache.seq_cp(0, 1, 0, 2)
    cache.seq_add(0, 0, 4, -2)  # 0, 1 -> negative (emptied); 2, 3 -> 0, 1
    assert cells(cache)[:6] == [E, E, (0, (0,)), (1, (0,)), (4, (0,)), (5, (0,))]
    assert stream(cache).shift[:6] == (0, 0, -2, -2, 0, 0)
    assert stream(cache).head == 0  # lowest emptied cell
    assert cache.seq_pos_max(1) == -1  # its shared cells went with them
    cache.seq_add(0, 4, -1, 10)  # nothing emptied: head restarts at 0
    assert cells(cache)[4:6] == [(14, (0,)), (15, (0,))]
    assert stream(cache).head == 0
    assert stream(cache).has_shift is True


@pytest.mark.invariant("KV-018")
@pytest.mark.requires("kv.cache")
def test_seq_add_zero_is_a_no_op(cache: Any) -> None:
    with unchanged_cache(cache):
        cache.seq_add(0, -1, -1, 0)


@pytest.mark.invariant("KV-018")
@pytest.mark.requires("kv.cache")
def test_seq_add_head_moves_to_first_emptied_cell(cache: Any) -> None:
    cache.seq_rm(0, 0, 1)
    place_tokens(cache, [(0, [1])])  # cell 0 for seq 1; head 1
    cache.seq_add(0, 2, 5, -3)  # positions 2 -> -1 (cell 2 emptied), 3 -> 0, 4 -> 1
    assert stream(cache).head == 2
    assert cells(cache)[:6] == [(0, (1,)), (1, (0,)), E, (0, (0,)), (1, (0,)), (5, (0,))]
    assert cache.seq_pos_min(0) == 0 and cache.seq_pos_max(0) == 5


@pytest.mark.invariant("KV-019", "KV-025")
@pytest.mark.requires("kv.cache")
def test_seq_div_shift_sign(target: Any) -> None:
    """Decision D1: pos 7, d = 2 -> pos 3 with pending shift -4 (llama.cpp: +4)."""
    c = target.new_kv_cache(kv_size=8)
    place_run(c, 0, 4, 4)  # positions 4..7
    c.seq_div(0, -1, -1, 2)
    s = stream(c)
    assert s.pos[:4] == (2, 2, 3, 3)
    assert s.shift[:4] == (-2, -3, -3, -4)
    assert all(p - sh == 4 + i for i, (p, sh) in enumerate(zip(s.pos[:4], s.shift[:4])))
    assert (c.seq_pos_min(0), c.seq_pos_max(0)) == (2, 3)
    c.seq_rm(0, 3, 4)
    assert c.seq_pos_max(0) == 2  # both cells at 3 went; the two at 2 remain


@pytest.mark.invariant("KV-019")
@pytest.mark.requires("kv.cache")
def test_seq_div_range_head_and_bad_divisor(cache: Any) -> None:
    head = stream(cache).head
    cache.seq_div(0, 2, 5, 2)  # 2,3,4 -> 1,1,2
    assert stream(cache).pos[:6] == (0, 1, 1, 1, 2, 5)
    assert stream(cache).head == head
    with unchanged_cache(cache):
        cache.seq_div(0, -1, -1, 1)
    for d in (0, -2):
        expect_code(cache, "KV_DIVISOR", cache.seq_div, 0, -1, -1, d)


@pytest.mark.invariant("KV-020")
@pytest.mark.requires("kv.cache")
def test_shifts_refused_for_mrope(target: Any) -> None:
    c = target.new_kv_cache(kv_size=8, n_pos_per_embd=4)
    place_run(c, 0, 0, 2)
    expect_code(c, "KV_SHIFT_UNSUPPORTED", c.seq_add, 0, -1, -1, 1)
    expect_code(c, "KV_SHIFT_UNSUPPORTED", c.seq_div, 0, -1, -1, 2)


@pytest.mark.invariant("KV-021")
@pytest.mark.requires("kv.cache")
def test_clear_resets_cells_heads_and_flags_but_keeps_scheduled_copies(target: Any) -> None:
    c = target.new_kv_cache(kv_size=8, n_seq_max=2)
    place_run(c, 0, 0, 3)
    c.seq_add(0, -1, -1, 2)
    c.seq_cp(0, 1, -1, -1)
    c.clear()
    for s in c.state().streams:
        assert set(s.pos) == {-1} and s.head == 0 and s.used == 0 and s.has_shift is False
    assert tuple(c.state().pending_copies) == ((0, 1),)


@pytest.mark.invariant("KV-021")
@pytest.mark.requires("kv.cache")
def test_clear_leaves_cells_as_in_a_new_cache(target: Any) -> None:
    """Emptied M-RoPE cells keep no 2-D extension: the state equals a new cache's."""
    c = target.new_kv_cache(kv_size=4, n_pos_per_embd=4)
    place(c, ubatch_from_lists([[5, 5], [1, 2], [3, 4], [0, 0]], [[0], [0]]))
    assert exts(c)[:2] == [(3, 1), (4, 2)]
    c.clear()
    assert cache_state(c) == cache_state(target.new_kv_cache(kv_size=4, n_pos_per_embd=4))


@pytest.mark.invariant("KV-021")
@pytest.mark.requires("kv.cache", "kv.storage")
def test_clear_zeroes_the_tensors_by_default(target: Any) -> None:
    """``clear()`` without arguments means ``data=True``: every K and V tensor is zeroed."""
    c = target.new_kv_cache(kv_size=4, n_layer=2)
    slot = place_run(c, 0, 0, 3)
    k = torch.arange(1, 4, dtype=torch.float32).reshape(3, 1, 1)
    for layer in (0, 1):
        c.write_kv(layer, slot, k, -k)
    assert all(float(t.abs().sum()) > 0.0 for t in (*c.k, *c.v))
    c.clear()
    assert all(float(t.abs().sum()) == 0.0 for t in (*c.k, *c.v))


@pytest.mark.invariant("KV-014", "KV-017")
@pytest.mark.requires("kv.cache")
@pytest.mark.parametrize(
    ("op", "args"),
    [("seq_rm", (1, -1, -1)), ("seq_rm", (-1, 5, 6)), ("seq_rm", (1, 5, 6)), ("seq_keep", (0,))],
)
def test_emptied_mrope_cell_keeps_no_extension(target: Any, op: str, args: tuple[int, ...]) -> None:
    """A cell emptied by ``seq_rm`` / ``seq_keep`` is as in a new cache: no sequence, shift 0
    and 2-D extension (0, 0) (llama_kv_cells::seq_rm / seq_keep reset ``ext``); the cell
    that stays keeps its extension."""
    c = target.new_kv_cache(kv_size=4, n_pos_per_embd=4)
    place(c, ubatch_from_lists([[4, 5], [1, 2], [3, 7], [0, 0]], [[0], [1]]))
    assert exts(c)[:2] == [(3, 1), (7, 2)]
    getattr(c, op)(*args)
    s = stream(c)
    assert cells(c) == [(4, (0,)), E, E, E], (op, args)
    assert [tuple(e) for e in s.ext] == [(3, 1), (0, 0), (0, 0), (0, 0)], (op, args)
    assert tuple(s.shift) == (0, 0, 0, 0) and s.used == 1, (op, args)


@pytest.mark.invariant("KV-003")
@pytest.mark.requires("kv.cache")
@pytest.mark.parametrize(
    ("config", "n_stream", "valid", "invalid"),
    [
        ({"kv_size": 8, "n_seq_max": 1}, 1, [0, 255], [256, -1]),
        ({"kv_size": 8, "n_seq_max": 3, "unified": True}, 1, [0, 200], [256]),
        ({"kv_size": 8, "n_seq_max": 3}, 3, [0, 2], [3, 255, -5]),
    ],
)
def test_streams_and_sequence_ids(
    target: Any, config: dict[str, Any], n_stream: int, valid: list[int], invalid: list[int]
) -> None:
    c = target.new_kv_cache(**config)
    assert len(c.state().streams) == n_stream
    limit = 256 if n_stream == 1 else n_stream
    for s in valid:
        assert c.seq_pos_max(s) == -1
        c.seq_keep(s)
    for s in invalid:
        for err in (
            expect_code(c, "KV_SEQ_ID_RANGE", c.seq_pos_min, s, seq_id=s),
            expect_code(c, "KV_SEQ_ID_RANGE", c.seq_cp, 0, s, -1, -1),
        ):
            # the message gives the accepted ids; -1 is not one of them here
            assert f" in [0, {limit})" in str(err) and "-1 or" not in str(err), str(err)
    err = expect_code(c, "KV_SEQ_ID_RANGE", c.seq_rm, -2, -1, -1)
    assert f"-1 or in [0, {limit})" in str(err), str(err)
    assert c.seq_rm(-1, -1, -1) is True
