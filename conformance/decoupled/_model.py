"""Shared pieces of the decoupled-model tests: tiny configurations, tokens, and float64
oracles written from spec/decoupled.md (RoPE, gate, temperature), independent of the target."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

# Tiny enough for Triton's interpreter: d_model 64, 2 layers, 2 heads, vocab 64; per-head dims
# 16 (sem), 16 (geo), 32 (v) are powers of two, so the fused kernels are eligible.
TINY: dict[str, Any] = {
    "vocab": 64,
    "d_model": 64,
    "n_layer": 2,
    "n_head": 2,
    "d_sem": 32,
    "d_geo": 32,
    "d_v": 64,
    "d_ff": 128,
}
NULL = {**TINY, "null_attn": True}
# The default config (DBA-030): the fields a config leaves out; its dims are TINY's.
DEFAULT: dict[str, Any] = {
    **TINY,
    "null_attn": False,
    "rope_base": 10000.0,
    "norm_eps": 1e-5,
    "mem_block": 8,
    "local_window": 16,
    "q_chunk": 8,
    "summarizer": "mean",
}
FP32 = "ksem=fp32,kgeo=fp32,v=fp32,resid=0"
FP16 = "ksem=fp16,kgeo=fp16,v=fp16,resid=0"
FUSED = "ksem=q4_0@32,kgeo=q8_0@32,v=q4_0@32,resid={resid}"


def tokens(batch: int, n: int, seed: int, vocab: int = 64) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    out: list[list[int]] = torch.randint(0, vocab, (batch, n), generator=g).tolist()
    return out


def f64(x: Any) -> np.ndarray:
    return np.asarray(x.detach().double().cpu().numpy() if isinstance(x, torch.Tensor) else x)


def heads(x: np.ndarray, n_head: int) -> np.ndarray:
    """[B, T, H·hd] -> [B, H, T, hd]."""
    b, t, _ = x.shape
    return x.reshape(b, t, n_head, -1).transpose(0, 2, 1, 3)


def rope(x: np.ndarray, positions: Any, base: float = 10000.0) -> np.ndarray:
    """Rotate-half RoPE of x [..., T, hd] at positions [T] (float64)."""
    hd = x.shape[-1]
    half = hd // 2
    theta = np.asarray(positions, dtype=np.float64)[:, None] * base ** (-2.0 * np.arange(half) / hd)
    c, s = np.cos(theta), np.sin(theta)
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * c - x2 * s, x1 * s + x2 * c], axis=-1)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def perturb(weights: dict[str, torch.Tensor], names: dict[str, float], seed: int) -> None:
    """Give the named parameters random values of the given scale (in place)."""
    g = torch.Generator().manual_seed(seed)
    for name, scale in names.items():
        weights[name] = torch.randn(weights[name].shape, generator=g) * scale


def expected_queries(
    parts: dict[str, torch.Tensor], w: dict[str, torch.Tensor], layer: int, positions: Any
) -> dict[str, np.ndarray]:
    """The layer's gate and scaled queries from its normed input and weights (DBA-005..007):
    temperature exp(clamp(ls, -8, 8)) on both parts, then q_sem·2g and q_geo·2(1−g), RoPE on
    q_geo only."""
    pre = f"blocks.{layer}.attn."
    x = f64(parts["x"])
    n_head = parts["gate"].shape[-1]
    g = sigmoid(f64(w[pre + "gate_logit"]) + x @ f64(w[pre + "gate_proj.weight"]).T)  # [B,T,H]
    temp = np.exp(np.clip(f64(w[pre + "logit_scale"]), -8.0, 8.0))[None, :, None, None]
    gh = g.transpose(0, 2, 1)[..., None]
    q_sem = heads(x @ f64(w[pre + "q_sem.weight"]).T, n_head) * temp * 2.0 * gh
    q_geo = rope(heads(x @ f64(w[pre + "q_geo.weight"]).T, n_head), positions)
    q_geo = q_geo * temp * 2.0 * (1.0 - gh)
    return {"gate": g, "q_sem": q_sem, "q_geo": q_geo}
