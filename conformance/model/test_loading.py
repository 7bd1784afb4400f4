"""GGUF loading: hyperparameters, dequantization of F32/F16/Q8_0/Q4_0, tied output."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from conformance.assertions import assert_nmse, nmse
from conformance.decoder.helpers import batch, prompt
from conformance.fixtures.gguf_models import EOS, FIXTURES, TINY_FIXTURES, fixture_vocab, write_gguf

pytestmark = pytest.mark.requires("model.load")

Q8_0 = gguf.GGMLQuantizationType.Q8_0
Q4_0 = gguf.GGMLQuantizationType.Q4_0


def _reader_tensors(path: Path) -> dict[str, Any]:
    return {t.name: t for t in gguf.GGUFReader(str(path)).tensors}


def _gguf_values(t: Any) -> np.ndarray:
    """The oracle: gguf-py's own dequantization, in numpy shape."""
    shape = tuple(int(d) for d in reversed(t.shape.tolist()))
    return np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(
        shape
    )


@pytest.mark.invariant("GGUF-001")
@pytest.mark.parametrize("name", [*TINY_FIXTURES, "bench25m"])
def test_hparams_as_written(name: str, target: Any, load: Callable[[str], Any]) -> None:
    cfg = FIXTURES[name]
    info = target.model_info(load(name))
    assert info == {
        "n_vocab": len(fixture_vocab()[0]),
        "n_embd": cfg.n_embd,
        "n_layer": cfg.n_layer,
        "n_head": cfg.n_head,
        "n_head_kv": cfg.n_head_kv,
        "n_ctx_train": cfg.n_ctx_train,
        "eos": EOS,
    }


def _check_all_tensors(target: Any, handle: Any, path: Path) -> int:
    checked = 0
    for name, t in _reader_tensors(path).items():
        got = target.model_tensor(handle, name)
        want = _gguf_values(t)
        assert got.dtype == np.float32, name
        assert got.shape == want.shape, name
        assert np.array_equal(got, want, equal_nan=True), (
            f"{name}: {int(np.sum(got != want))} values differ from gguf.quants.dequantize"
        )
        checked += 1
    return checked


@pytest.mark.invariant("GGUF-002")
@pytest.mark.requires("model.weights")
def test_q8_0_matches_gguf_dequantize(
    target: Any, load: Callable[[str], Any], gguf_path: Callable[[str], Path]
) -> None:
    types = {t.tensor_type for t in _reader_tensors(gguf_path("q8")).values()}
    assert Q8_0 in types
    assert _check_all_tensors(target, load("q8"), gguf_path("q8")) > 10


@pytest.mark.invariant("GGUF-003")
@pytest.mark.requires("model.weights")
def test_q4_0_matches_gguf_dequantize(
    target: Any, load: Callable[[str], Any], gguf_path: Callable[[str], Path]
) -> None:
    types = {t.tensor_type for t in _reader_tensors(gguf_path("q4")).values()}
    assert Q4_0 in types
    assert _check_all_tensors(target, load("q4"), gguf_path("q4")) > 10


def _random_blocks(qtype: Any, shape: tuple[int, int], seed: int) -> np.ndarray:
    """Random block bytes (every nibble / int8 value, any fp16 scale bits incl. inf / nan)."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    rows, cols = shape
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(rows, cols // block * size), dtype=np.uint8)


@pytest.mark.invariant("GGUF-002", "GGUF-003")
@pytest.mark.requires("model.weights")
@pytest.mark.parametrize("qtype", [Q8_0, Q4_0], ids=["q8_0", "q4_0"])
def test_random_block_bytes_match_gguf_dequantize(qtype: Any, target: Any, tmp_path: Path) -> None:
    cfg = FIXTURES["q4"]
    shape = (cfg.n_embd, cfg.n_embd)  # attn_q: [n_head * head_dim, n_embd]
    raw = _random_blocks(qtype, shape, seed=int(qtype))
    path = write_gguf(
        cfg, tmp_path / "blocks.gguf", override_tensors={"blk.0.attn_q.weight": (raw, qtype)}
    )
    handle = target.load_model(path)
    got = target.model_tensor(handle, "blk.0.attn_q.weight")
    with np.errstate(invalid="ignore"):
        want = gguf.quants.dequantize(raw, qtype).astype(np.float32)
    assert got.shape == want.shape
    assert np.array_equal(got, want, equal_nan=True)


@pytest.mark.invariant("GGUF-004")
@pytest.mark.requires("model.weights")
@pytest.mark.parametrize("name", ["mha", "f16", "llama_qkv"])
def test_f32_and_f16_load_exactly(
    name: str, target: Any, load: Callable[[str], Any], gguf_path: Callable[[str], Path]
) -> None:
    """Every stored tensor, read back by its GGUF name: llama_qkv adds the optional biases and
    a fused attn_qkv, which are no separate-Q/K/V layer weight."""
    tensors = _reader_tensors(gguf_path(name))
    handle = load(name)
    for tname, t in tensors.items():
        got = target.model_tensor(handle, tname)
        want = np.asarray(t.data).astype(np.float32)
        assert np.array_equal(got, want), tname
    kinds = {t.tensor_type.name for t in tensors.values()}
    assert ("F16" in kinds) == (name == "f16")


@pytest.mark.invariant("GGUF-004")
@pytest.mark.requires("model.weights")
def test_a_name_the_file_does_not_store_is_a_key_error(
    target: Any, load: Callable[[str], Any], gguf_path: Callable[[str], Path]
) -> None:
    stored = _reader_tensors(gguf_path("mha"))
    n_layer = 1 + max(int(n.split(".")[1]) for n in stored if n.startswith("blk."))
    absent = [
        "nope",
        "output_norm.bias",
        "blk.0.attn_q.bias",  # mha stores no bias
        "blk.x.attn_q.weight",
        "blk.-1.attn_q.weight",
        f"blk.{n_layer}.attn_q.weight",
        "blk.0.no_such.weight",
    ]
    handle = load("mha")
    for name in absent:
        assert name not in stored
        with pytest.raises(KeyError):
            target.model_tensor(handle, name)


@pytest.mark.invariant("GGUF-004")
@pytest.mark.requires("model.weights")
def test_fused_qkv_file_stores_no_separate_q_k_v(
    target: Any, load: Callable[[str], Any], gguf_path: Callable[[str], Path]
) -> None:
    """llama_qkv stores each layer's Q, K and V as one attn_qkv weight (and bias): the separate
    names, which the engine may split the rows into, are not tensors of the file."""
    stored = _reader_tensors(gguf_path("llama_qkv"))
    layers = sorted({int(n.split(".")[1]) for n in stored if n.startswith("blk.")})
    assert layers == [0, 1]
    handle = load("llama_qkv")
    for il in layers:
        assert f"blk.{il}.attn_qkv.weight" in stored
        for m in ("attn_q", "attn_k", "attn_v"):
            for kind in ("weight", "bias"):
                name = f"blk.{il}.{m}.{kind}"
                assert name not in stored
                with pytest.raises(KeyError):
                    target.model_tensor(handle, name)


@pytest.mark.invariant("GGUF-005")
@pytest.mark.requires("model.weights")
def test_output_tied_to_token_embd_when_absent(
    target: Any, load: Callable[[str], Any], gguf_path: Callable[[str], Path]
) -> None:
    assert "output.weight" not in _reader_tensors(gguf_path("tied"))
    tied = load("tied")
    out = target.model_tensor(tied, "output.weight")
    assert np.array_equal(out, target.model_tensor(tied, "token_embd.weight"))
    # With output.weight present, it is used as stored (not token_embd).
    tensors = _reader_tensors(gguf_path("mha"))
    untied = target.model_tensor(load("mha"), "output.weight")
    assert np.array_equal(untied, _gguf_values(tensors["output.weight"]))
    assert not np.array_equal(untied, _gguf_values(tensors["token_embd.weight"]))


@pytest.mark.invariant("GGUF-005")
@pytest.mark.requires("decoder.logits", "decoder.embeddings", "decoder.pooling")
@pytest.mark.parametrize(("name", "projection"), [("tied", "token_embd"), ("mha", "output")])
def test_logits_project_through_the_tied_or_stored_output(
    name: str, projection: str, new_ctx: Callable[..., Any], gguf_path: Callable[[str], Path]
) -> None:
    """Through decode alone: with pooling NONE each token's embedding is the state the output
    projection reads (OUT-024), so its logits row is W · embedding with W = token_embd.weight
    when the file has no output.weight, and the stored output.weight (not token_embd) when it
    has one. W comes from the suite's own GGUF file, not from the target."""
    tensors = _reader_tensors(gguf_path(name))
    assert ("output.weight" in tensors) == (projection == "output")
    w = _gguf_values(tensors[f"{projection}.weight"]).astype(np.float64)
    other = _gguf_values(tensors["token_embd.weight"]).astype(np.float64)
    ctx = new_ctx(name, n_batch=16, embeddings=True, pooling=0)
    assert ctx.decode(batch(prompt(5), all_out=True)) == 0
    for i in range(5):
        e = ctx.get_embeddings_ith(i).astype(np.float64)
        logits = ctx.get_logits_ith(i)
        assert_nmse(logits, w @ e, 1e-9, f"{name}: row {i} vs {projection}.weight · embedding")
        if projection == "output":
            assert nmse(logits, other @ e) > 1e-2, f"{name}: row {i} follows token_embd"
