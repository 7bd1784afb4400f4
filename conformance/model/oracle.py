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

``gemma3`` (llama.cpp ``src/models/gemma3.cpp``): x_0 = E[token] * sqrt(n_embd); q and k
(their optional biases added) are RMS-normalized per head (weights attn_q_norm / attn_k_norm)
before NEOX RoPE; the attention output and the FFN output are RMS-normalized
(post_attention_norm / post_ffw_norm) before their residual adds; the FFN is
gelu(Wgate m) * (Wup m) with ggml's GELU (the tanh approximation evaluated on the
float16-rounded input, rounded to float16); with ``attention.sliding_window``
= w > 0 the layers il % 6 < 5 (or those of ``attention.sliding_window_pattern``) attend only
to keys at positions t' > t - w and rotate with base ``rope.freq_base_swa`` (10000); a
``final_logit_softcapping`` c maps the logits to c * tanh(logits / c).

``qwen2vl``: qwen2 with M-RoPE: each row has 4 positions (time, height, width, extra) and pair
j of a head (NEOX layout) turns by pos[plane] * base^(-2j/head_dim), plane the section of
``rope.dimension_sections`` holding j mod sum(sections); a token's position is on every plane.
Its RMSNorms use epsilon 0 (llama.cpp 0.3.36 does not read the key for qwen2vl).

``bert`` (llama.cpp ``src/models/bert.cpp``; :func:`bert_embeddings`): an encoder with
LayerNorm ``LN(x) = (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) * g + b``:

    x_0 = LN(E[token] + T[0] + P[pos])      (T: token_types, only row 0; P: position_embd)
    per layer:  a_h = softmax_{all t' of the sequence}(q_h . k_h,t' / sqrt(head_dim)) v_h,t'
                with q, k, v = Wq x + bq, Wk x + bk, Wv x + bv (no rotation)
                h = LN(Wo a + bo + x)                          (attn_output_norm)
                x = LN(Wdown gelu(Wup h + bup) + bdown + h)    (layer_output_norm)
    embeddings = x (no final norm, no output head)
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
    gemma3: bool = False
    n_swa: int = 0  # gemma3: the window of the sliding layers (0: none)
    swa_layers: tuple[bool, ...] = ()
    freq_base_swa: float = 10000.0
    softcap: float = 0.0
    sections: tuple[int, ...] = ()  # qwen2vl: M-RoPE pairs per plane


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
    head_dim = int(_scalar(reader, f"{arch}.attention.key_length", n_embd // n_head))
    n_layer = int(_scalar(reader, f"{arch}.block_count"))
    n_swa = int(_scalar(reader, f"{arch}.attention.sliding_window", 0))
    pattern = _scalar(reader, f"{arch}.attention.sliding_window_pattern", 6)
    if isinstance(pattern, list):
        swa_layers = tuple(bool(f) for f in pattern)
    else:
        swa_layers = tuple(
            int(pattern) == 0 or il % int(pattern) < int(pattern) - 1 for il in range(n_layer)
        )
    for name in [n for n in tensors if ".attn_qkv." in n]:
        fused = tensors.pop(name)
        ends = np.cumsum([n_head * head_dim, n_head_kv * head_dim])
        for part, values in zip(("attn_q", "attn_k", "attn_v"), np.split(fused, ends)):
            tensors[name.replace("attn_qkv", part)] = values
    return OracleModel(
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        # qwen2vl: llama.cpp 0.3.36 never reads the epsilon, so its RMSNorms use 0
        eps=0.0
        if arch == "qwen2vl"
        else float(_scalar(reader, f"{arch}.attention.layer_norm_epsilon"))
        if arch == "bert"  # LayerNorm
        else float(_scalar(reader, f"{arch}.attention.layer_norm_rms_epsilon")),
        freq_base=float(_scalar(reader, f"{arch}.rope.freq_base", 10000.0)),
        tensors=tensors,
        neox=arch in ("qwen2", "gemma3", "qwen2vl"),
        sections=tuple(int(x) for x in _scalar(reader, f"{arch}.rope.dimension_sections", [])),
        gemma3=arch == "gemma3",
        n_swa=n_swa if arch == "gemma3" else 0,
        swa_layers=swa_layers if arch == "gemma3" and n_swa > 0 else (False,) * n_layer,
        freq_base_swa=float(_scalar(reader, f"{arch}.rope.freq_base_swa", 10000.0)),
        softcap=float(_scalar(reader, f"{arch}.final_logit_softcapping", 0.0)),
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


def _gelu_ggml(x: np.ndarray) -> np.ndarray:
    """ggml's GELU: tanh approximation on the float16-rounded input, rounded to float16
    (0 at or below -10, the identity at or above 10)."""
    xh = x.astype(np.float16).astype(np.float64)
    y = 0.5 * xh * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * xh * (1.0 + 0.044715 * xh * xh)))
    y = y.astype(np.float16).astype(np.float64)
    return np.where(x <= -10.0, 0.0, np.where(x >= 10.0, x, y))


def _rope_mrope(
    vec: np.ndarray, planes: np.ndarray, base: float, sections: tuple[int, ...]
) -> np.ndarray:
    """M-RoPE of one head vector (NEOX pairs): pair j turns by the position of the plane
    whose section holds j mod sum(sections) (sections: time, height, width, extra)."""
    d = vec.shape[0]
    out = vec.copy()
    bounds = np.cumsum(sections)
    for j in range(d // 2):
        plane = int(np.searchsorted(bounds, j % bounds[-1], side="right"))
        theta = planes[plane] * base ** (-2.0 * j / d)
        c, s = np.cos(theta), np.sin(theta)
        x0, x1 = vec[j], vec[j + d // 2]
        out[j] = x0 * c - x1 * s
        out[j + d // 2] = x0 * s + x1 * c
    return out


def forward(
    path: str | os.PathLike[str],
    tokens: list[int],
    *,
    embd: np.ndarray | None = None,
    planes: np.ndarray | None = None,
) -> np.ndarray:
    """float64 logits ``[n_tokens, n_vocab]`` for ``tokens`` at positions ``0..n-1``. For
    qwen2vl, ``embd`` rows may replace the tokens (pass ``tokens=[]``) and ``planes``
    ``[4, n]`` give each row's M-RoPE positions (default: ``0..n-1`` on every plane); rows
    attend causally in their order."""
    m = load(str(path))
    if m.gemma3:
        return _forward_gemma3(m, tokens)
    w = m.tensors
    hd = m.head_dim
    group = m.n_head // m.n_head_kv
    if embd is not None:
        xs = [np.asarray(row, dtype=np.float64) for row in embd]
    else:
        xs = [w["token_embd.weight"][t].copy() for t in tokens]
    if planes is None:
        planes = np.tile(np.arange(len(xs)), (4, 1))
    factors = w.get("rope_freqs.weight")

    def rope(vec: np.ndarray, pos: int) -> np.ndarray:
        if m.sections:
            return _rope_mrope(vec, planes[:, pos], m.freq_base, m.sections)
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


def _forward_gemma3(m: OracleModel, tokens: list[int]) -> np.ndarray:
    """The gemma3 forward (see the module docstring), token by token and head by head."""
    w = m.tensors
    hd = m.head_dim
    group = m.n_head // m.n_head_kv
    xs = [w["token_embd.weight"][t] * np.sqrt(m.n_embd) for t in tokens]
    for il in range(m.n_layer):
        p = f"blk.{il}."
        sliding = m.swa_layers[il]
        base = m.freq_base_swa if sliding else m.freq_base
        queries, keys, vals = [], [], []
        for pos, x in enumerate(xs):
            h = _rmsnorm(x, w[p + "attn_norm.weight"], m.eps)
            q = _linear(w, p + "attn_q", h).reshape(m.n_head, hd)
            k = _linear(w, p + "attn_k", h).reshape(m.n_head_kv, hd)
            v = _linear(w, p + "attn_v", h).reshape(m.n_head_kv, hd)
            qn = [_rmsnorm(q[i], w[p + "attn_q_norm.weight"], m.eps) for i in range(m.n_head)]
            kn = [_rmsnorm(k[i], w[p + "attn_k_norm.weight"], m.eps) for i in range(m.n_head_kv)]
            queries.append([_rope(r, pos, base, neox=True) for r in qn])
            keys.append([_rope(r, pos, base, neox=True) for r in kn])
            vals.append(v)
        new_xs = []
        for t, x in enumerate(xs):
            seen = [s for s in range(t + 1) if not (sliding and t - s >= m.n_swa)]
            heads = []
            for head in range(m.n_head):
                kv = head // group
                scores = np.array([queries[t][head] @ keys[s][kv] for s in seen]) / np.sqrt(hd)
                probs = np.exp(scores - scores.max())
                probs /= probs.sum()
                heads.append(sum(pr * vals[s][kv] for pr, s in zip(probs, seen)))
            attn = w[p + "attn_output.weight"] @ np.concatenate(heads)
            x = x + _rmsnorm(attn, w[p + "post_attention_norm.weight"], m.eps)
            h = _rmsnorm(x, w[p + "ffn_norm.weight"], m.eps)
            act = _gelu_ggml(w[p + "ffn_gate.weight"] @ h) * (w[p + "ffn_up.weight"] @ h)
            ffn = w[p + "ffn_down.weight"] @ act
            new_xs.append(x + _rmsnorm(ffn, w[p + "post_ffw_norm.weight"], m.eps))
        xs = new_xs
    out = np.stack([w["output.weight"] @ _rmsnorm(x, w["output_norm.weight"], m.eps) for x in xs])
    return m.softcap * np.tanh(out / m.softcap) if m.softcap else out


def _layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    centered = x - x.mean()
    return centered / np.sqrt(np.mean(centered * centered) + eps) * g + b


def bert_embeddings(
    path: str | os.PathLike[str], tokens: list[int], positions: list[int] | None = None
) -> np.ndarray:
    """float64 hidden states ``[n_tokens, n_embd]`` of one bert sequence (every token attends
    to every token), at ``positions`` (default ``0..n-1``)."""
    m = load(str(path))
    w = m.tensors
    hd = m.head_dim
    pos = list(range(len(tokens))) if positions is None else list(positions)
    types = w.get("token_types.weight")
    xs = []
    for t, p in zip(tokens, pos):
        x = w["token_embd.weight"][t] + w["position_embd.weight"][p]
        if types is not None:
            x = x + types[0]
        xs.append(_layer_norm(x, w["token_embd_norm.weight"], w["token_embd_norm.bias"], m.eps))
    for il in range(m.n_layer):
        p_ = f"blk.{il}."
        qs = [_linear(w, p_ + "attn_q", x).reshape(m.n_head, hd) for x in xs]
        ks = [_linear(w, p_ + "attn_k", x).reshape(m.n_head_kv, hd) for x in xs]
        vs = [_linear(w, p_ + "attn_v", x).reshape(m.n_head_kv, hd) for x in xs]
        group = m.n_head // m.n_head_kv
        new_xs = []
        for t, x in enumerate(xs):
            heads = []
            for head in range(m.n_head):
                kv = head // group
                scores = np.array([qs[t][head] @ k[kv] for k in ks]) / np.sqrt(hd)
                probs = np.exp(scores - scores.max())
                probs /= probs.sum()
                heads.append(sum(pr * v[kv] for pr, v in zip(probs, vs)))
            a = _linear(w, p_ + "attn_output", np.concatenate(heads)) + x
            h = _layer_norm(
                a, w[p_ + "attn_output_norm.weight"], w[p_ + "attn_output_norm.bias"], m.eps
            )
            f = _linear(w, p_ + "ffn_down", _gelu_ggml(_linear(w, p_ + "ffn_up", h))) + h
            new_xs.append(
                _layer_norm(
                    f, w[p_ + "layer_output_norm.weight"], w[p_ + "layer_output_norm.bias"], m.eps
                )
            )
        xs = new_xs
    return np.stack(xs)
