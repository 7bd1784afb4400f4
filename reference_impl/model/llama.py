"""The llama forward pass (torch, CPU, float32), mirroring llama.cpp's ``src/models/llama.cpp``.

Per layer: ``x += Wo · attn(rope(Wq·n), rope(Wk·n), Wv·n)`` with ``n = rmsnorm(x)·attn_norm``,
then ``x += Wdown · (silu(Wgate·m) * Wup·m)`` with ``m = rmsnorm(x)·ffn_norm``; finally
``logits = Wout · rmsnorm(x)·output_norm`` (``Wout = token_embd`` when ``output.weight`` is
absent).

Numerical conventions that matter for agreement with llama.cpp:

* RoPE is llama.cpp's NORM mode: it rotates *adjacent* pairs ``(x[2j], x[2j+1])`` by
  ``theta_j = pos * base^(-2j/n_rot)``; theta is built like ggml's rope cache, starting at
  ``pos`` and multiplying by ``base^(-2/n_rot)`` once per pair, in float32;
* RMSNorm is ``x / sqrt(mean(x^2) + eps)`` followed by the weight;
* attention uses ``1/sqrt(head_dim)``, an additive mask (0 / -inf), and GQA maps query head
  ``h`` to KV head ``h // (n_head / n_head_kv)``.

Speed (decode is dominated by per-op dispatch, not arithmetic): Q/K/V and gate/up weights are
fused at load (one matmul each) with the RMSNorm weights folded in, residual adds are fused into
``addmm``, a single row's norm scale becomes the matmul's ``alpha``, RoPE is one in-place
complex multiply for Q and K together, attention is torch SDPA with native GQA (two batched
matmuls for a single query row). torch's intra-op thread count is process-global: set it with
:func:`set_threads` (the model API does so when given ``n_threads``).

Two entry points:

* :meth:`LlamaForward.forward` -- a whole sequence at positions ``0..n-1``, causal, no cache;
* :meth:`LlamaForward.forward_ubatch` -- one decoder step: the caller owns the KV cache and
  passes ``kv_write(layer, k, v)`` / ``kv_read(layer) -> (k_all, v_all)`` callables, the
  positions and the additive KQ mask ``[n_tokens, n_kv]``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from reference_impl.errors import BatchError
from reference_impl.model.gguf_loader import HParams, LayerWeights, ModelWeights
from reference_impl.spec_links import implements

# attention(q [n_tokens, n_head, hd], k [n_kv, n_head_kv, hd], v [n_kv, n_head_kv, hd],
#           mask [n_tokens, n_kv] additive (0 / -inf), scale) -> [n_tokens, n_head · hd]
AttentionFn = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor
]
KVWrite = Callable[[int, torch.Tensor, torch.Tensor], None]
KVRead = Callable[[int], tuple[torch.Tensor, torch.Tensor]]


def set_threads(n_threads: int) -> None:
    """Set torch's intra-op thread count (process-wide) used by every forward."""
    if n_threads < 1:
        raise ValueError("n_threads must be >= 1")
    torch.set_num_threads(n_threads)


# -- building blocks (module-level so a mutant can replace one) --------------------------------


@functools.lru_cache(maxsize=16)
def _scalar(value: float) -> torch.Tensor:
    # Tensor operands: ops taking a Python float wrap it in a tensor on every call.
    return torch.tensor(value, dtype=torch.float32)


@implements("GGUF-020")
def rms_normalize(x: torch.Tensor, eps: float) -> torch.Tensor:
    """``x / sqrt(mean(x^2) + eps)`` over the last dimension (no weight).

    Four dispatches (2-norm, ``eps + norm^2 / n``, rsqrt, scale): ``F.rms_norm`` is composite
    on CPU, and at decode sizes the per-op overhead, not arithmetic, is the cost."""
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    return x * torch.addcmul(_scalar(eps), norm, norm, value=1.0 / x.shape[-1]).rsqrt_()


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm with its weight: ``rms_normalize(x) * weight``."""
    return rms_normalize(x, eps) * weight


def normed_matmul(x: torch.Tensor, w_t: torch.Tensor, eps: float) -> torch.Tensor:
    """``rms_normalize(x, eps) @ w_t``. For a single row (decode) the norm's scale is one
    number, passed to the matmul as ``alpha``: three dispatches fewer per norm."""
    if x.shape[0] != 1:
        return torch.mm(rms_normalize(x, eps), w_t)
    row = x.view(-1)
    mean_sq = float(torch.dot(row, row)) / x.shape[-1]
    return torch.addmm(_scalar(0.0), x, w_t, beta=0.0, alpha=1.0 / math.sqrt(mean_sq + eps))


@implements("GGUF-020", "GGUF-047")
def rope_theta(
    positions: np.ndarray, n_rot: int, freq_base: float, freq_factors: np.ndarray | None = None
) -> np.ndarray:
    """Rotation angles ``[n_pos, n_rot/2]`` (float32) the way ggml's rope cache builds them.
    ``freq_factors`` (llama 3 ``rope_freqs``, ``[n_rot/2]``) divide pair ``j``'s angle by
    ``freq_factors[j]``, after the float32 power series, as ggml's ``rope_yarn(theta / ff)``."""
    theta_scale = np.float32(freq_base) ** np.float32(-2.0 / n_rot)
    theta = np.asarray(positions, dtype=np.float32).copy()
    out = np.empty((theta.shape[0], n_rot // 2), dtype=np.float32)
    for j in range(n_rot // 2):
        out[:, j] = theta
        theta = (theta * theta_scale).astype(np.float32)
    if freq_factors is not None:
        out /= np.asarray(freq_factors, dtype=np.float32)
    return out


@implements("GGUF-020")
def apply_rope(x: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    """Rotate adjacent pairs of ``x [n, heads, hd]`` *in place* by ``rot`` (complex
    ``[n, 1, hd/2]``, ``cos + i·sin``): ``(x[2j], x[2j+1]) -> (x0·c - x1·s, x0·s + x1·c)``.
    Returns ``x``. (One complex multiply: the pair is the real and imaginary part.)"""
    n, heads, hd = x.shape
    torch.view_as_complex(x.view(n, heads, hd // 2, 2)).mul_(rot)
    return x


@implements("GGUF-046")
def apply_rope_neox(x: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    """NEOX RoPE (qwen2), *in place*: pair ``j`` is ``(x[j], x[j + hd/2])``, rotated by the same
    angles as :func:`apply_rope`'s pair ``j``. Returns ``x``."""
    half = x.shape[-1] // 2
    x0, x1 = x[..., :half], x[..., half:]
    c, s = rot.real, rot.imag
    first = x0 * c - x1 * s
    x1.mul_(c).addcmul_(x0, s)  # x0·s + x1·c, before x0 is overwritten
    x0.copy_(first)
    return x


def rope_function(hp: HParams) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The rotation of the architecture (looked up per call, so a mutant can swap either)."""
    return apply_rope_neox if hp.rope_neox else apply_rope


@implements("GGUF-044", "GGUF-046")
def fuse_qkv_bias(lw: LayerWeights) -> torch.Tensor | None:
    """``cat(bq, bk, bv)`` matching the fused QKV matmul's columns (a missing part is zeros),
    or None when the layer has none of them."""
    parts = (lw.bq, lw.bk, lw.bv)
    if all(b is None for b in parts):
        return None
    sizes = (lw.wq.shape[0], lw.wk.shape[0], lw.wv.shape[0])
    return torch.cat([torch.zeros(n) if b is None else b for b, n in zip(parts, sizes)])


@implements("GGUF-044")
def fuse_gate_up_bias(lw: LayerWeights) -> torch.Tensor | None:
    """``cat(ffn_gate_b, ffn_up_b)`` matching the fused gate/up matmul, or None."""
    if lw.ffn_gate_b is None and lw.ffn_up_b is None:
        return None
    n_ff = lw.ffn_gate.shape[0]
    return torch.cat([torch.zeros(n_ff) if b is None else b for b in (lw.ffn_gate_b, lw.ffn_up_b)])


@implements("GGUF-020")
def sdpa_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float
) -> torch.Tensor:
    """Scaled dot-product attention with an additive mask and GQA (query head ``h`` reads KV
    head ``h // (n_head / n_head_kv)``), as ``softmax(scale·q·kᵀ + mask)·v``; returns the heads
    concatenated, ``[n_tokens, n_head · head_dim]``.

    One query row (decode) runs as two batched matmuls grouped by KV head, which costs less
    than SDPA's setup; longer ubatches use torch SDPA with native GQA.
    """
    n, n_head, hd = q.shape
    n_head_kv = k.shape[1]
    if n == 1:
        group = n_head // n_head_kv
        scores = torch.baddbmm(mask, q.view(n_head_kv, group, hd), k.permute(1, 2, 0), alpha=scale)
        probs = torch.softmax(scores, dim=-1)
        return torch.bmm(probs, v.transpose(0, 1)).view(1, n_head * hd)
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1).unsqueeze(0),
        k.transpose(0, 1).unsqueeze(0),
        v.transpose(0, 1).unsqueeze(0),
        attn_mask=mask,
        scale=scale,
        enable_gqa=n_head != n_head_kv,
    )
    return out.squeeze(0).transpose(0, 1).reshape(n, n_head * hd)


@implements("GGUF-005", "GGUF-021")
def resolve_output(weights: ModelWeights) -> torch.Tensor:
    """The output projection: ``output.weight``, or ``token_embd`` when tied."""
    return weights.token_embd if weights.output is None else weights.output


@implements("GGUF-023")
def causal_mask(n_tokens: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Additive causal mask ``[n, n]``: 0 where key <= query, -inf above the diagonal."""
    return torch.full((n_tokens, n_tokens), float("-inf"), dtype=dtype).triu_(1)


@implements("GGUF-049")
def sliding_causal_mask(n_tokens: int, n_swa: int, swa_type: int) -> torch.Tensor:
    """The causal mask of a sliding-window layer over positions ``0..n-1``: a key is also
    hidden when the window rule (``kv.swa``) masks it for the query."""
    from reference_impl.kv.swa import is_masked_swa_array

    pos = np.arange(n_tokens)
    hidden = is_masked_swa_array(n_swa, swa_type, pos[None, :], pos[:, None])
    mask = causal_mask(n_tokens)
    mask[torch.from_numpy(np.asarray(hidden))] = float("-inf")
    return mask


@implements("GGUF-051")
def mrope_planes(sections: Sequence[int], n_pairs: int) -> np.ndarray:
    """M-RoPE: the position plane (0 time, 1 height, 2 width, 3 extra) that rotates each of
    ``n_pairs`` pairs: pair ``j`` falls in section ``j % sum(sections)`` (ggml's
    ``ggml_mrope_cache_init``)."""
    bounds = np.cumsum(np.asarray(sections, dtype=np.int64))
    sector = np.arange(n_pairs) % int(bounds[-1])
    return np.searchsorted(bounds, sector, side="right").astype(np.int64)


def position_rotations(rope: RopeCache, positions: np.ndarray, hp: HParams) -> torch.Tensor:
    """The rotations ``[n, 1, n_rot/2]`` of ``n`` tokens. With M-RoPE ``positions`` holds
    ``n_pos_per_embd`` planes of ``n`` (plane-major) and pair ``j`` takes the angle of its
    section's plane; otherwise one position per token."""
    if hp.n_pos_per_embd == 1:
        return rope.rotations(positions)
    planes = np.asarray(positions, dtype=np.int64).reshape(hp.n_pos_per_embd, -1)
    per_plane = torch.stack([rope.rotations(p) for p in planes], dim=-1)  # [n, 1, pairs, 4]
    plane_of = torch.from_numpy(mrope_planes(hp.rope_sections, per_plane.shape[2]))
    return per_plane[:, :, torch.arange(plane_of.numel()), plane_of]


class RopeCache:
    """Complex rotations ``cos + i·sin`` per position, grown on demand (positions >= 0)."""

    def __init__(
        self,
        n_rot: int,
        freq_base: float,
        initial: int = 256,
        freq_factors: np.ndarray | None = None,
    ) -> None:
        self.n_rot = n_rot
        self.freq_base = freq_base
        self.freq_factors = freq_factors
        self.table = self._build(np.arange(initial))

    def _build(self, positions: np.ndarray) -> torch.Tensor:
        theta = torch.from_numpy(
            rope_theta(positions, self.n_rot, self.freq_base, self.freq_factors)
        )
        return torch.polar(torch.ones_like(theta), theta)

    def rotations(self, positions: np.ndarray) -> torch.Tensor:
        """Complex ``[n, 1, n_rot/2]`` for int64 ``positions [n]`` (any sign; n >= 1: a forward
        refuses an empty sequence, GGUF-055, and a ubatch or a K-shift is never empty)."""
        lo = int(positions.min())
        hi = int(positions.max())
        if lo < 0:  # K-shift deltas can be negative: compute directly, do not cache
            return self._build(positions).unsqueeze(1)
        if hi >= self.table.shape[0]:
            size = max(hi + 1, 2 * self.table.shape[0])
            self.table = self._build(np.arange(size))
        if positions.size == 1:  # one token (decode): a slice costs less than a gather
            return self.table[lo : lo + 1].unsqueeze(1)
        return self.table[torch.from_numpy(positions)].unsqueeze(1)


@dataclass(frozen=True)
class FusedLayer:
    """One block's weights as the forward uses them. The RMSNorm weights are folded into the
    columns of the matrices that follow them: ``W·(n ⊙ g) = (W·diag(g))·n``."""

    # [n_embd, n_embd_q + 2·n_embd_k_gqa]: (cat(Wq, Wk, Wv)·diag(attn_norm))ᵀ (a transposed view)
    wqkv_t: torch.Tensor
    wo_t: torch.Tensor  # [n_embd_q, n_embd] (transposed view for addmm)
    # [n_embd, 2·n_ff] = (cat(Wgate, Wup)·diag(ffn_norm))ᵀ (a transposed view: the native
    # decode step streams every matrix row by row)
    w_gate_up_t: torch.Tensor
    w_down_t: torch.Tensor  # [n_ff, n_embd] (transposed view for addmm)
    # Optional biases (None when absent): cat(bq, bk, bv), bo, cat(gate_b, up_b), down_b.
    b_qkv: torch.Tensor | None = None
    b_o: torch.Tensor | None = None
    b_gate_up: torch.Tensor | None = None
    b_down: torch.Tensor | None = None

    @property
    def has_bias(self) -> bool:
        return any(b is not None for b in (self.b_qkv, self.b_o, self.b_gate_up, self.b_down))


class LlamaForward:
    """The llama graph over dequantized, fused float32 weights."""

    def __init__(self, weights: ModelWeights, attention: AttentionFn | None = None) -> None:
        self.hparams: HParams = weights.hparams
        hp = self.hparams
        self.attention: AttentionFn = attention if attention is not None else sdpa_attention
        self.token_embd = weights.token_embd
        self.output_norm = weights.output_norm
        self.output = resolve_output(weights)
        self.layers = tuple(
            FusedLayer(
                wqkv_t=(torch.cat([lw.wq, lw.wk, lw.wv], dim=0) * lw.attn_norm).t(),
                wo_t=lw.wo.t(),
                w_gate_up_t=(torch.cat([lw.ffn_gate, lw.ffn_up], dim=0) * lw.ffn_norm).t(),
                w_down_t=lw.ffn_down.t(),
                b_qkv=fuse_qkv_bias(lw),
                b_o=lw.bo,
                b_gate_up=fuse_gate_up_bias(lw),
                b_down=lw.ffn_down_b,
            )
            for lw in weights.layers
        )
        self.rope_freqs = weights.rope_freqs
        factors = None if weights.rope_freqs is None else weights.rope_freqs.numpy()
        self.rope = RopeCache(hp.n_rot, hp.rope_freq_base, freq_factors=factors)
        self.rope_swa = sliding_rope(hp)

    @implements("GGUF-053")
    def rope_for_layer(self, il: int) -> RopeCache:
        """The rotations of layer ``il``: the sliding-window layers' base, or the model's."""
        return self.rope_swa if self.rope_swa is not None and self.hparams.is_swa(il) else self.rope

    # -- inputs -------------------------------------------------------------------------------

    @implements("GGUF-026")
    def token_ids(self, tokens: torch.Tensor | Sequence[int] | np.ndarray) -> np.ndarray:
        """Tokens as int64 ``[n]``; a token outside the vocabulary is an error."""
        ids = np.asarray(tokens, dtype=np.int64).reshape(-1)
        n_vocab = self.hparams.n_vocab
        if ids.size and (ids.min() < 0 or ids.max() >= n_vocab):
            i = int(np.flatnonzero((ids < 0) | (ids >= n_vocab))[0])
            raise BatchError(
                "MODEL_TOKEN_RANGE",
                f"token id {int(ids[i])} is outside the vocabulary [0, {n_vocab})",
                field="token",
                index=i,
            )
        return ids

    def embed(self, tokens: torch.Tensor | Sequence[int] | np.ndarray) -> torch.Tensor:
        """Token embeddings ``[n, n_embd]``."""
        return self.token_embd[torch.from_numpy(self.token_ids(tokens))]

    # -- the graph ----------------------------------------------------------------------------

    @implements("GGUF-020", "PHASE-004")
    def _run(
        self,
        x: torch.Tensor,
        positions: np.ndarray,
        attend: Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
        output_rows: torch.Tensor | None,
    ) -> torch.Tensor:
        """The layers and the final norm over ``x [n, n_embd]``; returns normalized hidden
        states for ``output_rows`` (all rows when None)."""
        hp = self.hparams
        n = x.shape[0]
        rot = position_rotations(self.rope, positions, hp)
        eps = hp.rms_eps
        n_head, n_head_kv, hd = hp.n_head, hp.n_head_kv, hp.head_dim
        n_qk = n_head + n_head_kv  # Q and K heads (RoPE), then V's n_head_kv
        last = len(self.layers) - 1
        rope = rope_function(hp)
        for il, layer in enumerate(self.layers):
            # one matmul for Q, K and V, seen as n_head + 2·n_head_kv heads; RoPE on Q and K
            qkv = normed_matmul(x, layer.wqkv_t, eps)
            if layer.b_qkv is not None:
                qkv.add_(layer.b_qkv)
            qkv = qkv.view(n, n_qk + n_head_kv, hd)
            rope(qkv[:, :n_qk], rot)
            q, k, v = qkv[:, :n_head], qkv[:, n_head:n_qk], qkv[:, n_qk:]
            o = attend(il, q, k, v)
            if il == last and output_rows is not None:
                # Like llama.cpp's inp_out_ids: only the rows that produce outputs go on.
                o = o.index_select(0, output_rows)
                x = x.index_select(0, output_rows)
            x = torch.addmm(x, o, layer.wo_t)  # residual add fused into the matmul
            if layer.b_o is not None:
                x = x.add_(layer.b_o)
            gate_up = normed_matmul(x, layer.w_gate_up_t, eps)
            if layer.b_gate_up is not None:
                gate_up.add_(layer.b_gate_up)
            n_ff = layer.w_down_t.shape[0]
            act = F.silu(gate_up[:, :n_ff], inplace=True).mul_(gate_up[:, n_ff:])
            x = torch.addmm(x, act, layer.w_down_t)
            if layer.b_down is not None:
                x = x.add_(layer.b_down)
        return rms_norm(x, self.output_norm, eps)

    def logits_from_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        """``[n, n_embd]`` normalized hidden states -> logits ``[n, n_vocab]``."""
        return F.linear(hidden, self.output)

    @implements(
        "GGUF-020",
        "GGUF-021",
        "GGUF-022",
        "GGUF-023",
        "GGUF-024",
        "GGUF-025",
        "GGUF-030",
        "GGUF-031",
    )
    @torch.inference_mode()
    def forward(
        self,
        tokens: Sequence[int] | np.ndarray | torch.Tensor,
        output_rows: Sequence[int] | None = None,
    ) -> torch.Tensor:
        """Full-sequence forward: tokens at positions ``0..n-1``, causal attention, no cache.
        Returns logits ``[n_rows, n_vocab]`` for ``output_rows`` (default: every token)."""
        hp = self.hparams
        x = self.embed(tokens)
        n = x.shape[0]
        mask = causal_mask(n)
        mask_swa = sliding_causal_mask(n, hp.n_swa, hp.swa_type) if hp.has_swa else mask
        scale = hp.kq_scale

        def attend(il: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return self.attention(q, k, v, mask_swa if hp.is_swa(il) else mask, scale)

        rows = None
        if output_rows is not None:
            rows = torch.as_tensor(np.asarray(output_rows, dtype=np.int64).reshape(-1))
        # a text token's position on every M-RoPE plane, as llama.cpp broadcasts it
        positions = np.tile(np.arange(n, dtype=np.int64), hp.n_pos_per_embd)
        hidden = self._run(x, positions, attend, rows)
        return self.logits_from_hidden(hidden)

    @implements("DEC-055", "DEC-056", "PHASE-004", "PHASE-012", "PHASE-015", "PHASE-017")
    @torch.inference_mode()
    def forward_ubatch(
        self,
        *,
        positions: torch.Tensor | Sequence[int] | np.ndarray,
        kv_write: KVWrite,
        kv_read: KVRead,
        kq_mask: torch.Tensor,
        tokens: torch.Tensor | Sequence[int] | np.ndarray | None = None,
        embd: torch.Tensor | np.ndarray | None = None,
        output_rows: torch.Tensor | Sequence[int] | np.ndarray | None = None,
        return_hidden: bool = False,
        attention: AttentionFn | None = None,
        kq_mask_swa: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One cached decoder step over a ubatch of ``n_tokens`` tokens.

        * ``tokens [n_tokens]`` or ``embd [n_tokens, n_embd]`` (exactly one);
        * ``positions [n_tokens]``: RoPE positions of the tokens (M-RoPE:
          ``[n_pos_per_embd · n_tokens]``, one plane after the other);
        * ``kv_write(il, k, v)``: store this ubatch's roped K and V (``[n_tokens, n_head_kv,
          head_dim]`` float32 views, valid only during the call: copy them) for layer ``il``
          into the caller's cache cells;
        * ``kv_read(il) -> (k_all, v_all)``: the layer's ``[n_kv, n_head_kv, head_dim]`` float32
          tensors (after the write; any strides, e.g. views of one stream of a
          ``[n_stream, kv_size, n_head_kv, head_dim]`` cache), which ``kq_mask [n_tokens, n_kv]``
          (additive, 0 / -inf) indexes;
        * ``kq_mask_swa``: the mask of the sliding-window layers (over the columns their
          ``kv_read`` returns), required when the model has such layers;
        * ``output_rows``: ubatch rows to return (default: all).

        Returns logits ``[n_rows, n_vocab]``, or the final normalized hidden states
        ``[n_rows, n_embd]`` when ``return_hidden`` (for pooling / embeddings). Inputs are
        validated before anything is written through ``kv_write``.
        """
        if (tokens is None) == (embd is None):
            raise BatchError("MODEL_INPUT", "pass exactly one of tokens / embd", field="token")
        if tokens is not None:
            x = self.embed(tokens)
        else:
            x = torch.as_tensor(embd, dtype=torch.float32)
            if x.ndim != 2 or x.shape[1] != self.hparams.n_embd:
                raise BatchError(
                    "MODEL_INPUT",
                    f"embd must be [n_tokens, {self.hparams.n_embd}], got {list(x.shape)}",
                    field="embd",
                )
        pos = np.asarray(positions, dtype=np.int64)
        n = x.shape[0]
        n_pos = self.hparams.n_pos_per_embd
        if pos.shape != (n * n_pos,):  # M-RoPE: n_pos_per_embd planes of n, plane-major
            raise BatchError("MODEL_INPUT", f"positions must be [{n * n_pos}]", field="pos")
        if kq_mask.ndim != 2 or kq_mask.shape[0] != n:
            raise BatchError("MODEL_INPUT", f"kq_mask must be [{n}, n_kv]", field="kq_mask")
        hp = self.hparams
        if hp.has_swa and (
            kq_mask_swa is None or kq_mask_swa.ndim != 2 or kq_mask_swa.shape[0] != n
        ):
            raise BatchError(
                "MODEL_INPUT",
                f"this model has sliding-window layers: kq_mask_swa must be [{n}, n_kv_swa]",
                field="kq_mask_swa",
            )
        scale = hp.kq_scale
        mask = kq_mask.to(torch.float32)
        mask_swa = mask if kq_mask_swa is None else kq_mask_swa.to(torch.float32)

        attn = attention if attention is not None else self.attention

        def attend(il: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            kv_write(il, k, v)
            k_all, v_all = kv_read(il)
            return attn(q, k_all, v_all, mask_swa if hp.is_swa(il) else mask, scale)

        rows = None
        if output_rows is not None:
            rows = torch.as_tensor(np.asarray(output_rows, dtype=np.int64).reshape(-1))
        hidden = self._run(x, pos, attend, rows)
        return hidden if return_hidden else self.logits_from_hidden(hidden)

    @implements("DEC-037", "DEC-053", "DEC-054", "GGUF-053")
    @torch.inference_mode()
    def rope_shift(
        self,
        k: torch.Tensor,
        delta_positions: torch.Tensor | Sequence[int] | np.ndarray,
        layer: int = 0,
    ) -> torch.Tensor:
        """Re-rotate cached keys ``k [n_cells, n_head_kv, head_dim]`` of ``layer`` by a
        per-cell position delta, like llama.cpp's K-shift (``rope_ext`` with the shift as the
        position, and the layer's RoPE base). Returns a new tensor; the caller writes it back
        into its cache."""
        d = np.asarray(delta_positions, dtype=np.int64)
        if d.shape != (k.shape[0],):
            raise BatchError(
                "MODEL_INPUT", f"delta_positions must be [{k.shape[0]}]", field="delta"
            )
        rope = rope_function(self.hparams)
        return rope(k.to(torch.float32, copy=True), self.rope_for_layer(layer).rotations(d))


@implements("GGUF-049")
def sliding_rope(hp: HParams) -> RopeCache | None:
    """The rotations of the sliding-window layers (their own base), or None without them."""
    if not hp.has_swa:
        return None
    return RopeCache(hp.n_rot, hp.rope_freq_base_swa)
