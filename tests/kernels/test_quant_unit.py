"""kernels.quant helpers: nibble packing, sizes, format checks."""

from __future__ import annotations

import itertools

import pytest
import torch

from kernels import quant
from reference_impl.errors import KernelError


def test_pack_unpack_is_a_bijection_on_all_bytes_and_codes() -> None:
    every_byte = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    assert torch.equal(quant.pack_nibbles(quant.unpack_nibbles(every_byte)), every_byte)
    pairs = torch.tensor(list(itertools.product(range(16), repeat=2)), dtype=torch.uint8)
    assert torch.equal(quant.unpack_nibbles(quant.pack_nibbles(pairs)), pairs)
    assert quant.pack_nibbles(torch.tensor([0xA, 0x3], dtype=torch.uint8)).item() == 0xA3


def test_odd_nibble_count() -> None:
    with pytest.raises(KernelError):
        quant.pack_nibbles(torch.zeros(3, dtype=torch.uint8))


@pytest.mark.parametrize(
    "kind,dim,qblock,expected",
    [
        ("fp16", 10, 32, 20),
        ("fp32", 10, 32, 40),
        ("q8_0", 32, 32, 34),
        ("q4_0", 32, 32, 18),
        ("nf4", 33, 32, 36),
    ],
)
def test_bytes_per_token(kind: str, dim: int, qblock: int, expected: int) -> None:
    assert quant.bytes_per_token(kind, dim, qblock) == expected


def test_quantized_tensor_properties() -> None:
    qt = quant.quantize(torch.randn(2, 70), "q4_0", 32)
    assert (qt.pad_dim, qt.n_blocks, tuple(qt.codes.shape), tuple(qt.scales.shape)) == (
        96,
        3,
        (2, 48),
        (2, 3),
    )


@pytest.mark.parametrize(
    "kind,qblock,code",
    [("q6", 32, "QNT_BAD_KIND"), ("q8_0", 0, "QNT_BAD_BLOCK"), ("q4_0", 7, "QNT_BAD_BLOCK")],
)
def test_check_format(kind: str, qblock: int, code: str) -> None:
    with pytest.raises(KernelError) as err:
        quant.check_format(kind, qblock)
    assert err.value.code == code


def test_bad_tensors() -> None:
    with pytest.raises(KernelError) as err:
        quant.quantize(torch.ones(2, 4, dtype=torch.int32), "q8_0", 32)
    assert err.value.code == "QNT_BAD_DTYPE"
    with pytest.raises(KernelError) as err:
        quant.quantize(torch.ones(2, 0), "q8_0", 32)
    assert err.value.code == "QNT_BAD_SHAPE"
    with pytest.raises(KernelError) as err:
        quant.quantize(torch.full((1, 32), 1e9), "q8_0", 32)
    assert err.value.code == "QNT_SCALE_OVERFLOW"
    with pytest.raises(KernelError) as err:
        quant.ggml_dequantize(torch.zeros(1, 35, dtype=torch.uint8), "Q8_0")
    assert err.value.code == "QNT_BAD_SHAPE"
