"""Protocol of the allocator area (spec/allocator.md): ggml-alloc's linear allocator, chunk
allocator, graph planner and context-tensor helper, for engines that carry their own (EMEL's
allocator cluster) or that are ggml (the llama.cpp target drives the real ``libggml-base``).

Graphs cross as the records of :mod:`reference_impl.allocator.graph` (``Graph``, ``Tensor``,
``Layout``), buffer types as ``BufferType`` (name, alignment, max size: equal names are the
same type). Addresses are ``(chunk, offset)`` pairs relative to a chunk's start; a placement
is a :class:`~reference_impl.allocator.planner.Placement` or None (not placed by the planner).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from conformance.protocol import capability, role
from reference_impl.allocator.context import CtxAllocation
from reference_impl.allocator.graph import Graph, Tensor
from reference_impl.allocator.planner import BufferType, Placement


@role("linear_allocator")
class LinearAllocator(Protocol):
    """ggml ``tallocr`` over one buffer of ``size`` bytes starting at address ``base``."""

    @property
    def offset(self) -> int:
        """The next free offset from ``base``."""
        ...

    def alloc(self, name: str, size: int) -> int:
        """Place a tensor of ``size`` bytes; its offset from ``base``."""
        ...


class Linear(Protocol):
    def allocator_linear(self, size: int, alignment: int, base: int = 0) -> LinearAllocator: ...


@role("chunk_allocator")
class ChunkAllocator(Protocol):
    """ggml ``dyn_tallocr``: addresses in up to 16 chunks, with per-chunk free lists."""

    def alloc(self, size: int) -> tuple[int, int]:
        """``(chunk, offset)`` of a new region of ``size`` bytes (rounded up)."""
        ...

    def free(self, addr: tuple[int, int], size: int) -> None: ...
    def reset(self) -> None: ...
    def release(self) -> None: ...

    def free_blocks(self, chunk: int) -> list[tuple[int, int]]:
        """``(offset, size)`` of each free block of ``chunk``, in list order."""
        ...

    def chunk_max_sizes(self) -> list[int]:
        """Each chunk's high-water mark (the bytes its backing buffer needs)."""
        ...


class Chunks(Protocol):
    def allocator_chunks(self, alignment: int, max_size: int) -> ChunkAllocator: ...


@role("planner")
class Planner(Protocol):
    """ggml ``gallocr`` over ``bufts`` (one virtual buffer per distinct type)."""

    def reserve(
        self,
        graph: Graph,
        node_buffer_ids: Sequence[int] | None = None,
        leaf_buffer_ids: Sequence[int] | None = None,
    ) -> bool: ...

    def reserve_size(
        self,
        graph: Graph,
        node_buffer_ids: Sequence[int] | None = None,
        leaf_buffer_ids: Sequence[int] | None = None,
    ) -> list[int]:
        """Per buffer, the bytes a reserve would need; no backing memory is made."""
        ...

    def alloc_graph(self, graph: Graph) -> bool: ...

    def buffer_size(self, buffer_id: int) -> int: ...

    def chunk_sizes(self, buffer_id: int) -> list[int]:
        """Sizes of the backing buffers (one per chunk) of ``buffer_id``; empty when none."""
        ...

    @property
    def placements(self) -> dict[str, Placement | None]:
        """Where the last successful ``alloc_graph`` put each tensor of its graph."""
        ...

    @property
    def allocations(self) -> list[tuple[int, int]]:
        """``(buffer id, bytes)`` of every backing buffer made so far, in order (the calls to
        the buffer type's ``alloc_buffer``; a zero-byte chunk makes no call)."""
        ...

    def release(self) -> None: ...


class Planning(Protocol):
    def allocator_planner(self, bufts: Sequence[BufferType]) -> Planner: ...


class CtxTensors(Protocol):
    def allocator_ctx_tensors(
        self, tensors: Sequence[Tensor], buft: BufferType, *, no_alloc: bool = True
    ) -> CtxAllocation | None:
        """Place a context's tensors (creation order) in as few buffers as ``buft`` allows."""
        ...

    def allocator_ctx_tensors_size(
        self, tensors: Sequence[Tensor], buft: BufferType, *, no_alloc: bool = True
    ) -> int: ...


class Errors(Protocol):
    """Failures raise an exception with an ``ALLOC_*`` ``code`` and change nothing (decision D1:
    where ggml aborts the process)."""

    def allocator_planner(self, bufts: Sequence[BufferType]) -> Planner: ...


CAPABILITIES = (
    capability("allocator.linear", Linear, "the linear allocator (tallocr)"),
    capability("allocator.chunks", Chunks, "the chunk allocator and its free lists (dyn_tallocr)"),
    capability("allocator.planner", Planning, "the graph planner (gallocr)"),
    capability("allocator.ctx_tensors", CtxTensors, "allocating a context's tensors"),
    capability("allocator.errors", Errors, "typed ALLOC_* errors instead of aborts"),
)
