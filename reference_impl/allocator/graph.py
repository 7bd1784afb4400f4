"""The graph description the allocator plans over (spec/allocator.md, preamble).

ggml's allocator reads only a few fields of a ``ggml_tensor``: its allocation size, op, sources,
input/output flags, view source, whether it already has memory, and its layout (for the in-place
rule). A :class:`Graph` carries exactly those, so the reference and any engine can plan the same
graph and a test can compare addresses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from reference_impl.errors import AllocError
from reference_impl.spec_links import implements

SIZE_MAX = 2**64 - 1
MAX_SRC = 10

# ops whose result may overwrite their first suitable source (ggml_op_can_inplace of the
# vendored ggml; decision D5 keeps CLAMP)
IN_PLACE_OPS = frozenset(
    {
        "FILL",
        "SCALE",
        "DIAG_MASK_ZERO",
        "DIAG_MASK_INF",
        "ADD",
        "ADD_ID",
        "ADD1",
        "SUB",
        "MUL",
        "DIV",
        "SQR",
        "SQRT",
        "LOG",
        "UNARY",
        "ROPE",
        "ROPE_BACK",
        "SILU_BACK",
        "RMS_NORM",
        "RMS_NORM_BACK",
        "CLAMP",
        "SOFT_MAX",
        "SOFT_MAX_BACK",
    }
)

# bytes per element of the types a layout may name
TYPE_SIZES = {"i8": 1, "i16": 2, "f16": 2, "i32": 4, "f32": 4}


@dataclass(frozen=True)
class Layout:
    """A tensor's type, shape ``ne`` and byte strides ``nb`` (4 dims, as ggml)."""

    type: str
    ne: tuple[int, int, int, int]
    nb: tuple[int, int, int, int]


@dataclass(frozen=True)
class Tensor:
    """One tensor of a graph.

    ``size`` is what the buffer type asks for it (``buft_alloc_size``); ``layout`` defaults to a
    1-D ``i8`` tensor of ``size`` bytes. ``has_data`` marks memory the planner must not place
    (weights already loaded, an external buffer). A view names its root in ``view_src`` and, as
    in ggml, its immediate parent as its first source (a view of a view has the root as
    ``view_src`` and the inner view as ``src[0]``).
    """

    name: str
    size: int
    op: str = "NONE"
    src: tuple[str, ...] = ()
    input: bool = False
    output: bool = False
    view_src: str | None = None
    view_offs: int = 0
    has_data: bool = False
    layout: Layout | None = None

    @property
    def is_view(self) -> bool:
        return self.view_src is not None

    @property
    @implements("ALLOC-050")
    def shape(self) -> Layout:
        if self.layout is not None:
            return self.layout
        # no layout given: one row of size int8 bytes (decision D8)
        return Layout("i8", (self.size, 1, 1, 1), (1, self.size, self.size, self.size))


@dataclass(frozen=True)
class Graph:
    """A planned graph: every tensor by name, and ggml's ``nodes`` and ``leafs`` orders."""

    tensors: Mapping[str, Tensor]
    nodes: tuple[str, ...]
    leafs: tuple[str, ...]
    order: tuple[str, ...] = field(default=())  # creation order (alloc_ctx_tensors walks it)

    def __getitem__(self, name: str) -> Tensor:
        return self.tensors[name]


@implements("ALLOC-048")
def check_tensors(tensors: Sequence[Tensor]) -> None:
    """Refuse a description ggml could not hold: every problem names the tensor and field."""
    names: set[str] = set()
    by_name = {t.name: t for t in tensors}
    for i, t in enumerate(tensors):
        if t.name in names:
            raise AllocError(
                "ALLOC_GRAPH", f"tensor name {t.name!r} used twice", field="name", index=i
            )
        names.add(t.name)
        if not 0 <= t.size <= SIZE_MAX:
            raise AllocError(
                "ALLOC_GRAPH",
                f"{t.name}: size {t.size} outside [0, SIZE_MAX]",
                field="size",
                index=i,
            )
        if len(t.src) > MAX_SRC:
            raise AllocError(
                "ALLOC_GRAPH",
                f"{t.name}: {len(t.src)} sources, at most {MAX_SRC}",
                field="src",
                index=i,
            )
    for i, t in enumerate(tensors):
        for s in (*t.src, *(() if t.view_src is None else (t.view_src,))):
            if s not in names:
                raise AllocError(
                    "ALLOC_GRAPH", f"{t.name}: unknown source {s!r}", field="src", index=i
                )
        if t.view_src is not None and by_name[t.view_src].view_src is not None:
            raise AllocError(
                "ALLOC_GRAPH",
                f"{t.name}: view source {t.view_src!r} is itself a view (name the root, as ggml does)",
                field="view_src",
                index=i,
            )


@implements("ALLOC-048")
def check_graph(graph: Graph) -> None:
    """A graph handed to a planner: its tensors valid, its nodes and leafs known and distinct."""
    order = graph.order or tuple(graph.tensors)
    check_tensors([graph.tensors[n] for n in order if n in graph.tensors])
    if set(order) != set(graph.tensors):
        raise AllocError(
            "ALLOC_GRAPH", "graph.order does not list every tensor once", field="order"
        )
    seen: set[str] = set()
    for what, names in (("nodes", graph.nodes), ("leafs", graph.leafs)):
        for i, name in enumerate(names):
            if name not in graph.tensors or name in seen:
                raise AllocError(
                    "ALLOC_GRAPH",
                    f"{what}[{i}] {name!r} is unknown or listed twice",
                    field=what,
                    index=i,
                )
            seen.add(name)
    for i, name in enumerate(graph.nodes):
        for s in graph.tensors[name].src:
            if s not in seen:
                raise AllocError(
                    "ALLOC_GRAPH",
                    f"nodes[{i}] {name!r} reads {s!r}, which is not in the graph",
                    field="src",
                    index=i,
                )
