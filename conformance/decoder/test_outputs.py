"""Outputs: reservation, the id mapping, swaps, lazy reorder and accessors (OUT-001 .. OUT-022)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.assertions import assert_code, assert_nmse, raises_code, unchanged
from conformance.decoder.helpers import batch, invalid, prompt
from reference_impl.batch.types import Batch
from reference_impl.memory.status import ComputeStatus

pytestmark = pytest.mark.requires("decoder.logits")


def multi_seq_batch(n_seq: int, per_seq: int, flags: list[int] | None = None) -> Batch:
    """Tokens of ``n_seq`` sequences interleaved in batch order: seq of token i is i % n_seq."""
    n = n_seq * per_seq
    toks = prompt(n)
    seqs = [[i % n_seq] for i in range(n)]
    pos = [i // n_seq for i in range(n)]
    return batch(toks, seqs=seqs, pos=pos, out=flags)


def selection_sort_swaps(order: list[int]) -> list[tuple[int, int]]:
    """Independent restatement of OUT-007 for comparison."""
    order = list(order)
    swaps = []
    for i in range(len(order) - 1):
        j = min(range(i, len(order)), key=lambda k: order[k])
        if j != i:
            order[i], order[j] = order[j], order[i]
            swaps.append((i, j))
    return swaps


@pytest.mark.invariant("OUT-001", "OUT-002")
@pytest.mark.requires("decoder.introspection", "decoder.embeddings")
def test_reservation_rows_and_growth(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_batch=64, n_seq_max=4, kv_unified=True, embeddings=True, trace=True)
    out = ctx.outputs
    assert out.capacity == 4  # a new context holds n_seq_max rows
    held = (out.logits, out.embd, out.sampled)
    assert ctx.decode(batch(prompt(2))) == 0
    assert out.capacity == 4
    assert out.logits.shape == (4, 508) and out.embd is not None and out.embd.shape == (4, 64)
    # exactly the rows it holds (max(2, n_seq_max) == 4): the same buffers, nothing reallocated
    assert all(a is b for a, b in zip((out.logits, out.embd, out.sampled), held))
    assert ctx.decode(batch(prompt(10), seqs=[[1]] * 10)) == 0
    assert out.capacity == 10
    held = (out.logits, out.embd, out.sampled)
    assert ctx.decode(batch(prompt(3), seqs=[[2]] * 3)) == 0
    assert out.capacity == 10  # never shrinks
    assert all(a is b for a, b in zip((out.logits, out.embd, out.sampled), held))
    # nor cleared: rows 3.. past this decode's 3 outputs still hold the 10-token decode's rows
    assert out.logits[3:].any(axis=1).all() and out.embd[3:].any(axis=1).all()
    # each decode's reservation step reports the rows it provides
    reserved = [e.data["rows"] for e in ctx.trace.events if e.kind == "output_reserve"]
    assert reserved == [4, 10, 10]
    plain = new_ctx(n_batch=64)
    assert plain.outputs.embd is None


@pytest.mark.invariant("OUT-003", "OUT-022")
@pytest.mark.requires("decoder.faults", "decoder.introspection")
def test_failed_decode_leaves_no_readable_row(new_ctx: Callable[..., Any], target: Any) -> None:
    ctx = new_ctx(n_batch=32, n_ubatch=4)
    assert ctx.decode(batch(prompt(6), all_out=True)) == 0
    target.inject_failure(ctx, 1, ComputeStatus.FAILED)
    assert ctx.decode(batch(prompt(8), all_out=True)) == -3
    assert ctx.n_outputs() == 0
    assert all(invalid(partial(ctx.get_logits_ith, i)) for i in (-1, -2, 0, 3, 7))
    if hasattr(ctx, "output_ids"):
        assert (ctx.output_ids() == -1).all()


@pytest.mark.invariant("OUT-003", "OUT-015", "OUT-019")
def test_a_later_decode_forgets_the_earlier_mapping(new_ctx: Callable[..., Any]) -> None:
    """Each decode starts from an empty mapping: a batch index flagged in the previous decode
    but not in this one (including one past this batch's tokens) has no row, even where the
    old row number would still be in range of the new n_outputs."""
    ctx = new_ctx(n_batch=32)
    assert ctx.decode(batch(prompt(6), all_out=True)) == 0
    assert ctx.decode(batch(prompt(4, start=50), pos=[6, 7, 8, 9], out=[1, 0, 1, 0])) == 0
    assert not invalid(partial(ctx.get_logits_ith, 0))
    assert not invalid(partial(ctx.get_logits_ith, 2))
    stale = [i for i in (1, 3, 4, 5) if not invalid(partial(ctx.get_logits_ith, i))]
    assert stale == [], f"indices {stale} still resolve to a row of the previous decode"


@pytest.mark.invariant("OUT-022")
@pytest.mark.requires("decoder.abort")
def test_aborted_decode_leaves_no_readable_row(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_batch=32, n_ubatch=4)
    assert ctx.decode(batch(prompt(3), all_out=True)) == 0
    ctx.set_abort_callback(lambda: True)
    assert ctx.decode(batch(prompt(4), all_out=True)) == 2
    assert all(invalid(partial(ctx.get_logits_ith, i)) for i in (-1, 0, 1))


@pytest.mark.invariant("OUT-004", "DEC-006")
@pytest.mark.requires("decoder.errors", "decoder.memory_ops")
def test_more_outputs_than_n_outputs_max_is_invalid(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_batch=32, n_outputs_max=4)
    assert ctx.decode(batch(prompt(6), all_out=True)) == -1
    assert_code(ctx.last_error, "DEC_TOO_MANY_OUTPUTS")
    assert ctx.seq_pos_max(0) == -1
    assert ctx.decode(batch(prompt(6), out=[1, 1, 0, 0, 1, 1])) == 0
    # n_outputs_max 0 means n_batch
    unlimited = new_ctx(n_batch=8, n_outputs_max=0)
    assert unlimited.decode(batch(prompt(8), all_out=True)) == 0


@pytest.mark.invariant("OUT-005", "OUT-007", "OUT-006")
@pytest.mark.requires("decoder.introspection")
def test_rows_follow_emission_order_and_swaps_are_a_selection_sort(
    new_ctx: Callable[..., Any],
) -> None:
    # 3 streams (non-unified): split_equal emits sequence-major, so out_ids is not ascending.
    ctx = new_ctx(n_ctx=768, n_batch=32, n_ubatch=12, n_seq_max=3, trace=True)
    flags = [1, 0, 1, 1, 1, 0, 0, 1, 1, 1, 0, 1]
    assert ctx.decode(multi_seq_batch(3, 4, flags)) == 0
    ev = next(e for e in ctx.trace.events if e.kind == "map_outputs")
    emitted = ev.data["out_ids"]
    assert emitted != sorted(emitted)
    assert ev.data["swaps"] == selection_sort_swaps(emitted)
    raw = ctx.outputs.logits[: ctx.n_outputs()].copy()  # before any accessor: emission order
    flagged = [i for i, f in enumerate(flags) if f]
    ids = ctx.output_ids()
    assert [int(ids[i]) for i in flagged] == list(range(len(flagged)))
    assert all(ids[i] == -1 for i in range(len(ids)) if i not in flagged)
    for k, b in enumerate(emitted):
        assert np.array_equal(raw[k], ctx.get_logits_ith(b))


@pytest.mark.invariant("OUT-006")
@pytest.mark.parametrize("n_ubatch", [12, 5])
def test_each_flagged_token_reads_its_own_row(new_ctx: Callable[..., Any], n_ubatch: int) -> None:
    """Through decode alone: three interleaved sequences in per-sequence streams, so the
    ubatches run sequence-major and rows come out in another order than the batch's. Every
    flagged token's row is the logits of that token (a fresh context fed only its sequence
    gives the same row within DEC-056's bound), get_logits() lists those rows in batch order,
    and an unflagged index has no row."""
    flags = [1, 0, 1, 1, 1, 0, 0, 1, 1, 1, 0, 1]
    tokens = prompt(12)  # multi_seq_batch's tokens: token i belongs to sequence i % 3
    ctx = new_ctx(n_ctx=768, n_batch=32, n_ubatch=n_ubatch, n_seq_max=3)
    b = multi_seq_batch(3, 4, flags)
    assert ctx.decode(b) == 0
    flagged = [i for i, f in enumerate(flags) if f]
    rows = ctx.get_logits()
    assert rows.shape[0] == len(flagged)
    for rank, i in enumerate(flagged):
        assert np.array_equal(ctx.get_logits_ith(i), rows[rank]), f"batch index {i}"
    assert all(invalid(partial(ctx.get_logits_ith, i)) for i, f in enumerate(flags) if not f)
    for s in range(3):  # the same tokens, one sequence per fresh context
        mine = [i for i in range(len(flags)) if i % 3 == s]
        alone = new_ctx(n_ctx=768, n_batch=32)
        toks = [tokens[i] for i in mine]
        assert alone.decode(batch(toks, out=[flags[i] for i in mine])) == 0
        for i in (i for i in mine if flags[i]):
            want = alone.get_logits_ith(mine.index(i))
            assert_nmse(want, ctx.get_logits_ith(i), 1e-9, f"batch index {i} (seq {s})")


@pytest.mark.invariant("OUT-008", "OUT-009")
@pytest.mark.requires(
    "decoder.introspection", "decoder.embeddings", "decoder.memory_ops", "decoder.pooling"
)
def test_swaps_apply_on_first_access_only(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_ctx=512, n_batch=32, n_ubatch=8, n_seq_max=2, embeddings=True, pooling=1)
    assert ctx.decode(multi_seq_batch(2, 4)) == 0
    pending = list(ctx.outputs.swaps)
    assert pending
    ctx.get_embeddings_seq(0)
    ctx.seq_pos_max(1)
    assert ctx.outputs.swaps == pending  # pooled accessor and memory ops leave them pending
    before = ctx.outputs.logits.copy()
    ctx.reorder_outputs()
    assert ctx.outputs.swaps == []
    after = ctx.outputs.logits.copy()
    assert not np.array_equal(before, after)
    ctx.reorder_outputs()
    ctx.get_logits()
    assert np.array_equal(ctx.outputs.logits, after)  # idempotent


@pytest.mark.invariant("OUT-010", "OUT-019")
@pytest.mark.parametrize(("n_seq_max", "unified"), [(1, False), (3, True), (3, False)])
def test_rows_are_in_batch_order_whatever_the_split(
    new_ctx: Callable[..., Any], n_seq_max: int, unified: bool
) -> None:
    n_seq = n_seq_max
    flags = [1, 1, 0, 1, 0, 1, 1, 0, 1, 1, 1, 1][: 4 * n_seq]
    # sequences in contiguous blocks: an equal split interleaves them, so emission order differs
    b = batch(
        prompt(4 * n_seq),
        seqs=[[i // 4] for i in range(4 * n_seq)],
        pos=[i % 4 for i in range(4 * n_seq)],
        out=flags,
    )
    ref = new_ctx(n_ctx=256, n_batch=16, n_ubatch=16, n_seq_max=n_seq, kv_unified=True)
    ctx = new_ctx(n_ctx=256 * n_seq, n_batch=16, n_ubatch=3, n_seq_max=n_seq, kv_unified=unified)
    assert ref.decode(b) == 0 and ctx.decode(b) == 0
    flagged = [i for i, f in enumerate(flags) if f]
    assert ctx.n_outputs() == len(flagged)
    valid = {i for i in range(16) if not invalid(partial(ctx.get_logits_ith, i))}
    assert valid == set(flagged)
    all_rows = ctx.get_logits()
    assert all_rows.shape[0] == len(flagged)
    for k, i in enumerate(flagged):
        assert np.array_equal(all_rows[k], ctx.get_logits_ith(i))
        assert_nmse(ref.get_logits_ith(i), all_rows[k], 1e-9, f"row {i}")


@pytest.mark.invariant("OUT-011", "OUT-021")
def test_previous_outputs_survive_invalid_and_no_slot_decodes(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_ctx=256, n_batch=64, n_ubatch=8, n_seq_max=1)
    b = batch(prompt(40), out=[i % 3 == 0 for i in range(40)])
    assert ctx.decode(b) == 0
    expected = {i: ctx.get_logits_ith(i) for i in range(0, 40, 3)}
    # a second context decodes the same batch but is not read until after the failures
    ctx2 = new_ctx(n_ctx=256, n_batch=64, n_ubatch=8, n_seq_max=1)
    assert ctx2.decode(b) == 0
    assert ctx2.decode(batch([-1])) == -1
    for i, row in expected.items():
        assert np.array_equal(ctx2.get_logits_ith(i), row)
    for _ in range(3):
        assert ctx2.decode(batch(prompt(64))) == 0
    rows = {i: ctx2.get_logits_ith(i) for i in (-1, 63)}
    assert ctx2.decode(batch(prompt(64))) == 1  # no room: 40 + 192 + 64 > 256
    for i, row in rows.items():
        assert np.array_equal(ctx2.get_logits_ith(i), row)


@pytest.mark.invariant("OUT-012", "OUT-013", "OUT-014", "OUT-015", "OUT-016")
def test_accessor_index_semantics(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_batch=16)
    flags = [0, 1, 0, 1, 1, 0]
    assert ctx.decode(batch(prompt(6), out=flags)) == 0
    rows = ctx.get_logits()
    assert rows.shape == (3, 508)
    assert np.array_equal(ctx.get_logits_ith(1), rows[0])
    assert np.array_equal(ctx.get_logits_ith(4), rows[2])
    assert np.array_equal(ctx.get_logits_ith(-1), rows[2])  # rows from the end, not indices
    assert np.array_equal(ctx.get_logits_ith(-3), rows[0])
    assert invalid(lambda: ctx.get_logits_ith(-4))  # n_outputs + i < 0
    assert invalid(lambda: ctx.get_logits_ith(0))  # not flagged
    assert invalid(lambda: ctx.get_logits_ith(6))  # beyond the batch, below n_batch
    assert invalid(lambda: ctx.get_logits_ith(16))  # >= n_batch


@pytest.mark.invariant("OUT-014", "OUT-015", "OUT-016")
@pytest.mark.requires("decoder.errors")
def test_accessor_error_codes(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_batch=16)
    assert ctx.decode(batch(prompt(3), out=[0, 1, 0])) == 0
    for i, code in [
        (16, "OUT_INDEX_RANGE"),
        (0, "OUT_NOT_OUTPUT"),
        (5, "OUT_NOT_OUTPUT"),
        (-2, "OUT_NEGATIVE_RANGE"),
    ]:
        with raises_code(code, what=f"get_logits_ith({i})"):
            ctx.get_logits_ith(i)


@pytest.mark.invariant("OUT-017")
def test_new_context_has_no_readable_row(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_batch=16, n_seq_max=2, kv_unified=True)
    assert all(invalid(partial(ctx.get_logits_ith, i)) for i in (-1, 0, 1, 15, 16))
    assert ctx.n_outputs() == 0


@pytest.mark.invariant("OUT-018")
@given(i=st.integers(-40, 40))
def test_invalid_access_changes_nothing(target: Any, load: Callable[[str], Any], i: int) -> None:
    ctx = target.new_context(load("mha"), n_ctx=256, n_batch=16)
    assert ctx.decode(batch(prompt(5), out=[1, 0, 1, 0, 1])) == 0
    with unchanged(ctx.get_logits, "logits"), contextlib.suppress(Exception):
        ctx.get_logits_ith(i)


@pytest.mark.invariant("OUT-020")
@pytest.mark.requires("decoder.embeddings", "decoder.pooling")
def test_token_embeddings_accessor(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_batch=16, embeddings=True, pooling=0)
    assert ctx.decode(batch(prompt(4))) == 0
    e = ctx.get_embeddings_ith(2)
    assert e.shape == (64,)
    assert np.array_equal(ctx.get_embeddings_ith(-2), e)
    assert invalid(lambda: ctx.get_embeddings_ith(4)) and invalid(
        lambda: ctx.get_embeddings_ith(-5)
    )
    no_embd = new_ctx(n_batch=16)
    assert no_embd.decode(batch(prompt(4))) == 0
    assert invalid(lambda: no_embd.get_embeddings_ith(3))
    pooled = new_ctx(n_batch=16, embeddings=True, pooling=1)
    assert pooled.decode(batch(prompt(4))) == 0
    assert invalid(lambda: pooled.get_embeddings_ith(0))
