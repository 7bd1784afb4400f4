"""The graph planner (ggml ``gallocr``): lifetimes, in-place reuse and one virtual buffer per
buffer type, planned once by ``reserve`` and replayed by ``alloc_graph``.

The plan is stored by *position* (the i-th node, its j-th source, the i-th leaf), as ggml does:
a later graph with the same counts is placed from the old plan (ALLOC-029)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from reference_impl.allocator.chunks import Address, ChunkAllocator
from reference_impl.allocator.graph import (
    IN_PLACE_OPS,
    MAX_SRC,
    SIZE_MAX,
    Graph,
    Tensor,
    check_graph,
)
from reference_impl.allocator.linear import align_up, check_alignment
from reference_impl.errors import AllocError
from reference_impl.spec_links import implements

_R = TypeVar("_R")


@implements("ALLOC-016")
@dataclass(frozen=True)
class BufferType:
    """A backend buffer type as the allocator sees it; equal names mean the same type."""

    name: str
    alignment: int = 8
    max_size: int = SIZE_MAX


@dataclass(frozen=True)
class Slot:
    """One stored plan entry (ggml ``tensor_alloc``): buffer −1 for views and tensors with data."""

    buffer_id: int
    addr: Address | None
    size_max: int


_NO_SLOT = Slot(-1, None, 0)


@dataclass(frozen=True)
class Placement:
    """Where ``alloc_graph`` put a tensor: buffer, chunk, offset (views: their root's + offset)."""

    buffer_id: int
    chunk: int
    offset: int


@dataclass
class _Hash:
    n_children: int = 0
    n_views: int = 0
    buffer_id: int = 0
    addr: Address | None = None
    allocated: bool = False


@dataclass
class Backing:
    """A virtual buffer's backing memory: one buffer per chunk, sized when (re)allocated."""

    chunk_sizes: list[int]


@dataclass
class _Plan:
    nodes: list[tuple[Slot, tuple[Slot, ...]]] = field(default_factory=list)
    leafs: list[Slot] = field(default_factory=list)
    n_nodes: int = 0
    n_leafs: int = 0


# the test-alloc scenarios (ALLOC-035..047) exercise the planner as a whole
@implements("ALLOC-025", *(f"ALLOC-{n:03d}" for n in range(35, 48)))
class GraphAllocator:
    """A planner over ``bufts``; a buffer type listed twice shares one allocator and buffer."""

    @implements("ALLOC-015", "ALLOC-016", "ALLOC-049")
    def __init__(self, bufts: Sequence[BufferType]) -> None:
        if not bufts:
            raise AllocError(
                "ALLOC_BUFFER_ID", "a planner needs at least one buffer type", field="bufts"
            )
        first: dict[str, int] = {}
        self.bufts = list(bufts)
        self.allocs: list[ChunkAllocator] = []
        for i, bt in enumerate(self.bufts):
            check_alignment(bt.alignment, field=f"bufts[{i}].alignment")
            if bt.name in first:
                j = first[bt.name]
                if self.bufts[j] != bt:
                    raise AllocError(
                        "ALLOC_BUFFER_ID",
                        f"bufts[{i}] is named {bt.name!r} like bufts[{j}] but differs from it",
                        field="bufts",
                        index=i,
                    )
                self.allocs.append(self.allocs[j])
            else:
                first[bt.name] = i
                self.allocs.append(ChunkAllocator(bt.alignment, bt.max_size))
        self.buffers: list[Backing | None] = [None] * len(self.bufts)
        self.allocations: list[
            tuple[int, int]
        ] = []  # (buffer id, bytes): every backing buffer made
        self.placements: dict[str, Placement | None] = {}
        self._plan = _Plan()
        self._hash: dict[str, _Hash] = {}
        self._sized_only = False  # the stored plan came from reserve_size (no buffers behind it)
        self.released = False

    # -- public API (grouped as ggml-alloc.h) -------------------------------------------------
    def reserve(
        self,
        graph: Graph,
        node_buffer_ids: Sequence[int] | None = None,
        leaf_buffer_ids: Sequence[int] | None = None,
    ) -> bool:
        return self._atomic(lambda: self._reserve(graph, node_buffer_ids, leaf_buffer_ids, False))

    @implements("ALLOC-028")
    def reserve_size(
        self,
        graph: Graph,
        node_buffer_ids: Sequence[int] | None = None,
        leaf_buffer_ids: Sequence[int] | None = None,
    ) -> list[int]:
        """Plan and report each buffer's bytes (sum of its chunks' high-water marks) without
        making backing memory."""

        def run() -> list[int]:
            self._reserve(graph, node_buffer_ids, leaf_buffer_ids, True)
            return [
                _sum_sizes(a.chunk_max_sizes(), f"buffer {i}") for i, a in enumerate(self.allocs)
            ]

        return self._atomic(run)

    @implements("ALLOC-030", "ALLOC-031")
    def alloc_graph(self, graph: Graph) -> bool:
        """Give every tensor of ``graph`` its address from the stored plan, planning again first
        when the plan does not fit (single buffer only: several buffers return False)."""

        def run() -> bool:
            check_graph(graph)
            if self.needs_new_plan(graph):
                if len(self.bufts) != 1:
                    return False
                if not self._reserve(graph, None, None, False):
                    return False
            self._assign(graph)
            return True

        return self._atomic(run)

    @implements("ALLOC-015")
    def buffer_size(self, buffer_id: int) -> int:
        self._live()
        self._check_id(buffer_id, "buffer_id", len(self.bufts))
        buf = self.buffers[buffer_id]
        if buf is None or any(self.buffers[i] is buf for i in range(buffer_id)):
            return 0
        return sum(buf.chunk_sizes)

    def chunk_sizes(self, buffer_id: int) -> list[int]:
        """The sizes of the backing buffers of ``buffer_id`` (empty when it has none)."""
        self._live()
        self._check_id(buffer_id, "buffer_id", len(self.bufts))
        buf = self.buffers[buffer_id]
        return [] if buf is None else list(buf.chunk_sizes)

    def release(self) -> None:
        self.released = True
        self.buffers = [None] * len(self.bufts)

    # -- the stale-plan check ----------------------------------------------------------------
    @implements("ALLOC-029")
    def needs_new_plan(self, graph: Graph) -> bool:
        self._live()
        plan = self._plan
        if plan.n_nodes != len(graph.nodes) or plan.n_leafs != len(graph.leafs):
            return True
        for i, name in enumerate(graph.nodes):
            node = graph[name]
            dst, srcs = plan.nodes[i]
            if not self._slot_fits(node, dst):
                return True
            for j, s in enumerate(node.src):
                if not self._slot_fits(graph[s], srcs[j]):
                    return True
        return False

    def _slot_fits(self, t: Tensor, slot: Slot) -> bool:
        if t.has_data or t.is_view:
            return True
        return slot.buffer_id >= 0 and t.size <= slot.size_max

    # -- planning -----------------------------------------------------------------------------
    @implements("ALLOC-026", "ALLOC-027")
    def _reserve(
        self,
        graph: Graph,
        node_ids: Sequence[int] | None,
        leaf_ids: Sequence[int] | None,
        size_only: bool,
    ) -> bool:
        self._live()
        check_graph(graph)
        node_ids = self._ids(node_ids, len(graph.nodes), "node_buffer_ids")
        leaf_ids = self._ids(leaf_ids, len(graph.leafs), "leaf_buffer_ids")
        for a in self.allocs:
            a.reset()
        self._plan_graph(graph, node_ids, leaf_ids)

        def slot(t: Tensor) -> Slot:
            if t.is_view or t.has_data:
                return _NO_SLOT
            hn = self._hash[t.name]
            return Slot(hn.buffer_id, hn.addr, t.size)

        self._plan = _Plan(
            nodes=[
                (slot(graph[n]), _padded(tuple(slot(graph[s]) for s in graph[n].src)))
                for n in graph.nodes
            ],
            leafs=[slot(graph[leaf]) for leaf in graph.leafs],
            n_nodes=len(graph.nodes),
            n_leafs=len(graph.leafs),
        )
        for i, alloc in enumerate(self.allocs):
            shared = next((j for j in range(i) if self.allocs[j] is alloc), None)
            if shared is not None:
                self.buffers[i] = self.buffers[shared]
            buf = self.buffers[i]
            highs = alloc.chunk_max_sizes()
            _sum_sizes(highs, f"buffer {i}")
            realloc = buf is None or any(
                h > (buf.chunk_sizes[c] if c < len(buf.chunk_sizes) else 0)
                for c, h in enumerate(highs)
            )
            if realloc:
                if size_only:
                    self.buffers[i] = None
                else:
                    self.buffers[i] = Backing(list(highs))
                    # a zero-byte chunk needs no memory: the buffer type is not asked for it
                    self.allocations.extend((i, h) for h in highs if h)
        self._sized_only = size_only
        return True

    @implements("ALLOC-017", "ALLOC-018", "ALLOC-023")
    def _plan_graph(self, graph: Graph, node_ids: list[int], leaf_ids: list[int]) -> None:
        self._hash = {name: _Hash() for name in graph.tensors}
        for i, leaf in enumerate(graph.leafs):
            self._allocate(graph, graph[leaf], leaf_ids[i])
        for i, name in enumerate(graph.nodes):
            node = graph[name]
            if node.is_view and node.op != "NONE":
                assert node.view_src is not None
                self._hash[node.view_src].n_views += 1
            if node.input:
                self._allocate(graph, node, node_ids[i])
            for s in node.src:
                self._hash[s].n_children += 1
                if graph[s].input:
                    self._allocate(graph, graph[s], node_ids[i])
        for i, name in enumerate(graph.nodes):
            node = graph[name]
            for s in node.src:
                self._allocate(graph, graph[s], node_ids[i])
            self._allocate(graph, node, node_ids[i])
            for s in node.src:
                parent = graph[s]
                hn = self._hash[s]
                hn.n_children -= 1
                if hn.n_children == 0 and hn.n_views == 0:
                    if parent.is_view:
                        assert parent.view_src is not None
                        root = self._hash[parent.view_src]
                        root.n_views -= 1
                        if root.n_views == 0 and root.n_children == 0 and root.allocated:
                            self._free(graph[parent.view_src])
                    elif hn.allocated:
                        self._free(parent)

    @implements("ALLOC-019", "ALLOC-022")
    def _allocate(self, graph: Graph, t: Tensor, buffer_id: int) -> None:
        hn = self._hash[t.name]
        if t.has_data or hn.allocated or t.is_view:
            return
        hn.allocated = True
        parent = reusable_parent(graph, t, self._hash)
        if parent is not None:
            p_hn = self._hash[parent]
            hn.buffer_id, hn.addr = p_hn.buffer_id, p_hn.addr
            p_hn.allocated = False  # the node owns the region now; never free the parent
            self._free_extra_space(t, graph[parent], hn, p_hn)
            return
        hn.buffer_id = buffer_id
        hn.addr = self.allocs[buffer_id].alloc(t.size)

    @implements("ALLOC-048")
    def _free_extra_space(self, node: Tensor, parent: Tensor, hn: _Hash, p_hn: _Hash) -> None:
        alloc = self.allocs[p_hn.buffer_id]
        parent_size = align_up(parent.size, alloc.alignment)
        node_size = align_up(node.size, alloc.alignment)
        if node_size > parent_size:
            raise AllocError(
                "ALLOC_GRAPH",
                f"{node.name} reuses {parent.name} in place but needs {node.size} > {parent.size} bytes",
                field="size",
            )
        if parent_size > node_size:
            assert p_hn.addr is not None
            tail = Address(p_hn.addr.chunk, p_hn.addr.offset + node_size)
            alloc.free(tail, parent_size - node_size)

    @implements("ALLOC-024")
    def _free(self, t: Tensor) -> None:
        if t.output:
            return
        hn = self._hash[t.name]
        assert hn.addr is not None
        self.allocs[hn.buffer_id].free(hn.addr, t.size)
        hn.allocated = False

    # -- assignment ---------------------------------------------------------------------------
    @implements("ALLOC-034")
    def _assign(self, graph: Graph) -> None:
        if self._sized_only:
            raise AllocError(
                "ALLOC_STATE",
                "the stored plan came from reserve_size, which makes no buffers: reserve first",
                field="planner",
            )
        placed: dict[str, Placement | None] = {}

        def init(t: Tensor, slot: Slot) -> None:
            if t.is_view:
                # a view whose root has no memory yet stays unplaced and is tried again when
                # met again (ggml initializes a view once its root has a buffer)
                if placed.get(t.name) is not None:
                    return
                assert t.view_src is not None
                root = placed.get(t.view_src)
                placed[t.name] = (
                    None
                    if root is None
                    else Placement(root.buffer_id, root.chunk, root.offset + t.view_offs)
                )
            elif t.name in placed:
                return  # the first plan entry met wins, as in ggml
            elif t.has_data:
                placed[t.name] = None
            else:
                if slot.addr is None or not self._slot_fits(t, slot):
                    raise AllocError(
                        "ALLOC_STATE",
                        f"{t.name} ({t.size} bytes) does not fit its stored plan entry "
                        f"(buffer {slot.buffer_id}, {slot.size_max} bytes): only nodes and their "
                        "sources are checked before a plan is reused; reserve this graph first",
                        field="leafs",
                    )
                placed[t.name] = Placement(slot.buffer_id, slot.addr.chunk, slot.addr.offset)

        for i, leaf in enumerate(graph.leafs):
            init(graph[leaf], self._plan.leafs[i])
        for i, name in enumerate(graph.nodes):
            node = graph[name]
            dst, srcs = self._plan.nodes[i]
            for j, s in enumerate(node.src):
                init(graph[s], srcs[j])
            init(node, dst)
        self.placements = placed

    # -- helpers ------------------------------------------------------------------------------
    @implements("ALLOC-033")
    def _atomic(self, fn: Callable[[], _R]) -> _R:
        """Run ``fn``; on an AllocError put every piece of state back as it was (ALLOC-033).

        Planning replaces the plan, the hash records, the placements and the backing buffers
        wholesale and only appends to the allocation log, so keeping references to them is
        enough; the chunk allocators are edited in place, so their chunks are copied."""
        self._live()
        chunks = [copy.deepcopy(a.chunks) for a in self.allocs]
        saved = (
            list(self.buffers),
            len(self.allocations),
            self.placements,
            self._plan,
            self._hash,
            self._sized_only,
        )
        try:
            return fn()
        except AllocError:
            for a, kept in zip(self.allocs, chunks, strict=True):
                a.chunks = kept
            buffers, n_made, self.placements, self._plan, self._hash, self._sized_only = saved
            self.buffers = buffers
            del self.allocations[n_made:]
            raise

    @implements("ALLOC-034")
    def _live(self) -> None:
        if self.released:
            raise AllocError("ALLOC_STATE", "graph allocator used after release", field="planner")

    @implements("ALLOC-049")
    def _ids(self, ids: Sequence[int] | None, n: int, what: str) -> list[int]:
        if ids is None:
            return [0] * n
        if len(ids) != n:
            raise AllocError(
                "ALLOC_BUFFER_ID", f"{what} has {len(ids)} entries for {n}", field=what
            )
        for i, b in enumerate(ids):
            self._check_id(b, what, len(self.bufts), index=i)
        return list(ids)

    @staticmethod
    def _check_id(b: int, what: str, n: int, index: int | None = None) -> None:
        if not 0 <= b < n:
            raise AllocError(
                "ALLOC_BUFFER_ID",
                f"{what}: buffer id {b} outside [0, {n})",
                field=what,
                index=index,
            )


@implements("ALLOC-020", "ALLOC-021", "ALLOC-024")
def reusable_parent(graph: Graph, node: Tensor, hashes: dict[str, _Hash]) -> str | None:
    """The source ``node`` may overwrite in place: the first, in source order, that this
    planner placed itself (so never a view: decision D3), is not an output nor a view of one,
    has the node's layout, and has the node as its only child and no views."""
    if node.op not in IN_PLACE_OPS:
        return None
    for s in node.src:
        parent, p_hn = graph[s], hashes[s]
        if not p_hn.allocated:
            continue
        if parent.output or (parent.view_src is not None and graph[parent.view_src].output):
            continue
        if parent.shape != node.shape:
            continue
        if p_hn.n_children == 1 and p_hn.n_views == 0:
            return s
    return None


def _padded(slots: tuple[Slot, ...]) -> tuple[Slot, ...]:
    """A node's source slots for all MAX_SRC positions (an empty position stores no slot)."""
    return slots + (_NO_SLOT,) * (MAX_SRC - len(slots))


@implements("ALLOC-014")
def _sum_sizes(sizes: Sequence[int], what: str) -> int:
    total = sum(sizes)
    if total > SIZE_MAX:
        raise AllocError(
            "ALLOC_OVERFLOW", f"{what}: chunks sum to more than SIZE_MAX", field="size"
        )
    return total
