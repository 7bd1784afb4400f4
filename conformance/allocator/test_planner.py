"""The graph planner (spec/allocator.md ALLOC-015..031): random graphs checked for sound plans
(ALLOC-025), and one small graph per rule whose placement shows the rule."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings

from conformance.allocator.checks import chunk_offsets, plan_violations
from conformance.allocator.scenarios import f32, inp, out, view
from conformance.strategies import allocator as als
from conformance.strategies import kernels as ks
from conformance.strategies.allocator import build_graph, contiguous
from reference_impl.allocator.graph import SIZE_MAX, Graph, Tensor
from reference_impl.allocator.planner import BufferType

pytestmark = pytest.mark.requires("allocator.planner")

ONE = (BufferType("buf", 8, SIZE_MAX),)


def place(target: Any, graph: Graph, bufts: tuple[BufferType, ...] = ONE) -> dict[str, Any]:
    ga = target.allocator_planner(bufts)
    assert ga.alloc_graph(graph)
    return chunk_offsets(ga.placements)


def allocate(target: Any, case: als.GraphCase) -> Any:
    ga = target.allocator_planner(case.bufts)
    if case.node_buffer_ids is not None:
        assert ga.reserve(case.graph, case.node_buffer_ids, case.leaf_buffer_ids)
    assert ga.alloc_graph(case.graph), "alloc_graph after a matching reserve returned False"
    return ga


def _sizes(ga: Any, n: int) -> list[list[int]]:
    return [ga.chunk_sizes(i) for i in range(n)]


@pytest.mark.invariant(
    "ALLOC-016", "ALLOC-018", "ALLOC-019", "ALLOC-023", "ALLOC-024", "ALLOC-025", "ALLOC-026"
)
@settings(max_examples=ks.examples(80))
@given(case=als.graph_cases())
def test_random_plans_are_sound(target: Any, case: als.GraphCase) -> None:
    ga = allocate(target, case)
    bad = plan_violations(case.graph, case.bufts, ga.placements, _sizes(ga, len(case.bufts)))
    assert not bad, "\n".join(bad)
    for name in case.graph.tensors:
        t = case.graph[name]
        if t.has_data:
            assert ga.placements.get(name) is None, f"{name} has data but was placed"


@pytest.mark.invariant("ALLOC-031")
@settings(max_examples=ks.examples(30))
@given(case=als.graph_cases())
def test_allocating_twice_gives_the_same_addresses(target: Any, case: als.GraphCase) -> None:
    ga = allocate(target, case)
    first = dict(ga.placements)
    made = list(ga.allocations)
    for _ in range(2):
        assert ga.alloc_graph(case.graph)
        assert ga.placements == first, "another alloc_graph of the same graph moved tensors"
        assert ga.allocations == made, "another alloc_graph of the same graph made memory again"


@pytest.mark.invariant("ALLOC-028")
@settings(max_examples=ks.examples(30))
@given(case=als.graph_cases())
def test_size_only_reserve_reports_the_chunks(target: Any, case: als.GraphCase) -> None:
    sizer = target.allocator_planner(case.bufts)
    sizes = sizer.reserve_size(case.graph, case.node_buffer_ids, case.leaf_buffer_ids)
    assert sizer.allocations == [], "reserve_size made backing memory"
    assert [sizer.buffer_size(i) for i in range(len(case.bufts))] == [0] * len(case.bufts)
    ga = allocate(target, case)
    want = [sum(ga.chunk_sizes(i)) for i in range(len(case.bufts))]
    # a shared buffer type reports its chunks at every index that uses it
    assert sizes == want, f"reserve_size {sizes}, the chunks a reserve makes {want}"


@pytest.mark.invariant("ALLOC-028")
def test_size_only_reserve_drops_a_buffer_it_outgrows(target: Any) -> None:
    """A size-only reservation that needs more than a buffer holds frees that buffer (its size
    reads 0) and makes none; the next real reservation makes one again, even for a graph the
    old buffer would have held."""
    small = build_graph([inp("a", 4), out(f32("b", 4, "CPY", "a"))], ["b"])
    big = build_graph([inp("a", 64), out(f32("b", 64, "CPY", "a"))], ["b"])
    ga = target.allocator_planner(ONE)
    assert ga.reserve(small)
    assert ga.buffer_size(0) == 32 and ga.allocations == [(0, 32)]
    assert ga.reserve_size(big) == [512]
    assert ga.buffer_size(0) == 0, "reserve_size kept a buffer too small for its graph"
    assert ga.allocations == [(0, 32)], "reserve_size made backing memory"
    assert ga.reserve(small)
    assert ga.buffer_size(0) == 32
    assert ga.allocations == [(0, 32), (0, 32)], "the dropped buffer was not made again"


@pytest.mark.invariant("ALLOC-017")
@settings(max_examples=ks.examples(30))
@given(graph=als.graphs())
def test_leafs_come_first(target: Any, graph: Graph) -> None:
    """On a fresh unbounded buffer the leafs take consecutive aligned slots, in leaf order."""
    got = place(target, graph)
    at = 0
    for name in graph.leafs:
        t = graph[name]
        if t.has_data:
            continue
        assert got[name] == (0, at), f"leaf {name} at {got[name]}, expected (0, {at})"
        at += -(-t.size // 8) * 8


@pytest.mark.invariant("ALLOC-017")
def test_input_nodes_come_before_other_nodes(target: Any) -> None:
    g = build_graph(
        [
            inp("l0", 2),
            inp("l1", 2),
            out(f32("n0", 2, "MEAN", "l0")),
            out(f32("n1", 2, "CPY", "l1", input=True)),
        ],
        ["n0", "n1"],
    )
    got = place(target, g)
    assert (got["l0"], got["l1"], got["n1"], got["n0"]) == ((0, 0), (0, 8), (0, 16), (0, 24)), got


@pytest.mark.invariant("ALLOC-017")
def test_an_input_source_is_placed_with_its_first_reader(target: Any) -> None:
    """Nodes out of topological order: n (buffer 1) reads the input node j listed after it, so
    j is placed in n's buffer while the inputs are placed, before the input node k listed between
    them; n, placed later, comes after j."""
    a = inp("a", 2)
    n = out(f32("n", 2, "MEAN", "j"))
    k = out(f32("k", 2, "CPY", "a", input=True))
    j = out(f32("j", 2, "CPY", "a", input=True))
    g = Graph({t.name: t for t in (a, n, k, j)}, ("n", "k", "j"), ("a",), ("a", "j", "n", "k"))
    ga = target.allocator_planner((BufferType("A", 8, SIZE_MAX), BufferType("B", 8, SIZE_MAX)))
    assert ga.reserve(g, (1, 0, 0), (0,)) and ga.alloc_graph(g)
    got = {name: (p.buffer_id, p.offset) for name, p in ga.placements.items()}
    assert got == {"a": (0, 0), "j": (1, 0), "k": (0, 8), "n": (1, 8)}, got


@pytest.mark.invariant("ALLOC-023")
def test_sources_are_freed_after_their_last_reader(target: Any) -> None:
    """A chain of copies needs two slots, whatever its length."""
    tensors = [inp("x0", 4)] + [f32(f"x{i}", 4, "CPY", f"x{i - 1}") for i in range(1, 8)]
    got = place(target, build_graph(tensors, ["x7"]))
    assert {got[f"x{i}"] for i in range(8)} == {(0, 0), (0, 16)}, got


@pytest.mark.invariant("ALLOC-018", "ALLOC-023")
def test_a_view_keeps_its_root_alive(target: Any) -> None:
    """x0's direct reader y is done at node 0, but z reads it through the view v at node 2."""
    g = build_graph(
        [
            inp("x0", 4),
            out(f32("y", 4, "CPY", "x0")),
            view("v", 4, "x0", "x0", 0),
            out(f32("z", 4, "CPY", "v")),
        ],
        ["y", "z"],
    )
    assert g.nodes == ("y", "v", "z")
    got = place(target, g)
    assert got["v"] == got["x0"]
    assert got["z"] not in (got["x0"], got["y"]), f"z overwrote memory still read: {got}"


def _in_place_graph(case: str) -> tuple[Graph, str, str]:
    """A graph whose node ``n`` may or may not take over ``p``: (graph, node, parent)."""
    a, b = inp("a", 4), inp("b", 4)
    outs = ["n"]
    if case == "reused":
        t = [a, b, out(f32("n", 4, "ADD", "a", "b"))]
    elif case == "second source":
        t = [a, b, out(f32("keep", 4, "CPY", "a")), out(f32("n", 4, "ADD", "a", "b"))]
        outs = ["n", "keep"]  # keep reads a after n: a still has two children at n
    elif case == "output parent":
        t = [a, b, out(f32("p", 4, "CPY", "a")), out(f32("n", 4, "SCALE", "p"))]
    elif case == "two children":
        t = [
            a,
            f32("p", 4, "CPY", "a"),
            out(f32("n", 4, "SCALE", "p")),
            out(f32("m", 4, "SQR", "p")),
        ]
        outs = ["n", "m"]
    elif case == "other layout":
        p = Tensor("p", 16, "CPY", ("a",), layout=contiguous(2, 2, type="f32"))
        t = [a, p, out(f32("n", 4, "SCALE", "p"))]
    elif case == "no layout":  # p's implied layout: 16 i8 bytes, as n's given one (D8)
        p = Tensor("p", 16, "CPY", ("a",))
        t = [a, p, out(Tensor("n", 16, "SCALE", ("p",), layout=contiguous(16)))]
    elif case == "no layouts, other sizes":  # implied layouts of 16 and 8 i8 bytes differ
        t = [a, Tensor("p", 16, "CPY", ("a",)), out(Tensor("n", 8, "SCALE", ("p",)))]
    elif case == "not in place":
        t = [a, f32("p", 4, "CPY", "a"), out(f32("n", 4, "CPY", "p"))]
    elif case == "clamp":
        t = [a, f32("p", 4, "CPY", "a"), out(f32("n", 4, "CLAMP", "p"))]
    elif case == "has data":
        t = [f32("p", 4, has_data=True), out(f32("n", 4, "SCALE", "p"))]
    else:  # "view parent"
        t = [a, view("p", 4, "a", "a", 0), out(f32("n", 4, "SCALE", "p"))]
    parent = {"reused": "a", "second source": "b"}.get(case, "p")
    return build_graph(t, outs), "n", parent


def _reuse(case: str, reuses: bool, invariant: str) -> Any:
    return pytest.param(case, reuses, id=case, marks=pytest.mark.invariant(invariant))


@pytest.mark.parametrize(
    ("case", "reuses"),
    [
        _reuse("reused", True, "ALLOC-020"),
        # a has another child: b, the next source, is taken
        _reuse("second source", True, "ALLOC-020"),
        _reuse("clamp", True, "ALLOC-020"),  # decision D5
        _reuse("output parent", False, "ALLOC-024"),
        _reuse("two children", False, "ALLOC-020"),
        _reuse("other layout", False, "ALLOC-020"),
        _reuse("no layout", True, "ALLOC-050"),
        _reuse("no layouts, other sizes", False, "ALLOC-050"),
        _reuse("not in place", False, "ALLOC-020"),
        _reuse("has data", False, "ALLOC-020"),
        _reuse("view parent", False, "ALLOC-021"),
    ],
)
def test_in_place_reuse(target: Any, case: str, reuses: bool) -> None:
    graph, node, parent = _in_place_graph(case)
    got = place(target, graph)
    same = got[node] is not None and got[node] == got[parent]
    assert same is reuses, f"{case}: {node} at {got[node]}, {parent} at {got[parent]}: " + (
        "expected in-place reuse" if reuses else "must not reuse it"
    )


@pytest.mark.invariant("ALLOC-022")
def test_in_place_reuse_frees_the_parents_tail(target: Any) -> None:
    """p asks 32 bytes for a 16-byte layout (a padded MUL_MAT); s takes p over and its 16-byte
    tail goes back at once, so t fits there instead of growing the buffer."""
    p = Tensor("p", 32, "MUL_MAT", ("l0", "l1"), layout=contiguous(4, type="f32"))
    g = build_graph(
        [
            out(inp("l0", 4)),
            out(inp("l1", 4)),
            p,
            f32("s", 4, "SCALE", "p"),
            out(f32("t", 4, "CPY", "s")),
        ],
        ["t"],
    )
    got = place(target, g)
    assert got["p"] == got["s"] == (0, 32)
    assert got["t"] == (0, 48), f"t at {got['t']}: the tail [48, 64) of p was not freed"


@pytest.mark.invariant("ALLOC-022")
def test_only_the_parents_tail_is_freed(target: Any) -> None:
    """As above with q computed between p and s, right after p: the 16 freed bytes [48, 64)
    cannot hold u's 32, so u goes after q; freeing more than the tail would hand u q's bytes."""
    p = Tensor("p", 32, "MUL_MAT", ("l0", "l1"), layout=contiguous(4, type="f32"))
    g = build_graph(
        [
            out(inp("l0", 4)),
            out(inp("l1", 4)),
            p,
            out(f32("q", 4, "CPY", "l0")),
            f32("s", 4, "SCALE", "p"),
            out(f32("u", 8, "CPY", "s")),
        ],
        ["u", "q"],
    )
    g = Graph(g.tensors, ("p", "q", "s", "u"), g.leafs, g.order)  # q runs before s
    got = place(target, g)
    assert (got["p"], got["s"], got["q"]) == ((0, 32), (0, 32), (0, 64)), got
    assert got["u"] == (0, 80), f"u at {got['u']}: the freed tail [48, 64) cannot hold it"


@pytest.mark.invariant("ALLOC-015")
def test_a_repeated_buffer_type_is_shared(target: Any) -> None:
    a = BufferType("A", 8, SIZE_MAX)
    g = build_graph([inp("l0", 4), inp("l1", 4), out(f32("n", 4, "CONCAT", "l0", "l1"))], ["n"])
    ga = target.allocator_planner((a, a))
    assert ga.reserve(g, (1,), (0, 1))
    assert ga.alloc_graph(g)
    offs = sorted(ga.placements[n].offset for n in ("l0", "l1", "n"))
    assert offs == [0, 16, 32], f"buffers 0 and 1 are one type, one address space: {offs}"
    assert (ga.buffer_size(0), ga.buffer_size(1)) == (48, 0)
    assert ga.allocations == [(0, 48)], ga.allocations
    fresh = target.allocator_planner((a, BufferType("B", 8, SIZE_MAX)))
    assert fresh.buffer_size(0) == fresh.buffer_size(1) == 0, "no buffer before a reserve"


@pytest.mark.invariant("ALLOC-016")
def test_each_buffer_has_its_own_alignment(target: Any) -> None:
    bufts = (BufferType("A", 32, SIZE_MAX), BufferType("B", 8, 64))
    g = build_graph(
        [inp(f"l{i}", 1) for i in range(4)]
        + [out(f32("n", 4, "CONCAT", "l0", "l1")), out(f32("m", 4, "CONCAT", "l2", "l3"))],
        ["n", "m"],
    )
    ga = target.allocator_planner(bufts)
    ids = {"l0": 0, "l1": 0, "l2": 1, "l3": 1}
    assert ga.reserve(g, (0, 1), tuple(ids[n] for n in g.leafs))
    assert ga.alloc_graph(g)
    got = {n: (p.buffer_id, p.offset) for n, p in ga.placements.items()}
    assert got == {
        "l0": (0, 0),
        "l1": (0, 32),
        "l2": (1, 0),
        "l3": (1, 8),
        "n": (0, 64),
        "m": (1, 16),
    }
    # a buffer type given by name alone has test-alloc's default alignment (8) and no maximum:
    # the same graph packs at 8 into one chunk (m takes the block l0 and l1 left)
    plain = target.allocator_planner((BufferType("plain"),))
    assert plain.alloc_graph(g)
    got = {n: (p.chunk, p.offset) for n, p in plain.placements.items()}
    assert got == {
        "l0": (0, 0),
        "l1": (0, 8),
        "l2": (0, 16),
        "l3": (0, 24),
        "n": (0, 32),
        "m": (0, 0),
    }
    assert plain.chunk_sizes(0) == [48]


def _two_graphs() -> tuple[Graph, Graph, Graph]:
    small = build_graph([inp("x", 4), out(f32("y", 4, "CPY", "x"))], ["y"])
    big = build_graph([inp("x", 8), out(f32("y", 8, "CPY", "x"))], ["y"])
    longer = build_graph(
        [inp("x", 4), f32("y", 4, "CPY", "x"), out(f32("z", 4, "CPY", "y"))], ["z"]
    )
    return small, big, longer


@pytest.mark.invariant("ALLOC-027")
def test_reserve_reallocates_only_to_grow(target: Any) -> None:
    small, big, _ = _two_graphs()
    ga = target.allocator_planner(ONE)
    assert ga.reserve(big) and ga.allocations == [(0, 64)]
    assert ga.reserve(small)
    assert ga.allocations == [(0, 64)] and ga.buffer_size(0) == 64, (
        "a smaller plan keeps the buffer"
    )
    ga = target.allocator_planner(ONE)
    assert ga.reserve(small) and ga.reserve(big)
    assert ga.allocations == [(0, 32), (0, 64)], (
        "growing makes the chunk at its new high-water mark"
    )
    assert ga.buffer_size(0) == 64


def _stale(target: Any, stored: Graph, graph: Graph) -> bool:
    """Whether ``graph`` needs a new plan after ``stored`` was reserved: a two-buffer planner
    refuses (returns False from) alloc_graph exactly then (ALLOC-030); asked twice, the answer
    and the placements stay the same (ALLOC-031)."""
    ga = target.allocator_planner((BufferType("A", 8), BufferType("B", 8)))
    assert ga.reserve(stored, (0,) * len(stored.nodes), (0,) * len(stored.leafs))
    answers, seen = [], []
    for _ in range(2):
        answers.append(ga.alloc_graph(graph))
        seen.append(dict(ga.placements))
    assert answers[0] == answers[1] and seen[0] == seen[1], "the stale-plan check is not pure"
    return not answers[0]


@pytest.mark.invariant("ALLOC-029", "ALLOC-026", "ALLOC-031")
def test_when_a_new_plan_is_needed(target: Any) -> None:
    small, big, longer = _two_graphs()
    assert not _stale(target, big, big)
    assert not _stale(target, big, small), "smaller tensors fit the stored plan"
    assert _stale(target, big, longer), "one more node"
    assert _stale(target, small, big), "x grew past the size stored for it"
    x_small = build_graph([inp("x", 4), out(f32("y", 4, "MEAN", "x"))], ["y"])
    x_big = build_graph([inp("x", 16), out(f32("y", 4, "MEAN", "x"))], ["y"])
    assert _stale(target, x_small, x_big), "a node source grew though the node did not"
    assert not _stale(target, x_big, x_small), "a smaller source fits the stored plan"
    heavy = build_graph(
        [inp("x", 4), f32("w", 64, has_data=True), out(f32("y", 4, "ADD", "x", "w"))], ["y"]
    )
    lighter = build_graph(
        [inp("x", 4), f32("w", 1, has_data=True), out(f32("y", 4, "ADD", "x", "w"))], ["y"]
    )
    assert not _stale(target, lighter, heavy), "a tensor with data is never checked"
    lost = build_graph([inp("x", 4), inp("w", 4), out(f32("y", 4, "ADD", "x", "w"))], ["y"])
    assert _stale(target, heavy, lost), "w had data when planned: its entry has buffer id -1"
    wide = build_graph(
        [inp("x", 8), view("v", 8, "x", "x", 0), out(f32("y", 2, "MEAN", "v"))], ["y"]
    )
    narrow = build_graph(
        [inp("x", 8), view("v", 2, "x", "x", 0), out(f32("y", 2, "MEAN", "v"))], ["y"]
    )
    assert not _stale(target, narrow, wide), "a view is never checked"
    # the same position held a view when planned and holds a plain tensor now
    unviewed = build_graph(
        [inp("x", 8), f32("v", 2, "CPY", "x"), out(f32("y", 2, "MEAN", "v"))], ["y"]
    )
    assert _stale(target, wide, unviewed), "a view's entry has buffer id -1"


@pytest.mark.invariant("ALLOC-029")
def test_the_stored_plan_is_positional(target: Any) -> None:
    """Another graph with the same counts and sizes that fit is placed from the old plan."""
    one = build_graph([inp("x", 4), out(f32("y", 4, "SCALE", "x"))], ["y"])
    other = build_graph([inp("a", 2), out(f32("b", 2, "MEAN", "a"))], ["b"])
    ga = target.allocator_planner(ONE)
    assert ga.alloc_graph(one) and ga.alloc_graph(other)
    assert ga.allocations == [(0, 16)], "no new plan was needed"
    assert ga.placements["b"] == ga.placements["a"], "b takes y's slot, which was x's"


@pytest.mark.invariant("ALLOC-030")
def test_only_a_single_buffer_planner_replans_itself(target: Any) -> None:
    small, big, _ = _two_graphs()
    ga = target.allocator_planner(ONE)
    assert ga.alloc_graph(small)
    assert ga.alloc_graph(big), "a single-buffer planner reserves again by itself"
    assert ga.allocations == [(0, 32), (0, 64)]
    two = target.allocator_planner((BufferType("A", 8), BufferType("B", 8)))
    assert two.reserve(small, (0,), (0,)) and two.alloc_graph(small)
    before = (dict(two.placements), list(two.allocations))
    assert two.alloc_graph(big) is False, "several buffers: the caller must reserve"
    assert (dict(two.placements), list(two.allocations)) == before, "a refused alloc_graph assigned"


@pytest.mark.invariant("ALLOC-027")
def test_a_zero_byte_chunk_makes_no_buffer(target: Any) -> None:
    g = build_graph([inp("a", 2), out(Tensor("z", 0, "CPY", ("a",), layout=contiguous(0)))], ["z"])
    ga = target.allocator_planner((BufferType("buf", 8, 8),))
    assert ga.alloc_graph(g)
    assert ga.allocations == [(0, 8)], f"{ga.allocations}: a zero-byte chunk asks for no memory"


@pytest.mark.invariant("ALLOC-025")
def test_a_view_met_before_its_root_is_placed_later(target: Any) -> None:
    """Decision D7: nodes out of topological order; v is met (as n's source) before r, its root,
    has memory, and is placed at r's address when met again."""
    a = inp("a", 4)
    r = f32("r", 4, "CPY", "a")
    v = view("v", 4, "r", "r", 0)
    n = out(f32("n", 4, "CPY", "v"))
    g = Graph({t.name: t for t in (a, r, v, n)}, ("n", "r", "v"), ("a",), ("a", "r", "v", "n"))
    ga = target.allocator_planner(ONE)
    assert ga.alloc_graph(g)
    assert ga.placements["v"] == ga.placements["r"], ga.placements


@pytest.mark.invariant("ALLOC-025")
def test_a_leaf_view_of_a_node_is_placed_as_a_source(target: Any) -> None:
    """Decision D7: v is a leaf viewing node r (ggml_view_tensor: op NONE, no source). Leafs are
    met before every node, so v has no address after the leaf pass; n reads it, and there it is
    tried again and placed 8 bytes into r (ggml 0.25.3 places it the same)."""
    a = inp("a", 4)
    r = f32("r", 4, "CPY", "a")
    v = Tensor("v", 8, "NONE", (), view_src="r", view_offs=8, layout=contiguous(2, type="f32"))
    n = out(f32("n", 6, "CONCAT", "r", "v"))
    g = Graph({t.name: t for t in (a, r, v, n)}, ("r", "n"), ("a", "v"), ("a", "r", "v", "n"))
    got = place(target, g)
    assert got == {"a": (0, 0), "r": (0, 16), "v": (0, 24), "n": (0, 32)}, got


@pytest.mark.invariant("ALLOC-024", "ALLOC-025")
def test_a_node_met_again_after_its_last_consumer_is_placed_anew(target: Any) -> None:
    """Decision D7: n reads r, which is listed after it. r is placed as n's source and freed
    once n (its only child) is done; m then takes r's block; when r itself comes, it is free,
    so it gets a new place rather than the block m now holds."""
    a = inp("a", 4)
    r = f32("r", 4, "CPY", "a")
    n = out(f32("n", 4, "CPY", "r"))
    m = out(f32("m", 4, "CPY", "a"))
    g = Graph({t.name: t for t in (a, r, n, m)}, ("n", "m", "r"), ("a",), ("a", "r", "n", "m"))
    got = place(target, g)
    # r first took (0, 16); m took it once r was freed (ggml 0.25.3 places them the same)
    assert got == {"a": (0, 0), "n": (0, 32), "m": (0, 16), "r": (0, 48)}, got


@pytest.mark.invariant("ALLOC-022")
def test_an_in_place_node_of_its_parents_size_frees_nothing(target: Any) -> None:
    """300 inputs side by side, each scaled in place into an output of the same size: no tail
    is left to free, so no free block is made (an empty one per reuse would pass ggml's limit
    of 256 free blocks per chunk and fail the plan)."""
    n = 300
    tensors: list[Tensor] = []
    for i in range(n):
        tensors += [inp(f"x{i}", 4), out(f32(f"y{i}", 4, "SCALE", f"x{i}"))]
    got = place(target, build_graph(tensors, [f"y{i}" for i in range(n)]))
    assert all(got[f"y{i}"] == got[f"x{i}"] == (0, 16 * i) for i in range(n)), "not in place"


@pytest.mark.invariant("ALLOC-004")
def test_sizes_are_rounded_up_when_placed_and_freed(target: Any) -> None:
    """5 and 3 bytes at alignment 8 take 8 each; a's 5 bytes, freed, leave an 8-byte hole."""
    a = Tensor("a", 5, input=True, layout=contiguous(5))
    b = Tensor("b", 3, input=True, layout=contiguous(3))
    g = build_graph(
        [
            a,
            b,
            Tensor("c", 8, "CONCAT", ("a", "b"), layout=contiguous(8)),
            Tensor("d", 8, "CPY", ("c",), layout=contiguous(8)),
            Tensor("e", 8, "CPY", ("d",), layout=contiguous(8), output=True),
        ],
        ["e"],
    )
    got = place(target, g)
    assert (got["a"], got["b"], got["c"]) == ((0, 0), (0, 8), (0, 16)), got
    assert got["d"] == (0, 0), f"d at {got['d']}: the freed 5+3 bytes are one 16-byte hole"
    assert got["e"] == (0, 8), "c, freed after d, joins the free tail at 8"


@pytest.mark.invariant("ALLOC-005", "ALLOC-008")
def test_at_most_sixteen_chunks(target: Any) -> None:
    """Twenty 8-byte inputs, all alive until one concat, at max size 8: chunks 0..14 hold one
    each and the 16th takes the other five."""
    t = [inp(f"x{i}", 2) for i in range(20)]
    acc = "x0"
    for i in range(1, 20):
        t.append(f32(f"c{i}", 2 * (i + 1), "CONCAT", acc, f"x{i}", output=True))
        acc = f"c{i}"
    g = build_graph(t, [acc])
    ga = target.allocator_planner((BufferType("buf", 8, 8),))
    assert ga.alloc_graph(g)
    sizes = ga.chunk_sizes(0)
    assert len(sizes) == 16, f"{len(sizes)} chunks: {sizes}"
    assert [ga.placements[f"x{i}"].chunk for i in range(20)] == list(range(15)) + [15] * 5


@pytest.mark.invariant("ALLOC-013")
def test_each_reserve_starts_from_empty_chunks(target: Any) -> None:
    """A reserve resets the chunk allocators: after a bigger graph, a smaller one is planned
    exactly as on a fresh planner."""
    small, big, longer = _two_graphs()
    fresh = place(target, longer)
    ga = target.allocator_planner(ONE)
    assert ga.reserve(big) and ga.reserve(small) and ga.reserve(longer)
    assert ga.alloc_graph(longer)
    got = chunk_offsets(ga.placements)
    assert got == fresh
