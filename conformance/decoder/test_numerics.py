"""Numerical agreement of cached decoding with full recomputation (DEC-055, DEC-056), of the
Triton attention backend (DEC-058) and of a float16 K/V cache (DEC-064) with the torch path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from conformance.assertions import assert_nmse
from conformance.decoder.helpers import batch, prompt

pytestmark = pytest.mark.requires("decoder.logits")


@pytest.mark.invariant("DEC-055")
@pytest.mark.parametrize("model", ["mha", "gqa", "tied", "q8"])
def test_prefill_then_decode_equals_full_recomputation(
    new_ctx: Callable[..., Any], model: str
) -> None:
    toks = prompt(24)
    full = new_ctx(model, n_batch=32)
    assert full.decode(batch(toks, all_out=True)) == 0
    ref = full.get_logits()
    ctx = new_ctx(model, n_batch=32)
    assert ctx.decode(batch(toks[:16])) == 0
    assert_nmse(ref[15], ctx.get_logits_ith(-1), 1e-9, "prefill row 15")
    for j in range(16, 24):
        assert ctx.decode(batch([toks[j]])) == 0
        assert_nmse(ref[j], ctx.get_logits_ith(0), 1e-9, f"step row {j}")


@pytest.mark.invariant("DEC-056")
@pytest.mark.parametrize(("n_ubatch", "unified"), [(1, True), (3, True), (7, False), (32, False)])
def test_logits_do_not_depend_on_the_split(
    new_ctx: Callable[..., Any], n_ubatch: int, unified: bool
) -> None:
    n = 18
    toks = prompt(n)
    seqs = [[i % 3] for i in range(n)]
    pos = [i // 3 for i in range(n)]
    b = batch(toks, seqs=seqs, pos=pos, all_out=True)
    one = new_ctx(n_ctx=256, n_batch=32, n_ubatch=32, n_seq_max=3, kv_unified=True)
    assert one.decode(b) == 0
    ctx = new_ctx(n_ctx=768, n_batch=32, n_ubatch=n_ubatch, n_seq_max=3, kv_unified=unified)
    assert ctx.decode(b) == 0
    assert ctx.get_logits().shape == one.get_logits().shape
    for i in range(n):
        assert_nmse(one.get_logits_ith(i), ctx.get_logits_ith(i), 1e-9, f"row {i}")
    assert not np.array_equal(one.get_logits_ith(0), one.get_logits_ith(3))  # rows differ


@pytest.mark.invariant("DEC-058")
@pytest.mark.requires("decoder.introspection", "decoder.attention_backend")
@pytest.mark.parametrize("backend", ["triton-1pass", "triton-2pass"])
def test_triton_attention_backend_matches_the_torch_path(
    new_ctx: Callable[..., Any], backend: str
) -> None:
    toks = prompt(20)
    rows = {}
    for name in ("torch", backend):
        ctx = new_ctx("mha", n_batch=32, n_ubatch=8, attention_backend=name)
        assert ctx.decode(batch(toks[:16], out=[i % 5 == 0 for i in range(16)])) == 0
        out = [ctx.get_logits()]
        for t in toks[16:]:
            assert ctx.decode(batch([t])) == 0
            out.append(ctx.get_logits())
        rows[name] = np.concatenate(out)
        if name != "torch":
            paths = {r.path for r in ctx.kernel_trace}
            assert paths == {"triton-" + backend.split("-")[1]}, paths  # the fused kernel ran
            assert len(ctx.kernel_trace) == 2 * (2 + 4)  # 2 layers x (2 prefill ubatches + 4 steps)
    assert_nmse(rows["torch"], rows[backend], 1e-10, f"{backend} vs torch")


def _kv_dtype_rows(new_ctx: Callable[..., Any], dtype: Any, **params: Any) -> np.ndarray:
    toks = prompt(20)
    ctx = new_ctx("gqa", n_batch=32, n_ubatch=8, kv_dtype=dtype, **params)
    assert ctx.decode(batch(toks[:14], all_out=True)) == 0
    out = [ctx.get_logits()]
    for j, t in enumerate(toks[14:]):
        assert ctx.decode(batch([t], pos=[14 + j])) == 0
        out.append(ctx.get_logits())
    return np.concatenate(out)


@pytest.mark.requires("decoder.kv_dtype")
@pytest.mark.invariant("DEC-064")
def test_float16_kv_cache_decodes_like_float32(new_ctx: Callable[..., Any]) -> None:
    import torch

    f32 = _kv_dtype_rows(new_ctx, torch.float32)
    f16 = _kv_dtype_rows(new_ctx, torch.float16)
    assert_nmse(f32, f16, 1e-6, "float16 vs float32 K/V")
    assert not np.array_equal(f32, f16)  # the cache did round


@pytest.mark.requires("decoder.kv_dtype", "decoder.native")
@pytest.mark.invariant("DEC-064")
@pytest.mark.parametrize("decode_path", ["torch", "auto"])
def test_float16_kv_cache_on_each_decode_path(
    new_ctx: Callable[..., Any], decode_path: str
) -> None:
    import torch

    f32 = _kv_dtype_rows(new_ctx, torch.float32, decode_path=decode_path)
    f16 = _kv_dtype_rows(new_ctx, torch.float16, decode_path=decode_path)
    assert_nmse(f32, f16, 1e-6, f"float16 vs float32 K/V ({decode_path})")
    assert not np.array_equal(f32, f16)
