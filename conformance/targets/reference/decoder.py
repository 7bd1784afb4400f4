"""The decoder area of the reference target: :mod:`conformance.protocol.decoder` over the
``Context`` of ``reference_impl.decoder``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reference_impl.decoder import Context


class Reference:
    """The decoder-area methods of the reference target (``reference_impl.decoder``)."""

    def new_context(self, model: Any, **params: Any) -> Context:
        from reference_impl.decoder import AttentionType, Context, PoolingType

        if "pooling" in params:
            params["pooling"] = PoolingType(params["pooling"])
        if "attention_type" in params:
            params["attention_type"] = AttentionType(params["attention_type"])
        return Context(model, **params)

    # -- decoder.faults ------------------------------------------------------------------------
    def inject_failure(self, ctx: Any, ubatch: int, status: int) -> None:
        from reference_impl.memory.status import ComputeStatus

        ctx.inject_failure(ubatch, ComputeStatus(status))

    def inject_fault(self, ctx: Any, kind: str) -> None:
        ctx.inject_fault(kind)
