"""The configuration of a decoupled-attention language model (spec/decoupled.md).

Every knob is an explicit field (the decoupled project read some long-sequence knobs with
``getattr`` fallbacks, seed 001 §"Make long-seq approximation knobs explicit"). Dimensions
``d_sem``, ``d_geo`` and ``d_v`` are totals over the heads, as in that project; the per-head
sizes are the properties ``sem_head_dim`` etc.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from reference_impl.errors import ModelLoadError
from reference_impl.spec_links import implements

SUMMARIZERS = ("mean", "linear", "conv")
_TYPES: dict[str, type | tuple[type, ...]] = {
    "int": int,
    "float": (int, float),
    "bool": bool,
    "str": str,
}


def _bad(name: str, message: str) -> ModelLoadError:
    return ModelLoadError("DBA_BAD_CONFIG", f"{name}: {message}", field=name)


@implements("DBA-008", "DBA-030")
@dataclass(frozen=True)
class DecoupledConfig:
    vocab: int = 64
    d_model: int = 64
    n_layer: int = 2
    n_head: int = 2
    d_sem: int = 32  # semantic query/key width, all heads
    d_geo: int = 32  # geometric (RoPE) query/key width, all heads
    d_v: int = 64  # value width, all heads (out_proj maps d_v -> d_model)
    d_ff: int = 128  # MLP hidden width
    null_attn: bool = False  # one learned null key/value per head
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    # The training long-sequence approximation (DBA-008/DBA-009), used by forward(approx=True).
    mem_block: int = 8  # tokens averaged into one memory token
    local_window: int = 16  # recent tokens attended at full resolution
    q_chunk: int = 8  # queries per chunk
    summarizer: str = "mean"  # mean | linear | conv

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            want: type | tuple[type, ...] = _TYPES[str(f.type)]
            if isinstance(value, bool) != (f.type == "bool") or not isinstance(value, want):
                raise _bad(f.name, f"expected {f.type}, got {value!r}")
        for name in ("vocab", "d_model", "n_layer", "n_head", "d_sem", "d_geo", "d_v", "d_ff"):
            if getattr(self, name) < 1:
                raise _bad(name, f"must be >= 1, got {getattr(self, name)}")
        for name in ("d_sem", "d_geo", "d_v"):
            if getattr(self, name) % self.n_head:
                raise _bad(name, f"{getattr(self, name)} is not divisible by n_head={self.n_head}")
        if self.geo_head_dim % 2:
            raise _bad("d_geo", f"rotate-half RoPE needs an even head dim, got {self.geo_head_dim}")
        for name in ("mem_block", "local_window", "q_chunk"):
            if getattr(self, name) < 1:
                raise _bad(name, f"must be >= 1, got {getattr(self, name)}")
        if self.summarizer not in SUMMARIZERS:
            raise _bad("summarizer", f"{self.summarizer!r} is not one of {', '.join(SUMMARIZERS)}")
        if not self.rope_base > 1.0:
            raise _bad("rope_base", f"must be > 1, got {self.rope_base}")

    @property
    def sem_head_dim(self) -> int:
        return self.d_sem // self.n_head

    @property
    def geo_head_dim(self) -> int:
        return self.d_geo // self.n_head

    @property
    def v_head_dim(self) -> int:
        return self.d_v // self.n_head

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DecoupledConfig:
        """Build from a mapping; an unknown key is an error naming it (a typo must not be
        silently dropped)."""
        known = {f.name for f in fields(cls)}
        for key in data:
            if key not in known:
                raise _bad(str(key), "unknown config field")
        return cls(**dict(data))
