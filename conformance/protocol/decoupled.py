"""Protocol of the decoupled area (spec/decoupled.md): the decoupled (semantic + geometric) KV
cache of seed 001. The oracle reads the cache's buffers directly, so their layout is part of the
protocol: token-major ``[B, L, H·hd]`` per tensor, ``codes``/``scales`` for a quantized format
or ``buf`` for a float one, and the fp16 ``ring`` of the residual tail
(:class:`kernels.decoupled_cache.DecoupledKVCache`).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from conformance.protocol import capability, role


@role("decoupled_cache")
class DecoupledCache(Protocol):
    @property
    def policy(self) -> Any: ...
    @property
    def dims(self) -> Any: ...  # n_head, sem_head_dim, geo_head_dim, v_head_dim
    @property
    def batch(self) -> int: ...
    @property
    def max_len(self) -> int: ...
    @property
    def length(self) -> int: ...
    @property
    def residual_len(self) -> int: ...
    @property
    def k_sem(self) -> Any: ...
    @property
    def k_geo(self) -> Any: ...
    @property
    def v(self) -> Any: ...
    @property
    def prefix_len(self) -> int: ...
    @property
    def tail_len(self) -> int: ...

    def append(self, k_sem: torch.Tensor, k_geo: torch.Tensor, v: torch.Tensor) -> None:
        """Append one token per sequence (``[B, H·hd]`` each)."""
        ...


class Cache(Protocol):
    def decoupled_cache(
        self, policy: str, n_head: int, head_dims: tuple[int, int, int], batch: int, max_len: int
    ) -> DecoupledCache: ...


CAPABILITIES = (capability("decoupled.cache", Cache, "the decoupled quantized KV cache"),)
