"""The default chain of llama.cpp's common library (SMP-050, SMP-051), DRY and XTC included."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.protocol.sampling import samplers_named
from conformance.sampling.support import candidates, chain_of, describe, needs_samplers, same_array
from conformance.strategies.sampling import logits_from_seed, seeds, token_arrays
from reference_impl.sampling.token_data import TokenDataArray

F32 = np.float32


def documented_chain(prm: dict[str, Any]) -> list[Any]:
    """SMP-050/051 written out: the order and defaults of common_sampler_init."""
    get = {
        "seed": 0xFFFFFFFF, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "typ_p": 1.0,
        "temp": 0.8, "dynatemp_range": 0.0, "dynatemp_exponent": 1.0, "penalty_last_n": 64,
        "penalty_repeat": 1.0, "penalty_freq": 0.0, "penalty_present": 0.0, "min_keep": 0,
        "top_n_sigma": -1.0, "logit_bias": [], "dry_multiplier": 0.0, "dry_base": 1.75,
        "dry_allowed_length": 2, "dry_penalty_last_n": 64, "dry_sequence_breakers": [],
        "xtc_probability": 0.0, "xtc_threshold": 0.1, "adaptive_target": -1.0,
        "adaptive_decay": 0.9, "mirostat": 0, "mirostat_tau": 5.0, "mirostat_eta": 0.1,
    } | prm  # fmt: skip
    dry_last_n = get["dry_penalty_last_n"]
    keep = get["min_keep"]
    entries = {
        "penalties": ["penalties", {"last_n": get["penalty_last_n"], "repeat": get["penalty_repeat"], "freq": get["penalty_freq"], "present": get["penalty_present"]}],
        "dry": ["dry", {"multiplier": get["dry_multiplier"], "base": get["dry_base"], "allowed_length": get["dry_allowed_length"], "penalty_last_n": dry_last_n, "breakers": get["dry_sequence_breakers"], "breaker_strings": []}],
        "top_n_sigma": ["top_n_sigma", {"n": get["top_n_sigma"]}],
        "top_k": ["top_k", {"k": get["top_k"]}],
        "typ_p": ["typical", {"p": get["typ_p"], "min_keep": keep}],
        "top_p": ["top_p", {"p": get["top_p"], "min_keep": keep}],
        "min_p": ["min_p", {"p": get["min_p"], "min_keep": keep}],
        "xtc": ["xtc", {"p": get["xtc_probability"], "t": get["xtc_threshold"], "min_keep": keep, "seed": get["seed"]}],
        "temperature": ["temp_ext", {"t": get["temp"], "delta": get["dynatemp_range"], "exponent": get["dynatemp_exponent"]}],
    }  # fmt: skip
    chain: list[Any] = [["logit_bias", {"biases": get["logit_bias"]}]] if get["logit_bias"] else []
    miro = {"seed": get["seed"], "tau": get["mirostat_tau"], "eta": get["mirostat_eta"]}
    if get["mirostat"] == 1:
        miro |= {"n_vocab": get["n_vocab"], "m": 100}
        return [*chain, ["temp", {"t": get["temp"]}], ["mirostat", miro]]
    if get["mirostat"] == 2:
        return [*chain, ["temp", {"t": get["temp"]}], ["mirostat_v2", miro]]
    order = prm.get("samplers", list(entries))
    chain += [entries[kind] for kind in order if kind != "adaptive_p"]
    if "adaptive_p" in order:
        last = [
            "adaptive_p",
            {"target": get["adaptive_target"], "decay": get["adaptive_decay"], "seed": get["seed"]},
        ]
    else:
        last = ["dist", {"seed": get["seed"]}]
    return [*chain, last]  # fmt: skip


# every sampler the documented chain can name (logit_bias only with biases)
DEFAULT_CHAIN_SAMPLERS = sorted(samplers_named(documented_chain({"logit_bias": [[0, 1.0]]})))


def _run(
    target: Any, handle: Any, cur: TokenDataArray, history: list[int], rounds: int
) -> list[TokenDataArray]:
    for token in history:
        target.sampler_accept(handle, token)
    return [target.sampler_apply(handle, cur) for _ in range(rounds)]


overrides = st.fixed_dictionaries(
    {"seed": seeds()},
    optional={
        "top_k": st.integers(-1, 60),
        "top_p": st.floats(0.3, 1.0),
        "min_p": st.floats(0.0, 0.3),
        "typ_p": st.sampled_from([1.0, 0.9, 0.6]),
        "temp": st.floats(0.3, 1.5),
        "dynatemp_range": st.sampled_from([0.0, 0.3]),
        "dynatemp_exponent": st.floats(0.5, 2.0),
        "penalty_last_n": st.integers(0, 8),
        "penalty_repeat": st.floats(0.8, 1.5),
        "penalty_freq": st.floats(0.0, 0.5),
        "penalty_present": st.floats(0.0, 0.5),
        "min_keep": st.integers(0, 3),
        "top_n_sigma": st.sampled_from([-1.0, 2.0]),
        "logit_bias": st.lists(
            st.tuples(st.integers(0, 30), st.floats(-3.0, 3.0)).map(list), max_size=3
        ),
        "dry_multiplier": st.sampled_from([0.0, 0.8]),
        "dry_base": st.sampled_from([1.75, 0.5, 3.0]),
        "dry_allowed_length": st.integers(0, 3),
        "dry_penalty_last_n": st.sampled_from([-1, 0, 4, 64]),
        "dry_sequence_breakers": st.lists(
            st.lists(st.integers(0, 30), min_size=1, max_size=2), max_size=2
        ),
        "xtc_probability": st.sampled_from([0.0, 0.5, 1.0]),
        "xtc_threshold": st.sampled_from([0.05, 0.1, 0.6]),
    },
)


@pytest.mark.invariant("SMP-050")
@pytest.mark.requires("sampling.default_chain", *DEFAULT_CHAIN_SAMPLERS)
@given(
    prm=overrides,
    cur=token_arrays(2, 100, max_scale=2.0),
    history=st.lists(st.integers(0, 30), max_size=6).map(lambda h: h + h),
)
def test_default_chain_order(
    target: Any, prm: dict[str, Any], cur: TokenDataArray, history: list[int]
) -> None:
    with chain_of(target, documented_chain(prm)) as explicit:
        expected = _run(target, explicit, cur, history, 2)
    handle = target.sampler_chain_init_default(prm)
    try:
        got = _run(target, handle, cur, history, 2)
    finally:
        target.sampler_free(handle)
    for a, b in zip(got, expected, strict=True):
        assert same_array(a, b), f"default:\n{describe(a)}\ndocumented:\n{describe(b)}"


@pytest.mark.invariant("SMP-050")
@pytest.mark.requires("sampling.default_chain")
@pytest.mark.parametrize(
    "order",
    [
        needs_samplers(documented_chain({"samplers": order}), order, id=name)
        for name, order in (
            ("temp-first", ["temperature", "top_k", "top_p"]),
            ("shuffled", ["min_p", "typ_p", "penalties", "temperature"]),
            ("empty", []),
            ("adaptive-p-last", ["top_k", "adaptive_p", "temperature"]),
            ("dry-xtc", ["xtc", "dry", "temperature"]),
        )
    ],
)
def test_default_chain_custom_order(target: Any, order: list[str]) -> None:
    prm = {
        "seed": 11,
        "samplers": order,
        "temp": 0.6,
        "top_p": 0.8,
        "typ_p": 0.9,
        "penalty_repeat": 1.3,
        "adaptive_target": 0.4,
        "dry_multiplier": 1.2,
        "dry_allowed_length": 1,
        "xtc_probability": 0.7,
    }
    cur = candidates(logits_from_seed(3, 300, 2.0))
    with chain_of(target, documented_chain(prm)) as explicit:
        expected = _run(target, explicit, cur, [1, 2], 3)
    handle = target.sampler_chain_init_default(prm)
    try:
        got = _run(target, handle, cur, [1, 2], 3)
    finally:
        target.sampler_free(handle)
    assert all(same_array(a, b) for a, b in zip(got, expected, strict=True))


@pytest.mark.invariant("SMP-051")
@pytest.mark.requires("sampling.default_chain", *DEFAULT_CHAIN_SAMPLERS)
@pytest.mark.parametrize("scale", [0.5, 2.0, 6.0])
def test_default_parameters(target: Any, scale: float) -> None:
    cur = candidates(logits_from_seed(int(scale * 10), 2000, scale))
    with chain_of(target, documented_chain({"seed": 99})) as explicit:
        expected = _run(target, explicit, cur, [], 4)
    handle = target.sampler_chain_init_default({"seed": 99})
    try:
        got = _run(target, handle, cur, [], 4)
    finally:
        target.sampler_free(handle)
    assert all(same_array(a, b) for a, b in zip(got, expected, strict=True))
    # the defaults are live: top-k 40 caps the set, temperature 0.8 rescales the logits
    out = got[0]
    assert out.size <= 40
    rows = dict(zip(cur.ids.tolist(), cur.logits.tolist(), strict=True))
    assert all(
        F32(rows[i] / F32(0.8)) == lg
        for i, lg in zip(out.ids.tolist(), out.logits.tolist(), strict=True)
    )


@pytest.mark.invariant("SMP-051", "SMP-080")
@pytest.mark.requires("sampling.default_chain", "sampling.dry", "sampling.dist")
@pytest.mark.parametrize(
    ("history", "penalties"),
    [
        # The newest run is 4 5 6: 6 at row 2 ends the run 4 5 6 (L = 3) and is followed by 8;
        # 6 at row 6 ends 5 6 (L = 2, the 0 before it differs from 4) and is followed by 7.
        # allowed_length 2 penalises both, 8 by 0.8 * 1.75 and 7 by 0.8 (allowed_length 3
        # would spare 7; another base changes 8).
        pytest.param([4, 5, 6, 8, 0, 5, 6, 7, 1, 4, 5, 6], {7: 0, 8: 1}, id="base-allowed"),
        # 65 tokens: dry_penalty_last_n 64 drops the oldest 4, so the run before 8 is 5 6
        # (L = 2, penalty 0.8); a window of 65 would see 4 5 6 (L = 3)
        pytest.param([4, 5, 6, 8, *range(20, 78), 4, 5, 6], {8: 0}, id="window-64"),
    ],
)
def test_default_dry_parameters(target: Any, history: list[int], penalties: dict[int, int]) -> None:
    # DRY on with every other dry_* parameter left at its default
    prm = {"seed": 4, "samplers": ["dry"], "dry_multiplier": 0.8}
    cur = candidates(np.zeros(80, F32))
    handle = target.sampler_chain_init_default(prm)
    try:
        out = _run(target, handle, cur, history, 1)[0]
    finally:
        target.sampler_free(handle)
    expected = np.zeros(80, F32)
    for token, exponent in penalties.items():
        expected[token] = -F32(float(F32(0.8)) * float(F32(1.75)) ** exponent)
    assert out.ids.tolist() == list(range(80)), describe(out)
    assert np.array_equal(out.logits, expected), describe(out)


@pytest.mark.invariant("SMP-050", "SMP-051", "SMP-023")
@pytest.mark.requires("sampling.chain", "sampling.default_chain")
def test_default_chain_sequence_matches_llama_cpp(target: Any, make_chain: Any) -> None:
    # recorded from llama.cpp's own default chain (llama-cpp-python 0.3.36) with seed 7
    wave = (3 * np.sin(np.arange(64))).astype(F32)
    handle = target.sampler_chain_init_default({"seed": 7})
    try:
        tokens = [target.sampler_sample(handle, wave) for _ in range(16)]
    finally:
        target.sampler_free(handle)
    assert tokens == [8, 52, 13, 27, 52, 8, 58, 39, 33, 20, 51, 52, 39, 45, 45, 45]


@pytest.mark.invariant("SMP-051")
@pytest.mark.requires("sampling.chain", "sampling.default_chain")
def test_default_seed_is_random(target: Any) -> None:
    # no seed given: LLAMA_DEFAULT_SEED, a fresh random seed per chain; ~38 tokens survive
    # the default filters on a flat row, so 12 equal draws have probability ~1e-19
    flat = np.zeros(1000, F32)
    a, b = target.sampler_chain_init_default(), target.sampler_chain_init_default({})
    try:
        first = [target.sampler_sample(a, flat) for _ in range(12)]
        assert first != [target.sampler_sample(b, flat) for _ in range(12)]
    finally:
        target.sampler_free(a)
        target.sampler_free(b)


# 100 equal top logits, then a drop: the first 100 sorted probabilities fit s = 0 (k is not
# finite, one row stays); fitting 101 would see the drop and keep many rows
_STEP_ROW = np.concatenate([np.zeros(100, F32), np.full(200, -20.0, F32)])


@pytest.mark.invariant("SMP-088")
@pytest.mark.requires("sampling.default_chain", "sampling.temp")
@pytest.mark.parametrize(
    ("prm", "row"),
    [
        needs_samplers(documented_chain(p), p, row, id=name)
        for name, p, row in (
            ("mirostat-1", {"seed": 5, "mirostat": 1, "n_vocab": 300, "temp": 0.7}, logits_from_seed(8, 300, 2.0)),
            ("mirostat-1-m-100", {"seed": 5, "mirostat": 1, "n_vocab": 300, "temp": 0.7}, _STEP_ROW),
            ("mirostat-2", {"seed": 5, "mirostat": 2, "mirostat_tau": 3.0, "logit_bias": [[2, 9.0]]}, logits_from_seed(8, 300, 2.0)),
        )
    ],
)  # fmt: skip
def test_default_chain_mirostat_modes(target: Any, prm: dict[str, Any], row: np.ndarray) -> None:
    cur = candidates(row)
    with chain_of(target, documented_chain(prm)) as explicit:
        expected = _run(target, explicit, cur, [3, 4], 4)
    handle = target.sampler_chain_init_default(prm)
    try:
        got = _run(target, handle, cur, [3, 4], 4)
    finally:
        target.sampler_free(handle)
    assert all(same_array(a, b) for a, b in zip(got, expected, strict=True))
    assert all(0 <= a.selected < a.size <= cur.size and a.sorted for a in got)
