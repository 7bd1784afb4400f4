"""The allocator compared between the target and the peer (spec/allocator.md). With llama.cpp on
one side this is the real ggml allocator (``ggml-alloc.c`` of llama-cpp-python's
``libggml-base.so``, driven by :mod:`conformance.targets.llamacpp.allocator`) against the other
engine's, placement for placement:

* every test-alloc scenario of :mod:`conformance.allocator.scenarios`, and its two-graph
  reallocation on one planner: the same placements, chunk sizes, buffer sizes and backing-buffer
  allocations;
* random graphs (:func:`conformance.strategies.allocator.graph_cases`: in-place and fresh ops,
  views, inputs, outputs, weights with data, one or two buffer types, a type listed twice): the
  same plan, and the same sizes from ``reserve_size`` on a fresh planner;
* a few random graphs allocated one after the other on one planner (a stale plan is reused by
  position or replaced);
* ``alloc_ctx_tensors`` and the linear allocator on random inputs.

An input on which the llama.cpp adapter refuses to call ggml (``"ggml would abort: ..."``: ggml
would kill the process) is not a comparison; such a drawn example is rejected. Only the stale
plans of the graph sequences come near that (a leaf whose stored plan entry is for a tensor with
data, or too small: ggml checks only nodes and their sources before reusing a plan).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, reject, settings
from hypothesis import strategies as st

from conformance.allocator import scenarios as sc
from conformance.strategies.allocator import (
    GraphCase,
    buffer_types,
    graph_cases,
    graphs,
    tensor_lists,
)
from conformance.strategies.kernels import examples
from reference_impl.allocator.graph import SIZE_MAX, Graph
from reference_impl.allocator.planner import BufferType

ABORT = "ggml would abort:"

# what a random plan exercises: chunk choice, lifetimes, in-place reuse, views, outputs, buffer
# types (own alignment and max size, a type listed twice) and (re)allocation of the backing
RANDOM_PLAN = (
    "ALLOC-006",
    "ALLOC-007",
    "ALLOC-008",
    "ALLOC-009",
    "ALLOC-010",
    "ALLOC-015",
    "ALLOC-016",
    "ALLOC-017",
    "ALLOC-018",
    "ALLOC-019",
    "ALLOC-020",
    "ALLOC-021",
    "ALLOC-022",
    "ALLOC-023",
    "ALLOC-024",
    "ALLOC-026",
    "ALLOC-027",
)


def _state(ga: Any, n_buffers: int) -> dict[str, Any]:
    """Everything a planner shows after a successful alloc_graph (copied: an engine may hand
    out its live records)."""
    return {
        "placements": dict(ga.placements),
        "chunk_sizes": [list(ga.chunk_sizes(i)) for i in range(n_buffers)],
        "buffer_sizes": [ga.buffer_size(i) for i in range(n_buffers)],
        "allocations": list(ga.allocations),
    }


def _plan(
    engine: Any,
    bufts: tuple[BufferType, ...],
    graph: Graph,
    node_ids: tuple[int, ...] | None = None,
    leaf_ids: tuple[int, ...] | None = None,
) -> dict[str, Any]:
    """Plan as test-alloc does: reserve_n with explicit ids when given, then alloc_graph."""
    ga = engine.allocator_planner(bufts)
    try:
        if node_ids is not None or leaf_ids is not None:
            assert ga.reserve(graph, node_ids, leaf_ids), "reserve returned False"
        assert ga.alloc_graph(graph), "alloc_graph returned False"
        return _state(ga, len(bufts))
    finally:
        ga.release()


def _diff(got: dict[str, Any], want: dict[str, Any]) -> str:
    lines = []
    for key in want:
        if got[key] == want[key]:
            continue
        if key == "placements":
            names = sorted(set(got[key]) | set(want[key]))
            lines += [
                f"  {n}: target {got[key].get(n)} / peer {want[key].get(n)}"
                for n in names
                if got[key].get(n) != want[key].get(n)
            ]
        else:
            lines.append(f"  {key}: target {got[key]} / peer {want[key]}")
    return "\n".join(lines)


def _same(target: Any, peer: Any, what: str, *args: Any) -> None:
    got, want = _plan(target, *args), _plan(peer, *args)
    assert got == want, f"{what}: target and peer plan differently:\n{_diff(got, want)}"


# -- test-alloc scenarios ------------------------------------------------------------------------
def _scenario(s: sc.Scenario) -> Any:
    return pytest.param(s, id=s.id, marks=pytest.mark.invariant(s.invariant, "ALLOC-025"))


@pytest.mark.requires("allocator.planner")
@pytest.mark.parametrize("s", [_scenario(s) for s in sc.single_graph_scenarios()])
def test_scenario_plans_match(target: Any, peer: Any, s: sc.Scenario) -> None:
    _same(target, peer, s.id, s.bufts, s.graph, s.node_buffer_ids, s.leaf_buffer_ids)


@pytest.mark.requires("allocator.planner")
@pytest.mark.invariant("ALLOC-046", "ALLOC-025", "ALLOC-027", "ALLOC-029", "ALLOC-030")
def test_reallocation_plans_match(target: Any, peer: Any) -> None:
    """test-alloc's reallocation: two graphs on one planner; the second one's stale plan makes
    the planner reserve again and reallocate every chunk."""
    first, second = sc.reallocation()

    def run(engine: Any) -> list[dict[str, Any]]:
        ga = engine.allocator_planner(first.bufts)
        try:
            out = []
            for s in (first, second):
                assert ga.alloc_graph(s.graph), f"{s.id}: alloc_graph returned False"
                out.append(_state(ga, 1))
            return out
        finally:
            ga.release()

    got, want = run(target), run(peer)
    for s, g, w in zip((first, second), got, want):
        assert g == w, f"{s.id}: target and peer plan differently:\n{_diff(g, w)}"


# -- random graphs -------------------------------------------------------------------------------
@pytest.mark.requires("allocator.planner")
@pytest.mark.invariant(*RANDOM_PLAN)
@settings(max_examples=examples(100))
@given(case=graph_cases(max_buffers=2, max_nodes=18))
def test_random_plans_match(target: Any, peer: Any, case: GraphCase) -> None:
    _same(
        target,
        peer,
        "random graph",
        case.bufts,
        case.graph,
        case.node_buffer_ids,
        case.leaf_buffer_ids,
    )


@pytest.mark.requires("allocator.planner")
@pytest.mark.invariant("ALLOC-028", "ALLOC-015")
@settings(max_examples=examples(40))
@given(case=graph_cases(max_buffers=2, max_nodes=18))
def test_random_reserve_sizes_match(target: Any, peer: Any, case: GraphCase) -> None:
    def sizes(engine: Any) -> tuple[list[int], list[tuple[int, int]]]:
        ga = engine.allocator_planner(case.bufts)
        try:
            got = ga.reserve_size(case.graph, case.node_buffer_ids, case.leaf_buffer_ids)
            return list(got), list(ga.allocations)
        finally:
            ga.release()

    got, want = sizes(target), sizes(peer)
    assert got == want, f"reserve_size (sizes, allocations): target {got}, peer {want}"
    assert not got[1], f"reserve_size made backing buffers: {got[1]}"


@st.composite
def _graph_sequences(draw: st.DrawFn) -> tuple[tuple[BufferType, ...], list[Graph], Any]:
    """One or two buffer types and two or three graphs for one planner; with two types the first
    graph is reserved with drawn ids (the others then need a reserve, which is not made)."""
    n = draw(st.integers(1, 2))
    bufts = draw(buffer_types(n))
    gs = draw(st.lists(graphs(max_nodes=8), min_size=2, max_size=3))
    ids = None
    if n == 2:
        g = gs[0]
        pick = st.integers(0, 1)
        ids = (
            tuple(draw(st.lists(pick, min_size=len(g.nodes), max_size=len(g.nodes)))),
            tuple(draw(st.lists(pick, min_size=len(g.leafs), max_size=len(g.leafs)))),
        )
    return bufts, gs, ids


@pytest.mark.requires("allocator.planner")
@pytest.mark.invariant("ALLOC-029", "ALLOC-030", "ALLOC-031", "ALLOC-027")
@settings(max_examples=examples(40))
@given(seq=_graph_sequences())
def test_graph_sequences_match(target: Any, peer: Any, seq: Any) -> None:
    """Graphs allocated one after another on one planner: a plan whose counts and sizes still fit
    is reused by position (even for a different graph), else replaced (one buffer type) or
    refused (two); allocating the last graph again changes nothing."""
    bufts, gs, ids = seq

    def run(engine: Any) -> tuple[list[Any], Exception | None]:
        ga = engine.allocator_planner(bufts)
        out: list[Any] = []
        try:
            if ids is not None:
                out.append(("reserve", ga.reserve(gs[0], *ids)))
            for g in (*gs, gs[-1]):
                ok = ga.alloc_graph(g)
                out.append((ok, _state(ga, len(bufts))))
        except Exception as exc:  # compared below: both engines run first
            return out, exc
        finally:
            ga.release()
        return out, None

    (got, got_exc), (want, want_exc) = run(target), run(peer)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g[0] == w[0], f"call #{i}: target returned {g[0]}, peer {w[0]}"
        assert g[1] == w[1], f"after call #{i}:\n{_diff(g[1], w[1])}"
    if any(isinstance(e, RuntimeError) and str(e).startswith(ABORT) for e in (got_exc, want_exc)):
        reject()  # ggml would kill the process: nothing to compare from there on
    if got_exc is not None or want_exc is not None:
        raise AssertionError(
            f"after {len(got)} / {len(want)} calls: target raised {got_exc!r}, peer raised {want_exc!r}"
        ) from (got_exc or want_exc)
    assert len(got) == len(want)


# -- alloc_ctx_tensors and the linear allocator ----------------------------------------------------
@pytest.mark.requires("allocator.ctx_tensors")
@pytest.mark.invariant("ALLOC-032")
@settings(max_examples=examples(40))
@given(
    tensors=tensor_lists(max_nodes=10),
    alignment=st.sampled_from((4, 8, 16, 32, 64)),
    max_size=st.sampled_from((8, 16, 32, 64, 128, SIZE_MAX)),
)
def test_ctx_tensors_match(
    target: Any, peer: Any, tensors: Any, alignment: int, max_size: int
) -> None:
    buft = BufferType("ctx", alignment, max_size)
    got = target.allocator_ctx_tensors(tensors, buft)
    want = peer.allocator_ctx_tensors(tensors, buft)
    assert got == want, f"alloc_ctx_tensors: target {got}, peer {want}"
    got_size = target.allocator_ctx_tensors_size(tensors, buft)
    want_size = peer.allocator_ctx_tensors_size(tensors, buft)
    assert got_size == want_size, f"alloc_ctx_tensors_size: target {got_size}, peer {want_size}"


@pytest.mark.requires("allocator.linear")
@pytest.mark.invariant("ALLOC-001")
@settings(max_examples=examples(40))
@given(
    alignment=st.sampled_from((1, 2, 4, 8, 16, 32, 64)),
    base=st.integers(0, 256),
    sizes=st.lists(st.integers(0, 100), max_size=8),
    slack=st.integers(1, 64),  # a buffer of 0 bytes has no base in ggml
)
def test_linear_offsets_match(
    target: Any, peer: Any, alignment: int, base: int, sizes: list[int], slack: int
) -> None:
    first = -base % alignment
    total = first + sum(-(-s // alignment) * alignment for s in sizes) + slack  # everything fits
    la, lb = (
        target.allocator_linear(total, alignment, base),
        peer.allocator_linear(total, alignment, base),
    )
    assert la.offset == lb.offset, f"first offset: target {la.offset}, peer {lb.offset}"
    for i, size in enumerate(sizes):
        got, want = la.alloc(f"t{i}", size), lb.alloc(f"t{i}", size)
        assert got == want, f"t{i} ({size} bytes): target offset {got}, peer {want}"
        assert la.offset == lb.offset, f"after t{i}: target offset {la.offset}, peer {lb.offset}"
