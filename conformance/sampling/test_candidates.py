"""The candidate builder and the checks on candidate arrays (SMP-001..004)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.assertions import raises_code, unchanged
from conformance.sampling.support import candidates, chain_of, describe
from conformance.strategies.sampling import (
    FILTER_CAPABILITIES,
    available_filters,
    chains,
    logits_rows,
    token_arrays,
)
from reference_impl.errors import SamplingError
from reference_impl.sampling.token_data import TokenDataArray

F32 = np.float32


@pytest.mark.invariant("SMP-001")
@pytest.mark.requires("sampling.candidates")
@given(row=logits_rows(1, 300), special=st.booleans())
def test_candidates_cover_the_vocabulary_in_id_order(
    target: Any, row: np.ndarray, special: bool
) -> None:
    if special:  # infinities are legal logits
        row = row.copy()
        row[0] = -np.inf
        row[-1] = np.inf if row.shape[0] > 1 else row[-1]
    source = row.astype(np.float64)  # a float64 row is stored as float32
    cur = target.build_candidates(source)
    n = row.shape[0]
    assert cur.size == n
    assert cur.ids.dtype == np.int32 and np.array_equal(cur.ids, np.arange(n))
    assert cur.logits.dtype == np.float32 and np.array_equal(cur.logits, source.astype(F32))
    assert cur.p.dtype == np.float32 and not np.any(cur.p)
    assert cur.selected == -1 and cur.sorted is False
    source[:] = 123.0  # the array is a copy
    assert np.array_equal(cur.logits, row)
    same = row.astype(F32)  # a float32 row needs no conversion, and is still copied
    cur = target.build_candidates(same)
    same[:] = 123.0
    assert np.array_equal(cur.logits, row), "the candidates share the float32 logits row"


@pytest.mark.invariant("SMP-002")
@pytest.mark.requires("sampling.candidates")
@pytest.mark.parametrize(
    ("row", "code", "index"),
    [
        (np.zeros((2, 3), F32), "SMP_LOGITS_SHAPE", None),
        (np.zeros(0, F32), "SMP_LOGITS_SHAPE", None),
        (np.float32(1.0), "SMP_LOGITS_SHAPE", None),
        (np.array([0.0, 1.0, 2.0, np.nan, np.nan], F32), "SMP_NAN_LOGIT", 3),
    ],
    ids=["2-D", "empty", "scalar", "nan"],
)
def test_candidates_reject_bad_rows(
    target: Any, row: np.ndarray, code: str, index: int | None
) -> None:
    with raises_code(code, field="logits", index=index, exc=SamplingError):
        target.build_candidates(row)


def _bad_arrays() -> list[tuple[str, TokenDataArray, str, str, int | None]]:
    ids = np.arange(4, dtype=np.int32)
    lg = np.array([0.5, 1.0, -1.0, 2.0], F32)
    p = np.zeros(4, F32)
    one: Any = 1.0
    return [
        ("short-logits", TokenDataArray(ids, lg[:3], p), "SMP_ARRAY_SHAPE", "logits", None),
        ("short-p", TokenDataArray(ids, lg, p[:2]), "SMP_ARRAY_SHAPE", "p", None),
        ("2-D-ids", TokenDataArray(ids.reshape(2, 2), lg, p), "SMP_ARRAY_SHAPE", "ids", None),
        ("empty", TokenDataArray(ids[:0], lg[:0], p[:0]), "SMP_EMPTY_CANDIDATES", "ids", None),
        ("float-ids", TokenDataArray(ids.astype(F32), lg, p), "SMP_TOKEN_ID", "ids", None),
        (
            "id-range",
            TokenDataArray(np.array([0, 1, 2**31, 3], np.int64), lg, p),
            "SMP_TOKEN_ID",
            "ids",
            2,
        ),
        (
            "id-range-low",
            TokenDataArray(np.array([0, -(2**31) - 1, 1, 3], np.int64), lg, p),
            "SMP_TOKEN_ID",
            "ids",
            1,
        ),
        (
            "nan",
            TokenDataArray(ids, np.array([0.0, np.nan, 1.0, 2.0], F32), p),
            "SMP_NAN_LOGIT",
            "logits",
            1,
        ),
        ("selected-high", TokenDataArray(ids, lg, p, 4), "SMP_SELECTED_RANGE", "selected", 4),
        ("selected-low", TokenDataArray(ids, lg, p, -2), "SMP_SELECTED_RANGE", "selected", -2),
        # in range, but not an integer: a bool and a float are refused, not read as 1
        ("selected-bool", TokenDataArray(ids, lg, p, True), "SMP_SELECTED_RANGE", "selected", None),
        ("selected-float", TokenDataArray(ids, lg, p, one), "SMP_SELECTED_RANGE", "selected", None),
    ]


@pytest.mark.invariant("SMP-003")
@pytest.mark.requires("sampling.chain", "sampling.input_checks", "sampling.dist")
@pytest.mark.parametrize("case", _bad_arrays(), ids=lambda c: c[0])
def test_apply_rejects_bad_arrays_without_touching_the_stream(
    target: Any, make_chain: Any, case: tuple[str, TokenDataArray, str, str, int | None]
) -> None:
    _, bad, code, field, index = case
    seeded, fresh = make_chain([["dist", {"seed": 77}]]), make_chain([["dist", {"seed": 77}]])
    with raises_code(code, field=field, index=index, exc=SamplingError):
        target.sampler_apply(seeded, bad)
    good = candidates(np.zeros(500, F32))
    after = [target.sampler_apply(seeded, good).selected for _ in range(6)]
    expected = [target.sampler_apply(fresh, good).selected for _ in range(6)]
    assert after == expected, "a rejected call advanced the random stream"


@pytest.mark.invariant("SMP-003")
@pytest.mark.requires("sampling.chain", "sampling.input_checks", "sampling.greedy")
def test_apply_accepts_wide_ids_at_the_int32_bounds(target: Any, make_chain: Any) -> None:
    # int64 ids equal to INT32_MIN and INT32_MAX are in range: stored as int32, greedy picks
    # the row of the largest logit
    ids = np.array([-(2**31), 0, 2**31 - 1, 5], np.int64)
    cur = TokenDataArray(ids, np.array([0.5, 1.0, 2.0, -1.0], F32), np.zeros(4, F32))
    out = target.sampler_apply(make_chain([["greedy", {}]]), cur)
    assert out.ids.dtype == np.int32 and out.ids.tolist() == ids.tolist(), describe(out)
    assert out.selected == 2, describe(out)


@pytest.mark.invariant("SMP-004")
@pytest.mark.requires("sampling.chain", "sampling.dist")
@pytest.mark.uses(*FILTER_CAPABILITIES)
@given(cur=token_arrays(1, 80, max_scale=2.0), data=st.data(), selected=st.integers(-1, 0))
def test_apply_leaves_the_input_unchanged(
    target: Any, cur: TokenDataArray, data: st.DataObject, selected: int
) -> None:
    spec = data.draw(chains(available_filters(target)), label="spec")
    cur.selected = selected
    with unchanged(lambda: cur, "the input candidates"), chain_of(target, spec) as handle:
        out = target.sampler_apply(handle, cur)
    assert out is not cur
