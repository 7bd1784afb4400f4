"""The decoupled decode parity matrix, run for real (spec/kernels.md KRN-010..KRN-016).

Seed 001's matrix: HAS_NULL on/off × quantized prefix length 0 / small / medium (crossing tile,
chunk and partition boundaries) × B > 1 × H > 1 × contiguous and non-contiguous null tensors ×
1-pass and 2-pass × several partition sizes × with and without a residual tail. Each item asserts
from the dispatch record that the requested kernel ran, then compares with the float64 oracle
and with the streaming reference (NMSE and max-abs, spec/kernels.md *Tolerances*).
The original project's matrix never reached its kernels (decoupled.md §4.1); this one cannot pass
on a fallback.

Head dims 16 / 32 / 64 with 2 heads make the v head span two 32-element scale blocks, so a scale
taken per head instead of per block shows. Under the ``thorough`` profile or ``DC_KERNELS_SCALE=
gpu`` a hypothesis grid adds random shapes (B, H, head dims, lengths, residuals, partitions).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conformance.kernels import _cases, _tolerance
from conformance.strategies import kernels as ks

pytestmark = pytest.mark.requires("decoupled.cache", "kernels.decoupled_decode")

NULL_INVARIANT = {"triton-1pass": "KRN-013", "triton-2pass": "KRN-014"}
PATH_INVARIANT = {"triton-1pass": "KRN-010", "triton-2pass": "KRN-011"}

# (length, residual): quantized prefix 0 / 5 (inside one tile) / 77 (three 32-token tiles, two or
# three chunks/partitions), without a tail and then with a 24-token exact tail.
LENGTHS = [(0, 0), (5, 0), (77, 0), (20, 24), (29, 24), (101, 24)]
PARTITIONS = (32, 64)


def _check(target: Any, case: _cases.DecoupledCase, path: str, partition_size: int) -> None:
    if path != "streaming":
        _cases.require_path(target, path, target.decoupled_decode_paths())
    inp = _cases.build_decoupled(case, target)
    out = _cases.decode_path(target, inp, path, partition_size)
    what = f"{path} ps={partition_size} {case.id()}"
    _tolerance.assert_within(out, inp.expected, what, n_keys=case.length)
    if path != "streaming":  # and against the target's own streaming reference
        ref = _cases.decode_path(target, inp, "streaming", partition_size)
        _tolerance.assert_within(out, ref, f"{what} vs streaming", case.length)


def _matrix(with_null: bool) -> list[Any]:
    params = []
    for path in ("triton-1pass", "triton-2pass"):
        for length, resid in LENGTHS:
            nulls = ("contiguous", "broadcast", "strided") if with_null else ("none",)
            for null in nulls:
                for ps in PARTITIONS:
                    if with_null and null != "contiguous" and ps != PARTITIONS[0]:
                        continue  # every null layout at one partition size; sizes vary on one
                    ids = [PATH_INVARIANT[path]]
                    if with_null:
                        ids += [NULL_INVARIANT[path], "KRN-015"]
                    if resid:
                        ids.append("KRN-016")
                    case = _cases.DecoupledCase(
                        length=length, resid=resid, null=null, seed=length + ps
                    )
                    params.append(
                        pytest.param(
                            case,
                            path,
                            ps,
                            marks=pytest.mark.invariant(*ids),
                            id=f"{path}-ps{ps}-{case.id()}",
                        )
                    )
    return params


@pytest.mark.parametrize("case,path,partition_size", _matrix(with_null=False))
def test_fused_without_null(
    target: Any, case: _cases.DecoupledCase, path: str, partition_size: int
) -> None:
    _check(target, case, path, partition_size)


@pytest.mark.parametrize("case,path,partition_size", _matrix(with_null=True))
def test_fused_with_null(
    target: Any, case: _cases.DecoupledCase, path: str, partition_size: int
) -> None:
    _check(target, case, path, partition_size)


@pytest.mark.invariant("KRN-012")
@pytest.mark.parametrize("null", ["none", "strided"])
@pytest.mark.parametrize("length,resid", LENGTHS)
def test_streaming_reference(target: Any, length: int, resid: int, null: str) -> None:
    case = _cases.DecoupledCase(length=length, resid=resid, null=null, seed=3 * length + 1)
    _check(target, case, "streaming", 32)


def _pow2(lo: int, hi: int) -> st.SearchStrategy[int]:
    return st.sampled_from([1 << i for i in range(lo, hi + 1)])


@st.composite
def random_cases(draw: st.DrawFn) -> tuple[_cases.DecoupledCase, str, int]:
    gpu = ks.grid_scale() == "gpu"
    case = _cases.DecoupledCase(
        batch=draw(st.integers(1, 8 if gpu else 3)),
        n_head=draw(st.integers(1, 16 if gpu else 4)),
        sem_head_dim=draw(_pow2(1, 6)),
        geo_head_dim=draw(_pow2(1, 7 if gpu else 6)),
        v_head_dim=draw(_pow2(1, 7 if gpu else 6)),
        length=draw(st.integers(0, 6000 if gpu else 300)),
        resid=draw(st.sampled_from([0, 1, 7, 24, 64, 128])),
        null=draw(st.sampled_from(_cases.NULL_MODES)),
        seed=draw(st.integers(0, 2**16)),
    )
    path = draw(st.sampled_from(["triton-1pass", "triton-2pass"]))
    ps = draw(st.sampled_from([32, 64, 96, 256, 1024] if gpu else [32, 64, 96, 256]))
    return case, path, ps


@pytest.mark.invariant("KRN-010", "KRN-011", "KRN-013", "KRN-014", "KRN-015", "KRN-016")
@ks.kernel_settings(3)
@given(drawn=random_cases())
def test_random_shapes(target: Any, drawn: tuple[_cases.DecoupledCase, str, int]) -> None:
    case, path, ps = drawn
    _check(target, case, path, ps)
