"""The llama forward pass against an independent float64 oracle, causality, goldens."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conformance.assertions import assert_finite, assert_nmse, raises_code
from conformance.fixtures.gguf_models import TINY_FIXTURES
from conformance.model import oracle

pytestmark = pytest.mark.requires("model.load", "model.forward")

# Token ids of the fixture vocabulary (BOS = 1, then pieces and byte tokens), fixed so that
# these checks do not depend on the tokenizer.
PROMPTS = {
    "long": [1, 286, 340, 47, 301, 262, 365, 290, 97, 58, 293, 352, 291, 62, 9, 317, 263, 22],
    "short": [1, 290, 97],
    "bytes": [1, 203, 149, 3, 258, 300, 300, 300, 301],
}


def _logits(target: Any, handle: Any, tokens: list[int]) -> np.ndarray:
    out = np.asarray(target.forward_logits(handle, tokens))
    assert out.dtype == np.float32
    assert out.shape == (len(tokens), target.model_info(handle)["n_vocab"])
    assert_finite(out, "logits")
    return out


def _check_vs_oracle(
    name: str, bar: float, target: Any, load: Callable[[str], Any], path: Path
) -> None:
    handle = load(name)
    for label, tokens in PROMPTS.items():
        got = _logits(target, handle, tokens)
        assert_nmse(oracle.forward(path, tokens), got, bar, f"{name}/{label}")


@pytest.mark.invariant("GGUF-020")
@pytest.mark.parametrize("name", ["mha", "gqa", "f16"])
def test_logits_match_oracle(
    name: str, target: Any, load: Callable[[str], Any], gguf_path: Callable[[str], Path]
) -> None:
    _check_vs_oracle(name, 1e-6, target, load, gguf_path(name))


@pytest.mark.invariant("GGUF-020", "GGUF-023")
def test_logits_past_the_first_256_positions_match_oracle(
    target: Any, load: Callable[[str], Any], gguf_path: Callable[[str], Path], tmp_path: Path
) -> None:
    """300 tokens: positions past 255 (beyond n_ctx_train, which only advises) rotate like the
    others; an engine that tabulates RoPE angles must grow its table correctly. Then the first
    forward of a fresh load, 520 tokens (past twice a 256-entry table in one call): its leading
    rows are the 300-token logits (the float64 oracle over 520 tokens would cost seconds). And
    the first forward of another fresh load, 257 tokens: its last position is exactly 256, the
    first one past such a table (a table grown only past its last index misses it)."""
    path = gguf_path("gqa")
    handle = load("gqa")
    n_vocab = target.model_info(handle)["n_vocab"]
    tokens = [1] + [2 + (37 * i) % (n_vocab - 2) for i in range(519)]
    got = _logits(target, handle, tokens[:300])
    assert_nmse(oracle.forward(path, tokens[:300]), got, 1e-6, "gqa/300 tokens")
    # a copy: a new file, so no engine hands back a cached model whose table has grown already
    fresh = target.load_model(shutil.copyfile(path, tmp_path / "gqa-copy.gguf"))
    assert_nmse(got, _logits(target, fresh, tokens)[:300], 1e-8, "gqa/520 tokens, fresh load")
    edge = target.load_model(shutil.copyfile(path, tmp_path / "gqa-copy-257.gguf"))
    assert_nmse(got[:257], _logits(target, edge, tokens[:257]), 1e-8, "gqa/257 tokens, fresh load")


@pytest.mark.invariant("GGUF-021")
def test_tied_output_logits_match_oracle(
    target: Any, load: Callable[[str], Any], gguf_path: Callable[[str], Path]
) -> None:
    _check_vs_oracle("tied", 1e-6, target, load, gguf_path("tied"))


@pytest.mark.invariant("GGUF-022")
@pytest.mark.parametrize("name", ["q8", "q4"])
def test_quantized_logits_match_oracle(
    name: str, target: Any, load: Callable[[str], Any], gguf_path: Callable[[str], Path]
) -> None:
    _check_vs_oracle(name, 1e-4, target, load, gguf_path(name))


@pytest.mark.invariant("GGUF-023")
@pytest.mark.parametrize("name", ["mha", "gqa"])
def test_prefix_logits_equal_leading_rows(
    name: str, target: Any, load: Callable[[str], Any]
) -> None:
    handle = load(name)
    tokens = PROMPTS["long"]
    full = _logits(target, handle, tokens)
    for k in (1, 2, 7, len(tokens) - 1):
        assert_nmse(full[:k], _logits(target, handle, tokens[:k]), 1e-8, f"prefix {k}")


@pytest.mark.invariant("GGUF-024")
@pytest.mark.parametrize("name", ["mha", "gqa", "q4"])
def test_forward_is_deterministic(name: str, target: Any, load: Callable[[str], Any]) -> None:
    handle = load(name)
    a = _logits(target, handle, PROMPTS["long"])
    b = _logits(target, handle, PROMPTS["long"])
    assert np.array_equal(a, b)


def greedy(target: Any, handle: Any, prompt: list[int], n: int) -> list[int]:
    """Argmax continuation, recomputing the whole sequence each step (no cache needed)."""
    tokens = list(prompt)
    for _ in range(n):
        tokens.append(int(np.argmax(_logits(target, handle, tokens)[-1])))
    return tokens[len(prompt) :]


@pytest.mark.invariant("GGUF-025")
@pytest.mark.parametrize("name", TINY_FIXTURES)
def test_greedy_continuation_golden(
    name: str, target: Any, load: Callable[[str], Any], snapshot: Any
) -> None:
    handle = load(name)
    got = {label: greedy(target, handle, PROMPTS[label], 16) for label in ("long", "short")}
    assert got == snapshot


@pytest.mark.invariant("GGUF-026")
@pytest.mark.parametrize("bad", [-1, 508, 1 << 20])
def test_token_outside_vocab_refused(bad: int, target: Any, load: Callable[[str], Any]) -> None:
    with pytest.raises(Exception):  # noqa: B017 -- any engine-specific error counts here
        target.forward_logits(load("mha"), [1, 290, bad, 97])


@pytest.mark.invariant("GGUF-026")
def test_vocab_boundary_tokens_accepted(target: Any, load: Callable[[str], Any]) -> None:
    # ids 0 (<unk>) and n_vocab - 1 are inside [0, n_vocab): the forward runs on them
    handle = load("mha")
    last = target.model_info(handle)["n_vocab"] - 1
    out = _logits(target, handle, [0, 1, 290, last, 0])
    assert out.shape[0] == 5


@pytest.mark.invariant("GGUF-026")
@pytest.mark.requires("model.errors")
def test_token_outside_vocab_error_code(target: Any, load: Callable[[str], Any]) -> None:
    with raises_code("MODEL_TOKEN_RANGE", index=2):
        target.forward_logits(load("mha"), [1, 290, 508, 97])


@pytest.mark.invariant("GGUF-055")
def test_empty_forward_refused(target: Any, load: Callable[[str], Any]) -> None:
    # llama.cpp refuses to decode an empty batch: there is no logits row to return
    with pytest.raises(Exception):  # noqa: B017 -- any engine-specific error counts here
        target.forward_logits(load("mha"), [])


@pytest.mark.invariant("GGUF-055")
@pytest.mark.requires("model.errors")
def test_empty_forward_error_code(target: Any, load: Callable[[str], Any]) -> None:
    with raises_code("MODEL_INPUT", field="token"):
        target.forward_logits(load("mha"), [])
