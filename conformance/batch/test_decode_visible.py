"""Sanitizer rules seen through ``decode`` alone (black-box): what an engine with a C-style API
shows of spec/batch.md without exposing its sanitizer — the return code, ``seq_pos_min/max``,
the logits, and the caller's arrays. The white-box tests of the same invariants
(test_sanitize.py, test_golden_batch_alloc.py) check the sanitizer's result itself.

Every refusal here is paired with a control: the same tokens with valid positions or sets decode
(0), so a -1 is the rule's and not some other limit's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from conformance.assertions import assert_code, assert_nmse, unchanged
from conformance.decoder.helpers import batch, memory_view, prompt
from reference_impl.batch.types import Batch

pytestmark = pytest.mark.requires("decoder.logits", "decoder.batch_rules", "decoder.memory_ops")


def _arrays(b: Batch) -> dict[str, Any]:
    return {
        name: None if getattr(b, name) is None else getattr(b, name).copy()
        for name in ("token", "embd", "pos", "n_seq_id", "seq_id", "logits")
    }


def _logit_rows(ctx: Any, n: int) -> np.ndarray:
    return np.stack([np.asarray(ctx.get_logits_ith(i), dtype=np.float32) for i in range(n)])


def _fresh(new_ctx: Callable[..., Any]) -> Any:
    # One KV stream: tokens may belong to several sequences (llama.cpp needs kv_unified for it).
    return new_ctx(n_batch=32, n_seq_max=4, kv_unified=True)


@pytest.mark.invariant("SAN-009")
def test_a_sequence_listed_twice_by_a_token_counts_once(new_ctx: Callable[..., Any]) -> None:
    toks = prompt(4)
    twice = _fresh(new_ctx)
    once = _fresh(new_ctx)
    assert twice.decode(batch(toks, seqs=[[0, 0], [0], [0, 0, 0], [0]], all_out=True)) == 0
    assert once.decode(batch(toks, seqs=[[0], [0], [0], [0]], all_out=True)) == 0
    assert (
        memory_view(twice)
        == memory_view(once)
        == {0: (0, 3), 1: (-1, -1), 2: (-1, -1), 3: (-1, -1)}
    )
    np.testing.assert_array_equal(_logit_rows(twice, 4), _logit_rows(once, 4))
    # [2, 1, 2] is the set {1, 2} with 2 first: positions follow sequence 2, and the token couples
    # 1 and 2 exactly as [2, 1] does.
    dup = _fresh(new_ctx)
    plain = _fresh(new_ctx)
    assert dup.decode(batch(toks[:2], seqs=[[2, 1, 2], [2, 1]], all_out=True)) == 0
    assert plain.decode(batch(toks[:2], seqs=[[2, 1], [2, 1]], all_out=True)) == 0
    assert memory_view(dup) == memory_view(plain)
    np.testing.assert_array_equal(_logit_rows(dup, 2), _logit_rows(plain, 2))


@pytest.mark.invariant("SAN-009")
def test_a_token_listing_one_sequence_twice_is_not_coupled(new_ctx: Callable[..., Any]) -> None:
    # One KV stream per sequence: a batch coupling two sequences cannot be split (SPL-011), so
    # [1, 1] decoding at all shows it is one sequence, not a coupling of 1 with itself.
    toks = prompt(4)
    streams = new_ctx(n_batch=32, n_seq_max=2, kv_unified=False)
    plain = new_ctx(n_batch=32, n_seq_max=2, kv_unified=False)
    seqs = [[0], [1, 1], [0, 0], [1]]
    assert streams.decode(batch(toks, seqs=seqs, all_out=True)) == 0
    assert plain.decode(batch(toks, seqs=[[0], [1], [0], [1]], all_out=True)) == 0
    assert memory_view(streams) == memory_view(plain) == {0: (0, 1), 1: (0, 1)}
    np.testing.assert_array_equal(_logit_rows(streams, 4), _logit_rows(plain, 4))


@pytest.mark.uses("decoder.errors")
@pytest.mark.invariant("SAN-011")
def test_generated_positions_are_checked_like_given_ones(
    new_ctx: Callable[..., Any], target: Any
) -> None:
    # No positions: tokens 0 and 1 continue sequence 0 at 0 and 1; token 2 lists sequence 1
    # first, so it gets position 0 of sequence 1 — and sequence 0 then goes 0, 1, 0.
    toks = prompt(3)
    seqs = [[0], [0], [1, 0]]
    ctx = _fresh(new_ctx)
    with unchanged(lambda: memory_view(ctx), "seq_pos_min/max"):
        assert ctx.decode(batch(toks, seqs=seqs)) == -1
    if target.has("decoder.errors"):
        assert_code(ctx.last_error, "SAN_POS_DECREASING", index=2, seq_id=0)
    # Control: the same generated positions with sequence 0 listed first are valid.
    assert _fresh(new_ctx).decode(batch(toks, seqs=[[0], [0], [0, 1]])) == 0


@pytest.mark.invariant("SAN-020")
@pytest.mark.parametrize(
    ("sets", "pos"),
    [
        ([[0, 1, 2], [0, 1], [1, 2]], [0, 1, 1]),
        ([[0, 1], [1, 2], [0, 2]], [0, 1, 1]),
        ([[3], [0, 1, 2, 3], [1]], [0, 1, 2]),
    ],
    ids=["nested", "ring", "inside"],
)
def test_overlapping_sequence_sets_are_accepted(
    new_ctx: Callable[..., Any], sets: list[list[int]], pos: list[int]
) -> None:
    # Every sequence's positions are continuous and never decrease, so only the sets' overlap
    # could refuse the batch; it must not.
    ctx = _fresh(new_ctx)
    assert ctx.decode(batch(prompt(len(sets)), seqs=sets, pos=pos)) == 0
    for s in range(4):
        mine = [p for p, ids in zip(pos, sets, strict=True) if s in ids]
        expect = (min(mine), max(mine)) if mine else (-1, -1)
        assert (ctx.seq_pos_min(s), ctx.seq_pos_max(s)) == expect, f"sequence {s}"


@pytest.mark.invariant("SAN-021")
@pytest.mark.parametrize("start", [1, 100, 255, 10_000])
def test_an_empty_sequence_accepts_any_starting_position(
    new_ctx: Callable[..., Any], start: int
) -> None:
    # Non-negative starts only: a negative position is refused later, by the KV cache
    # (KV_POS_RANGE), so decode cannot show the sanitizer's half of that case.
    ctx = _fresh(new_ctx)
    assert ctx.decode(batch(prompt(3), pos=[start, start + 1, start + 2])) == 0
    assert (ctx.seq_pos_min(0), ctx.seq_pos_max(0)) == (start, start + 2)
    # ... and the sequence then continues from there.
    assert ctx.decode(batch(prompt(1, start=9))) == 0
    assert ctx.seq_pos_max(0) == start + 3


VALID_AND_INVALID = {
    "valid-no-pos": lambda: batch(prompt(4), seqs=[[0], [1], [0, 1], [2]]),
    "valid-pos-flags": lambda: batch(prompt(3), pos=[0, 1, 2], out=[1, 0, 7]),
    "invalid-token": lambda: batch([5, -1, 6]),
    "invalid-gap": lambda: batch(prompt(3), pos=[0, 2, 3]),
    # positions given: without them llama.cpp 0.3.36 indexes its per-sequence position table
    # with the bad id before checking it (the corpus's seq_id_range_auto_pos, "undefined"), a
    # heap overrun that crashed later tests
    "invalid-seq": lambda: batch(prompt(2), pos=[0, 0], seqs=[[0], [4]]),
}


@pytest.mark.invariant("SAN-022")
@pytest.mark.parametrize("case", sorted(VALID_AND_INVALID))
def test_decode_leaves_the_callers_arrays_alone(new_ctx: Callable[..., Any], case: str) -> None:
    b = VALID_AND_INVALID[case]()
    before = _arrays(b)
    code = _fresh(new_ctx).decode(b)
    assert code == (0 if case.startswith("valid") else -1)
    after = _arrays(b)
    for name, value in before.items():
        if value is None:
            assert after[name] is None, f"{case}: decode filled the caller's absent {name}"
        else:
            np.testing.assert_array_equal(after[name], value, err_msg=f"{case}: {name}")


@pytest.mark.invariant("SAN-023")
def test_filling_is_deterministic_and_filled_batches_decode_the_same(
    new_ctx: Callable[..., Any],
) -> None:
    toks = prompt(5)
    seqs = [[0], [1], [0, 1], [2], [0, 1]]
    runs = []
    for _ in range(2):
        ctx = _fresh(new_ctx)
        assert ctx.decode(batch(toks[:2], seqs=[[0], [1]], pos=[0, 0])) == 0
        assert ctx.decode(batch(toks, seqs=seqs, all_out=True)) == 0  # positions generated
        runs.append((memory_view(ctx), _logit_rows(ctx, 5)))
    assert runs[0][0] == runs[1][0]
    np.testing.assert_array_equal(runs[0][1], runs[1][1])
    # The batch as the filling leaves it (positions 1, 1, 2, 0, 3 per first sequence; every
    # token an output) decodes to the same state and logits.
    filled = _fresh(new_ctx)
    assert filled.decode(batch(toks[:2], seqs=[[0], [1]], pos=[0, 0])) == 0
    assert filled.decode(batch(toks, seqs=seqs, pos=[1, 1, 2, 0, 3], out=[1] * 5)) == 0
    assert memory_view(filled) == runs[0][0]
    np.testing.assert_array_equal(_logit_rows(filled, 5), runs[0][1])


# -- splitter rules decode shows: every token once, every output once -------------------------

SPLIT_SEQS = [[0], [1], [0], [2], [1], [0], [2], [1], [0], [3], [0], [1]]
SPLIT_OUT = [1, 0, 0, 1, 1, 0, 1, 0, 1, 1, 0, 1]


def _split_run(new_ctx: Callable[..., Any], n_ubatch: int, unified: bool) -> tuple[Any, Any]:
    ctx = new_ctx(n_batch=16, n_ubatch=n_ubatch, n_seq_max=4, kv_unified=unified)
    b = batch(prompt(len(SPLIT_SEQS)), seqs=SPLIT_SEQS, out=SPLIT_OUT)
    assert ctx.decode(b) == 0, f"n_ubatch {n_ubatch}"
    flagged = [i for i, f in enumerate(SPLIT_OUT) if f]
    return ctx, np.stack([np.asarray(ctx.get_logits_ith(i)) for i in flagged])


@pytest.mark.invariant("SPL-005", "SPL-020")
@pytest.mark.parametrize("unified", [True, False], ids=["one-stream", "streams"])
@pytest.mark.parametrize("n_ubatch", [1, 2, 3, 5])
def test_every_token_reaches_memory_once_whatever_the_split(
    new_ctx: Callable[..., Any], n_ubatch: int, unified: bool
) -> None:
    """A token split into no ubatch, or into two, shows in ``seq_pos_*`` or in the logits of
    the tokens after it (a missing or doubled key): both must equal the one-ubatch decode's
    (DEC-056's bound, NMSE <= 1e-9)."""
    whole, ref = _split_run(new_ctx, 16, unified)
    ctx, rows = _split_run(new_ctx, n_ubatch, unified)
    # positions are generated per sequence: s holds 0 .. (its token count - 1)
    expect = {s: (0, sum(1 for ids in SPLIT_SEQS if s in ids) - 1) for s in range(4)}
    assert memory_view(ctx) == memory_view(whole) == expect
    for k in range(rows.shape[0]):
        assert_nmse(ref[k], rows[k], 1e-9, f"output {k}, n_ubatch {n_ubatch}")


@pytest.mark.invariant("SPL-007")
@pytest.mark.parametrize("unified", [True, False], ids=["one-stream", "streams"])
@pytest.mark.parametrize("n_ubatch", [1, 2, 3, 16])
def test_every_flagged_token_gets_one_output_whatever_the_split(
    new_ctx: Callable[..., Any], n_ubatch: int, unified: bool
) -> None:
    ctx, rows = _split_run(new_ctx, n_ubatch, unified)
    assert ctx.n_outputs() == sum(SPLIT_OUT) == rows.shape[0]
    assert np.asarray(ctx.get_logits()).shape[0] == sum(SPLIT_OUT)
