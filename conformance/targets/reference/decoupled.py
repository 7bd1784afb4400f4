"""The decoupled area of the reference target: :mod:`conformance.protocol.decoupled` over ``reference_impl``."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernels.decoupled_cache import DecoupledKVCache


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
    ) -> DecoupledKVCache:
        from kernels._triton import kernel_device
        from kernels.decoupled_cache import DecoupledDims, DecoupledKVCache

        dims = DecoupledDims(n_head, *head_dims)
        return DecoupledKVCache(policy, dims, batch, max_len, device=kernel_device())
