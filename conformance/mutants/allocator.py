"""Allocator mutants: one deliberate defect each in ``reference_impl.allocator`` (see tests/meta).

The chunk allocator's choice rules and the planner's in-place rule are module-level functions,
so most mutants replace one of them; the others patch one method of a class for the rest of the
(dedicated) process.
"""

from __future__ import annotations

from dataclasses import replace as dc_replace
from typing import Any

from conformance.mutants import Mutant, replace
from reference_impl.allocator import chunks, context, linear, planner
from reference_impl.allocator.graph import SIZE_MAX, Tensor


def _patch(cls: type, name: str, new: Any) -> None:
    if not hasattr(cls, name):
        raise AttributeError(f"mutant patch target {cls.__name__}.{name} does not exist")
    setattr(cls, name, new)


def _global_best_fit(target: Any) -> Any:
    def best_non_last(cs: list[chunks.Chunk], size: int) -> tuple[int, int] | None:
        best, best_size = None, SIZE_MAX
        for c, chunk in enumerate(cs):  # the defect: the best size does not restart per chunk
            for i, block in enumerate(chunk.blocks[:-1]):
                if size <= block.size <= best_size:
                    best, best_size = (c, i), block.size
        return best

    replace("reference_impl.allocator.chunks", "best_non_last", best_non_last)
    return target


def _ties_to_lower_offset(target: Any) -> Any:
    def best_non_last(cs: list[chunks.Chunk], size: int) -> tuple[int, int] | None:
        best = None
        for c, chunk in enumerate(cs):
            best_size = SIZE_MAX + 1
            for i, block in enumerate(chunk.blocks[:-1]):
                if size <= block.size < best_size:  # the defect: strict, so ties keep the first
                    best, best_size = (c, i), block.size
        return best

    replace("reference_impl.allocator.chunks", "best_non_last", best_non_last)
    return target


def _last_block_first_fit(target: Any) -> Any:
    def best_last(cs: list[chunks.Chunk], size: int) -> tuple[int, int] | None:
        for c, chunk in enumerate(cs):  # the defect: the first chunk whose last block fits
            if chunk.blocks and chunk.blocks[-1].size >= size:
                return c, len(chunk.blocks) - 1
        return None

    replace("reference_impl.allocator.chunks", "best_last", best_last)
    return target


def _reuse_unwrapped(target: Any) -> Any:
    # the defect: the reuse factor is an unbounded integer, so a slack of 2^63 or more stays
    # non-negative instead of wrapping
    replace("reference_impl.allocator.chunks", "_as_int64", lambda value: value)
    return target


def _no_sixteenth_chunk(target: Any) -> Any:
    def _new_chunk(self: chunks.ChunkAllocator, min_size: int) -> int:
        # the defect: the 16th chunk is an ordinary one, so a 17th gets opened
        self.chunks.append(chunks.Chunk([chunks.Block(0, max(min_size, self.max_chunk_size))]))
        return len(self.chunks) - 1

    _patch(chunks.ChunkAllocator, "_new_chunk", _new_chunk)
    return target


def _free_never_merges_next(target: Any) -> Any:
    original = chunks.ChunkAllocator.free

    def free(self: chunks.ChunkAllocator, addr: chunks.Address, size: int) -> None:
        self._live()
        size = linear.align_up(size, self.alignment)
        blocks = self.chunks[addr.chunk].blocks
        for block in blocks:
            if block.end == addr.offset:
                block.size += size  # the defect: no merge with the block that now touches
                return
        original(self, addr, size)

    _patch(chunks.ChunkAllocator, "free", free)
    return target


def _free_exact_size(target: Any) -> Any:
    original = chunks.ChunkAllocator.free

    def free(self: chunks.ChunkAllocator, addr: chunks.Address, size: int) -> None:
        align = self.alignment
        self.alignment = 1  # the defect: the freed size is not rounded up to the alignment
        try:
            original(self, addr, size)
        finally:
            self.alignment = align

    _patch(chunks.ChunkAllocator, "free", free)
    return target


def _reset_keeps_chunks(target: Any) -> Any:
    def reset(self: chunks.ChunkAllocator) -> None:
        self._live()
        for chunk in self.chunks:  # the defect: chunks stay, only their free lists restart
            chunk.blocks = [chunks.Block(0, max(chunk.max_size, self.max_chunk_size))]

    _patch(chunks.ChunkAllocator, "reset", reset)
    return target


def _linear_aligns_offsets(target: Any) -> Any:
    def __post_init__(self: linear.LinearAllocator) -> None:
        linear.check_alignment(self.alignment)
        self.offset = 0  # the defect: aligns offsets from the base, not absolute addresses

    _patch(linear.LinearAllocator, "__post_init__", __post_init__)
    return target


def _linear_overflows_buffer(target: Any) -> Any:
    def alloc(self: linear.LinearAllocator, name: str, size: int) -> int:
        padded = linear.align_up(size, self.alignment)
        at = self.offset  # the defect: no check against the buffer's end
        self.offset += padded
        return at

    _patch(linear.LinearAllocator, "alloc", alloc)
    return target


def _views_not_counted(target: Any) -> Any:
    original = planner.GraphAllocator._plan_graph

    def _plan_graph(self: Any, graph: Any, node_ids: Any, leaf_ids: Any) -> None:
        # the defect: views do not keep their root alive (no view counts)
        nodes = {n: graph[n] for n in graph.tensors}
        flat = {
            n: (t if not t.is_view or t.op == "NONE" else _as_plain_view(t))
            for n, t in nodes.items()
        }
        g2 = type(graph)(flat, graph.nodes, graph.leafs, graph.order)
        original(self, g2, node_ids, leaf_ids)

    _patch(planner.GraphAllocator, "_plan_graph", _plan_graph)
    return target


def _as_plain_view(t: Any) -> Any:
    """The same view with op NONE, which the planner does not count."""
    return dc_replace(t, op="NONE")


def _leafs_placed_lazily(target: Any) -> Any:
    original = planner.GraphAllocator._plan_graph

    def _plan_graph(self: Any, graph: Any, node_ids: Any, leaf_ids: Any) -> None:
        # the defect: leafs are placed when a node first reads them, not before all nodes
        g2 = type(graph)(graph.tensors, graph.nodes, (), graph.order)
        original(self, g2, node_ids, [])
        for i, leaf in enumerate(graph.leafs):
            self._allocate(graph, graph[leaf], leaf_ids[i])

    _patch(planner.GraphAllocator, "_plan_graph", _plan_graph)
    return target


def _reuse_any_child_count(target: Any) -> Any:
    def reusable_parent(graph: Any, node: Any, hashes: dict[str, Any]) -> str | None:
        if node.op not in planner.IN_PLACE_OPS:
            return None
        for s in node.src:
            parent, p_hn = graph[s], hashes[s]
            if p_hn.allocated and not parent.output and parent.shape == node.shape:
                return s  # the defect: a parent other nodes still read is overwritten
        return None

    replace("reference_impl.allocator.planner", "reusable_parent", reusable_parent)
    return target


def _reuse_outputs(target: Any) -> Any:
    def reusable_parent(graph: Any, node: Any, hashes: dict[str, Any]) -> str | None:
        if node.op not in planner.IN_PLACE_OPS:
            return None
        for s in node.src:
            parent, p_hn = graph[s], hashes[s]
            # the defect: outputs are taken over like any other parent
            taken = p_hn.allocated and parent.shape == node.shape
            if taken and p_hn.n_children == 1 and p_hn.n_views == 0:
                return s
        return None

    replace("reference_impl.allocator.planner", "reusable_parent", reusable_parent)
    return target


def _reuse_any_layout(target: Any) -> Any:
    original = planner.reusable_parent

    def reusable_parent(graph: Any, node: Any, hashes: dict[str, Any]) -> str | None:
        # the defect: layouts are not compared (every source looks like the node)
        tensors = {
            **graph.tensors,
            **{s: dc_replace(graph[s], layout=node.shape) for s in node.src},
        }
        return original(type(graph)(tensors, graph.nodes, graph.leafs, graph.order), node, hashes)

    replace("reference_impl.allocator.planner", "reusable_parent", reusable_parent)
    return target


def _clamp_not_in_place(target: Any) -> Any:
    replace("reference_impl.allocator.planner", "IN_PLACE_OPS", planner.IN_PLACE_OPS - {"CLAMP"})
    return target


def _view_parents_reused(target: Any) -> Any:
    original = planner.reusable_parent

    def reusable_parent(graph: Any, node: Any, hashes: dict[str, Any]) -> str | None:
        found = original(graph, node, hashes)
        if found is None and node.op in planner.IN_PLACE_OPS:
            for s in node.src:  # the defect: a view with a single child is taken over
                t = graph[s]
                if t.is_view and hashes[s].n_children == 1 and t.shape == node.shape:
                    root = hashes[t.view_src]
                    if root.allocated and t.view_offs == 0:
                        hashes[s].addr, hashes[s].buffer_id = root.addr, root.buffer_id
                        hashes[s].allocated = True
                        return s
        return found

    replace("reference_impl.allocator.planner", "reusable_parent", reusable_parent)
    return target


def _tail_kept(target: Any) -> Any:
    _patch(planner.GraphAllocator, "_free_extra_space", lambda self, *a: None)  # the defect
    return target


def _outputs_freed(target: Any) -> Any:
    def _free(self: Any, t: Any) -> None:
        hn = self._hash[t.name]  # the defect: outputs are freed like temporaries
        self.allocs[hn.buffer_id].free(hn.addr, t.size)
        hn.allocated = False

    _patch(planner.GraphAllocator, "_free", _free)
    return target


def _types_never_shared(target: Any) -> Any:
    original = planner.GraphAllocator.__init__

    def __init__(self: Any, bufts: Any) -> None:
        # the defect: each index gets its own allocator even for a repeated type
        renamed = [
            planner.BufferType(f"{b.name}#{i}", b.alignment, b.max_size)
            for i, b in enumerate(bufts)
        ]
        original(self, renamed)
        self.bufts = list(bufts)

    _patch(planner.GraphAllocator, "__init__", __init__)
    return target


def _first_alignment_everywhere(target: Any) -> Any:
    original = planner.GraphAllocator.__init__

    def __init__(self: Any, bufts: Any) -> None:
        original(self, bufts)
        for a in self.allocs:  # the defect: every buffer uses the first buffer's alignment
            a.alignment = self.bufts[0].alignment

    _patch(planner.GraphAllocator, "__init__", __init__)
    return target


def _reserve_always_reallocates(target: Any) -> Any:
    original = planner.GraphAllocator._reserve

    def _reserve(self: Any, graph: Any, node_ids: Any, leaf_ids: Any, size_only: bool) -> bool:
        if not size_only:
            self.buffers = [None] * len(self.bufts)  # the defect: a reserve always remakes memory
        return bool(original(self, graph, node_ids, leaf_ids, size_only))

    _patch(planner.GraphAllocator, "_reserve", _reserve)
    return target


def _stale_plan_counts_only(target: Any) -> Any:
    def needs_new_plan(self: Any, graph: Any) -> bool:
        # the defect: only the node and leaf counts are compared
        return bool(
            self._plan.n_nodes != len(graph.nodes) or self._plan.n_leafs != len(graph.leafs)
        )

    _patch(planner.GraphAllocator, "needs_new_plan", needs_new_plan)
    return target


def _multi_buffer_replans(target: Any) -> Any:
    def alloc_graph(self: Any, graph: Any) -> bool:
        def run() -> bool:
            planner.check_graph(graph)
            if self.needs_new_plan(graph):  # the defect: several buffers replan by themselves
                self._reserve(graph, None, None, False)
            self._assign(graph)
            return True

        return bool(self._atomic(run))

    _patch(planner.GraphAllocator, "alloc_graph", alloc_graph)
    return target


def _failed_reserve_keeps_changes(target: Any) -> Any:
    _patch(planner.GraphAllocator, "_atomic", lambda self, fn: fn())  # the defect: no rollback
    return target


def _released_planner_usable(target: Any) -> Any:
    _patch(planner.GraphAllocator, "_live", lambda self: None)  # the defect
    return target


def _buffer_ids_unchecked(target: Any) -> Any:
    def _ids(self: Any, ids: Any, n: int, what: str) -> list[int]:
        return [0] * n if ids is None else list(ids)  # the defect: ids are trusted

    _patch(planner.GraphAllocator, "_ids", _ids)
    return target


def _ctx_ignores_max_size(target: Any) -> Any:
    original = context._ranges

    def _ranges(tensors: Any, buft: Any) -> Any:
        # the defect: one buffer whatever the buffer type's maximum size
        return original(tensors, planner.BufferType(buft.name, buft.alignment, SIZE_MAX))

    replace("reference_impl.allocator.context", "_ranges", _ranges)
    return target


def _ctx_total_wraps(target: Any) -> Any:
    def alloc_ctx_tensors_size(tensors: Any, buft: Any, *, no_alloc: bool) -> int:
        context._check(tensors, buft, no_alloc)
        # the defect: the buffers are summed as a size_t, which wraps (as ggml's sum does)
        return sum(size for _, _, size in context._ranges(tensors, buft)) % 2**64

    replace("reference_impl.allocator.context", "alloc_ctx_tensors_size", alloc_ctx_tensors_size)
    return target


def _free_block_limit_off_by_one(target: Any) -> Any:
    replace("reference_impl.allocator.chunks", "MAX_FREE_BLOCKS", chunks.MAX_FREE_BLOCKS + 1)
    return target


def _in_place_stays_in_assigned_buffer(target: Any) -> Any:
    def _allocate(self: Any, graph: Any, t: Any, buffer_id: int) -> None:
        hn = self._hash[t.name]
        if t.has_data or hn.allocated or t.is_view:
            return
        hn.allocated = True
        parent = planner.reusable_parent(graph, t, self._hash)
        if parent is not None and self._hash[parent].buffer_id == buffer_id:  # the defect
            p_hn = self._hash[parent]
            hn.buffer_id, hn.addr = p_hn.buffer_id, p_hn.addr
            p_hn.allocated = False
            self._free_extra_space(t, graph[parent], hn, p_hn)
            return
        hn.buffer_id = buffer_id
        hn.addr = self.allocs[buffer_id].alloc(t.size)

    _patch(planner.GraphAllocator, "_allocate", _allocate)
    return target


def _larger_in_place_node_accepted(target: Any) -> Any:
    original = planner.GraphAllocator._free_extra_space

    def _free_extra_space(self: Any, node: Any, parent: Any, hn: Any, p_hn: Any) -> None:
        if node.size > parent.size:
            return  # the defect: the node overruns its parent's region silently
        original(self, node, parent, hn, p_hn)

    _patch(planner.GraphAllocator, "_free_extra_space", _free_extra_space)
    return target


def _no_default_layout(target: Any) -> Any:
    # the defect: a tensor given no layout has none, so it never matches an explicit layout
    _patch(Tensor, "shape", property(lambda self: self.layout))
    return target


MUTANTS = [
    Mutant(
        "alloc-best-fit-global",
        "allocator",
        "the best fit among non-last blocks is global instead of restarting per chunk (D2)",
        ("ALLOC-006",),
        _global_best_fit,
    ),
    Mutant(
        "alloc-best-fit-ties-low",
        "allocator",
        "equal best-fit blocks resolve to the lower offset",
        ("ALLOC-006",),
        _ties_to_lower_offset,
    ),
    Mutant(
        "alloc-last-block-first-fit",
        "allocator",
        "among last blocks the first chunk that fits wins, ignoring the reuse factor",
        ("ALLOC-007",),
        _last_block_first_fit,
    ),
    Mutant(
        "alloc-reuse-unwrapped",
        "allocator",
        "the last-block reuse factor does not wrap to int64",
        ("ALLOC-007",),
        _reuse_unwrapped,
    ),
    Mutant(
        "alloc-seventeen-chunks",
        "allocator",
        "the 16th chunk is an ordinary chunk, so a 17th one opens",
        ("ALLOC-005", "ALLOC-038"),
        _no_sixteenth_chunk,
    ),
    Mutant(
        "alloc-free-never-merges-next",
        "allocator",
        "a freed region joins the block before it but never the one after",
        ("ALLOC-010", "ALLOC-011"),
        _free_never_merges_next,
    ),
    Mutant(
        "alloc-free-exact-size",
        "allocator",
        "freeing does not round the size up to the alignment",
        ("ALLOC-004",),
        _free_exact_size,
    ),
    Mutant(
        "alloc-reset-keeps-chunks",
        "allocator",
        "reset keeps every chunk (and its high-water mark)",
        ("ALLOC-013",),
        _reset_keeps_chunks,
    ),
    Mutant(
        "alloc-linear-aligns-offsets",
        "allocator",
        "the linear allocator aligns offsets from the base instead of addresses",
        ("ALLOC-001",),
        _linear_aligns_offsets,
    ),
    Mutant(
        "alloc-linear-past-the-end",
        "allocator",
        "the linear allocator never checks the buffer's end",
        ("ALLOC-002",),
        _linear_overflows_buffer,
    ),
    Mutant(
        "alloc-views-not-counted",
        "allocator",
        "views do not count as users of their root, which is freed while they are read",
        ("ALLOC-018", "ALLOC-025"),
        _views_not_counted,
    ),
    Mutant(
        "alloc-leafs-placed-lazily",
        "allocator",
        "leafs are placed at their first reader instead of before every node",
        ("ALLOC-017",),
        _leafs_placed_lazily,
    ),
    Mutant(
        "alloc-reuse-ignores-children",
        "allocator",
        "in-place reuse overwrites a parent that later nodes still read",
        ("ALLOC-020", "ALLOC-025"),
        _reuse_any_child_count,
    ),
    Mutant(
        "alloc-reuse-outputs",
        "allocator",
        "in-place reuse may overwrite a graph output",
        ("ALLOC-024",),
        _reuse_outputs,
    ),
    Mutant(
        "alloc-reuse-any-layout",
        "allocator",
        "in-place reuse does not compare layouts",
        ("ALLOC-020",),
        _reuse_any_layout,
    ),
    Mutant(
        "alloc-clamp-not-in-place",
        "allocator",
        "CLAMP is missing from the in-place ops (D5)",
        ("ALLOC-020",),
        _clamp_not_in_place,
    ),
    Mutant(
        "alloc-view-parents-reused",
        "allocator",
        "a view with one child is taken over in place (the unreachable branch of D3 made live)",
        ("ALLOC-021",),
        _view_parents_reused,
    ),
    Mutant(
        "alloc-tail-kept",
        "allocator",
        "after an in-place reuse the parent's larger tail is not freed",
        ("ALLOC-022",),
        _tail_kept,
    ),
    Mutant(
        "alloc-outputs-freed",
        "allocator",
        "outputs are freed after their last reader like temporaries",
        ("ALLOC-024",),
        _outputs_freed,
    ),
    Mutant(
        "alloc-types-never-shared",
        "allocator",
        "a repeated buffer type gets an allocator per index",
        ("ALLOC-015",),
        _types_never_shared,
    ),
    Mutant(
        "alloc-first-alignment-everywhere",
        "allocator",
        "every buffer of a planner uses the first buffer's alignment",
        ("ALLOC-016",),
        _first_alignment_everywhere,
    ),
    Mutant(
        "alloc-reserve-always-reallocates",
        "allocator",
        "every reserve makes new backing memory, even when the plan shrinks",
        ("ALLOC-027",),
        _reserve_always_reallocates,
    ),
    Mutant(
        "alloc-stale-plan-counts-only",
        "allocator",
        "the stale-plan check compares node and leaf counts only",
        ("ALLOC-029",),
        _stale_plan_counts_only,
    ),
    Mutant(
        "alloc-multi-buffer-replans",
        "allocator",
        "a planner with several buffers re-plans by itself (ids lost) instead of refusing",
        ("ALLOC-030",),
        _multi_buffer_replans,
    ),
    Mutant(
        "alloc-failed-call-keeps-changes",
        "allocator",
        "a failed reserve leaves the partial plan and allocators behind",
        ("ALLOC-033",),
        _failed_reserve_keeps_changes,
    ),
    Mutant(
        "alloc-released-planner-usable",
        "allocator",
        "a released planner keeps working",
        ("ALLOC-034",),
        _released_planner_usable,
    ),
    Mutant(
        "alloc-buffer-ids-unchecked",
        "allocator",
        "node and leaf buffer ids are not range-checked",
        ("ALLOC-049",),
        _buffer_ids_unchecked,
    ),
    Mutant(
        "alloc-ctx-ignores-max-size",
        "allocator",
        "alloc_ctx_tensors packs everything in one buffer whatever the maximum size",
        ("ALLOC-032",),
        _ctx_ignores_max_size,
    ),
    Mutant(
        "alloc-ctx-total-wraps",
        "allocator",
        "alloc_ctx_tensors_size wraps a total past SIZE_MAX instead of refusing it",
        ("ALLOC-014",),
        _ctx_total_wraps,
    ),
    Mutant(
        "alloc-free-block-limit-257",
        "allocator",
        "a chunk takes a 257th free block",
        ("ALLOC-012",),
        _free_block_limit_off_by_one,
    ),
    Mutant(
        "alloc-in-place-keeps-assigned-buffer",
        "allocator",
        "a node reuses its parent in place only when both are assigned the same buffer type",
        ("ALLOC-044",),
        _in_place_stays_in_assigned_buffer,
    ),
    Mutant(
        "alloc-larger-in-place-node-accepted",
        "allocator",
        "an in-place node larger than its parent is accepted instead of refused",
        ("ALLOC-048",),
        _larger_in_place_node_accepted,
    ),
    Mutant(
        "alloc-no-default-layout",
        "allocator",
        "a tensor described without a layout has none instead of a 1-D i8 row of its size",
        ("ALLOC-050",),
        _no_default_layout,
    ),
]
