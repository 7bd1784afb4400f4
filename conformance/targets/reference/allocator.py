"""The allocator area of the reference target: :mod:`conformance.protocol.allocator` over
``reference_impl.allocator``."""

from __future__ import annotations

from collections.abc import Sequence

from reference_impl.allocator import chunks, context, linear, planner
from reference_impl.allocator.graph import Tensor


class _Chunks:
    """Addresses as plain ``(chunk, offset)`` pairs over :class:`chunks.ChunkAllocator`."""

    def __init__(self, alignment: int, max_size: int) -> None:
        self._a = chunks.ChunkAllocator(alignment, max_size)

    def alloc(self, size: int) -> tuple[int, int]:
        addr = self._a.alloc(size)
        return addr.chunk, addr.offset

    def free(self, addr: tuple[int, int], size: int) -> None:
        self._a.free(chunks.Address(*addr), size)

    def reset(self) -> None:
        self._a.reset()

    def release(self) -> None:
        self._a.release()

    def free_blocks(self, chunk: int) -> list[tuple[int, int]]:
        return self._a.free_blocks(chunk)

    def chunk_max_sizes(self) -> list[int]:
        return self._a.chunk_max_sizes()


class Reference:
    # -- allocator.linear ----------------------------------------------------------------------
    def allocator_linear(self, size: int, alignment: int, base: int = 0) -> linear.LinearAllocator:
        return linear.LinearAllocator(size, alignment, base)

    # -- allocator.chunks ----------------------------------------------------------------------
    def allocator_chunks(self, alignment: int, max_size: int) -> _Chunks:
        return _Chunks(alignment, max_size)

    # -- allocator.planner ---------------------------------------------------------------------
    def allocator_planner(self, bufts: Sequence[planner.BufferType]) -> planner.GraphAllocator:
        return planner.GraphAllocator(bufts)

    # -- allocator.ctx_tensors -----------------------------------------------------------------
    def allocator_ctx_tensors(
        self, tensors: Sequence[Tensor], buft: planner.BufferType, *, no_alloc: bool = True
    ) -> context.CtxAllocation | None:
        return context.alloc_ctx_tensors(tensors, buft, no_alloc=no_alloc)

    def allocator_ctx_tensors_size(
        self, tensors: Sequence[Tensor], buft: planner.BufferType, *, no_alloc: bool = True
    ) -> int:
        return context.alloc_ctx_tensors_size(tensors, buft, no_alloc=no_alloc)
