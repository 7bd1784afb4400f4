"""Properties of decoupled decode: null token once, partition invariance, scales, dtypes, and
refused inputs.

spec/kernels.md KRN-013, KRN-014, KRN-017..KRN-019, KRN-026, KRN-027 (the decoupled attention
they compute, DBA-001/DBA-002, is checked in conformance/decoupled).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conformance.assertions import raises_code
from conformance.kernels import _cases, _oracle, _tolerance
from conformance.kernels._cases import REQUEST, decode_path, fused_paths
from conformance.strategies import kernels as ks
from kernels.decoupled_cache import NullKV
from reference_impl.errors import EngineError

pytestmark = pytest.mark.requires("decoupled.cache", "kernels.decoupled_decode")


def _dominant_null(inp: _cases.DecoupledInputs, logit: float) -> NullKV:
    """A null token whose logit is exactly ``logit`` for every (b, h) and whose value is 5."""
    q = inp.q_sem
    k_sem = q * (logit / inp.sem_scale) / (q * q).sum(dim=-1, keepdim=True)
    b, h, _ = q.shape
    k_geo = torch.zeros(b, h, inp.q_geo.shape[-1], device=q.device)
    v = torch.full((b, h, inp.cache.dims.v_head_dim), 5.0, device=q.device)
    return NullKV(k_sem, k_geo, v)


def _with_null(inp: _cases.DecoupledInputs, null: NullKV | None) -> np.ndarray:
    """The oracle's output for ``inp`` with another null token (or none)."""
    arrays = None
    if null is not None:
        nx = null.expanded(inp.q_sem.shape[0])
        arrays = (
            nx.k_sem.double().cpu().numpy(),
            nx.k_geo.double().cpu().numpy(),
            nx.v.double().cpu().numpy(),
        )
    oin = dataclasses.replace(inp.oracle_inputs, null=arrays)
    return _oracle.decoupled(
        inp.q_sem.double().cpu().numpy(),
        inp.q_geo.double().cpu().numpy(),
        oin,
        inp.sem_scale,
        inp.geo_scale,
    )


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("triton-1pass", marks=pytest.mark.invariant("KRN-013")),
        pytest.param("triton-2pass", marks=pytest.mark.invariant("KRN-014")),
    ],
)
@pytest.mark.parametrize("length,resid", [(0, 0), (0, 16), (12, 16), (200, 0), (230, 30)])
def test_a_heavy_null_token_counts_once(target: Any, path: str, length: int, resid: int) -> None:
    _cases.require_path(target, path, fused_paths(target))
    inp = _cases.build_decoupled(_cases.DecoupledCase(length=length, resid=resid, seed=11), target)
    null = _dominant_null(inp, logit=4.0)  # weight e^4 against O(1) logits: doubling it shows
    out = decode_path(target, inp, path, 32, null=null)  # 200 tokens: 7 launches / partitions
    _tolerance.assert_within(out, _with_null(inp, null), f"{path} L={length} resid={resid}")


@pytest.mark.invariant("KRN-014", "KRN-013")
@pytest.mark.parametrize("null_mode", ["contiguous", "broadcast", "strided"])
def test_empty_cache_with_null_outputs_v_null(target: Any, null_mode: str) -> None:
    inp = _cases.build_decoupled(_cases.DecoupledCase(length=0, null=null_mode, seed=5), target)
    assert inp.null is not None
    want = inp.null.expanded(2).v.float()
    for path in fused_paths(target):
        out = decode_path(target, inp, path)
        assert torch.equal(out, want), f"{path}: empty cache with null must output v_null exactly"


@pytest.mark.invariant("KRN-027")
# Triton's interpreter multiplies the zero weight by inf in numpy before the guard drops it
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("null_kind", ["none", "logit -inf"])
def test_empty_cache_with_nothing_to_attend_outputs_zeros(target: Any, null_kind: str) -> None:
    inp = _cases.build_decoupled(_cases.DecoupledCase(length=0, null="contiguous", seed=7), target)
    null = None
    if null_kind == "logit -inf":
        assert inp.null is not None
        # k_sem_null is -inf against the sign of q_sem's first element, 0 elsewhere: the null
        # logit is exactly -inf (weight 0); its value holds inf and NaN, which 0 * v would leak
        k_sem = torch.zeros_like(inp.null.k_sem)
        k_sem[..., 0] = -math.inf * torch.sign(inp.q_sem[..., 0])
        v = inp.null.v.clone()
        v[0], v[1, 0, 3] = math.inf, math.nan
        null = NullKV(k_sem, torch.zeros_like(inp.null.k_geo), v)
    for path in [*fused_paths(target), "streaming"]:
        out = decode_path(target, inp, path, 32, null=null)
        assert torch.equal(out, torch.zeros_like(out)), f"{path}: {out.flatten()[:4]}"


@pytest.mark.invariant("KRN-017")
@ks.kernel_settings(4)
@given(
    length=st.integers(1, 260),
    resid=st.sampled_from([0, 9]),
    null=st.sampled_from(["none", "broadcast"]),
    seed=st.integers(0, 999),
)
def test_partition_count_does_not_change_the_result(
    target: Any, length: int, resid: int, null: str, seed: int
) -> None:
    inp = _cases.build_decoupled(
        _cases.DecoupledCase(length=length, resid=resid, null=null, seed=seed), target
    )
    outs = {}
    for path in fused_paths(target):
        for ps in (32, 96, 256):
            outs[(path, ps)] = decode_path(target, inp, path, ps)
    first = next(iter(outs.values())).double().cpu().numpy()
    for key, out in outs.items():
        _tolerance.assert_within(out, inp.expected, f"{key} vs oracle")
        _tolerance.assert_within(out, first, f"{key} vs {next(iter(outs))}")


@pytest.mark.invariant("KRN-018")
@pytest.mark.parametrize("length,resid", [(1, 0), (70, 0), (40, 24)])
def test_a_hopeless_null_token_changes_nothing(target: Any, length: int, resid: int) -> None:
    inp = _cases.build_decoupled(_cases.DecoupledCase(length=length, resid=resid, seed=21), target)
    null = _dominant_null(inp, logit=-1000.0)
    o = inp.oracle_inputs
    real = np.einsum("bhd,bhnd->bhn", inp.q_sem.double().cpu().numpy(), o.k_sem) * inp.sem_scale
    real += np.einsum("bhd,bhnd->bhn", inp.q_geo.double().cpu().numpy(), o.k_geo) * inp.geo_scale
    assert real.min() > -1000.0 + 200.0, "the null logit must be far below every real logit"
    no_null = _with_null(inp, None)
    for path in [*fused_paths(target), "streaming"]:
        with_null = decode_path(target, inp, path, 32, null=null)
        without = decode_path(target, inp, path, 32, null=None)
        _tolerance.assert_within(
            with_null, without.double().cpu().numpy(), f"{path}: null vs no null"
        )
        _tolerance.assert_within(with_null, no_null, f"{path}: vs oracle without null")


@pytest.mark.invariant("KRN-019")
@pytest.mark.parametrize("null", ["none", "contiguous"])
def test_fp16_queries(target: Any, null: str) -> None:
    inp = _cases.build_decoupled(
        _cases.DecoupledCase(length=77, resid=8, null=null, seed=8), target
    )
    q_sem, q_geo = inp.q_sem.half(), inp.q_geo.half()
    want = _oracle.decoupled(
        q_sem.double().cpu().numpy(),
        q_geo.double().cpu().numpy(),
        inp.oracle_inputs,
        inp.sem_scale,
        inp.geo_scale,
    )
    for path in [*fused_paths(target), "streaming"]:
        out, record = target.decoupled_decode(q_sem, q_geo, inp.cache, inp.null, REQUEST[path], 32)
        assert record.path == path
        assert out.dtype == torch.float16
        _tolerance.assert_within(out, want, path)


@pytest.mark.invariant("KRN-006")
def test_decoupled_partition_sizes_are_checked(target: Any) -> None:
    """A partition size that is not a positive multiple of block_n (32) is refused on every
    path; leaving it out takes the default, which is valid."""
    inp = _cases.build_decoupled(_cases.DecoupledCase(length=20, resid=4), target)
    for path in [*fused_paths(target), "streaming"]:
        for ps in (40, 0, 16):
            with raises_code("KRN_BAD_PARTITION", exc=EngineError, what=f"{path} ps={ps}"):
                target.decoupled_decode(inp.q_sem, inp.q_geo, inp.cache, None, REQUEST[path], ps)
        out, record = target.decoupled_decode(inp.q_sem, inp.q_geo, inp.cache, None, REQUEST[path])
        assert record.path == path, record.reason
        _tolerance.assert_within(out, inp.expected, f"{path} default partition size")


def _bad_inputs(inp: _cases.DecoupledInputs) -> list[tuple[str, str, dict[str, Any]]]:
    """(code, field, replaced inputs) for B=2, H=2, d_sem 16, d_geo 32, d_v 64."""
    q_sem, q_geo = inp.q_sem, inp.q_geo
    dev = q_sem.device
    null = inp.null
    assert null is not None

    def z(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.zeros(*shape, dtype=dtype, device=dev)

    return [
        # dtypes first: a float64 query is readable by every path, so only the check refuses it
        ("KRN_BAD_DTYPE", "q_sem", {"q_sem": q_sem.double()}),
        ("KRN_BAD_DTYPE", "q_geo", {"q_geo": q_geo.to(torch.int32)}),
        ("KRN_BAD_SHAPE", "q_sem", {"q_sem": z(2, 2, 8)}),  # head dim
        ("KRN_BAD_SHAPE", "q_sem", {"q_sem": z(1, 2, 16)}),  # batch
        ("KRN_BAD_SHAPE", "q_geo", {"q_geo": z(2, 3, 32)}),  # heads
        ("KRN_BAD_SHAPE", "q_geo", {"q_geo": z(2, 64)}),  # rank
        ("KRN_BAD_SHAPE", "k_sem_null", {"null": NullKV(z(2, 8), null.k_geo, null.v)}),
        ("KRN_BAD_SHAPE", "k_geo_null", {"null": NullKV(null.k_sem, z(3, 2, 32), null.v)}),
        ("KRN_BAD_SHAPE", "v_null", {"null": NullKV(null.k_sem, null.k_geo, z(2, 2, 2, 64))}),
        # "meta" is a device no cache lives on: the streaming fallback could not read it either
        ("KRN_BAD_DEVICE", "q_geo", {"q_geo": q_geo.to("meta")}),
        (
            "KRN_BAD_DEVICE",
            "k_sem_null",
            {"null": NullKV(null.k_sem.to("meta"), null.k_geo, null.v)},
        ),
    ]


@pytest.mark.invariant("KRN-026")
def test_invalid_decoupled_inputs_raise_and_change_nothing(target: Any) -> None:
    inp = _cases.build_decoupled(_cases.DecoupledCase(length=45, resid=8, null="broadcast"), target)
    before = _cases.oracle_inputs(inp.cache, inp.null)
    lengths = (inp.cache.length, inp.cache.prefix_len, inp.cache.tail_len)
    for path in ["streaming", *fused_paths(target)]:
        for code, field, repl in _bad_inputs(inp):
            args = {"q_sem": inp.q_sem, "q_geo": inp.q_geo, "null": inp.null, **repl}
            with raises_code(code, field=field, exc=EngineError, what=f"{path}: bad {field}"):
                target.decoupled_decode(
                    args["q_sem"], args["q_geo"], inp.cache, args["null"], REQUEST[path], 32
                )
    after = _cases.oracle_inputs(inp.cache, inp.null)
    assert (inp.cache.length, inp.cache.prefix_len, inp.cache.tail_len) == lengths
    for name in ("k_sem", "k_geo", "v"):
        assert np.array_equal(getattr(before, name), getattr(after, name)), f"{name} changed"
    for path in ["streaming", *fused_paths(target)]:  # the cache still serves valid calls
        out = decode_path(target, inp, path)
        _tolerance.assert_within(out, inp.expected, f"{path} after refused calls")
