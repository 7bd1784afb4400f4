"""llama's optional tensors (biases, fused ``attn_qkv``, ``rope_freqs``) and the ``qwen2``,
``qwen2vl`` and ``gemma3`` architectures, on the suite's own random-weight F32 fixtures
(``ARCH_FIXTURES``, and each architecture's fixture with its Q/K/V stored as one ``attn_qkv``).

Each variant is checked against the float64 oracle (which reads the optional tensors from their
definitions), against the peer (llama.cpp by default: prompt logits, cached greedy decode steps
and a three-sequence batch, F32 K/V), and through its typed load errors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
import torch

from conformance.assertions import assert_nmse, nmse, raises_code
from conformance.decoder.helpers import batch
from conformance.fixtures.gguf_models import (
    ARCH_FIXTURES,
    FixtureConfig,
    fixture_path,
    write_gguf,
)
from conformance.gate import cached
from conformance.model import oracle
from conformance.model.test_forward import PROMPTS

# What each fixture shows: llama's biases (and the same weights as one fused attn_qkv), llama 3
# rope factors, qwen2, qwen2vl (M-RoPE: a token's one position on every plane; embedding
# batches with distinct planes are in test_qwen2vl.py), gemma3 (its layer, and its
# sliding-window layers through the iSWA memory: the 18-token prompts outgrow the 8-position
# window).
VARIANTS = {
    "llama_bias": ("GGUF-044",),
    "llama_qkv": ("GGUF-044",),
    "llama3_rope": ("GGUF-047",),
    "qwen2": ("GGUF-046",),
    "qwen2vl": ("GGUF-051",),
    "gemma3": ("GGUF-049",),
}
assert set(VARIANTS) == set(ARCH_FIXTURES)
# The capability an architecture other than llama needs (an engine without it skips).
ARCH_CAPABILITY = {"gemma3": "model.arch.gemma3", "qwen2vl": "model.arch.qwen2vl"}
# What a fixture's decode tests show besides: gemma3's sliding-window layers decode through
# the iSWA memory.
DECODE_INVARIANTS = {"gemma3": ("DEC-065",)}
NMSE_BAR = 1e-6  # F32 weights, F32 K/V: both engines compute the same float32 function
N_STEPS = 10  # cached decode steps after the prompt


def _requires_arch(arch: str) -> list[Any]:
    """The capability mark a file of architecture ``arch`` needs (none for llama)."""
    return [pytest.mark.requires(ARCH_CAPABILITY[arch])] if arch in ARCH_CAPABILITY else []


def _params(
    names: list[str] | None = None, decode: bool = False, rows: tuple[str, ...] = ()
) -> list[Any]:
    """One param per fixture, marked with its rows (``rows`` first, then the fixture's own and,
    with ``decode``, what its decode shows) and its architecture's capability."""
    out = []
    for n in names or list(VARIANTS):
        extra = DECODE_INVARIANTS.get(n, ()) if decode else ()
        marks = [pytest.mark.invariant(*dict.fromkeys((*rows, *VARIANTS[n], *extra)))]
        marks += _requires_arch(ARCH_FIXTURES[n].architecture)
        out.append(pytest.param(n, id=n, marks=marks))
    return out


@pytest.mark.requires("model.load", "model.forward")
@pytest.mark.parametrize("name", _params())
def test_variant_logits_match_oracle(
    name: str, target: Any, load: Callable[[str], Any], gguf_path: Callable[[str], Path]
) -> None:
    handle = load(name)
    for label, tokens in PROMPTS.items():
        got = np.asarray(target.forward_logits(handle, tokens))
        assert_nmse(oracle.forward(gguf_path(name), tokens), got, NMSE_BAR, f"{name}/{label}")


# Every architecture takes a fused attn_qkv (llama.cpp 0.3.36 `create_tensor_qkv`), one
# fixture of each. Each file has Q/K/V biases, stored as one attn_qkv.bias when fused; gemma3's
# fixture, which has none, gets them here (they go in before its Q/K norms).
FUSED_QKV = ["llama_bias", "qwen2", "qwen2vl", "gemma3"]
QKV_BIASES = ("attn_q", "attn_k", "attn_v")


def _with_qkv_biases(name: str) -> FixtureConfig:
    cfg = ARCH_FIXTURES[name]
    if set(QKV_BIASES) <= set(cfg.biases):
        return cfg
    return dataclasses.replace(cfg, name=f"{name}_qkv_bias", biases=(*cfg.biases, *QKV_BIASES))


def _fused(name: str) -> FixtureConfig:
    """The fixture (with Q/K/V biases) storing its Q/K/V weights and biases as one attn_qkv."""
    cfg = _with_qkv_biases(name)
    return dataclasses.replace(cfg, name=f"{cfg.name}_fused", fused_qkv=True)


@pytest.mark.requires("model.load", "model.forward")
@pytest.mark.parametrize("name", _params(FUSED_QKV, rows=("GGUF-044",)))
def test_fused_qkv_computes_like_separate_tensors(name: str, target: Any, tmp_path: Path) -> None:
    # the same Q/K/V weights and biases as one attn_qkv (Q's rows, then K's, then V's): the
    # separate file gives the oracle's logits (its biases used), the fused one the same
    tokens = PROMPTS["long"]
    sep_path = write_gguf(_with_qkv_biases(name), tmp_path / "separate.gguf")
    fused_path = write_gguf(_fused(name), tmp_path / "fused.gguf")
    separate = np.asarray(target.forward_logits(target.load_model(sep_path), tokens))
    assert_nmse(oracle.forward(sep_path, tokens), separate, NMSE_BAR, f"{name} with Q/K/V biases")
    fused = np.asarray(target.forward_logits(target.load_model(fused_path), tokens))
    assert_nmse(separate, fused, 1e-10, f"{name}: fused attn_qkv vs separate Q/K/V")


def _fused_with_separate_biases(tmp: Path, biases: tuple[str, ...]) -> Path:
    """llama_qkv without its fused biases, plus llama_bias's separate biases ``biases`` (of
    "q", "k", "v") in every layer."""
    cfg = ARCH_FIXTURES["llama_qkv"]
    sep = {
        t.name: np.asarray(t.data) for t in gguf.GGUFReader(str(fixture_path("llama_bias"))).tensors
    }
    layers = range(cfg.n_layer)
    override = {
        f"blk.{i}.attn_{m}.bias": sep[f"blk.{i}.attn_{m}.bias"] for i in layers for m in biases
    }
    name = "fused-" + ("".join(biases) or "none")
    return write_gguf(
        cfg,
        tmp / f"{name}.gguf",
        omit_tensors=[f"blk.{i}.attn_qkv.bias" for i in layers],
        override_tensors=override,
    )


@pytest.mark.invariant("GGUF-057")
@pytest.mark.requires("model.load", "model.forward")
def test_separate_biases_beside_a_fused_weight_count_as_a_full_set(
    target: Any, load: Callable[[str], Any], tmp_path: Path
) -> None:
    """All three separate biases beside a fused weight compute as the same values fused (the
    llama_qkv fixture); one or two of them compute as none."""
    tokens = PROMPTS["long"]

    def logits(biases: tuple[str, ...]) -> np.ndarray:
        path = _fused_with_separate_biases(tmp_path, biases)
        return np.asarray(target.forward_logits(target.load_model(path), tokens))

    fused = np.asarray(target.forward_logits(load("llama_qkv"), tokens))
    assert_nmse(fused, logits(("q", "k", "v")), 1e-10, "separate Q/K/V biases beside attn_qkv")
    none = logits(())
    assert nmse(fused, none) > 1e-4  # the biases matter: leaving them out is visible
    for partial in (("q",), ("k", "v")):
        assert_nmse(none, logits(partial), 1e-10, f"only the {'/'.join(partial)} bias")


# Each optional bias stands alone (GGUF-044): llama_bias with some of its biases left out, so
# a layer has a gate bias without an up bias (or the reverse), or only part of Q/K/V's.
PARTIAL_BIASES = {
    "ffn-gate-xor-up": ("blk.0.ffn_up.bias", "blk.1.ffn_gate.bias"),
    "qkv-partial": ("blk.0.attn_k.bias", "blk.1.attn_q.bias", "blk.1.attn_v.bias"),
}


@pytest.mark.invariant("GGUF-044")
@pytest.mark.requires("model.load", "model.forward")
@pytest.mark.parametrize("case", list(PARTIAL_BIASES))
def test_partial_biases_match_oracle(case: str, target: Any, tmp_path: Path) -> None:
    path = _write(tmp_path, "llama_bias", omit_tensors=PARTIAL_BIASES[case])
    tokens = PROMPTS["long"]
    got = np.asarray(target.forward_logits(target.load_model(path), tokens))
    assert_nmse(oracle.forward(path, tokens), got, NMSE_BAR, f"llama_bias without {case}")


def _context(engine: Any, name: str) -> Any:
    model = cached(engine, "load_model", str(fixture_path(name)))
    return engine.new_context(
        model, n_ctx=256, n_batch=64, n_ubatch=64, n_seq_max=3, kv_dtype=torch.float32
    )


def _rows(ctx: Any, n: int) -> np.ndarray:
    return np.stack([np.asarray(ctx.get_logits_ith(i), dtype=np.float64) for i in range(n)])


def _step_both(ours: Any, theirs: Any, b: Any, what: str) -> np.ndarray:
    """Decode ``b`` in both contexts; the rows agree within the bar and in their argmax."""
    assert ours.decode(b) == 0 and theirs.decode(b) == 0, what
    n = b.n_tokens
    mine, peer_rows = _rows(ours, n), _rows(theirs, n)
    err = nmse(peer_rows, mine)
    assert err <= NMSE_BAR, f"{what}: NMSE vs the peer {err:.3e}"
    assert mine.argmax(-1).tolist() == peer_rows.argmax(-1).tolist(), f"{what}: greedy tokens"
    return mine


@pytest.mark.requires("model.load", "decoder.logits", "decoder.kv_dtype")
@pytest.mark.parametrize("name", _params(decode=True))
def test_prompt_and_decode_steps_match_peer(name: str, target: Any, peer: Any) -> None:
    ours, theirs = _context(target, name), _context(peer, name)
    prompt = PROMPTS["long"]
    k = len(prompt)
    rows = _step_both(ours, theirs, batch(prompt, pos=list(range(k)), all_out=True), "prompt")
    tok = int(rows[-1].argmax())
    for i in range(N_STEPS):  # greedy: each step feeds the argmax both engines agreed on
        rows = _step_both(ours, theirs, batch([tok], pos=[k + i], all_out=True), f"step {i}")
        tok = int(rows[0].argmax())


@pytest.mark.requires("model.load", "decoder.logits", "decoder.kv_dtype")
@pytest.mark.parametrize("name", _params(decode=True))
def test_multi_sequence_batch_matches_peer(name: str, target: Any, peer: Any) -> None:
    ours, theirs = _context(target, name), _context(peer, name)
    # three 6-token prompts interleaved in one batch, then 8 steps of one token per sequence
    toks = PROMPTS["long"]
    b = batch(
        toks, seqs=[[i % 3] for i in range(18)], pos=[i // 3 for i in range(18)], all_out=True
    )
    rows = _step_both(ours, theirs, b, "prompts")
    last = rows[-3:].argmax(-1).tolist()  # rows 15, 16, 17: the last token of seqs 0, 1, 2
    for i in range(8):
        step = batch(last, seqs=[[0], [1], [2]], pos=[6 + i] * 3, all_out=True)
        last = _step_both(ours, theirs, step, f"step {i}").argmax(-1).tolist()


@pytest.mark.requires("model.load", "decoder.logits", "decoder.kv_dtype", "decoder.shift")
@pytest.mark.parametrize("name", _params(["llama3_rope", "qwen2", "gemma3"], decode=True))
def test_k_shift_matches_peer(name: str, target: Any, peer: Any) -> None:
    # drop positions 4..7, shift 8..17 down by 4 (the K-shift re-rotates cached keys with the
    # architecture's RoPE, factors included), then greedy steps from position 14
    ours, theirs = _context(target, name), _context(peer, name)
    prompt = PROMPTS["long"]
    k = len(prompt)
    b = batch(prompt, pos=list(range(k)), out=[0] * (k - 1) + [1])
    assert ours.decode(b) == 0 and theirs.decode(b) == 0
    for ctx in (ours, theirs):
        assert ctx.seq_rm(0, 4, 8)
        ctx.seq_add(0, 8, -1, -4)
    tok = int(np.asarray(ours.get_logits_ith(-1)).argmax())
    for i in range(8):
        step = batch([tok], pos=[k - 4 + i], all_out=True)
        tok = int(_step_both(ours, theirs, step, f"step {i} after the shift")[0].argmax())


# The K-shift of each RoPE flavour: llama 3 factors (NORM pairs), qwen2 (NEOX pairs), gemma3
# (NEOX, and the sliding layers' own base; 12 cached tokens outgrow its 8-position window).
K_SHIFT_ARCHS = {
    "llama3_rope": (),
    "qwen2": (),
    "gemma3": (pytest.mark.requires("model.arch.gemma3"),),
}


@pytest.mark.invariant("GGUF-053")
@pytest.mark.requires("model.load", "decoder.logits", "decoder.kv_dtype", "decoder.shift")
@pytest.mark.parametrize("name", [pytest.param(n, id=n, marks=m) for n, m in K_SHIFT_ARCHS.items()])
def test_k_shift_keeps_rope_relative(
    name: str, target: Any, gguf_path: Callable[[str], Path]
) -> None:
    # Moving every cached position of the sequence by +9 and later by -4 re-rotates the cached
    # keys; attention sees only relative positions, so each decode after a shift gives the
    # oracle's logits for the same tokens at positions 0..n-1. No peer: the float64 oracle.
    toks = PROMPTS["long"]  # 18 tokens: 12 cached, then 3 after each shift
    expected = oracle.forward(gguf_path(name), toks)
    ctx = _context(target, name)
    assert ctx.decode(batch(toks[:12], pos=list(range(12)))) == 0
    offset = 0
    for delta, lo in ((9, 12), (-4, 15)):
        ctx.seq_add(0, 0, -1, delta)
        offset += delta
        # (seq_pos_min is not checked: gemma3's window cache may already have dropped cells)
        assert ctx.seq_pos_max(0) == lo - 1 + offset
        b = batch(toks[lo : lo + 3], pos=[p + offset for p in range(lo, lo + 3)], all_out=True)
        assert ctx.decode(b) == 0, f"decode after the shift by {delta}"
        what = f"{name}: tokens {lo}..{lo + 2} after shifting by {delta} (total {offset})"
        assert_nmse(expected[lo : lo + 3], _rows(ctx, 3), NMSE_BAR, what)


# -- load errors --------------------------------------------------------------------------------


# The fixtures of the bad-file cases: ARCH_FIXTURES and each architecture's fused-QKV file.
BAD_FILE_CONFIGS: dict[str, FixtureConfig] = {
    **ARCH_FIXTURES,
    **{f"{n}_fused": _fused(n) for n in ("qwen2", "qwen2vl", "gemma3")},
}


def _write(tmp: Path, name: str, **kw: Any) -> Path:
    return write_gguf(BAD_FILE_CONFIGS[name], tmp / f"{name}-variant.gguf", **kw)


LLAMA_BIAS = ARCH_FIXTURES["llama_bias"]
# case -> (fixture, write_gguf arguments, error code, field)
BAD_FILES: dict[str, tuple[str, dict[str, Any], str, str]] = {
    # attn_k's bias has n_embd_k_gqa = 32 values; n_embd = 64 is wrong
    "k-bias-wrong-length": (
        "llama_bias",
        {"override_tensors": {"blk.1.attn_k.bias": np.zeros(LLAMA_BIAS.n_embd, np.float32)}},
        "GGUF_SHAPE_MISMATCH",
        "blk.1.attn_k.bias",
    ),
    "ffn-up-bias-wrong-length": (
        "llama_bias",
        {"override_tensors": {"blk.0.ffn_up.bias": np.zeros(LLAMA_BIAS.n_embd, np.float32)}},
        "GGUF_SHAPE_MISMATCH",
        "blk.0.ffn_up.bias",
    ),
    # rope_freqs holds n_rot / 2 = 8 divisors
    "rope-freqs-wrong-length": (
        "llama3_rope",
        {"override_tensors": {"rope_freqs.weight": np.ones(16, np.float32)}},
        "GGUF_SHAPE_MISMATCH",
        "rope_freqs.weight",
    ),
    "qkv-bias-wrong-length": (
        "llama_qkv",
        {"override_tensors": {"blk.0.attn_qkv.bias": np.zeros(64, np.float32)}},
        "GGUF_SHAPE_MISMATCH",
        "blk.0.attn_qkv.bias",
    ),
    # a separate Q next to the fused attn_qkv of its layer: llama.cpp does not read it
    "q-beside-fused-qkv": (
        "llama_qkv",
        {"override_tensors": {"blk.0.attn_q.weight": np.zeros((64, 64), np.float32)}},
        "GGUF_UNEXPECTED_TENSOR",
        "blk.0.attn_q.weight",
    ),
    # a separate Q bias next to a fused attn_qkv that has its own bias: llama.cpp creates no
    # attn_q.bias then (create_tensor_qkv), so the tensor is unused
    "q-bias-beside-fused-qkv-bias": (
        "llama_qkv",
        {"override_tensors": {"blk.0.attn_q.bias": np.zeros(64, np.float32)}},
        "GGUF_UNEXPECTED_TENSOR",
        "blk.0.attn_q.bias",
    ),
    # every architecture takes a fused attn_qkv as llama does (create_tensor_qkv, 0.3.36), so
    # a separate Q, K or V weight beside it is unused: qwen2's Q {64, 64}, qwen2vl's V
    # {64, 32} (n_embd_k_gqa 32), gemma3's K {64, 64} (two heads of 32 values)
    "qwen2-q-beside-fused-qkv": (
        "qwen2_fused",
        {"override_tensors": {"blk.0.attn_q.weight": np.zeros((64, 64), np.float32)}},
        "GGUF_UNEXPECTED_TENSOR",
        "blk.0.attn_q.weight",
    ),
    "qwen2vl-v-beside-fused-qkv": (
        "qwen2vl_fused",
        {"override_tensors": {"blk.1.attn_v.weight": np.zeros((32, 64), np.float32)}},
        "GGUF_UNEXPECTED_TENSOR",
        "blk.1.attn_v.weight",
    ),
    "gemma3-k-beside-fused-qkv": (
        "gemma3_fused",
        {"override_tensors": {"blk.0.attn_k.weight": np.zeros((64, 64), np.float32)}},
        "GGUF_UNEXPECTED_TENSOR",
        "blk.0.attn_k.weight",
    ),
    # llama's optional tensors that qwen2 does not have (GGUF-046), each of its right shape
    # (n_embd 64, n_rot / 2 = 8): refused, not ignored
    "qwen2-o-bias": (
        "qwen2",
        {"override_tensors": {"blk.1.attn_output.bias": np.zeros(64, np.float32)}},
        "GGUF_UNSUPPORTED_FEATURE",
        "blk.1.attn_output.bias",
    ),
    "qwen2-rope-freqs": (
        "qwen2",
        {"override_tensors": {"rope_freqs.weight": np.ones(8, np.float32)}},
        "GGUF_UNSUPPORTED_FEATURE",
        "rope_freqs.weight",
    ),
    # qwen2vl has qwen2's tensors (GGUF-051): no rope_freqs (n_rot / 2 = 8 divisors)
    "qwen2vl-rope-freqs": (
        "qwen2vl",
        {"override_tensors": {"rope_freqs.weight": np.ones(8, np.float32)}},
        "GGUF_UNSUPPORTED_FEATURE",
        "rope_freqs.weight",
    ),
    # gemma3 has Q/K/V biases only (GGUF-049), no O bias
    "gemma3-o-bias": (
        "gemma3",
        {"override_tensors": {"blk.0.attn_output.bias": np.zeros(64, np.float32)}},
        "GGUF_UNSUPPORTED_FEATURE",
        "blk.0.attn_output.bias",
    ),
    # gemma3 has no rope_freqs either (n_rot / 2 = 16 divisors for its 32-value heads)
    "gemma3-rope-freqs": (
        "gemma3",
        {"override_tensors": {"rope_freqs.weight": np.ones(16, np.float32)}},
        "GGUF_UNSUPPORTED_FEATURE",
        "rope_freqs.weight",
    ),
    "qwen2-v-bias-wrong-length": (
        "qwen2",
        {"override_tensors": {"blk.0.attn_v.bias": np.zeros(64, np.float32)}},
        "GGUF_SHAPE_MISMATCH",
        "blk.0.attn_v.bias",
    ),
}


def _bad_params() -> list[Any]:
    # a case on a fixture of an architecture other than llama needs its capability
    out = []
    for case, (name, *_) in BAD_FILES.items():
        marks = _requires_arch(BAD_FILE_CONFIGS[name].architecture)
        out.append(pytest.param(case, id=case, marks=marks))
    return out


@pytest.mark.invariant("GGUF-048")
@pytest.mark.requires("model.load")
@pytest.mark.parametrize("case", _bad_params())
def test_bad_optional_tensor_refused(case: str, target: Any, tmp_path: Path) -> None:
    name, kw, _, _ = BAD_FILES[case]
    with pytest.raises(Exception):  # noqa: B017 -- any engine-specific error counts here
        target.load_model(_write(tmp_path, name, **kw))


@pytest.mark.invariant("GGUF-048")
@pytest.mark.requires("model.errors")
@pytest.mark.parametrize("case", _bad_params())
def test_bad_optional_tensor_error_names_it(case: str, target: Any, tmp_path: Path) -> None:
    name, kw, code, field = BAD_FILES[case]
    with raises_code(code, field=field):
        target.load_model(_write(tmp_path, name, **kw))


# -- the native decode step ---------------------------------------------------------------------


@pytest.mark.invariant("DEC-062")
@pytest.mark.requires("decoder.native", "decoder.logits")
@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("llama_bias", "biases"),
        ("llama_qkv", "biases"),
        ("llama3_rope", "rope_freqs"),
        ("qwen2", "NEOX"),
    ],
)
def test_native_step_refuses_variants(name: str, words: str, new_ctx: Callable[..., Any]) -> None:
    from reference_impl.errors import DecoderError

    ctx = new_ctx(name, n_batch=32)
    assert words in ctx.native_reason  # decode_path="auto" stays on the torch forward
    with raises_code("DEC_NATIVE_UNAVAILABLE", field="decode_path", exc=DecoderError):
        new_ctx(name, decode_path="native")
