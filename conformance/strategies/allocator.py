"""Hypothesis strategies for the allocator area: random graphs over one or two buffer types.

A drawn graph is what ggml's op constructors could produce: element-wise ops (in-place capable:
ADD, MUL, SCALE, SQR, CLAMP) keep their first source's layout; the others (CPY, MEAN, PAD,
CONCAT, MUL_MAT) make a fresh contiguous tensor; views (VIEW, RESHAPE, PERMUTE) look into a root
with an offset, never past its end. Leafs are inputs, weights with data, or plain constants.
Every tensor is F32, so sizes are multiples of 4 bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hypothesis import strategies as st

from reference_impl.allocator.graph import (
    SIZE_MAX,
    TYPE_SIZES,
    Graph,
    Layout,
    Tensor,
    check_tensors,
)
from reference_impl.allocator.planner import BufferType
from reference_impl.errors import AllocError


def contiguous(*ne: int, type: str = "i8") -> Layout:
    """A row-major layout of shape ``ne`` (1 to 4 dims, innermost first): the test inputs'
    own builder, so a target is handed the layouts and never computes them."""
    dims = ((*tuple(ne), 1, 1, 1, 1))[:4]
    es = TYPE_SIZES[type]
    nb = [es]
    for n in dims[:3]:
        nb.append(nb[-1] * n)
    return Layout(type, (dims[0], dims[1], dims[2], dims[3]), (nb[0], nb[1], nb[2], nb[3]))


def build_graph(tensors: Sequence[Tensor], outputs: Iterable[str]) -> Graph:
    """The test inputs' own graph builder: the graph ``ggml_build_forward_expand`` makes from ``outputs``, in order: a depth-first
    post-order over sources (first source first); tensors with op NONE are leafs, the rest nodes."""
    check_tensors(tensors)
    by_name = {t.name: t for t in tensors}
    nodes: list[str] = []
    leafs: list[str] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        # iterative DFS: deep chains must not hit Python's recursion limit
        stack: list[tuple[str, int]] = [(name, 0)]
        while stack:
            cur, k = stack.pop()
            if k == 0:
                if cur in seen:
                    continue
                seen.add(cur)
            srcs = by_name[cur].src
            if k < len(srcs):
                stack.append((cur, k + 1))
                if srcs[k] not in seen:
                    stack.append((srcs[k], 0))
                continue
            (leafs if by_name[cur].op == "NONE" else nodes).append(cur)

    for k, out in enumerate(outputs):
        if out not in by_name:
            raise AllocError("ALLOC_GRAPH", f"unknown output {out!r}", field="outputs", index=k)
        visit(out)
    return Graph(by_name, tuple(nodes), tuple(leafs), tuple(t.name for t in tensors))


IN_PLACE = ("ADD", "MUL", "SCALE", "SQR", "CLAMP")
FRESH = ("CPY", "MEAN", "PAD", "CONCAT", "MUL_MAT")
VIEWS = ("VIEW", "RESHAPE", "PERMUTE")
ALIGNMENTS = (4, 8, 16, 32, 64)
MAX_SIZES = (8, 16, 24, 32, 48, 64, 128, 256, SIZE_MAX)


@dataclass(frozen=True)
class GraphCase:
    """A graph, the buffer types of its planner, and the buffer ids of its nodes and leafs
    (None: all in buffer 0)."""

    graph: Graph
    bufts: tuple[BufferType, ...]
    node_buffer_ids: tuple[int, ...] | None = None
    leaf_buffer_ids: tuple[int, ...] | None = None

    def __repr__(self) -> str:  # what hypothesis prints for a failing example
        lines = [
            f"bufts={self.bufts!r} node_ids={self.node_buffer_ids} leaf_ids={self.leaf_buffer_ids}"
        ]
        for name in self.graph.order:
            t = self.graph[name]
            flags = "".join(
                f for f, on in (("I", t.input), ("O", t.output), ("D", t.has_data)) if on
            )
            view = f" view_of={t.view_src}+{t.view_offs}" if t.view_src else ""
            lines.append(f"  {name}: {t.op}{list(t.src)} {t.size}B {flags}{view}")
        lines.append(f"  nodes={list(self.graph.nodes)} leafs={list(self.graph.leafs)}")
        return "GraphCase(\n" + "\n".join(lines) + ")"


def buffer_types(n: int) -> st.SearchStrategy[tuple[BufferType, ...]]:
    one = st.builds(
        BufferType, st.just(""), st.sampled_from(ALIGNMENTS), st.sampled_from(MAX_SIZES)
    )
    return st.lists(one, min_size=n, max_size=n).map(
        lambda ts: tuple(BufferType(f"buft{i}", t.alignment, t.max_size) for i, t in enumerate(ts))
    )


@st.composite
def tensor_lists(draw: st.DrawFn, max_nodes: int = 14) -> list[Tensor]:
    """Tensors in creation order: leafs first, then nodes that read earlier tensors."""
    out: list[Tensor] = []
    n_leafs = draw(st.integers(1, 5))
    for i in range(n_leafs):
        kind = draw(st.sampled_from(("input", "input", "data", "const")))
        n = draw(st.integers(1, 12))
        out.append(
            Tensor(
                f"l{i}",
                4 * n,
                input=kind == "input",
                has_data=kind == "data",
                layout=contiguous(n, type="f32"),
            )
        )
    for i in range(draw(st.integers(1, max_nodes))):
        name = f"n{i}"
        kind = draw(st.sampled_from(("inplace", "inplace", "fresh", "view")))
        a = draw(st.sampled_from(out))
        output = draw(st.integers(0, 9)) == 0
        if kind == "view":
            root = a.view_src or a.name
            root_t = next(t for t in out if t.name == root)
            n_root = root_t.size // 4
            offs = draw(st.integers(0, n_root - 1))
            n = draw(st.integers(1, n_root - offs))
            op = draw(st.sampled_from(VIEWS))
            layout = contiguous(n, type="f32")
            if op == "PERMUTE" and n % 2 == 0 and n > 2:
                layout = Layout("f32", (2, n // 2, 1, 1), (4 * (n // 2), 4, 4 * n, 4 * n))
            elif op == "RESHAPE" and n % 2 == 0:
                layout = contiguous(2, n // 2, type="f32")
            out.append(
                Tensor(name, 4 * n, op, (a.name,), view_src=root, view_offs=4 * offs, layout=layout)
            )
            continue
        if kind == "inplace":
            op = draw(st.sampled_from(IN_PLACE))
            binary = op in ("ADD", "MUL")
            srcs = [a.name]
            if binary:
                srcs.append(draw(st.sampled_from(out)).name)
                if draw(st.booleans()):
                    srcs.reverse()  # the candidate parent is not always src[0]
            first = next(t for t in out if t.name == srcs[0])
            # the result has its first source's type and shape, contiguous (ggml_dup_tensor)
            layout = contiguous(*first.shape.ne, type="f32")
            out.append(Tensor(name, first.size, op, tuple(srcs), output=output, layout=layout))
            continue
        op = draw(st.sampled_from(FRESH))
        srcs = [a.name]
        if op in ("CONCAT", "MUL_MAT"):
            srcs.append(draw(st.sampled_from(out)).name)
        n = draw(st.integers(1, 16))
        out.append(
            Tensor(name, 4 * n, op, tuple(srcs), output=output, layout=contiguous(n, type="f32"))
        )
    return out


def _sinks(tensors: list[Tensor]) -> list[str]:
    used = {s for t in tensors for s in t.src}
    return [t.name for t in tensors if t.name not in used]


@st.composite
def graphs(draw: st.DrawFn, max_nodes: int = 14) -> Graph:
    tensors = draw(tensor_lists(max_nodes))
    return build_graph(tensors, _sinks(tensors))


@st.composite
def graph_cases(draw: st.DrawFn, max_buffers: int = 2, max_nodes: int = 14) -> GraphCase:
    graph = draw(graphs(max_nodes))
    n = draw(st.integers(1, max_buffers))
    bufts = draw(buffer_types(n))
    if n > 1 and draw(st.integers(0, 3)) == 0:
        bufts = (bufts[0],) * n  # one type listed twice: shared allocator and buffer
    if n == 1:
        return GraphCase(graph, bufts)
    ids = st.integers(0, n - 1)
    node_ids = tuple(draw(st.lists(ids, min_size=len(graph.nodes), max_size=len(graph.nodes))))
    leaf_ids = tuple(draw(st.lists(ids, min_size=len(graph.leafs), max_size=len(graph.leafs))))
    return GraphCase(graph, bufts, node_ids, leaf_ids)
