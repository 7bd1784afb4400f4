"""Pooled embeddings and the sample router (OUT-023 .. OUT-032)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest

from conformance.assertions import assert_nmse, nmse, raises_code
from conformance.decoder.helpers import batch, invalid, prompt
from conformance.fixtures.gguf_models import fixture_path
from conformance.model import oracle
from reference_impl.decoder.pooling import PoolingType
from reference_impl.memory.status import ComputeStatus

pytestmark = pytest.mark.requires("decoder.embeddings")

NONE, MEAN, CLS, LAST, RANK = 0, 1, 2, 3, 4
# Three sequences; token 7 is shared by sequences 1 and 2; sequence 0 repeats positions 0 and 2.
TOKENS = prompt(10)
SEQS = [[0], [1], [0], [2], [0], [1], [2], [1, 2], [0], [0]]
POS = [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]


def token_embeddings(new_ctx: Callable[..., Any], n_ubatch: int = 16) -> np.ndarray:
    ctx = new_ctx(
        n_batch=16, n_ubatch=n_ubatch, n_seq_max=3, kv_unified=True, embeddings=True, pooling=NONE
    )
    assert ctx.decode(batch(TOKENS, seqs=SEQS, pos=POS)) == 0
    return np.stack([ctx.get_embeddings_ith(i) for i in range(len(TOKENS))])


def pooled(new_ctx: Callable[..., Any], pooling: int, n_ubatch: int = 15) -> Any:
    ctx = new_ctx(
        n_batch=16,
        n_ubatch=n_ubatch,
        n_seq_max=3,
        kv_unified=True,
        embeddings=True,
        pooling=pooling,
    )
    assert ctx.decode(batch(TOKENS, seqs=SEQS, pos=POS)) == 0
    return ctx


@pytest.mark.invariant("OUT-023")
def test_pooler_table_values() -> None:
    assert [(p.name, int(p)) for p in PoolingType] == [
        ("UNSPECIFIED", -1),
        ("NONE", 0),
        ("MEAN", 1),
        ("CLS", 2),
        ("LAST", 3),
        ("RANK", 4),
    ]


@pytest.mark.invariant("OUT-024")
@pytest.mark.requires("model.weights", "decoder.logits", "decoder.pooling")
def test_none_pooling_gives_final_hidden_states(
    new_ctx: Callable[..., Any], target: Any, load: Callable[[str], Any]
) -> None:
    """The per-token embedding is the output-normed hidden state: logits = W_out · embedding."""
    ctx = new_ctx(n_batch=16, embeddings=True, pooling=NONE)
    assert ctx.decode(batch(prompt(5))) == 0
    w_out = target.model_tensor(load("gqa"), "output.weight")  # [n_vocab, n_embd]
    for i in range(5):
        assert_nmse(ctx.get_logits_ith(i), w_out @ ctx.get_embeddings_ith(i), 1e-10, f"row {i}")
    assert invalid(lambda: ctx.get_embeddings_seq(0))


@pytest.mark.invariant("OUT-024")
@pytest.mark.requires("decoder.logits", "decoder.pooling")
def test_none_pooling_gives_the_state_the_output_projection_reads(
    new_ctx: Callable[..., Any],
) -> None:
    """Through decode alone: logits = W_out · embedding for every token, with W_out read from
    the suite's own GGUF file (not from the target), in a batch of three sequences."""
    w_out = oracle.load(str(fixture_path("gqa"))).tensors["output.weight"]
    ctx = new_ctx(n_batch=16, n_seq_max=3, kv_unified=True, embeddings=True, pooling=NONE)
    assert ctx.decode(batch(TOKENS, seqs=SEQS, pos=POS)) == 0
    for i in range(len(TOKENS)):
        e = ctx.get_embeddings_ith(i).astype(np.float64)
        assert e.shape == (w_out.shape[1],)
        assert_nmse(ctx.get_logits_ith(i), w_out @ e, 1e-9, f"row {i}")
    assert invalid(lambda: ctx.get_embeddings_seq(0))


@pytest.mark.requires("decoder.logits", "decoder.pooling")
@pytest.mark.invariant("OUT-025", "OUT-028")
def test_mean_pooling_averages_every_listed_token(new_ctx: Callable[..., Any]) -> None:
    emb = token_embeddings(new_ctx)
    ctx = pooled(new_ctx, MEAN)
    for s in range(3):
        rows = [i for i, ss in enumerate(SEQS) if s in ss]
        got = ctx.get_embeddings_seq(s)
        assert got.shape == (64,)
        assert_nmse(emb[rows].mean(axis=0), got, 1e-10, f"seq {s}")


@pytest.mark.requires("decoder.logits", "decoder.pooling")
@pytest.mark.invariant("OUT-026")
def test_cls_pooling_takes_the_smallest_position_first_token(new_ctx: Callable[..., Any]) -> None:
    emb = token_embeddings(new_ctx)
    ctx = pooled(new_ctx, CLS)
    # seq 0: tokens 0 and 2 both at position 0 -> the first (0); seq 1 -> token 1; seq 2 -> token 3
    for s, row in [(0, 0), (1, 1), (2, 3)]:
        assert np.array_equal(ctx.get_embeddings_seq(s), emb[row])


@pytest.mark.requires("decoder.logits", "decoder.pooling")
@pytest.mark.invariant("OUT-027")
def test_last_pooling_takes_the_largest_position_last_token(new_ctx: Callable[..., Any]) -> None:
    emb = token_embeddings(new_ctx)
    tie = new_ctx(
        n_batch=16, n_ubatch=15, n_seq_max=3, kv_unified=True, embeddings=True, pooling=LAST
    )
    # sequence 0 ends with two tokens at position 2: the later one (index 9) wins
    assert tie.decode(batch(TOKENS, seqs=SEQS, pos=POS)) == 0
    for s, row in [(0, 9), (1, 7), (2, 7)]:
        assert np.array_equal(tie.get_embeddings_seq(s), emb[row])


@pytest.mark.invariant("OUT-028")
@pytest.mark.requires("decoder.errors", "decoder.pooling")
def test_rank_pooling_without_classifier_is_refused(
    target: Any, load: Callable[[str], Any]
) -> None:
    with raises_code("DEC_POOLING_UNSUPPORTED"):
        target.new_context(load("gqa"), n_ctx=256, embeddings=True, pooling=RANK)


@pytest.mark.requires("decoder.logits", "decoder.pooling")
@pytest.mark.invariant("OUT-029")
def test_split_sequence_pools_over_its_last_ubatch(new_ctx: Callable[..., Any]) -> None:
    toks = prompt(6)
    ctx = new_ctx(n_batch=16, n_ubatch=4, embeddings=True, pooling=MEAN)
    assert ctx.decode(batch(toks)) == 0
    none = new_ctx(n_batch=16, n_ubatch=4, embeddings=True, pooling=NONE)
    assert none.decode(batch(toks)) == 0
    emb = np.stack([none.get_embeddings_ith(i) for i in range(6)])
    assert_nmse(emb[4:6].mean(axis=0), ctx.get_embeddings_seq(0), 1e-10, "last ubatch mean")
    assert nmse(emb.mean(axis=0), ctx.get_embeddings_seq(0)) > 1e-6


@pytest.mark.requires("decoder.logits", "decoder.pooling")
@pytest.mark.invariant("OUT-030")
def test_pooled_embeddings_cover_exactly_the_last_batch(new_ctx: Callable[..., Any]) -> None:
    ctx = pooled(new_ctx, MEAN)
    assert all(not invalid(partial(ctx.get_embeddings_seq, s)) for s in range(3))
    assert ctx.decode(batch(prompt(2), seqs=[[1], [1]], pos=[3, 4])) == 0
    assert not invalid(lambda: ctx.get_embeddings_seq(1))
    assert invalid(lambda: ctx.get_embeddings_seq(0)) and invalid(lambda: ctx.get_embeddings_seq(2))


@pytest.mark.requires("decoder.logits", "decoder.pooling", "decoder.faults", "decoder.errors")
@pytest.mark.invariant("OUT-022", "OUT-030")
def test_failed_decode_leaves_no_pooled_embedding(new_ctx: Callable[..., Any], target: Any) -> None:
    # 8 tokens of two sequences in two ubatches: ubatch 0 completes and stores pooled values,
    # then ubatch 1 fails
    ctx = new_ctx(n_batch=16, n_ubatch=4, n_seq_max=2, embeddings=True, pooling=MEAN)
    two = batch(prompt(8), seqs=[[i // 4] for i in range(8)], pos=[i % 4 for i in range(8)])
    target.inject_failure(ctx, 1, ComputeStatus.FAILED)
    assert ctx.decode(two) == -3
    for s in (0, 1):  # not even a sequence pooled by the ubatch that completed
        with raises_code("OUT_NO_EMBEDDINGS", seq_id=s, what=f"get_embeddings_seq({s})"):
            ctx.get_embeddings_seq(s)


@pytest.mark.invariant("OUT-031", "OUT-032")
@pytest.mark.requires("decoder.introspection", "decoder.logits")
def test_sample_router_maps_sequences_to_rows(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_batch=16, n_seq_max=3, kv_unified=True)
    flags = [0, 1, 1, 0, 1, 0, 1, 1, 0, 1]
    assert ctx.decode(batch(TOKENS, seqs=SEQS, pos=POS, out=flags)) == 0
    # flagged tokens 1 (s1), 2 (s0), 4 (s0), 6 (s2), 7 (s1, s2), 9 (s0) -> rows 0..5
    assert ctx.seq_output_rows(0) == [1, 2, 5]
    assert ctx.seq_output_rows(1) == [0, 4]
    assert ctx.seq_output_rows(2) == [3, 4]
    last_s0 = ctx.get_logits()[ctx.seq_output_rows(0)[-1]]
    assert np.array_equal(last_s0, ctx.get_logits_ith(9))
    ctx2 = new_ctx(n_batch=16, n_seq_max=3, kv_unified=True)
    assert ctx2.decode(batch(TOKENS, seqs=SEQS, pos=POS, out=[1] + [0] * 9)) == 0
    with raises_code("OUT_NO_SEQ_ROW"):
        ctx2.seq_output_rows(2)


@pytest.mark.requires("decoder.logits", "decoder.pooling")
@pytest.mark.invariant("DEC-057")
@pytest.mark.parametrize(("n_seq_max", "n_ubatch"), [(3, 16), (5, 16), (2, 16)])
def test_pooled_context_for_any_n_ubatch(
    new_ctx: Callable[..., Any], n_seq_max: int, n_ubatch: int
) -> None:
    ctx = new_ctx(
        n_batch=16,
        n_ubatch=n_ubatch,
        n_seq_max=n_seq_max,
        kv_unified=True,
        embeddings=True,
        pooling=MEAN,
    )
    assert ctx.decode(batch(prompt(3), seqs=[[0], [0], [1]], pos=[0, 1, 0])) == 0
    assert ctx.get_embeddings_seq(1).shape == (64,)
