"""Typed failures of the planner, and nothing changed after one (spec/allocator.md D1:
ALLOC-003, ALLOC-033, ALLOC-034, ALLOC-048, ALLOC-049). ggml aborts or reads past its arrays on
these inputs; an engine that does the same does not claim ``allocator.errors``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from conformance.allocator.scenarios import f32, inp, out
from conformance.assertions import raises_code, unchanged
from conformance.strategies.allocator import build_graph
from reference_impl.allocator.graph import SIZE_MAX, Graph, Tensor
from reference_impl.allocator.planner import BufferType

pytestmark = pytest.mark.requires("allocator.planner", "allocator.errors")

ONE = (BufferType("buf", 16, SIZE_MAX),)
TWO = (BufferType("A", 8), BufferType("B", 8))


def _good() -> Graph:
    return build_graph(
        [inp("x", 4), inp("y", 4), f32("s", 4, "ADD", "x", "y"), out(f32("m", 1, "MEAN", "s"))],
        ["m"],
    )


def _state(ga: Any, n: int) -> Any:
    return (
        dict(ga.placements),
        list(ga.allocations),
        [ga.buffer_size(i) for i in range(n)],
        [ga.chunk_sizes(i) for i in range(n)],
    )


def _with(graph: Graph, name: str, **changes: Any) -> Graph:
    tensors = dict(graph.tensors)
    tensors[name] = replace(tensors[name], **changes)
    return Graph(tensors, graph.nodes, graph.leafs, graph.order)


def _bad_graphs() -> list[Any]:
    g = _good()
    return [
        pytest.param(_with(g, "s", src=("x", "nowhere")), "src", id="unknown-source"),
        pytest.param(_with(g, "s", src=("x",) * 11), "src", id="eleven-sources"),
        pytest.param(_with(g, "x", size=SIZE_MAX + 1), "size", id="size-past-SIZE_MAX"),
        pytest.param(_with(g, "x", size=-4), "size", id="negative-size"),
        pytest.param(Graph(g.tensors, (*g.nodes, "s"), g.leafs, g.order), "nodes", id="node-twice"),
        pytest.param(
            Graph(g.tensors, g.nodes, (*g.leafs, "q"), g.order), "leafs", id="unknown-leaf"
        ),
        pytest.param(
            Graph(g.tensors, g.nodes[1:], g.leafs, g.order), "src", id="source-not-in-graph"
        ),
        pytest.param(_with(g, "s", op="VIEW", view_src="nowhere"), "src", id="unknown-view-source"),
        pytest.param(
            Graph(
                {
                    **g.tensors,
                    "v": Tensor("v", 4, "VIEW", ("x",), view_src="x"),
                    "w": Tensor("w", 4, "VIEW", ("v",), view_src="v"),
                },
                (*g.nodes, "v", "w"),
                g.leafs,
                (*g.order, "v", "w"),
            ),
            "view_src",
            id="view-of-a-view",
        ),
        pytest.param(_with(g, "s", size=32), "size", id="in-place-node-larger-than-its-parent"),
    ]


@pytest.mark.invariant("ALLOC-048", "ALLOC-033")
@pytest.mark.parametrize(("graph", "field"), _bad_graphs())
def test_bad_graph_descriptions(target: Any, graph: Graph, field: str) -> None:
    ga = target.allocator_planner(ONE)
    assert ga.alloc_graph(_good())
    with unchanged(lambda: _state(ga, 1), "the planner"):
        with raises_code("ALLOC_GRAPH", field=field, what="reserve"):
            ga.reserve(graph)
        with raises_code("ALLOC_GRAPH", field=field, what="alloc_graph"):
            ga.alloc_graph(graph)
        with raises_code("ALLOC_GRAPH", field=field, what="reserve_size"):
            ga.reserve_size(graph)
    assert ga.alloc_graph(_good()), "the planner still works after a refused graph"


@pytest.mark.invariant("ALLOC-048")
def test_ten_sources_are_the_most_a_tensor_may_have(target: Any) -> None:
    """ggml's src array has ten slots: ten sources plan, eleven are refused (above)."""
    xs = [inp(f"x{i}", 4) for i in range(10)]
    g = build_graph([*xs, out(f32("c", 40, "CONCAT", *(x.name for x in xs)))], ["c"])
    ga = target.allocator_planner(ONE)
    assert ga.alloc_graph(g), "a node with ten sources was refused"
    assert ga.placements["c"] is not None


@pytest.mark.invariant("ALLOC-048", "ALLOC-014")
def test_a_size_of_size_max_is_a_valid_description(target: Any) -> None:
    """SIZE_MAX itself is inside the range: at alignment 1 nothing rounds it up, so a lone input
    of SIZE_MAX bytes plans into one chunk of that size (one byte more is refused, above)."""
    g = build_graph([Tensor("x", SIZE_MAX, input=True)], ["x"])
    ga = target.allocator_planner((BufferType("byte", 1, SIZE_MAX),))
    assert ga.reserve_size(g) == [SIZE_MAX], "a tensor of SIZE_MAX bytes was refused"


@pytest.mark.invariant("ALLOC-049", "ALLOC-033")
@pytest.mark.parametrize(
    ("node_ids", "leaf_ids", "field", "index"),
    [
        ((0, 2), (0, 0), "node_buffer_ids", 1),
        ((0, -1), (0, 0), "node_buffer_ids", 1),
        ((0, 0), (5, 0), "leaf_buffer_ids", 0),
        ((0,), (0, 0), "node_buffer_ids", None),
        ((0, 0), (0, 0, 0), "leaf_buffer_ids", None),
    ],
)
def test_bad_buffer_ids(
    target: Any, node_ids: tuple[int, ...], leaf_ids: tuple[int, ...], field: str, index: Any
) -> None:
    g = _good()
    assert len(g.nodes) == 2 and len(g.leafs) == 2
    ga = target.allocator_planner(TWO)
    assert ga.reserve(g, (0, 1), (1, 0)) and ga.alloc_graph(g)
    with unchanged(lambda: _state(ga, 2), "the planner"):
        for call in (ga.reserve, ga.reserve_size):
            with raises_code("ALLOC_BUFFER_ID", field=field, index=index, what=call.__name__):
                call(g, node_ids, leaf_ids)
        for bad in (-1, 2):
            with raises_code("ALLOC_BUFFER_ID", field="buffer_id", what=f"buffer_size({bad})"):
                ga.buffer_size(bad)


@pytest.mark.invariant("ALLOC-049")
def test_bad_buffer_type_lists(target: Any) -> None:
    with raises_code("ALLOC_BUFFER_ID", field="bufts"):
        target.allocator_planner(())
    with raises_code("ALLOC_BUFFER_ID", field="bufts", index=1):
        target.allocator_planner((BufferType("A", 8), BufferType("A", 16)))


@pytest.mark.invariant("ALLOC-003")
@pytest.mark.parametrize("alignment", [0, 3, 12, 24, -8])
def test_buffer_type_alignment_must_be_a_power_of_two(target: Any, alignment: int) -> None:
    with raises_code("ALLOC_ALIGNMENT", field="bufts[1].alignment"):
        target.allocator_planner([BufferType("a", 8), BufferType("b", alignment)])


@pytest.mark.invariant("ALLOC-014", "ALLOC-033")
def test_overflow_mid_plan_changes_nothing(target: Any) -> None:
    """The huge leaf overflows when it is rounded up, after the other leaf was placed."""
    ga = target.allocator_planner(ONE)
    assert ga.alloc_graph(_good())
    huge = build_graph(
        [inp("a", 4), Tensor("b", SIZE_MAX - 3, input=True), out(f32("c", 4, "CONCAT", "a", "b"))],
        ["c"],
    )
    with (
        unchanged(lambda: _state(ga, 1), "the planner"),
        raises_code("ALLOC_OVERFLOW", field="size"),
    ):
        ga.reserve(huge)
    assert ga.alloc_graph(_good()) and ga.allocations == [(0, 32)]


@pytest.mark.invariant("ALLOC-014", "ALLOC-033")
@pytest.mark.parametrize("where", [0, 1], ids=["in-buffer-0", "in-buffer-1"])
def test_chunk_sum_overflow_keeps_the_stored_plan(target: Any, where: int) -> None:
    """Two 2^63-byte inputs plan fine in two chunks whose sizes sum past SIZE_MAX: the reserve
    fails, and the plan stored before it still serves (a two-buffer planner would refuse a
    graph that does not match its stored plan). With the huge inputs in buffer 1, buffer 0 has
    already outgrown its backing (a 64-byte input) when buffer 1's sum overflows: its old
    backing must be back too."""
    g = _good()
    ga = target.allocator_planner(TWO)
    assert ga.reserve(g, (0, 0), (0, 0)) and ga.alloc_graph(g)
    assert ga.buffer_size(0) == 32 and ga.buffer_size(1) == 0
    half = 2**63
    huge = build_graph(
        [
            inp("z", 64),
            Tensor("a", half, input=True),
            Tensor("b", half, input=True),
            out(f32("c", 1, "CONCAT", "z", "a", "b")),
        ],
        ["c"],
    )
    assert huge.leafs == ("z", "a", "b")
    for call in (ga.reserve, ga.reserve_size):
        with (
            unchanged(lambda: _state(ga, 2), "the planner"),
            raises_code("ALLOC_OVERFLOW", field="size", what=call.__name__),
        ):
            call(huge, (0,), (0, where, where))
        assert ga.alloc_graph(g), f"after the failed {call.__name__} the stored plan was lost"


@pytest.mark.invariant("ALLOC-034")
def test_out_of_order_use(target: Any) -> None:
    g = _good()
    sized = target.allocator_planner(ONE)
    assert sized.reserve_size(g) == [32]
    with raises_code("ALLOC_STATE", what="alloc_graph after reserve_size"):
        sized.alloc_graph(g)
    assert sized.reserve(g) and sized.alloc_graph(g), "a real reserve makes it usable"
    ga = target.allocator_planner(ONE)
    assert ga.alloc_graph(g)
    ga.release()
    # a released planner is refused before the graph is read: a bad graph is ALLOC_STATE too
    bad = _with(g, "s", src=("x", "nowhere"))
    for name, call in (
        ("alloc_graph", lambda: ga.alloc_graph(g)),
        ("reserve", lambda: ga.reserve(g)),
        ("reserve_size", lambda: ga.reserve_size(g)),
        ("buffer_size", lambda: ga.buffer_size(0)),
        ("alloc_graph of a bad graph", lambda: ga.alloc_graph(bad)),
        ("reserve of a bad graph", lambda: ga.reserve(bad)),
        ("reserve_size of a bad graph", lambda: ga.reserve_size(bad)),
    ):
        with raises_code("ALLOC_STATE", what=f"{name} after release"):
            call()


@pytest.mark.invariant("ALLOC-034", "ALLOC-033")
@pytest.mark.parametrize("change", ["leaf-lost-its-data", "leaf-grew"])
def test_a_leaf_that_does_not_fit_its_stale_entry(target: Any, change: str) -> None:
    """Decision D6: only nodes and their sources are checked before a plan is reused, so a leaf
    with no entry (it had data when the plan was made) or a larger one reaches assignment."""
    if change == "leaf-lost-its-data":
        first = build_graph(
            [f32("w", 2, has_data=True), inp("x", 2), out(f32("n", 2, "ADD", "x", "w"))], ["n"]
        )
        # the same graph with its leafs listed the other way round: x meets w's empty entry
        second = Graph(first.tensors, first.nodes, first.leafs[::-1], first.order)
    else:
        first = build_graph([inp("u", 2), inp("x", 2), out(f32("n", 2, "SCALE", "x"))], ["u", "n"])
        second = build_graph(
            [inp("u", 16), inp("x", 2), out(f32("n", 2, "SCALE", "x"))], ["u", "n"]
        )
    ga = target.allocator_planner(ONE)
    assert ga.alloc_graph(first)
    with (
        unchanged(lambda: _state(ga, 1), "the planner"),
        raises_code("ALLOC_STATE", field="leafs"),
    ):
        ga.alloc_graph(second)
    assert ga.reserve(second) and ga.alloc_graph(second), "reserving the graph first works"
