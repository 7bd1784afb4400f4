"""qwen2vl: M-RoPE, 4 positions per token (spec/model.md GGUF-051).

Text batches put a token's one position on every plane (checked with the other architectures in
``test_arch_variants.py``); here embedding batches carry 4 distinct planes (time, height, width,
extra), so each section of the rotated pairs turns by its own position. The target's logits are
compared with the float64 oracle's M-RoPE and with the peer's (llama.cpp by default) within NMSE
1e-6 (F32 weights and K/V), for a prompt and for cached steps; a file with unusable sections is
refused with a typed error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from conformance.assertions import assert_nmse, nmse, raises_code
from conformance.fixtures.gguf_models import ARCH_FIXTURES, fixture_path, write_gguf
from conformance.gate import cached
from conformance.model import oracle
from reference_impl.batch.types import Batch

NAME = "qwen2vl"
CFG = ARCH_FIXTURES[NAME]
NMSE_BAR = 1e-6
N_ROWS = 6
# Planes of the prompt rows: time increasing, height and width of a 2x3 grid spread wide
# (rows 17 apart, columns 9 apart), extra 0.
PLANES = np.array(
    [[0, 1, 2, 3, 4, 5], [0, 0, 0, 17, 17, 17], [0, 9, 18, 0, 9, 18], [0, 0, 0, 0, 0, 0]],
    dtype=np.int32,
)

pytestmark = pytest.mark.requires("model.load", "model.arch.qwen2vl")


def _rows(seed: int, n: int) -> np.ndarray:
    """Embedding rows of the model's width, about the size of token embeddings times 10."""
    rng = np.random.default_rng(seed)
    return (0.2 * rng.standard_normal((n, CFG.n_embd))).astype(np.float32)


def _embd_batch(embd: np.ndarray, planes: np.ndarray) -> Batch:
    n = embd.shape[0]
    return Batch(
        embd=embd,
        pos=np.ascontiguousarray(planes, dtype=np.int32).reshape(-1),  # plane-major
        seq_id=np.zeros((n, 1), dtype=np.int32),
        n_seq_id=np.ones(n, dtype=np.int32),
        logits=np.ones(n, dtype=np.int8),
    )


def _decode(engine: Any, steps: list[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray]:
    model = cached(engine, "load_model", str(fixture_path(NAME)))
    ctx = engine.new_context(model, n_ctx=256, n_batch=64, n_ubatch=64, kv_dtype=torch.float32)
    out = []
    for embd, planes in steps:
        assert ctx.decode(_embd_batch(embd, planes)) == 0
        n = embd.shape[0]
        out.append(np.stack([np.asarray(ctx.get_logits_ith(i), np.float64) for i in range(n)]))
    return out


def _steps() -> list[tuple[np.ndarray, np.ndarray]]:
    """The prompt, then 6 cached one-row steps continuing every plane."""
    steps = [(_rows(0, N_ROWS), PLANES)]
    for i in range(6):
        planes = np.array([[N_ROWS + i], [20 + 3 * i], [5 + 7 * i], [0]], dtype=np.int32)
        steps.append((_rows(1 + i, 1), planes))
    return steps


@pytest.mark.invariant("GGUF-051")
@pytest.mark.requires("decoder.logits", "decoder.kv_dtype")
def test_embedding_planes_match_oracle(target: Any) -> None:
    steps = _steps()
    got = np.concatenate(_decode(target, steps))
    embd = np.concatenate([e for e, _ in steps])
    planes = np.concatenate([p for _, p in steps], axis=1)
    want = oracle.forward(fixture_path(NAME), [], embd=embd, planes=planes)
    assert_nmse(want, got, NMSE_BAR, "M-RoPE embedding rows")


@pytest.mark.invariant("GGUF-051")
@pytest.mark.requires("decoder.logits", "decoder.kv_dtype")
def test_embedding_planes_match_peer(
    target: Any, peer: Any, request: pytest.FixtureRequest
) -> None:
    steps = _steps()
    ours, theirs = _decode(target, steps), _decode(peer, steps)
    worst = 0.0
    for i, (a, b) in enumerate(zip(ours, theirs)):
        err = nmse(b, a)
        worst = max(worst, err)
        assert err <= NMSE_BAR, f"{'prompt' if i == 0 else f'step {i}'}: NMSE vs the peer {err:.3e}"
        assert a.argmax(-1).tolist() == b.argmax(-1).tolist(), f"step {i}: argmax"
    request.node.user_properties.append(("nmse_vs_peer", worst))


@pytest.mark.invariant("GGUF-051")
@pytest.mark.requires("decoder.logits", "decoder.kv_dtype")
def test_planes_are_not_interchangeable(target: Any) -> None:
    # the height and width planes swapped move the logits: each section has its own plane
    swapped = PLANES[[0, 2, 1, 3]]
    a = _decode(target, [(_rows(0, N_ROWS), PLANES)])[0]
    b = _decode(target, [(_rows(0, N_ROWS), swapped)])[0]
    moved = nmse(a, b)
    assert moved > 1e-4, f"swapping two planes left the logits alone ({moved:.2e})"


SECTIONS_KEY = f"{NAME}.rope.dimension_sections"
BAD_SECTIONS: dict[str, tuple[dict[str, Any], str]] = {
    "missing": ({"omit_keys": [SECTIONS_KEY]}, "GGUF_MISSING_KEY"),
    "three-counts": ({"override_keys": {SECTIONS_KEY: [2, 3, 3]}}, "GGUF_INVALID_HPARAM"),
    "zero-sum": ({"override_keys": {SECTIONS_KEY: [0, 0, 0, 0]}}, "GGUF_INVALID_HPARAM"),
}


@pytest.mark.invariant("GGUF-051")
@pytest.mark.requires("model.errors")
@pytest.mark.parametrize("case", list(BAD_SECTIONS))
def test_unusable_sections_refused(case: str, target: Any, tmp_path: Path) -> None:
    kw, code = BAD_SECTIONS[case]
    with raises_code(code, field=SECTIONS_KEY):
        target.load_model(write_gguf(CFG, tmp_path / f"{case}.gguf", **kw))


@pytest.mark.invariant("GGUF-051")
@pytest.mark.requires("model.forward")
def test_epsilon_key_is_not_read(target: Any, tmp_path: Path) -> None:
    # llama.cpp 0.3.36's qwen2vl never reads attention.layer_norm_rms_epsilon (epsilon 0):
    # a file without it loads, and any value gives the fixture's logits
    tokens = [1, 286, 340, 47, 301, 262, 365, 290, 97, 58]
    eps_key = f"{NAME}.attention.layer_norm_rms_epsilon"
    base = np.asarray(
        target.forward_logits(cached(target, "load_model", str(fixture_path(NAME))), tokens)
    )
    for tag, kw in (
        ("none", {"omit_keys": [eps_key]}),
        ("big", {"override_keys": {eps_key: 0.01}}),
    ):
        path = write_gguf(CFG, tmp_path / f"eps-{tag}.gguf", **kw)
        got = np.asarray(target.forward_logits(target.load_model(path), tokens))
        assert np.array_equal(got, base), f"epsilon {tag}: the logits moved"
