"""Plans of a realistic decoder graph (one llama layer at two batch sizes), pinned as snapshots:
any change in a placement is a change in behaviour to review (``nox -s snapshots``). The plan
is also checked for soundness (ALLOC-025) and for being stable across allocations (ALLOC-031)."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.allocator.checks import plan_violations
from conformance.allocator.scenarios import llama_layer
from reference_impl.allocator.graph import SIZE_MAX
from reference_impl.allocator.planner import BufferType

pytestmark = pytest.mark.requires("allocator.planner")

BUFTS = {
    "unbounded-align-32": (BufferType("cpu", 32, SIZE_MAX),),
    "max-1KiB-align-64": (BufferType("dev", 64, 1024),),
}


@pytest.mark.invariant("ALLOC-025", "ALLOC-031")
@pytest.mark.parametrize("bufts", list(BUFTS), ids=list(BUFTS))
@pytest.mark.parametrize("n_tokens", [1, 7], ids=["decode-1", "prefill-7"])
def test_llama_layer_plan(target: Any, snapshot: Any, n_tokens: int, bufts: str) -> None:
    graph, _ = llama_layer(n_tokens)
    ga = target.allocator_planner(BUFTS[bufts])
    assert ga.alloc_graph(graph)
    sizes = ga.chunk_sizes(0)
    bad = plan_violations(graph, BUFTS[bufts], ga.placements, [sizes])
    assert not bad, "\n".join(bad)
    first = dict(ga.placements)
    assert ga.alloc_graph(graph) and ga.placements == first
    plan = {
        "nodes": list(graph.nodes),
        "leafs": list(graph.leafs),
        "chunks": sizes,
        "placements": {
            n: None if p is None else f"chunk {p.chunk} @ {p.offset}"
            for n, p in sorted(ga.placements.items())
        },
    }
    assert plan == snapshot
