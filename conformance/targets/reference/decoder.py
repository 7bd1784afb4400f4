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
        from reference_impl.decoder.faults import FaultInjector

        if "pooling" in params:
            params["pooling"] = PoolingType(params["pooling"])
        if "attention_type" in params:
            params["attention_type"] = AttentionType(params["attention_type"])
        # decoder.faults: every context of the adapter carries an (idle) injector; the
        # reference's production contexts have none
        return Context(model, faults=FaultInjector(), **params)

    # -- decoder.faults: through the FaultInjector each context is created with --------------
    def inject_failure(self, ctx: Any, ubatch: int, status: int) -> None:
        from reference_impl.memory.status import ComputeStatus

        ctx.faults.fail_ubatch(ubatch, ComputeStatus(status))

    def inject_fault(self, ctx: Any, kind: str) -> None:
        ctx.faults.arm(kind)
