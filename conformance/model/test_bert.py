"""bert: an encoder-only model's graph (spec/model.md GGUF-052, spec/decoder.md DEC-048); the
context without memory it runs in is checked in conformance/decoder/test_no_memory.py.

The ``bert`` fixture (2 layers, 32-value embeddings, 4 heads, 64 learned positions, 2 token
types, MEAN pooling by default, WordPiece vocabulary) has no output head: its contexts give
embeddings, per token (pooling NONE) or pooled per sequence (MEAN, CLS, LAST). Every check
compares them with the float64 oracle (``oracle.bert_embeddings``) and, in the differential
tests, with the peer (llama.cpp by default), within NMSE 1e-6 (F32 weights). A bert context has
no memory: ``decode`` encodes the batch (every token an output, non-causal, positions from 0
when missing) and keeps nothing, and the memory operations act on nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from conformance.assertions import assert_nmse, nmse, raises_code
from conformance.decoder.helpers import batch
from conformance.fixtures.bert_model import (
    BERT_FIXTURES,
    BERT_POOLING,
    bert_fixture_path,
    bert_tensor_values,
    write_bert_gguf,
)
from conformance.gate import cached
from conformance.model import oracle
from conformance.model.bert_cases import CLS, NMSE_BAR, PROMPTS, SEP, bert_context, read

NAME = "bert"
CFG = BERT_FIXTURES[NAME]
POOLINGS = list(BERT_POOLING)  # none, mean, cls, last

pytestmark = pytest.mark.requires("model.load", "model.arch.bert")


def pool(hidden: np.ndarray, pooling: str) -> np.ndarray:
    """One sequence's pooled row from its hidden states in position order (NONE: all rows)."""
    if pooling == "mean":
        return hidden.mean(axis=0)
    if pooling == "cls":
        return hidden[0]
    if pooling == "last":
        return hidden[-1]
    return hidden


def encode(engine: Any, b: Any, pooling: str, seqs: Sequence[int], **params: Any) -> np.ndarray:
    """A fresh bert context of ``engine`` decodes ``b``; its embeddings (see :func:`read`)."""
    ctx = bert_context(
        engine,
        bert_fixture_path(),
        embeddings=True,
        pooling=BERT_POOLING[pooling],
        **params,
    )
    assert ctx.decode(b) == 0
    return read(ctx, pooling, seqs, b.n_tokens).astype(np.float64)


# Three sequences interleaved in one batch, each at its own positions from 0. n_ubatch is a
# multiple of n_seq_max: llama.cpp aborts creating a MEAN-pooling context otherwise (DEC-057).
SEQS = {0: PROMPTS["short"], 1: PROMPTS["long"][:9], 2: [CLS, 77, 78, 79, SEP, 5, 6]}
MULTI = {"n_seq_max": len(SEQS), "n_batch": 60, "n_ubatch": 60}


def interleaved() -> tuple[Any, list[tuple[int, int]]]:
    """The batch of :data:`SEQS`, round-robin, and (sequence, position) of each token."""
    order: list[tuple[int, int]] = []
    for p in range(max(len(t) for t in SEQS.values())):
        order += [(s, p) for s, toks in SEQS.items() if p < len(toks)]
    b = batch(
        [SEQS[s][p] for s, p in order],
        seqs=[[s] for s, _ in order],
        pos=[p for _, p in order],
        all_out=True,
    )
    return b, order


def oracle_rows(order: list[tuple[int, int]], pooling: str) -> np.ndarray:
    """What the interleaved batch must give: each sequence encoded alone by the oracle."""
    hidden = {s: oracle.bert_embeddings(bert_fixture_path(), toks) for s, toks in SEQS.items()}
    if pooling == "none":
        return np.stack([hidden[s][p] for s, p in order])
    return np.stack([pool(hidden[s], pooling) for s in SEQS])


@pytest.mark.invariant("GGUF-052", "DEC-048")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.pooling")
@pytest.mark.parametrize("pooling", POOLINGS)
@pytest.mark.parametrize("prompt", list(PROMPTS))
def test_embeddings_match_oracle(prompt: str, pooling: str, target: Any) -> None:
    toks = PROMPTS[prompt]
    got = encode(target, batch(toks, pos=list(range(len(toks))), all_out=True), pooling, [0])
    want = pool(oracle.bert_embeddings(bert_fixture_path(), toks), pooling)
    assert_nmse(want.reshape(got.shape), got, NMSE_BAR, f"{prompt}/{pooling}")


@pytest.mark.invariant("GGUF-052", "DEC-048")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.pooling")
@pytest.mark.parametrize("pooling", POOLINGS)
def test_embeddings_match_peer(
    pooling: str, target: Any, peer: Any, request: pytest.FixtureRequest
) -> None:
    worst = 0.0
    for prompt, toks in PROMPTS.items():
        b = batch(toks, pos=list(range(len(toks))), all_out=True)
        ours, theirs = encode(target, b, pooling, [0]), encode(peer, b, pooling, [0])
        err = nmse(theirs, ours)
        worst = max(worst, err)
        assert err <= NMSE_BAR, f"{prompt}/{pooling}: NMSE vs the peer {err:.3e}"
    request.node.user_properties.append(("nmse_vs_peer", worst))


@pytest.mark.invariant("GGUF-052", "DEC-048")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.pooling")
@pytest.mark.parametrize("pooling", POOLINGS)
def test_multi_sequence_batch_matches_oracle(pooling: str, target: Any) -> None:
    # each sequence of an interleaved batch is encoded as if alone: attention stays inside
    # its sequence, and each pooled row comes from its own tokens
    b, order = interleaved()
    got = encode(target, b, pooling, list(SEQS), **MULTI)
    assert_nmse(oracle_rows(order, pooling), got, NMSE_BAR, pooling)


@pytest.mark.invariant("GGUF-052", "DEC-048")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.pooling")
@pytest.mark.parametrize("pooling", POOLINGS)
def test_multi_sequence_batch_matches_peer(
    pooling: str, target: Any, peer: Any, request: pytest.FixtureRequest
) -> None:
    b, _ = interleaved()
    ours = encode(target, b, pooling, list(SEQS), **MULTI)
    theirs = encode(peer, b, pooling, list(SEQS), **MULTI)
    err = nmse(theirs, ours)
    assert err <= NMSE_BAR, f"{pooling}: NMSE vs the peer {err:.3e}"
    request.node.user_properties.append(("nmse_vs_peer", err))


# -- the file's keys ------------------------------------------------------------------------------

KEY = "bert."
NO_BIASES = [
    f"blk.{il}.{m}.bias"
    for il in range(CFG.n_layer)
    for m in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_up", "ffn_down")
]
N_HEAD_KV = 2  # grouped-query attention: two query heads per K/V head
# K and V of the grouped variant: [n_embd_k_gqa, n_embd] (numpy order), drawn as the fixture's
GQA_KV = {
    name: bert_tensor_values(CFG, name, (N_HEAD_KV * CFG.n_embd // CFG.n_head, CFG.n_embd))
    for name in (f"blk.{il}.{m}.weight" for il in range(CFG.n_layer) for m in ("attn_k", "attn_v"))
}
HEAD_DIM_WIDE = 2 * CFG.n_embd // CFG.n_head  # attention.key_length: n_head·head_dim = 2·n_embd
# the wide-heads file's Q/K/V {n_embd, 2·n_embd} and O {2·n_embd, n_embd} (ggml order)
WIDE_QKVO = {
    f"blk.{il}.{m}.weight": bert_tensor_values(
        CFG,
        f"blk.{il}.{m}.weight",
        (CFG.n_embd, 2 * CFG.n_embd) if m == "attn_output" else (2 * CFG.n_embd, CFG.n_embd),
    )
    for il in range(CFG.n_layer)
    for m in ("attn_q", "attn_k", "attn_v", "attn_output")
}
VARIANTS: dict[str, dict[str, Any]] = {
    # optional tensors: no token-type table, no Q/K/V/O/FFN biases
    "no-token-types": {"omit_tensors": ["token_types.weight"]},
    "no-biases": {"omit_tensors": NO_BIASES},
    # a one-row token-type table (token_type_count 1, as in RoBERTa-style files): the fixture's
    # second row, so the embeddings differ from the fixture's (which adds its row 0)
    "one-token-type": {
        "override_keys": {"tokenizer.ggml.token_type_count": 1},
        "override_tensors": {
            "token_types.weight": bert_tensor_values(
                CFG, "token_types.weight", (CFG.n_token_types, CFG.n_embd)
            )[1:]
        },
    },
    "eps-0.5": {"override_keys": {KEY + "attention.layer_norm_epsilon": 0.5}},
    # head_count_kv < head_count: K and V are narrower than Q, and so are their missing biases
    "gqa-no-biases": {
        "override_keys": {KEY + "attention.head_count_kv": N_HEAD_KV},
        "override_tensors": GQA_KV,
        "omit_tensors": NO_BIASES,
    },
}


@pytest.fixture(scope="module")
def variant_files(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    folder = tmp_path_factory.mktemp("bert-variants")
    made: dict[str, Path] = {}

    def path(variant: str) -> Path:
        if variant not in made:
            made[variant] = write_bert_gguf(CFG, folder / f"{variant}.gguf", **VARIANTS[variant])
        return made[variant]

    return path


def _token_rows(engine: Any, path: Path, toks: list[int]) -> np.ndarray:
    ctx = bert_context(engine, path, embeddings=True, pooling=0)
    assert ctx.decode(batch(toks, pos=list(range(len(toks))), all_out=True)) == 0
    return read(ctx, "none", [0], len(toks)).astype(np.float64)


def encode_file(engine: Any, path: Path, toks: list[int], **params: Any) -> np.ndarray:
    """``toks`` (positions from 0) through a fresh context on ``path``: sequence 0's pooled row."""
    ctx = bert_context(engine, path, embeddings=True, **params)
    assert ctx.decode(batch(toks, pos=list(range(len(toks))), all_out=True)) == 0
    return np.asarray(ctx.get_embeddings_seq(0)).astype(np.float64)


@pytest.mark.invariant("GGUF-052")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.pooling")
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_variants_match_oracle(
    variant: str, target: Any, variant_files: Callable[[str], Path]
) -> None:
    path, toks = variant_files(variant), PROMPTS["long"]
    ours = _token_rows(target, path, toks)
    assert_nmse(oracle.bert_embeddings(path, toks), ours, NMSE_BAR, f"{variant} vs the oracle")
    # the variant is not the fixture in disguise
    moved = nmse(_token_rows(target, bert_fixture_path(), toks), ours)
    assert moved > 1e-4, f"{variant}: the embeddings did not move ({moved:.2e})"


@pytest.mark.invariant("GGUF-052")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.pooling")
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_variants_match_peer(
    variant: str, target: Any, peer: Any, variant_files: Callable[[str], Path]
) -> None:
    path, toks = variant_files(variant), PROMPTS["long"]
    ours = _token_rows(target, path, toks)
    assert_nmse(_token_rows(peer, path, toks), ours, NMSE_BAR, f"{variant} vs the peer")


# A fused attn_qkv (llama.cpp 0.3.36 `create_tensor_qkv`, as for llama: GGUF-044, GGUF-057):
# case -> (where the fixture's Q/K/V biases go, the separate-tensor file it must encode as).
# The biases go into one attn_qkv.bias, stay the three separate ones (added as a full set), or
# only Q's stays (a partial set: added as none); the grouped-K/V file (no biases) fuses
# Q {32 rows} with K and V {16 rows each}.
QKV = ("attn_q", "attn_k", "attn_v")
FUSED_QKV_CASES: dict[str, tuple[tuple[str, ...] | None, str]] = {
    "fused-bias": (None, "fixture"),
    "separate-biases": (QKV, "fixture"),
    "no-qkv-biases": ((), "no-qkv-biases"),
    "q-bias-only": (("attn_q",), "no-qkv-biases"),
    "gqa-no-biases": ((), "gqa-no-biases"),
}


def _fused_qkv_file(tmp: Path, case: str) -> Path:
    """The fixture (or its grouped-K/V variant) with each layer's Q, K and V weights stored as
    one ``attn_qkv`` (Q's rows, then K's, then V's) and the case's Q/K/V biases (None: one
    ``attn_qkv.bias``)."""
    separate_biases, _ = FUSED_QKV_CASES[case]
    gqa = case == "gqa-no-biases"
    kw = VARIANTS["gqa-no-biases"] if gqa else {}
    omit = [*kw.get("omit_tensors", ())]
    tensors: dict[str, np.ndarray] = {}
    for il in range(CFG.n_layer):
        p = f"blk.{il}."
        mats = []
        for m in QKV:
            name = p + m + ".weight"
            rows = GQA_KV.get(name) if gqa else None
            mats.append(
                rows if rows is not None else bert_tensor_values(CFG, name, (CFG.n_embd,) * 2)
            )
            omit.append(name)
        tensors[p + "attn_qkv.weight"] = np.concatenate(mats)
        biases = [bert_tensor_values(CFG, p + m + ".bias", (CFG.n_embd,)) for m in QKV]
        if separate_biases is None and not gqa:
            tensors[p + "attn_qkv.bias"] = np.concatenate(biases)
        omit += [p + m + ".bias" for m in QKV if m not in (separate_biases or ())]
    return write_bert_gguf(
        CFG,
        tmp / f"fused-{case}.gguf",
        omit_tensors=omit,
        override_keys=kw.get("override_keys"),
        override_tensors=tensors,
    )


@pytest.mark.invariant("GGUF-052", "GGUF-057")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.pooling")
@pytest.mark.parametrize("case", list(FUSED_QKV_CASES))
def test_fused_qkv_encodes_like_separate_tensors(
    case: str, target: Any, tmp_path: Path, variant_files: Callable[[str], Path]
) -> None:
    toks = PROMPTS["long"]
    fused = _token_rows(target, _fused_qkv_file(tmp_path, case), toks)
    like = FUSED_QKV_CASES[case][1]
    if like == "fixture":
        path = bert_fixture_path()
    elif like == "no-qkv-biases":
        omit = [f"blk.{il}.{m}.bias" for il in range(CFG.n_layer) for m in QKV]
        path = write_bert_gguf(CFG, tmp_path / "no-qkv-biases.gguf", omit_tensors=omit)
        # the Q/K/V biases matter: leaving them out is visible
        assert nmse(_token_rows(target, bert_fixture_path(), toks), fused) > 1e-4
    else:
        path = variant_files(like)
    separate = _token_rows(target, path, toks)
    assert_nmse(separate, fused, 1e-10, f"{case}: fused attn_qkv vs separate Q/K/V ({like})")


@pytest.mark.invariant("GGUF-052")
@pytest.mark.requires("decoder.logits", "decoder.embeddings")
@pytest.mark.parametrize("pooling", ["mean", "cls", "last"])
def test_model_pooling_is_the_default(pooling: str, target: Any, tmp_path: Path) -> None:
    # no pooling parameter: the context pools as bert.pooling_type says
    path = write_bert_gguf(
        CFG,
        tmp_path / f"{pooling}.gguf",
        override_keys={KEY + "pooling_type": BERT_POOLING[pooling]},
    )
    toks = PROMPTS["short"]
    want = pool(oracle.bert_embeddings(path, toks), pooling)
    assert_nmse(want, encode_file(target, path, toks), NMSE_BAR, pooling)


RANK = 4  # llama_pooling_type RANK: a reranker's pooling_type, the last type of the table


@pytest.mark.invariant("GGUF-052")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.pooling")
def test_rank_pooling_file_loads(target: Any, tmp_path: Path) -> None:
    # pooling_type RANK is a known type: the file loads, and a context that names its own
    # pooling encodes it as the fixture (the key sets only the context's default)
    path = write_bert_gguf(CFG, tmp_path / "rank.gguf", override_keys={KEY + "pooling_type": RANK})
    toks = PROMPTS["short"]
    got = encode_file(target, path, toks, pooling=BERT_POOLING["mean"])
    want = pool(oracle.bert_embeddings(path, toks), "mean")
    assert_nmse(want, got, NMSE_BAR, "MEAN on a RANK-default file")


@pytest.mark.invariant("GGUF-052", "OUT-028")
@pytest.mark.requires("decoder.errors", "decoder.embeddings", "decoder.pooling")
def test_rank_pooling_default_is_refused(target: Any, tmp_path: Path) -> None:
    # the model's RANK default is a RANK request: without a classifier head (which a bert
    # file may not have, GGUF-052) the context refuses it at creation
    path = write_bert_gguf(CFG, tmp_path / "rank.gguf", override_keys={KEY + "pooling_type": RANK})
    with raises_code("DEC_POOLING_UNSUPPORTED"):
        bert_context(target, path, embeddings=True)


@pytest.mark.invariant("GGUF-052")
@pytest.mark.requires("decoder.logits", "decoder.params", "decoder.embeddings", "decoder.pooling")
@pytest.mark.parametrize("causal", [False, True])
def test_causal_key_sets_the_context_attention(
    causal: bool, target: Any, peer: Any, tmp_path: Path
) -> None:
    # attention.causal is the context's default attention type: a causal context's n_batch is
    # capped at n_ctx, a non-causal one's is not; the encode itself is non-causal either way
    path = write_bert_gguf(
        CFG, tmp_path / f"causal-{causal}.gguf", override_keys={KEY + "attention.causal": causal}
    )
    toks = PROMPTS["long"][:30]  # within the causal context's n_batch of 32
    rows = {}
    for name, engine in (("target", target), ("peer", peer)):
        ctx = bert_context(
            engine, path, n_ctx=32, n_batch=128, n_ubatch=128, embeddings=True, pooling=0
        )
        assert ctx.n_batch() == (32 if causal else 128), name
        assert ctx.decode(batch(toks, pos=list(range(len(toks))), all_out=True)) == 0
        rows[name] = read(ctx, "none", [0], len(toks)).astype(np.float64)
    assert_nmse(oracle.bert_embeddings(path, toks), rows["target"], NMSE_BAR, "vs the oracle")
    assert_nmse(rows["peer"], rows["target"], NMSE_BAR, "vs the peer")


BAD_FILES: dict[str, tuple[dict[str, Any], str, str]] = {
    "no-token-type-count": (
        {"omit_keys": ["tokenizer.ggml.token_type_count"]},
        "GGUF_MISSING_KEY",
        "tokenizer.ggml.token_type_count",
    ),
    "zero-token-types": (
        {"override_keys": {"tokenizer.ggml.token_type_count": 0}},
        "GGUF_INVALID_HPARAM",
        "tokenizer.ggml.token_type_count",
    ),
    "no-epsilon": (
        {"omit_keys": [KEY + "attention.layer_norm_epsilon"]},
        "GGUF_MISSING_KEY",
        KEY + "attention.layer_norm_epsilon",
    ),
    "no-norm-bias": (
        {"omit_tensors": ["blk.1.attn_output_norm.bias"]},
        "GGUF_MISSING_TENSOR",
        "blk.1.attn_output_norm.bias",
    ),
    "no-positions": (
        {"omit_tensors": ["position_embd.weight"]},
        "GGUF_MISSING_TENSOR",
        "position_embd.weight",
    ),
    "short-position-table": (
        {
            "override_tensors": {
                "position_embd.weight": np.zeros((CFG.n_ctx_train - 1, CFG.n_embd), np.float32)
            }
        },
        "GGUF_SHAPE_MISMATCH",
        "position_embd.weight",
    ),
    "classifier-head": (
        {"override_tensors": {"cls.weight": np.zeros((CFG.n_embd, CFG.n_embd), np.float32)}},
        "GGUF_UNSUPPORTED_FEATURE",
        "cls.weight",
    ),
    # a fused attn_qkv displaces the separate Q/K/V weights of its layer (GGUF-048): stored
    # beside it, they are unused (the first one in the file is named)
    "q-k-v-beside-fused-qkv": (
        {
            "override_tensors": {
                "blk.0.attn_qkv.weight": np.zeros((3 * CFG.n_embd, CFG.n_embd), np.float32)
            }
        },
        "GGUF_UNEXPECTED_TENSOR",
        "blk.0.attn_q.weight",
    ),
    # key_length / value_length: heads of 2·n_embd / n_head values, Q/K/V and O sized for them
    # (llama.cpp 0.3.36 refuses this file: bert's attn_q must be {n_embd, n_embd})
    "wide-heads": (
        {
            "override_keys": {
                KEY + "attention.key_length": HEAD_DIM_WIDE,
                KEY + "attention.value_length": HEAD_DIM_WIDE,
            },
            "override_tensors": WIDE_QKVO,
        },
        "GGUF_INVALID_HPARAM",
        KEY + "attention.key_length",
    ),
    # past the pooler table (NONE..RANK, 0..4): llama.cpp 0.3.36 loads it and aborts building
    # the graph of an embeddings context that takes it as its default
    "unknown-pooling": (
        {"override_keys": {KEY + "pooling_type": RANK + 1}},
        "GGUF_INVALID_HPARAM",
        KEY + "pooling_type",
    ),
    "llama-norm": (
        {"override_tensors": {"blk.0.attn_norm.weight": np.ones(CFG.n_embd, np.float32)}},
        "GGUF_UNEXPECTED_TENSOR",
        "blk.0.attn_norm.weight",
    ),
}


@pytest.mark.invariant("GGUF-052")
@pytest.mark.requires("model.errors")
@pytest.mark.parametrize("case", list(BAD_FILES))
def test_unusable_file_refused(case: str, target: Any, tmp_path: Path) -> None:
    kwargs, code, field = BAD_FILES[case]
    path = write_bert_gguf(CFG, tmp_path / f"{case}.gguf", **kwargs)
    with raises_code(code, field=field):
        target.load_model(path)


@pytest.mark.invariant("GGUF-004")
@pytest.mark.requires("model.weights")
def test_every_tensor_reads_back(target: Any) -> None:
    """Every tensor of the (F32) bert file, read back by its GGUF name: an encoder has no
    llama blocks, yet its ``blk.N.*`` tensors are stored ones like the rest; a name it does not
    store is a KeyError."""
    reader = gguf.GGUFReader(str(bert_fixture_path()))
    handle = cached(target, "load_model", str(bert_fixture_path()))
    for t in reader.tensors:
        got = target.model_tensor(handle, t.name)
        want = np.asarray(t.data)
        assert t.tensor_type == gguf.GGMLQuantizationType.F32, t.name
        assert got.dtype == np.float32, t.name
        assert np.array_equal(got, want), t.name
    with pytest.raises(KeyError):  # an encoder stores no output norm
        target.model_tensor(handle, "output_norm.weight")


# -- the full-sequence forward (GGUF-054, GGUF-055) -----------------------------------------------

# the whole position table (n_ctx_train tokens: the last position included), ids spread over the
# vocabulary
FULL = [CLS, *((29 * i + 7) % 700 + 5 for i in range(CFG.n_ctx_train - 2)), SEP]
FORWARD_PROMPTS = {**PROMPTS, "full": FULL}  # 1, 5, 48 and 64 tokens


def _model(engine: Any) -> Any:
    return cached(engine, "load_model", str(bert_fixture_path()))


def _forward(engine: Any, toks: list[int]) -> np.ndarray:
    return np.asarray(engine.forward_logits(_model(engine), toks))


@pytest.mark.invariant("GGUF-054")
@pytest.mark.requires("model.forward")
def test_forward_logits_are_zero(target: Any) -> None:
    # no output head: every logits row of a full-sequence forward is zero
    n_vocab = target.model_info(_model(target))["n_vocab"]
    for prompt, toks in FORWARD_PROMPTS.items():
        out = _forward(target, toks)
        assert out.dtype == np.float32, prompt
        assert out.shape == (len(toks), n_vocab), prompt
        assert not out.any(), f"{prompt}: {np.count_nonzero(out)} non-zero logits"


@pytest.mark.invariant("GGUF-054")
@pytest.mark.requires("model.forward")
def test_forward_logits_match_peer(target: Any, peer: Any) -> None:
    for prompt, toks in FORWARD_PROMPTS.items():
        assert np.array_equal(_forward(target, toks), _forward(peer, toks)), prompt


@pytest.mark.invariant("GGUF-054")
@pytest.mark.requires("model.forward", "model.errors")
def test_forward_input_refused(target: Any) -> None:
    # a sequence one and two tokens past the position table: the first token past it is named
    for extra in (1, 2):
        with raises_code("MODEL_POS_RANGE", field="pos", index=CFG.n_ctx_train):
            _forward(target, [*FULL, *FULL[1 : 1 + extra]])
    n_vocab = target.model_info(_model(target))["n_vocab"]
    with raises_code("MODEL_TOKEN_RANGE", index=2):
        _forward(target, [CLS, 40, n_vocab, SEP])


@pytest.mark.invariant("GGUF-055")
@pytest.mark.requires("model.forward")
def test_empty_forward_refused(target: Any) -> None:
    with pytest.raises(Exception):  # noqa: B017 -- any engine-specific error counts here
        _forward(target, [])


@pytest.mark.invariant("GGUF-055")
@pytest.mark.requires("model.forward", "model.errors")
def test_empty_forward_error_code(target: Any) -> None:
    with raises_code("MODEL_INPUT", field="token"):
        _forward(target, [])
