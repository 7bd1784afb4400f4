"""The kv_quant area of the reference target: :mod:`conformance.protocol.kv_quant` over ``reference_impl``."""

from __future__ import annotations

from typing import Any

import torch


def _quant_module(impl: str) -> Any:
    if impl == "torch":
        from kernels import quant

        return quant
    if impl == "triton":
        from kernels import quant_triton

        return quant_triton
    raise ValueError(f"unknown quantization implementation {impl!r}")


class Reference:
    """The suite's own formats (``kernels.quant`` / ``kernels.quant_triton``) and policy parser."""

    # -- kv_quant.formats ---------------------------------------------------------------------
    def kv_quant_impls(self) -> tuple[str, ...]:
        from kernels._triton import triton_available

        return ("torch", "triton") if triton_available() else ("torch",)

    def kv_quantize(
        self, x: torch.Tensor, kind: str, qblock: int, impl: str = "torch"
    ) -> tuple[torch.Tensor, torch.Tensor]:
        qt = _quant_module(impl).quantize(x, kind, qblock)
        return qt.codes, qt.scales

    def kv_dequantize(
        self,
        codes: torch.Tensor,
        scales: torch.Tensor,
        kind: str,
        qblock: int,
        dim: int,
        impl: str = "torch",
    ) -> torch.Tensor:
        from kernels import quant

        quant.check_format(kind, qblock)
        qt = quant.QuantizedTensor(kind, qblock, dim, codes, scales)
        return _quant_module(impl).dequantize(qt)

    def kv_bytes_per_token(self, kind: str, dim: int, qblock: int) -> int:
        from kernels import quant

        return quant.bytes_per_token(kind, dim, qblock)

    def ggml_quantize(self, x: torch.Tensor, qtype: str, impl: str = "torch") -> torch.Tensor:
        return _quant_module(impl).ggml_quantize(x, qtype)

    def ggml_dequantize(self, data: torch.Tensor, qtype: str, impl: str = "torch") -> torch.Tensor:
        return _quant_module(impl).ggml_dequantize(data, qtype)

    # -- kv_quant.policy --------------------------------------------------------------------
    def parse_kv_policy(self, text: str) -> dict[str, Any]:
        from kernels import policy

        p = policy.parse_policy(text)
        return {
            "k_sem": p.k_sem.short(),
            "k_geo": p.k_geo.short(),
            "v": p.v.short(),
            "resid": p.residual_len,
            "fused": p.is_fused_layout(),
        }

    def format_kv_policy(self, fields: dict[str, Any]) -> str:
        from kernels import policy

        def fmt(text: str) -> policy.TensorFormat:
            kind, _, qb = text.partition("@")
            return policy.TensorFormat(kind, int(qb) if qb else policy.DEFAULT_QBLOCK)

        p = policy.KVCachePolicy(
            fmt(fields["k_sem"]), fmt(fields["k_geo"]), fmt(fields["v"]), int(fields["resid"])
        )
        return p.short()
