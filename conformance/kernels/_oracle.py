"""Independent oracles for the kernels area, written from the spec in numpy.

* Per-token formats (spec/kv_quant.md QNT-001..QNT-003): quantize with fp32 arithmetic exactly
  as specified (so codes and scales compare bit for bit) and dequantize.
* Attention: dense float64 softmax over explicitly dequantized keys/values, so neither the
  fused kernels nor the streaming reference is its own judge.

Nothing here imports ``kernels``: a defect there cannot leak into the oracle.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    return (np.sign(y) * np.floor(np.abs(y) + np.float32(0.5))).astype(np.float32)


def quantize(x: np.ndarray, kind: str, qblock: int) -> tuple[np.ndarray, np.ndarray]:
    """(codes, scales) per the spec: q8_0 int8 codes; q4_0/nf4 packed uint8; fp16 scales."""
    x = np.asarray(x, dtype=np.float32)
    dim = x.shape[-1]
    pad = -(-dim // qblock) * qblock
    xp = np.zeros((*x.shape[:-1], pad), dtype=np.float32)
    xp[..., :dim] = x
    blocks = xp.reshape(*x.shape[:-1], pad // qblock, qblock)
    amax = np.abs(blocks).max(axis=-1)
    scale = np.maximum((amax / np.float32(QMAX[kind])).astype(np.float32).astype(np.float16), FLOOR)
    y = (blocks / scale.astype(np.float32)[..., None]).astype(np.float32)
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


# ---------------------------------------------------------------------------------------------
# Attention
# ---------------------------------------------------------------------------------------------


def softmax_attend(s: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``s [..., n]`` logits (-inf allowed), ``v [..., n, dv]`` -> ``[..., dv]``; 0 if all -inf."""
    s = np.asarray(s, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    if s.shape[-1] == 0:
        return np.zeros((*s.shape[:-1], v.shape[-1]))
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isneginf(m), 0.0, m)
    p = np.exp(s - m)
    den = p.sum(axis=-1, keepdims=True)
    num = np.einsum("...n,...nd->...d", p, v)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)


def gqa(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray, scale: float) -> np.ndarray:
    """``q [T,H,D]``, ``k [n,Hkv,D]``, ``v [n,Hkv,Dv]``, ``mask [T,n]`` -> ``[T,H,Dv]`` float64."""
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    n_head, n_kv_head = q.shape[1], k.shape[1]
    kv_of = np.arange(n_head) // (n_head // n_kv_head)
    kk = k[:, kv_of]  # [n, H, D]
    vv = v[:, kv_of]
    s = np.einsum("thd,nhd->thn", q, kk) * scale + np.asarray(mask, dtype=np.float64)[:, None, :]
    per_head = vv.transpose(1, 0, 2)  # [H, n, Dv]
    return softmax_attend(s, np.broadcast_to(per_head[None], (q.shape[0], *per_head.shape)))


@dataclass
class DecoupledInputs:
    """Everything a decoupled decode reads, as float64 arrays per head.

    ``k_sem [B,H,n,ds]``, ``k_geo [B,H,n,dg]``, ``v [B,H,n,dv]`` hold the keys the decode must
    attend (dequantized prefix followed by the exact tail); ``null`` is ``None`` or
    ``(k_sem [B,H,ds], k_geo [B,H,dg], v [B,H,dv])``.
    """

    k_sem: np.ndarray
    k_geo: np.ndarray
    v: np.ndarray
    null: tuple[np.ndarray, np.ndarray, np.ndarray] | None


def decoupled(
    q_sem: np.ndarray,
    q_geo: np.ndarray,
    inp: DecoupledInputs,
    sem_scale: float,
    geo_scale: float,
) -> np.ndarray:
    """Dense decoupled attention ``[B, H, dv]`` (float64)."""
    qs = np.asarray(q_sem, dtype=np.float64)
    qg = np.asarray(q_geo, dtype=np.float64)
    s = np.einsum("bhd,bhnd->bhn", qs, inp.k_sem) * sem_scale
    s = s + np.einsum("bhd,bhnd->bhn", qg, inp.k_geo) * geo_scale
    v = inp.v
    if inp.null is not None:
        ks, kg, vn = inp.null
        s_null = (
            np.einsum("bhd,bhd->bh", qs, ks) * sem_scale
            + np.einsum("bhd,bhd->bh", qg, kg) * geo_scale
        )
        s = np.concatenate([s_null[..., None], s], axis=-1)
        v = np.concatenate([vn[:, :, None, :], v], axis=2)
    return softmax_attend(s, v)


def heads(x: np.ndarray, n_head: int) -> np.ndarray:
    """``[B, n, H*hd] -> [B, H, n, hd]``."""
    b, n, width = x.shape
    return x.reshape(b, n, n_head, width // n_head).transpose(0, 2, 1, 3)
