"""The native one-token decode step against the torch forward (DEC-060 .. DEC-063, decision D17).

Every check runs two contexts in lockstep over the same model: ``decode_path="torch"`` (the
definition) and the native step, and asserts from the trace that the native step really ran.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch

from conformance.assertions import assert_nmse, raises_code
from conformance.decoder.helpers import batch, prompt
from conformance.fixtures.gguf_models import fixture_path

pytestmark = pytest.mark.requires("decoder.introspection")


def _paths(ctx: Any) -> list[str]:
    """The compute path of every ubatch of the last decode call, in order."""
    return [e.data["path"] for e in ctx.trace.of_call(ctx.trace.calls - 1) if e.kind == "compute"]


def _assert_falls_back_to_torch(ctx: Any, model: Any) -> None:
    """A prompt and one step on ``ctx`` run on torch, bit-identical to a "torch" context."""
    from reference_impl.decoder import Context

    ref = Context(model, n_ctx=256, n_batch=32, decode_path="torch")
    for toks, pos in ((prompt(4), list(range(4))), ([7], [4])):
        b = batch(toks, pos=pos, all_out=True)
        assert ctx.decode(b) == 0 and ref.decode(b) == 0
        assert _paths(ctx) == ["torch"]
        assert np.array_equal(ctx.get_logits(), ref.get_logits())


def _script(n_seqs: int) -> list[tuple[list[int], list[list[int]], list[int]]]:
    """A prefill per sequence, then single-token steps that alternate between the sequences
    (so a step's mask hides the other sequences' cells in a unified cache)."""
    toks = prompt(40, start=5)
    steps = []
    for s in range(n_seqs):
        steps.append((toks[s * 6 : s * 6 + 6], [[s]] * 6, list(range(6))))
    for j in range(8):
        s = j % n_seqs
        steps.append(([toks[20 + j]], [[s]], [6 + j // n_seqs]))
    return steps


def _pair(new_ctx: Callable[..., Any], model: str, **params: Any) -> tuple[Any, Any]:
    params = {"n_batch": 32, "n_ubatch": 4, "trace": True, **params}
    ref = new_ctx(model, decode_path="torch", **params)
    nat = new_ctx(model, decode_path="native", **params)
    assert nat.native_reason == "native"
    return ref, nat


@pytest.mark.requires("decoder.native", "decoder.logits")
@pytest.mark.invariant("DEC-060")
@pytest.mark.parametrize(
    ("model", "n_seqs", "unified"),
    [
        ("mha", 1, True),
        ("mqa", 2, True),
        ("gqa", 2, True),
        ("gqa", 2, False),
        ("tied", 1, True),
        ("q4", 3, True),
        ("layer1", 1, True),  # a single layer: one K and one V cache
    ],
)
def test_native_step_matches_the_torch_forward(
    new_ctx: Callable[..., Any], model: str, n_seqs: int, unified: bool
) -> None:
    ref, nat = _pair(new_ctx, model, n_seq_max=n_seqs, kv_unified=unified, n_ctx=256 * n_seqs)
    n_native = 0
    for toks, seqs, pos in _script(n_seqs):
        b = batch(toks, seqs=seqs, pos=pos, all_out=True)
        assert ref.decode(b) == 0
        assert nat.decode(b) == 0
        assert_nmse(ref.get_logits(), nat.get_logits(), 1e-9, f"logits after {toks}")
        paths = _paths(nat)
        if len(toks) == 1:
            assert paths == ["native"], paths
            n_native += 1
        assert set(_paths(ref)) == {"torch"}
    assert n_native == 8


@pytest.mark.requires("decoder.embeddings", "decoder.native", "decoder.logits", "decoder.pooling")
@pytest.mark.invariant("DEC-060")
def test_native_step_embeddings_match(new_ctx: Callable[..., Any]) -> None:
    ref, nat = _pair(new_ctx, "gqa", embeddings=True, pooling=0)
    for toks, seqs, pos in _script(1):
        b = batch(toks, seqs=seqs, pos=pos, all_out=True)
        assert ref.decode(b) == 0 and nat.decode(b) == 0
        for i in range(len(toks)):
            assert_nmse(ref.get_embeddings_ith(i), nat.get_embeddings_ith(i), 1e-9, f"row {i}")
        if len(toks) == 1:
            assert _paths(nat) == ["native"]
    # the returned rows are the context's copies, not the step's reused buffer
    first = nat.get_embeddings_ith(0).copy()
    assert nat.decode(batch([9], pos=[14], all_out=True)) == 0
    assert not np.array_equal(first, nat.get_embeddings_ith(0))


def _kv(ctx: Any) -> list[torch.Tensor]:
    return [t.clone() for t in (*ctx.memory.k, *ctx.memory.v)]


@pytest.mark.requires("decoder.native", "decoder.logits")
@pytest.mark.invariant("DEC-061")
@pytest.mark.parametrize("unified", [True, False])
def test_native_step_writes_exactly_the_slot_cell(
    new_ctx: Callable[..., Any], unified: bool
) -> None:
    ref, nat = _pair(new_ctx, "gqa", n_seq_max=2, kv_unified=unified, n_ctx=512)
    for toks, seqs, pos in _script(2):
        before = _kv(nat)
        b = batch(toks, seqs=seqs, pos=pos, all_out=True)
        assert ref.decode(b) == 0 and nat.decode(b) == 0
        after = _kv(nat)
        for k, (want, got) in enumerate(zip(_kv(ref), after, strict=True)):
            assert_nmse(want, got, 1e-9, f"K/V tensor {k} after {toks}")
        if len(toks) != 1:
            continue
        (cells,) = [
            e.data["cells"] for e in nat.trace.of_call(nat.trace.calls - 1) if e.kind == "apply"
        ]
        (stream, cell) = cells[0]
        for b0, a0 in zip(before, after, strict=True):
            changed = (b0 != a0).flatten(2).any(-1).nonzero().tolist()  # [stream, cell] pairs
            assert changed == [[stream, cell]], changed


@pytest.mark.requires("decoder.native", "decoder.logits")
@pytest.mark.invariant("DEC-060", "DEC-061")
def test_native_step_into_the_last_cell_attends_the_whole_cache(
    new_ctx: Callable[..., Any],
) -> None:
    """A one-token step into the cache's last cell, after a prefill of every other cell,
    attends all ``kv_size`` cells: it runs natively, writes that cell, and matches torch."""
    ref, nat = _pair(new_ctx, "gqa", n_ctx=256, n_batch=256, n_ubatch=256)
    kv_size = nat.memory.k[0].shape[1]
    toks = prompt(kv_size, start=11)
    b = batch(toks[:-1], pos=list(range(kv_size - 1)), out=[0] * (kv_size - 2) + [1])
    assert ref.decode(b) == 0 and nat.decode(b) == 0
    last = batch(toks[-1:], pos=[kv_size - 1], all_out=True)
    assert ref.decode(last) == 0 and nat.decode(last) == 0
    assert _paths(nat) == ["native"]
    (cells,) = [
        e.data["cells"] for e in nat.trace.of_call(nat.trace.calls - 1) if e.kind == "apply"
    ]
    assert cells == [(0, kv_size - 1)], cells
    assert_nmse(ref.get_logits_ith(0), nat.get_logits_ith(0), 1e-9, "the last cell's logits")
    for k, (want, got) in enumerate(zip(_kv(ref), _kv(nat), strict=True)):
        assert_nmse(want, got, 1e-9, f"K/V tensor {k}")


@pytest.mark.requires(
    "decoder.native", "decoder.logits", "decoder.kv_dtype", "decoder.attention_backend"
)
@pytest.mark.invariant("DEC-062")
def test_decode_path_selection(new_ctx: Callable[..., Any]) -> None:
    from reference_impl.errors import DecoderError

    auto = new_ctx("gqa", n_batch=32, trace=True)
    assert auto.native_reason == "native"
    assert auto.decode(batch(prompt(5))) == 0
    assert _paths(auto) == ["torch"]  # five tokens: one 5-token ubatch
    assert auto.decode(batch([7], pos=[5])) == 0
    assert _paths(auto) == ["native"]

    torch_ctx = new_ctx("gqa", decode_path="torch", trace=True)
    assert torch_ctx.native_reason == "decode_path='torch'"
    assert torch_ctx.decode(batch([7])) == 0
    assert _paths(torch_ctx) == ["torch"]

    for params, words in (
        ({"kv_dtype": torch.float16}, "K/V dtype"),
        ({"attention_backend": "triton-1pass"}, "attention backend"),
    ):
        ctx = new_ctx("gqa", trace=True, **params)
        assert words in ctx.native_reason
        assert ctx.decode(batch([7])) == 0
        assert _paths(ctx) == ["torch"]
        with raises_code("DEC_NATIVE_UNAVAILABLE", field="decode_path", exc=DecoderError) as err:
            new_ctx("gqa", decode_path="native", **params)
        assert words in str(err.value)

    with raises_code("DEC_PARAM", field="decode_path", exc=DecoderError):
        new_ctx("gqa", decode_path="fast")


@pytest.fixture
def fresh_native(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> Iterator[None]:
    """An empty native build cache, and no library loaded in this process, for one test."""
    from reference_impl.native import build

    monkeypatch.setenv("DC_NATIVE_CACHE", str(tmp_path / "native"))
    build.load.cache_clear()
    yield
    build.load.cache_clear()


@pytest.mark.invariant("DEC-063")
@pytest.mark.parametrize(
    ("env", "words"),
    [({"CC": "dc-no-such-compiler"}, "no C compiler"), ({"DC_NATIVE": "0"}, "DC_NATIVE=0")],
)
def test_without_the_library_auto_falls_back_to_torch(
    fresh_native: None, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], words: str
) -> None:
    from reference_impl.decoder import Context
    from reference_impl.model import Model

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    model = Model.from_gguf(fixture_path("gqa"))  # a model that has not built its step yet
    ctx = Context(model, n_ctx=256, n_batch=32, trace=True)
    assert words in ctx.native_reason
    ref = Context(model, n_ctx=256, n_batch=32, decode_path="torch")
    for toks, seqs, pos in _script(1):
        b = batch(toks, seqs=seqs, pos=pos, all_out=True)
        assert ctx.decode(b) == 0 and ref.decode(b) == 0
        assert set(_paths(ctx)) == {"torch"}
        assert np.array_equal(ctx.get_logits(), ref.get_logits())


@pytest.mark.requires("decoder.native", "decoder.logits")
@pytest.mark.invariant("DEC-062")
def test_auto_builds_the_step_in_a_cold_cache(fresh_native: None) -> None:
    """An empty build cache whose library directory already exists (a concurrent or an
    interrupted build leaves it so): "auto" compiles the step there and runs it."""
    from reference_impl.decoder import Context
    from reference_impl.model import Model
    from reference_impl.native import build

    cc = build._compiler()
    if cc is None:
        pytest.skip("no C compiler")
    (build.cache_dir() / build._key(cc, ())).mkdir(parents=True)
    model = Model.from_gguf(fixture_path("gqa"))  # a model that has not built its step yet
    ctx = Context(model, n_ctx=256, n_batch=32, trace=True)
    assert ctx.native_reason == "native"
    ref = Context(model, n_ctx=256, n_batch=32, decode_path="torch")
    for toks, pos in ((prompt(5), list(range(5))), ([7], [5])):
        b = batch(toks, pos=pos, all_out=True)
        assert ctx.decode(b) == 0 and ref.decode(b) == 0
        assert_nmse(ref.get_logits(), ctx.get_logits(), 1e-9, f"logits after {toks}")
    assert _paths(ctx) == ["native"]


@pytest.mark.requires("decoder.native", "decoder.logits", "decoder.errors")
@pytest.mark.invariant("DEC-062")
@pytest.mark.parametrize(
    ("model", "words"),
    [("qwen2", "NEOX RoPE"), ("llama3_rope", "rope_freqs"), ("llama_bias", "biases")],
)
def test_a_layer_the_step_does_not_implement_stays_on_torch(
    new_ctx: Callable[..., Any], model: str, words: str
) -> None:
    """NEOX RoPE, RoPE frequency factors and biases are not in the C step: "auto" names the
    feature and decodes one-token ubatches on the torch forward, "native" refuses."""
    from reference_impl.errors import DecoderError

    auto = new_ctx(model, n_batch=32, trace=True)
    assert words in auto.native_reason, auto.native_reason
    ref = new_ctx(model, n_batch=32, decode_path="torch")
    for toks, pos in ((prompt(4), list(range(4))), ([7], [4]), ([9], [5])):
        b = batch(toks, pos=pos, all_out=True)
        assert auto.decode(b) == 0 and ref.decode(b) == 0
        assert _paths(auto) == ["torch"]
        assert np.array_equal(auto.get_logits(), ref.get_logits())
    with raises_code("DEC_NATIVE_UNAVAILABLE", field="decode_path", exc=DecoderError) as err:
        new_ctx(model, decode_path="native")
    assert words in str(err.value)


@pytest.mark.requires("decoder.native", "decoder.logits")
@pytest.mark.invariant("DEC-060")
def test_native_step_reads_an_embedding_row(new_ctx: Callable[..., Any]) -> None:
    """Batches of embedding rows (no token ids): the one-token steps run natively from the row
    and match the torch forward; the rows are not token embeddings of the vocabulary."""
    from reference_impl import Batch

    ref, nat = _pair(new_ctx, "gqa")
    rows = np.random.default_rng(11).normal(0.0, 0.5, size=(8, 64)).astype(np.float32)
    for lo, hi in ((0, 4), (4, 5), (5, 7), (7, 8)):  # n_ubatch 4
        b = Batch.from_lists(embd=rows[lo:hi], pos=list(range(lo, hi)), logits=[1] * (hi - lo))
        assert ref.decode(b) == 0
        assert nat.decode(b) == 0
        assert_nmse(ref.get_logits(), nat.get_logits(), 1e-9, f"logits of rows {lo}..{hi - 1}")
        assert _paths(nat) == (["native"] if hi - lo == 1 else ["torch"])


_FAKE_CC = """#!/bin/sh
# a compiler that fails: it may first write a partial output file (-o PATH)
out=""
while [ $# -gt 0 ]; do
    if [ "$1" = "-o" ]; then out="$2"; fi
    shift
done
if [ "$DC_FAKE_CC_WRITES" = 1 ] && [ -n "$out" ]; then echo partial > "$out"; fi
echo "fake-cc: refusing to compile" >&2
exit 1
"""


@pytest.mark.invariant("DEC-063")
@pytest.mark.parametrize("writes_output", [False, True])
def test_a_failing_compiler_falls_back_and_leaves_no_file(
    fresh_native: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Any, writes_output: bool
) -> None:
    from reference_impl.decoder import Context
    from reference_impl.model import Model
    from reference_impl.native import build

    cc = tmp_path / "fake-cc"
    cc.write_text(_FAKE_CC)
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    monkeypatch.setenv("DC_FAKE_CC_WRITES", "1" if writes_output else "0")
    model = Model.from_gguf(fixture_path("gqa"))  # a model that has not built its step yet
    ctx = Context(model, n_ctx=256, n_batch=32, trace=True)
    assert "fake-cc: refusing to compile" in ctx.native_reason, ctx.native_reason
    assert [p for p in build.cache_dir().rglob("*") if p.is_file()] == []
    _assert_falls_back_to_torch(ctx, model)


def _cache_stale_stub(tmp_path: Any) -> None:
    """Put a library of ABI ``ABI_VERSION + 6`` where the build cache keeps the current source's
    step (a stale build); skips without a C compiler."""
    import subprocess

    from reference_impl.native import build

    cc = build._compiler()
    if cc is None:
        pytest.skip("no C compiler")
    stub = tmp_path / "stub.c"
    stub.write_text(f"int dc_abi_version(void) {{ return {build.ABI_VERSION + 6}; }}\n")
    lib = build.cache_dir() / build._key(cc, ()) / "libdc_decode_step.so"
    lib.parent.mkdir(parents=True)
    subprocess.run([cc, "-shared", "-fPIC", str(stub), "-o", str(lib)], check=True)


@pytest.mark.invariant("DEC-063")
def test_a_cached_library_of_another_abi_is_not_used(fresh_native: None, tmp_path: Any) -> None:
    """A library in the build cache whose ABI version is not the reference's (a stale build):
    "auto" does not call it and falls back, naming both versions."""
    from reference_impl.decoder import Context
    from reference_impl.model import Model
    from reference_impl.native import build

    _cache_stale_stub(tmp_path)
    model = Model.from_gguf(fixture_path("gqa"))  # a model that has not built its step yet
    ctx = Context(model, n_ctx=256, n_batch=32, trace=True)
    assert f"ABI {build.ABI_VERSION + 6} != {build.ABI_VERSION}" in ctx.native_reason
    _assert_falls_back_to_torch(ctx, model)


@pytest.mark.invariant("DEC-063")
def test_a_library_cached_from_another_source_is_not_used(
    fresh_native: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """The build cache is keyed by the source's content: after the C source changes, a library
    built from the old one (here a stale stub of another ABI) is not loaded; the new source is
    compiled and runs."""
    from reference_impl.decoder import Context
    from reference_impl.model import Model
    from reference_impl.native import build

    _cache_stale_stub(tmp_path)
    edited = tmp_path / "decode_step.c"  # same flags, compiler and machine; another source
    edited.write_text(build.SOURCE.read_text() + "\n/* edited */\n")
    monkeypatch.setattr(build, "SOURCE", edited)
    model = Model.from_gguf(fixture_path("gqa"))  # a model that has not built its step yet
    ctx = Context(model, n_ctx=256, n_batch=32, trace=True)
    assert ctx.native_reason == "native", ctx.native_reason
    ref = Context(model, n_ctx=256, n_batch=32, decode_path="torch")
    for toks, pos in ((prompt(4), list(range(4))), ([7], [4])):
        b = batch(toks, pos=pos, all_out=True)
        assert ctx.decode(b) == 0 and ref.decode(b) == 0
        assert_nmse(ref.get_logits(), ctx.get_logits(), 1e-9, f"logits after {toks}")
    assert _paths(ctx) == ["native"]
