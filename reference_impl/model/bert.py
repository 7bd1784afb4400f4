"""The bert forward pass (torch, CPU, float32), mirroring llama.cpp's ``src/models/bert.cpp``.

An encoder: every token attends to every token of its sequence (the caller's mask; a context
has no memory and encodes, spec/decoder.md DEC-048), and the result is the hidden states, for
embeddings and pooling, not logits. The graph, with ``LN(x) = (x - mean) / sqrt(var + eps)``
times its weight plus its bias::

    x = E[token] + T[0] + P[pos]           (T: token types, row 0 only; P: learned positions)
    x = LN(x) · embd_norm
    per layer:  q, k, v = Wq x + bq, Wk x + bk, Wv x + bv      (per head, no RoPE; a fused
                                                    attn_qkv is Wq, Wk, Wv stacked by rows)
                h = LN(Wo attn(q, k, v) + bo + x) · attn_output_norm        (post-norm)
                x = LN(Wdown gelu(Wup h + bup) + bdown + h) · layer_output_norm
    embeddings = x                          (no final norm, no output head)

llama.cpp cannot be given token types: its graph always adds row 0 of ``token_types``
("sentence A"), so the reference does too. Embedding input (``embd``) replaces ``E[token]``
and still gets ``T[0] + P[pos]``. GELU is ggml's float16-table GELU, shared with gemma3.
The model has no logits: llama.cpp leaves its logits buffer untouched (zero), and so do these.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from reference_impl.errors import BatchError
from reference_impl.model.gemma3 import gelu_ggml
from reference_impl.model.gguf_loader import HParams, ModelWeights, qkv_weights
from reference_impl.model.llama import AttentionFn, LlamaForward, sdpa_attention
from reference_impl.spec_links import implements


@implements("GGUF-052")
def layer_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> torch.Tensor:
    """ggml_norm then the weight and the bias: ``(x - mean) / sqrt(var + eps) · w + b`` over the
    last dimension (population variance)."""
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


@dataclass(frozen=True)
class BertLayer:
    """One bert block (matrices transposed for ``x @ W``; a missing bias is zeros)."""

    wqkv_t: torch.Tensor  # [n_embd, n_embd_q + 2·n_embd_k_gqa]: cat(Wq, Wk, Wv)ᵀ
    b_qkv: torch.Tensor  # cat(bq, bk, bv)
    wo_t: torch.Tensor
    b_o: torch.Tensor
    attn_norm: tuple[torch.Tensor, torch.Tensor]  # attn_output_norm (weight, bias)
    w_up_t: torch.Tensor
    b_up: torch.Tensor
    w_down_t: torch.Tensor
    b_down: torch.Tensor
    out_norm: tuple[torch.Tensor, torch.Tensor]  # layer_output_norm (weight, bias)


def _bias(t: dict[str, torch.Tensor], name: str, size: int) -> torch.Tensor:
    b = t.get(name)
    return torch.zeros(size) if b is None else b


@implements("GGUF-052")
def _layer(t: dict[str, torch.Tensor], il: int, hp: HParams) -> BertLayer:
    # a missing bias is zeros of its matrix's output length (K/V: n_embd_k_gqa under GQA)
    p = f"blk.{il}."
    mats, biases = qkv_weights(hp, t, il)
    return BertLayer(
        wqkv_t=torch.cat(mats, dim=0).t(),
        b_qkv=torch.cat(
            [torch.zeros(w.shape[0]) if b is None else b for w, b in zip(mats, biases)]
        ),
        wo_t=t[p + "attn_output.weight"].t(),
        b_o=_bias(t, p + "attn_output.bias", t[p + "attn_output.weight"].shape[0]),
        attn_norm=(t[p + "attn_output_norm.weight"], t[p + "attn_output_norm.bias"]),
        w_up_t=t[p + "ffn_up.weight"].t(),
        b_up=_bias(t, p + "ffn_up.bias", t[p + "ffn_up.weight"].shape[0]),
        w_down_t=t[p + "ffn_down.weight"].t(),
        b_down=_bias(t, p + "ffn_down.bias", t[p + "ffn_down.weight"].shape[0]),
        out_norm=(t[p + "layer_output_norm.weight"], t[p + "layer_output_norm.bias"]),
    )


@implements("GGUF-052", "GGUF-054")
def input_embeddings(
    x: torch.Tensor,
    positions: np.ndarray,
    pos_embd: torch.Tensor,
    type_embd: torch.Tensor | None,
) -> torch.Tensor:
    """``x + T[0] + P[pos]``: token type 0 for every token (llama.cpp's graph has no token-type
    input), learned absolute positions. A position outside ``[0, n_ctx_train)`` is an error
    (llama.cpp's row lookup asserts; a context refuses such a batch first, DEC-067)."""
    pos = np.asarray(positions, dtype=np.int64).reshape(-1)
    n_pos = pos_embd.shape[0]
    if pos.size and (pos.min() < 0 or pos.max() >= n_pos):
        i = int(np.flatnonzero((pos < 0) | (pos >= n_pos))[0])
        raise BatchError(
            "MODEL_POS_RANGE",
            f"position {int(pos[i])} is outside the position table [0, {n_pos})",
            field="pos",
            index=i,
        )
    if type_embd is not None:
        x = x + type_embd[0]
    return x + pos_embd[torch.from_numpy(pos)]


class BertForward(LlamaForward):
    """The bert graph over float32 weights. It reuses the llama forward's inputs and its
    cached-step entry point (``forward_ubatch``, which a memory-less context's encode calls
    with scratch K/V, the non-causal mask and every row an output); the layers are bert's."""

    def __init__(self, weights: ModelWeights, attention: AttentionFn | None = None) -> None:
        self.hparams: HParams = weights.hparams
        self.attention: AttentionFn = attention if attention is not None else sdpa_attention
        t = weights.tensors
        self.token_embd = weights.token_embd
        self.type_embd = t.get("token_types.weight")  # [n_token_types, n_embd] or None
        self.pos_embd = t["position_embd.weight"]  # [n_ctx_train, n_embd]
        self.embd_norm = (t["token_embd_norm.weight"], t["token_embd_norm.bias"])
        self.layers = tuple(_layer(t, il, self.hparams) for il in range(self.hparams.n_layer))  # type: ignore[misc]
        self.output = torch.empty(0, self.hparams.n_embd)  # no output head
        self.rope_freqs = None
        self.rope_swa = None

    @implements("GGUF-052")
    def _run(
        self,
        x: torch.Tensor,
        positions: np.ndarray,
        attend: Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
        output_rows: torch.Tensor | None,
    ) -> torch.Tensor:
        # An encode makes every token an output (DEC-048): no caller selects rows, so the
        # last layer has no inp_out_ids step (llama.cpp's is a no-op when every row is kept).
        assert output_rows is None, "bert encodes every token: no output-row selection"
        hp = self.hparams
        eps = hp.norm_eps
        n_head, n_head_kv, hd = hp.n_head, hp.n_head_kv, hp.head_dim
        n_q, n_k = n_head * hd, n_head_kv * hd
        x = input_embeddings(x, positions, self.pos_embd, self.type_embd)
        x = layer_norm(x, *self.embd_norm, eps)
        n = x.shape[0]
        for il, layer in enumerate(self.layers):
            assert isinstance(layer, BertLayer)
            qkv = torch.addmm(layer.b_qkv, x, layer.wqkv_t)
            q = qkv[:, :n_q].reshape(n, n_head, hd)
            k = qkv[:, n_q : n_q + n_k].reshape(n, n_head_kv, hd)
            v = qkv[:, n_q + n_k :].reshape(n, n_head_kv, hd)
            o = attend(il, q, k, v)
            h = layer_norm(torch.addmm(layer.b_o, o, layer.wo_t) + x, *layer.attn_norm, eps)
            up = gelu_ggml(torch.addmm(layer.b_up, h, layer.w_up_t))
            x = layer_norm(torch.addmm(layer.b_down, up, layer.w_down_t) + h, *layer.out_norm, eps)
        return x

    @implements("GGUF-052", "GGUF-054")
    def logits_from_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        """No output head: zero logits, as llama.cpp's untouched (zero-filled) logits rows."""
        return torch.zeros(hidden.shape[0], self.hparams.n_vocab)

    @implements("GGUF-052")
    @torch.inference_mode()
    def encode_tokens(self, tokens: Sequence[int] | np.ndarray | torch.Tensor) -> torch.Tensor:
        """Hidden states ``[n, n_embd]`` of one sequence at positions ``0..n-1``, every token
        attending to every token (no cache)."""
        x = self.embed(tokens)
        n = x.shape[0]
        mask = torch.zeros(n, n)
        scale = self.hparams.kq_scale

        def attend(il: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return self.attention(q, k, v, mask, scale)

        return self._run(x, np.arange(n, dtype=np.int64), attend, None)

    @implements("GGUF-054")
    @torch.inference_mode()
    def forward(
        self,
        tokens: Sequence[int] | np.ndarray | torch.Tensor,
        output_rows: Sequence[int] | None = None,
    ) -> torch.Tensor:
        """Full-sequence "logits": zeros ``[n_rows, n_vocab]`` (bert has no output head); the
        hidden states are :meth:`encode_tokens`'."""
        hidden = self.encode_tokens(tokens)
        if output_rows is not None:
            hidden = hidden[torch.as_tensor(np.asarray(output_rows, dtype=np.int64).reshape(-1))]
        return self.logits_from_hidden(hidden)

    def rope_shift(
        self,
        k: torch.Tensor,
        delta_positions: torch.Tensor | Sequence[int] | np.ndarray,
        layer: int = 0,
    ) -> torch.Tensor:
        raise ValueError("bert has no RoPE and no memory: there is nothing to shift")
