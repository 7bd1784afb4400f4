"""The chunk allocator (ggml ``dyn_tallocr``): free lists over up to 16 chunks of a virtual
buffer. It hands out addresses only; the planner decides when backing memory is (re)made."""

from __future__ import annotations

from dataclasses import dataclass, field

from reference_impl.allocator.graph import SIZE_MAX
from reference_impl.allocator.linear import align_up, check_alignment
from reference_impl.errors import AllocError
from reference_impl.spec_links import implements

MAX_CHUNKS = 16
MAX_FREE_BLOCKS = 256
_HALF = SIZE_MAX // 2


@dataclass(frozen=True, order=True)
class Address:
    """Where a tensor lives in a virtual buffer: a chunk index and a byte offset in it."""

    chunk: int
    offset: int


@dataclass
class Block:
    offset: int
    size: int

    @property
    def end(self) -> int:
        return self.offset + self.size


@dataclass
class Chunk:
    blocks: list[Block]
    max_size: int = 0  # high-water mark: the bytes this chunk's backing buffer must have


def _as_int64(value: int) -> int:
    """C's ``(int64_t)`` of a ``size_t`` difference (ggml computes the reuse factor so)."""
    value %= 2**64
    return value - 2**64 if value >= 2**63 else value


@implements("ALLOC-006")
def best_non_last(chunks: list[Chunk], size: int) -> tuple[int, int] | None:
    """``(chunk, block)``: the smallest fitting block that is not last in its chunk, ties to
    the higher offset; the best size restarts at every chunk, so a later chunk with any fit
    wins (decision D2)."""
    best = None
    for c, chunk in enumerate(chunks):
        best_size = SIZE_MAX
        for i, block in enumerate(chunk.blocks[:-1]):
            if size <= block.size <= best_size:
                best, best_size = (c, i), block.size
    return best


@implements("ALLOC-007")
def best_last(chunks: list[Chunk], size: int) -> tuple[int, int] | None:
    """``(chunk, block)``: among the last blocks that fit, the chunk that fits the tensor
    within its high-water mark with the least slack; else the one that grows least."""
    best, best_reuse = None, -(2**63)
    for c, chunk in enumerate(chunks):
        if not chunk.blocks:
            continue
        last = chunk.blocks[-1]
        reuse = _as_int64(chunk.max_size - last.offset - size)
        better = (best_reuse < 0 and reuse > best_reuse) or (0 <= reuse < best_reuse)
        if last.size >= size and better:
            best, best_reuse = (c, len(chunk.blocks) - 1), reuse
    return best


@implements("ALLOC-004")
@dataclass
class ChunkAllocator:
    alignment: int
    max_size: int = SIZE_MAX  # the buffer type's maximum buffer size
    chunks: list[Chunk] = field(default_factory=list)
    released: bool = False

    def __post_init__(self) -> None:
        check_alignment(self.alignment)
        self.max_chunk_size = min(self.max_size, _HALF)

    def _live(self) -> None:
        if self.released:
            raise AllocError("ALLOC_STATE", "chunk allocator used after release", field="allocator")

    # -- allocation ---------------------------------------------------------------------------
    @implements("ALLOC-005")
    def _new_chunk(self, min_size: int) -> int:
        size = _HALF if len(self.chunks) == MAX_CHUNKS - 1 else max(min_size, self.max_chunk_size)
        self.chunks.append(Chunk([Block(0, size)]))
        return len(self.chunks) - 1

    @implements("ALLOC-008", "ALLOC-009")
    def alloc(self, size: int) -> Address:
        self._live()
        size = align_up(size, self.alignment)
        best = best_non_last(self.chunks, size) or best_last(self.chunks, size)
        if best is None:  # a new chunk (the 16th never runs out, so there is no 17th)
            best = (self._new_chunk(size), 0)
        c, i = best
        chunk = self.chunks[c]
        block = chunk.blocks[i]
        addr = Address(c, block.offset)
        block.offset += size
        block.size -= size
        if block.size == 0:
            del chunk.blocks[i]
        chunk.max_size = max(chunk.max_size, addr.offset + size)
        return addr

    # -- freeing ------------------------------------------------------------------------------
    @implements("ALLOC-010", "ALLOC-011", "ALLOC-012")
    def free(self, addr: Address, size: int) -> None:
        self._live()
        if not 0 <= addr.chunk < len(self.chunks):
            raise AllocError(
                "ALLOC_STATE", f"free in chunk {addr.chunk}, which does not exist", field="chunk"
            )
        size = align_up(size, self.alignment)
        blocks = self.chunks[addr.chunk].blocks
        for i, block in enumerate(blocks):
            if block.end == addr.offset:
                block.size += size
                if i + 1 < len(blocks) and block.end == blocks[i + 1].offset:
                    block.size += blocks[i + 1].size
                    del blocks[i + 1]
                return
            if addr.offset + size == block.offset:
                block.offset = addr.offset
                block.size += size
                if i > 0 and blocks[i - 1].end == block.offset:
                    blocks[i - 1].size += block.size
                    del blocks[i]
                return
        if len(blocks) >= MAX_FREE_BLOCKS:
            raise AllocError(
                "ALLOC_TOO_MANY_FREE_BLOCKS",
                f"chunk {addr.chunk} already has {MAX_FREE_BLOCKS} free blocks",
                field="chunk",
            )
        pos = 0
        while pos < len(blocks) and blocks[pos].offset < addr.offset:
            pos += 1
        blocks.insert(pos, Block(addr.offset, size))

    @implements("ALLOC-013")
    def reset(self) -> None:
        self._live()
        self.chunks = []

    def release(self) -> None:
        self.released = True

    # -- what a test may read -----------------------------------------------------------------
    def free_blocks(self, chunk: int) -> list[tuple[int, int]]:
        return [(b.offset, b.size) for b in self.chunks[chunk].blocks]

    def chunk_max_sizes(self) -> list[int]:
        return [c.max_size for c in self.chunks]
