"""A small decoupled-attention language model (torch, float32), written to be read.

Per layer ``x += out(attn(n))`` with ``n = rmsnorm(x)·w``, then ``x += down(silu(up(m)))`` with
``m = rmsnorm(x)·w2``; ``logits = lm_head(rmsnorm(x)·w_f)``. The attention of head ``h`` for a
query at position ``p`` (spec/decoupled.md):

1. projections ``q_sem, k_sem`` (no position), ``q_geo, k_geo`` and ``v`` from ``n``;
2. rotate-half RoPE at the token's position on ``q_geo`` and ``k_geo`` only (DBA-007); the
   cache stores the rotated ``k_geo``; the null key is never rotated;
3. the learned temperature ``exp(clamp(logit_scale[h], -8, 8))`` on both query parts (DBA-006);
4. the gate ``g = sigmoid(gate_logit[h] + (W_g·n_t)[h])``: ``q_sem ·= 2g``, ``q_geo ·= 2(1-g)``
   (DBA-005), a function of the current token only, exactly 0.5 at its zero initialization;
5. the logit ``(q_sem·k_sem)/√d_sem + (q_geo·k_geo)/√d_geo`` (per-head dims), one softmax
   over the keys and the optional null token (DBA-001, DBA-002);
6. ``out`` applied once to the merged heads (DBA-010).

Prefill (:meth:`DecoupledLM.forward`) computes exact attention in torch. Decode
(:class:`DecodeSession`) appends each token's keys to a :class:`DecoupledKVCache` per layer and
runs :func:`kernels.decoupled.decoupled_decode`, which picks the fused 1-pass / 2-pass kernels
or the streaming reference and records a :class:`kernels.dispatch.DispatchRecord` per call.
Steps 3 and 4 only scale queries, so the kernels see already-scaled queries (DBA-011).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from kernels import dispatch, quant
from kernels._triton import kernel_device
from kernels.decoupled import decoupled_decode
from kernels.decoupled_cache import DecoupledDims, DecoupledKVCache, NullKV
from kernels.policy import KVCachePolicy, TensorFormat, parse_policy
from reference_impl.decoupled import longseq
from reference_impl.decoupled.config import DecoupledConfig
from reference_impl.errors import DecoderError
from reference_impl.spec_links import implements

TEMP_CLAMP = 8.0  # |logit_scale| beyond this is clamped (DBA-006)

# -- pure rules (module-level so that a mutant can replace one) --------------------------------


@implements("DBA-007")
def rope(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Rotate-half RoPE of ``x [..., T, hd]`` at ``positions [T]``: with ``x1 = x[:hd/2]``,
    ``x2 = x[hd/2:]`` and ``θ_i = p·base^(-2i/hd)``, ``[x1·cos − x2·sin, x1·sin + x2·cos]``.
    Angles are computed in float64 so that large positions keep their precision."""
    hd = x.shape[-1]
    half = hd // 2
    inv = base ** (-torch.arange(half, dtype=torch.float64) * 2.0 / hd)
    ang = positions.to(torch.float64).cpu()[:, None] * inv[None, :]
    cos = ang.cos().to(x.dtype).to(x.device)
    sin = ang.sin().to(x.dtype).to(x.device)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


@implements("DBA-006")
def temperature(logit_scale: torch.Tensor) -> torch.Tensor:
    """The per-head query multiplier ``exp(clamp(logit_scale, -8, 8))`` ``[H]``."""
    return torch.exp(torch.clamp(logit_scale, -TEMP_CLAMP, TEMP_CLAMP))


@implements("DBA-005")
def gate(x: torch.Tensor, gate_logit: torch.Tensor, w_g: torch.Tensor) -> torch.Tensor:
    """``g [B, T, H] = sigmoid(gate_logit + x·W_gᵀ)`` from each token's own hidden state (no
    reduction over the sequence, so it is causal and the cached keys are not involved)."""
    return torch.sigmoid(gate_logit.float() + x.float() @ w_g.float().t())


@implements("DBA-005", "DBA-006")
def scale_queries(
    q_sem: torch.Tensor, q_geo: torch.Tensor, temp: torch.Tensor, g: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Temperature first, then the gate: ``q_sem·t·2g`` and ``q_geo·t·2(1−g)``.

    ``q_* [B, H, T, hd]``, ``temp [H]``, ``g [B, T, H]``."""
    t = temp.view(1, -1, 1, 1)
    q_sem, q_geo = q_sem * t, q_geo * t
    gh = g.transpose(1, 2).unsqueeze(-1)  # [B, H, T, 1]
    return q_sem * (2.0 * gh), q_geo * (2.0 * (1.0 - gh))


@implements("DBA-001", "DBA-002")
def exact_attention(
    q_sem: torch.Tensor,
    q_geo: torch.Tensor,
    k_sem: torch.Tensor,
    k_geo: torch.Tensor,
    v: torch.Tensor,
    null: NullKV | None,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
) -> torch.Tensor:
    """Causal decoupled attention ``[B, H, T, dv]``: query ``t`` sees keys with
    ``k_pos <= q_pos[t]`` and the null token (which has no position)."""
    ss = 1.0 / math.sqrt(q_sem.shape[-1])
    gs = 1.0 / math.sqrt(q_geo.shape[-1])
    s = (q_sem @ k_sem.transpose(-1, -2)) * ss + (q_geo @ k_geo.transpose(-1, -2)) * gs
    hidden = k_pos.to(s.device)[None, :] > q_pos.to(s.device)[:, None]
    s = s.masked_fill(hidden, float("-inf"))
    if null is not None:
        b = q_sem.shape[0]
        nk = null.expanded(b)  # [B, H, hd]
        s_null = (q_sem * nk.k_sem.unsqueeze(2)).sum(-1) * ss
        s_null = s_null + (q_geo * nk.k_geo.unsqueeze(2)).sum(-1) * gs  # [B, H, T]
        s = torch.cat([s_null.unsqueeze(-1), s], dim=-1)
        v = torch.cat([nk.v.unsqueeze(2), v], dim=2)
    return torch.softmax(s, dim=-1) @ v


@implements("DBA-016")
def stored_values(x: torch.Tensor, fmt: TensorFormat) -> torch.Tensor:
    """``x`` as a cache in format ``fmt`` stores it and decode reads it back (no residual)."""
    if fmt.kind == "fp32":
        return x
    if fmt.kind == "fp16":
        return x.to(torch.float16).to(x.dtype)
    return quant.dequantize(quant.quantize(x, fmt.kind, fmt.qblock)).to(x.dtype)


def split_heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    """``[B, T, H·hd] -> [B, H, T, hd]`` (feature ``h·hd + c``, the cache's layout)."""
    b, t, _ = x.shape
    return x.reshape(b, t, n_head, -1).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``[B, H, T, hd] -> [B, T, H·hd]``."""
    b, h, t, hd = x.shape
    return x.transpose(1, 2).reshape(b, t, h * hd)


# -- modules -----------------------------------------------------------------------------------


@dataclass
class Projected:
    """One layer's queries (scaled, rotated), keys (k_geo rotated), values and gate."""

    q_sem: torch.Tensor  # [B, H, T, d_sem/H]
    q_geo: torch.Tensor
    k_sem: torch.Tensor
    k_geo: torch.Tensor
    v: torch.Tensor  # [B, H, T, d_v/H]
    gate: torch.Tensor  # [B, T, H]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class DecoupledAttention(nn.Module):
    """Projections, gate, temperature, null token and summarizers of one layer."""

    def __init__(self, cfg: DecoupledConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d, h = cfg.d_model, cfg.n_head
        self.q_sem = nn.Linear(d, cfg.d_sem, bias=False)
        self.k_sem = nn.Linear(d, cfg.d_sem, bias=False)
        self.q_geo = nn.Linear(d, cfg.d_geo, bias=False)
        self.k_geo = nn.Linear(d, cfg.d_geo, bias=False)
        self.v = nn.Linear(d, cfg.d_v, bias=False)
        self.out = nn.Linear(cfg.d_v, d, bias=False)
        self.gate_proj = nn.Linear(d, h, bias=False)  # W_g, zero-initialized
        self.gate_logit = nn.Parameter(torch.zeros(h))
        self.logit_scale = nn.Parameter(torch.zeros(h))
        if cfg.null_attn:
            self.k_sem_null = nn.Parameter(torch.zeros(h, cfg.sem_head_dim))
            self.k_geo_null = nn.Parameter(torch.zeros(h, cfg.geo_head_dim))
            self.v_null = nn.Parameter(torch.zeros(h, cfg.v_head_dim))
        self.mem = longseq.Summarizers(cfg)

    def project(self, x: torch.Tensor, positions: torch.Tensor) -> Projected:
        cfg, h = self.cfg, self.cfg.n_head
        q_geo = rope(split_heads(self.q_geo(x), h), positions, cfg.rope_base)
        k_geo = rope(split_heads(self.k_geo(x), h), positions, cfg.rope_base)
        g = gate(x, self.gate_logit, self.gate_proj.weight)
        q_sem, q_geo = scale_queries(
            split_heads(self.q_sem(x), h), q_geo, temperature(self.logit_scale), g
        )
        return Projected(
            q_sem, q_geo, split_heads(self.k_sem(x), h), k_geo, split_heads(self.v(x), h), g
        )

    @implements("DBA-002", "DBA-007")
    def null_kv(self) -> NullKV | None:
        """The null token's per-head ``[H, hd]`` parameters; its k_geo is not rotated."""
        if not self.cfg.null_attn:
            return None
        return NullKV(self.k_sem_null, self.k_geo_null, self.v_null)

    @implements("DBA-010")
    def project_out(self, attn: torch.Tensor) -> torch.Tensor:
        """``[B, H, T, dv] -> [B, T, d_model]``: the output projection, applied once."""
        return self.out(merge_heads(attn))

    def attend(
        self,
        p: Projected,
        positions: torch.Tensor,
        stored: KVCachePolicy | None = None,
        approx: str | None = None,
    ) -> torch.Tensor:
        """Exact causal attention of a whole sequence (query ``t`` sees tokens ``0..t``; the
        positions only rotate) ``[B, H, T, dv]``, or with ``approx`` the
        long-sequence approximation (positions 0..T-1, no null token). ``stored``: attend the keys and values as a cache with
        that policy (and no residual) would return them."""
        k_sem, k_geo, v = p.k_sem, p.k_geo, p.v
        if stored is not None:
            h = self.cfg.n_head
            k_sem = split_heads(stored_values(merge_heads(k_sem), stored.k_sem), h)
            k_geo = split_heads(stored_values(merge_heads(k_geo), stored.k_geo), h)
            v = split_heads(stored_values(merge_heads(v), stored.v), h)
        if approx:
            if self.null_kv() is not None:
                raise DecoderError(
                    "DBA_APPROX_NULL", "the long-sequence approximation has no null token"
                )
            return longseq.approximate(
                self.cfg, self.mem, p.q_sem, p.q_geo, k_sem, k_geo, v, approx
            )
        order = torch.arange(p.q_sem.shape[2])  # causality follows the sequence, not RoPE
        return exact_attention(p.q_sem, p.q_geo, k_sem, k_geo, v, self.null_kv(), order, order)


@implements("DBA-027")
class Block(nn.Module):
    def __init__(self, cfg: DecoupledConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = DecoupledAttention(cfg)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.up = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.silu(self.up(self.ffn_norm(x))))


# Parameters that start at zero (or one): the gate (g = 0.5), the temperature (exp 0 = 1), the
# null token (a logit-0 sink with a zero value), the summarizers' residual scales (= mean).
_ZERO_INIT = ("gate_proj", "gate_logit", "logit_scale", "_null", "alpha")


def _init_parameters(model: nn.Module, seed: int) -> None:
    """Seeded initialization, the same on every device: drawn on the CPU in name order."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if any(z in name for z in _ZERO_INIT):
                p.zero_()
            elif name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name == "embed.weight":
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))


TokenInput = torch.Tensor | Sequence[Sequence[int]]


class DecoupledLM(nn.Module):
    """The whole model. ``forward`` is the exact (prefill) pass; :meth:`session` decodes."""

    def __init__(self, cfg: DecoupledConfig, seed: int = 0, device: str | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.layers: list[Block] = [cast(Block, b) for b in self.blocks]  # a typed view
        self.final_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)
        _init_parameters(self, seed)
        self.to(device or kernel_device())
        self.eval()

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    @implements("DBA-022")
    def tokens(self, tokens: TokenInput) -> torch.Tensor:
        """Token ids as ``[B, T]`` int64 on the model's device; the first out-of-range id in
        row-major order is refused, naming its sequence (seq_id) and position (index)."""
        t = torch.as_tensor(tokens, dtype=torch.int64)
        if t.ndim != 2:
            raise DecoderError(
                "DBA_BAD_TOKENS", f"tokens must be [B, T], got {list(t.shape)}", field="tokens"
            )
        bad = ((t < 0) | (t >= self.cfg.vocab)).nonzero()  # row-major order
        if len(bad):
            b, i = (int(v) for v in bad[0])
            raise DecoderError(
                "DBA_BAD_TOKENS",
                f"token {int(t[b, i])} at [{b}, {i}] is outside [0, {self.cfg.vocab})",
                field="tokens",
                index=i,
                seq_id=b,
            )
        return t.to(self.device)

    def _positions(self, n: int, positions: Sequence[int] | torch.Tensor | None) -> torch.Tensor:
        if positions is None:
            return torch.arange(n)
        p = torch.as_tensor(positions, dtype=torch.int64).cpu()
        if p.shape != (n,):
            raise DecoderError(
                "DBA_BAD_POSITIONS",
                f"positions must be [{n}], got {list(p.shape)}",
                field="positions",
            )
        return p

    @torch.no_grad()
    def forward(
        self,
        tokens: TokenInput,
        positions: Sequence[int] | torch.Tensor | None = None,
        stored: KVCachePolicy | str | None = None,
        approx: str | None = None,
    ) -> torch.Tensor:
        """Logits ``[B, T, vocab]`` of a whole sequence with exact causal attention.
        ``stored``: attend the keys/values as that cache policy stores them (teacher forcing
        against decode with no residual). ``approx``: the long-sequence approximation with that chunk mask."""
        t = self.tokens(tokens)
        pos = self._positions(t.shape[1], positions)
        policy = parse_policy(stored) if isinstance(stored, str) else stored
        x = self.embed(t)
        for blk in self.layers:
            a = blk.attn
            p = a.project(blk.attn_norm(x), pos)
            x = blk.mlp(x + a.project_out(a.attend(p, pos, policy, approx)))
        return self.lm_head(self.final_norm(x))

    @torch.no_grad()
    def inspect(
        self, tokens: TokenInput, layer: int, positions: Sequence[int] | torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        """The intermediate values of layer ``layer`` for a whole sequence (white-box tests)."""
        if not 0 <= layer < self.cfg.n_layer:
            raise DecoderError("DBA_BAD_LAYER", f"layer {layer} not in [0, {self.cfg.n_layer})")
        t = self.tokens(tokens)
        pos = self._positions(t.shape[1], positions)
        x = self.embed(t)
        for il, blk in enumerate(self.layers):
            a = blk.attn
            n = blk.attn_norm(x)
            p = a.project(n, pos)
            attn = a.attend(p, pos)
            out = a.project_out(attn)
            if il == layer:
                break
            x = blk.mlp(x + out)
        ss = 1.0 / math.sqrt(self.cfg.sem_head_dim)
        gs = 1.0 / math.sqrt(self.cfg.geo_head_dim)
        parts = {
            "x": n,
            "q_sem": p.q_sem,
            "q_geo": p.q_geo,
            "k_sem": p.k_sem,
            "k_geo": p.k_geo,
            "v": p.v,
            "gate": p.gate,
            "sem_logits": (p.q_sem @ p.k_sem.transpose(-1, -2)) * ss,
            "geo_logits": (p.q_geo @ p.k_geo.transpose(-1, -2)) * gs,
            "attn": merge_heads(attn),
            "out": out,
        }
        null = a.null_kv()
        if null is not None:
            parts["null_sem"] = (p.q_sem * null.k_sem[None, :, None, :]).sum(-1) * ss
            parts["null_geo"] = (p.q_geo * null.k_geo[None, :, None, :]).sum(-1) * gs
        return parts

    def session(
        self,
        policy: KVCachePolicy | str,
        max_len: int,
        batch: int,  # no default: every caller states its batch
        config: dispatch.DispatchConfig | None = None,
    ) -> DecodeSession:
        return DecodeSession(self, policy, max_len, batch, config)


class DecodeSession:
    """Decode state of ``batch`` sequences (one shared length): one cache per layer."""

    @implements("DBA-026")
    def __init__(
        self,
        model: DecoupledLM,
        policy: KVCachePolicy | str,
        max_len: int,
        batch: int,
        config: dispatch.DispatchConfig | None = None,
    ) -> None:
        self.model = model
        self.policy = parse_policy(policy) if isinstance(policy, str) else policy
        self.config = config or dispatch.DEFAULT_CONFIG
        cfg = model.cfg
        dims = DecoupledDims(cfg.n_head, cfg.sem_head_dim, cfg.geo_head_dim, cfg.v_head_dim)
        self.caches = [
            DecoupledKVCache(self.policy, dims, batch, max_len, device=model.device)
            for _ in range(cfg.n_layer)
        ]
        self.batch = batch
        self.max_len = max_len
        self.length = 0
        self.broken = ""  # set when a step fails after touching the caches

    @implements("DBA-022", "DBA-023")
    def _check(self, t: torch.Tensor) -> None:
        """Refuse a call before any cache is touched (a broken session refuses every call)."""
        if self.broken:
            raise DecoderError("DBA_SESSION_BROKEN", f"an earlier step failed: {self.broken}")
        if t.shape[0] != self.batch:
            raise DecoderError(
                "DBA_BAD_TOKENS",
                f"expected {self.batch} sequences, got {t.shape[0]}",
                field="tokens",
            )
        if self.length + t.shape[1] > self.max_len:
            raise DecoderError(
                "DBA_SESSION_FULL",
                f"{t.shape[1]} tokens after {self.length} exceed max_len {self.max_len}",
            )

    @implements("DBA-022", "DBA-023")
    @torch.no_grad()
    def prefill(self, tokens: TokenInput) -> torch.Tensor:
        """Exact attention over a prompt ``[B, T]`` (unquantized keys), then every token's keys
        appended (quantized) to the caches; logits ``[B, T, vocab]``."""
        m = self.model
        t = m.tokens(tokens)
        self._check(t)
        if self.length:
            raise DecoderError("DBA_PREFILL_NOT_EMPTY", "prefill needs an empty session")
        pos = torch.arange(t.shape[1])
        x = m.embed(t)
        try:
            for blk, cache in zip(m.layers, self.caches):
                a = blk.attn
                p = a.project(blk.attn_norm(x), pos)
                cache.append(merge_heads(p.k_sem), merge_heads(p.k_geo), merge_heads(p.v))
                x = blk.mlp(x + a.project_out(a.attend(p, pos)))
        except Exception as exc:
            self.broken = str(exc)
            raise
        self.length = t.shape[1]
        return m.lm_head(m.final_norm(x))

    @implements("DBA-011", "DBA-016", "DBA-023")
    @torch.no_grad()
    def step(
        self, tokens: Sequence[int] | torch.Tensor, path: str = "auto"
    ) -> tuple[torch.Tensor, list[dispatch.DispatchRecord]]:
        """One decode step: token ``tokens[b]`` of each sequence at position ``length``.
        Returns logits ``[B, vocab]`` and one DispatchRecord per layer (the path that ran)."""
        m = self.model
        dispatch.check_request(path)
        t = m.tokens(torch.as_tensor(tokens, dtype=torch.int64).reshape(-1, 1))
        self._check(t)
        pos = torch.tensor([self.length])
        x = m.embed(t)
        try:
            with dispatch.recording() as records:
                for blk, cache in zip(m.layers, self.caches):
                    a = blk.attn
                    p = a.project(blk.attn_norm(x), pos)
                    cache.append(merge_heads(p.k_sem), merge_heads(p.k_geo), merge_heads(p.v))
                    out = decoupled_decode(
                        p.q_sem[:, :, 0],
                        p.q_geo[:, :, 0],
                        cache,
                        null=a.null_kv(),
                        path=path,
                        config=self.config,
                    )
                    x = blk.mlp(x + a.project_out(out.unsqueeze(2)))
        except Exception as exc:
            self.broken = str(exc)
            raise
        self.length += 1
        return m.lm_head(m.final_norm(x))[:, 0], list(records)
