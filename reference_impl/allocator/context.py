"""Allocating a context's tensors (ggml ``alloc_ctx_tensors_from_buft``): weights and other
tensors that live for the whole run, packed by linear allocators into as few buffers as the
buffer type's maximum size allows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reference_impl.allocator.graph import SIZE_MAX, Tensor, check_tensors
from reference_impl.allocator.linear import LinearAllocator, align_up, check_alignment
from reference_impl.allocator.planner import BufferType
from reference_impl.errors import AllocError
from reference_impl.spec_links import implements


@dataclass(frozen=True)
class CtxAllocation:
    """The buffers made (their sizes, in order) and where each tensor went: ``(buffer index,
    offset)``; views at their root's place plus their offset, None for tensors with data."""

    buffer_sizes: tuple[int, ...]
    placements: dict[str, tuple[int, int] | None]


def _ranges(tensors: Sequence[Tensor], buft: BufferType) -> list[tuple[int, int, int]]:
    """``(first, end, bytes)`` of each buffer: tensors in creation order, a new buffer when the
    current one is non-empty and the next tensor would take it past the maximum size."""
    out: list[tuple[int, int, int]] = []
    first, cur = 0, 0
    for i, t in enumerate(tensors):
        this = (
            0
            if t.has_data or t.is_view
            else align_up(t.size, buft.alignment, what=f"{t.name}: size")
        )
        if cur > 0 and cur + this > buft.max_size:
            out.append((first, i, cur))
            first, cur = i, this
        else:
            cur += this
            if cur > SIZE_MAX:
                raise AllocError(
                    "ALLOC_OVERFLOW", f"{t.name}: buffer size overflows size_t", field="size"
                )
    if cur > 0:
        out.append((first, len(tensors), cur))
    return out


def _check(tensors: Sequence[Tensor], buft: BufferType, no_alloc: bool) -> None:
    if not no_alloc:
        raise AllocError(
            "ALLOC_CONTEXT_ALLOCATED",
            "the context already allocates its tensors (create it with no_alloc)",
            field="no_alloc",
        )
    check_alignment(buft.alignment)
    check_tensors(tensors)


@implements("ALLOC-032")
def alloc_ctx_tensors(
    tensors: Sequence[Tensor], buft: BufferType, *, no_alloc: bool
) -> CtxAllocation | None:
    """Place every tensor without memory; None when none needs any."""
    _check(tensors, buft, no_alloc)
    ranges = _ranges(tensors, buft)
    if not ranges:
        return None
    # tensors with data keep None, and so do views and tensors with data after the last buffer
    # closed (they belong to no range): ggml leaves them uninitialized
    placements: dict[str, tuple[int, int] | None] = dict.fromkeys((t.name for t in tensors), None)
    for b, (first, end, size) in enumerate(ranges):
        talloc = LinearAllocator(size, buft.alignment)
        for t in tensors[first:end]:
            if t.is_view:
                assert t.view_src is not None
                placements[t.name] = _view(placements[t.view_src], t.view_offs)
            elif not t.has_data:
                placements[t.name] = (b, talloc.alloc(t.name, t.size))
    return CtxAllocation(tuple(size for _, _, size in ranges), placements)


def _view(root: tuple[int, int] | None, offs: int) -> tuple[int, int] | None:
    return None if root is None else (root[0], root[1] + offs)


@implements("ALLOC-032", "ALLOC-014")
def alloc_ctx_tensors_size(tensors: Sequence[Tensor], buft: BufferType, *, no_alloc: bool) -> int:
    """The bytes :func:`alloc_ctx_tensors` would allocate, allocating nothing."""
    _check(tensors, buft, no_alloc)
    total = sum(size for _, _, size in _ranges(tensors, buft))
    if total > SIZE_MAX:  # each buffer is a size_t, their sum may not be (ggml wraps it)
        raise AllocError(
            "ALLOC_OVERFLOW", f"the buffers sum to {total} bytes, past SIZE_MAX", field="size"
        )
    return total
