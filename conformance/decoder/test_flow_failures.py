"""Failure paths of the flow that need injected faults, worst-case reservations, encode."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest

from conformance.assertions import assert_code, assert_nmse, nmse, raises_code, unchanged
from conformance.decoder.helpers import batch, invalid, memory_view, prompt
from reference_impl.batch.types import Batch

pytestmark = pytest.mark.requires("decoder.logits")


def last_kinds(ctx: Any) -> list[str]:
    return ctx.trace.kinds(ctx.trace.calls - 1)


@pytest.mark.invariant("DEC-025")
@pytest.mark.requires(
    "decoder.faults", "decoder.introspection", "decoder.memory_ops", "decoder.errors"
)
@pytest.mark.parametrize("fault", ["memory_no_update", "memory_failed_compute"])
def test_unexpected_memory_status_is_minus_two_before_any_ubatch(
    new_ctx: Callable[..., Any], target: Any, fault: str
) -> None:
    ctx = new_ctx(n_batch=16, trace=True)
    assert ctx.decode(batch(prompt(3))) == 0
    with unchanged(lambda: memory_view(ctx), "memory"):
        target.inject_fault(ctx, fault)
        assert ctx.decode(batch(prompt(4))) == -2
    assert_code(ctx.last_error, "DEC_MEMORY_STATUS")
    assert "apply" not in last_kinds(ctx)


@pytest.mark.invariant("DEC-026")
@pytest.mark.requires(
    "decoder.faults", "decoder.introspection", "decoder.memory_ops", "decoder.errors"
)
def test_failed_output_reservation_is_minus_two_before_any_ubatch(
    new_ctx: Callable[..., Any],
    target: Any,
) -> None:
    ctx = new_ctx(n_batch=16, trace=True)
    with unchanged(lambda: memory_view(ctx), "memory"):
        target.inject_fault(ctx, "output_reserve")
        assert ctx.decode(batch(prompt(4))) == -2
    assert_code(ctx.last_error, "DEC_OUTPUT_RESERVE")
    assert "apply" not in last_kinds(ctx)


@pytest.mark.invariant("DEC-032")
@pytest.mark.requires("decoder.faults", "decoder.errors", "decoder.memory_ops")
def test_ubatch_with_a_wrong_row_count_fails_and_rolls_back(
    new_ctx: Callable[..., Any], target: Any
) -> None:
    ctx = new_ctx(n_batch=16, n_ubatch=4)
    assert ctx.decode(batch(prompt(3))) == 0
    target.inject_fault(
        ctx, "output_rows"
    )  # the first ubatch of the next decode extracts a row too few
    assert ctx.decode(batch(prompt(6), all_out=True)) == -3
    assert_code(ctx.last_error, "DEC_OUTPUT_COUNT")
    assert ctx.seq_pos_max(0) == 2  # the failed ubatch's positions 3.. are rolled back
    assert invalid(lambda: ctx.get_logits_ith(-1))


@pytest.mark.invariant("DEC-033")
@pytest.mark.requires("decoder.faults", "decoder.errors")
def test_total_row_count_is_checked_at_finalization(
    new_ctx: Callable[..., Any], target: Any
) -> None:
    ctx = new_ctx(n_batch=16, n_ubatch=4)
    target.inject_fault(ctx, "output_total")
    assert ctx.decode(batch(prompt(6), all_out=True)) == -3
    assert_code(ctx.last_error, "DEC_OUTPUT_COUNT")
    assert invalid(lambda: ctx.get_logits_ith(0))


@pytest.mark.invariant("DEC-046", "DEC-047")
@pytest.mark.requires("decoder.introspection", "decoder.memory_ops")
def test_worst_case_reservations(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_ctx=512, n_batch=100, n_ubatch=50, n_seq_max=3, kv_unified=True)
    # prompt shape: n_tokens = min(n_ctx, n_ubatch) = 50 -> rounded up to 51 (3 x 17)
    pp = {
        "kind": "pp",
        "n_tokens": 51,
        "n_seq_tokens": 17,
        "n_seqs": 3,
        "n_outputs": 50,
        "n_kv": 512,
    }
    tg = {"kind": "tg", "n_tokens": 3, "n_seq_tokens": 1, "n_seqs": 3, "n_outputs": 3, "n_kv": 512}
    assert ctx.scheduler.reservations == [pp, tg, pp]
    assert ctx.scheduler.n_reservations == 3  # the count agrees with the recorded shapes
    assert ctx.scheduler.plan is None  # reservations drop stored plans
    for _ in range(2):
        assert ctx.decode(batch(prompt(2))) == 0
    assert len(ctx.scheduler.reservations) == 3  # decodes do not reserve again
    ctx.seq_add(0, 0, -1, 1)
    assert ctx.decode(batch(prompt(1))) == 0
    assert ctx.scheduler.reservations[3:] == [pp]  # after an applied memory update
    assert ctx.scheduler.n_reservations == 4


@pytest.mark.invariant("DEC-049")
@pytest.mark.requires(
    "decoder.memory_ops",
    "decoder.encode_with_memory",
    "decoder.introspection",
    "decoder.non_causal",
)
def test_encode_is_one_non_causal_ubatch_without_memory(new_ctx: Callable[..., Any]) -> None:
    toks = prompt(7)
    ctx = new_ctx(n_batch=16, n_ubatch=16)
    assert ctx.decode(batch(prompt(2))) == 0
    with unchanged(lambda: memory_view(ctx), "memory"):  # nothing left behind
        assert ctx.encode(batch(toks, out=[0] * 7)) == 0
    assert ctx.n_outputs() == 7  # every token is an output, in batch order
    assert ctx.output_ids()[:7].tolist() == list(range(7))
    fresh = new_ctx(n_batch=16, n_ubatch=16, attention_type=1)  # non-causal decode
    assert fresh.decode(batch(toks, all_out=True)) == 0
    for i in range(7):
        assert_nmse(fresh.get_logits_ith(i), ctx.get_logits_ith(i), 1e-9, f"row {i}")
    causal = new_ctx(n_batch=16, n_ubatch=16)
    assert causal.decode(batch(toks, all_out=True)) == 0
    assert nmse(causal.get_logits_ith(0), ctx.get_logits_ith(0)) > 1e-6


@pytest.mark.invariant("DEC-049", "OUT-022")
@pytest.mark.requires("decoder.encode_with_memory", "decoder.abort", "decoder.memory_ops")
def test_aborted_encode_returns_2_and_leaves_nothing_readable(
    new_ctx: Callable[..., Any],
) -> None:
    """An encode stopped by the abort callback returns 2 like decode: memory as before, and no
    row readable, not even the previous call's; the next encode runs normally."""
    toks = prompt(5)
    ctx = new_ctx(n_batch=16, n_ubatch=16)
    assert ctx.decode(batch(prompt(2))) == 0
    assert ctx.encode(batch(toks)) == 0
    want = ctx.get_logits()
    assert want.shape[0] == 5
    ctx.set_abort_callback(lambda: True)
    with unchanged(lambda: memory_view(ctx), "memory"):
        assert ctx.encode(batch(toks)) == 2
    assert ctx.n_outputs() == 0
    assert all(invalid(partial(ctx.get_logits_ith, i)) for i in (0, 4, -1))
    ctx.set_abort_callback(None)
    assert ctx.encode(batch(toks)) == 0
    assert np.array_equal(ctx.get_logits(), want)


@pytest.mark.invariant("DEC-050", "DEC-014")
@pytest.mark.requires("decoder.errors", "decoder.encode_with_memory")
def test_encode_larger_than_n_ubatch_is_invalid(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_batch=16, n_ubatch=4)
    assert ctx.encode(batch(prompt(5))) == -1
    assert_code(ctx.last_error, "DEC_UBATCH_TOO_SMALL")
    assert ctx.encode(batch(prompt(4))) == 0
    assert ctx.last_error is None  # a successful encode clears the last error (DEC-014)
    assert ctx.decode(batch(prompt(20))) == -1  # more than n_batch
    assert ctx.encode(batch(prompt(4))) == 0
    assert ctx.last_error is None, "an encode after a failed decode"


@pytest.mark.invariant("DEC-015")
@pytest.mark.requires("decoder.errors", "decoder.encode_with_memory", "decoder.memory_ops")
def test_empty_encode_is_invalid_and_changes_nothing(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_batch=16, n_ubatch=16)
    assert ctx.encode(batch(prompt(3))) == 0
    want = ctx.get_logits()
    with unchanged(lambda: memory_view(ctx), "memory"):
        assert ctx.encode(Batch.from_lists([])) == -1
    assert_code(ctx.last_error, "DEC_EMPTY_BATCH", field="n_tokens")
    assert np.array_equal(ctx.get_logits(), want)


@pytest.mark.invariant("OUT-033")
@pytest.mark.requires(
    "decoder.introspection",
    "decoder.memory_ops",
    "decoder.sample_router",
    "sampling.greedy",
    "decoder.errors",
)
def test_sequences_with_a_sampler_have_an_output_limit(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_batch=16, n_seq_max=2, kv_unified=True)
    ctx.set_sampler(0, ["greedy"])
    two_outputs_seq0 = batch(
        prompt(4), seqs=[[0], [0], [1], [1]], pos=[0, 1, 0, 1], out=[1, 1, 1, 1]
    )
    assert ctx.decode(two_outputs_seq0) == -1
    assert_code(ctx.last_error, "DEC_SEQ_OUTPUT_LIMIT", seq_id=0, index=1)
    assert memory_view(ctx) == {0: (-1, -1), 1: (-1, -1)}
    # the sequence without a sampler is not limited
    assert (
        ctx.decode(batch(prompt(4), seqs=[[0], [0], [1], [1]], pos=[0, 1, 0, 1], out=[0, 1, 1, 1]))
        == 0
    )
    roomy = new_ctx(n_batch=16, n_seq_max=2, kv_unified=True, n_outputs_max_per_seq=2)
    roomy.set_sampler(0, ["greedy"])
    assert roomy.decode(two_outputs_seq0) == 0


@pytest.mark.invariant("OUT-034")
@pytest.mark.requires("decoder.introspection", "decoder.sample_router", "sampling.greedy")
def test_sampled_tokens_follow_the_row_mapping(new_ctx: Callable[..., Any]) -> None:
    # per-sequence streams: an equal split emits sequence-major, so rows need reordering
    ctx = new_ctx(n_ctx=768, n_batch=16, n_ubatch=3, n_seq_max=3, n_outputs_max_per_seq=2)
    for s in range(3):
        ctx.set_sampler(s, ["greedy"])
    b = batch(
        prompt(9),
        seqs=[[i // 3] for i in range(9)],
        pos=[i % 3 for i in range(9)],
        out=[1, 0, 1] * 3,
    )
    assert ctx.decode(b) == 0
    assert ctx.outputs.swaps  # emission order (0, 3, 6, 2, 5, 8) differs from batch order
    for i in (0, 2, 3, 5, 6, 8):
        assert ctx.get_sampled_token_ith(i) == int(np.argmax(ctx.get_logits_ith(i)))
    with raises_code("OUT_NOT_OUTPUT"):
        ctx.get_sampled_token_ith(1)  # not flagged


@pytest.mark.invariant("DEC-068")
@pytest.mark.requires("decoder.memory_ops", "decoder.errors")
def test_negative_position_is_refused_with_minus_one(new_ctx: Callable[..., Any]) -> None:
    # Sequence 1's memory is empty, so the sanitizer lets a negative start through (SAN-021);
    # planning its cells refuses it before any K/V is written or output row reserved.
    ctx = new_ctx(n_batch=16, n_seq_max=2, kv_unified=True)
    assert ctx.decode(batch(prompt(3), pos=[0, 1, 2])) == 0
    last = np.asarray(ctx.get_logits_ith(2)).copy()
    with unchanged(lambda: memory_view(ctx), "memory"):
        assert ctx.decode(batch(prompt(3, start=9), seqs=[[1]] * 3, pos=[-2, -1, 0])) == -1
    assert_code(ctx.last_error, "KV_POS_RANGE", field="pos", index=0)
    assert np.array_equal(last, np.asarray(ctx.get_logits_ith(2)))
    assert ctx.decode(batch(prompt(3, start=9), seqs=[[1]] * 3, pos=[0, 1, 2])) == 0
    assert memory_view(ctx) == {0: (0, 2), 1: (0, 2)}
