"""The named batch corpus: hand-written verdicts, and snapshots of sanitized batches and splits."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.assertions import raises_code
from conformance.batch.checks import (
    check_ubatch,
    ints,
    outcome,
    pos0,
    sanitize,
    seq_rows,
    split_until_empty,
    summarize_ubatch,
    token_seqs,
)
from conformance.fixtures.batch_corpus import CASES, Accepted, CorpusCase
from reference_impl.errors import BatchError

pytestmark = pytest.mark.requires("batch.sanitize")

_IDS = [c.name for c in CASES]


@pytest.mark.invariant("SAN-027")
@pytest.mark.parametrize("case", CASES, ids=_IDS)
def test_corpus_verdict(target: Any, case: CorpusCase) -> None:
    exp = case.expected
    if isinstance(exp, Accepted):
        got = outcome(target, case)
        assert not isinstance(got, tuple), f"rejected: {got}"
        assert tuple(int(p) for p in pos0(got)) == exp.pos
        assert tuple(int(v) for v in got.batch.logits) == exp.outputs
        assert got.n_outputs == exp.n_outputs
    else:
        with raises_code(
            exp.code, field=exp.field, index=exp.index, seq_id=exp.seq_id, exc=BatchError
        ):
            sanitize(target, case)


def _sanitized_record(sb: Any) -> dict[str, Any]:
    b = sb.batch
    pos = [ints(row) for row in b.pos] if b.pos.ndim == 2 else ints(b.pos)
    return {
        "n_tokens": sb.n_tokens,
        "n_outputs": sb.n_outputs,
        "pos": pos,
        "seq_id": seq_rows(token_seqs(sb)),
        "logits": ints(b.logits),
        "generated": " ".join(sorted(sb.generated)),
        "outputs_overridden": bool(sb.outputs_overridden),
        "seq_pos": " ".join(
            f"{int(s)}:[{sb.seq_pos_min(int(s))},{sb.seq_pos_max(int(s))}]" for s in sb.seq_id_unq
        ),
        "coupled": " ".join(f"{a}->{b}" for a, b in sb.coupled),
    }


@pytest.mark.invariant("SPL-022")
@pytest.mark.requires("batch.split")
@pytest.mark.parametrize("case", CASES, ids=_IDS)
def test_corpus_snapshot(target: Any, case: CorpusCase, snapshot: Any) -> None:
    got = outcome(target, case)
    if isinstance(got, tuple):
        assert snapshot == {"rejected": list(got)}
        return
    u = case.split_ubatch
    splits: dict[str, Any] = {}
    plans = {
        f"simple({u})": ("simple", False, 0),
        f"equal({u}, sequential=False)": ("equal", False, 0),
        f"equal({u}, sequential=True)": ("equal", True, 0),
        f"seq({u})": ("seq", False, 0),
    }
    if case.keep_tail:
        plans[f"equal({u}, sequential=True, n_keep_tail={case.keep_tail})"] = (
            "equal",
            True,
            case.keep_tail,
        )
    sp = target.batch_splitter(got)
    for label, (mode, sequential, tail) in plans.items():
        ubs = split_until_empty(sp, mode, u, sequential, tail)
        for ub in ubs:
            check_ubatch(ub, got)
        if not ubs and sp.last_error is not None:
            splits[label] = {"refused": sp.last_error.code}
        else:
            splits[label] = {
                "ubatches": [summarize_ubatch(ub) for ub in ubs],
                "out_ids": ints(sp.out_ids),
            }
    assert snapshot == {"sanitized": _sanitized_record(got), "splits": splits}
