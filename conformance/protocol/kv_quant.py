"""Protocol of the kv_quant area (spec/kv_quant.md): per-token KV formats (q8_0, q4_0, nf4),
GGML Q8_0/Q4_0 blocks and the cache policy string. Tensors cross as torch CPU tensors (or the
device the target's kernels use); errors carry ``QNT_*`` codes and a ``field``.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from conformance.protocol import capability


class Formats(Protocol):
    def kv_quant_impls(self) -> tuple[str, ...]:
        """The implementations the target offers, each checked (e.g. ``("torch", "triton")``)."""
        ...

    def kv_quantize(
        self, x: torch.Tensor, kind: str, qblock: int, impl: str = "torch"
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(codes, scales)`` of ``x`` along its last dim."""
        ...

    def kv_dequantize(
        self,
        codes: torch.Tensor,
        scales: torch.Tensor,
        kind: str,
        qblock: int,
        dim: int,
        impl: str = "torch",
    ) -> torch.Tensor: ...

    def kv_bytes_per_token(self, kind: str, dim: int, qblock: int) -> int:
        """Bytes one token's ``dim`` values of ``kind`` (``fp16``, ``fp32`` or a per-token kind
        in blocks of ``qblock``) take in the cache's main buffers: codes plus scales."""
        ...

    def ggml_quantize(self, x: torch.Tensor, qtype: str, impl: str = "torch") -> torch.Tensor:
        """GGML ``Q8_0`` / ``Q4_0`` rows as uint8 bytes."""
        ...

    def ggml_dequantize(
        self, data: torch.Tensor, qtype: str, impl: str = "torch"
    ) -> torch.Tensor: ...


class Policy(Protocol):
    def parse_kv_policy(self, text: str) -> dict[str, Any]:
        """``{"k_sem": "kind@qb", "k_geo": ..., "v": ..., "resid": int, "fused": bool}``."""
        ...

    def format_kv_policy(self, fields: dict[str, Any]) -> str:
        """The canonical policy string of those fields."""
        ...


CAPABILITIES = (
    capability("kv_quant.formats", Formats, "per-token KV formats and GGML blocks"),
    capability("kv_quant.policy", Policy, "the KV cache policy string"),
)
