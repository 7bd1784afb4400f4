"""Snapshots of full-chain outputs (syrupy): any change to a sampler shows up as a diff."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from conformance.sampling.support import candidates, needs_samplers
from conformance.strategies.sampling import logits_from_seed
from reference_impl.sampling.token_data import TokenDataArray

F32 = np.float32

ROWS = {
    "wave-64": (3 * np.sin(np.arange(64))).astype(F32),
    "normal-1000": logits_from_seed(1, 1000, 2.0),
    "normal-32000": logits_from_seed(2, 32000, 4.0),
}


def record(cur: TokenDataArray) -> dict[str, Any]:
    return {
        "ids": cur.ids,
        "logits": cur.logits,
        "p": cur.p,
        "selected": cur.selected,
        "sorted": cur.sorted,
    }


@pytest.mark.invariant("SMP-050", "SMP-051")
@pytest.mark.requires("sampling.chain", "sampling.default_chain")
@pytest.mark.parametrize("row", list(ROWS))
def test_default_chain_snapshot(target: Any, snapshot: Any, row: str) -> None:
    handle = target.sampler_chain_init_default({"seed": 42, "penalty_repeat": 1.1})
    try:
        logits = ROWS[row]
        tokens = [target.sampler_sample(handle, logits) for _ in range(6)]
        last = target.sampler_apply(handle, candidates(logits))
    finally:
        target.sampler_free(handle)
    assert {"tokens": tokens, "last_apply": record(last)} == snapshot


CHAINS: dict[str, list[Any]] = {
    "typical-minp-dynatemp": [
        ["typical", {"p": 0.9, "min_keep": 2}],
        ["min_p", {"p": 0.02}],
        ["temp_ext", {"t": 0.9, "delta": 0.4, "exponent": 1.5}],
        ["dist", {"seed": 7}],
    ],
    "bias-topk-sigma-greedy": [
        ["logit_bias", {"biases": [[3, 5.0], [860, float("-inf")], [999999, 1.0]]}],
        ["top_k", {"k": 12}],
        ["top_n_sigma", {"n": 1.0}],
        ["temp", {"t": 0.0}],
        ["greedy"],
    ],
}


@pytest.mark.invariant("SMP-010")
@pytest.mark.requires("sampling.chain")
@pytest.mark.parametrize(
    "chain", [needs_samplers(spec, name, id=name) for name, spec in CHAINS.items()]
)
def test_chain_snapshot(target: Any, snapshot: Any, chain: str) -> None:
    handle = target.sampler_chain_init(CHAINS[chain])
    try:
        out = target.sampler_apply(handle, candidates(ROWS["normal-1000"]))
    finally:
        target.sampler_free(handle)
    assert record(out) == snapshot
