"""The named batch corpus against its hand-written verdicts, through ``decode`` alone
(black-box, no peer): each case that llama.cpp's API can express is decoded on a fresh
one-stream context after its memory state was built, and must give the corpus's code (0 when
accepted, -1 when rejected), leave every sequence at the corpus's ``seq_pos_min/max`` (the
positions before the batch when rejected) and produce rows for exactly the corpus's output
tokens. The white-box test of the same row (test_corpus.py) compares the sanitizer's filled
batch and error fields; test_differential.py compares two engines case by case.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from conformance.assertions import nmse
from conformance.batch.test_differential import (
    _expected_memory,
    _run,
    _skip_reason,
    arch_marks,
)
from conformance.decoder.helpers import batch
from conformance.decoder.helpers import prompt as make_prompt
from conformance.fixtures.batch_corpus import CASES, Accepted, CorpusCase
from reference_impl.batch.types import Batch


def _params() -> list[Any]:
    out = []
    for case in CASES:
        marks: list[Any] = arch_marks(case)
        if case.output_all:
            marks.append(pytest.mark.requires("decoder.embeddings"))
        reason = _skip_reason(case)
        if reason is not None:
            marks.append(pytest.mark.skip(reason=reason))
        if case.name in MROPE_POSITION_CASES:
            marks.append(pytest.mark.invariant("SAN-017"))
        out.append(pytest.param(case, id=case.name, marks=marks))
    return out


# The cases of SAN-017's M-RoPE position rules: a forward jump is accepted, a token batch needs
# X < min and an embedding batch X <= min (run on the qwen2vl fixture, 4 positions per token).
MROPE_POSITION_CASES = (
    "mrope_token_jump",
    "mrope_token_overlap",
    "mrope_embd_overlap_one",
    "mrope_embd_behind",
)


@pytest.mark.invariant("SAN-027")
@pytest.mark.requires("decoder.logits", "decoder.memory_ops", "decoder.batch_rules")
@pytest.mark.parametrize("case", _params())
def test_corpus_verdict_through_decode(case: CorpusCase, target: Any) -> None:
    got = _run(target, case, unified=True)
    accepted = isinstance(case.expected, Accepted)
    where = f"{case.name} ({case.rule})"
    assert got.code == (0 if accepted else -1), f"{where}: code {got.code}"
    assert got.memory == _expected_memory(case, accepted), f"{where}: memory {got.memory}"
    if isinstance(case.expected, Accepted):
        outputs = [i for i, o in enumerate(case.expected.outputs) if o]
        assert sorted(got.rows) == outputs, f"{where}: outputs {sorted(got.rows)} != {outputs}"


@pytest.mark.invariant("SAN-012")
@pytest.mark.requires(
    "decoder.logits", "decoder.memory_ops", "decoder.batch_rules", "model.arch.qwen2vl"
)
def test_missing_mrope_embedding_positions_are_section_zero_then_zeros(
    new_ctx: Callable[..., Any], target: Any, load: Callable[[str], Any]
) -> None:
    """An M-RoPE embedding batch without positions decodes exactly as the same batch given
    section 0 = the sequence's next positions and 0 in sections 1..3 (the other sections do
    matter: giving them section 0's values changes the logits)."""
    info = target.model_info(load("qwen2vl"))
    rows = np.random.default_rng(12).standard_normal((3, info["n_embd"])).astype(np.float32)
    nxt = np.arange(5, 8, dtype=np.int32)

    def run(pos: np.ndarray | None) -> np.ndarray:
        ctx = new_ctx("qwen2vl", n_batch=16)
        assert ctx.decode(batch(make_prompt(5), pos=range(5))) == 0
        b = Batch(embd=rows, pos=pos, logits=np.array([0, 0, 1], dtype=np.int8))
        assert ctx.decode(b) == 0
        assert (ctx.seq_pos_min(0), ctx.seq_pos_max(0)) == (0, 7)
        return np.asarray(ctx.get_logits_ith(2))

    absent = run(None)
    zeros = np.zeros((4, 3), dtype=np.int32)
    zeros[0] = nxt
    np.testing.assert_array_equal(run(zeros), absent)
    repeated = np.tile(nxt, (4, 1))
    assert nmse(absent, run(repeated)) > 1e-6, "sections 1..3 must change the logits"
