"""The training long-sequence approximation of decoupled attention (DBA-008, DBA-009).

Tokens older than the local window are replaced by *memory tokens*: every ``mem_block`` tokens
become one key (the block's semantic keys summarized, geometric part zero, so a memory token's
geometric logit is 0) and one value (the block's values summarized). Queries run in chunks of
``q_chunk``; chunk ``[t0, t1)`` attends the memory tokens of the blocks before
``local_start = (max(0, t0 − local_window) // mem_block)·mem_block`` and every token of
``[local_start, t1)`` at full resolution, in one softmax.

Summarizers: ``mean``; ``linear`` adds ``α·Linear(mean)``; ``conv`` adds ``α·mean(DWConv1d(block))``
(kernel 3, padding 1, one filter per channel). ``α`` starts at 0, so both equal ``mean`` exactly
at initialization (DBA-008).

The causal mask of a chunk is **bottom-right aligned**: the chunk has fewer queries than keys,
and query ``i`` (absolute position ``t0 + i``) may see key ``j`` of the chunk's key list iff
``j <= i + (n_keys − n_queries)``. An upper-left aligned mask (``j <= i``, what a non-square
``is_causal`` gives in PyTorch's SDPA) would hide each query's own recent tokens; the decoupled
project's approximation had that defect (shared/reference/decoupled.md §1.7).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import nn

from reference_impl.spec_links import implements

if TYPE_CHECKING:
    from reference_impl.decoupled.config import DecoupledConfig


class _Summarizer(nn.Module):
    """Block summarizer of one tensor (``k`` or ``v``) with per-head dim ``hd``."""

    def __init__(self, hd: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hd, hd, bias=False)
        self.conv = nn.Conv1d(hd, hd, kernel_size=3, padding=1, groups=hd, bias=False)
        self.alpha = nn.Parameter(torch.zeros(()))  # residual scale: 0 = exactly the mean

    @implements("DBA-008", "DBA-018")
    def forward(self, blocks: torch.Tensor, kind: str) -> torch.Tensor:
        """``blocks [B, H, n, mem_block, hd] -> [B, H, n, hd]``."""
        mean = blocks.mean(dim=3)
        if kind == "mean":
            return mean
        if kind == "linear":
            return mean + self.alpha * self.linear(mean)
        b, h, n, m, hd = blocks.shape
        seq = blocks.reshape(b * h * n, m, hd).transpose(1, 2)  # [*, hd, mem_block]
        conv = self.conv(seq).mean(dim=-1).reshape(b, h, n, hd)
        return mean + self.alpha * conv


class Summarizers(nn.Module):
    """The key and value summarizers of one layer (always present, so checkpoints of every
    summarizer kind have the same tensors)."""

    def __init__(self, cfg: DecoupledConfig) -> None:
        super().__init__()
        self.k = _Summarizer(cfg.sem_head_dim)
        self.v = _Summarizer(cfg.v_head_dim)


MASKS = ("bottom-right", "upper-left")


@implements("DBA-009")
def chunk_mask(n_queries: int, n_keys: int, aligned: str = "bottom-right") -> torch.Tensor:
    """``[n_queries, n_keys]`` bool, True = visible. ``bottom-right``: the causal mask of a chunk
    whose queries are the *last* ``n_queries`` of its keys; ``upper-left`` (``j <= i``) is the
    decoupled project's defect, kept so that the drift validator can show it."""
    i = torch.arange(n_queries)[:, None]
    j = torch.arange(n_keys)[None, :]
    if aligned == "upper-left":
        return j <= i
    return j <= i + (n_keys - n_queries)


@implements("DBA-009")
def approximate(
    cfg: DecoupledConfig,
    mem: Summarizers,
    q_sem: torch.Tensor,
    q_geo: torch.Tensor,
    k_sem: torch.Tensor,
    k_geo: torch.Tensor,
    v: torch.Tensor,
    aligned: str = "bottom-right",
) -> torch.Tensor:
    """The approximation's attention output ``[B, H, T, dv]`` (positions ``0..T-1``)."""
    b, h, t, ds = q_sem.shape
    mb = cfg.mem_block
    n_blocks = t // mb
    mem_k = mem.k(k_sem[:, :, : n_blocks * mb].reshape(b, h, n_blocks, mb, ds), cfg.summarizer)
    mem_v = mem.v(v[:, :, : n_blocks * mb].reshape(b, h, n_blocks, mb, -1), cfg.summarizer)
    ss = 1.0 / math.sqrt(ds)
    gs = 1.0 / math.sqrt(q_geo.shape[-1])
    out = []
    for t0 in range(0, t, cfg.q_chunk):
        t1 = min(t, t0 + cfg.q_chunk)
        local_start = (max(0, t0 - cfg.local_window) // mb) * mb
        n_mem = local_start // mb
        qs, qg = q_sem[:, :, t0:t1], q_geo[:, :, t0:t1]
        s_mem = (qs @ mem_k[:, :, :n_mem].transpose(-1, -2)) * ss  # geometric part: 0
        s_loc = (qs @ k_sem[:, :, local_start:t1].transpose(-1, -2)) * ss
        s_loc = s_loc + (qg @ k_geo[:, :, local_start:t1].transpose(-1, -2)) * gs
        s = torch.cat([s_mem, s_loc], dim=-1)
        visible = chunk_mask(t1 - t0, s.shape[-1], aligned).to(s.device)
        s = s.masked_fill(~visible, float("-inf"))
        vals = torch.cat([mem_v[:, :, :n_mem], v[:, :, local_start:t1]], dim=2)
        out.append(torch.softmax(s, dim=-1) @ vals)
    return torch.cat(out, dim=2)
