"""Independent attention oracles for the kernels area, written from the spec in numpy: dense
float64 softmax over explicitly dequantized keys/values, so neither the fused kernels nor the
streaming reference is its own judge.

Nothing here imports ``kernels``: a defect there cannot leak into the oracle.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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
