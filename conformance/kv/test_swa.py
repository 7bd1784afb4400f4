"""Sliding-window attention: the window rule per type, cell reuse in find_slot, the purge of
older positions when a cell is reused, and decision D2 (prepare undoes that purge)."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.assertions import raises_code
from conformance.kv.helpers import cells, expect_code, place, place_tokens, stream, unchanged_cache
from conformance.strategies.kv import run_of

E = (-1, ())
NONE, STANDARD, CHUNKED, SYMMETRIC = 0, 1, 2, 3

# (swa_type, n_swa, key p0, query p1, masked)
WINDOW_TABLE = [
    (NONE, 4, 0, 100, False),
    (STANDARD, 4, 6, 10, True),  # edge: exactly n_swa back
    (STANDARD, 4, 7, 10, False),
    (STANDARD, 4, 10, 10, False),
    (STANDARD, 4, 12, 10, False),  # future keys are the causal rule's business
    (STANDARD, 1, 9, 10, True),
    (STANDARD, 1, 10, 10, False),
    (CHUNKED, 4, 7, 10, True),  # chunk of 10 starts at 8
    (CHUNKED, 4, 8, 10, False),
    (CHUNKED, 4, 11, 10, False),
    (CHUNKED, 4, 7, 8, True),  # 8 starts a new chunk
    (CHUNKED, 4, 4, 7, False),
    (CHUNKED, 4, 3, 7, True),
    (SYMMETRIC, 4, 8, 10, False),  # half window 2
    (SYMMETRIC, 4, 7, 10, True),
    (SYMMETRIC, 4, 12, 10, False),
    (SYMMETRIC, 4, 13, 10, True),
    (SYMMETRIC, 5, 12, 10, False),  # half of 5 is 2
    (SYMMETRIC, 5, 13, 10, True),
]


@pytest.mark.invariant("KV-022")
@pytest.mark.requires("kv.mask")
@pytest.mark.parametrize(("swa_type", "n_swa", "p0", "p1", "masked"), WINDOW_TABLE)
def test_window_rule(
    target: Any, swa_type: int, n_swa: int, p0: int, p1: int, masked: bool
) -> None:
    assert target.swa_is_masked(n_swa, swa_type, p0, p1) is masked


@pytest.mark.invariant("KV-022")
@pytest.mark.requires("kv.cache")
@pytest.mark.parametrize("swa_type", [STANDARD, CHUNKED, SYMMETRIC, 9])
def test_window_needs_size(target: Any, swa_type: int) -> None:
    with raises_code("KV_CONFIG"):
        target.new_kv_cache(kv_size=8, n_swa=0, swa_type=swa_type)


@pytest.mark.invariant("KV-022", "KV-027")
@pytest.mark.requires("kv.cache")
@pytest.mark.parametrize(
    "bad",
    [
        {"kv_size": 0},  # edge: the smallest refused size
        {"kv_size": -1},
        {"kv_size": 8, "swa_type": STANDARD},  # n_swa left at its default 0
        {"kv_size": 8, "swa_type": CHUNKED},
    ],
)
def test_bad_config(target: Any, bad: dict[str, Any]) -> None:
    with raises_code("KV_CONFIG"):
        target.new_kv_cache(**bad)


@pytest.mark.invariant("KV-027")
@pytest.mark.requires("kv.cache")
def test_smallest_config(target: Any) -> None:
    """One cell is a valid cache: it takes one token."""
    c = target.new_kv_cache(kv_size=1)
    place(c, run_of(0, 0, 1))
    assert c.seq_pos_max(0) == 0


def _full(target: Any, swa_type: int, n_swa: int) -> Any:
    """4 cells holding sequence 0 at positions 0..3."""
    c = target.new_kv_cache(kv_size=4, n_swa=n_swa, swa_type=swa_type)
    place(c, run_of(0, 0, 4))
    return c


@pytest.mark.invariant("KV-005")
@pytest.mark.requires("kv.cache")
@pytest.mark.parametrize(
    ("swa_type", "n_swa", "usable"),
    [
        (NONE, 0, []),
        (STANDARD, 2, [0, 1, 2]),  # next query 4: 4 - p >= 2
        (STANDARD, 4, [0]),
        (STANDARD, 5, []),
        (CHUNKED, 2, [0, 1, 2, 3]),  # query 4 starts a chunk: everything before is out
        (CHUNKED, 3, [0, 1, 2]),  # chunk of 4 starts at 3
        (CHUNKED, 5, []),
        (SYMMETRIC, 4, [0, 1]),  # |4 - p| > 2
        (SYMMETRIC, 2, [0, 1, 2]),
    ],
)
def test_reusable_cells(target: Any, swa_type: int, n_swa: int, usable: list[int]) -> None:
    c = _full(target, swa_type, n_swa)
    for n in range(1, 5):
        slot = c.find_slot(run_of(0, 4, n))
        if n <= len(usable):
            assert slot is not None and list(slot.idxs[0]) == usable[:n]
        else:
            assert slot is None
    assert cells(c) == [(p, (0,)) for p in range(4)]  # find_slot changed nothing


@pytest.mark.invariant("KV-005")
@pytest.mark.requires("kv.cache")
def test_shared_cells_are_never_reused(target: Any) -> None:
    c = target.new_kv_cache(kv_size=4, n_seq_max=2, unified=True, n_swa=1, swa_type=STANDARD)
    place(c, run_of(0, 0, 4))
    c.seq_cp(0, 1, 0, 2)
    slot = c.find_slot(run_of(0, 4, 1))
    assert slot is not None and list(slot.idxs[0]) == [2]
    assert c.find_slot(run_of(0, 4, 3)) is None


def _scrambled(target: Any) -> Any:
    """Cells 0..3 hold sequence 0 at positions 2, 3, 0, 1; window 2."""
    c = target.new_kv_cache(kv_size=4, n_swa=2, swa_type=STANDARD)
    place_tokens(c, [(2, [0]), (3, [0]), (0, [0]), (1, [0])])
    return c


@pytest.mark.invariant("KV-009")
@pytest.mark.requires("kv.cache")
def test_reuse_purges_older_positions(target: Any) -> None:
    c = _scrambled(target)
    place(c, run_of(0, 4, 1))  # reuses cell 0 (pos 2): positions 0, 1 go too
    assert cells(c) == [(4, (0,)), (3, (0,)), E, E]
    assert stream(c).head == 1
    assert (c.seq_pos_min(0), c.seq_pos_max(0)) == (3, 4)


@pytest.mark.invariant("KV-008", "KV-012")
@pytest.mark.requires("kv.cache")
def test_prepare_purge_is_undone(target: Any) -> None:
    """Decision D2: a failed prepare leaves the purged cells in place (llama.cpp drops them)."""
    c = _scrambled(target)
    with unchanged_cache(c, "the cache after a failed prepare"):
        assert c.prepare([run_of(0, 4, 1), run_of(0, 5, 4)]) is None
    assert (c.seq_pos_min(0), c.seq_pos_max(0)) == (0, 3)
    with unchanged_cache(c, "the cache after a prepare"):
        slots = c.prepare([run_of(0, 4, 1), run_of(0, 5, 1)])
    assert slots is not None and [list(s.idxs[0]) for s in slots] == [[0], [1]]


@pytest.mark.invariant("KV-005", "KV-009")
@pytest.mark.requires("kv.cache")
def test_decoding_past_the_cache_size_with_a_window(target: Any) -> None:
    """A 4-cell cache with window 3 decodes forever, one token at a time, in ring order."""
    c = target.new_kv_cache(kv_size=4, n_swa=3, swa_type=STANDARD)
    place(c, run_of(0, 0, 3))
    for p in range(3, 12):
        slot = place(c, run_of(0, p, 1))
        assert list(slot.idxs[0]) == [p % 4]
        assert (c.seq_pos_min(0), c.seq_pos_max(0)) == (p - 3, p)
    expect_code(c, "KV_POS_RANGE", c.find_slot, run_of(0, -1, 1))
