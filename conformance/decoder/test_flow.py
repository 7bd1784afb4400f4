"""The decode flow: return codes, bad input, no slot, failures and rollback (DEC-011 .. DEC-033)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.assertions import assert_code, unchanged
from conformance.decoder.helpers import RETURN_CODES, batch, invalid, memory_view, prompt
from reference_impl.batch.types import Batch
from reference_impl.memory.status import ComputeStatus

pytestmark = pytest.mark.requires("decoder.logits")

N_VOCAB = 508


def snapshot_state(ctx: Any, target: Any) -> Any:
    """Everything observable about the memory (the full cell table on the reference)."""
    view = memory_view(ctx)
    if target.has("decoder.introspection"):
        return view, ctx.memory.state()
    return view


def observed(ctx: Any, target: Any, logits: Callable[[], Any]) -> dict[str, Any]:
    """The memory (``snapshot_state``) and the logits a failed decode must leave as they were."""
    return {"memory": snapshot_state(ctx, target), "logits": logits()}


@pytest.mark.requires("decoder.memory_ops")
@pytest.mark.uses("decoder.introspection", "decoder.errors")
@pytest.mark.invariant("DEC-015")
def test_empty_batch_is_invalid_and_changes_nothing(
    new_ctx: Callable[..., Any], target: Any
) -> None:
    ctx = new_ctx(n_batch=32)
    assert ctx.decode(batch(prompt(5), all_out=True)) == 0
    with unchanged(lambda: observed(ctx, target, ctx.get_logits), "the context"):
        assert ctx.decode(Batch.from_lists([])) == -1
    if target.has("decoder.errors"):  # refused before the sanitizer, with its own code
        assert_code(ctx.last_error, "DEC_EMPTY_BATCH", field="n_tokens")


INVALID_BATCHES = {
    "gap": lambda n: batch(prompt(3), pos=[n, n + 2, n + 3]),
    "overlap": lambda n: batch(prompt(2), pos=[n - 1, n]),
    "decreasing": lambda n: batch(prompt(3), pos=[n + 1, n, n + 2]),
    "seq_id_range": lambda n: batch(prompt(2), seqs=[[0], [4]]),
    "token_negative": lambda n: batch([5, -1, 6]),
    "token_n_vocab": lambda n: batch([5, N_VOCAB]),
}


@pytest.mark.requires("decoder.memory_ops", "decoder.batch_rules")
@pytest.mark.uses("decoder.introspection")
@pytest.mark.invariant("DEC-016", "DEC-013")
@pytest.mark.parametrize("case", sorted(INVALID_BATCHES))
def test_rejected_batches_return_minus_one_and_change_nothing(
    new_ctx: Callable[..., Any], target: Any, case: str
) -> None:
    ctx = new_ctx(n_batch=32, n_seq_max=2)
    assert ctx.decode(batch(prompt(6), all_out=True)) == 0
    with unchanged(lambda: observed(ctx, target, ctx.get_logits), "the context"):
        assert ctx.decode(INVALID_BATCHES[case](6)) == -1


@pytest.mark.invariant("DEC-017", "DEC-014")
@pytest.mark.requires("decoder.errors", "decoder.memory_ops", "decoder.batch_rules")
@pytest.mark.parametrize(("tokens", "index"), [([5, -1, 6], 1), ([5, 6, N_VOCAB, -3], 2)])
def test_token_outside_vocabulary_names_the_first_bad_token(
    new_ctx: Callable[..., Any], tokens: list[int], index: int
) -> None:
    ctx = new_ctx(n_batch=32)
    assert ctx.decode(batch(tokens)) == -1
    assert_code(ctx.last_error, "SAN_TOKEN_RANGE", field="token", index=index)
    assert ctx.seq_pos_max(0) == -1
    assert ctx.decode(batch(prompt(2))) == 0
    assert ctx.last_error is None


@pytest.mark.invariant("DEC-017")
@pytest.mark.requires("decoder.memory_ops", "decoder.batch_rules")
@pytest.mark.parametrize("tokens", [[5, -1, 6], [5, 6, N_VOCAB], [N_VOCAB + 100]])
def test_token_outside_vocabulary_returns_minus_one_and_changes_nothing(
    new_ctx: Callable[..., Any], tokens: list[int]
) -> None:
    """DEC-017 as decode shows it (the code naming the token is checked above, with
    decoder.errors): -1, the memory as it was, and the context still usable."""
    ctx = new_ctx(n_batch=32)
    assert ctx.decode(batch(prompt(3))) == 0
    with unchanged(lambda: memory_view(ctx), "seq_pos_min/max"):
        assert ctx.decode(batch(tokens)) == -1
    assert ctx.decode(batch(prompt(2))) == 0
    assert ctx.seq_pos_max(0) == 4


@pytest.mark.invariant("DEC-013")
@pytest.mark.requires("decoder.errors")
def test_decode_rejects_non_batches_with_type_error(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_batch=8)
    with pytest.raises(TypeError):
        ctx.decode([1, 2, 3])


@pytest.mark.invariant("DEC-013", "DEC-014")
@pytest.mark.requires("decoder.errors")
@given(
    tokens=st.lists(st.integers(-2, N_VOCAB + 1), min_size=0, max_size=12),
    seqs=st.one_of(
        st.none(),
        st.lists(st.sets(st.integers(-1, 3), min_size=1, max_size=2), min_size=12, max_size=12),
    ),
    pos=st.one_of(st.none(), st.lists(st.integers(-1, 12), min_size=12, max_size=12)),
)
def test_decode_always_returns_a_documented_code(
    target: Any, load: Callable[[str], Any], tokens: list[int], seqs: Any, pos: Any
) -> None:
    ctx = target.new_context(load("mha"), n_ctx=256, n_batch=8, n_ubatch=4, n_seq_max=3)
    n = len(tokens)
    b = Batch.from_lists(
        tokens,
        seq_ids=None if seqs is None else [sorted(s) for s in seqs[:n]],
        pos=None if pos is None else pos[:n],
    )
    code = ctx.decode(b)
    assert code in RETURN_CODES
    if code == 0:
        assert ctx.last_error is None
    else:
        assert ctx.last_error is not None and ctx.last_error.code


@pytest.mark.uses("decoder.introspection", "decoder.batch_rules")
@pytest.mark.invariant("DEC-018")
@pytest.mark.requires("decoder.errors", "decoder.memory_ops")
def test_batch_larger_than_n_batch_is_invalid(new_ctx: Callable[..., Any], target: Any) -> None:
    ctx = new_ctx(n_batch=8, n_ubatch=4)
    with unchanged(lambda: snapshot_state(ctx, target), "memory"):
        assert ctx.decode(batch(prompt(9))) == -1
    assert_code(ctx.last_error, "DEC_BATCH_TOO_LARGE", field="n_tokens")
    if target.has("decoder.batch_rules"):
        # an oversized batch that is also invalid reports the sanitizer's code
        assert ctx.decode(batch([*prompt(8), -1])) == -1
        assert_code(ctx.last_error, "SAN_TOKEN_RANGE")


@pytest.mark.uses("decoder.introspection")
@pytest.mark.invariant("DEC-019")
@pytest.mark.requires("decoder.errors", "decoder.non_causal", "decoder.memory_ops")
def test_non_causal_batch_larger_than_n_ubatch_is_invalid(
    new_ctx: Callable[..., Any], target: Any
) -> None:
    ctx = new_ctx(n_batch=16, n_ubatch=4, attention_type=1)
    with unchanged(lambda: snapshot_state(ctx, target), "memory"):
        assert ctx.decode(batch(prompt(5))) == -1
    assert_code(ctx.last_error, "DEC_UBATCH_TOO_SMALL")
    assert ctx.decode(batch(prompt(4))) == 0


@pytest.mark.uses("decoder.introspection")
@pytest.mark.invariant("DEC-020")
@pytest.mark.requires("decoder.errors", "decoder.memory_ops")
def test_embedding_rows_of_the_wrong_width_are_invalid(
    new_ctx: Callable[..., Any], target: Any
) -> None:
    ctx = new_ctx(n_batch=16)
    good = np.zeros((2, 64), dtype=np.float32)  # the gqa fixture has n_embd 64
    bad = np.zeros((2, 63), dtype=np.float32)
    with unchanged(lambda: snapshot_state(ctx, target), "memory"):
        assert ctx.decode(Batch(embd=bad)) == -1
    assert_code(ctx.last_error, "DEC_EMBD_WIDTH")
    assert ctx.decode(Batch(embd=good)) == 0


@pytest.mark.invariant("DEC-069")
@pytest.mark.uses("decoder.memory_ops")
def test_a_batch_with_tokens_and_embeddings_decodes_the_tokens(
    new_ctx: Callable[..., Any], target: Any
) -> None:
    """The embedding rows of a token batch (SAN-025) are carried, not decoded: every logits row
    equals the token-only batch's, and memory holds the same positions."""
    toks = prompt(5)
    plain = batch(toks, all_out=True)
    rows = np.full((len(toks), 64), 0.5, dtype=np.float32)  # the gqa fixture has n_embd 64
    both = Batch(plain.token, rows, plain.pos, plain.n_seq_id, plain.seq_id, plain.logits)
    want_ctx, got_ctx = new_ctx(n_batch=16), new_ctx(n_batch=16)
    assert want_ctx.decode(plain) == 0
    assert got_ctx.decode(both) == 0, "decode of tokens + embeddings failed"
    np.testing.assert_array_equal(
        np.asarray(got_ctx.get_logits()), np.asarray(want_ctx.get_logits())
    )
    if target.has("decoder.memory_ops"):
        assert memory_view(got_ctx) == memory_view(want_ctx)


@pytest.mark.invariant("DEC-021")
@pytest.mark.requires("decoder.embeddings")
def test_embeddings_make_every_token_an_output(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_batch=16, embeddings=True)
    assert ctx.decode(batch(prompt(5), out=[0, 1, 0, 0, 0])) == 0
    assert ctx.n_outputs() == 5
    assert not any(invalid(partial(ctx.get_logits_ith, i)) for i in range(5))


@pytest.mark.invariant("DEC-022")
@pytest.mark.requires("decoder.memory_ops")
def test_success_keeps_every_token_in_memory(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_batch=32, n_ubatch=4, n_seq_max=3, kv_unified=True)
    assert ctx.decode(batch(prompt(4), seqs=[[2]] * 4)) == 0
    b = batch(prompt(7), seqs=[[0], [1], [0], [1], [0], [0], [1]], pos=[0, 0, 1, 1, 2, 3, 2])
    assert ctx.decode(b) == 0
    assert memory_view(ctx, range(3)) == {0: (0, 3), 1: (0, 2), 2: (0, 3)}


def _fill(ctx: Any, n: int, n_batch: int) -> None:
    toks = prompt(n)
    for i in range(0, n, n_batch):
        assert ctx.decode(batch(toks[i : i + n_batch])) == 0


@pytest.mark.uses("decoder.introspection", "decoder.errors")
@pytest.mark.invariant("DEC-023", "MEM-008")
@pytest.mark.requires("decoder.memory_ops")
def test_no_slot_returns_one_and_leaves_memory_exactly_as_it_was(
    new_ctx: Callable[..., Any], target: Any
) -> None:
    ctx = new_ctx(n_ctx=256, n_batch=64, n_ubatch=16)
    _fill(ctx, 250, 64)
    with unchanged(lambda: observed(ctx, target, lambda: ctx.get_logits_ith(-1)), "the context"):
        assert ctx.decode(batch(prompt(10))) == 1
    if target.has("decoder.errors"):
        assert_code(ctx.last_error, "DEC_NO_SLOT")
    assert ctx.decode(batch(prompt(6))) == 0  # what fits still fits
    assert ctx.seq_pos_max(0) == 255


@pytest.mark.invariant("DEC-024")
@pytest.mark.requires("decoder.introspection")
def test_failed_prepare_gets_one_optimizing_update_and_no_blind_retry(
    new_ctx: Callable[..., Any],
) -> None:
    ctx = new_ctx(n_ctx=256, n_batch=64, n_ubatch=16, trace=True)
    _fill(ctx, 250, 64)
    assert ctx.decode(batch(prompt(10))) == 1
    events = ctx.trace.of_call(ctx.trace.calls - 1)
    updates = [e.data for e in events if e.kind == "memory_update"]
    assert updates == [{"optimize": False, "applied": False}, {"optimize": True, "applied": False}]
    inits = [e for e in events if e.kind == "init_batch"]
    assert len(inits) == 1 and inits[0].data["retried"] is False


@pytest.mark.invariant("DEC-027", "DEC-028")
@pytest.mark.requires(
    "decoder.faults", "decoder.memory_ops", "decoder.introspection", "decoder.errors"
)
@pytest.mark.parametrize(
    ("status", "code"), [(ComputeStatus.ALLOC_FAILED, -2), (ComputeStatus.FAILED, -3)]
)
def test_failed_ubatch_stops_decode_and_rolls_back_its_sequences(
    new_ctx: Callable[..., Any], target: Any, status: ComputeStatus, code: int
) -> None:
    ctx = new_ctx(n_batch=32, n_ubatch=4, n_seq_max=2, kv_unified=True, trace=True)
    assert ctx.decode(batch(prompt(3), seqs=[[1]] * 3)) == 0
    target.inject_failure(ctx, 1, status)  # ubatch 1 of the next decode fails
    # tokens 0-3 -> ubatch 0, 4-7 -> ubatch 1 (fails), 8-9 -> ubatch 2 never runs
    assert ctx.decode(batch(prompt(10))) == code
    assert_code(ctx.last_error, {-2: "DEC_ALLOC_FAILED", -3: "DEC_COMPUTE_FAILED"}[code])
    assert (ctx.seq_pos_min(0), ctx.seq_pos_max(0)) == (0, 3)  # ubatch 0 stays
    assert (ctx.seq_pos_min(1), ctx.seq_pos_max(1)) == (0, 2)  # other sequences untouched
    applies = [e for e in ctx.trace.of_call(ctx.trace.calls - 1) if e.kind == "apply"]
    assert len(applies) == 2  # no ubatch after the failed one


@pytest.mark.invariant("DEC-028")
@pytest.mark.requires("decoder.faults", "decoder.memory_ops")
def test_rollback_covers_every_sequence_of_a_coupled_token(
    new_ctx: Callable[..., Any], target: Any
) -> None:
    ctx = new_ctx(n_batch=32, n_ubatch=8, n_seq_max=2, kv_unified=True)
    assert ctx.decode(batch(prompt(2), seqs=[[0, 1]] * 2)) == 0
    target.inject_failure(ctx, 0, ComputeStatus.FAILED)
    assert ctx.decode(batch(prompt(2), seqs=[[0, 1]] * 2)) == -3
    assert ctx.seq_pos_max(0) == 1 and ctx.seq_pos_max(1) == 1


@pytest.mark.invariant("DEC-029", "DEC-027")
@pytest.mark.requires("decoder.abort", "decoder.memory_ops")
def test_abort_on_first_ubatch_returns_two_and_restores_memory(
    new_ctx: Callable[..., Any], target: Any
) -> None:
    ctx = new_ctx(n_batch=32, n_ubatch=4)
    assert ctx.decode(batch(prompt(5))) == 0
    ctx.set_abort_callback(lambda: True)
    with unchanged(lambda: memory_view(ctx), "memory"):
        assert ctx.decode(batch(prompt(10))) == 2


@pytest.mark.invariant("DEC-030")
@pytest.mark.requires("decoder.abort", "decoder.memory_ops")
def test_abort_from_ubatch_k_keeps_the_earlier_ubatches(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_batch=32, n_ubatch=4)

    # Engines may ask the callback any number of times per ubatch; the memory tells which
    # ubatch is being computed (it is applied before its compute).
    def abort_from_third_ubatch() -> bool:
        return ctx.seq_pos_max(0) >= 8

    ctx.set_abort_callback(abort_from_third_ubatch)
    assert ctx.decode(batch(prompt(12))) == 2
    assert (ctx.seq_pos_min(0), ctx.seq_pos_max(0)) == (0, 7)  # ubatches 0 and 1 of 4 tokens


@pytest.mark.invariant("MEM-003")
@pytest.mark.requires("decoder.abort", "decoder.memory_ops")
@pytest.mark.uses("decoder.faults")
def test_memory_outcomes_become_decode_return_codes(
    new_ctx: Callable[..., Any], target: Any
) -> None:
    """What decode shows of MEM-003: no slot -> 1, success -> 0, an aborted ubatch -> 2, and,
    where faults can be injected, a failed allocation -> -2 and a failed compute -> -3."""
    ctx = new_ctx(n_ctx=256, n_batch=64, n_ubatch=16)
    _fill(ctx, 250, 64)
    assert ctx.decode(batch(prompt(10))) == 1
    assert ctx.decode(batch(prompt(6))) == 0
    aborting = new_ctx(n_batch=32, n_ubatch=4)
    aborting.set_abort_callback(lambda: True)
    assert aborting.decode(batch(prompt(6))) == 2
    if target.has("decoder.faults"):
        for status, code in ((ComputeStatus.ALLOC_FAILED, -2), (ComputeStatus.FAILED, -3)):
            failing = new_ctx(n_batch=32, n_ubatch=4)
            target.inject_failure(failing, 0, status)
            assert failing.decode(batch(prompt(3))) == code, status.name


@pytest.mark.invariant("MEM-016")
@pytest.mark.requires("decoder.memory_ops")
def test_a_cleared_memory_takes_a_full_batch_again(new_ctx: Callable[..., Any]) -> None:
    """What decode shows of MEM-016: a full context refuses one more token (no slot: 1); after
    memory_clear every sequence is empty and the same tokens fit again."""
    ctx = new_ctx(n_ctx=256, n_batch=64, n_ubatch=16)
    _fill(ctx, 256, 64)
    assert ctx.decode(batch(prompt(1))) == 1, "the context should be full"
    ctx.memory_clear(True)
    assert (ctx.seq_pos_min(0), ctx.seq_pos_max(0)) == (-1, -1)
    _fill(ctx, 256, 64)
    assert ctx.seq_pos_max(0) == 255


@pytest.mark.invariant("MEM-011", "DEC-028")
@pytest.mark.requires("decoder.abort", "decoder.memory_ops")
def test_an_aborted_ubatch_rolls_back_every_sequence_it_lists(
    new_ctx: Callable[..., Any],
) -> None:
    """Tokens shared by sequences 0 and 1, split into ubatches of 4; the second is aborted:
    both sequences lose positions 4.. (not only each token's first sequence), sequence 2 is
    untouched."""
    ctx = new_ctx(n_batch=32, n_ubatch=4, n_seq_max=3, kv_unified=True)
    assert ctx.decode(batch(prompt(2), seqs=[[2]] * 2)) == 0
    ctx.set_abort_callback(lambda: ctx.seq_pos_max(0) >= 4)
    assert ctx.decode(batch(prompt(8), seqs=[[0, 1]] * 8)) == 2
    assert memory_view(ctx, range(3)) == {0: (0, 3), 1: (0, 3), 2: (0, 1)}


@pytest.mark.invariant("DEC-011", "DEC-031", "DEC-042")
@pytest.mark.requires("decoder.introspection")
def test_trace_follows_the_seven_steps(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_batch=32, n_ubatch=4, trace=True)
    assert ctx.decode(batch(prompt(6), out=[1, 0, 0, 1, 0, 1])) == 0
    kinds = ctx.trace.kinds(0)
    head = ["sanitize", "memory_update", "init_batch", "split", "output_reserve"]
    assert kinds[: len(head)] == head
    assert kinds[-2:] == ["map_outputs", "done"]
    body = kinds[len(head) : -2]
    per_ubatch = ["apply", "plan", "alloc", "bind"] + ["kv_write"] * 3 + ["compute", "extract"]
    # ubatch 0: 4 tokens (new plan), ubatch 1: 2 tokens (new shape -> new plan)
    assert body == per_ubatch + per_ubatch
    plans = [e.data["reused"] for e in ctx.trace.of_call(0) if e.kind == "plan"]
    assert plans == [False, False]
    # a failing step ends the trace with one error record
    assert ctx.decode(batch([-5])) == -1
    assert ctx.trace.kinds(1) == ["error"]
    # records are numbered in order across the context's calls, each naming its call
    assert [e.seq_no for e in ctx.trace.events] == list(range(len(ctx.trace.events)))
    assert [e.call for e in ctx.trace.events] == [0] * len(kinds) + [1]
    # the trace is kept only when asked for: by default a context records no event
    quiet = new_ctx(n_batch=32, n_ubatch=4)
    assert quiet.decode(batch(prompt(6))) == 0
    assert quiet.trace.kinds() == []


@pytest.mark.invariant("DEC-042", "DEC-027")
@pytest.mark.requires("decoder.abort", "decoder.introspection", "decoder.memory_ops")
def test_an_aborted_ubatch_is_traced_and_never_computed(new_ctx: Callable[..., Any]) -> None:
    """The abort callback is asked after a ubatch's apply: ubatches 0 and 1 run, ubatch 2 is
    applied, aborted (one ``abort`` record) and never planned or computed."""
    ctx = new_ctx(n_batch=32, n_ubatch=4, trace=True)
    ctx.set_abort_callback(lambda: ctx.seq_pos_max(0) >= 8)
    assert ctx.decode(batch(prompt(12))) == 2
    events = ctx.trace.of_call(0)
    kinds = [e.kind for e in events]
    assert (kinds.count("apply"), kinds.count("compute"), kinds.count("abort")) == (3, 2, 1)
    assert kinds[-3:] == ["apply", "abort", "error"]
    assert events[-1].data["code"] == 2


@pytest.mark.invariant("DEC-012")
@pytest.mark.requires("decoder.introspection", "decoder.embeddings")
@pytest.mark.parametrize("flags", [[1, 0, 0, 1, 0, 1, 1], None, [0] * 6 + [1]])
def test_per_ubatch_output_counts(new_ctx: Callable[..., Any], flags: Any) -> None:
    ctx = new_ctx(n_batch=32, n_ubatch=3, trace=True)
    assert ctx.decode(batch(prompt(7), out=flags)) == 0
    split = next(e for e in ctx.trace.of_call(0) if e.kind == "split")
    f = flags if flags is not None else [0] * 6 + [1]
    assert split.data["outputs"] == [sum(f[0:3]), sum(f[3:6]), sum(f[6:7])]
    assert sum(split.data["outputs"]) == ctx.n_outputs()
    ctx2 = new_ctx(n_batch=32, n_ubatch=3, trace=True, embeddings=True)
    assert ctx2.decode(batch(prompt(7), out=flags)) == 0
    split2 = next(e for e in ctx2.trace.of_call(0) if e.kind == "split")
    assert split2.data["outputs"] == [3, 3, 1]
