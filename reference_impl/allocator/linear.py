"""The linear allocator (ggml ``tallocr``): tensors one after another in one buffer."""

from __future__ import annotations

from dataclasses import dataclass

from reference_impl.allocator.graph import SIZE_MAX
from reference_impl.errors import AllocError
from reference_impl.spec_links import implements


@implements("ALLOC-003")
def check_alignment(alignment: int, *, field: str = "alignment") -> None:
    """Alignments are powers of two (ggml rounds with a bit mask in places)."""
    if alignment <= 0 or alignment & (alignment - 1):
        raise AllocError(
            "ALLOC_ALIGNMENT", f"alignment {alignment} is not a power of two", field=field
        )


@implements("ALLOC-014")
def align_up(size: int, alignment: int, *, what: str = "size") -> int:
    """``size`` rounded up to ``alignment``, refusing a result past SIZE_MAX instead of wrapping."""
    padded = -(-size // alignment) * alignment
    if padded > SIZE_MAX:
        raise AllocError(
            "ALLOC_OVERFLOW",
            f"{what} {size} rounded up to {alignment} overflows size_t",
            field="size",
        )
    return padded


@dataclass
class LinearAllocator:
    """Bump allocation in a buffer of ``size`` bytes whose memory starts at address ``base``.

    Offsets are relative to ``base``; alignment applies to absolute addresses, as in ggml."""

    size: int
    alignment: int
    base: int = 0
    offset: int = 0

    @implements("ALLOC-001")
    def __post_init__(self) -> None:
        check_alignment(self.alignment)
        # a zero-byte buffer has no memory, hence no base address to align to
        self.offset = (-self.base) % self.alignment if self.size else 0

    @implements("ALLOC-001", "ALLOC-002")
    def alloc(self, name: str, size: int) -> int:
        """Place a tensor of ``size`` bytes; its offset from ``base``."""
        padded = align_up(size, self.alignment, what=f"{name}: size")
        if self.offset + padded > self.size:
            raise AllocError(
                "ALLOC_OUT_OF_SPACE",
                f"{name}: needs {padded} bytes, {self.size - self.offset} left in the buffer",
                field="size",
            )
        at = self.offset
        self.offset += padded
        return at
