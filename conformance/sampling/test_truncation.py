"""top-k, top-p, min-p, typical, top-n-sigma (SMP-030..035): the golden vectors of
llama.cpp's tests/test-sampling.cpp, its sampler-queue cases, and property tests."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from conformance.assertions import assert_close
from conformance.sampling.support import apply_once, describe, from_probs, needs_samplers
from conformance.strategies.sampling import token_arrays
from reference_impl.sampling.token_data import TokenDataArray

F32 = np.float32
DIST0 = ["dist", {"seed": 0}]
P4 = [0.1, 0.2, 0.3, 0.4]

# (invariant, name, input probs, chain, expected p in result order); logits = logf(prob).
# tests/test-sampling.cpp follows every filter but typical with dist(0), whose normalised p
# it checks to 1e-5.
GOLDEN: list[tuple[str, str, list[float], list[Any], list[float]]] = [
    ("SMP-030", "top_k-1", P4, [["top_k", {"k": 1}], DIST0], [1.0]),
    ("SMP-030", "top_k-3", P4, [["top_k", {"k": 3}], DIST0], [0.44444, 0.33333, 0.22222]),
    ("SMP-030", "top_k-4", P4, [["top_k", {"k": 4}], DIST0], [0.4, 0.3, 0.2, 0.1]),
    ("SMP-030", "top_k-0", P4, [["top_k", {"k": 0}], DIST0], [0.1, 0.2, 0.3, 0.4]),
    ("SMP-031", "top_p-0", P4, [["top_p", {"p": 0.0}], DIST0], [1.0]),
    ("SMP-031", "top_p-0.7", P4, [["top_p", {"p": 0.7}], DIST0], [0.571429, 0.428571]),
    ("SMP-031", "top_p-0.8", P4, [["top_p", {"p": 0.8}], DIST0], [0.44444, 0.33333, 0.22222]),
    ("SMP-031", "top_p-1", P4, [["top_p", {"p": 1.0}], DIST0], [0.1, 0.2, 0.3, 0.4]),
    ("SMP-032", "min_p-0", P4, [["min_p", {"p": 0.0}], DIST0], [0.1, 0.2, 0.3, 0.4]),
    ("SMP-032", "min_p-0.24", P4, [["min_p", {"p": 0.24}], DIST0], [0.1, 0.2, 0.3, 0.4]),
    ("SMP-032", "min_p-0.26", P4, [["min_p", {"p": 0.26}], DIST0], [2 / 9, 3 / 9, 4 / 9]),
    ("SMP-032", "min_p-0.49", P4, [["min_p", {"p": 0.49}], DIST0], [2 / 9, 3 / 9, 4 / 9]),
    ("SMP-032", "min_p-0.51", P4, [["min_p", {"p": 0.51}], DIST0], [3 / 7, 4 / 7]),
    ("SMP-032", "min_p-0.74", P4, [["min_p", {"p": 0.74}], DIST0], [3 / 7, 4 / 7]),
    ("SMP-032", "min_p-0.76", P4, [["min_p", {"p": 0.76}], DIST0], [1.0]),
    ("SMP-032", "min_p-1", P4, [["min_p", {"p": 1.0}], DIST0], [1.0]),
    ("SMP-033", "min_p-1.05", P4, [["min_p", {"p": 1.05}], DIST0], [1.0]),
    ("SMP-034", "typical-peaked", [0.97, 0.01, 0.01, 0.01], [["typical", {"p": 0.5}]], [0.97]),
    ("SMP-034", "typical-flat", [0.4, 0.2, 0.2, 0.2], [["typical", {"p": 0.5}]], [0.2, 0.2, 0.2]),
    (
        "SMP-035",
        "top_n_sigma-1",
        P4,
        [["top_n_sigma", {"n": 1.0}], DIST0],
        [0.0, 0.0, 0.428571, 0.571429],
    ),
    ("SMP-035", "top_n_sigma-0", P4, [["top_n_sigma", {"n": 0.0}], DIST0], [0.1, 0.2, 0.3, 0.4]),
    ("SMP-035", "top_n_sigma-3", P4, [["top_n_sigma", {"n": 3.0}], DIST0], [0.1, 0.2, 0.3, 0.4]),
]


@pytest.mark.requires("sampling.chain")
@pytest.mark.parametrize(
    ("probs", "spec", "expected"),
    [
        needs_samplers(c[3], c[2], c[3], c[4], id=c[1], marks=[pytest.mark.invariant(c[0])])
        for c in GOLDEN
    ],
)
def test_golden_vectors(
    target: Any, probs: list[float], spec: list[Any], expected: list[float]
) -> None:
    out = apply_once(target, spec, from_probs(probs))
    assert out.size == len(expected), describe(out)
    assert_close(expected, out.p, atol=1e-5, rtol=0, what="p")


def _queue_tester(n_vocab: int) -> TokenDataArray:
    ids = np.arange(n_vocab, dtype=np.int32)
    with np.errstate(divide="ignore"):
        logits = np.log(ids.astype(np.float64)).astype(F32)  # token 0: logf(0) = -inf
    return TokenDataArray(ids, logits, np.zeros(n_vocab, F32))


QUEUE: list[tuple[str, int, float, float]] = [
    ("k", 10000, 1.0, 1.0),
    ("k", 1, 1.0, 1.0),
    ("p", 10000, 1.0, 1.0),
    ("p", 10000, 0.0, 1.0),
    ("m", 10000, 1.0, 1.0),
    ("m", 10000, 1.0, 1e-12),
    ("k", 100, 1.0, 1.0),
    ("p", 10000, 0.0003, 1.0),
    ("p", 10000, 0.8, 1.0),
    ("m", 10000, 1.0, 9997.9 / 9999.0),
    ("m", 10000, 1.0, 0.1),
    ("kp", 100, 0.8, 0.1),
    ("km", 100, 0.8, 0.1),
    ("pk", 100, 0.8, 0.1),
    ("pm", 100, 0.8, 0.1),
    ("mk", 100, 0.8, 0.1),
    ("mp", 100, 0.8, 9997.9 / 9999.0),
    ("mp", 100, 0.8, 0.1),
    ("kpm", 100, 0.8, 0.1),
    ("kmp", 100, 0.8, 0.1),
    ("pkm", 100, 0.8, 0.1),
    ("pmk", 100, 0.8, 0.1),
    ("mkp", 100, 0.8, 0.1),
    ("mpk", 100, 0.8, 0.1),
]
QUEUE_INVARIANTS = {"k": "SMP-030", "p": "SMP-031", "m": "SMP-032"}
QUEUE_SAMPLERS = {"k": "sampling.top_k", "p": "sampling.top_p", "m": "sampling.min_p"}


@pytest.mark.requires("sampling.chain", "sampling.dist")
@pytest.mark.parametrize(
    ("order", "top_k", "top_p", "min_p"),
    [
        pytest.param(
            *case,
            id=f"{case[0]}-k{case[1]}-p{case[2]}-m{case[3]:.6g}",
            marks=[
                pytest.mark.invariant(*sorted({QUEUE_INVARIANTS[c] for c in case[0]})),
                pytest.mark.requires(*sorted({QUEUE_SAMPLERS[c] for c in case[0]})),
            ],
        )
        for case in QUEUE
    ],
)
def test_sampler_queue(target: Any, order: str, top_k: int, top_p: float, min_p: float) -> None:
    """tests/test-sampling.cpp test_sampler_queue: vocab 10000 with logit_i = ln i, filters
    applied in the given order (each followed by dist(0)); closed-form sizes and end ids."""
    n_vocab = 10000
    max_id, min_id = n_vocab - 1, 0
    cur = _queue_tester(n_vocab)
    for step in order:
        entry: Any = {
            "k": ["top_k", {"k": top_k}],
            "p": ["top_p", {"p": top_p, "min_keep": 1}],
            "m": ["min_p", {"p": min_p, "min_keep": 1}],
        }[step]
        cur = apply_once(target, [entry, DIST0], cur)
        size = cur.size
        if step == "k":
            expected = min(size, top_k)
            min_id = max(min_id, n_vocab - top_k)
            check_sorted = True
        elif step == "p":
            divisor = n_vocab * (n_vocab - 1) // 2 - min_id * (min_id - 1) // 2
            goal = math.ceil(F32(F32(top_p) * F32(divisor)))
            min_id, expected, running = n_vocab, 0, 0
            while True:
                min_id -= 1
                expected += 1
                running += min_id
                if running >= goal:
                    break
            if min_id == 1:  # token 0 has p = 0 and comes along
                min_id -= 1
                expected += 1
            check_sorted = cur.sorted
        else:
            expected = min(max(math.ceil(F32(F32(1.0) - F32(min_p)) * F32(n_vocab)), 1), size)
            min_id = math.floor(F32(F32(min_p) * F32(n_vocab)))
            min_id = min(max(min_id, 1, n_vocab - size), n_vocab - 1)
            check_sorted = cur.sorted
        assert size == expected, f"after {step}: {size} tokens, expected {expected}"
        if check_sorted:
            assert cur.ids[0] == max_id and cur.ids[expected - 1] == min_id


def _softmax64(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits.astype(np.float64) - np.max(logits))
    return e / e.sum()


def _rows_by_id(cur: TokenDataArray) -> dict[int, tuple[float, float]]:
    return {
        int(i): (float(lg), float(p)) for i, lg, p in zip(cur.ids, cur.logits, cur.p, strict=True)
    }


@pytest.mark.invariant("SMP-030")
@pytest.mark.requires("sampling.chain", "sampling.top_k")
@given(cur=token_arrays(1, 300), k=st.integers(1, 320))
def test_top_k_keeps_the_k_largest(target: Any, cur: TokenDataArray, k: int) -> None:
    out = apply_once(target, [["top_k", {"k": k}]], cur)
    kept = min(k, cur.size)
    assert out.size == kept and out.sorted is True
    if cur.sorted:
        assert np.array_equal(out.ids, cur.ids[:kept])
    order = np.argsort(-cur.logits, kind="stable")[:kept]
    assert np.array_equal(out.ids, cur.ids[order]), describe(out)
    rows = _rows_by_id(cur)
    assert all(rows[i] == r for i, r in _rows_by_id(out).items())


# (n, k, first, width, scale): n distinct logits from +scale down to -scale, except the rows
# ranked first .. first + width - 1 (descending, 0-based), which share one logit, so the cut at
# k goes through that run. Over 4096 rows an engine may select the k largest without sorting
# all of them (the reference's partial selection; llama.cpp's partial_sort for k <= 128 and
# its bucket sort over [-10, 10] otherwise, values outside clamped into the end buckets).
TIED_CUTS = [
    (5000, 1, 0, 6, 8.0),
    (5000, 40, 35, 10, 8.0),
    (6000, 300, 290, 40, 8.0),
    (6000, 300, 290, 40, 40.0),
    (5000, 4999, 4990, 10, 8.0),
]


@pytest.mark.invariant("SMP-030")
@pytest.mark.requires("sampling.chain", "sampling.top_k")
@pytest.mark.parametrize(("n", "k", "first", "width", "scale"), TIED_CUTS)
def test_top_k_cut_through_equal_logits_keeps_k_rows(
    target: Any, n: int, k: int, first: int, width: int, scale: float
) -> None:
    rng = np.random.default_rng(n + k)
    ranked = np.linspace(scale, -scale, n).astype(F32)
    assert np.unique(ranked).size == n
    ranked[first : first + width] = ranked[first]
    logits = np.empty(n, F32)
    logits[rng.permutation(n)] = ranked
    cur = TokenDataArray(np.arange(n, dtype=np.int32), logits, rng.random(n).astype(F32), -1, False)
    out = apply_once(target, [["top_k", {"k": k}]], cur)
    # which members of the run survive the cut is unspecified (Decisions: Ties), how many not
    assert out.size == k and out.sorted is True, describe(out)
    assert np.unique(out.ids).size == k, "a row is kept twice"
    assert np.array_equal(out.logits, ranked[:k]), describe(out)
    assert np.array_equal(cur.logits[out.ids], out.logits)
    assert np.array_equal(cur.p[out.ids], out.p)


# (k, big): k > 128 rows kept out of 300, where llama.cpp switches from partial_sort to its
# bucket sort; the logits +big and +inf must come first, -big and -inf stay out.
HUGE_LOGITS = [(200, 1.0e9), (200, 3.0e38), (129, 4.0e8), (300, 1.0e9)]


@pytest.mark.invariant("SMP-030")
@pytest.mark.requires("sampling.chain", "sampling.top_k")
@pytest.mark.parametrize(("k", "big"), HUGE_LOGITS)
def test_top_k_ranks_huge_and_infinite_logits(target: Any, k: int, big: float) -> None:
    # a bucketed selection must clamp a logit past its buckets into the end bucket: a float
    # to int conversion that overflows (llama.cpp 0.3.36 above about 3.4e8, and +inf) lands
    # the best rows in the lowest bucket (Decisions: Huge logits)
    n = 300
    rng = np.random.default_rng(k)
    logits = rng.uniform(-8.0, 8.0, n).astype(F32)
    best, second, low, lowest = rng.choice(n, 4, replace=False)
    logits[[best, second, low, lowest]] = [np.inf, big, -big, -np.inf]
    cur = TokenDataArray(np.arange(n, dtype=np.int32), logits, rng.random(n).astype(F32), -1, False)
    out = apply_once(target, [["top_k", {"k": k}]], cur)
    assert out.size == k and out.sorted is True, describe(out)
    assert out.ids[:2].tolist() == [best, second], describe(out)
    assert np.array_equal(out.ids, np.argsort(-logits, kind="stable")[:k]), describe(out)
    assert np.array_equal(cur.p[out.ids], out.p)


@pytest.mark.invariant("SMP-030", "SMP-045")
@pytest.mark.requires("sampling.chain", "sampling.top_k", "sampling.logit_bias")
@pytest.mark.parametrize(("n", "extra"), [(5000, 0), (5000, 1000), (6000, 0)])
@pytest.mark.parametrize("source", [np.inf, -np.inf])
def test_top_k_over_every_row_keeps_a_nan_logit(
    target: Any, n: int, extra: int, source: float
) -> None:
    # logit-bias adding the opposite infinity to an infinite logit makes a NaN inside the
    # chain (input NaN is refused, SMP-003); top-k with k >= n over more rows than an engine
    # sorts in full still keeps all n rows, the NaN included (a partial selection keyed on
    # the n-th largest logit may find none), and the other rows in descending order
    rng = np.random.default_rng(n + extra)
    logits = rng.uniform(-8.0, 8.0, n).astype(F32)
    hole = int(rng.integers(n))
    logits[hole] = F32(source)
    cur = TokenDataArray(np.arange(n, dtype=np.int32), logits, rng.random(n).astype(F32), -1, False)
    spec = [["logit_bias", {"biases": [[hole, -source]]}], ["top_k", {"k": n + extra}]]
    out = apply_once(target, spec, cur)
    assert out.size == n and out.sorted is True, describe(out)
    assert np.array_equal(np.sort(out.ids), cur.ids), "rows lost or kept twice"
    nan = np.isnan(out.logits)
    assert out.ids[nan].tolist() == [hole], describe(out)
    finite = out.logits[~nan]
    assert np.all(finite[:-1] >= finite[1:]), describe(out)
    assert np.array_equal(cur.logits[out.ids[~nan]], finite)
    assert np.array_equal(cur.p[out.ids], out.p)


@pytest.mark.invariant("SMP-031")
@pytest.mark.requires("sampling.chain", "sampling.top_p")
@given(cur=token_arrays(1, 300), p=st.floats(0.0, 0.99), min_keep=st.integers(0, 5))
def test_top_p_keeps_the_shortest_prefix_reaching_p(
    target: Any, cur: TokenDataArray, p: float, min_keep: int
) -> None:
    q = _softmax64(cur.logits)
    order = np.argsort(-q, kind="stable")
    running = np.cumsum(q[order])
    assume(np.min(np.abs(running - float(F32(p)))) > 1e-5)  # not at a rounding boundary
    out = apply_once(target, [["top_p", {"p": p, "min_keep": min_keep}]], cur)
    reach = np.nonzero((running >= float(F32(p))) & (np.arange(1, cur.size + 1) >= min_keep))[0]
    expected = int(reach[0]) + 1 if reach.size else cur.size
    assert out.size == expected and out.sorted is True, describe(out)
    assert np.array_equal(out.ids, cur.ids[order[:expected]])
    assert_close(q[order[:expected]], out.p, atol=1e-7, rtol=1e-5, what="p")


@pytest.mark.invariant("SMP-031")
@pytest.mark.requires("sampling.chain", "sampling.top_p")
@pytest.mark.parametrize(("n", "p", "kept"), [(2, 0.5, 1), (4, 0.5, 2), (4, 0.75, 3), (8, 0.25, 2)])
def test_top_p_running_sum_equal_to_p_is_enough(target: Any, n: int, p: float, kept: int) -> None:
    # equal logits: every p is 1/n exactly, so the running sum hits p exactly
    cur = TokenDataArray(np.arange(n, dtype=np.int32), np.zeros(n, F32), np.zeros(n, F32))
    assert apply_once(target, [["top_p", {"p": p}]], cur).size == kept


@pytest.mark.invariant("SMP-031")
@pytest.mark.requires("sampling.chain", "sampling.top_p")
@pytest.mark.parametrize("shift", [80.0, -80.0, 1000.0])
def test_top_p_softmax_is_taken_relative_to_the_max(target: Any, shift: float) -> None:
    # expf(l - max): shifting every logit by a whole number leaves each l - max exact, so p
    # is bit-identical to the unshifted row's, however large the logits (expf(80 + 80)
    # overflows, expf(-80 - 80) underflows: a softmax not relative to the max gives NaN)
    logits = np.array([-1.5, 2.0, 0.0, 1.0, -4.0], F32)
    ids = np.arange(5, dtype=np.int32)
    base = apply_once(
        target, [["top_p", {"p": 0.9}]], TokenDataArray(ids, logits, np.zeros(5, F32))
    )
    moved = TokenDataArray(ids, logits + F32(shift), np.zeros(5, F32))
    out = apply_once(target, [["top_p", {"p": 0.9}]], moved)
    assert base.ids.tolist() == [1, 3, 2] and np.all(np.isfinite(out.p)), describe(out)
    assert out.ids.tolist() == base.ids.tolist() and np.array_equal(out.p, base.p), describe(out)


def _min_p_case(cur: TokenDataArray, p: float) -> np.ndarray:
    threshold = float(np.max(cur.logits)) + math.log(float(F32(p)))
    assume(np.min(np.abs(cur.logits.astype(np.float64) - threshold)) > 1e-4)
    return np.asarray(cur.logits >= threshold)


@pytest.mark.invariant("SMP-032")
@pytest.mark.requires("sampling.chain", "sampling.min_p")
@given(cur=token_arrays(1, 200, sorted_=False), p=st.floats(0.001, 1.0), min_keep=st.integers(0, 6))
def test_min_p_unsorted_filters_in_place(
    target: Any, cur: TokenDataArray, p: float, min_keep: int
) -> None:
    passing = _min_p_case(cur, p)
    count = int(passing.sum())
    assume(count >= min_keep)
    out = apply_once(target, [["min_p", {"p": p, "min_keep": min_keep}]], cur)
    assert out.sorted is False
    assert np.array_equal(out.ids, cur.ids[passing]) and np.array_equal(out.p, cur.p[passing])


def _at_threshold_case(p: float) -> tuple[TokenDataArray, list[int]]:
    """Unsorted rows around min-p's float threshold ``max + logf(p)`` with max = 0: one row
    exactly at it (kept), one a float step below it (dropped)."""
    at = F32(np.log(float(F32(p))))  # logf(p), and 0 + logf(p) needs no rounding
    below = np.nextafter(at, F32(-np.inf))
    logits = np.array([-8.0, at, 0.0, below, at / F32(2)], F32)
    cur = TokenDataArray(np.arange(5, dtype=np.int32), logits, np.zeros(5, F32), -1, False)
    return cur, [1, 2, 4]


@pytest.mark.invariant("SMP-032")
@pytest.mark.requires("sampling.chain", "sampling.min_p")
@pytest.mark.parametrize(("p", "min_keep"), [(0.5, 1), (0.05, 3)])
def test_min_p_unsorted_keeps_a_logit_at_the_threshold(
    target: Any, p: float, min_keep: int
) -> None:
    cur, kept = _at_threshold_case(p)
    out = apply_once(target, [["min_p", {"p": p, "min_keep": min_keep}]], cur)
    assert out.sorted is False and out.ids.tolist() == kept, describe(out)


@pytest.mark.invariant("SMP-032")
@pytest.mark.requires("sampling.chain", "sampling.min_p")
def test_min_p_one_keeps_the_tied_maxima_unsorted(target: Any) -> None:
    # p = 1: the threshold is the maximum itself, so the tied maxima pass the unsorted filter
    cur = TokenDataArray(
        np.arange(4, dtype=np.int32), np.array([1.0, 3.0, 2.0, 3.0], F32), np.zeros(4, F32)
    )
    out = apply_once(target, [["min_p", {"p": 1.0, "min_keep": 2}]], cur)
    assert out.sorted is False and out.ids.tolist() == [1, 3], describe(out)


@pytest.mark.invariant("SMP-033")
@pytest.mark.requires("sampling.chain", "sampling.min_p")
@given(cur=token_arrays(1, 200), p=st.floats(0.001, 1.5), min_keep=st.integers(0, 12))
def test_min_p_sorted_path_keeps_a_prefix(
    target: Any, cur: TokenDataArray, p: float, min_keep: int
) -> None:
    passing = _min_p_case(cur, p)
    count = int(passing.sum())
    assume(cur.sorted or count < min_keep or count == 0)
    out = apply_once(target, [["min_p", {"p": p, "min_keep": min_keep}]], cur)
    expected = min(cur.size, max(count, min_keep, 1))
    order = np.argsort(-cur.logits, kind="stable")[:expected]
    assert out.sorted is True and np.array_equal(out.ids, cur.ids[order]), describe(out)


def _typical_expectation(
    cur: TokenDataArray, p: float, min_keep: int
) -> tuple[np.ndarray, np.ndarray]:
    q = _softmax64(cur.logits)
    entropy = -np.sum(q * np.log(q))
    scores = np.abs(-np.log(q) - entropy)
    order = np.argsort(scores, kind="stable")
    running = np.cumsum(q[order])
    assume(np.min(np.abs(running - float(F32(p)))) > 1e-5)
    gaps = np.diff(np.sort(scores))
    assume(gaps.size == 0 or np.min(gaps) > 1e-5)  # no near-ties in the score order
    ok = (running > float(F32(p))) & ((min_keep == 0) | (np.arange(cur.size) >= min_keep - 1))
    stop = np.nonzero(ok)[0]
    keep = int(stop[0]) + 1 if stop.size else cur.size
    return order[:keep], q


@pytest.mark.invariant("SMP-034")
@pytest.mark.requires("sampling.chain", "sampling.typical")
@given(cur=token_arrays(1, 120, max_scale=3.0), p=st.floats(0.0, 0.99), min_keep=st.integers(0, 5))
def test_typical_keeps_the_most_typical_rows(
    target: Any, cur: TokenDataArray, p: float, min_keep: int
) -> None:
    keep, q = _typical_expectation(cur, p, min_keep)
    out = apply_once(target, [["typical", {"p": p, "min_keep": min_keep}]], cur)
    assert out.sorted is False
    assert np.array_equal(out.ids, cur.ids[keep]), describe(out)
    assert_close(q[keep], out.p, atol=1e-7, rtol=1e-5, what="p")


@pytest.mark.invariant("SMP-034")
@pytest.mark.requires("sampling.chain", "sampling.typical")
@pytest.mark.parametrize(("n", "p", "kept"), [(2, 0.5, 2), (4, 0.5, 3), (4, 0.25, 2)])
def test_typical_needs_a_running_sum_above_p(target: Any, n: int, p: float, kept: int) -> None:
    # equal logits: all scores are 0 and every p is exactly 1/n
    cur = TokenDataArray(np.arange(n, dtype=np.int32), np.zeros(n, F32), np.zeros(n, F32))
    assert apply_once(target, [["typical", {"p": p}]], cur).size == kept


@pytest.mark.invariant("SMP-035")
@pytest.mark.requires("sampling.chain", "sampling.top_n_sigma")
@given(cur=token_arrays(2, 200), n=st.floats(0.1, 3.0), masked=st.integers(0, 3))
def test_top_n_sigma_masks_below_the_band(
    target: Any, cur: TokenDataArray, n: float, masked: int
) -> None:
    logits = cur.logits.copy()
    logits[cur.size - min(masked, cur.size - 1) :] = -np.inf
    cur = TokenDataArray(cur.ids, logits, cur.p, -1, False)
    live = logits[logits != -np.inf].astype(np.float64)
    threshold = live.max() - float(F32(n)) * live.std()
    assume(np.min(np.abs(live - threshold)) > 1e-4)
    out = apply_once(target, [["top_n_sigma", {"n": n}]], cur)
    expected = np.where(logits < threshold, F32(-np.inf), logits)
    assert np.array_equal(out.logits, expected) and np.array_equal(out.ids, cur.ids)
    assert np.array_equal(out.p, cur.p) and out.sorted is False


@pytest.mark.invariant("SMP-035")
@pytest.mark.requires("sampling.chain", "sampling.top_n_sigma")
def test_top_n_sigma_leaves_a_single_row(target: Any) -> None:
    cur = TokenDataArray(np.array([7], np.int32), np.array([-3.5], F32), np.array([0.2], F32))
    out = apply_once(target, [["top_n_sigma", {"n": 0.1}]], cur)
    assert out.logits.tolist() == [-3.5] and out.ids.tolist() == [7]


@pytest.mark.invariant("SMP-035")
@pytest.mark.requires("sampling.chain", "sampling.top_n_sigma")
@pytest.mark.parametrize("sorted_flag", [False, True])
def test_top_n_sigma_leaves_an_all_masked_array(target: Any, sorted_flag: bool) -> None:
    """No logit is live, so there is no mean or sigma: the rule keeps every row as it is."""
    ids = np.array([4, 9, 2, 6], np.int32)
    p = np.array([0.1, 0.2, 0.3, 0.4], F32)
    cur = TokenDataArray(ids, np.full(4, -np.inf, F32), p, -1, sorted_flag)
    out = apply_once(target, [["top_n_sigma", {"n": 1.5}]], cur)
    assert np.array_equal(out.ids, ids) and np.array_equal(out.p, p), describe(out)
    assert np.all(out.logits == -np.inf) and out.sorted is sorted_flag, describe(out)
