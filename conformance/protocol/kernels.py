"""Protocol of the kernels area (spec/kernels.md): fused decode attention over GQA caches and
over the decoupled cache. Every call returns ``(out, record)`` where ``record.path`` names the
path that ran and ``record.reason`` why, so a test cannot pass on a silent fallback.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from conformance.protocol import capability


class GqaDecode(Protocol):
    def gqa_decode_paths(self) -> tuple[str, ...]:
        """The fused paths offered (``triton-1pass``, ``triton-2pass``)."""
        ...

    def gqa_decode(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor,
        scale: float,
        path: str = "auto",
        partition_size: int | None = None,
        two_pass_min_tokens: int | None = None,
        block_n: int | None = None,
    ) -> tuple[torch.Tensor, Any]:
        """Attention of each query row over the keys its mask row admits. ``partition_size``,
        ``two_pass_min_tokens`` and ``block_n`` (keys per tile) override the dispatch
        defaults; ``None`` keeps them."""
        ...


class DecoupledDecode(Protocol):
    def decoupled_decode_paths(self) -> tuple[str, ...]: ...

    def decoupled_decode(
        self,
        q_sem: torch.Tensor,
        q_geo: torch.Tensor,
        cache: Any,
        null: Any = None,
        path: str = "auto",
        partition_size: int | None = None,
        sem_scale: float | None = None,
        geo_scale: float | None = None,
        two_pass_min_tokens: int | None = None,
    ) -> tuple[torch.Tensor, Any]:
        """Decode attention over the cache and an optional null token
        (:class:`kernels.decoupled_cache.NullKV`)."""
        ...


CAPABILITIES = (
    capability("kernels.gqa_decode", GqaDecode, "fused GQA decode attention"),
    capability("kernels.decoupled_decode", DecoupledDecode, "fused decoupled decode attention"),
)
IMPLIES = {"kernels.decoupled_decode": ("decoupled.cache",)}
