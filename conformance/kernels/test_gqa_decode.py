"""GQA decode attention over views of the reference KV cache (spec/kernels.md KRN-001..KRN-006).

Each test runs every path the target offers (the torch reference and the fused Triton paths),
asserts from the dispatch record that the requested path really ran, and compares with the
float64 oracle under the tolerance of the output dtype.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from conformance.assertions import assert_close, raises_code
from conformance.kernels import _cases, _tolerance
from conformance.strategies import kernels as ks
from reference_impl.errors import EngineError

pytestmark = pytest.mark.requires("kernels.gqa_decode")

REQUEST = {"torch": "torch", "triton-1pass": "1pass", "triton-2pass": "2pass"}


def _paths(target: Any) -> list[str]:
    return ["torch", *target.gqa_decode_paths()]


def _run(
    target: Any,
    inp: _cases.GqaInputs,
    path: str,
    partition_size: int = 32,
    block_n: int | None = None,
) -> torch.Tensor:
    kw = {} if block_n is None else {"block_n": block_n}  # passed only by the tests of block_n
    out, record = target.gqa_decode(
        inp.q, inp.k, inp.v, inp.mask, inp.scale, REQUEST[path], partition_size, **kw
    )
    assert record.path == path, f"asked for {path}, ran {record.path} ({record.reason})"
    return out


def _cases_for_scale() -> list[_cases.GqaCase]:
    base = [
        _cases.GqaCase(n_tokens=1, n_head=4, n_head_kv=2, head_dim=16, n_kv=1),
        _cases.GqaCase(n_tokens=3, n_head=6, n_head_kv=2, head_dim=40, n_kv=77, kv_size=96),
        _cases.GqaCase(n_tokens=2, n_head=8, n_head_kv=1, head_dim=64, n_kv=33, stream=0),
        _cases.GqaCase(
            n_tokens=2, n_head=4, n_head_kv=4, head_dim=32, n_kv=70, kv_size=80, dtype="float16"
        ),
    ]
    if ks.grid_scale() == "ci":
        return base
    big = 4096 if ks.grid_scale() == "gpu" else 300
    return (
        base
        + [
            _cases.GqaCase(
                n_tokens=4,
                n_head=32,
                n_head_kv=8,
                head_dim=128,
                n_kv=big,
                kv_size=big + 16,
                seed=s,
                dtype=dt,
            )
            for s in range(2)
            for dt in ("float32", "float16")
        ]
        + [
            _cases.GqaCase(
                n_tokens=5,
                n_head=12,
                n_head_kv=4,
                head_dim=80,
                n_kv=513,
                kv_size=600,
                fully_masked_row=True,
            ),
        ]
    )


@pytest.mark.invariant("KRN-001")
@pytest.mark.parametrize("case", _cases_for_scale(), ids=lambda c: c.id())
def test_every_path_matches_the_oracle(target: Any, case: _cases.GqaCase) -> None:
    inp = _cases.build_gqa(case)
    for path in _paths(target):
        out = _run(target, inp, path)
        _tolerance.assert_within(out, inp.expected, f"{path} {case.id()}", n_keys=case.n_kv)


@pytest.mark.invariant("KRN-002")
def test_consecutive_query_heads_share_a_kv_head(target: Any) -> None:
    # KV head j holds the constant value j+1 everywhere: every query head h must read
    # exactly h // group + 1, whatever the logits.
    n_kv, n_head_kv, n_head, d = 20, 3, 6, 16
    g = torch.Generator().manual_seed(3)
    k = torch.randn(n_kv, n_head_kv, d, generator=g)
    v = (
        torch.arange(1, n_head_kv + 1, dtype=torch.float32)
        .reshape(1, n_head_kv, 1)
        .expand(n_kv, n_head_kv, d)
    )
    q = torch.randn(2, n_head, d, generator=g)
    mask = torch.zeros(2, n_kv)
    want = (torch.arange(n_head) // (n_head // n_head_kv) + 1).float()
    k, v, q, mask = (x.contiguous().to(_cases.DEVICE) for x in (k, v, q, mask))
    for path in _paths(target):
        out, record = target.gqa_decode(q, k, v, mask, 0.25, REQUEST[path], 32)
        assert record.path == path
        what = f"{path}: KV value read by each query head"
        assert_close(want.expand(2, n_head), out[:, :, 0], atol=1e-5, rtol=1e-5, what=what)


@pytest.mark.invariant("KRN-003")
def test_fully_masked_rows_give_zeros(target: Any) -> None:
    inp = _cases.build_gqa(_cases.GqaCase(n_tokens=3, n_kv=45, fully_masked_row=True))
    for path in _paths(target):
        out = _run(target, inp, path)
        assert torch.equal(out[-1], torch.zeros_like(out[-1])), f"{path}: {out[-1].flatten()[:4]}"
        _tolerance.assert_within(out, inp.expected, path)


@pytest.mark.invariant("KRN-003")
# Triton's interpreter multiplies the zero weights by inf in numpy before the guard drops them
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_fully_masked_rows_give_zeros_whatever_the_values_hold(target: Any) -> None:
    # a masked cell's value must not enter the output: 0 * inf or 0 * nan would be NaN
    inp = _cases.build_gqa(_cases.GqaCase(n_tokens=2, n_kv=12))
    v = inp.v.clone()
    v[2], v[5, 0, 3] = math.inf, math.nan
    mask = torch.full_like(inp.mask, -math.inf)
    for path in _paths(target):
        out, record = target.gqa_decode(inp.q, inp.k, v, mask, inp.scale, REQUEST[path], 32)
        assert record.path == path, f"asked for {path}, ran {record.path} ({record.reason})"
        assert torch.equal(out, torch.zeros_like(out)), f"{path}: {out.flatten()[:4]}"


@pytest.mark.invariant("KRN-003")
def test_no_cells_gives_zeros(target: Any) -> None:
    inp = _cases.build_gqa(_cases.GqaCase(n_tokens=2, n_kv=0))
    for path in _paths(target):
        out = _run(target, inp, path)
        assert tuple(out.shape) == (2, 4, 16)
        assert torch.equal(out, torch.zeros_like(out)), path


@pytest.mark.invariant("KRN-004")
@pytest.mark.parametrize("n_kv", [31, 64, 97])
def test_two_pass_does_not_depend_on_the_partition_size(target: Any, n_kv: int) -> None:
    _cases.require_path(target, "triton-2pass", target.gqa_decode_paths())
    inp = _cases.build_gqa(
        _cases.GqaCase(n_tokens=2, n_head=4, n_head_kv=2, n_kv=n_kv, kv_size=128)
    )
    outs = {ps: _run(target, inp, "triton-2pass", ps) for ps in (32, 64, 256)}
    for ps, out in outs.items():
        _tolerance.assert_within(out, inp.expected, f"partition {ps}")
        _tolerance.assert_within(out, outs[32].double().cpu().numpy(), f"partition {ps} vs 32")


@pytest.mark.invariant("KRN-005")
@pytest.mark.parametrize(
    ("q_dtype", "kv_dtype", "dv"),
    [
        ("float32", "float32", 24),
        ("float16", "float16", 24),
        ("float32", "float16", 40),  # the query's dtype wins over the cache's
        ("float16", "float32", 8),
    ],
)
def test_output_dtype_and_shape(target: Any, q_dtype: str, kv_dtype: str, dv: int) -> None:
    """``[T, n_head, Dv]`` in the query's dtype, whatever the cache's dtype and v's head dim."""
    g = torch.Generator().manual_seed(5)
    kv = getattr(torch, kv_dtype)
    k = torch.randn(2, 16, 3, 24, generator=g).to(kv)[1, :10]  # views of a 2-stream cache
    v = torch.randn(2, 16, 3, dv, generator=g).to(kv)[1, :10]
    q = torch.randn(2, 6, 24, generator=g).to(getattr(torch, q_dtype))
    mask = torch.zeros(2, 10)
    mask[0, 7:] = -math.inf
    q, k, v, mask = (x.to(_cases.DEVICE) for x in (q, k, v, mask))
    from conformance.kernels import _oracle

    want = _oracle.gqa(
        q.double().cpu().numpy(),
        k.double().cpu().numpy(),
        v.double().cpu().numpy(),
        mask.cpu().numpy(),
        0.2,
    )
    for path in _paths(target):
        out, record = target.gqa_decode(q, k, v, mask, 0.2, REQUEST[path], 32)
        assert record.path == path
        assert out.dtype == q.dtype and tuple(out.shape) == (2, 6, dv), (
            f"{path}: {out.dtype} {tuple(out.shape)}"
        )
        _tolerance.assert_within(out, want, path)


def _bad(target: Any, code: str, **kw: Any) -> None:
    args = {
        "q": torch.zeros(1, 4, 16),
        "k": torch.zeros(5, 2, 16),
        "v": torch.zeros(5, 2, 16),
        "mask": torch.zeros(1, 5),
        "scale": 0.25,
        "path": "auto",
        "partition_size": 32,
    }
    args.update(kw)
    with raises_code(code, exc=EngineError):
        target.gqa_decode(**args)


@pytest.mark.invariant("KRN-006")
def test_invalid_inputs_raise(target: Any) -> None:
    _bad(target, "KRN_BAD_SHAPE", q=torch.zeros(1, 4, 8))  # head dim differs from k
    _bad(target, "KRN_BAD_SHAPE", q=torch.zeros(1, 3, 16))  # 3 heads over 2 KV heads
    _bad(target, "KRN_BAD_SHAPE", mask=torch.zeros(1, 4))
    _bad(target, "KRN_BAD_SHAPE", k=torch.zeros(5, 16))
    _bad(target, "KRN_BAD_SHAPE", v=torch.zeros(4, 2, 16))
    _bad(target, "KRN_BAD_PATH", path="3pass")
    _bad(target, "KRN_BAD_PARTITION", partition_size=40)
    _bad(target, "KRN_BAD_PARTITION", partition_size=0)
    for block_n in (0, -2, 3, 48, 2048):  # keys per tile: a power of two from 1 to 1024
        _bad(target, "KRN_BAD_PARTITION", block_n=block_n, partition_size=4096)


@pytest.mark.invariant("KRN-006", "KRN-001")
@pytest.mark.parametrize("block_n", [1, 2, 1024])
def test_every_power_of_two_block_n_up_to_1024_runs(target: Any, block_n: int) -> None:
    """block_n 1 (2^0) and 1024 are tile sizes like any other: accepted, same attention."""
    inp = _cases.build_gqa(_cases.GqaCase(n_kv=25))
    for path in _paths(target):
        out = _run(target, inp, path, max(block_n, 8), block_n=block_n)
        _tolerance.assert_within(out, inp.expected, path)


@pytest.mark.invariant("KRN-001")
# gain 30: scores of magnitude 100 and more, past where exp overflows fp32 (~88.7), so the
# softmax must subtract its row maximum on every path, the torch reference included
@pytest.mark.parametrize("gain", [0.7, 30.0])
def test_scale_is_applied(target: Any, gain: float) -> None:
    inp = _cases.build_gqa(_cases.GqaCase(n_kv=25))
    scale = gain / math.sqrt(inp.q.shape[-1])
    from conformance.kernels import _oracle

    want = _oracle.gqa(
        inp.q.double().cpu().numpy(),
        inp.k.double().cpu().numpy(),
        inp.v.double().cpu().numpy(),
        inp.mask.cpu().numpy(),
        scale,
    )
    for path in _paths(target):
        out, record = target.gqa_decode(inp.q, inp.k, inp.v, inp.mask, scale, REQUEST[path], 32)
        assert record.path == path
        _tolerance.assert_within(out, want, path)
