"""An independent float64 llama forward written directly from the math (the test oracle).

It shares no code with ``reference_impl``: weights come from ``gguf.GGUFReader`` and
``gguf.quants.dequantize``; every step is a plain numpy loop over tokens and heads:

    x_0 = E[token]
    per layer:  h = x / sqrt(mean(x^2) + eps) * g_attn
                q, k, v = Wq h, Wk h, Wv h       (per head, head_dim values)
                rotate (q[2j], q[2j+1]) and (k[2j], k[2j+1]) by pos * base^(-2j/head_dim)
                a_h = softmax_{t' <= t}(q_h . k_{kv(h),t'} / sqrt(head_dim)) v_{kv(h),t'}
                with kv(h) = h // (n_head / n_head_kv)
                x += Wo a
                m = x / sqrt(mean(x^2) + eps) * g_ffn
                x += Wdown (silu(Wgate m) * (Wup m))
    logits = Wout (x / sqrt(mean(x^2) + eps) * g_out),  Wout = E when output.weight is absent

Optional tensors and architecture variants, straight from their definitions: a ``.bias`` is
added to its matrix's product; a fused ``attn_qkv`` is Q's rows, then K's, then V's;
``rope_freqs`` divides pair j's angle by rope_freqs[j]; ``qwen2`` rotates the NEOX pairs
(q[j], q[j + head_dim/2]) instead of adjacent ones.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import gguf
import numpy as np

# The one NMSE of the suite; this name stays for the differential tests that import it here.


@dataclass(frozen=True)
class OracleModel:
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    eps: float
    freq_base: float
    tensors: dict[str, np.ndarray]  # float64, numpy shapes
    neox: bool = False


def _scalar(reader: Any, key: str, default: Any = None) -> Any:
    f = reader.get_field(key)
    if f is None:
        return default
    return f.contents()


@lru_cache(maxsize=16)
def load(path: str | os.PathLike[str]) -> OracleModel:
    reader = gguf.GGUFReader(str(path))
    arch = _scalar(reader, "general.architecture")
    n_embd = int(_scalar(reader, f"{arch}.embedding_length"))
    n_head = int(_scalar(reader, f"{arch}.attention.head_count"))
    tensors = {}
    for t in reader.tensors:
        values = gguf.quants.dequantize(t.data, t.tensor_type)
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        tensors[t.name] = np.asarray(values, dtype=np.float64).reshape(shape)
    if "output.weight" not in tensors:
        tensors["output.weight"] = tensors["token_embd.weight"]
    n_head_kv = int(_scalar(reader, f"{arch}.attention.head_count_kv", n_head))
    head_dim = n_embd // n_head
    for name in [n for n in tensors if ".attn_qkv." in n]:
        fused = tensors.pop(name)
        ends = np.cumsum([n_head * head_dim, n_head_kv * head_dim])
        for part, values in zip(("attn_q", "attn_k", "attn_v"), np.split(fused, ends)):
            tensors[name.replace("attn_qkv", part)] = values
    return OracleModel(
        n_embd=n_embd,
        n_layer=int(_scalar(reader, f"{arch}.block_count")),
        n_head=n_head,
        n_head_kv=int(_scalar(reader, f"{arch}.attention.head_count_kv", n_head)),
        head_dim=n_embd // n_head,
        eps=float(_scalar(reader, f"{arch}.attention.layer_norm_rms_epsilon")),
        freq_base=float(_scalar(reader, f"{arch}.rope.freq_base", 10000.0)),
        tensors=tensors,
        neox=arch == "qwen2",
    )


def _rmsnorm(x: np.ndarray, g: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x) + eps) * g


def _rope(
    vec: np.ndarray, pos: int, base: float, factors: np.ndarray | None = None, neox: bool = False
) -> np.ndarray:
    """Rotate the pairs of one head vector: adjacent (2j, 2j+1), or (j, j+d/2) for NEOX."""
    d = vec.shape[0]
    out = vec.copy()
    for j in range(d // 2):
        theta = pos * base ** (-2.0 * j / d)
        if factors is not None:
            theta /= factors[j]
        c, s = np.cos(theta), np.sin(theta)
        a, b = (j, j + d // 2) if neox else (2 * j, 2 * j + 1)
        x0, x1 = vec[a], vec[b]
        out[a] = x0 * c - x1 * s
        out[b] = x0 * s + x1 * c
    return out


def _linear(w: dict[str, np.ndarray], name: str, x: np.ndarray) -> np.ndarray:
    """``W x (+ b)`` for the tensor ``<name>.weight`` and its optional ``<name>.bias``."""
    y = w[name + ".weight"] @ x
    bias = w.get(name + ".bias")
    return y if bias is None else y + bias


def forward(path: str | os.PathLike[str], tokens: list[int]) -> np.ndarray:
    """float64 logits ``[n_tokens, n_vocab]`` for ``tokens`` at positions ``0..n-1``."""
    m = load(str(path))
    w = m.tensors
    hd = m.head_dim
    group = m.n_head // m.n_head_kv
    xs = [w["token_embd.weight"][t].copy() for t in tokens]
    factors = w.get("rope_freqs.weight")

    def rope(vec: np.ndarray, pos: int) -> np.ndarray:
        return _rope(vec, pos, m.freq_base, factors, m.neox)

    for il in range(m.n_layer):
        p = f"blk.{il}."
        keys: list[np.ndarray] = []  # [n_head_kv, hd] per token
        vals: list[np.ndarray] = []
        queries: list[np.ndarray] = []
        for pos, x in enumerate(xs):
            h = _rmsnorm(x, w[p + "attn_norm.weight"], m.eps)
            q = _linear(w, p + "attn_q", h).reshape(m.n_head, hd)
            k = _linear(w, p + "attn_k", h).reshape(m.n_head_kv, hd)
            v = _linear(w, p + "attn_v", h).reshape(m.n_head_kv, hd)
            queries.append(np.stack([rope(q[i], pos) for i in range(m.n_head)]))
            keys.append(np.stack([rope(k[i], pos) for i in range(m.n_head_kv)]))
            vals.append(v)
        new_xs = []
        for t, x in enumerate(xs):
            heads = []
            for head in range(m.n_head):
                kv = head // group
                scores = np.array([queries[t][head] @ keys[s][kv] for s in range(t + 1)])
                scores = scores / np.sqrt(hd)
                probs = np.exp(scores - scores.max())
                probs /= probs.sum()
                heads.append(sum(probs[s] * vals[s][kv] for s in range(t + 1)))
            x = x + _linear(w, p + "attn_output", np.concatenate(heads))
            h = _rmsnorm(x, w[p + "ffn_norm.weight"], m.eps)
            gate = _linear(w, p + "ffn_gate", h)
            up = _linear(w, p + "ffn_up", h)
            x = x + _linear(w, p + "ffn_down", gate / (1.0 + np.exp(-gate)) * up)
            new_xs.append(x)
        xs = new_xs
    out = [w["output.weight"] @ _rmsnorm(x, w["output_norm.weight"], m.eps) for x in xs]
    return np.stack(out)
