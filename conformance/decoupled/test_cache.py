"""The decoupled KV cache layout and its exact residual tail (spec/decoupled.md DBA-003, DBA-004, DBA-019)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from conformance.assertions import raises_code, unchanged
from conformance.kernels import _cases, _tolerance
from conformance.kv_quant import oracle as quant_oracle
from reference_impl.errors import EngineError

pytestmark = pytest.mark.requires("decoupled.cache")

POLICY = "ksem=q4_0@32,kgeo=q8_0@32,v=q4_0@32,resid={r}"
HEADS = (16, 32, 64)  # per-head dims of k_sem, k_geo, v with 2 heads


def _tokens(batch: int, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(batch, n, 2 * d, generator=g) * 3 for d in HEADS)  # type: ignore[return-value]


def _snapshot(cache: Any) -> list[torch.Tensor]:
    out = []
    for name in ("k_sem", "k_geo", "v"):
        ct = getattr(cache, name)
        out += [t.clone() for t in (ct.codes, ct.scales, ct.buf, ct.ring) if t is not None]
    return out


@pytest.mark.invariant("DBA-003")
def test_tokens_are_stored_token_major_in_their_formats(target: Any) -> None:
    cache = target.decoupled_cache(POLICY.format(r=0), 2, HEADS, 3, 10)
    xs = _tokens(3, 7, seed=1)
    cache.append(*xs)
    assert cache.length == 7
    for name, x, kind in zip(("k_sem", "k_geo", "v"), xs, ("q4_0", "q8_0", "q4_0")):
        ct = getattr(cache, name)
        codes, scales = quant_oracle.quantize(x.numpy(), kind, 32)
        assert tuple(ct.codes.shape) == (3, 10, codes.shape[-1]), name
        assert tuple(ct.scales.shape) == (3, 10, scales.shape[-1]), name
        np.testing.assert_array_equal(ct.codes[:, :7].cpu().numpy(), codes, err_msg=name)
        np.testing.assert_array_equal(ct.scales[:, :7].cpu().numpy(), scales, err_msg=name)


@pytest.mark.invariant("DBA-003")
def test_float_policies_store_values(target: Any) -> None:
    cache = target.decoupled_cache("ksem=fp32,kgeo=fp16,v=fp32,resid=64", 2, HEADS, 2, 6)
    xs = _tokens(2, 4, seed=2)
    cache.append(*xs)
    assert torch.equal(cache.k_sem.buf[:, :4].cpu(), xs[0])
    assert torch.equal(cache.k_geo.buf[:, :4].cpu(), xs[1].half())
    assert cache.prefix_len == 4 and cache.tail_len == 0  # nothing quantized: no residual


@pytest.mark.invariant("DBA-004")
@pytest.mark.parametrize("resid,max_len", [(8, 40), (64, 40), (1, 40), (0, 40)])
def test_the_tail_keeps_the_last_tokens_exactly(target: Any, resid: int, max_len: int) -> None:
    cache = target.decoupled_cache(POLICY.format(r=resid), 2, HEADS, 2, max_len)
    r = min(resid, max_len)
    for name, d in zip(("k_sem", "k_geo", "v"), HEADS):
        ring = getattr(cache, name).ring
        if r == 0:  # no residual: no ring at all, not an empty one
            assert ring is None, f"{name}: a ring without a residual"
        else:
            assert ring.dtype == torch.float16, name
            assert tuple(ring.shape) == (2, r, 2 * d), f"{name}: ring {list(ring.shape)}"
    chunks = [_tokens(2, n, seed=10 + n) for n in (5, 1, 13, 2)]
    for chunk in chunks:
        cache.append(*chunk)
    full = [torch.cat([c[i] for c in chunks], dim=1) for i in range(3)]
    length = full[0].shape[1]
    assert (cache.length, cache.prefix_len, cache.tail_len) == (
        length,
        max(0, length - r),
        min(length, r),
    )
    for name, x in zip(("k_sem", "k_geo", "v"), full):
        ring = getattr(cache, name).ring
        for t in range(cache.prefix_len, length):
            assert torch.equal(ring[:, t % r].cpu(), x[:, t].half()), f"{name} token {t}"


@pytest.mark.invariant("DBA-004")
def test_a_failed_append_changes_nothing(target: Any) -> None:
    cache = target.decoupled_cache(POLICY.format(r=4), 2, HEADS, 2, 12)
    cache.append(*_tokens(2, 10, seed=3))
    k_sem, k_geo, v = _tokens(2, 2, seed=4)
    bad_inputs = {
        "shape": (k_sem[:, :, :-1], k_geo, v),
        "T mismatch": (k_sem, k_geo[:, :1], v),
        "non-finite": (k_sem, k_geo, torch.where(v > 1, float("nan"), v)),
        "full": _tokens(2, 3, seed=5),
    }
    for what, args in bad_inputs.items():
        with unchanged(lambda: _snapshot(cache), f"{what}: the cache"), pytest.raises(EngineError):
            cache.append(*args)
        assert cache.length == 10, what


@pytest.mark.invariant("DBA-004")
def test_a_one_token_cache_holds_one_token(target: Any) -> None:
    """max_len 1: the residual is min(R, 1), one token fits and a second is refused."""
    cache = target.decoupled_cache(POLICY.format(r=8), 2, HEADS, 2, 1)
    assert cache.max_len == 1 and cache.residual_len == 1
    xs = _tokens(2, 1, seed=6)
    cache.append(*xs)
    assert (cache.length, cache.prefix_len, cache.tail_len) == (1, 0, 1)
    assert torch.equal(cache.v.ring[:, 0].cpu(), xs[2][:, 0].half())
    with unchanged(lambda: _snapshot(cache), "full: the cache"), pytest.raises(EngineError):
        cache.append(*_tokens(2, 1, seed=7))
    assert cache.length == 1


@pytest.mark.invariant("DBA-019")
@pytest.mark.parametrize(
    "batch,max_len,field",
    [(0, 4, "batch"), (2, 0, "max_len"), (-1, 0, "batch"), (1, -3, "max_len")],
)
def test_a_cache_that_holds_nothing_is_refused(
    target: Any, batch: int, max_len: int, field: str
) -> None:
    with raises_code("KRN_BAD_SHAPE", field=field):
        target.decoupled_cache(POLICY.format(r=4), 2, HEADS, batch, max_len)


@pytest.mark.invariant("DBA-004")
@pytest.mark.requires("kernels.decoupled_decode")
@pytest.mark.parametrize("null", ["none", "contiguous"])
def test_a_mixed_policy_reads_float_tails_from_their_buffers(target: Any, null: str) -> None:
    # float and quantized tensors with a residual: only the q8_0 k_sem keeps a ring; the fp16
    # k_geo and fp32 v keep their tail in their buffers, where decode must read it
    case = _cases.DecoupledCase(
        length=21, resid=8, null=null, policy="ksem=q8_0@32,kgeo=fp16,v=fp32,resid=8", seed=31
    )
    inp = _cases.build_decoupled(case, target)
    cache = inp.cache
    assert (cache.length, cache.prefix_len, cache.tail_len) == (21, 13, 8)
    rings = [getattr(cache, name).ring is not None for name in ("k_sem", "k_geo", "v")]
    assert rings == [True, False, False], f"rings kept by k_sem, k_geo, v: {rings}"
    out = _cases.decode_path(target, inp, "streaming")
    _tolerance.assert_within(out, inp.expected, f"mixed policy, null {null}", n_keys=21)


@pytest.mark.invariant("DBA-019")
def test_the_smallest_cache_is_valid(target: Any) -> None:
    cache = target.decoupled_cache(POLICY.format(r=4), 2, HEADS, 1, 1)
    assert (cache.batch, cache.max_len, cache.length) == (1, 1, 0)
    cache.append(*_tokens(1, 1, seed=8))
    assert cache.length == 1


@pytest.mark.invariant("DBA-021")
@pytest.mark.parametrize(
    "policy,head_dims,expected",
    [
        # k_sem 32 q4_0 (16 + 2), k_geo 64 q8_0 (64 + 4), v 128 q4_0 (64 + 8)
        (POLICY.format(r=0), HEADS, 18 + 68 + 72),
        # q8_0@16 (32 + 2·2), fp16 (2·64), fp32 (4·128); the ring of 4 tokens is extra
        ("ksem=q8_0@16,kgeo=fp16,v=fp32,resid=4", HEADS, 36 + 128 + 512),
        # widths 24, 40, 80 padded to whole blocks: 32 + 2, 64/2 + 2·2, 96/2 + 3·2
        ("ksem=q8_0@32,kgeo=q4_0@32,v=nf4@32,resid=2", (12, 20, 40), 34 + 36 + 54),
    ],
    ids=["fused", "mixed-float", "padded"],
)
def test_bytes_per_token_is_what_the_main_buffers_hold(
    target: Any, policy: str, head_dims: tuple[int, int, int], expected: int
) -> None:
    batch, max_len = 3, 5
    cache = target.decoupled_cache(policy, 2, head_dims, batch, max_len)
    held = 0
    for name in ("k_sem", "k_geo", "v"):
        ct = getattr(cache, name)
        held += sum(
            t.numel() * t.element_size() for t in (ct.codes, ct.scales, ct.buf) if t is not None
        )
    assert held == expected * batch * max_len, f"{policy}: the buffers hold {held} bytes"
    assert cache.bytes_per_token() == expected, policy
