"""The chain: order, accept/reset/clone fan-out, sample(), failures, empty samplers
(SMP-010..015)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.assertions import raises_code
from conformance.sampling.support import (
    apply_once,
    candidates,
    chain_of,
    describe,
    needs_samplers,
    same_array,
)
from conformance.strategies.sampling import (
    FILTER_CAPABILITIES,
    available_filters,
    chains,
    logits_from_seed,
    token_arrays,
)
from reference_impl.errors import SamplingError
from reference_impl.sampling.token_data import TokenDataArray

F32 = np.float32


@pytest.mark.invariant("SMP-010")
@pytest.mark.requires("sampling.chain", "sampling.dist")
@pytest.mark.uses(*FILTER_CAPABILITIES)
@given(cur=token_arrays(2, 80, max_scale=2.0), data=st.data())
def test_chain_equals_members_applied_in_turn(
    target: Any, cur: TokenDataArray, data: st.DataObject
) -> None:
    spec = data.draw(chains(available_filters(target)), label="spec")
    whole = apply_once(target, spec, cur)
    step = cur
    for entry in spec:
        step = apply_once(target, [entry], step)
    assert same_array(whole, step), f"chain:\n{describe(whole)}\nin turn:\n{describe(step)}"


@pytest.mark.invariant("SMP-010")
@pytest.mark.requires("sampling.chain", "sampling.temp", "sampling.top_p")
def test_chain_order_matters(target: Any) -> None:
    # temperature 0.5 sharpens the distribution: top-p 0.8 then needs fewer tokens
    cur = candidates(np.log(np.array([0.3, 0.25, 0.2, 0.15, 0.1])))
    temp_first = apply_once(target, [["temp", {"t": 0.5}], ["top_p", {"p": 0.8}]], cur)
    top_p_first = apply_once(target, [["top_p", {"p": 0.8}], ["temp", {"t": 0.5}]], cur)
    assert top_p_first.ids.tolist() == [0, 1, 2, 3]
    assert temp_first.ids.tolist() == [0, 1, 2]


PENALISE = ["penalties", {"last_n": 8, "repeat": 1.0, "freq": 1.0, "present": 0.0}]


@pytest.mark.invariant("SMP-011")
@pytest.mark.requires("sampling.chain", "sampling.min_p", "sampling.penalties", "sampling.top_k")
@pytest.mark.parametrize("position", [0, 1, 2])
def test_accept_reaches_every_member(target: Any, make_chain: Any, position: int) -> None:
    members: list[Any] = [["min_p", {"p": 1e-6}], ["top_k", {"k": 50}]]
    members.insert(position, PENALISE)
    chain = make_chain(members)
    for token in (3, 3, 7):
        target.sampler_accept(chain, token)
    cur = candidates(np.zeros(20, F32))
    out = target.sampler_apply(chain, cur)
    by_id = dict(zip(out.ids.tolist(), out.logits.tolist(), strict=True))
    assert by_id[3] == -2.0 and by_id[7] == -1.0  # freq 1 per occurrence
    assert all(v == 0.0 for k, v in by_id.items() if k not in (3, 7))


@pytest.mark.invariant("SMP-011")
@pytest.mark.requires("sampling.chain", "sampling.dist", "sampling.penalties", "sampling.top_k")
def test_reset_reaches_every_member(target: Any, make_chain: Any) -> None:
    spec = [PENALISE, ["top_k", {"k": 500}], ["dist", {"seed": 31337}]]
    chain, fresh = make_chain(spec), make_chain(spec)
    logits = logits_from_seed(5, 400, 0.5)
    first = [target.sampler_sample(chain, logits) for _ in range(12)]
    target.sampler_reset(chain)
    again = [target.sampler_sample(chain, logits) for _ in range(12)]
    assert again == first, "reset did not restart the dist stream and clear the penalties"
    assert first == [target.sampler_sample(fresh, logits) for _ in range(12)]


@pytest.mark.invariant("SMP-012")
@pytest.mark.requires("sampling.chain", "sampling.dist", "sampling.penalties", "sampling.top_k")
@given(warmup=st.integers(0, 6), seed=st.integers(0, 2**32 - 2))
def test_clone_continues_from_the_same_state(target: Any, warmup: int, seed: int) -> None:
    spec = [
        ["penalties", {"last_n": 3, "repeat": 4.0, "freq": 0.5, "present": 0.5}],
        ["top_k", {"k": 30}],
        ["dist", {"seed": seed}],
    ]
    logits = logits_from_seed(seed, 60, 1.0)
    with chain_of(target, spec) as chain:
        for _ in range(warmup):
            target.sampler_sample(chain, logits)
        clone = target.sampler_clone(chain)
        try:
            original = [target.sampler_sample(chain, logits) for _ in range(8)]
            copied = [target.sampler_sample(clone, logits) for _ in range(8)]
        finally:
            target.sampler_free(clone)
    assert copied == original


@pytest.mark.invariant("SMP-013")
@pytest.mark.requires("sampling.chain", "sampling.dist", "sampling.penalties")
@given(seed=st.integers(0, 2**32 - 2), n=st.integers(2, 300))
def test_sample_returns_the_selected_id_and_accepts_it(target: Any, seed: int, n: int) -> None:
    logits = logits_from_seed(seed, n, 2.0)
    spec = [["penalties", {"last_n": 1, "repeat": 1.0, "present": 1e6}], ["dist", {"seed": seed}]]
    with chain_of(target, spec) as chain:
        probe = target.sampler_clone(chain)
        try:
            predicted = target.sampler_apply(probe, candidates(logits))
        finally:
            target.sampler_free(probe)
        token = target.sampler_sample(chain, logits)
        assert token == int(predicted.ids[predicted.selected])
        # the token is now in the penalties window: the next apply pushes it far down
        out = target.sampler_apply(chain, candidates(logits))
        row = int(np.nonzero(out.ids == token)[0][0])
        assert out.logits[row] < logits[token] - 1e5
        assert int(np.count_nonzero(out.logits != logits[out.ids])) == 1


@pytest.mark.invariant("SMP-014")
@pytest.mark.requires("sampling.chain")
@pytest.mark.parametrize(
    "spec",
    [
        needs_samplers(spec, spec, id=name)
        for name, spec in (
            ("no-selecting-sampler", [PENALISE, ["top_k", {"k": 5}]]),
            ("truncated-after-dist", [PENALISE, ["dist", {"seed": 42}], ["top_k", {"k": 1}]]),
        )
    ],
)
def test_sample_without_selection_fails_and_restores(
    target: Any, make_chain: Any, spec: list[Any]
) -> None:
    logits = np.zeros(1000, F32)  # seed 42's first draw selects row 796 of 1000
    chain = make_chain(spec)
    target.sampler_accept(chain, 9)
    witness = target.sampler_clone(chain)
    try:
        with raises_code("SMP_NO_SELECTION", exc=SamplingError):
            target.sampler_sample(chain, logits)
        probe = candidates(logits_from_seed(1, 1000, 1.0))
        for _ in range(3):
            assert same_array(
                target.sampler_apply(chain, probe), target.sampler_apply(witness, probe)
            )
    finally:
        target.sampler_free(witness)


DISABLED: list[tuple[str, Any]] = [
    ("top_k-0", ["top_k", {"k": 0}]),
    ("top_k-neg", ["top_k", {"k": -3}]),
    ("top_p-1", ["top_p", {"p": 1.0, "min_keep": 2}]),
    ("top_p-above", ["top_p", {"p": 1.5}]),
    ("min_p-0", ["min_p", {"p": 0.0, "min_keep": 1}]),
    ("min_p-neg", ["min_p", {"p": -0.2}]),
    # min_keep above every drawn size: a min-p pass run anyway would sort an unsorted array
    ("min_p-0-keep", ["min_p", {"p": 0.0, "min_keep": 64}]),
    ("typical-1", ["typical", {"p": 1.0}]),
    ("temp-1", ["temp", {"t": 1.0}]),
    ("temp_ext-1", ["temp_ext", {"t": 1.0, "delta": 0.0, "exponent": 2.0}]),
    ("temp_ext-1-neg", ["temp_ext", {"t": 1.0, "delta": -0.5}]),
    ("penalties-last0", ["penalties", {"last_n": 0, "repeat": 2.0, "freq": 1.0}]),
    ("penalties-last-neg", ["penalties", {"last_n": -1, "repeat": 2.0}]),
    ("penalties-neutral", ["penalties", {"last_n": 64}]),
    ("top_n_sigma-0", ["top_n_sigma", {"n": 0.0}]),
    ("top_n_sigma-neg", ["top_n_sigma", {"n": -1.0}]),
    ("logit_bias-empty", ["logit_bias", {"biases": []}]),
    ("dry-0", ["dry", {"multiplier": 0.0}]),
    ("xtc-0", ["xtc", {"p": 0.0}]),
]


@pytest.mark.invariant("SMP-015")
@pytest.mark.requires("sampling.chain")
@pytest.mark.parametrize("entry", [needs_samplers([e], e, id=n) for n, e in DISABLED])
@given(cur=token_arrays(1, 40))
def test_disabled_parameters_make_a_no_op(target: Any, entry: Any, cur: TokenDataArray) -> None:
    with chain_of(target, [entry]) as chain:
        for token in cur.ids[:3].tolist():  # a history must not matter either
            target.sampler_accept(chain, token)
        out = target.sampler_apply(chain, cur)
    assert same_array(out, cur), describe(out)
