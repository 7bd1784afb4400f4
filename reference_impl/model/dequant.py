"""GGML tensor storage types to float32.

Written from the block layouts (ggml ``ggml-common.h``, ``ggml-quants.c``), independently of
``gguf.quants``, which the tests use as the oracle (only the IQ codebook tables are taken from
it, see below). Each quantized format has one function that takes the raw bytes of
``n_values / block_size`` blocks and returns ``n_values`` float32 values, vectorised over
blocks: the block is a row of a ``[n_blocks, block_bytes]`` uint8 array, its fields are column
slices.

Conventions shared by every format:

* fp16 fields (``d``, ``dmin``, ``m``) are little-endian IEEE half floats widened to float32
  before any arithmetic, as ggml does (``GGML_FP16_TO_FP32``); an inf/nan scale gives inf/nan
  values rather than an error (the loader's ``check_tensors`` refuses those, GGUF-042);
* products are evaluated in float32 in ggml's order -- for the K-quants the sub-block scale is
  formed first (``d * sc``) and then multiplied by the quant, so results are bit-exact;
* "low nibbles first": a byte array ``qs[k]`` holding two 4-bit quants gives value ``k`` from
  its low nibble and value ``k + len(qs)`` from its high nibble (not adjacent pairs).

Formats (bytes per block / values per block):

=========  ======  =======================================================================
Q8_0       34/32   ``d``, int8 ``qs[32]``: ``qs * d``
Q4_0       18/32   ``d``, ``qs[16]`` nibbles: ``(q - 8) * d``
Q4_1       20/32   ``d``, ``m``, ``qs[16]`` nibbles: ``q * d + m``
Q5_0       22/32   ``d``, ``qh`` (u32), ``qs[16]``: 5-bit ``q`` (bit j of ``qh`` = bit 4 of
                   value j): ``(q - 16) * d``
Q5_1       24/32   ``d``, ``m``, ``qh`` (u32), ``qs[16]``: ``q * d + m``
Q2_K       84/256  ``scales[16]`` (low nibble scale, high nibble min), ``qs[64]`` 2-bit,
                   ``d``, ``dmin``: ``d*sc * q - dmin*mn`` per 16 values
Q3_K      110/256  ``hmask[32]``, ``qs[64]`` 2-bit, ``scales[12]`` (16 packed 6-bit),
                   ``d``: ``d*(sc - 32) * (q - (hbit ? 0 : 4))`` per 16 values
Q4_K      144/256  ``d``, ``dmin``, ``scales[12]`` (8 packed 6-bit scales + 8 mins),
                   ``qs[128]``: ``d*sc * q - dmin*mn`` per 32 values
Q5_K      176/256  as Q4_K plus ``qh[32]`` (bit 4 of each quant) before ``qs``
Q6_K      210/256  ``ql[128]`` (low 4 bits), ``qh[64]`` (high 2 bits), int8
                   ``scales[16]``, ``d``: ``d*sc * (q - 32)`` per 16 values
IQ4_NL     18/32   ``d``, ``qs[16]`` nibbles indexing a fixed non-linear 16-value grid
IQ4_XS    136/256  ``d``, ``scales_h`` (u16), ``scales_l[4]``, ``qs[128]``: per 32 values a
                   6-bit scale ``ls``: ``d*(ls - 32) * grid[q]``
TQ1_0      54/256  ``qs[48]``, ``qh[4]`` base-3 packed ternary digits, ``d``: ``(t - 1) * d``
TQ2_0      66/256  ``qs[64]`` 2-bit ternary, ``d``: ``(t - 1) * d``
MXFP4      17/32   ``e`` (E8M0 exponent), ``qs[16]`` nibbles of E2M1: ``fp4[q] * 2^(e-127)``
NVFP4      36/64   ``d[4]`` (UE4M3, one per 16 values), ``qs[32]``: sub-block s takes
                   ``qs[8s : 8s+8]`` (low nibbles first): ``fp4[q] * ue4m3(d[s])``
IQ2_XXS    66/256  ``d``, per 32 values a u32 of 4 grid indices and a u32 of 4 sign
                   indices (7 bits each) + 4-bit scale ``ls``: ``d*(0.5+ls)/4 * ±grid``
IQ2_XS     74/256  ``d``, ``qs[32]`` u16 (9-bit grid index, 7-bit sign index), ``scales[8]``
                   (a 4-bit ``ls`` per 16 values): ``d*(0.5+ls)/4 * ±grid``
IQ2_S      82/256  ``d``, ``qs[32]`` + ``qh[8]`` (10-bit grid indices), explicit sign bytes
                   ``signs[32]``, ``scales[8]``: ``d*(0.5+ls)/4 * ±grid``
IQ3_XXS    98/256  ``d``, ``qs[64]`` grid indices (4 values each), per 32 values a u32 of 4
                   sign indices + 4-bit ``ls``: ``d*(0.5+ls)/2 * ±grid``
IQ3_S     110/256  ``d``, ``qs[64]`` + ``qh[8]`` (9-bit indices), ``signs[32]``,
                   ``scales[4]`` (a 4-bit ``ls`` per 32 values): ``d*(1+2ls) * ±grid``
IQ1_S      50/256  ``d``, ``qs[32]`` + 3 high bits each from ``qh[8]`` (u16, one per 32
                   values, also a 3-bit ``ls`` and a delta sign): ``d*(2ls+1) * (grid ± 1/8)``
IQ1_M      56/256  ``qs[32]``, ``qh[16]`` (per index 3 high bits + delta sign), ``scales``
                   4 u16: 3-bit ``ls`` per 16 values, ``d`` in their top nibbles: as IQ1_S
BF16        2/1    the upper 16 bits of a float32
=========  ======  =======================================================================

The IQ2/IQ3/IQ1 codebooks (ggml ``iq2xxs_grid``, ``iq2xs_grid``, ``iq2s_grid``,
``iq3xxs_grid``, ``iq3s_grid``, ``iq1s_grid``) are format constants of hundreds to thousands of
entries: they are not transcribed here but read at import from gguf-py (``gguf.quants.<TYPE>``
after ``init_grid()``, its decoding of the packed tables). This module's own code is the block
layout and the index, sign and scale logic. The 128 "sign indices" (ggml ``ksigns_iq2xs``) are a
rule, not data, and are computed here. Q8_K (activations only) is not implemented.
"""

from __future__ import annotations

from collections.abc import Callable

import gguf
import numpy as np

from reference_impl.spec_links import implements

QK = 32  # values per block of the "legacy" formats (Q4_0 ... Q8_0, IQ4_NL, MXFP4)
QK_K = 256  # values per super-block of the K-quants, IQ4_XS and the ternary formats
Q8_0_BYTES = 2 + QK
Q4_0_BYTES = 2 + QK // 2

# ggml type ids (ggml.h ``enum ggml_type``) of the storage types the loader accepts.
GGML_F32 = 0
GGML_F16 = 1
GGML_Q4_0 = 2
GGML_Q4_1 = 3
GGML_Q5_0 = 6
GGML_Q5_1 = 7
GGML_Q8_0 = 8
GGML_Q2_K = 10
GGML_Q3_K = 11
GGML_Q4_K = 12
GGML_Q5_K = 13
GGML_Q6_K = 14
GGML_IQ4_NL = 20
GGML_IQ4_XS = 23
GGML_BF16 = 30
GGML_TQ1_0 = 34
GGML_TQ2_0 = 35
GGML_MXFP4 = 39
GGML_NVFP4 = 40
GGML_IQ2_XXS = 16
GGML_IQ2_XS = 17
GGML_IQ3_XXS = 18
GGML_IQ1_S = 19
GGML_IQ3_S = 21
GGML_IQ2_S = 22
GGML_IQ1_M = 29

# IQ4_NL / IQ4_XS: the 16 non-linear levels a 4-bit index selects (ggml ``kvalues_iq4nl``).
IQ4_GRID = np.array(
    [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int8
)
# MXFP4: the E2M1 values doubled to integers (ggml ``kvalues_mxfp4``); the scale is halved.
MXFP4_GRID = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.int8)


def _codebook(quant: type) -> np.ndarray:
    """The float32 codebook ``[entries, values per entry]`` gguf-py decodes for an IQ type."""
    quant.init_grid()  # type: ignore[attr-defined]
    grid: np.ndarray = quant.grid  # type: ignore[attr-defined]
    return np.array(grid, dtype=np.float32).reshape(quant.grid_shape)  # type: ignore[attr-defined]


IQ2XXS_GRID = _codebook(gguf.quants.IQ2_XXS)  # 256 x 8, values 8, 25, 43
IQ2XS_GRID = _codebook(gguf.quants.IQ2_XS)  # 512 x 8
IQ2S_GRID = _codebook(gguf.quants.IQ2_S)  # 1024 x 8
IQ3XXS_GRID = _codebook(gguf.quants.IQ3_XXS)  # 256 x 4, values 4 .. 62
IQ3S_GRID = _codebook(gguf.quants.IQ3_S)  # 512 x 4, odd values 1 .. 15
IQ1S_GRID = _codebook(gguf.quants.IQ1_S)  # 2048 x 8, values -1, 0, 1
IQ1S_DELTA = np.float32(0.125)  # IQ1_S shifts every grid value by +-1/8


def _sign_patterns() -> np.ndarray:
    """``[128, 8]`` of +-1: sign index i stores the signs of 7 values (bit k set: value k is
    negative); the 8th sign is the one that makes the number of negatives even."""
    i = np.arange(128, dtype=np.uint8)[:, None]
    bits = (i >> np.arange(7, dtype=np.uint8)) & 1
    eighth = bits.sum(axis=1, keepdims=True) & 1
    negative = np.concatenate([bits, eighth], axis=1)
    return np.where(negative == 1, np.float32(-1), np.float32(1))


SIGN_PATTERNS = _sign_patterns()


def _blocks(
    raw: np.ndarray, n_values: int, block_values: int, block_bytes: int, name: str
) -> np.ndarray:
    """The bytes as ``[n_blocks, block_bytes]``, checked to hold exactly ``n_values`` values."""
    flat = np.asarray(raw, dtype=np.uint8).reshape(-1)
    if flat.size % block_bytes or flat.size // block_bytes * block_values != n_values:
        raise ValueError(f"{name}: {flat.size} bytes cannot hold {n_values} values")
    return flat.reshape(-1, block_bytes)


def _f16(blocks: np.ndarray, offset: int) -> np.ndarray:
    """The fp16 field at byte ``offset`` of each block, as a float32 column ``[n_blocks, 1]``."""
    return np.ascontiguousarray(blocks[:, offset : offset + 2]).view("<f2").astype(np.float32)


def _scales(blocks: np.ndarray) -> np.ndarray:
    """The fp16 scale at the start of each block (``d``)."""
    return _f16(blocks, 0)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """``[n, k]`` bytes -> ``[n, 2k]`` 4-bit values, low nibbles first."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _bits(words: np.ndarray, n_bits: int) -> np.ndarray:
    """Little-endian bytes ``[n, k]`` -> ``[n, n_bits]`` bits (0/1, uint8), bit 0 first."""
    return np.unpackbits(words, axis=1, bitorder="little")[:, :n_bits]


def _mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):  # inf/nan scales propagate, as in ggml
        out: np.ndarray = a * b
    return out


# -- 32-value blocks --------------------------------------------------------------------------


@implements("GGUF-002")
def dequantize_q8_0(raw: np.ndarray, n_values: int) -> np.ndarray:
    """``raw``: the uint8 bytes of ``n_values / 32`` Q8_0 blocks -> float32 ``[n_values]``."""
    blocks = _blocks(raw, n_values, QK, Q8_0_BYTES, "Q8_0")
    qs = blocks[:, 2:].view(np.int8).astype(np.float32)
    return _mul(qs, _scales(blocks)).reshape(-1)


@implements("GGUF-003")
def dequantize_q4_0(raw: np.ndarray, n_values: int) -> np.ndarray:
    """``raw``: the uint8 bytes of ``n_values / 32`` Q4_0 blocks -> float32 ``[n_values]``."""
    blocks = _blocks(raw, n_values, QK, Q4_0_BYTES, "Q4_0")
    q = _nibbles(blocks[:, 2:]).astype(np.float32) - 8
    return _mul(q, _scales(blocks)).reshape(-1)


@implements("GGUF-043")
def dequantize_q4_1(raw: np.ndarray, n_values: int) -> np.ndarray:
    """Q4_1: ``d``, ``m`` (fp16), ``qs[16]``; value = q * d + m (q in 0..15)."""
    blocks = _blocks(raw, n_values, QK, 20, "Q4_1")
    q = _nibbles(blocks[:, 4:]).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        return (_mul(q, _f16(blocks, 0)) + _f16(blocks, 2)).reshape(-1)


def _q5_quants(blocks: np.ndarray, qh_at: int) -> np.ndarray:
    """5-bit quants of Q5_0 / Q5_1: nibbles of ``qs`` plus bit j of the u32 ``qh`` as bit 4."""
    low = _nibbles(blocks[:, qh_at + 4 :])
    high = _bits(blocks[:, qh_at : qh_at + 4], QK)
    return (low | (high << 4)).astype(np.float32)


@implements("GGUF-043")
def dequantize_q5_0(raw: np.ndarray, n_values: int) -> np.ndarray:
    """Q5_0: ``d``, ``qh`` (u32), ``qs[16]``; value = (q - 16) * d."""
    blocks = _blocks(raw, n_values, QK, 22, "Q5_0")
    return _mul(_q5_quants(blocks, 2) - 16, _f16(blocks, 0)).reshape(-1)


@implements("GGUF-043")
def dequantize_q5_1(raw: np.ndarray, n_values: int) -> np.ndarray:
    """Q5_1: ``d``, ``m``, ``qh`` (u32), ``qs[16]``; value = q * d + m."""
    blocks = _blocks(raw, n_values, QK, 24, "Q5_1")
    with np.errstate(invalid="ignore", over="ignore"):
        return (_mul(_q5_quants(blocks, 4), _f16(blocks, 0)) + _f16(blocks, 2)).reshape(-1)


@implements("GGUF-043")
def dequantize_iq4_nl(raw: np.ndarray, n_values: int) -> np.ndarray:
    """IQ4_NL: ``d``, ``qs[16]``; value = d * IQ4_GRID[q]."""
    blocks = _blocks(raw, n_values, QK, 18, "IQ4_NL")
    grid = IQ4_GRID.astype(np.float32)[_nibbles(blocks[:, 2:])]
    return _mul(grid, _f16(blocks, 0)).reshape(-1)


def e8m0_half(e: np.ndarray) -> np.ndarray:
    """E8M0 exponent byte -> float32 ``2^(e - 128)`` (half the MXFP4 scale: the grid is doubled).
    Built from float32 bits: exponent field ``e - 1``; e = 0 and 1 are subnormals."""
    e32 = e.astype(np.uint32)
    bits = np.where(e32 < 2, np.uint32(0x00200000) << e32, (e32 - 1) << 23).astype(np.uint32)
    return bits.view(np.float32)


@implements("GGUF-043")
def dequantize_mxfp4(raw: np.ndarray, n_values: int) -> np.ndarray:
    """MXFP4: ``e`` (E8M0), ``qs[16]``; value = MXFP4_GRID[q] * 2^(e - 128)."""
    blocks = _blocks(raw, n_values, QK, 17, "MXFP4")
    grid = MXFP4_GRID.astype(np.float32)[_nibbles(blocks[:, 1:])]
    return _mul(grid, e8m0_half(blocks[:, :1])).reshape(-1)


def ue4m3_half(x: np.ndarray) -> np.ndarray:
    """UE4M3 scale byte -> float32 half its value (the grid is doubled). Unsigned: bit 7 is
    ignored, except that only the byte 0x7F (E4M3's nan) reads as 0 and 0xFF does not; 4
    exponent bits (bias 7), 3 mantissa bits, exponent 0 subnormal. Half of ``(8 + m) * 2^(e - 10)`` (``m * 2^-9`` for e = 0): all exact."""
    e = ((x >> 3) & 0xF).astype(np.int32)
    m = (x & 7).astype(np.int32)
    mantissa = np.where(e > 0, 8 + m, m).astype(np.float32)
    half = np.ldexp(mantissa, np.maximum(e, 1) - 11).astype(np.float32)
    return np.where(x == 0x7F, np.float32(0), half).astype(np.float32)


@implements("GGUF-043")
def dequantize_nvfp4(raw: np.ndarray, n_values: int) -> np.ndarray:
    """NVFP4: ``d[4]`` (UE4M3), ``qs[32]``; sub-block s < 4 of 16 values reads ``qs[8s : 8s+8]``
    low nibbles first; value = MXFP4_GRID[q] * ue4m3(d[s]) / 2."""
    blocks = _blocks(raw, n_values, 64, 36, "NVFP4")
    n = blocks.shape[0]
    grid = MXFP4_GRID.astype(np.float32)[_nibbles(blocks[:, 4:].reshape(n * 4, 8))]
    return _mul(grid.reshape(n, 4, 16), ue4m3_half(blocks[:, :4])[:, :, None]).reshape(-1)


# -- 256-value super-blocks -------------------------------------------------------------------
# The IQ codebook formats: every group of 8 (IQ2, IQ1) or 4 (IQ3) values is one codebook entry
# times a sub-block scale, with per-value signs (IQ2, IQ3) or a shared +-1/8 shift (IQ1).


def _bit_signs(signs: np.ndarray) -> np.ndarray:
    """Explicit sign bytes ``[n, k]`` -> ``[n, 8k]`` of +-1 (bit j of byte b: value 8b + j)."""
    return np.where(_bits(signs, signs.shape[1] * 8) == 1, np.float32(-1), np.float32(1))


def _u32(blocks: np.ndarray, start: int, count: int) -> np.ndarray:
    return np.ascontiguousarray(blocks[:, start : start + 4 * count]).view("<u4")


def _nibbles_paired(packed: np.ndarray) -> np.ndarray:
    """``[n, k]`` bytes -> ``[n, 2k]`` 4-bit values, byte b giving value 2b (low nibble) and
    2b + 1 (high nibble): the IQ formats' packed scales (unlike ``_nibbles``' quants)."""
    return np.stack([packed & 0xF, packed >> 4], axis=2).reshape(packed.shape[0], -1)


def _scaled(
    d: np.ndarray, factor: np.ndarray, values: np.ndarray, n: int, groups: int
) -> np.ndarray:
    """``d * factor`` per sub-block (``factor`` ``[n, groups]``, formed first as in ggml) times
    ``values`` ``[n, 256]`` split into ``groups`` equal sub-blocks."""
    dl = _mul(d, factor.astype(np.float32))[:, :, None]
    return _mul(dl, values.reshape(n, groups, -1)).reshape(-1)


def _iq_signs_scales(aux: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """IQ2_XXS / IQ3_XXS u32 words ``[n, 8]`` -> signs ``[n, 256]`` (four 7-bit sign indices
    at bits 0, 7, 14, 21, each for 8 values) and the 4-bit scale (bits 28..31) ``[n, 8]``."""
    n = aux.shape[0]
    idx = (aux[:, :, None] >> np.array([0, 7, 14, 21], dtype=np.uint32)) & 0x7F
    return SIGN_PATTERNS[idx].reshape(n, 256), (aux >> 28).astype(np.float32)


@implements("GGUF-043")
def dequantize_iq2_xxs(raw: np.ndarray, n_values: int) -> np.ndarray:
    """IQ2_XXS: ``d``, then per 32 values two u32: the first holds 4 byte indices into
    IQ2XXS_GRID (8 values each), the second 4 sign indices and the scale ``ls``; value =
    ``d * (0.5 + ls) * 0.25`` times the signed grid value."""
    blocks = _blocks(raw, n_values, QK_K, 66, "IQ2_XXS")
    n = blocks.shape[0]
    words = _u32(blocks, 2, 16).reshape(n, 8, 2)
    grid = IQ2XXS_GRID[np.ascontiguousarray(words[:, :, 0]).view(np.uint8)].reshape(n, 256)
    signs, ls = _iq_signs_scales(np.ascontiguousarray(words[:, :, 1]))
    factor = (ls + np.float32(0.5)) * np.float32(0.25)
    return _scaled(_f16(blocks, 0), factor, grid * signs, n, 8)


@implements("GGUF-043")
def dequantize_iq2_xs(raw: np.ndarray, n_values: int) -> np.ndarray:
    """IQ2_XS: ``d``, ``qs[32]`` u16 (bits 0..8: IQ2XS_GRID index of 8 values, bits 9..15:
    sign index), ``scales[8]`` (one 4-bit ``ls`` per 16 values); value =
    ``d * (0.5 + ls) * 0.25`` times the signed grid value."""
    blocks = _blocks(raw, n_values, QK_K, 74, "IQ2_XS")
    n = blocks.shape[0]
    qs = np.ascontiguousarray(blocks[:, 2:66]).view("<u2")
    grid = IQ2XS_GRID[qs & 0x1FF].reshape(n, 256)
    signs = SIGN_PATTERNS[qs >> 9].reshape(n, 256)
    ls = _nibbles_paired(blocks[:, 66:74]).astype(np.float32)
    factor = (ls + np.float32(0.5)) * np.float32(0.25)
    return _scaled(_f16(blocks, 0), factor, grid * signs, n, 16)


@implements("GGUF-043")
def dequantize_iq2_s(raw: np.ndarray, n_values: int) -> np.ndarray:
    """IQ2_S: ``d``, ``qs[32]`` (low 8 bits of IQ2S_GRID index i), ``signs[32]`` (bit j of
    byte b: value 8b + j negative), ``qh[8]`` (bits ``2(i%4)..+1`` of ``qh[i//4]``: index bits 8
    and 9), ``scales[8]`` (4-bit ``ls`` per 16 values); value = ``d*(0.5+ls)*0.25 * ±grid``."""
    blocks = _blocks(raw, n_values, QK_K, 82, "IQ2_S")
    n = blocks.shape[0]
    qh = blocks[:, 66:74, None] >> np.arange(0, 8, 2, dtype=np.uint8)
    index = blocks[:, 2:34].astype(np.uint16) | ((qh & 3).reshape(n, 32).astype(np.uint16) << 8)
    grid = IQ2S_GRID[index].reshape(n, 256)
    ls = _nibbles_paired(blocks[:, 74:82]).astype(np.float32)
    factor = (ls + np.float32(0.5)) * np.float32(0.25)
    return _scaled(_f16(blocks, 0), factor, grid * _bit_signs(blocks[:, 34:66]), n, 16)


@implements("GGUF-043")
def dequantize_iq3_xxs(raw: np.ndarray, n_values: int) -> np.ndarray:
    """IQ3_XXS: ``d``, ``qs[64]`` (byte indices into IQ3XXS_GRID, 4 values each), then per
    32 values a u32 of 4 sign indices and ``ls``; value = ``d * (0.5 + ls) * 0.5 * ±grid``."""
    blocks = _blocks(raw, n_values, QK_K, 98, "IQ3_XXS")
    n = blocks.shape[0]
    grid = IQ3XXS_GRID[blocks[:, 2:66]].reshape(n, 256)
    signs, ls = _iq_signs_scales(_u32(blocks, 66, 8))
    factor = (ls + np.float32(0.5)) * np.float32(0.5)
    return _scaled(_f16(blocks, 0), factor, grid * signs, n, 8)


@implements("GGUF-043")
def dequantize_iq3_s(raw: np.ndarray, n_values: int) -> np.ndarray:
    """IQ3_S: ``d``, ``qs[64]`` (low 8 bits of IQ3S_GRID index i, 4 values each), ``qh[8]``
    (bit ``i % 8`` of ``qh[i // 8]``: index bit 8), ``signs[32]``, ``scales[4]`` (4-bit ``ls``
    per 32 values); value = ``d * (1 + 2 ls) * ±grid``."""
    blocks = _blocks(raw, n_values, QK_K, 110, "IQ3_S")
    n = blocks.shape[0]
    high = _bits(blocks[:, 66:74], 64).astype(np.uint16) << 8
    grid = IQ3S_GRID[blocks[:, 2:66].astype(np.uint16) | high].reshape(n, 256)
    ls = _nibbles_paired(blocks[:, 106:110]).astype(np.float32)
    return _scaled(_f16(blocks, 0), 1 + 2 * ls, grid * _bit_signs(blocks[:, 74:106]), n, 8)


@implements("GGUF-043")
def dequantize_iq1_s(raw: np.ndarray, n_values: int) -> np.ndarray:
    """IQ1_S: ``d``, ``qs[32]`` (low 8 bits of IQ1S_GRID index i, 8 values each), ``qh[8]``
    u16 per 32 values: bits ``3k..3k+2`` are index bits 8..10 of its k-th index, bits 12..14
    the scale ``ls``, bit 15 the delta's sign; value = ``d * (2 ls + 1) * (grid ± 1/8)``."""
    blocks = _blocks(raw, n_values, QK_K, 50, "IQ1_S")
    n = blocks.shape[0]
    qh = np.ascontiguousarray(blocks[:, 34:50]).view("<u2")  # [n, 8]
    high = (qh[:, :, None] >> np.array([0, 3, 6, 9], dtype=np.uint16)) & 7
    index = blocks[:, 2:34].astype(np.uint16) | (high.reshape(n, 32) << 8)
    delta = np.where(qh >> 15 == 1, -IQ1S_DELTA, IQ1S_DELTA)[:, :, None, None]
    shifted = IQ1S_GRID[index].reshape(n, 8, 4, 8) + delta
    ls = ((qh >> 12) & 7).astype(np.float32)
    return _scaled(_f16(blocks, 0), 2 * ls + 1, shifted.reshape(n, 256), n, 8)


@implements("GGUF-043")
def dequantize_iq1_m(raw: np.ndarray, n_values: int) -> np.ndarray:
    """IQ1_M: ``qs[32]`` (low 8 bits of IQ1S_GRID index i), ``qh[16]`` (byte i // 2, low
    nibble for even i, high for odd: bits 0..2 are index bits 8..10, bit 3 the delta's sign),
    ``scales`` 4 u16: bits ``3k..3k+2`` of word w are the ``ls`` of values ``64w + 16k`` ..
    ``+15``; bits 12..15 of word w are bits ``4w..4w+3`` of the fp16 ``d``; value =
    ``d * (2 ls + 1) * (grid ± 1/8)``."""
    blocks = _blocks(raw, n_values, QK_K, 56, "IQ1_M")
    n = blocks.shape[0]
    words = np.ascontiguousarray(blocks[:, 48:56]).view("<u2")  # [n, 4]
    d_bits = ((words >> 12) << np.arange(0, 16, 4, dtype=np.uint16)).sum(axis=1, dtype=np.uint16)
    d = d_bits.view("<f2").astype(np.float32)[:, None]
    qh = _nibbles_paired(blocks[:, 32:48])  # [n, 32]: one nibble per index
    index = blocks[:, :32].astype(np.uint16) | ((qh & 7).astype(np.uint16) << 8)
    delta = np.where(qh >> 3 == 1, -IQ1S_DELTA, IQ1S_DELTA)[:, :, None]
    shifted = IQ1S_GRID[index] + delta  # [n, 32, 8]
    ls = (words[:, :, None] >> np.array([0, 3, 6, 9], dtype=np.uint16)) & 7
    return _scaled(d, 2 * ls.reshape(n, 16).astype(np.float32) + 1, shifted, n, 16)


@implements("GGUF-043")
def dequantize_q2_k(raw: np.ndarray, n_values: int) -> np.ndarray:
    """Q2_K: ``scales[16]``, ``qs[64]``, ``d``, ``dmin``.

    Value ``128h + 32s + 16u + l`` (h < 2, s < 4, u < 2, l < 16) is bits ``2s..2s+1`` of
    ``qs[32h + 16u + l]``, in sub-block ``8h + 2s + u`` whose byte holds the scale (low nibble)
    and the min (high nibble)."""
    blocks = _blocks(raw, n_values, QK_K, 84, "Q2_K")
    n = blocks.shape[0]
    sc = blocks[:, :16]
    qs = blocks[:, 16:80].reshape(n, 2, 1, 32)  # [block, h, -, 16u + l]
    shifts = np.arange(0, 8, 2, dtype=np.uint8).reshape(1, 1, 4, 1)
    q = ((qs >> shifts) & 3).reshape(n, 16, 16).astype(np.float32)  # [block, sub-block, l]
    d, dmin = _f16(blocks, 80)[:, :, None], _f16(blocks, 82)[:, :, None]
    dl = _mul(d, (sc & 0xF).astype(np.float32)[:, :, None])
    ml = _mul(dmin, (sc >> 4).astype(np.float32)[:, :, None])
    with np.errstate(invalid="ignore", over="ignore"):
        return (_mul(dl, q) - ml).reshape(-1)


def _q3_k_scales(packed: np.ndarray) -> np.ndarray:
    """Q3_K's 12 scale bytes -> 16 signed 6-bit scales ``[n, 16]``. Scale k: low 4 bits from
    byte ``k % 8`` (low nibble for k < 8, high nibble after); high 2 bits are bits
    ``2*(k // 4)`` of byte ``8 + k % 4``."""
    k = np.arange(16)
    low = np.where(k < 8, packed[:, k % 8] & 0xF, packed[:, k % 8] >> 4)
    high = (packed[:, 8 + k % 4] >> (2 * (k // 4)).astype(np.uint8)) & 3
    return (low | (high << 4)).astype(np.int8) - 32


@implements("GGUF-043")
def dequantize_q3_k(raw: np.ndarray, n_values: int) -> np.ndarray:
    """Q3_K: ``hmask[32]``, ``qs[64]``, ``scales[12]``, ``d``.

    Value ``128h + 32s + 16u + l`` has low bits ``2s..2s+1`` of ``qs[32h + 16u + l]`` and
    high bit ``4h + s`` of ``hmask[16u + l]``; a clear high bit subtracts 4. Sub-block
    ``8h + 2s + u`` has scale ``d * (sc - 32)``."""
    blocks = _blocks(raw, n_values, QK_K, 110, "Q3_K")
    n = blocks.shape[0]
    hmask = blocks[:, :32].reshape(n, 1, 1, 32)
    qs = blocks[:, 32:96].reshape(n, 2, 1, 32)
    shifts = np.arange(0, 8, 2, dtype=np.uint8).reshape(1, 1, 4, 1)
    low = (qs >> shifts) & 3  # [block, h, s, 16u + l]
    hbit = np.arange(8, dtype=np.uint8).reshape(1, 2, 4, 1)  # bit 4h + s
    high = (hmask >> hbit) & 1
    q = (low.astype(np.int8) - np.where(high == 1, 0, 4).astype(np.int8)).astype(np.float32)
    dl = _mul(_f16(blocks, 108), _q3_k_scales(blocks[:, 96:108]).astype(np.float32))
    return _mul(dl[:, :, None], q.reshape(n, 16, 16)).reshape(-1)


def k_scale_min(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K / Q5_K: 12 bytes -> 8 six-bit scales and 8 six-bit mins, each ``[n, 8]`` uint8.

    j < 4: scale = bytes[j] & 63, min = bytes[j + 4] & 63. j >= 4: the low 4 bits come from
    byte ``j + 4`` (scale: low nibble, min: high nibble) and the high 2 bits from the top bits
    of byte ``j - 4`` (scale) or byte ``j`` (min)."""
    b = packed
    sc_lo, mn_lo = b[:, 0:4] & 63, b[:, 4:8] & 63
    sc_hi = (b[:, 8:12] & 0xF) | ((b[:, 0:4] >> 6) << 4)
    mn_hi = (b[:, 8:12] >> 4) | ((b[:, 4:8] >> 6) << 4)
    return np.concatenate([sc_lo, sc_hi], 1), np.concatenate([mn_lo, mn_hi], 1)


def _k_dequant(blocks: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Q4_K / Q5_K: ``q`` ``[n, 8, 32]`` quants per sub-block -> ``d*sc * q - dmin*mn``."""
    sc, mn = k_scale_min(blocks[:, 4:16])
    d1 = _mul(_f16(blocks, 0), sc.astype(np.float32))[:, :, None]
    m1 = _mul(_f16(blocks, 2), mn.astype(np.float32))[:, :, None]
    with np.errstate(invalid="ignore", over="ignore"):
        return (_mul(d1, q) - m1).reshape(-1)


@implements("GGUF-043")
def dequantize_q4_k(raw: np.ndarray, n_values: int) -> np.ndarray:
    """Q4_K: ``d``, ``dmin``, ``scales[12]``, ``qs[128]``. Chunk c < 4 of 64 values: the low
    nibbles of ``qs[32c : 32c+32]`` are sub-block 2c, the high nibbles sub-block 2c + 1."""
    blocks = _blocks(raw, n_values, QK_K, 144, "Q4_K")
    n = blocks.shape[0]
    qs = blocks[:, 16:].reshape(n, 4, 1, 32)
    q = (qs >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)) & 0xF
    return _k_dequant(blocks, q.reshape(n, 8, 32).astype(np.float32))


@implements("GGUF-043")
def dequantize_q5_k(raw: np.ndarray, n_values: int) -> np.ndarray:
    """Q5_K: ``d``, ``dmin``, ``scales[12]``, ``qh[32]``, ``qs[128]``: Q4_K's nibbles plus, for
    sub-block k, bit k of ``qh[l]`` as bit 4 of its value l."""
    blocks = _blocks(raw, n_values, QK_K, 176, "Q5_K")
    n = blocks.shape[0]
    qs = blocks[:, 48:].reshape(n, 4, 1, 32)
    low = (qs >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)) & 0xF
    qh = blocks[:, 16:48].reshape(n, 1, 32)
    high = (qh >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)) & 1  # [block, sub-block, l]
    q = low.reshape(n, 8, 32) | (high << 4)
    return _k_dequant(blocks, q.astype(np.float32))


@implements("GGUF-043")
def dequantize_q6_k(raw: np.ndarray, n_values: int) -> np.ndarray:
    """Q6_K: ``ql[128]``, ``qh[64]``, int8 ``scales[16]``, ``d``.

    Half h < 2 covers values ``128h..128h+127`` from ``ql[64h : 64h+64]`` and
    ``qh[32h : 32h+32]``; quarter r < 4 of the half takes the low (r < 2) or high (r >= 2)
    nibble of ``ql[64h + 32(r % 2) + l]`` and bits ``2r..2r+1`` of ``qh[32h + l]``; value - 32
    times ``d * scales[8h + 2r + l // 16]``."""
    blocks = _blocks(raw, n_values, QK_K, 210, "Q6_K")
    n = blocks.shape[0]
    ql = blocks[:, :128].reshape(n, 2, 1, 2, 32)[:, :, :, [0, 1, 0, 1], :].reshape(n, 2, 4, 32)
    nib_shift = np.array([0, 0, 4, 4], dtype=np.uint8).reshape(1, 1, 4, 1)
    qh = blocks[:, 128:192].reshape(n, 2, 1, 32)
    hi_shift = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    q6 = ((ql >> nib_shift) & 0xF) | (((qh >> hi_shift) & 3) << 4)  # [block, h, r, l]
    q = (q6.astype(np.int8) - 32).astype(np.float32).reshape(n, 16, 16)
    sc = blocks[:, 192:208].view(np.int8).astype(np.float32)
    dl = _mul(_f16(blocks, 208), sc)[:, :, None]
    return _mul(dl, q).reshape(-1)


@implements("GGUF-043")
def dequantize_iq4_xs(raw: np.ndarray, n_values: int) -> np.ndarray:
    """IQ4_XS: ``d``, ``scales_h`` (u16), ``scales_l[4]``, ``qs[128]``. Sub-block j < 8 of 32
    values: 6-bit scale ``ls`` = nibble j of ``scales_l`` (low nibble first) | bits
    ``2j..2j+1`` of ``scales_h`` << 4; ``qs[16j : 16j+16]`` index IQ4_GRID (low nibbles
    first); value = d * (ls - 32) * grid."""
    blocks = _blocks(raw, n_values, QK_K, 136, "IQ4_XS")
    n = blocks.shape[0]
    sl = blocks[:, 4:8]
    low = np.stack([sl & 0xF, sl >> 4], axis=2).reshape(n, 8)
    high = _bits(blocks[:, 2:4], 16).reshape(n, 8, 2)
    ls = (low | (high[:, :, 0] << 4) | (high[:, :, 1] << 5)).astype(np.int8) - 32
    dl = _mul(_f16(blocks, 0), ls.astype(np.float32))[:, :, None]
    grid = IQ4_GRID.astype(np.float32)[_nibbles(blocks[:, 8:].reshape(n * 8, 16))]
    return _mul(dl, grid.reshape(n, 8, 32)).reshape(-1)


def _ternary_digits(q: np.ndarray, n_digits: int) -> np.ndarray:
    """TQ1_0: byte ``q`` holds base-3 digits as a fixed-point fraction; digit k is the integer
    part of ``3 * (q * 3^k mod 256) / 256``. ``[n, m]`` -> ``[n, n_digits, m]`` in 0..2."""
    pow3 = (3 ** np.arange(n_digits)).astype(np.uint16).reshape(1, n_digits, 1)
    shifted = (q[:, None, :].astype(np.uint16) * pow3) & 0xFF
    return (shifted * 3) >> 8


@implements("GGUF-043")
def dequantize_tq1_0(raw: np.ndarray, n_values: int) -> np.ndarray:
    """TQ1_0: ``qs[48]``, ``qh[4]``, ``d``. Values 0..159: 5 digits of ``qs[0:32]`` (digit-major),
    160..239: 5 digits of ``qs[32:48]``, 240..255: 4 digits of ``qh``; value = (t - 1) * d."""
    blocks = _blocks(raw, n_values, QK_K, 54, "TQ1_0")
    n = blocks.shape[0]
    t = np.concatenate(
        [
            _ternary_digits(blocks[:, 0:32], 5).reshape(n, 160),
            _ternary_digits(blocks[:, 32:48], 5).reshape(n, 80),
            _ternary_digits(blocks[:, 48:52], 4).reshape(n, 16),
        ],
        axis=1,
    )
    return _mul(t.astype(np.float32) - 1, _f16(blocks, 52)).reshape(-1)


@implements("GGUF-043")
def dequantize_tq2_0(raw: np.ndarray, n_values: int) -> np.ndarray:
    """TQ2_0: ``qs[64]``, ``d``. Half h < 2, shift s < 4: values ``128h + 32s + l`` are bits
    ``2s..2s+1`` of ``qs[32h + l]``; value = (t - 1) * d."""
    blocks = _blocks(raw, n_values, QK_K, 66, "TQ2_0")
    n = blocks.shape[0]
    qs = blocks[:, :64].reshape(n, 2, 1, 32)
    t = (qs >> np.arange(0, 8, 2, dtype=np.uint8).reshape(1, 1, 4, 1)) & 3
    return _mul(t.reshape(n, 256).astype(np.float32) - 1, _f16(blocks, 64)).reshape(-1)


@implements("GGUF-043")
def widen_bf16(raw: np.ndarray) -> np.ndarray:
    """BF16: each value is the upper half of a float32 (exact, nan payloads kept)."""
    bits = np.asarray(raw).reshape(-1).view("<u2").astype(np.uint32) << 16
    return bits.view(np.float32)


# ggml type id -> (name, dequantizer function name) for the block formats; F32/F16/BF16 are
# handled apart. Looked up by name at call time, so a patched module function is the one used.
BLOCK_FORMATS: dict[int, tuple[str, str]] = {
    GGML_Q4_0: ("Q4_0", "dequantize_q4_0"),
    GGML_Q4_1: ("Q4_1", "dequantize_q4_1"),
    GGML_Q5_0: ("Q5_0", "dequantize_q5_0"),
    GGML_Q5_1: ("Q5_1", "dequantize_q5_1"),
    GGML_Q8_0: ("Q8_0", "dequantize_q8_0"),
    GGML_Q2_K: ("Q2_K", "dequantize_q2_k"),
    GGML_Q3_K: ("Q3_K", "dequantize_q3_k"),
    GGML_Q4_K: ("Q4_K", "dequantize_q4_k"),
    GGML_Q5_K: ("Q5_K", "dequantize_q5_k"),
    GGML_Q6_K: ("Q6_K", "dequantize_q6_k"),
    GGML_IQ4_NL: ("IQ4_NL", "dequantize_iq4_nl"),
    GGML_IQ4_XS: ("IQ4_XS", "dequantize_iq4_xs"),
    GGML_TQ1_0: ("TQ1_0", "dequantize_tq1_0"),
    GGML_TQ2_0: ("TQ2_0", "dequantize_tq2_0"),
    GGML_MXFP4: ("MXFP4", "dequantize_mxfp4"),
    GGML_NVFP4: ("NVFP4", "dequantize_nvfp4"),
    GGML_IQ2_XXS: ("IQ2_XXS", "dequantize_iq2_xxs"),
    GGML_IQ2_XS: ("IQ2_XS", "dequantize_iq2_xs"),
    GGML_IQ2_S: ("IQ2_S", "dequantize_iq2_s"),
    GGML_IQ3_XXS: ("IQ3_XXS", "dequantize_iq3_xxs"),
    GGML_IQ3_S: ("IQ3_S", "dequantize_iq3_s"),
    GGML_IQ1_S: ("IQ1_S", "dequantize_iq1_s"),
    GGML_IQ1_M: ("IQ1_M", "dequantize_iq1_m"),
}
TYPE_NAMES = {
    GGML_F32: "F32",
    GGML_F16: "F16",
    GGML_BF16: "BF16",
    **{t: name for t, (name, _) in BLOCK_FORMATS.items()},
}


@implements("GGUF-004", "GGUF-022", "GGUF-043")
def dequantize(raw: np.ndarray, ggml_type: int, shape: tuple[int, ...]) -> np.ndarray:
    """Storage array of a GGUF tensor -> float32 array of numpy ``shape`` (ggml dims reversed).

    ``raw`` is what ``gguf.GGUFReader`` exposes: typed values for F32/F16/BF16, block bytes
    for the quantized types. Raises ``ValueError`` for any other type (the loader names the
    tensor).
    """
    n = int(np.prod(shape))
    if ggml_type == GGML_F32:
        out = np.array(raw, dtype=np.float32).reshape(-1)  # a copy: raw may be a read-only memmap
    elif ggml_type == GGML_F16:
        out = np.asarray(raw).view("<f2").astype(np.float32).reshape(-1)
    elif ggml_type == GGML_BF16:
        out = widen_bf16(raw)
    elif ggml_type in BLOCK_FORMATS:
        dequantizer: Callable[[np.ndarray, int], np.ndarray] = globals()[
            BLOCK_FORMATS[ggml_type][1]
        ]
        out = dequantizer(raw, n)
    else:
        raise ValueError(f"unsupported ggml type {ggml_type}")
    if out.size != n:
        raise ValueError(f"{out.size} values for shape {shape}")
    return out.reshape(shape)
