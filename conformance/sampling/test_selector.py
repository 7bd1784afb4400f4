"""EMEL's token selector and candidate normalisation (SMP-070..073)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.assertions import assert_close, raises_code
from conformance.strategies.sampling import tied_logits_rows, token_arrays
from reference_impl.errors import SamplingError
from reference_impl.sampling.token_data import TokenDataArray

F32 = np.float32


@pytest.mark.invariant("SMP-070")
@pytest.mark.requires("sampling.selector")
@given(row=tied_logits_rows(1, 24), shift=st.floats(-50.0, 50.0), seed=st.integers(0, 2**16))
def test_argmax_picks_the_first_maximum(
    target: Any, row: np.ndarray, shift: float, seed: int
) -> None:
    ids = np.random.default_rng(seed).permutation(100)[: row.shape[0]]
    first = int(np.flatnonzero(row == row.max())[0])
    assert target.select_token(ids, row, "argmax") == ids[first]
    if np.isfinite(row.max()):
        assert target.select_token(ids, row + F32(shift), "argmax") == ids[first]


@pytest.mark.invariant("SMP-071")
@pytest.mark.requires("sampling.selector")
@given(row=tied_logits_rows(1, 24), u=st.floats(0.0, 1.0, exclude_max=True))
def test_categorical_follows_the_running_weight(target: Any, row: np.ndarray, u: float) -> None:
    if not np.isfinite(row.max()):
        return  # no mass: covered by SMP-072
    ids = np.arange(100, 100 + row.shape[0])
    w = np.exp(row.astype(np.float64) - row.max())
    running = np.cumsum(w)
    goal = u * running[-1]
    index = min(int(np.searchsorted(running, goal)), row.shape[0] - 1)
    allowed = {ids[index]}
    near = np.abs(running - goal) <= 1e-9 * running[-1]  # rounding may land on either side
    allowed |= {ids[min(i + 1, row.shape[0] - 1)] for i in np.flatnonzero(near)}
    assert target.select_token(ids, row, "categorical", u) in allowed
    # u = 0: the first candidate, whatever its weight (running sum 0 >= target 0)
    assert target.select_token(ids, row, "categorical", 0.0) == ids[0]


@pytest.mark.invariant("SMP-071")
@pytest.mark.requires("sampling.selector")
def test_categorical_examples(target: Any) -> None:
    ids = [7, 8, 9]
    scores = np.log([0.2, 0.5, 0.3])
    picks = [
        target.select_token(ids, scores, "categorical", u)
        for u in (0.0, 0.19, 0.21, 0.69, 0.71, 0.999)
    ]
    assert picks == [7, 7, 8, 8, 9, 9]
    assert target.select_token(ids, [float("-inf"), 0.0, 0.0], "categorical", 0.0) == 7
    assert target.select_token(ids, [float("-inf"), 0.0, 0.0], "categorical", 1e-12) == 8
    # weights are relative to the maximum: huge logits must not overflow (e, 1, 1/e scaled)
    big = [1000.0, 999.0, 998.0]  # weights 0.665, 0.245, 0.090
    assert [target.select_token(ids, big, "categorical", u) for u in (0.5, 0.7, 0.95)] == [7, 8, 9]
    assert target.select_token(ids[:2], [-1000.0, -1001.0], "categorical", 0.8) == 8


@pytest.mark.invariant("SMP-072")
@pytest.mark.requires("sampling.selector")
@pytest.mark.parametrize(
    ("ids", "scores", "policy", "u", "code"),
    [
        ([], [], "argmax", None, "SMP_EMPTY_CANDIDATES"),
        ([1, 2], [0.0], "argmax", None, "SMP_ARRAY_SHAPE"),
        ([[1, 2]], [[0.0, 1.0]], "argmax", None, "SMP_ARRAY_SHAPE"),
        ([1, 2], [0.0, 1.0], "top1", None, "SMP_POLICY"),
        ([1, 2], [0.0, 1.0], "categorical", None, "SMP_RANDOM_RANGE"),
        ([1, 2], [0.0, 1.0], "categorical", 1.0, "SMP_RANDOM_RANGE"),
        ([1, 2], [0.0, 1.0], "categorical", -0.1, "SMP_RANDOM_RANGE"),
        ([1, 2], [0.0, 1.0], "categorical", float("nan"), "SMP_RANDOM_RANGE"),
        ([1, 2], [float("-inf")] * 2, "categorical", 0.5, "SMP_NO_MASS"),
    ],
    ids=[
        "empty",
        "lengths",
        "2-D",
        "policy",
        "u-missing",
        "u-one",
        "u-negative",
        "u-nan",
        "no-mass",
    ],
)
def test_selector_rejects_bad_input(
    target: Any, ids: Any, scores: Any, policy: str, u: Any, code: str
) -> None:
    with raises_code(code, exc=SamplingError):
        target.select_token(ids, scores, policy, u)


@pytest.mark.invariant("SMP-073")
@pytest.mark.requires("sampling.selector")
@given(cur=token_arrays(1, 60))
def test_normalize_moves_the_maximum_to_zero(target: Any, cur: TokenDataArray) -> None:
    out = target.normalize_scores(cur)
    assert float(np.max(out.logits)) == 0.0
    want = cur.logits.astype(np.float64) - cur.logits.max()
    assert_close(want, out.logits, atol=1e-6, rtol=1e-7, what="normalized scores")
    assert np.array_equal(out.ids, cur.ids) and np.array_equal(out.p, cur.p)
    assert int(np.argmax(out.logits)) == int(np.argmax(cur.logits)) and out.sorted == cur.sorted


@pytest.mark.invariant("SMP-073")
@pytest.mark.requires("sampling.selector")
@pytest.mark.parametrize(
    "logits",
    [[-np.inf, -np.inf, -np.inf], [1.5, np.inf, -2.0], [np.inf, -np.inf, np.inf]],
    ids=["all--inf", "one-+inf", "+inf-and--inf"],
)
def test_normalize_keeps_a_row_without_a_finite_maximum(target: Any, logits: list[float]) -> None:
    ids = np.array([3, 1, 8], np.int32)
    p = np.array([0.25, 0.5, 0.25], F32)
    cur = TokenDataArray(ids, np.array(logits, F32), p, -1, False)
    out = target.normalize_scores(cur)
    assert np.array_equal(out.logits, np.array(logits, F32)), f"logits {out.logits.tolist()}"
    assert np.array_equal(out.ids, ids) and np.array_equal(out.p, p) and out.sorted is False


# ---- SMP-085: EMEL's sampler pipeline ---------------------------------------------------------


@pytest.mark.invariant("SMP-085")
@pytest.mark.requires("sampling.pipeline")
@given(row=tied_logits_rows(1, 24))
def test_pipeline_without_samplers_is_the_first_argmax(target: Any, row: np.ndarray) -> None:
    assert target.sample_pipeline(row, []) == int(np.flatnonzero(row == row.max())[0])


@pytest.mark.invariant("SMP-085")
@pytest.mark.requires("sampling.pipeline")
@given(row=tied_logits_rows(2, 24))
def test_pipeline_samplers_rescore_and_permute_in_order(target: Any, row: np.ndarray) -> None:
    seen: list[tuple[list[int], list[float]]] = []

    def record(ids: np.ndarray, scores: np.ndarray) -> bool:
        seen.append((ids.tolist(), scores.tolist()))
        return True

    def negate(ids: np.ndarray, scores: np.ndarray) -> bool:
        scores *= -1
        return True

    def reverse(ids: np.ndarray, scores: np.ndarray) -> bool:
        ids[:] = ids[::-1].copy()
        scores[:] = scores[::-1].copy()
        return True

    n = row.shape[0]
    assert target.sample_pipeline(row, [record]) == int(np.argmax(row))
    # the candidates a sampler sees: every id in order, the raw (not normalized) logits
    assert seen[0] == (list(range(n)), row.astype(np.float32).tolist())
    low = -row.astype(np.float32)
    assert target.sample_pipeline(row, [negate]) == int(np.flatnonzero(low == low.max())[0])
    # after a permutation the first maximum in the new order wins: the last tied id
    last = int(np.flatnonzero(row == row.max())[-1])
    assert target.sample_pipeline(row, [reverse]) == last
    # order matters: the second sampler sees the first one's result
    seen.clear()
    target.sample_pipeline(row, [negate, record])
    assert seen[0][1] == low.tolist()


@pytest.mark.invariant("SMP-085")
@pytest.mark.requires("sampling.pipeline")
@pytest.mark.parametrize("k", [0, 1, 2])
def test_a_failing_sampler_stops_the_pipeline(target: Any, k: int) -> None:
    calls: list[int] = []

    def ok(i: int) -> Any:
        def sampler(ids: np.ndarray, scores: np.ndarray) -> bool:
            calls.append(i)
            return True

        return sampler

    samplers: list[Any] = [ok(0), ok(1), ok(2), ok(3)]
    samplers[k] = lambda ids, scores: False
    row = np.array([0.5, 2.0, -1.0], F32)
    with raises_code("SMP_SAMPLER_FAILED", field="samplers", index=k):
        target.sample_pipeline(row, samplers)
    assert calls == [i for i in range(k)], "no sampler after the failing one may run"
    samplers[k] = None
    calls.clear()
    with raises_code("SMP_SAMPLER_FAILED", field="samplers", index=k):
        target.sample_pipeline(row, samplers)
    assert calls == list(range(k))
    with raises_code("SMP_EMPTY_CANDIDATES", field="logits"):
        target.sample_pipeline(np.zeros(0, F32), [])
