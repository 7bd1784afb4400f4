"""GGML Q8_0 / Q4_0 blocks against the ``gguf`` package (spec/kv_quant.md QNT-009..QNT-011).

``gguf.quants`` is the real peer: its Q8_0 is documented bit-exact with ggml-quants.c and its
Q4_0 uses the same fp32 path as ggml's reference without FMA.
"""

from __future__ import annotations

from typing import Any

import gguf
import numpy as np
import pytest
import torch
from hypothesis import given

from conformance.assertions import raises_code
from conformance.strategies import kernels as ks
from conformance.strategies import kv_quant as qs
from reference_impl.errors import EngineError

pytestmark = pytest.mark.requires("kv_quant.formats")

QTYPES = {"Q8_0": gguf.GGMLQuantizationType.Q8_0, "Q4_0": gguf.GGMLQuantizationType.Q4_0}


@pytest.fixture
def impls(target: Any) -> tuple[str, ...]:
    return tuple(target.kv_quant_impls())


def _check_against_gguf(target: Any, impls: tuple[str, ...], x: np.ndarray, qtype: str) -> None:
    want = gguf.quants.quantize(x, QTYPES[qtype])
    want_values = gguf.quants.dequantize(want, QTYPES[qtype])
    for impl in impls:
        got = target.ggml_quantize(torch.from_numpy(x), qtype, impl).cpu().numpy()
        assert got.dtype == np.uint8 and got.shape == want.shape, f"{impl}: {got.dtype} {got.shape}"
        bad = np.argwhere(got != want)
        assert bad.size == 0, (
            f"{impl} {qtype}: {len(bad)} bytes differ from gguf, first at {bad[0].tolist()}: "
            f"{got[tuple(bad[0])]:#04x} != {want[tuple(bad[0])]:#04x}"
        )
        values = target.ggml_dequantize(torch.from_numpy(want), qtype, impl).cpu().numpy()
        np.testing.assert_array_equal(values, want_values, err_msg=f"{impl} {qtype} dequantize")


@pytest.mark.invariant("QNT-009")
@ks.kernel_settings(20)
@given(x=qs.ggml_rows())
def test_q8_0_blocks_equal_gguf(target: Any, impls: tuple[str, ...], x: np.ndarray) -> None:
    _check_against_gguf(target, impls, x, "Q8_0")


@pytest.mark.invariant("QNT-010")
@ks.kernel_settings(20)
@given(x=qs.ggml_rows())
def test_q4_0_blocks_equal_gguf(target: Any, impls: tuple[str, ...], x: np.ndarray) -> None:
    _check_against_gguf(target, impls, x, "Q4_0")


@pytest.mark.invariant("QNT-010")
def test_q4_0_nibbles_hold_elements_j_and_j_plus_16(target: Any, impls: tuple[str, ...]) -> None:
    # m = -8 (first of largest magnitude) -> d = 1; q = trunc(x + 8.5): x = j - 8 for j < 16
    # and 7 - (j - 16) for the second half, so byte j = j | (15 - j) << 4 (and q[0] = 0).
    first = np.arange(16, dtype=np.float32) - 8.0
    second = 7.0 - np.arange(16, dtype=np.float32)
    x = np.concatenate([first, second])[None, :]
    for impl in impls:
        got = target.ggml_quantize(torch.from_numpy(x), "Q4_0", impl).cpu().numpy()[0]
        assert got[:2].view(np.float16)[0] == 1.0
        expected = [j | ((15 - j) << 4) for j in range(16)]
        assert got[2:].tolist() == expected, f"{impl}: {[hex(b) for b in got[2:]]}"


@pytest.mark.invariant("QNT-010")
def test_q4_0_rounds_the_product_before_adding_8_5(target: Any, impls: tuple[str, ...]) -> None:
    # m = -24 -> d = 3 and 1/d = fp32(1/3), a little above a third: x·(1/d) for x = -22.5
    # is -7.50000015, which rounds to -7.5 in fp32, so q = trunc(-7.5 + 8.5) = 1. A fused
    # multiply-add (one rounding) gives 0.99999985 and q = 0: the kernels must not fuse (on a
    # GPU; Triton's CPU interpreter never fuses). Likewise -19.5, -16.5, -13.5 -> 2, 3, 4.
    x = np.zeros((1, 32), dtype=np.float32)
    x[0, :5] = [-24.0, -22.5, -19.5, -16.5, -13.5]
    _check_against_gguf(target, impls, x, "Q4_0")
    for impl in impls:
        got = target.ggml_quantize(torch.from_numpy(x), "Q4_0", impl).cpu().numpy()[0]
        assert (got[2:7] & 0xF).tolist() == [0, 1, 2, 3, 4], f"{impl}: {got[2:7].tolist()}"


@pytest.mark.invariant("QNT-011")
@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0"])
@pytest.mark.parametrize("shape", [(2, 40), (40,)])
def test_row_not_a_multiple_of_32_raises(
    target: Any, impls: tuple[str, ...], qtype: str, shape: tuple[int, ...]
) -> None:
    # A single 1-D row is a row too: its refusal must not depend on a batch axis.
    for impl in impls:
        with raises_code("QNT_BAD_SHAPE", exc=EngineError, what=f"{impl} {shape}"):
            target.ggml_quantize(torch.ones(*shape), qtype, impl)


@pytest.mark.invariant("QNT-011")
@pytest.mark.parametrize(("qtype", "size"), [("Q8_0", 34), ("Q4_0", 18)])
def test_bytes_that_are_not_whole_blocks_raise(
    target: Any, impls: tuple[str, ...], qtype: str, size: int
) -> None:
    """Dequantizing a row cut inside a block is refused, not silently shortened."""
    for impl in impls:
        for nbytes in (size - 1, size + 1, 2 * size + 7):
            with raises_code("QNT_BAD_SHAPE", exc=EngineError, what=f"{impl} {nbytes} bytes"):
                target.ggml_dequantize(torch.zeros(2, nbytes, dtype=torch.uint8), qtype, impl)


@pytest.mark.invariant("QNT-011")
def test_unknown_ggml_type_raises(target: Any, impls: tuple[str, ...]) -> None:
    for impl in impls:
        with raises_code("QNT_BAD_KIND", exc=EngineError, what=impl):
            target.ggml_quantize(torch.ones(1, 32), "Q5_0", impl)
        with raises_code("QNT_BAD_KIND", exc=EngineError, what=impl):
            target.ggml_dequantize(torch.zeros(1, 34, dtype=torch.uint8), "Q5_0", impl)


@pytest.mark.invariant("QNT-020")
@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0"])
@pytest.mark.parametrize("shape", [(0, 64), (2, 0, 64), (2, 0), (0, 0)])
def test_empty_rows_quantize_to_empty_blocks(
    target: Any, impls: tuple[str, ...], qtype: str, shape: tuple[int, ...]
) -> None:
    nbytes = shape[-1] // 32 * {"Q8_0": 34, "Q4_0": 18}[qtype]
    for impl in impls:
        data = target.ggml_quantize(torch.zeros(*shape), qtype, impl)
        assert (tuple(data.shape), data.dtype) == ((*shape[:-1], nbytes), torch.uint8), impl
        back = target.ggml_dequantize(data, qtype, impl)
        assert (tuple(back.shape), back.dtype) == (shape, torch.float32), impl
