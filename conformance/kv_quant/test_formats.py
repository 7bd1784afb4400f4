"""Per-token quantized formats q8_0 / q4_0 / nf4 (spec/kv_quant.md QNT-001..QNT-008).

Every implementation the target offers (``kv_quant_impls``: torch and Triton for the reference)
is compared bit for bit with the numpy oracle written from the spec.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conformance.assertions import raises_code
from conformance.kv_quant import oracle
from conformance.snapshots import array_record
from conformance.strategies import kernels as ks
from conformance.strategies import kv_quant as qs
from reference_impl.errors import EngineError

pytestmark = pytest.mark.requires("kv_quant.formats")


@pytest.fixture
def impls(target: Any) -> tuple[str, ...]:
    return tuple(target.kv_quant_impls())


def _quantize(
    target: Any, x: np.ndarray, kind: str, qblock: int, impl: str
) -> tuple[np.ndarray, np.ndarray]:
    codes, scales = target.kv_quantize(
        torch.from_numpy(np.ascontiguousarray(x)), kind, qblock, impl
    )
    return codes.cpu().numpy(), scales.cpu().numpy()


def _assert_codes_equal(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    bad = np.argwhere(got != want)
    assert bad.size == 0, (
        f"{what}: {len(bad)} codes differ, first at {bad[0].tolist()}: "
        f"{got[tuple(bad[0])]} != {want[tuple(bad[0])]}"
    )


@pytest.mark.invariant("QNT-001", "QNT-002", "QNT-003", "QNT-006")
@ks.kernel_settings(25)
@given(case=qs.quant_inputs())
def test_codes_and_scales_match_the_spec(target: Any, impls: tuple[str, ...], case: Any) -> None:
    x, kind, qblock = case
    want_codes, want_scales = oracle.quantize(x, kind, qblock)
    for impl in impls:
        codes, scales = _quantize(target, x, kind, qblock, impl)
        _assert_codes_equal(codes, want_codes, f"{impl} {kind}@{qblock} codes")
        assert scales.dtype == np.float16, f"{impl}: scales are {scales.dtype}, not fp16"
        np.testing.assert_array_equal(scales, want_scales, err_msg=f"{impl} {kind}@{qblock} scales")


# fp16 values, block amax 100: x/Δ rounded to fp16 lands on a tie k + 1/2 or across an NF4
# midpoint for some of them, so evaluating the rule in fp16 changes codes of every kind.
_FP16_ROW = [100.0, 7.140625, 35.71875, 50.0, 78.5625, 92.875, 3.978515625, 29.203125]
_FP16_ROW += [0.3935546875, 1.96875, 2.755859375, 3.54296875]


def _off_fp32_input(dtype: str, kind: str) -> np.ndarray:
    """A [2, dim] input of ``dtype`` whose codes (and, for fp64, scales) differ when the rule is
    evaluated in that dtype instead of on the values converted to fp32."""
    if dtype == "float16":
        row = np.array(_FP16_ROW, dtype=np.float16)
        return np.stack([np.concatenate([row, -row[1:]])] * 2)
    qmax = oracle.QMAX[kind]
    tiny = 2.0**-30  # under half an fp32 ulp of each value it is added to: converting drops it
    if kind == "nf4":  # Δ = 1 and x/Δ just above a midpoint: fp32 makes it a tie (lower level)
        ties = oracle.NF4_MID.astype(np.float64) + tiny
    else:  # Δ = 1 and x/Δ just below k + 1/2: fp32 makes it a tie, rounded away to k + 1
        ties = np.arange(0.0, qmax, max(1.0, qmax // 15)) + 0.5 - tiny
    row0 = np.concatenate([[qmax], ties, -ties])
    # amax/qmax just under the midpoint m of the fp16 scales 2^-7·(1 + 2^-10) (odd) and
    # 2^-7·(1 + 2^-9) (even): fp32 makes amax/qmax exactly m, a tie rounded to the even scale.
    amax = qmax * 2.0**-7 * (1.0 + 1.5 * 2.0**-10) - 2.0**-40
    row1 = np.zeros_like(row0)
    row1[:3] = [amax, -amax / 3.0, amax / 2.0]
    return np.stack([row0, row1])


@pytest.mark.invariant("QNT-001", "QNT-002", "QNT-003")
@pytest.mark.parametrize("kind", qs.KINDS)
@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_an_input_of_another_float_dtype_is_quantized_as_its_fp32_values(
    target: Any, impls: tuple[str, ...], kind: str, dtype: str
) -> None:
    x = _off_fp32_input(dtype, kind)
    want_codes, want_scales = oracle.quantize(x, kind, 32)  # converts x to fp32 first
    in_dtype = oracle.quantize(x, kind, 32, compute=x.dtype.type)
    assert not np.array_equal(in_dtype[0], want_codes), "the input must tell the two rules apart"
    if dtype == "float64":
        assert not np.array_equal(in_dtype[1], want_scales), "and, in fp64, their scales"
    for impl in impls:
        codes, scales = _quantize(target, x, kind, 32, impl)
        _assert_codes_equal(codes, want_codes, f"{impl} {kind} from {dtype} codes")
        assert scales.dtype == np.float16, f"{impl}: scales are {scales.dtype}, not fp16"
        np.testing.assert_array_equal(scales, want_scales, err_msg=f"{impl} {kind} from {dtype}")


@pytest.mark.invariant("QNT-002")
def test_q4_0_packs_the_even_element_in_the_high_nibble(
    target: Any, impls: tuple[str, ...]
) -> None:
    # amax 7 -> Δ = 1, codes = x + 8 = [15, 1, 8, 9]: bytes 0xF1 and 0x89.
    x = np.array([[7.0, -7.0, 0.0, 1.0]], dtype=np.float32)
    for impl in impls:
        codes, scales = _quantize(target, x, "q4_0", 4, impl)
        assert codes.tolist() == [[0xF1, 0x89]], f"{impl}: {[hex(b) for b in codes[0]]}"
        assert scales.tolist() == [[1.0]]


@pytest.mark.invariant("QNT-003")
def test_nf4_ties_go_to_the_lower_level(target: Any, impls: tuple[str, ...]) -> None:
    # amax 1 -> Δ = 1, so x/Δ is each fp32 midpoint itself: an exact tie between levels i and
    # i + 1 must give index i. The last element (1.0) is level 15.
    x = np.concatenate([oracle.NF4_MID, np.ones(1, np.float32)])[None, :]
    want = [*range(16)]  # midpoint i -> level i; 1.0 -> level 15
    for impl in impls:
        codes, scales = _quantize(target, x, "nf4", 16, impl)
        assert scales.tolist() == [[1.0]], f"{impl}: {scales}"
        got = np.stack([codes[0] >> 4, codes[0] & 0xF], axis=-1).reshape(-1).tolist()
        assert got == want, f"{impl}: nf4 indices {got} != {want}"


@pytest.mark.invariant("QNT-004")
@ks.kernel_settings(25)
@given(case=qs.quant_inputs())
def test_round_trip_error_is_at_most_half_a_step(
    target: Any, impls: tuple[str, ...], case: Any
) -> None:
    x, kind, qblock = case
    dim = x.shape[-1]
    for impl in impls:
        codes, scales = target.kv_quantize(torch.from_numpy(x), kind, qblock, impl)
        back = (
            target.kv_dequantize(codes, scales, kind, qblock, dim, impl)
            .cpu()
            .double()
            .cpu()
            .numpy()
        )
        assert back.shape == x.shape
        pad = scales.shape[-1] * qblock
        err = np.zeros((x.shape[0], pad))
        err[:, :dim] = np.abs(back - x.astype(np.float64))
        per_block = err.reshape(x.shape[0], -1, qblock).max(axis=-1)
        bound = oracle.half_step_bound(scales.cpu().numpy(), kind)
        slack = 2.0**-20 * np.abs(x).max(initial=0.0)
        worst = np.argmax(per_block - bound)
        assert (per_block <= bound + slack).all(), (
            f"{impl} {kind}@{qblock}: block error {per_block.flat[worst]:.6g} > "
            f"half step {bound.flat[worst]:.6g}"
        )


@pytest.mark.invariant("QNT-005")
@pytest.mark.parametrize("kind", ["q4_0", "nf4"])
def test_every_byte_unpacks_to_its_two_nibbles(
    target: Any, impls: tuple[str, ...], kind: str
) -> None:
    codes = (
        torch.arange(256, dtype=torch.int32).to(torch.uint8).reshape(16, 16)
    )  # 16 rows x 32 elements
    scales = torch.ones(16, 1, dtype=torch.float16)
    want = oracle.dequantize(codes.numpy(), scales.numpy(), kind, 32, 32)
    pairs = {tuple(row) for row in want.reshape(-1, 2).tolist()}
    assert len(pairs) == 256  # the oracle itself: distinct bytes give distinct pairs
    for impl in impls:
        got = target.kv_dequantize(codes, scales, kind, 32, 32, impl).cpu().double().cpu().numpy()
        np.testing.assert_array_equal(got, want, err_msg=f"{impl} {kind}")


@pytest.mark.invariant("QNT-005")
@ks.kernel_settings(20)
@given(
    kind=st.sampled_from(qs.KINDS),
    data=st.data(),
)
def test_codes_survive_dequantize_then_quantize(
    target: Any, impls: tuple[str, ...], kind: str, data: Any
) -> None:
    """Codes -> values (scale 1) -> codes is the identity on every reachable code sequence."""
    n = 32
    if kind == "q8_0":
        raw = data.draw(st.lists(st.integers(-127, 127), min_size=n, max_size=n))
        raw[0] = 127  # anchors amax so that Δ = 1
        codes = torch.tensor([raw], dtype=torch.int8)
    else:
        low = 1 if kind == "q4_0" else 0  # q4_0 never produces code 0 (|x/Δ| <= 7)
        raw = data.draw(st.lists(st.integers(low, 15), min_size=n, max_size=n))
        raw[0] = 15  # +7 (q4_0) or +1.0 (nf4): Δ = 1
        u = np.array(raw, dtype=np.uint8)
        codes = torch.from_numpy(((u[0::2] << 4) | u[1::2]).astype(np.uint8)).reshape(1, -1)
    scales = torch.ones(1, 1, dtype=torch.float16)
    for impl in impls:
        values = target.kv_dequantize(codes, scales, kind, 32, n, impl)
        again, s2 = target.kv_quantize(values, kind, 32, impl)
        assert torch.equal(again.cpu(), codes), f"{impl} {kind}: codes changed in a round trip"
        assert s2.tolist() == [[1.0]]


@pytest.mark.invariant("QNT-006")
@pytest.mark.parametrize("kind,pad_code", [("q8_0", 0), ("q4_0", 8), ("nf4", 7)])
def test_padding_is_quantized_as_zero(
    target: Any, impls: tuple[str, ...], kind: str, pad_code: int
) -> None:
    x = np.linspace(-3.0, 3.0, 33, dtype=np.float32)[None, :]
    for impl in impls:
        codes, scales = target.kv_quantize(torch.from_numpy(x), kind, 32, impl)
        assert scales.shape == (1, 2)
        vals = oracle.code_values(codes.cpu().numpy(), kind)
        padding = vals[0, 33:]
        zero_value = oracle.code_values(
            np.array([pad_code], dtype=np.int8)
            if kind == "q8_0"
            else np.array([(pad_code << 4) | pad_code], dtype=np.uint8),
            kind,
        )[0]
        assert (padding == zero_value).all(), f"{impl} {kind}: padding codes {padding}"
        back = target.kv_dequantize(codes, scales, kind, 32, 33, impl)
        assert tuple(back.shape) == (1, 33)


@pytest.mark.invariant("QNT-007")
@pytest.mark.parametrize("kind", qs.KINDS)
def test_all_zero_block(target: Any, impls: tuple[str, ...], kind: str) -> None:
    x = torch.zeros(2, 64)
    x[1, 32:] = 1.0
    for impl in impls:
        codes, scales = target.kv_quantize(x, kind, 32, impl)
        assert scales[0].tolist() == [2.0**-14, 2.0**-14]
        assert scales[1, 0].item() == 2.0**-14
        back = target.kv_dequantize(codes, scales, kind, 32, 64, impl)
        assert torch.equal(back[0].cpu(), torch.zeros(64)), f"{impl} {kind}: zeros changed"


@pytest.mark.invariant("QNT-008")
@pytest.mark.parametrize(
    "x,kind,qblock,code",
    [
        (torch.tensor([[1.0, float("nan")]]), "q8_0", 32, "QNT_NON_FINITE"),
        (torch.tensor([[1.0, float("inf")]]), "q4_0", 32, "QNT_NON_FINITE"),
        (torch.tensor([[1.0, -float("inf")]]), "nf4", 32, "QNT_NON_FINITE"),
        (torch.ones(1, 32), "q5_0", 32, "QNT_BAD_KIND"),
        (torch.ones(1, 32), "q4_0", 3, "QNT_BAD_BLOCK"),
        (torch.ones(1, 32), "nf4", 5, "QNT_BAD_BLOCK"),
    ],
)
def test_bad_input_raises(
    target: Any, impls: tuple[str, ...], x: torch.Tensor, kind: str, qblock: int, code: str
) -> None:
    for impl in impls:
        with raises_code(code, exc=EngineError, what=impl):
            target.kv_quantize(x, kind, qblock, impl)


@pytest.mark.invariant("QNT-001", "QNT-002", "QNT-003")
@pytest.mark.parametrize("kind", qs.KINDS)
def test_known_tensor_snapshot(
    target: Any, impls: tuple[str, ...], kind: str, snapshot: Any
) -> None:
    """A fixed tensor's codes and scales, so a format change shows up as a reviewed diff."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 40, generator=g) * torch.tensor([[0.01], [1.0], [300.0]])
    records = {}
    for impl in impls:
        codes, scales = target.kv_quantize(x, kind, 32, impl)
        records[impl] = (array_record(codes), array_record(scales))
    first = next(iter(records.values()))
    assert all(r == first for r in records.values()), "implementations disagree"
    assert first == snapshot


@pytest.mark.invariant("QNT-020")
@pytest.mark.parametrize("kind", qs.KINDS)
@pytest.mark.parametrize("lead", [(0,), (2, 0)])
def test_an_empty_batch_quantizes_to_empty_codes_and_scales(
    target: Any, impls: tuple[str, ...], kind: str, lead: tuple[int, ...]
) -> None:
    dim, qblock = 40, 16  # pad_dim 48: three blocks
    width, dtype = (48, torch.int8) if kind == "q8_0" else (24, torch.uint8)
    for impl in impls:
        codes, scales = target.kv_quantize(torch.zeros(*lead, dim), kind, qblock, impl)
        assert (tuple(codes.shape), codes.dtype) == ((*lead, width), dtype), f"{impl} codes"
        assert (tuple(scales.shape), scales.dtype) == ((*lead, 3), torch.float16), f"{impl}"
        back = target.kv_dequantize(codes, scales, kind, qblock, dim, impl)
        assert (tuple(back.shape), back.dtype) == ((*lead, dim), torch.float32), f"{impl} values"


@pytest.mark.invariant("QNT-020")
@pytest.mark.parametrize("kind", qs.KINDS)
def test_a_vector_of_no_values_raises(target: Any, impls: tuple[str, ...], kind: str) -> None:
    for impl in impls:
        for x in (torch.zeros(2, 0), torch.tensor(1.0)):  # zero values per token; no vector
            with raises_code("QNT_BAD_SHAPE", exc=EngineError, what=f"{impl} {tuple(x.shape)}"):
                target.kv_quantize(x, kind, 16, impl)


def _u8(*shape: int) -> torch.Tensor:
    return torch.zeros(*shape, dtype=torch.uint8)


_ONE = torch.ones(1, 1, dtype=torch.float16)  # the scale of one block

# (kind, codes, scales, code, field) for 32 values in one block of 32: each spoils one thing
BAD_CODES = [
    pytest.param("q8_0", _u8(1, 32), _ONE, "QNT_BAD_DTYPE", "codes", id="q8_0-uint8-codes"),
    pytest.param("q4_0", torch.zeros(1, 16), _ONE, "QNT_BAD_DTYPE", "codes", id="float-codes"),
    pytest.param(
        "nf4", torch.zeros(1, 16, dtype=torch.int8), _ONE, "QNT_BAD_DTYPE", "codes", id="nf4-int8"
    ),
    pytest.param("q4_0", _u8(1, 16), torch.ones(1, 1), "QNT_BAD_DTYPE", "scales", id="fp32-scale"),
    pytest.param("q4_0", _u8(1, 32), _ONE, "QNT_BAD_SHAPE", "codes", id="q4_0-one-code-a-byte"),
    pytest.param(
        "q8_0", torch.zeros(1, 16, dtype=torch.int8), _ONE, "QNT_BAD_SHAPE", "codes", id="q8_0-half"
    ),
    pytest.param(
        "nf4",
        _u8(1, 16),
        torch.ones(1, 2, dtype=torch.float16),
        "QNT_BAD_SHAPE",
        "scales",
        id="two-scales",
    ),
    pytest.param("q4_0", _u8(2, 16), _ONE, "QNT_BAD_SHAPE", "scales", id="rows-disagree"),
    pytest.param(
        "q8_0", torch.tensor(0, dtype=torch.int8), _ONE, "QNT_BAD_SHAPE", "codes", id="0-d"
    ),
]


@pytest.mark.invariant("QNT-021")
@pytest.mark.parametrize("kind,codes,scales,code,field", BAD_CODES)
def test_dequantize_refuses_codes_quantize_cannot_give(
    target: Any,
    impls: tuple[str, ...],
    kind: str,
    codes: torch.Tensor,
    scales: torch.Tensor,
    code: str,
    field: str,
) -> None:
    for impl in impls:
        with raises_code(code, field=field, exc=EngineError, what=impl):
            target.kv_dequantize(codes, scales, kind, 32, 32, impl)
