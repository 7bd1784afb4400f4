"""Unit tests of the GGML dequantizers, the loader's optional paths and the fixture writer."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import gguf
import numpy as np
import pytest

from conformance.fixtures import gguf_models as fx
from reference_impl.errors import EngineError, ModelLoadError
from reference_impl.model import Model, dequant, gguf_loader

Q8_0 = gguf.GGMLQuantizationType.Q8_0
Q4_0 = gguf.GGMLQuantizationType.Q4_0


@pytest.mark.parametrize("qtype", [Q8_0, Q4_0], ids=["q8_0", "q4_0"])
@pytest.mark.parametrize("seed", range(4))
def test_dequantize_matches_gguf_on_quantized_values(
    qtype: gguf.GGMLQuantizationType, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    values = (rng.standard_normal((7, 96)) * rng.choice([1e-3, 1.0, 300.0])).astype(np.float32)
    values[0] = 0.0  # an all-zero block row: scale 0
    raw = gguf.quants.quantize(values, qtype)
    got = dequant.dequantize(raw, int(qtype), values.shape)
    assert np.array_equal(got, gguf.quants.dequantize(raw, qtype))


def test_q4_0_nibble_layout() -> None:
    # one block: d = 1.0, qs[j] = (hi << 4) | lo with lo = j, hi = 15 - j
    d = np.array([1.0], dtype="<f2").view(np.uint8)
    qs = np.array([(15 - j) << 4 | j for j in range(16)], dtype=np.uint8)
    block = np.concatenate([d, qs])
    out = dequant.dequantize_q4_0(block, 32)
    assert out[:16].tolist() == [float(j - 8) for j in range(16)]
    assert out[16:].tolist() == [float(7 - j) for j in range(16)]


def test_q8_0_layout() -> None:
    d = np.array([0.5], dtype="<f2").view(np.uint8)
    qs = np.arange(-16, 16, dtype=np.int8).view(np.uint8)
    out = dequant.dequantize_q8_0(np.concatenate([d, qs]), 32)
    assert out.tolist() == [0.5 * q for q in range(-16, 16)]


def test_dequantize_refuses_other_types_and_bad_sizes() -> None:
    with pytest.raises(ValueError):
        dequant.dequantize(np.zeros(292, np.uint8), int(gguf.GGMLQuantizationType.Q8_K), (256,))
    with pytest.raises(ValueError):
        dequant.dequantize_q8_0(np.zeros(34, np.uint8), 64)


def _write(tmp_path: Path, **kw: object) -> Path:
    return fx.write_gguf(fx.FIXTURES["mha"], tmp_path / "m.gguf", **kw)  # type: ignore[arg-type]


def test_no_vocab_model_loads_without_tokenizer(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        override_keys={"tokenizer.ggml.model": "no_vocab"},
        omit_keys=["tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"],
    )
    m = Model.from_gguf(path)
    assert m.tokenizer is None
    assert m.n_vocab == len(fx.fixture_vocab()[0])  # from llama.vocab_size
    assert m.forward([1, 2, 3]).shape == (3, m.n_vocab)
    with pytest.raises(EngineError) as info:
        m.tokenize("x")
    assert info.value.code == "TOK_NO_VOCAB"


@pytest.mark.parametrize(
    ("kw", "code", "field"),
    [
        (
            {"override_keys": {"llama.rope.scaling.type": "yarn"}},
            "GGUF_UNSUPPORTED_FEATURE",
            "llama.rope.scaling.type",
        ),
        (
            {"override_keys": {"llama.expert_count": 8}},
            "GGUF_UNSUPPORTED_FEATURE",
            "llama.expert_count",
        ),
        (
            {"override_keys": {"llama.attention.scale": 0.5}},
            "GGUF_UNSUPPORTED_FEATURE",
            "llama.attention.scale",
        ),
        (
            {"override_keys": {"llama.attention.value_length": 8}},
            "GGUF_UNSUPPORTED_FEATURE",
            "llama.attention.value_length",
        ),
        (
            {"override_tensors": {"blk.0.attn_norm.bias": np.zeros(64, np.float32)}},
            "GGUF_UNSUPPORTED_FEATURE",
            "blk.0.attn_norm.bias",
        ),
        (
            {"override_tensors": {"blk.0.attn_qkv.weight": np.zeros((192, 64), np.float32)}},
            "GGUF_UNEXPECTED_TENSOR",  # the separate attn_q beside the fused attn_qkv
            "blk.0.attn_q.weight",
        ),
        (
            {"override_tensors": {"rope_freqs.weight": np.ones(4, np.float32)}},
            "GGUF_SHAPE_MISMATCH",  # n_rot / 2 = 8 values
            "rope_freqs.weight",
        ),
        ({"override_keys": {"llama.block_count": 0}}, "GGUF_INVALID_HPARAM", "llama.block_count"),
        (
            {"override_keys": {"tokenizer.ggml.bos_token_id": 9999}},
            "GGUF_INVALID_HPARAM",
            "tokenizer.ggml.bos_token_id",
        ),
        ({"omit_keys": ["tokenizer.ggml.tokens"]}, "GGUF_MISSING_KEY", "tokenizer.ggml.tokens"),
        (
            {"override_keys": {"tokenizer.ggml.add_bos_token": 1}},
            "GGUF_KEY_TYPE",
            "tokenizer.ggml.add_bos_token",
        ),
    ],
)
def test_unsupported_and_invalid_files(
    tmp_path: Path, kw: dict[str, object], code: str, field: str
) -> None:
    with pytest.raises(ModelLoadError) as info:
        gguf_loader.load_gguf(_write(tmp_path, **kw))
    assert (info.value.code, info.value.field) == (code, field)
    assert info.value.code in gguf_loader.LOAD_ERROR_CODES


def test_weights_record(tmp_path: Path) -> None:
    w = gguf_loader.load_gguf(fx.fixture_path("q4"))
    assert w.tensor_types["blk.0.ffn_up.weight"] == "Q4_0"
    assert w.tensor_types["output_norm.weight"] == "F32"
    assert w.metadata["general.name"] == "decode-conformance fixture q4"
    assert w.hparams.n_head // w.hparams.n_head_kv == 2 and w.hparams.n_embd_k_gqa == 32
    with pytest.raises(KeyError):
        w.tensor("blk.9.attn_q.weight")


def test_model_tokenizer_api() -> None:
    m = Model.from_gguf(fx.fixture_path("mha"))
    ids = m.tokenize("Hello world!")
    assert ids[0] == m.bos == 1 and m.eos == 2
    assert m.detokenize(ids) == " Hello world!"  # the space after BOS is kept (llama.cpp)
    assert m.detokenize(ids[1:]) == "Hello world!"
    assert m.detokenize(m.tokenize("日", add_bos=False)[1:2]) == "\ufffd"  # half a character
    assert m.token_to_piece(1, special=True) == b"<s>"


# -- fixture writer ---------------------------------------------------------------------------


def test_fixture_files_are_deterministic(tmp_path: Path) -> None:
    cfg = fx.FIXTURES["q4"]
    a = fx.write_gguf(cfg, tmp_path / "a.gguf").read_bytes()
    b = fx.write_gguf(cfg, tmp_path / "b.gguf").read_bytes()
    assert a == b
    assert fx.fixture_path("q4").read_bytes() == a


def test_cache_key_depends_on_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = fx.FIXTURES["mha"]
    assert cfg.key() == dataclasses.replace(cfg).key()
    assert cfg.key() != dataclasses.replace(cfg, seed=99).key()
    monkeypatch.setenv("DC_FIXTURE_CACHE", str(tmp_path))
    p = fx.fixture_path("mha")
    assert p.parent == tmp_path and p.name == f"mha-{cfg.key()}.gguf"
    assert [q.name for q in tmp_path.iterdir()] == [p.name]  # no temp file left behind
    with pytest.raises(KeyError):
        fx.fixture_path("nope")


def test_fixture_vocabulary_layout() -> None:
    tokens, scores, types = fx.fixture_vocab()
    assert tokens[:3] == ("<unk>", "<s>", "</s>")
    assert tokens[3] == "<0x00>" and tokens[258] == "<0xFF>"
    assert all(t == fx.BYTE for t in types[3:259])
    assert len(set(tokens)) == len(tokens)
    merges = [i for i, s in enumerate(scores) if i > 259 and s > -1000]
    assert len(merges) == fx.N_MERGES
    # every merged piece can be built from two shorter pieces (SPM can reach it)
    known = set(tokens)
    for i in merges:
        t = tokens[i]
        assert any(t[:k] in known and t[k:] in known for k in range(1, len(t))), t


def test_bench_fixture_size() -> None:
    cfg = fx.FIXTURES["bench25m"]
    shapes = fx.tensor_shapes(cfg, len(fx.fixture_vocab()[0]))
    n_params = sum(int(np.prod(s)) for s in shapes.values())
    assert 24e6 < n_params < 27e6
    assert (cfg.n_embd, cfg.n_layer, cfg.n_head, cfg.n_head_kv, cfg.n_ff) == (512, 8, 8, 4, 1536)
