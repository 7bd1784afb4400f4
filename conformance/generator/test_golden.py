"""Golden generation traces for fixed prompts and seeds (syrupy snapshots).

The snapshots pin the reference decoder's own outputs (token ids, finish reasons and the gap
between the two largest logits at each step, rounded), like EMEL's generation baselines: any
change to them is a change in behaviour to review with ``nox -s snapshots``. Engine-neutral
agreement with llama.cpp is checked by GEN-019 instead, so these run on targets that expose
the reference's internals only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from conformance.decoder.helpers import prompt
from reference_impl.generator import GenerationRequest, Generator

pytestmark = pytest.mark.requires("decoder.logits", "decoder.memory_ops", "decoder.introspection")

CASES: dict[str, dict[str, Any]] = {
    "greedy-two-prompts": dict(prompts=[prompt(6), prompt(9, start=40)], max_tokens=12),
    "seeded-default-like": dict(
        prompts=[prompt(5, start=17)],
        max_tokens=16,
        sampler=[
            ["top_k", {"k": 40}],
            ["top_p", {"p": 0.95}],
            ["min_p", {"p": 0.05}],
            ["temp", {"t": 0.8}],
            ["dist", {}],
        ],
        seed=42,
    ),
    "text-prompts": dict(prompts=["Hello world", "The quick brown fox"], max_tokens=8),
}


def summary(res: Any) -> dict[str, Any]:
    gaps: dict[int, list[float]] = {}
    for st in res.trace:
        for s, row in st.logits.items():
            top = np.sort(np.asarray(row))[-2:]
            gaps.setdefault(s, []).append(round(float(top[1] - top[0]), 3))
    return {
        "tokens": {s: list(t) for s, t in sorted(res.tokens.items())},
        "reasons": dict(sorted(res.reasons.items())),
        "top2_gaps": {s: g for s, g in sorted(gaps.items())},
        "steps": len([st for st in res.trace if st.phase == "decode"]),
    }


@pytest.mark.requires("tokenizer.tokenize")
@pytest.mark.invariant("GEN-021")
@pytest.mark.parametrize("model", ["gqa", "q4"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_generation_matches_golden_trace(
    make_gen: Callable[..., Generator], snapshot: Any, model: str, case: str
) -> None:
    gen = make_gen(model, n_seq_max=2)
    res = gen.generate(GenerationRequest(**CASES[case], use_eos=False))
    assert snapshot == summary(res)
