"""GGML tensor storage types to float32.

Written from the block layouts (ggml ``ggml-common.h``, ``ggml-quants.c``), independently of
``gguf.quants``, which the tests use as the oracle. Each quantized format has one function that
takes the raw bytes of ``n_values / block_size`` blocks and returns ``n_values`` float32 values,
vectorised over blocks: the block is a row of a ``[n_blocks, block_bytes]`` uint8 array, its
fields are column slices.

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
BF16        2/1    the upper 16 bits of a float32
=========  ======  =======================================================================

The IQ1/IQ2/IQ3 formats index large codebooks (ggml ``iq2xxs_grid`` ...) and are not
implemented here; nor is Q8_K (llama.cpp uses it only for activations).
"""

from __future__ import annotations

from collections.abc import Callable

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

# IQ4_NL / IQ4_XS: the 16 non-linear levels a 4-bit index selects (ggml ``kvalues_iq4nl``).
IQ4_GRID = np.array(
    [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int8
)
# MXFP4: the E2M1 values doubled to integers (ggml ``kvalues_mxfp4``); the scale is halved.
MXFP4_GRID = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.int8)


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


# -- 256-value super-blocks -------------------------------------------------------------------


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
