"""gemma3: interleaved sliding-window attention through a real model (spec/model.md GGUF-049,
GGUF-050; spec/decoder.md DEC-065).

The ``gemma3`` fixture has six layers: layers 0-4 attend through an 8-position window and layer
5 is global, so every prompt here is longer than the window and its sliding layers mask keys.
Decode contexts of the target and the peer (llama.cpp by default) are driven with the same
batches and memory operations; every logits row must agree within NMSE 1e-6 (F32 weights and
K/V) and in its argmax. The optional keys of GGUF-050 are each written into a variant file and
checked against the float64 oracle and the peer; bad patterns are refused with typed errors.
The prompt-level checks shared with the other architectures (the oracle, 10 cached steps, a
three-sequence batch, a K-shift) live in ``test_arch_variants.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from conformance.assertions import assert_nmse, nmse, raises_code
from conformance.decoder.helpers import batch
from conformance.fixtures.gguf_models import ARCH_FIXTURES, fixture_path, write_gguf
from conformance.gate import cached
from conformance.model import oracle

NAME = "gemma3"
CFG = ARCH_FIXTURES[NAME]
N_SWA = CFG.sliding_window  # 8
NMSE_BAR = 1e-6  # F32 weights and K/V: both engines compute the same float32 function
# 40 tokens: five windows; token ids spread over the vocabulary (BOS first)
LONG = [1, *((17 * i + 5) % 500 + 3 for i in range(39))]

pytestmark = pytest.mark.requires("model.load", "model.arch.gemma3")


def _context(engine: Any, path: Path | str, **params: Any) -> Any:
    model = cached(engine, "load_model", str(path))
    base = {"n_ctx": 256, "n_batch": 64, "n_ubatch": 64, "kv_dtype": torch.float32}
    return engine.new_context(model, **{**base, **params})


def _rows(ctx: Any, n: int) -> np.ndarray:
    return np.stack([np.asarray(ctx.get_logits_ith(i), dtype=np.float64) for i in range(n)])


class Pair:
    """The target's and the peer's context, driven alike; records the worst NMSE seen."""

    def __init__(self, target: Any, peer: Any, **params: Any) -> None:
        path = fixture_path(NAME)
        self.ours, self.theirs = _context(target, path, **params), _context(peer, path, **params)
        self.worst = 0.0

    def step(self, b: Any, what: str) -> np.ndarray:
        """Decode ``b`` in both; every row within the bar and with the same argmax."""
        assert self.ours.decode(b) == 0, f"{what}: target decode"
        assert self.theirs.decode(b) == 0, f"{what}: peer decode"
        mine, peer_rows = _rows(self.ours, b.n_tokens), _rows(self.theirs, b.n_tokens)
        err = nmse(peer_rows, mine)
        self.worst = max(self.worst, err)
        assert err <= NMSE_BAR, f"{what}: NMSE vs the peer {err:.3e}"
        assert mine.argmax(-1).tolist() == peer_rows.argmax(-1).tolist(), f"{what}: argmax"
        return mine

    def both(self, op: str, *args: int) -> None:
        getattr(self.ours, op)(*args)
        getattr(self.theirs, op)(*args)


@pytest.mark.invariant("GGUF-049", "DEC-065")
@pytest.mark.requires("decoder.logits", "decoder.kv_dtype")
@pytest.mark.parametrize("n_ubatch", [64, 16, 5])
def test_long_prompt_and_steps_match_peer(
    n_ubatch: int, target: Any, peer: Any, request: pytest.FixtureRequest
) -> None:
    # a 40-token prompt in ubatches of 64, 16 or 5 tokens (windows span ubatches), then 10
    # greedy steps whose keys slide out of the window one by one
    pair = Pair(target, peer, n_ubatch=n_ubatch)
    k = len(LONG)
    rows = pair.step(batch(LONG, pos=list(range(k)), all_out=True), "prompt")
    tok = int(rows[-1].argmax())
    for i in range(10):
        tok = int(pair.step(batch([tok], pos=[k + i], all_out=True), f"step {i}")[0].argmax())
    request.node.user_properties.append(("nmse_vs_peer", pair.worst))


@pytest.mark.invariant("GGUF-049", "DEC-065")
@pytest.mark.requires("decoder.logits", "decoder.kv_dtype")
def test_greedy_continuation_matches_peer(target: Any, peer: Any) -> None:
    # 32 greedy tokens after the prompt, each engine feeding its own argmax
    def continuation(engine: Any) -> list[int]:
        ctx = _context(engine, fixture_path(NAME))
        k = len(LONG)
        assert ctx.decode(batch(LONG, pos=list(range(k)), out=[0] * (k - 1) + [1])) == 0
        out: list[int] = []
        for i in range(32):
            out.append(int(np.argmax(ctx.get_logits_ith(-1))))
            assert ctx.decode(batch([out[-1]], pos=[k + i], all_out=True)) == 0
        return out

    assert continuation(target) == continuation(peer)


@pytest.mark.invariant("DEC-065")
@pytest.mark.requires("decoder.logits", "decoder.kv_dtype", "decoder.memory_ops")
@pytest.mark.parametrize("unified", [True, False], ids=["unified", "streams"])
def test_seq_rm_tail_and_seq_cp_match_peer(
    unified: bool, target: Any, peer: Any, request: pytest.FixtureRequest
) -> None:
    pair = Pair(target, peer, n_seq_max=2, kv_unified=unified, n_ctx=512)
    k = 24
    pair.step(batch(LONG[:k], pos=list(range(k)), all_out=True), "prompt")
    # drop the last 6 positions (seq_rm of the tail is allowed with a sliding window) and
    # decode another ending there
    assert pair.ours.seq_rm(0, k - 6, -1) and pair.theirs.seq_rm(0, k - 6, -1)
    for ctx in (pair.ours, pair.theirs):
        assert ctx.seq_pos_max(0) == k - 7
    ending = LONG[k : k + 6]
    pair.step(batch(ending, pos=list(range(k - 6, k)), all_out=True), "new ending")
    # copy sequence 0 to 1, then both continue with different tokens for 8 steps
    pair.both("seq_cp", 0, 1, -1, -1)
    last = [LONG[5], LONG[9]]
    for i in range(8):
        step = batch(last, seqs=[[0], [1]], pos=[k + i] * 2, all_out=True)
        last = pair.step(step, f"step {i} after seq_cp").argmax(-1).tolist()
    request.node.user_properties.append(("nmse_vs_peer", pair.worst))


# -- the optional keys (GGUF-050) ---------------------------------------------------------------

KEY = "gemma3."
# variant -> write_gguf arguments; each changes which layers slide, their base or the logits
KEY_VARIANTS: dict[str, dict[str, Any]] = {
    "no-window": {"omit_keys": [KEY + "attention.sliding_window"]},
    "period-3": {"override_keys": {KEY + "attention.sliding_window_pattern": 3}},
    "period-0": {"override_keys": {KEY + "attention.sliding_window_pattern": 0}},
    "per-layer": {"override_keys": {KEY + "attention.sliding_window_pattern": [0, 1, 1, 0, 1, 0]}},
    "swa-base": {"override_keys": {KEY + "rope.freq_base_swa": 5000.0}},
    "softcap": {"override_keys": {KEY + "final_logit_softcapping": 0.3}},
    # llama.cpp does not read attention.scale for gemma3: the logits stay the fixture's
    "attention-scale": {"override_keys": {KEY + "attention.scale": 0.5}},
}


@pytest.fixture(scope="module")
def variant_files(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    folder = tmp_path_factory.mktemp("gemma3-keys")
    made: dict[str, Path] = {}

    def path(variant: str) -> Path:
        if variant not in made:
            made[variant] = write_gguf(CFG, folder / f"{variant}.gguf", **KEY_VARIANTS[variant])
        return made[variant]

    return path


@pytest.mark.invariant("GGUF-050")
@pytest.mark.requires("model.forward")
@pytest.mark.parametrize("variant", list(KEY_VARIANTS))
def test_optional_keys_match_oracle(
    variant: str, target: Any, variant_files: Callable[[str], Path]
) -> None:
    path = variant_files(variant)
    got = np.asarray(target.forward_logits(cached(target, "load_model", str(path)), LONG))
    assert_nmse(oracle.forward(path, LONG), got, NMSE_BAR, variant)


@pytest.mark.invariant("GGUF-050")
@pytest.mark.requires("model.forward")
@pytest.mark.parametrize("variant", list(KEY_VARIANTS))
def test_optional_keys_match_peer(
    variant: str, target: Any, peer: Any, variant_files: Callable[[str], Path]
) -> None:
    path = str(variant_files(variant))
    ours = np.asarray(target.forward_logits(cached(target, "load_model", path), LONG))
    theirs = np.asarray(peer.forward_logits(cached(peer, "load_model", path), LONG))
    err = nmse(theirs.astype(np.float64), ours.astype(np.float64))
    assert err <= NMSE_BAR, f"{variant}: NMSE vs the peer {err:.3e}"


@pytest.mark.invariant("GGUF-050")
@pytest.mark.requires("model.forward")
def test_each_key_changes_the_logits(target: Any, variant_files: Callable[[str], Path]) -> None:
    # the variants are not the fixture in disguise: each moves the logits of the long prompt
    # (all but attention.scale, which gemma3 does not read)
    base = np.asarray(
        target.forward_logits(cached(target, "load_model", str(fixture_path(NAME))), LONG)
    )
    for variant in KEY_VARIANTS:
        got = np.asarray(
            target.forward_logits(cached(target, "load_model", str(variant_files(variant))), LONG)
        )
        moved = nmse(base.astype(np.float64), got.astype(np.float64))
        if variant == "attention-scale":
            assert moved == 0.0, f"{variant}: attention.scale is not read, yet the logits moved"
        else:
            assert moved > 1e-4, f"{variant}: the logits did not move ({moved:.2e})"


BAD_KEYS: dict[str, tuple[dict[str, Any], str]] = {
    # a period of 1 makes no layer slide: llama.cpp aborts (GGML_ASSERT is_swa_any)
    "period-1": (
        {KEY + "attention.sliding_window_pattern": 1},
        KEY + "attention.sliding_window_pattern",
    ),
    "pattern-no-sliding-layer": (
        {KEY + "attention.sliding_window_pattern": [0] * CFG.n_layer},
        KEY + "attention.sliding_window_pattern",
    ),
    "pattern-wrong-length": (
        {KEY + "attention.sliding_window_pattern": [1, 1, 0]},
        KEY + "attention.sliding_window_pattern",
    ),
}


@pytest.mark.invariant("GGUF-050")
@pytest.mark.requires("model.errors")
@pytest.mark.parametrize("case", list(BAD_KEYS))
def test_unusable_pattern_refused(case: str, target: Any, tmp_path: Path) -> None:
    keys, field = BAD_KEYS[case]
    path = write_gguf(CFG, tmp_path / f"{case}.gguf", override_keys=keys)
    with raises_code("GGUF_INVALID_HPARAM", field=field):
        target.load_model(path)


@pytest.mark.invariant("GGUF-049")
@pytest.mark.requires("model.errors")
@pytest.mark.parametrize(
    "norm", ["attn_q_norm", "attn_k_norm", "post_attention_norm", "post_ffw_norm"]
)
def test_missing_or_misshapen_norm_refused(norm: str, target: Any, tmp_path: Path) -> None:
    name = f"blk.2.{norm}.weight"
    with raises_code("GGUF_MISSING_TENSOR", field=name):
        target.load_model(write_gguf(CFG, tmp_path / "missing.gguf", omit_tensors=[name]))
    wrong = np.ones(CFG.n_embd + 1, dtype=np.float32)
    with raises_code("GGUF_SHAPE_MISMATCH", field=name):
        target.load_model(
            write_gguf(CFG, tmp_path / "misshapen.gguf", override_tensors={name: wrong})
        )
