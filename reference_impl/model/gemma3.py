"""The gemma3 forward pass (torch, CPU, float32), mirroring llama.cpp's ``src/models/gemma3.cpp``.

It is the llama forward (:class:`~reference_impl.model.llama.LlamaForward`: inputs, masks,
the cached ubatch step, the K-shift) with gemma3's layer::

    x = E[token] · sqrt(n_embd)                       (token input only; embeddings as given)
    per layer:  h = rmsnorm(x) · attn_norm
                q, k, v = Wq h + bq, Wk h + bk, Wv h + bv   (per head; biases optional)
                q = rope(rmsnorm(q) · q_norm), k = rope(rmsnorm(k) · k_norm)   (NEOX pairs)
                x = x + rmsnorm(Wo attn(q, k, v)) · post_attention_norm
                m = rmsnorm(x) · ffn_norm
                x = x + rmsnorm(Wdown (gelu(Wgate m) ⊙ Wup m)) · post_ffw_norm
    logits = Wout (rmsnorm(x) · output_norm), then cap · tanh(logits / cap) with a softcap

The sliding-window layers (``HParams.swa_layers``) attend through their own mask (the caller's
``kq_mask_swa``; the window rule in :func:`~reference_impl.model.llama.sliding_causal_mask`
for a whole sequence) and rotate with ``rope_freq_base_swa``; the other layers are global.
Attention scales Q·K by ``HParams.kq_scale`` (llama.cpp scales Q before the product).

GELU is ggml's: the tanh approximation looked up in a float16 table (ggml-cpu defines
``GGML_GELU_FP16``): the input rounded to float16, the result rounded to float16, 0 at or
below -10 and the identity at or above 10. Computing it in float32 instead moves the logits by
about 1e-7 NMSE against llama.cpp.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from reference_impl.model.gguf_loader import HParams, ModelWeights
from reference_impl.model.llama import (
    AttentionFn,
    LlamaForward,
    RopeCache,
    fuse_qkv_bias,
    normed_matmul,
    resolve_output,
    rms_norm,
    rope_function,
    sdpa_attention,
    sliding_rope,
)
from reference_impl.spec_links import implements

_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715


@implements("GGUF-049")
def gelu_ggml(x: torch.Tensor) -> torch.Tensor:
    """ggml's float32 GELU: ``0.5·x·(1 + tanh(sqrt(2/pi)·x·(1 + 0.044715·x²)))`` on the
    float16-rounded input, rounded to float16; 0 for ``x <= -10``, ``x`` for ``x >= 10``."""
    xh = x.to(torch.float16).to(torch.float32)
    y = 0.5 * xh * (1.0 + torch.tanh(_GELU_C * xh * (1.0 + _GELU_A * xh * xh)))
    y = y.to(torch.float16).to(torch.float32)
    return torch.where(x <= -10.0, torch.zeros_like(x), torch.where(x >= 10.0, x, y))


@implements("GGUF-049")
def embed_scale(hp: HParams) -> float:
    """The factor on token embeddings: ``sqrtf(n_embd)`` (float32, as ggml_scale)."""
    return float(np.sqrt(np.float32(hp.n_embd), dtype=np.float32))


@implements("GGUF-050")
def softcap_logits(logits: torch.Tensor, cap: float) -> torch.Tensor:
    """``cap · tanh(logits / cap)`` (llama.cpp: scale by 1/cap, tanh, scale by cap); no cap
    when ``cap`` is 0."""
    if cap == 0.0:
        return logits
    return torch.tanh(logits * float(np.float32(1.0 / cap))) * cap


@dataclass(frozen=True)
class Gemma3Layer:
    """One gemma3 block as the forward uses it (matrices transposed for ``x @ W``; the
    pre-norm weights folded into the matrices after them, as in the llama forward)."""

    # [n_embd, n_embd_q + 2·n_embd_k_gqa]: (cat(Wq, Wk, Wv)·diag(attn_norm))ᵀ
    wqkv_t: torch.Tensor
    q_norm: torch.Tensor  # [head_dim]
    k_norm: torch.Tensor  # [head_dim]
    wo_t: torch.Tensor  # [n_embd_q, n_embd]
    attn_post_norm: torch.Tensor  # [n_embd]
    w_gate_up_t: torch.Tensor  # [n_embd, 2·n_ff]: (cat(Wgate, Wup)·diag(ffn_norm))ᵀ
    w_down_t: torch.Tensor  # [n_ff, n_embd]
    ffn_post_norm: torch.Tensor  # [n_embd]
    # cat(bq, bk, bv) (a missing part zeros), or None: optional Q/K/V biases, added before the
    # per-head Q/K norms (llama.cpp's build_qkv, then attn_q_norm / attn_k_norm)
    b_qkv: torch.Tensor | None = None


def _required(t: torch.Tensor | None, name: str) -> torch.Tensor:
    if t is None:  # the loader requires gemma3's norms; a ModelWeights built by hand may not
        raise ValueError(f"a gemma3 layer needs {name}")
    return t


class Gemma3Forward(LlamaForward):
    """The gemma3 graph over dequantized float32 weights."""

    def __init__(self, weights: ModelWeights, attention: AttentionFn | None = None) -> None:
        self.hparams: HParams = weights.hparams
        self.attention: AttentionFn = attention if attention is not None else sdpa_attention
        self.token_embd = weights.token_embd
        self.output_norm = weights.output_norm
        self.output = resolve_output(weights)
        # gemma3's own layer record where the llama forward keeps FusedLayers
        self.layers = tuple(
            Gemma3Layer(  # type: ignore[misc]
                wqkv_t=(torch.cat([lw.wq, lw.wk, lw.wv], dim=0) * lw.attn_norm).t(),
                q_norm=_required(lw.attn_q_norm, "attn_q_norm"),
                k_norm=_required(lw.attn_k_norm, "attn_k_norm"),
                wo_t=lw.wo.t(),
                attn_post_norm=_required(lw.attn_post_norm, "post_attention_norm"),
                w_gate_up_t=(torch.cat([lw.ffn_gate, lw.ffn_up], dim=0) * lw.ffn_norm).t(),
                w_down_t=lw.ffn_down.t(),
                ffn_post_norm=_required(lw.ffn_post_norm, "post_ffw_norm"),
                b_qkv=fuse_qkv_bias(lw),
            )
            for lw in weights.layers
        )
        self.rope_freqs = None
        self.rope = RopeCache(self.hparams.n_rot, self.hparams.rope_freq_base)
        self.rope_swa = sliding_rope(self.hparams)
        self.scale = embed_scale(self.hparams)

    def embed(self, tokens: torch.Tensor | Sequence[int] | np.ndarray) -> torch.Tensor:
        """Token embeddings ``[n, n_embd]`` times ``sqrt(n_embd)``."""
        return super().embed(tokens) * self.scale

    @implements("GGUF-049", "GGUF-020")
    def _run(
        self,
        x: torch.Tensor,
        positions: np.ndarray,
        attend: Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
        output_rows: torch.Tensor | None,
    ) -> torch.Tensor:
        hp = self.hparams
        n = x.shape[0]
        eps = hp.rms_eps
        n_head, n_head_kv, hd = hp.n_head, hp.n_head_kv, hp.head_dim
        n_q, n_k = n_head * hd, n_head_kv * hd
        rope = rope_function(hp)
        rot_global = self.rope.rotations(positions)
        rot_swa = rot_global if self.rope_swa is None else self.rope_swa.rotations(positions)
        last = len(self.layers) - 1
        for il, layer in enumerate(self.layers):
            assert isinstance(layer, Gemma3Layer)
            rot = rot_swa if hp.is_swa(il) else rot_global
            qkv = normed_matmul(x, layer.wqkv_t, eps)
            if layer.b_qkv is not None:
                qkv.add_(layer.b_qkv)
            q = rms_norm(qkv[:, :n_q].reshape(n, n_head, hd), layer.q_norm, eps)
            k = rms_norm(qkv[:, n_q : n_q + n_k].reshape(n, n_head_kv, hd), layer.k_norm, eps)
            v = qkv[:, n_q + n_k :].reshape(n, n_head_kv, hd)
            o = attend(il, rope(q, rot), rope(k, rot), v)
            if il == last and output_rows is not None:
                o = o.index_select(0, output_rows)
                x = x.index_select(0, output_rows)
            x = x + post_norm(o @ layer.wo_t, layer.attn_post_norm, eps)
            gate_up = normed_matmul(x, layer.w_gate_up_t, eps)
            n_ff = layer.w_down_t.shape[0]
            act = gelu_ggml(gate_up[:, :n_ff]) * gate_up[:, n_ff:]
            x = x + post_norm(act @ layer.w_down_t, layer.ffn_post_norm, eps)
        return rms_norm(x, self.output_norm, eps)

    def logits_from_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        return softcap_logits(super().logits_from_hidden(hidden), self.hparams.logit_softcap)


@implements("GGUF-049")
def post_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """gemma3's norm of a block's output before the residual add (attention and FFN)."""
    return rms_norm(x, weight, eps)
