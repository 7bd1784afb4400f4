"""Dispatch: which path runs, fallback with a reason, the auto threshold (KRN-020..KRN-023)."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.kernels import _cases, _tolerance

DECOUPLED = ("decoupled.cache", "kernels.decoupled_decode")


@pytest.mark.requires(*DECOUPLED)
@pytest.mark.invariant("KRN-020")
@pytest.mark.parametrize("request_,path", [("1pass", "triton-1pass"), ("2pass", "triton-2pass")])
def test_a_requested_kernel_runs(target: Any, request_: str, path: str) -> None:
    inp = _cases.build_decoupled(_cases.DecoupledCase(length=50, resid=8, null="broadcast"), target)
    out, record = target.decoupled_decode(inp.q_sem, inp.q_geo, inp.cache, inp.null, request_, 32)
    assert (record.path, record.reason) == (path, "requested")
    _tolerance.assert_within(out, inp.expected, path)


@pytest.mark.requires("kernels.gqa_decode")
@pytest.mark.invariant("KRN-020")
@pytest.mark.parametrize("request_,path", [("1pass", "triton-1pass"), ("2pass", "triton-2pass")])
def test_a_requested_gqa_kernel_runs(target: Any, request_: str, path: str) -> None:
    inp = _cases.build_gqa(_cases.GqaCase(n_kv=20))
    out, record = target.gqa_decode(inp.q, inp.k, inp.v, inp.mask, inp.scale, request_, 32)
    assert (record.path, record.reason) == (path, "requested")
    _tolerance.assert_within(out, inp.expected, path)


INELIGIBLE = [
    pytest.param(
        "ksem=nf4@32,kgeo=q8_0@32,v=q4_0@32,resid=8", (16, 32, 64), "policy", id="nf4-ksem"
    ),
    pytest.param(
        "ksem=q4_0@16,kgeo=q8_0@32,v=q4_0@32,resid=8", (16, 32, 64), "policy", id="qblock16"
    ),
    pytest.param(
        "ksem=q4_0@32,kgeo=q4_0@32,v=q4_0@32,resid=0", (16, 32, 64), "policy", id="q4-kgeo"
    ),
    pytest.param("ksem=fp16,kgeo=fp16,v=fp16,resid=0", (16, 32, 64), "policy", id="fp16"),
    pytest.param(
        "ksem=q4_0@32,kgeo=q8_0@32,v=q4_0@32,resid=8", (16, 32, 12), "power of two", id="dv12"
    ),
    pytest.param(
        "ksem=q4_0@32,kgeo=q8_0@32,v=q4_0@32,resid=8", (6, 32, 32), "power of two", id="dsem6"
    ),
]


@pytest.mark.requires(*DECOUPLED)
@pytest.mark.invariant("KRN-021")
@pytest.mark.parametrize("policy,head_dims,rule", INELIGIBLE)
@pytest.mark.parametrize("request_", ["auto", "1pass", "2pass"])
def test_ineligible_configurations_fall_back_with_a_reason(
    target: Any, policy: str, head_dims: tuple[int, int, int], rule: str, request_: str
) -> None:
    ds, dg, dv = head_dims
    case = _cases.DecoupledCase(
        length=45, resid=8, null="contiguous", policy=policy,
        sem_head_dim=ds, geo_head_dim=dg, v_head_dim=dv,
    )  # fmt: skip
    inp = _cases.build_decoupled(case, target)
    out, record = target.decoupled_decode(inp.q_sem, inp.q_geo, inp.cache, inp.null, request_, 32)
    assert record.path == "streaming", f"{record.path}: {record.reason}"
    assert rule in record.reason, record.reason
    _tolerance.assert_within(out, inp.expected, f"fallback {policy}")


@pytest.mark.requires(*DECOUPLED)
@pytest.mark.invariant("KRN-022")
@pytest.mark.parametrize(
    "length,resid,path",
    [
        (49, 0, "triton-1pass"),
        (50, 0, "triton-2pass"),
        (60, 20, "triton-1pass"),
        (90, 20, "triton-2pass"),
    ],
)
def test_auto_picks_two_pass_from_the_threshold(
    target: Any, length: int, resid: int, path: str
) -> None:
    inp = _cases.build_decoupled(
        _cases.DecoupledCase(length=length, resid=resid, null="broadcast"), target
    )
    out, record = target.decoupled_decode(
        inp.q_sem, inp.q_geo, inp.cache, inp.null, "auto", 32, two_pass_min_tokens=50
    )
    assert record.path == path, f"prefix {length - min(length, resid)}: {record.reason}"
    _tolerance.assert_within(out, inp.expected, path)


@pytest.mark.requires(*DECOUPLED)
@pytest.mark.invariant("KRN-022")
@pytest.mark.parametrize("length,path", [(40, "triton-1pass"), (4096, "triton-2pass")])
def test_auto_default_threshold_is_4096(target: Any, length: int, path: str) -> None:
    case = _cases.DecoupledCase(
        batch=1, n_head=1, length=length, sem_head_dim=8, geo_head_dim=8, v_head_dim=8
    )
    inp = _cases.build_decoupled(case, target)
    out, record = target.decoupled_decode(inp.q_sem, inp.q_geo, inp.cache, None, "auto", 1024)
    assert record.path == path, record.reason
    _tolerance.assert_within(out, inp.expected, path, n_keys=length)


@pytest.mark.requires("kernels.gqa_decode")
@pytest.mark.invariant("KRN-022")
@pytest.mark.parametrize(
    "n_kv,path", [(39, "triton-1pass"), (40, "triton-2pass"), (70, "triton-2pass")]
)
def test_gqa_auto_threshold(target: Any, n_kv: int, path: str) -> None:
    inp = _cases.build_gqa(_cases.GqaCase(n_kv=n_kv, kv_size=80))
    out, record = target.gqa_decode(inp.q, inp.k, inp.v, inp.mask, inp.scale, "auto", 32, 40)
    assert record.path == path, record.reason
    _tolerance.assert_within(out, inp.expected, path)


@pytest.mark.requires(*DECOUPLED, "kernels.gqa_decode")
@pytest.mark.invariant("KRN-023")
def test_reference_paths_run_when_requested(target: Any) -> None:
    inp = _cases.build_decoupled(_cases.DecoupledCase(length=30, resid=4, null="strided"), target)
    out, record = target.decoupled_decode(
        inp.q_sem, inp.q_geo, inp.cache, inp.null, "streaming", 32
    )
    assert (record.path, record.reason) == ("streaming", "requested")
    _tolerance.assert_within(out, inp.expected, "streaming")
    g = _cases.build_gqa(_cases.GqaCase(n_kv=9))
    out, record = target.gqa_decode(g.q, g.k, g.v, g.mask, g.scale, "torch", 32)
    assert (record.path, record.reason) == ("torch", "requested")
    _tolerance.assert_within(out, g.expected, "torch")
