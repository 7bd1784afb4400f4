"""The scenarios of llama.cpp's tests/test-alloc.cpp (spec/allocator.md ALLOC-035..047), each
planned by the target: exact placements and chunk sizes as the real ggml allocator gives them
(:mod:`conformance.allocator.scenarios`), test-alloc's own bounds, and ALLOC-025 on every plan."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.allocator import scenarios as sc
from conformance.allocator.checks import chunk_offsets, plan_violations

pytestmark = pytest.mark.requires("allocator.planner")


def plan(target: Any, s: sc.Scenario, planner: Any = None) -> Any:
    """Plan ``s`` as test-alloc does: reserve_n with the scenario's ids when it has several
    buffer types, then alloc_graph."""
    ga = planner if planner is not None else target.allocator_planner(s.bufts)
    if s.node_buffer_ids is not None:
        assert ga.reserve(s.graph, s.node_buffer_ids, s.leaf_buffer_ids), f"{s.id}: reserve failed"
    assert ga.alloc_graph(s.graph), f"{s.id}: alloc_graph returned False"
    return ga


def check(ga: Any, s: sc.Scenario) -> None:
    got = chunk_offsets(ga.placements)
    wrong = {n: f"{got.get(n)} (ggml: {e})" for n, e in s.placements.items() if got.get(n) != e}
    assert not wrong, f"{s.id}: placements differ from ggml's: {wrong}"
    for name, p in ga.placements.items():
        if p is not None:
            want = s.buffer_of.get(name, 0)
            assert p.buffer_id == want, f"{s.id}: {name} in buffer {p.buffer_id}, ggml: {want}"
    sizes = tuple(tuple(ga.chunk_sizes(i)) for i in range(len(s.bufts)))
    assert sizes == s.chunk_sizes, f"{s.id}: chunk sizes {sizes}, ggml: {s.chunk_sizes}"
    bad = plan_violations(s.graph, s.bufts, ga.placements, sizes)
    assert not bad, f"{s.id}: " + "; ".join(bad)


SINGLE = {s.id: s for s in sc.single_graph_scenarios()}


def _case(name: str) -> Any:
    s = SINGLE[name]
    return pytest.param(s, id=name, marks=pytest.mark.invariant(s.invariant, "ALLOC-025"))


@pytest.mark.parametrize(
    "s",
    [
        _case(n)
        for n in SINGLE
        if SINGLE[n].invariant not in ("ALLOC-044", "ALLOC-045", "ALLOC-047")
    ],
)
def test_single_buffer_scenario(target: Any, s: sc.Scenario) -> None:
    ga = plan(target, s)
    check(ga, s)
    total = ga.buffer_size(0)
    assert total == sum(s.chunk_sizes[0]), f"{s.id}: buffer size {total} != sum of chunks"
    assert s.bound(total), f"{s.id}: total {total} breaks test-alloc's bound {s.bound_text}"


@pytest.mark.invariant("ALLOC-038")
def test_not_enough_chunks_grows_the_sixteenth(target: Any) -> None:
    s = sc.not_enough_chunks()
    ga = plan(target, s)
    sizes = ga.chunk_sizes(0)
    assert len(sizes) == 16, f"{len(sizes)} chunks, at most 16 exist"
    assert sizes[-1] > s.bufts[0].max_size, f"the 16th chunk did not grow: {sizes}"


@pytest.mark.invariant("ALLOC-044", "ALLOC-025")
def test_multiple_buffer_types(target: Any) -> None:
    s = sc.multiple_buffer_types()
    ga = plan(target, s)
    check(ga, s)
    a, b = ga.buffer_size(0), ga.buffer_size(1)
    assert (a, b) == (40, 24), f"planner buffers A {a}, B {b}; ggml: 40, 24"
    # test-alloc counts the weights' buffers too (A: a0 + a1, B: b0 + b1 padded to 8)
    assert a + s.static_bytes[0] <= 88 and b + s.static_bytes[1] <= 56, s.bound_text


@pytest.mark.invariant("ALLOC-044")
def test_in_place_reuse_ignores_the_assigned_buffer(target: Any) -> None:
    """x3 is assigned to B but reuses x2's memory in A; x7, x8 assigned to A stay in B."""
    s = sc.multiple_buffer_types()
    ga = plan(target, s)
    ids = dict(zip(s.graph.nodes, s.node_buffer_ids or (), strict=True))
    got = {n: ga.placements[n].buffer_id for n in ("x3", "x7", "x8")}
    assert (ids["x3"], ids["x7"], ids["x8"]) == (1, 0, 0)
    assert got == {"x3": 0, "x7": 1, "x8": 1}, f"buffers {got}; ggml: x3 in A, x7 and x8 in B"


@pytest.mark.invariant("ALLOC-045", "ALLOC-025")
def test_buffer_size_zero(target: Any) -> None:
    s = sc.buffer_size_zero()
    ga = plan(target, s)
    check(ga, s)
    assert (ga.buffer_size(0), ga.buffer_size(1)) == (16, 0)
    made = [size for buf, size in ga.allocations if buf == 1]
    assert made == [], f"buffer B allocated {made}; it holds no tensor"


@pytest.mark.invariant("ALLOC-046", "ALLOC-025", "ALLOC-030")
def test_reallocation(target: Any) -> None:
    first, second = sc.reallocation()
    ga = plan(target, first)
    check(ga, first)
    assert ga.buffer_size(0) == 40
    ga = plan(target, second, ga)
    check(ga, second)
    assert ga.buffer_size(0) == 40
    assert [size for _, size in ga.allocations] == [24, 16, 20, 20], (
        f"backing buffers made {ga.allocations}; the stale plan must be detected and every chunk "
        "made again at its new size"
    )


@pytest.mark.invariant("ALLOC-047", "ALLOC-025")
@pytest.mark.parametrize("with_dep", [False, True], ids=["no-dependency", "alloc-dependency"])
def test_alloc_dependency(target: Any, with_dep: bool) -> None:
    s = sc.alloc_dep(with_dep)
    ga = plan(target, s)
    check(ga, s)
    same = ga.placements["x1"] == ga.placements["x2"]
    assert same is not with_dep, (
        "x2 must reuse x1's address" if not with_dep else "x1 is kept alive until x3: x2 must move"
    )
