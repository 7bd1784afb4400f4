"""One error vocabulary for the reference decoder.

Every failure raised by ``reference_impl`` is an :class:`EngineError` carrying a stable
``code`` (e.g. ``"SAN_SEQ_ID_RANGE"``), the input ``field`` at fault, the token ``index`` and
sequence (``seq_id``) when they apply, and a human-readable ``message``. Codes are documented
in the spec next to the invariant they enforce; they never change meaning once released.
The public ``Context`` maps these to llama_decode's integer return codes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reference_impl.spec_links import implements


class EngineError(Exception):
    """Base class: a typed, structured failure of the reference engine."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        field: str | None = None,
        index: int | None = None,
        seq_id: int | None = None,
    ) -> None:
        self.code = code
        self.field = field
        self.index = index
        self.seq_id = seq_id
        self.message = message
        super().__init__(self.__str__())

    def __str__(self) -> str:
        where = []
        if self.field is not None:
            where.append(f"field={self.field}")
        if self.index is not None:
            where.append(f"index={self.index}")
        if self.seq_id is not None:
            where.append(f"seq_id={self.seq_id}")
        loc = f" ({', '.join(where)})" if where else ""
        return f"[{self.code}]{loc} {self.message}"

    def as_dict(self) -> dict[str, object]:
        return {
            "code": self.code,
            "field": self.field,
            "index": self.index,
            "seq_id": self.seq_id,
            "message": self.message,
        }


@implements("SAN-026")
class BatchError(EngineError):
    """An invalid batch (sanitizer) or a split that cannot be produced (splitter)."""


class KVCacheError(EngineError):
    """KV cache / memory failures (invalid sequence ids, ranges, streams, no slot)."""


class ModelLoadError(EngineError):
    """A GGUF file that cannot be loaded (unsupported architecture, tensor type, shape...)."""


class KernelError(EngineError):
    """Invalid kernel inputs or KV cache policy strings."""


class SamplingError(EngineError):
    """Invalid sampler parameters or candidate arrays."""


class DecoderError(EngineError):
    """A decode that cannot proceed (codes DEC_*): oversized batch, no slot, failed compute..."""


class GeneratorError(EngineError):
    """An invalid generation request or a failed decode during generation (codes GEN_*).

    A failed decode carries the trace up to and including the failed call and its code."""

    trace: list[Any] | None = None
    decode_code: int | None = None

    @implements("GEN-010")
    def with_trace(self, trace: Sequence[Any], code: int) -> GeneratorError:
        self.trace = list(trace)
        self.decode_code = code
        return self


class AllocError(EngineError):
    """A buffer or graph allocation that cannot be done (codes ALLOC_*, spec/allocator.md D1);
    the allocator is left as it was before the call."""
