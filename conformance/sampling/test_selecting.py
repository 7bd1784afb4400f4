"""greedy and dist: selection rules, normalisation, the seeded stream (SMP-020..024)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.assertions import assert_close
from conformance.sampling.support import (
    apply_once,
    candidates,
    chain_of,
    describe,
    mt19937_uniforms,
    needs_samplers,
)
from conformance.strategies.sampling import seeds, tied_logits_rows, token_arrays
from reference_impl.sampling.token_data import TokenDataArray

F32 = np.float32


@pytest.mark.invariant("SMP-020")
@pytest.mark.requires("sampling.chain", "sampling.greedy")
@given(row=tied_logits_rows(1, 24), shuffle=st.integers(0, 2**16), sorted_flag=st.booleans())
def test_greedy_selects_the_first_maximum(
    target: Any, row: np.ndarray, shuffle: int, sorted_flag: bool
) -> None:
    n = row.shape[0]
    ids = np.random.default_rng(shuffle).permutation(n).astype(np.int32)
    p = np.linspace(0.0, 1.0, n, dtype=F32)
    cur = TokenDataArray(ids, row, p, -1, sorted_flag)
    out = apply_once(target, ["greedy"], cur)
    assert out.selected == int(np.flatnonzero(row == row.max())[0])
    assert np.array_equal(out.ids, ids) and np.array_equal(out.logits, row)
    assert np.array_equal(out.p, p) and out.sorted == sorted_flag


def _softmax64(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits.astype(np.float64) - np.max(logits))
    return e / e.sum()


@pytest.mark.invariant("SMP-021")
@pytest.mark.requires("sampling.chain", "sampling.dist")
@given(cur=token_arrays(2, 200, max_scale=4.0), seed=seeds(), masked=st.integers(0, 3))
def test_dist_normalises_and_selects_a_positive_row(
    target: Any, cur: TokenDataArray, seed: int, masked: int
) -> None:
    logits = cur.logits.copy()
    logits[: min(masked, cur.size - 1)] = -np.inf  # p = 0 rows can never be drawn (u > 0)
    cur = TokenDataArray(cur.ids, logits, cur.p, -1, cur.sorted and masked == 0)
    out = apply_once(target, [["dist", {"seed": seed}]], cur)
    assert np.array_equal(out.ids, cur.ids) and np.array_equal(out.logits, cur.logits)
    assert out.sorted == cur.sorted
    assert abs(float(np.sum(out.p, dtype=np.float64)) - 1.0) < 1e-5
    assert_close(_softmax64(cur.logits), out.p, atol=1e-7, rtol=2e-5, what="p")
    assert 0 <= out.selected < out.size and out.p[out.selected] > 0, describe(out)


@pytest.mark.invariant("SMP-021")
@pytest.mark.requires("sampling.chain", "sampling.dist")
def test_dist_draws_follow_the_probabilities(target: Any, make_chain: Any) -> None:
    probs = np.array([0.1, 0.2, 0.3, 0.4])
    cur = TokenDataArray(np.arange(4, dtype=np.int32), np.log(probs).astype(F32), np.zeros(4, F32))
    chain = make_chain([["dist", {"seed": 2024}]])
    n = 4000
    counts = np.bincount([target.sampler_apply(chain, cur).selected for _ in range(n)], minlength=4)
    sigma = np.sqrt(n * probs * (1 - probs))
    assert np.all(np.abs(counts - n * probs) < 4 * sigma), counts


@pytest.mark.invariant("SMP-021")
@pytest.mark.requires("sampling.chain", "sampling.dist")
def test_dist_samples_in_the_current_order(target: Any) -> None:
    # the same draw on the same distribution listed in reverse picks the mirrored row
    logits = np.zeros(1000, F32)
    forward = TokenDataArray(np.arange(1000, dtype=np.int32), logits, logits.copy())
    backward = TokenDataArray(np.arange(1000, dtype=np.int32)[::-1].copy(), logits, logits.copy())
    a = apply_once(target, [["dist", {"seed": 42}]], forward)
    b = apply_once(target, [["dist", {"seed": 42}]], backward)
    assert a.selected == b.selected and a.ids[a.selected] == 999 - b.ids[b.selected]


@pytest.mark.invariant("SMP-021")
@pytest.mark.requires("sampling.chain", "sampling.dist")
def test_dist_running_sum_equal_to_the_target_selects_that_row(target: Any) -> None:
    # logits built (for seed 7's first draw u) so that S * u rounds to exactly the first
    # running sum p_0: "reaches" is >=, so row 0 is selected; a strict > would move on to
    # row 1 (p = 1). The later rows only tune S until the product lands on p_0.
    logits = np.array(
        [
            float.fromhex("-0x1.e0fecap-1"),
            0.0,
            float.fromhex("-0x1.1d1586p+0"),
            float.fromhex("-0x1.19fb0ap+4"),
            float.fromhex("-0x1.0272a8p+5"),
        ],
        F32,
    )
    # expf of these inputs is the double exp rounded once to float (max logit 0)
    p = np.exp(logits.astype(np.float64)).astype(F32)
    running = np.cumsum(p.astype(np.float64))
    assert running[0] == running[-1] * mt19937_uniforms(7, 1)[0]  # the tie this test needs
    cur = TokenDataArray(np.arange(5, dtype=np.int32)[::-1].copy(), logits, np.zeros(5, F32))
    out = apply_once(target, [["dist", {"seed": 7}]], cur)
    assert out.selected == 0, describe(out)


@pytest.mark.invariant("SMP-021")
@pytest.mark.requires("sampling.chain", "sampling.dist")
@pytest.mark.parametrize("sorted_flag", [False, True])
def test_dist_with_an_infinite_logit_selects_the_last_row(target: Any, sorted_flag: bool) -> None:
    # +inf - max(= +inf) is NaN: every running sum is NaN, none reaches S * u, and the
    # fallback takes the last row whatever the draw
    logits = np.array([3.0, np.inf, 1.0, -2.0, 0.5], F32)
    if sorted_flag:
        logits = np.array([np.inf, 3.0, 1.0, 0.5, -2.0], F32)
    ids = np.arange(5, dtype=np.int32)[::-1].copy()
    cur = TokenDataArray(ids, logits, np.zeros(5, F32), -1, sorted_flag)
    for seed in (0, 1, 2024):
        out = apply_once(target, [["dist", {"seed": seed}]], cur)
        assert out.selected == 4, describe(out)
        assert np.array_equal(out.ids, cur.ids) and np.array_equal(out.logits, cur.logits)
        assert np.all(np.isnan(out.p)), describe(out)


@pytest.mark.invariant("SMP-022")
@pytest.mark.requires("sampling.chain", "sampling.dist")
@given(seed=seeds())
def test_dist_on_one_row_consumes_a_draw(target: Any, seed: int) -> None:
    one = TokenDataArray(np.array([5], np.int32), np.array([0.0], F32), np.array([0.25], F32))
    two = TokenDataArray(np.array([5, 6], np.int32), np.zeros(2, F32), np.zeros(2, F32))
    flat = TokenDataArray(np.arange(256, dtype=np.int32), np.zeros(256, F32), np.zeros(256, F32))
    with (
        chain_of(target, [["dist", {"seed": seed}]]) as single,
        chain_of(target, [["dist", {"seed": seed}]]) as control,
    ):
        out = target.sampler_apply(single, one)
        assert out.selected == 0 and out.p.tolist() == [1.0]
        target.sampler_apply(control, two)
        for _ in range(4):
            s = target.sampler_apply(single, flat).selected
            assert s == target.sampler_apply(control, flat).selected


# Recorded from llama.cpp (llama-cpp-python 0.3.36, libstdc++ build) with
# llama_sampler_sample semantics: candidates from the row, apply, accept.
UNIFORM = np.zeros(1000, F32)
WAVE = (3 * np.sin(np.arange(64))).astype(F32)
GOLDEN_SEQUENCES: list[tuple[str, list[Any], np.ndarray, list[int]]] = [
    (
        "uniform-42",
        [["dist", {"seed": 42}]],
        UNIFORM,
        [796, 183, 779, 596, 445, 99, 459, 333, 142, 650, 56, 721, 938, 0, 992, 617],
    ),
    (
        "uniform-0",
        [["dist", {"seed": 0}]],
        UNIFORM,
        [592, 844, 857, 847, 623, 384, 297, 56, 272, 477, 812, 479, 392, 836, 337, 648],
    ),
    (
        "wave-1234",
        [["dist", {"seed": 1234}]],
        WAVE,
        [32, 51, 39, 46, 52, 8, 12, 51, 8, 7, 1, 27, 20, 51, 3, 2],
    ),
    (
        "wave-penalties-top_k-temp-5489",
        [
            ["penalties", {"last_n": 4, "repeat": 1.5, "freq": 0.5, "present": 0.25}],
            ["top_k", {"k": 10}],
            ["temp", {"t": 0.7}],
            ["dist", {"seed": 5489}],
        ],
        WAVE,
        [58, 2, 1, 14, 52, 27, 58, 26, 21, 1, 20, 45, 33, 2, 8, 58],
    ),
]


@pytest.mark.invariant("SMP-023")
@pytest.mark.requires("sampling.chain")
@pytest.mark.parametrize("case", [needs_samplers(c[1], c, id=c[0]) for c in GOLDEN_SEQUENCES])
def test_seeded_sequences_match_llama_cpp(
    target: Any, make_chain: Any, case: tuple[str, list[Any], np.ndarray, list[int]]
) -> None:
    _, spec, logits, expected = case
    chain = make_chain(spec)
    assert [target.sampler_sample(chain, logits) for _ in range(len(expected))] == expected


@pytest.mark.invariant("SMP-023")
@pytest.mark.requires("sampling.chain", "sampling.dist")
def test_long_seeded_stream_follows_mt19937(target: Any, make_chain: Any) -> None:
    # 700 draws = 1400 outputs: past the first two regenerations of the 624-word state, so
    # every word of the twist (the last ones included) feeds a draw's high half. Over 256
    # equal logits the running sums are exactly 1, 2, ... and S * u = 256 * u is exact, so
    # the selected row is ceil(256 * u) - 1 (row 0 for u = 0). Seed 1: the top bit of word
    # 622 changes in the first regeneration, so a twist that rewrites word 622 twice (reading
    # its own new top bit) shows in draws 424 and 622.
    n, seed = 256, 1
    chain = make_chain([["dist", {"seed": seed}]])
    logits = np.zeros(n, F32)
    expected = [max(math.ceil(n * u) - 1, 0) for u in mt19937_uniforms(seed, 700)]
    got = [target.sampler_sample(chain, logits) for _ in range(700)]
    first_bad = next((j for j, (a, b) in enumerate(zip(got, expected)) if a != b), None)
    assert first_bad is None, (
        f"draw {first_bad}: got {got[first_bad]}, expected {expected[first_bad]}"
    )


@pytest.mark.invariant("SMP-024")
@pytest.mark.requires("sampling.chain", "sampling.dist")
@given(seed=seeds(), n=st.integers(2, 500), scale=st.floats(0.0, 3.0))
def test_same_seed_same_sequence_and_reset_restarts(
    target: Any, seed: int, n: int, scale: float
) -> None:
    logits = (np.random.default_rng(seed).standard_normal(n) * scale).astype(F32)
    with (
        chain_of(target, [["dist", {"seed": seed}]]) as a,
        chain_of(target, [["dist", {"seed": seed}]]) as b,
    ):
        first = [target.sampler_sample(a, logits) for _ in range(8)]
        assert [target.sampler_sample(b, logits) for _ in range(8)] == first
        target.sampler_reset(a)
        assert [target.sampler_sample(a, logits) for _ in range(8)] == first


@pytest.mark.invariant("SMP-024")
@pytest.mark.requires("sampling.chain", "sampling.dist")
def test_default_seed_is_random(target: Any, make_chain: Any) -> None:
    # 12 draws over 1000 equally likely tokens: equal sequences have probability 1e-36
    a, b = (
        make_chain([["dist", {"seed": 0xFFFFFFFF}]]),
        make_chain([["dist", {"seed": 0xFFFFFFFF}]]),
    )
    first = [target.sampler_sample(a, UNIFORM) for _ in range(12)]
    assert first != [target.sampler_sample(b, UNIFORM) for _ in range(12)]
    target.sampler_reset(a)
    assert first != [target.sampler_sample(a, UNIFORM) for _ in range(12)]


DEFAULT_SEED = 0xFFFFFFFF
# XTC on these 12 rows drops the top choices at a draw u <= 0.5 and nothing otherwise, so the
# kept sizes of 40 applies spell out 40 bits of its stream; mirostat v2 picks among 1000 equal
# rows (tau 20 keeps them all), 12 picks spelling ~120 bits; mirostat v1 (whose fit keeps one
# row of a flat array) picks among 16 Zipf rows p ~ 1/(i + 1), 24 picks spelling ~70 bits.
_XTC_ROWS = np.linspace(-1.0, 1.0, 12).astype(F32)
_ZIPF_ROWS = -np.log(np.arange(1, 17)).astype(F32)


@pytest.mark.invariant("SMP-024")
@pytest.mark.parametrize(
    ("spec", "rows", "n"),
    [
        needs_samplers(
            [["xtc", {"p": 0.5, "t": 0.05, "min_keep": 0, "seed": DEFAULT_SEED}]],
            [["xtc", {"p": 0.5, "t": 0.05, "min_keep": 0, "seed": DEFAULT_SEED}]],
            _XTC_ROWS,
            40,
            id="xtc",
        ),
        needs_samplers(
            [["mirostat_v2", {"seed": DEFAULT_SEED, "tau": 20.0, "eta": 0.1}]],
            [["mirostat_v2", {"seed": DEFAULT_SEED, "tau": 20.0, "eta": 0.1}]],
            UNIFORM,
            12,
            id="mirostat_v2",
        ),
        needs_samplers(
            [["mirostat", {"n_vocab": 16, "seed": DEFAULT_SEED, "tau": 5.0, "eta": 0.1}]],
            [["mirostat", {"n_vocab": 16, "seed": DEFAULT_SEED, "tau": 5.0, "eta": 0.1}]],
            _ZIPF_ROWS,
            24,
            id="mirostat",
        ),
        needs_samplers(
            [["adaptive_p", {"target": -1.0, "decay": 0.5, "seed": DEFAULT_SEED}]],
            [["adaptive_p", {"target": -1.0, "decay": 0.5, "seed": DEFAULT_SEED}]],
            UNIFORM,
            12,
            id="adaptive_p",
        ),
    ],
)
@pytest.mark.requires("sampling.chain")
def test_default_seed_reseeds_every_seeded_sampler(
    target: Any, spec: list[Any], rows: np.ndarray, n: int
) -> None:
    # each reset asks get_rng_seed again: a stream that restarted from the seed drawn at
    # construction would repeat the first sequence
    cur = candidates(rows)

    def run(handle: Any) -> list[int]:
        outs = [target.sampler_apply(handle, cur) for _ in range(n)]
        return [o.size if spec[0][0] == "xtc" else int(o.ids[o.selected]) for o in outs]

    with chain_of(target, spec) as a, chain_of(target, spec) as b:
        first = run(a)
        assert len(set(first)) > 1, first
        assert run(b) != first
        target.sampler_reset(a)
        assert run(a) != first
