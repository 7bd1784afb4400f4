"""The kernels area of the reference target: :mod:`conformance.protocol.kernels` over ``reference_impl``."""

from __future__ import annotations

from typing import Any

import torch


def _config(two_pass_min_tokens: int | None) -> Any:
    from kernels import dispatch

    if two_pass_min_tokens is None:
        return None
    return dispatch.DispatchConfig(two_pass_min_tokens=two_pass_min_tokens)


class Reference:
    """The suite's own kernels (``kernels/``) through the adapter protocol."""

    # -- kernels.gqa_decode ----------------------------------------------------------------
    def gqa_decode_paths(self) -> tuple[str, ...]:
        from kernels import dispatch

        return dispatch.FUSED_PATHS

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
        from kernels import decode_attention

        trace: list[Any] = []
        out = decode_attention.gqa_decode(
            q,
            k,
            v,
            mask,
            scale,
            path=path,
            partition_size=partition_size,
            block_n=block_n,
            config=_config(two_pass_min_tokens),
            trace=trace,
        )
        return out, trace[-1]

    # -- kernels.decoupled_decode ----------------------------------------------------------
    def decoupled_decode_paths(self) -> tuple[str, ...]:
        from kernels import dispatch

        return dispatch.FUSED_PATHS

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
        from kernels import decoupled

        trace: list[Any] = []
        out = decoupled.decoupled_decode(
            q_sem,
            q_geo,
            cache,
            null=null,
            sem_scale=sem_scale,
            geo_scale=geo_scale,
            path=path,
            partition_size=partition_size,
            config=_config(two_pass_min_tokens),
            trace=trace,
        )
        return out, trace[-1]
