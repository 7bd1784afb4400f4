"""Target protocol for the decoupled area (spec/decoupled.md): the decoupled KV cache.

``decoupled.cache``
    ``decoupled_cache(policy, n_head, head_dims, batch, max_len)`` -> a cache with
    ``append(k_sem, k_geo, v)``, ``length``, ``prefix_len``, ``tail_len`` and the buffers of
    :class:`kernels.decoupled_cache.DecoupledKVCache` (token-major ``[B, L, H·hd]``; per tensor
    ``codes``/``scales`` or ``buf``, and the fp16 ``ring``), which the oracle reads directly.
"""

from __future__ import annotations

from typing import Any

CAPABILITIES: dict[str, tuple[str, ...]] = {
    "decoupled.cache": ("decoupled_cache",),
}


class Reference:
    """The decoupled cache of ``kernels.decoupled_cache`` through the adapter protocol."""

    # -- decoupled.cache -----------------------------------------------------------
    def decoupled_cache(
        self,
        policy: str,
        n_head: int,
        head_dims: tuple[int, int, int],
        batch: int,
        max_len: int,
    ) -> Any:
        from kernels._triton import kernel_device
        from kernels.decoupled_cache import DecoupledDims, DecoupledKVCache

        dims = DecoupledDims(n_head, *head_dims)
        return DecoupledKVCache(policy, dims, batch, max_len, device=kernel_device())
