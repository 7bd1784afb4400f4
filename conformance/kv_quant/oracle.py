"""An independent oracle for the per-token KV formats (spec/kv_quant.md QNT-001..QNT-003),
written from the spec in numpy: quantize with fp32 arithmetic exactly as specified (so codes and
scales compare bit for bit) and dequantize.

Nothing here imports ``kernels``: a defect there cannot leak into the oracle.
"""

from __future__ import annotations

from typing import Any

import numpy as np

NF4 = np.array(
    [
        -1.0,
        -0.6961928009986877,
        -0.5250730514526367,
        -0.39491748809814453,
        -0.28444138169288635,
        -0.18477343022823334,
        -0.09105003625154495,
        0.0,
        0.07958029955625534,
        0.16093020141124725,
        0.24611230194568634,
        0.33791524171829224,
        0.44070982933044434,
        0.5626170039176941,
        0.7229568362236023,
        1.0,
    ],
    dtype=np.float32,
)
NF4_MID = ((NF4[:-1] + NF4[1:]) * np.float32(0.5)).astype(np.float32)
QMAX = {"q8_0": 127.0, "q4_0": 7.0, "nf4": 1.0}
FLOOR = np.float16(2.0**-14)


def _round_half_away(y: np.ndarray) -> np.ndarray:
    return np.sign(y) * np.floor(np.abs(y) + y.dtype.type(0.5))


def quantize(
    x: np.ndarray, kind: str, qblock: int, compute: Any = np.float32
) -> tuple[np.ndarray, np.ndarray]:
    """(codes, scales) per the spec: q8_0 int8 codes; q4_0/nf4 packed uint8; fp16 scales.

    ``compute`` is the dtype x is converted to and the rule evaluated in: the spec's fp32, or
    another (a test's check that its inputs tell the fp32 rule apart from that dtype's)."""
    x = np.asarray(x, dtype=compute)
    dim = x.shape[-1]
    pad = -(-dim // qblock) * qblock
    xp = np.zeros((*x.shape[:-1], pad), dtype=compute)
    xp[..., :dim] = x
    blocks = xp.reshape(*x.shape[:-1], pad // qblock, qblock)
    amax = np.abs(blocks).max(axis=-1)
    scale = np.maximum((amax / x.dtype.type(QMAX[kind])).astype(np.float16), FLOOR)
    y = (blocks / scale.astype(compute)[..., None]).astype(compute)
    if kind == "q8_0":
        codes = np.clip(_round_half_away(y), -127, 127).astype(np.int8).reshape(*x.shape[:-1], pad)
        return codes, scale
    if kind == "q4_0":
        u = (np.clip(_round_half_away(y), -8, 7) + 8).astype(np.uint8)
    else:
        yc = np.clip(y, -1.0, 1.0)
        u = (yc[..., None] > NF4_MID).sum(axis=-1).astype(np.uint8)
    u = u.reshape(*x.shape[:-1], pad)
    packed = ((u[..., 0::2] << 4) | u[..., 1::2]).astype(np.uint8)
    return packed, scale


def code_values(codes: np.ndarray, kind: str) -> np.ndarray:
    """Per-element multipliers of the scale, ``[..., pad_dim]`` float64."""
    codes = np.asarray(codes)
    if kind == "q8_0":
        return codes.astype(np.int8).astype(np.float64)
    b = codes.astype(np.uint8)
    u = np.empty((*b.shape[:-1], b.shape[-1] * 2), dtype=np.uint8)
    u[..., 0::2] = b >> 4  # even element: high nibble
    u[..., 1::2] = b & 0xF
    if kind == "q4_0":
        return u.astype(np.float64) - 8.0
    return NF4.astype(np.float64)[u]


def dequantize(
    codes: np.ndarray, scales: np.ndarray, kind: str, qblock: int, dim: int
) -> np.ndarray:
    vals = code_values(codes, kind)
    lead = vals.shape[:-1]
    nb = np.asarray(scales).shape[-1]
    vals = vals.reshape(*lead, nb, qblock) * np.asarray(scales, dtype=np.float64)[..., None]
    return vals.reshape(*lead, nb * qblock)[..., :dim]


def half_step_bound(scales: np.ndarray, kind: str) -> np.ndarray:
    """Largest error allowed per block: half a quantization step (nf4: half the widest gap)."""
    s = np.asarray(scales, dtype=np.float64)
    if kind == "nf4":
        return s * float(np.max(np.diff(NF4.astype(np.float64)))) / 2.0
    return s / 2.0
