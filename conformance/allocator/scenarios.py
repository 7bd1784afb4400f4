"""The graphs of llama.cpp's ``tests/test-alloc.cpp`` as graph descriptions (ALLOC-035..047),
with the placements the real ggml allocator gives them.

Tensors are F32 as in test-alloc (``make_input_with_size``: size/4 floats, flagged input); the op
results have the shapes ggml's constructors give (mean: one float per row, pad: extra floats
at the end of dim 0, concat: the sum along dim 0). Expected placements ``name: (chunk, offset)``
were read back from ggml 0.25.3 (llama-cpp-python 0.3.36) and agree with a hand trace of the
algorithm; test-alloc itself asserts only the looser byte bounds kept in ``bound``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from conformance.strategies.allocator import build_graph, contiguous
from reference_impl.allocator.graph import (
    SIZE_MAX,
    Graph,
    Layout,
    Tensor,
)
from reference_impl.allocator.planner import BufferType


def f32(name: str, n: int, op: str = "NONE", *src: str, **kw: Any) -> Tensor:
    """An F32 tensor of ``n`` floats (contiguous, 1-D) computed by ``op`` from ``src``."""
    return Tensor(name, 4 * n, op, tuple(src), layout=contiguous(n, type="f32"), **kw)


def inp(name: str, n: int, **kw: Any) -> Tensor:
    return f32(name, n, input=True, **kw)


def view(
    name: str, n: int, of: str, root: str, offs: int, op: str = "VIEW", layout: object = None
) -> Tensor:
    return Tensor(
        name,
        4 * n,
        op,
        (of,),
        view_src=root,
        view_offs=offs,
        layout=layout if layout is not None else contiguous(n, type="f32"),  # type: ignore[arg-type]
    )


def out(t: Tensor) -> Tensor:
    return Tensor(**{**t.__dict__, "output": True})


@dataclass(frozen=True)
class Scenario:
    id: str
    invariant: str
    bufts: tuple[BufferType, ...]
    graph: Graph
    placements: dict[str, tuple[int, int] | None]  # name -> (chunk, offset); None: not placed
    chunk_sizes: tuple[tuple[int, ...], ...]  # per buffer type, the planner's backing chunks
    bound: Callable[[int], bool] = field(default=lambda total: True)
    bound_text: str = ""
    node_buffer_ids: tuple[int, ...] | None = None
    leaf_buffer_ids: tuple[int, ...] | None = None
    buffer_of: dict[str, int] = field(default_factory=dict)  # tensors not in buffer 0
    static_bytes: tuple[int, ...] = ()  # bytes the scenario's weights take per buffer type


def _g(tensors: list[Tensor], output: str) -> Graph:
    return build_graph(tensors, [output])


def too_many_tensors() -> Scenario:
    t = [
        inp("x0", 2),
        inp("x1", 2),
        inp("x2", 2),
        f32("x3", 2, "MUL", "x0", "x1"),
        f32("x4", 2, "ADD", "x1", "x2"),
        f32("x5", 2, "ADD", "x3", "x0"),
        out(f32("x6", 2, "ADD", "x4", "x5")),
    ]
    return Scenario(
        "max_size_too_many_tensors",
        "ALLOC-035",
        (BufferType("dummy", 8, 16),),
        _g(t, "x6"),
        {
            "x1": (0, 0),
            "x2": (0, 8),
            "x0": (1, 0),
            "x4": (0, 8),
            "x3": (0, 0),
            "x5": (0, 0),
            "x6": (0, 8),
        },
        ((16, 8),),
        lambda n: n <= 32,
        "<= 32",
    )


def tensor_too_large() -> Scenario:
    t = [inp("x0", 4), inp("x1", 2), out(f32("x2", 6, "CONCAT", "x0", "x1"))]
    return Scenario(
        "max_size_tensor_too_large",
        "ALLOC-036",
        (BufferType("dummy", 8, 32),),
        _g(t, "x2"),
        {"x0": (0, 0), "x1": (0, 16), "x2": (1, 0)},
        ((24, 24),),
        lambda n: n <= 56,
        "<= 56",
    )


def larger_than_max() -> Scenario:
    t = [inp("x0", 6), out(f32("x1", 6, "SCALE", "x0"))]
    return Scenario(
        "tensor_larger_than_max_size",
        "ALLOC-037",
        (BufferType("dummy", 8, 16),),
        _g(t, "x1"),
        {"x0": (0, 0), "x1": (0, 0)},
        ((24,),),
        lambda n: n == 24,
        "== 24",
    )


def not_enough_chunks() -> Scenario:
    t = [inp(f"x{i}", 2) for i in range(17)]
    acc = "x0"
    for i in range(16):
        t.append(f32(f"a{i}", 2, "ADD", acc, f"x{i + 1}", output=i == 15))
        acc = f"a{i}"
    placed: dict[str, tuple[int, int] | None] = {f"x{i}": (i, 0) for i in range(16)}
    placed.update({"x15": (15, 0), "x16": (15, 8)})
    placed.update({f"a{i}": (0, 0) for i in range(16)})
    return Scenario(
        "not_enough_chunks",
        "ALLOC-038",
        (BufferType("dummy", 8, 8),),
        _g(t, acc),
        placed,
        ((8,) * 15 + (16,),),
        lambda n: n > 128,
        "> 128",
    )


def fill_leftover_space() -> Scenario:
    t = [inp("x0", 2), f32("x1", 4, "PAD", "x0"), out(f32("x2", 1, "MEAN", "x1"))]
    return Scenario(
        "fill_leftover_space",
        "ALLOC-039",
        (BufferType("dummy", 8, 16),),
        _g(t, "x2"),
        {"x0": (0, 0), "x1": (1, 0), "x2": (0, 0)},
        ((8, 16),),
        lambda n: n <= 28,
        "<= 28",
    )


def view_inplace() -> Scenario:
    t = [
        inp("x0", 4),
        view("x1", 4, "x0", "x0", 0, "RESHAPE", contiguous(2, 2, type="f32")),
        view(
            "x2",
            4,
            "x1",
            "x0",
            0,
            "PERMUTE",
            Layout("f32", (2, 2, 1, 1), (8, 4, 16, 16)),
        ),
        view("x3", 2, "x2", "x0", 4),
        inp("x4", 2),
        out(f32("x5", 2, "ADD", "x3", "x4")),
    ]
    return Scenario(
        "view_inplace",
        "ALLOC-040",
        (BufferType("dummy", 8, 32),),
        _g(t, "x5"),
        {"x0": (0, 0), "x1": (0, 0), "x2": (0, 0), "x3": (0, 4), "x4": (0, 16), "x5": (0, 16)},
        ((24,),),
        lambda n: n <= 24,
        "<= 24",
    )


def reuse_and_free() -> Scenario:
    t = [
        inp("x0", 6),
        inp("x1", 2),
        inp("x2", 2),
        f32("x3", 2, "ADD", "x1", "x2"),
        f32("x4", 8, "PAD", "x0"),
        f32("x5", 8, "SCALE", "x4"),
        f32("x6", 8, "ADD", "x4", "x5"),
        view("x7", 2, "x6", "x6", 8),
        out(f32("x8", 2, "ADD", "x3", "x7")),
    ]
    return Scenario(
        "reuse_and_free",
        "ALLOC-041",
        (BufferType("dummy", 8, 40),),
        _g(t, "x8"),
        {
            "x1": (0, 0),
            "x2": (0, 8),
            "x0": (0, 16),
            "x3": (0, 0),
            "x4": (1, 0),
            "x5": (0, 8),
            "x6": (1, 0),
            "x7": (1, 8),
            "x8": (0, 0),
        },
        ((40, 32),),
        lambda n: n <= 104,
        "<= 104",
    )


def _merge_tensors() -> list[Tensor]:
    return [
        inp("x0", 4),
        inp("x1", 4),
        inp("x2", 4),
        f32("x3", 1, "MEAN", "x0"),
        f32("x4", 1, "MEAN", "x1"),
        f32("x5", 6, "PAD", "x2"),
        f32("x6", 1, "ADD", "x3", "x4"),
        f32("x7", 6, "PAD", "x6"),
        out(f32("x8", 6, "ADD", "x5", "x7")),
    ]


def merge_free_block() -> Scenario:
    return Scenario(
        "merge_free_block(32)",
        "ALLOC-042",
        (BufferType("dummy", 8, 32),),
        _g(_merge_tensors(), "x8"),
        {
            "x2": (0, 0),
            "x0": (0, 16),
            "x1": (1, 0),
            "x5": (2, 0),
            "x3": (0, 0),
            "x4": (0, 8),
            "x6": (0, 0),
            "x7": (0, 8),
            "x8": (2, 0),
        },
        ((32, 16, 24),),
        lambda n: n <= 88,
        "<= 88",
    )


def merge_free_block_unbounded() -> Scenario:
    return Scenario(
        "merge_free_block(SIZE_MAX)",
        "ALLOC-042",
        (BufferType("dummy", 8, SIZE_MAX),),
        _g(_merge_tensors(), "x8"),
        {
            "x2": (0, 0),
            "x0": (0, 16),
            "x1": (0, 32),
            "x5": (0, 48),
            "x3": (0, 0),
            "x4": (0, 8),
            "x6": (0, 0),
            "x7": (0, 8),
            "x8": (0, 48),
        },
        ((72,),),
        lambda n: n <= 88,
        "<= 88",
    )


def prefer_already_allocated() -> Scenario:
    t = [inp("x0", 6), f32("x1", 1, "MEAN", "x0"), out(f32("x2", 1, "MEAN", "x1"))]
    return Scenario(
        "prefer_already_allocated_memory",
        "ALLOC-043",
        (BufferType("dummy", 4, 32),),
        _g(t, "x2"),
        {"x0": (0, 0), "x1": (0, 24), "x2": (0, 0)},
        ((28,),),
        lambda n: n <= 28,
        "<= 28",
    )


def multiple_buffer_types() -> Scenario:
    t = [
        f32("a0", 4, has_data=True),
        f32("a1", 4, has_data=True),
        f32("b0", 6, has_data=True),
        f32("b1", 1, has_data=True),
        inp("x0", 4),
        f32("x1", 4, "MUL", "x0", "a0"),
        f32("x2", 6, "PAD", "x1"),
        f32("x3", 6, "MUL", "x2", "b0"),
        f32("x4", 1, "MEAN", "x3"),
        f32("x5", 1, "ADD", "x4", "b1"),
        f32("x6", 4, "PAD", "x5"),
        f32("x7", 4, "ADD", "x6", "a1"),
        out(f32("x8", 4, "SCALE", "x7")),
    ]
    g = _g(t, "x8")
    node_buf = {"x1": 0, "x2": 0, "x3": 1, "x4": 1, "x5": 1, "x6": 1, "x7": 0, "x8": 0}
    leaf_buf = {"a0": 0, "a1": 0, "b0": 1, "b1": 1, "x0": 0}
    return Scenario(
        "multiple_buffer_types",
        "ALLOC-044",
        (BufferType("A", 8, 32), BufferType("B", 8, SIZE_MAX)),
        g,
        {
            "x0": (0, 0),
            "x1": (0, 0),
            "x2": (1, 0),
            "x3": (1, 0),
            "x4": (0, 0),
            "x5": (0, 0),
            "x6": (0, 8),
            "x7": (0, 8),
            "x8": (0, 8),
            "a0": None,
            "a1": None,
            "b0": None,
            "b1": None,
        },
        ((16, 24), (24,)),
        node_buffer_ids=tuple(node_buf[n] for n in g.nodes),
        leaf_buffer_ids=tuple(leaf_buf[n] for n in g.leafs),
        buffer_of={"x4": 1, "x5": 1, "x6": 1, "x7": 1, "x8": 1},
        static_bytes=(32, 32),
        bound_text="A <= 88, B <= 56",
    )


def buffer_size_zero() -> Scenario:
    t = [inp("x0", 4), out(f32("x1", 4, "SCALE", "x0"))]
    return Scenario(
        "buffer_size_zero",
        "ALLOC-045",
        (BufferType("A", 8, SIZE_MAX), BufferType("B", 8, SIZE_MAX)),
        _g(t, "x1"),
        {"x0": (0, 0), "x1": (0, 0)},
        ((16,), ()),
        node_buffer_ids=(0,),
        leaf_buffer_ids=(0,),
        bound_text="A == 16, B == 0",
    )


def reallocation() -> tuple[Scenario, Scenario]:
    buft = (BufferType("dummy", 4, 32),)
    g1 = _g(
        [
            inp("x0", 6),
            inp("x1", 4),
            view("x2", 4, "x0", "x0", 0),
            out(f32("x3", 4, "ADD", "x2", "x1")),
        ],
        "x3",
    )
    g2 = _g([inp("x0", 5), inp("x1", 5), out(f32("x2", 5, "ADD", "x0", "x1"))], "x2")
    return (
        Scenario(
            "reallocation(graph 1)",
            "ALLOC-046",
            buft,
            g1,
            {"x0": (0, 0), "x1": (1, 0), "x2": (0, 0), "x3": (1, 0)},
            ((24, 16),),
            lambda n: n == 40,
            "== 40",
        ),
        Scenario(
            "reallocation(graph 2)",
            "ALLOC-046",
            buft,
            g2,
            {"x0": (0, 0), "x1": (1, 0), "x2": (0, 0)},
            ((20, 20),),
            lambda n: n == 40,
            "== 40",
        ),
    )


def alloc_dep(with_dep: bool) -> Scenario:
    """Three chained scales; the scheduler's allocation dependency is a view node with op NONE
    listing the kept tensor, inserted after the node it must outlive."""
    t = [
        inp("x0", 4),
        f32("x1", 4, "SCALE", "x0"),
        f32("x2", 4, "SCALE", "x1"),
        out(f32("x3", 4, "SCALE", "x2")),
    ]
    g = _g(t, "x3")
    expected: dict[str, tuple[int, int] | None] = {
        "x0": (0, 0),
        "x1": (0, 0),
        "x2": (0, 0),
        "x3": (0, 0),
    }
    sizes: tuple[tuple[int, ...], ...] = ((16,),)
    if with_dep:
        dep = Tensor("dep", 16, "NONE", ("x1",), view_src="x1", layout=contiguous(4, type="f32"))
        g = Graph({**g.tensors, "dep": dep}, (*g.nodes, "dep"), g.leafs, (*g.order, "dep"))
        expected = {"x0": (0, 0), "x1": (0, 0), "x2": (0, 16), "x3": (0, 16), "dep": (0, 0)}
        sizes = ((32,),)
    return Scenario(
        f"graph_optimize_alloc_dep({'with' if with_dep else 'without'} dependency)",
        "ALLOC-047",
        (BufferType("dummy", 8, SIZE_MAX),),
        g,
        expected,
        sizes,
    )


def single_graph_scenarios() -> list[Scenario]:
    """Every scenario planned by one alloc_graph (or reserve_n + alloc_graph) on a fresh planner."""
    return [
        too_many_tensors(),
        tensor_too_large(),
        larger_than_max(),
        not_enough_chunks(),
        fill_leftover_space(),
        view_inplace(),
        reuse_and_free(),
        merge_free_block(),
        merge_free_block_unbounded(),
        prefer_already_allocated(),
        multiple_buffer_types(),
        buffer_size_zero(),
        alloc_dep(False),
        alloc_dep(True),
    ]


def llama_layer(
    n_tokens: int,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ctx: int = 32,
    n_ff: int = 128,
) -> tuple[Graph, list[str]]:
    """One llama decoder layer as llama.cpp builds it for ``n_tokens`` tokens: weights and the
    KV cache have data, the new K/V rows are copied into cache views, attention reads the whole
    cache through views, the FFN is SwiGLU. Returns the graph and its outputs in build order."""
    hd = n_embd // n_head
    kv = hd * n_head_kv
    t = n_tokens

    def w(name: str, *ne: int) -> Tensor:
        return Tensor(name, 4 * _prod(ne), has_data=True, layout=contiguous(*ne, type="f32"))

    def node(name: str, op: str, ne: tuple[int, ...], *src: str, **kw: Any) -> Tensor:
        return Tensor(name, 4 * _prod(ne), op, src, layout=contiguous(*ne, type="f32"), **kw)

    def vw(name: str, op: str, ne: tuple[int, ...], of: str, root: str, offs: int = 0) -> Tensor:
        return Tensor(
            name,
            4 * _prod(ne),
            op,
            (of,),
            view_src=root,
            view_offs=offs,
            layout=contiguous(*ne, type="f32"),
        )

    tensors = [
        node("x", "NONE", (n_embd, t), input=True),
        Tensor("pos", 4 * t, input=True, layout=contiguous(t, type="i32")),
        node("mask", "NONE", (n_ctx, t), input=True),
        w("attn_norm", n_embd),
        w("wq", n_embd, n_embd),
        w("wk", n_embd, kv),
        w("wv", n_embd, kv),
        w("wo", n_embd, n_embd),
        w("ffn_norm", n_embd),
        w("w_gate", n_embd, n_ff),
        w("w_up", n_embd, n_ff),
        w("w_down", n_ff, n_embd),
        w("k_cache", kv * n_ctx),
        w("v_cache", kv * n_ctx),
        node("norm", "RMS_NORM", (n_embd, t), "x"),
        node("norm_w", "MUL", (n_embd, t), "norm", "attn_norm"),
        node("q", "MUL_MAT", (n_embd, t), "wq", "norm_w"),
        node("k", "MUL_MAT", (kv, t), "wk", "norm_w"),
        node("v", "MUL_MAT", (kv, t), "wv", "norm_w"),
        vw("q3", "RESHAPE", (hd, n_head, t), "q", "q"),
        vw("k3", "RESHAPE", (hd, n_head_kv, t), "k", "k"),
        node("q_rope", "ROPE", (hd, n_head, t), "q3", "pos"),
        node("k_rope", "ROPE", (hd, n_head_kv, t), "k3", "pos"),
        vw("k_slot", "VIEW", (kv * t,), "k_cache", "k_cache", 4 * kv * (n_ctx - t)),
        Tensor(
            "k_store",
            4 * kv * t,
            "CPY",
            ("k_rope", "k_slot"),
            view_src="k_cache",
            view_offs=4 * kv * (n_ctx - t),
            layout=contiguous(kv * t, type="f32"),
        ),
        vw("v_slot", "VIEW", (kv * t,), "v_cache", "v_cache", 4 * kv * (n_ctx - t)),
        Tensor(
            "v_store",
            4 * kv * t,
            "CPY",
            ("v", "v_slot"),
            view_src="v_cache",
            view_offs=4 * kv * (n_ctx - t),
            layout=contiguous(kv * t, type="f32"),
        ),
        vw("k_all", "VIEW", (hd, n_ctx, n_head_kv), "k_cache", "k_cache"),
        vw("q_perm", "PERMUTE", (hd, t, n_head), "q_rope", "q_rope"),
        node("kq", "MUL_MAT", (n_ctx, t, n_head), "k_all", "q_perm"),
        node("kq_soft", "SOFT_MAX", (n_ctx, t, n_head), "kq", "mask"),
        vw("v_all", "VIEW", (n_ctx, hd, n_head_kv), "v_cache", "v_cache"),
        node("kqv", "MUL_MAT", (hd, t, n_head), "v_all", "kq_soft"),
        vw("kqv_perm", "PERMUTE", (hd, n_head, t), "kqv", "kqv"),
        node("attn_in", "CONT", (n_embd, t), "kqv_perm"),
        node("attn", "MUL_MAT", (n_embd, t), "wo", "attn_in"),
        node("h", "ADD", (n_embd, t), "attn", "x"),
        node("norm2", "RMS_NORM", (n_embd, t), "h"),
        node("norm2_w", "MUL", (n_embd, t), "norm2", "ffn_norm"),
        node("gate", "MUL_MAT", (n_ff, t), "w_gate", "norm2_w"),
        node("up", "MUL_MAT", (n_ff, t), "w_up", "norm2_w"),
        node("act", "UNARY", (n_ff, t), "gate"),
        node("gated", "MUL", (n_ff, t), "act", "up"),
        node("down", "MUL_MAT", (n_embd, t), "w_down", "gated"),
        node("out", "ADD", (n_embd, t), "down", "h", output=True),
    ]
    outputs = ["k_store", "v_store", "out"]
    return build_graph(tensors, outputs), outputs


def _prod(ne: tuple[int, ...]) -> int:
    n = 1
    for d in ne:
        n *= d
    return n


def llama_stack(n_layers: int, n_tokens: int) -> Graph:
    """``n_layers`` llama layers (:func:`llama_layer`) in a row: each layer reads the previous
    one's output; positions and the mask are shared; only the last output is a graph output."""
    one, _ = llama_layer(n_tokens)
    shared = {"pos", "mask"}
    tensors: dict[str, Tensor] = {}
    outputs: list[str] = []
    for i in range(n_layers):

        def rename(name: str, i: int = i) -> str:
            if name in shared:
                return name
            if name == "x" and i > 0:
                return f"L{i - 1}.out"
            return f"L{i}.{name}"

        for name in one.order:
            t = one[name]
            if (name in shared and name in tensors) or (name == "x" and i > 0):
                continue
            renamed = Tensor(
                rename(name),
                t.size,
                t.op,
                tuple(rename(s) for s in t.src),
                t.input,
                t.output and i == n_layers - 1,
                None if t.view_src is None else rename(t.view_src),
                t.view_offs,
                t.has_data,
                t.layout,
            )
            tensors[renamed.name] = renamed
        outputs += [f"L{i}.k_store", f"L{i}.v_store"]
    outputs.append(f"L{n_layers - 1}.out")
    return build_graph(list(tensors.values()), outputs)
