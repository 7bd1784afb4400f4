"""temp, temp-ext, penalties, logit-bias (SMP-040..045): golden vectors of llama.cpp's
tests/test-sampling.cpp and property tests."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from conformance.assertions import assert_close
from conformance.sampling.support import apply_once, chain_of, describe, from_probs, needs_samplers
from conformance.strategies.sampling import logits_from_seed, tied_logits_rows, token_arrays
from reference_impl.sampling.token_data import TokenDataArray

F32 = np.float32
DIST0 = ["dist", {"seed": 0}]
P4 = [0.1, 0.2, 0.3, 0.4]
FLAT5 = [0.2] * 5

# (invariant, name, probs, accepted tokens, chain, expected p) from tests/test-sampling.cpp
GOLDEN: list[tuple[str, str, list[float], list[int], list[Any], list[float]]] = [
    ("SMP-040", "temp-1", P4, [], [["temp", {"t": 1.0}], DIST0], P4),
    ("SMP-041", "temp-0", P4, [], [["temp", {"t": 0.0}], DIST0], [0, 0, 0, 1]),
    ("SMP-042", "temp_ext-1", P4, [], [["temp_ext", {"t": 1.0, "delta": 0.0}], DIST0], P4),
    (
        "SMP-042",
        "temp_ext-0",
        P4,
        [],
        [["temp_ext", {"t": 0.0, "delta": 0.0}], DIST0],
        [0, 0, 0, 1],
    ),
]
for _hist, _rep, _fp in [
    ([0], [0, 0.25, 0.25, 0.25, 0.25], [0.000011, 0.249997, 0.249997, 0.249997, 0.249997]),
    ([0, 1, 2], [0, 0, 0, 0.5, 0.5], [0.000023, 0.000023, 0.000023, 0.499966, 0.499966]),
    ([0, 1, 2, 0, 0], [0, 0, 0, 0.5, 0.5], [0, 0.000023, 0.000023, 0.499977, 0.499977]),
]:
    _n = len(_hist)
    GOLDEN.append(
        (
            "SMP-043",
            f"repeat50-{_hist}",
            FLAT5,
            _hist,
            [["penalties", {"last_n": _n, "repeat": 50.0}], DIST0],
            _rep,
        )
    )
    GOLDEN.append(
        (
            "SMP-043",
            f"freq5-present5-{_hist}",
            FLAT5,
            _hist,
            [["penalties", {"last_n": _n, "repeat": 1.0, "freq": 5.0, "present": 5.0}], DIST0],
            _fp,
        )
    )


@pytest.mark.requires("sampling.chain")
@pytest.mark.parametrize(
    ("probs", "history", "spec", "expected"),
    [needs_samplers(c[4], *c[2:], id=c[1], marks=[pytest.mark.invariant(c[0])]) for c in GOLDEN],
)
def test_golden_vectors(
    target: Any,
    make_chain: Any,
    probs: list[float],
    history: list[int],
    spec: list[Any],
    expected: list[float],
) -> None:
    chain = make_chain(spec)
    for token in history:
        target.sampler_accept(chain, token)
    out = target.sampler_apply(chain, from_probs(probs))
    assert out.size == len(expected), describe(out)
    assert_close(expected, out.p, atol=1e-5, rtol=0, what="p")


@pytest.mark.invariant("SMP-040")
@pytest.mark.requires("sampling.chain", "sampling.temp")
@given(cur=token_arrays(1, 100), t=st.floats(0.05, 20.0))
def test_temp_divides_logits(target: Any, cur: TokenDataArray, t: float) -> None:
    out = apply_once(target, [["temp", {"t": t}]], cur)
    assert np.array_equal(out.logits, cur.logits / F32(t))
    assert np.array_equal(out.ids, cur.ids) and np.array_equal(out.p, cur.p)
    assert out.sorted == cur.sorted and out.selected == cur.selected


@pytest.mark.invariant("SMP-041")
@pytest.mark.requires("sampling.chain", "sampling.temp")
@given(row=tied_logits_rows(1, 24), t=st.sampled_from([0.0, -0.5, -3.0]))
def test_temp_zero_keeps_only_the_first_maximum(target: Any, row: np.ndarray, t: float) -> None:
    n = row.shape[0]
    cur = TokenDataArray(np.arange(n, dtype=np.int32)[::-1].copy(), row, np.full(n, 0.5, F32))
    out = apply_once(target, [["temp", {"t": t}]], cur)
    first = int(np.flatnonzero(row == row.max())[0])
    expected = np.full(n, -np.inf, F32)
    expected[first] = row[first]
    assert np.array_equal(out.logits, expected), describe(out)
    assert np.array_equal(out.ids, cur.ids) and np.array_equal(out.p, cur.p)


@pytest.mark.invariant("SMP-042")
@pytest.mark.requires("sampling.chain", "sampling.temp_ext", "sampling.temp")
@given(cur=token_arrays(1, 100), t=st.floats(-1.0, 3.0), delta=st.floats(-1.0, 0.0))
def test_temp_ext_without_range_is_plain_temp(
    target: Any, cur: TokenDataArray, t: float, delta: float
) -> None:
    ext = apply_once(target, [["temp_ext", {"t": t, "delta": delta, "exponent": 1.7}]], cur)
    plain = apply_once(target, [["temp", {"t": t}]], cur)
    assert np.array_equal(ext.logits, plain.logits) and np.array_equal(ext.ids, plain.ids)
    assert np.array_equal(ext.p, plain.p) and ext.sorted == plain.sorted


@pytest.mark.invariant("SMP-042")
@pytest.mark.requires("sampling.chain", "sampling.temp_ext")
@given(
    cur=token_arrays(1, 150, max_scale=3.0),
    t=st.floats(0.2, 2.0),
    delta=st.floats(0.05, 1.0),
    exponent=st.floats(0.25, 3.0),
)
# two rows is the smallest size that is scaled (a single row is left unchanged)
@example(
    cur=TokenDataArray(np.array([3, 8], np.int32), np.array([0.5, 2.0], F32), np.zeros(2, F32)),
    t=0.8,
    delta=0.5,
    exponent=1.0,
)
def test_temp_ext_scales_by_entropy(
    target: Any, cur: TokenDataArray, t: float, delta: float, exponent: float
) -> None:
    out = apply_once(target, [["temp_ext", {"t": t, "delta": delta, "exponent": exponent}]], cur)
    if cur.size == 1:
        assert np.array_equal(out.logits, cur.logits) and np.array_equal(out.p, cur.p)
        return
    order = np.argsort(-cur.logits, kind="stable")
    logits = cur.logits[order].astype(np.float64)
    q = np.exp(logits - logits[0])
    q /= q.sum()
    entropy = -np.sum(q[q > 0] * np.log(q[q > 0]))
    lo, hi = max(0.0, float(F32(t)) - float(F32(delta))), float(F32(t)) + float(F32(delta))
    dyn = lo + (hi - lo) * (entropy / math.log(cur.size)) ** float(F32(exponent))
    assert out.sorted is True and np.array_equal(out.ids, cur.ids[order])
    assert_close(logits / dyn, out.logits, atol=1e-6, rtol=2e-5, what="logits")
    scaled = np.exp(logits / dyn - logits[0] / dyn)
    assert_close(scaled / scaled.sum(), out.p, atol=1e-7, rtol=1e-4, what="p")


@pytest.mark.invariant("SMP-043")
@pytest.mark.requires("sampling.chain", "sampling.penalties")
@given(
    cur=token_arrays(1, 60),
    history=st.lists(st.integers(0, 40), max_size=12),
    repeat=st.floats(0.5, 3.0),
    freq=st.floats(-1.0, 1.0),
    present=st.floats(-1.0, 1.0),
)
def test_penalties_rewrite_only_seen_tokens(
    target: Any, cur: TokenDataArray, history: list[int], repeat: float, freq: float, present: float
) -> None:
    spec = [["penalties", {"last_n": 64, "repeat": repeat, "freq": freq, "present": present}]]
    with chain_of(target, spec) as chain:
        for token in history:
            target.sampler_accept(chain, token)
        out = target.sampler_apply(chain, cur)
    counts = {t: history.count(t) for t in set(history)}
    expected = cur.logits.astype(np.float64).copy()
    for row, token in enumerate(cur.ids.tolist()):
        c = counts.get(token, 0)
        if c:
            lg = expected[row]
            lg = lg * float(F32(repeat)) if lg <= 0 else lg / float(F32(repeat))
            expected[row] = lg - (c * float(F32(freq)) + float(F32(present)))
    assert np.array_equal(out.ids, cur.ids) and np.array_equal(out.p, cur.p)
    assert_close(expected, out.logits, atol=1e-6, rtol=1e-6, what="logits")
    untouched = ~np.isin(cur.ids, history)
    assert np.array_equal(out.logits[untouched], cur.logits[untouched])
    assert out.sorted is False


@pytest.mark.invariant("SMP-044")
@pytest.mark.requires("sampling.chain", "sampling.penalties")
@given(history=st.lists(st.integers(0, 9), max_size=30), last_n=st.integers(1, 12))
def test_penalties_window_holds_the_last_n_tokens(
    target: Any, history: list[int], last_n: int
) -> None:
    cur = TokenDataArray(np.arange(10, dtype=np.int32), np.zeros(10, F32), np.zeros(10, F32))
    spec = [["penalties", {"last_n": last_n, "repeat": 1.0, "freq": 1.0, "present": 0.0}]]
    with chain_of(target, spec) as chain:
        for token in history:
            target.sampler_accept(chain, token)
        out = target.sampler_apply(chain, cur)
    window = history[-last_n:]
    expected = [-float(window.count(t)) for t in range(10)]
    assert out.logits.tolist() == expected


@pytest.mark.invariant("SMP-044")
@pytest.mark.requires("sampling.chain", "sampling.penalties")
def test_penalties_window_after_reset(target: Any, make_chain: Any) -> None:
    chain = make_chain([["penalties", {"last_n": 2, "repeat": 1.0, "present": 1.0}]])
    cur = TokenDataArray(np.arange(4, dtype=np.int32), np.zeros(4, F32), np.zeros(4, F32))
    for token in (0, 1, 2):
        target.sampler_accept(chain, token)
    assert target.sampler_apply(chain, cur).logits.tolist() == [0.0, -1.0, -1.0, 0.0]
    target.sampler_reset(chain)
    target.sampler_accept(chain, 3)
    assert target.sampler_apply(chain, cur).logits.tolist() == [0.0, 0.0, 0.0, -1.0]


@pytest.mark.invariant("SMP-045")
@pytest.mark.requires("sampling.chain", "sampling.logit_bias")
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 40),
    picks=st.lists(
        st.tuples(st.integers(0, 60), st.sampled_from([-2.5, -1.0, 0.5, 4.0, float("-inf")])),
        min_size=1,
        max_size=6,
        unique_by=lambda x: x[0],
    ),
    shuffled=st.booleans(),
    sorted_flag=st.booleans(),
)
def test_logit_bias_adds_to_the_named_tokens(
    target: Any,
    seed: int,
    n: int,
    picks: list[tuple[int, float]],
    shuffled: bool,
    sorted_flag: bool,
) -> None:
    logits = logits_from_seed(seed, n)
    ids = np.arange(n, dtype=np.int32)
    if shuffled:
        ids = np.random.default_rng(seed).permutation(n).astype(np.int32)
    cur = TokenDataArray(ids, logits, np.full(n, 0.5, F32), -1, sorted_flag)
    out = apply_once(target, [["logit_bias", {"biases": [list(x) for x in picks]}]], cur)
    bias = dict(picks)
    expected = np.array(
        [
            F32(lg + F32(bias[i])) if i in bias else lg
            for i, lg in zip(ids.tolist(), logits, strict=True)
        ],
        dtype=F32,
    )
    assert np.array_equal(out.logits, expected), describe(out)
    assert np.array_equal(out.ids, ids) and np.array_equal(out.p, cur.p)
    assert out.sorted == sorted_flag


@pytest.mark.invariant("SMP-045")
@pytest.mark.requires("sampling.chain", "sampling.logit_bias")
@pytest.mark.parametrize("token", [0, 3])
@pytest.mark.parametrize("own_index", [True, False], ids=["own-index", "moved"])
def test_logit_bias_on_a_token_listed_twice(target: Any, token: int, own_index: bool) -> None:
    """A token at its own index (``ids[token] == token``, token 0 included) gets every entry
    in list order; a token found by searching gets its first entry only (llama.cpp)."""
    ids = np.arange(6, dtype=np.int32)
    if not own_index:
        ids = np.roll(ids, 1)  # [5, 0, 1, 2, 3, 4]: every token but 5 sits one row later
    logits = np.array([0.5, -1.0, 2.0, 0.25, 1.5, -0.75], F32)
    cur = TokenDataArray(ids, logits, np.zeros(6, F32))
    biases = [[token, 1.0], [5, -0.5], [token, 2.0]]
    out = apply_once(target, [["logit_bias", {"biases": biases}]], cur)
    added = {token: F32(3.0 if own_index else 1.0), 5: F32(-0.5)}
    expected = np.array(
        [lg + added.get(i, F32(0.0)) for i, lg in zip(ids.tolist(), logits, strict=True)], F32
    )
    assert np.array_equal(out.logits, expected), describe(out)
    assert np.array_equal(out.ids, ids)


@pytest.mark.invariant("SMP-042")
@pytest.mark.requires("sampling.chain", "sampling.temp_ext")
def test_temp_ext_with_an_infinite_logit_takes_the_lowest_temperature(target: Any) -> None:
    """A +inf logit makes the softmax NaN everywhere; NaN rows are skipped like p = 0 rows,
    so H = 0 and the temperature is ``max(0, t - delta)`` (0.5 here: logits double)."""
    logits = np.array([1.0, np.inf, 2.0, -0.5], F32)
    cur = TokenDataArray(np.array([7, 4, 9, 1], np.int32), logits, np.zeros(4, F32))
    out = apply_once(target, [["temp_ext", {"t": 1.25, "delta": 0.75, "exponent": 1.0}]], cur)
    assert out.sorted is True and out.ids.tolist() == [4, 9, 7, 1], describe(out)
    assert np.array_equal(out.logits, np.array([np.inf, 4.0, 2.0, -1.0], F32)), describe(out)
    assert np.all(np.isnan(out.p)), describe(out)
