"""Bench: planning a decoder graph (reference_impl.allocator vs ggml's gallocr).

Work is the graph's node count per round (nodes/s). The graph is a stack of llama layers
(:func:`conformance.allocator.scenarios.llama_stack`: weights and the KV cache have data, views
into the cache, SwiGLU) on one unbounded buffer type of alignment 32. One round is a size-only
reservation (``reserve_size``): the whole plan, no backing memory. The peer is the real ggml
allocator of llama-cpp-python's ``libggml-base`` (the llama.cpp target's adapter builds the
ggml graph once; the timed call is ``ggml_gallocr_reserve_n_size`` alone, as ggml's own planning
time is what an engine pays per graph).

Both sides must report the same sizes; that is checked outside the timed function.
"""

from __future__ import annotations

import ctypes
import importlib.util
from typing import Any

import pytest

from conformance.allocator.scenarios import llama_stack
from reference_impl.allocator.graph import SIZE_MAX
from reference_impl.allocator.planner import BufferType, GraphAllocator
from tools.bench.common import record

AREA = "allocator"
N_LAYERS = (1, 8, 32)
BUFT = BufferType("cpu", 32, SIZE_MAX)
HAVE_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None


@pytest.mark.parametrize("n_layers", N_LAYERS, ids=[f"{n}layers" for n in N_LAYERS])
@pytest.mark.parametrize("role", ["subject", "peer"])
def test_plan_llama_stack(benchmark: Any, role: str, n_layers: int) -> None:
    graph = llama_stack(n_layers, n_tokens=1)
    want = GraphAllocator([BUFT]).reserve_size(graph)
    params = {"n_layers": n_layers, "n_nodes": len(graph.nodes), "n_leafs": len(graph.leafs)}
    pair = f"allocator/plan/{n_layers}layers"
    if role == "subject":
        ga = GraphAllocator([BUFT])
        got = benchmark(ga.reserve_size, graph)
        assert got == want
        record(benchmark, area=AREA, work=len(graph.nodes), unit="nodes", params=params, pair=pair)
        return
    if not HAVE_LLAMA_CPP:
        pytest.skip("llama-cpp-python is not importable (the 'llamacpp' extra)")
    from conformance.targets.llamacpp.allocator import LlamaCppAllocator

    planner = LlamaCppAllocator().allocator_planner([BUFT])
    assert planner.reserve_size(graph) == want  # also builds the ggml graph once
    made, nodes, leafs = planner._prepare(graph, None, None)
    sizes = (ctypes.c_size_t * 1)()
    reserve = planner._lib.dll.ggml_gallocr_reserve_n_size
    galloc, cgraph = planner._galloc, made.cgraph
    benchmark(reserve, galloc, cgraph, nodes, leafs, sizes)
    assert list(sizes) == want
    record(
        benchmark,
        area=AREA,
        work=len(graph.nodes),
        unit="nodes",
        params=params,
        pair=pair,
        role="peer",
        peer="ggml (llama-cpp-python)",
    )
    planner.release()
