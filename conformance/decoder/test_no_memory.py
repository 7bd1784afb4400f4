"""A context without memory (spec/decoder.md DEC-048, DEC-066, DEC-067), on the bert fixture.

An encoder-only model's context has no memory: ``decode`` encodes the batch (every token an
output, non-causal, positions from 0 when missing, at most one ubatch) and keeps nothing, the
memory operations act on nothing, and a position past the learned position table is refused.
The embeddings are compared with the float64 oracle (``oracle.bert_embeddings``) and the peer
within NMSE 1e-6 (F32 weights); the bert graph itself is checked in conformance/model/test_bert.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from conformance.assertions import assert_nmse
from conformance.decoder.helpers import batch
from conformance.fixtures.bert_model import BERT_FIXTURES, bert_fixture_path
from conformance.model import oracle
from conformance.model.bert_cases import NMSE_BAR, PROMPTS, bert_context, read

CFG = BERT_FIXTURES["bert"]

pytestmark = pytest.mark.requires("model.load", "model.arch.bert")


@pytest.mark.invariant("DEC-048", "DEC-066")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.memory_ops")
def test_decode_keeps_nothing(target: Any) -> None:
    # decode on a context without memory encodes: a second batch without positions starts
    # at position 0 again and sees nothing of the first, and the memory reports no position
    ctx = bert_context(target, bert_fixture_path(), embeddings=True)  # the model's MEAN pooling
    first, second = PROMPTS["long"][:20], PROMPTS["short"]
    assert ctx.decode(batch(first, pos=list(range(len(first))), all_out=True)) == 0
    assert (ctx.seq_pos_min(0), ctx.seq_pos_max(0)) == (-1, -1)
    assert ctx.decode(batch(second)) == 0  # positions and output flags left to the engine
    want = oracle.bert_embeddings(bert_fixture_path(), second).mean(axis=0)
    assert_nmse(want, ctx.get_embeddings_seq(0), NMSE_BAR, "second batch")
    assert (ctx.seq_pos_min(0), ctx.seq_pos_max(0)) == (-1, -1)


@pytest.mark.invariant("DEC-066")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.memory_ops")
def test_memory_ops_act_on_nothing(target: Any) -> None:
    ctx = bert_context(target, bert_fixture_path(), embeddings=True, n_seq_max=2)
    toks = PROMPTS["short"]
    assert ctx.decode(batch(toks, pos=list(range(len(toks))), all_out=True)) == 0
    before = np.asarray(ctx.get_embeddings_seq(0)).copy()
    assert ctx.seq_rm(0, -1, -1) is True
    assert ctx.seq_rm(0, 1, 3) is True
    ctx.seq_cp(0, 1, -1, -1)
    ctx.seq_keep(0)
    ctx.seq_add(0, 0, -1, 5)
    ctx.seq_div(0, 0, -1, 2)
    ctx.memory_clear(True)
    for s in (0, 1):
        assert (ctx.seq_pos_min(s), ctx.seq_pos_max(s)) == (-1, -1), f"sequence {s}"
    # the operations changed nothing: the last outputs stay, the same batch encodes the same
    assert np.array_equal(np.asarray(ctx.get_embeddings_seq(0)), before)
    assert ctx.decode(batch(toks, pos=list(range(len(toks))), all_out=True)) == 0
    assert np.array_equal(np.asarray(ctx.get_embeddings_seq(0)), before)


@pytest.mark.invariant("DEC-048", "DEC-066")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.memory_ops")
def test_decode_keeps_nothing_like_peer(target: Any, peer: Any) -> None:
    def run(engine: Any) -> tuple[np.ndarray, list[int]]:
        ctx = bert_context(engine, bert_fixture_path(), embeddings=True, n_seq_max=2)
        assert ctx.decode(batch(PROMPTS["long"][:20], seqs=[[1]] * 20)) == 0
        assert ctx.decode(batch(PROMPTS["short"])) == 0
        seen = [ctx.seq_pos_min(0), ctx.seq_pos_max(0), ctx.seq_pos_max(1)]
        seen.append(int(ctx.seq_rm(1, 0, -1)))
        return np.asarray(ctx.get_embeddings_seq(0), dtype=np.float64), seen

    ours, ours_seen = run(target)
    theirs, theirs_seen = run(peer)
    assert ours_seen == theirs_seen
    assert_nmse(theirs, ours, NMSE_BAR, "second batch vs the peer")


@pytest.mark.invariant("DEC-048", "DEC-014")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.errors")
def test_decode_beyond_n_ubatch_refused(target: Any) -> None:
    # encode runs one ubatch: a decode (an encode) of more tokens than n_ubatch is refused
    # (llama.cpp aborts: GGML_ASSERT in encode, spec/decoder.md D1)
    ctx = bert_context(target, bert_fixture_path(), n_batch=64, n_ubatch=16, embeddings=True)
    toks = PROMPTS["long"][:17]
    assert ctx.decode(batch(toks, pos=list(range(17)), all_out=True)) == -1
    assert ctx.last_error is not None and ctx.last_error.code == "DEC_UBATCH_TOO_SMALL"
    assert ctx.decode(batch(toks[:16], pos=list(range(16)), all_out=True)) == 0
    assert ctx.last_error is None, "a successful decode (an encode) clears the last error"


@pytest.mark.invariant("DEC-048", "DEC-013")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.encode")
@pytest.mark.parametrize("call", ["decode", "encode"])
def test_non_batch_raises_type_error(target: Any, call: str) -> None:
    # decode on this context encodes: both calls refuse a non-Batch before anything runs
    ctx = bert_context(target, bert_fixture_path(), embeddings=True)
    with pytest.raises(TypeError):
        getattr(ctx, call)(PROMPTS["short"])
    assert getattr(ctx, call)(batch(PROMPTS["short"])) == 0


@pytest.mark.invariant("DEC-067")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.pooling", "decoder.errors")
def test_position_beyond_the_table_refused(target: Any) -> None:
    # 64 learned positions: position 64 is refused before anything runs (llama.cpp stops the
    # process on the row lookup, decision D1); the last one, 63, encodes
    ctx = bert_context(target, bert_fixture_path(), embeddings=True, pooling=0)
    toks = PROMPTS["short"]
    n = CFG.n_ctx_train
    assert ctx.decode(batch(toks, pos=list(range(n - 4, n + 1)), all_out=True)) == -1
    err = ctx.last_error
    assert err is not None
    assert (err.code, err.field, err.index) == ("DEC_POS_RANGE", "pos", 4)
    pos = list(range(n - len(toks), n))
    assert ctx.decode(batch(toks, pos=pos, all_out=True)) == 0
    got = read(ctx, "none", [0], len(toks))
    assert_nmse(oracle.bert_embeddings(bert_fixture_path(), toks, pos), got, NMSE_BAR, "last")
