"""What every plan must satisfy (ALLOC-025), computed from the graph alone.

A tensor the planner places must hold its bytes from the step it is placed (−1 for leafs and
inputs, placed before any node; ``i`` for node ``i``) through the last node that reads it,
directly or through a view of it (outputs: to the end). Two such tensors may share bytes only
when one is done before the other is placed, or when a node takes over, in place and at the
same address, a source whose last reader is that node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from reference_impl.allocator.graph import IN_PLACE_OPS, Graph
from reference_impl.allocator.planner import BufferType

_END = 1 << 30


def chunk_offsets(placements: Mapping[str, Any]) -> dict[str, tuple[int, int] | None]:
    """``name -> (chunk, offset)`` (None: not placed) of a planner's placements."""
    return {n: None if p is None else (p.chunk, p.offset) for n, p in placements.items()}


def placed_by_planner(graph: Graph) -> list[str]:
    return [n for n in graph.order if not graph[n].is_view and not graph[n].has_data]


def lifetimes(graph: Graph) -> dict[str, tuple[int, int]]:
    """``name -> (placed at step, last step it must stay intact)`` for planner-placed tensors."""
    first: dict[str, int] = {name: -1 for name in graph.leafs}
    for i, name in enumerate(graph.nodes):
        first[name] = -1 if graph[name].input else i
        for s in graph[name].src:
            if graph[s].input:
                first[s] = -1
    last = dict(first)
    for i, name in enumerate(graph.nodes):
        for s in graph[name].src:
            root = graph[s].view_src or s
            for t in (s, root):
                if t in last:
                    last[t] = max(last[t], i)
    for name in list(last):
        if graph[name].output:
            last[name] = _END
    return {n: (first[n], last[n]) for n in placed_by_planner(graph) if n in first}


def plan_violations(
    graph: Graph,
    bufts: Sequence[BufferType],
    placements: Mapping[str, Any],
    chunk_sizes: Sequence[Sequence[int]],
) -> list[str]:
    """Every way ``placements`` (name -> Placement) break ALLOC-025, as readable lines."""
    bad: list[str] = []
    life = lifetimes(graph)
    where: dict[str, tuple[str, int, int, int]] = {}  # name -> (buffer type, chunk, start, end)
    largest: dict[tuple[int, int], int] = {}  # (buffer, chunk) -> its largest aligned tensor
    for name in life:
        p = placements.get(name)
        if p is None:
            bad.append(f"{name} was not placed")
            continue
        t = graph[name]
        bt = bufts[p.buffer_id]
        if p.offset % bt.alignment:
            bad.append(f"{name} at offset {p.offset}, not a multiple of {bt.alignment}")
        sizes = chunk_sizes[p.buffer_id]
        if p.chunk >= len(sizes) or p.offset + t.size > sizes[p.chunk]:
            bad.append(
                f"{name} [{p.offset}, {p.offset + t.size}) outside chunk {p.chunk} of {list(sizes)}"
            )
        largest[(p.buffer_id, p.chunk)] = max(
            largest.get((p.buffer_id, p.chunk), 0), -(-t.size // bt.alignment) * bt.alignment
        )
        where[name] = (bt.name, p.chunk, p.offset, p.offset + t.size)
    for (buf, c), big in sorted(largest.items()):
        if c >= len(chunk_sizes[buf]):
            continue  # reported above
        size, limit = chunk_sizes[buf][c], bufts[buf].max_size
        if c != 15 and size > max(limit, big):
            bad.append(f"buffer {buf} chunk {c} holds {size} bytes, past max size {limit}")
    names = list(where)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            (ba, ca, sa, ea), (bb, cb, sb, eb) = where[a], where[b]
            if ba != bb or ca != cb or ea <= sb or eb <= sa:
                continue
            if _may_share(graph, life, a, b, where) or _may_share(graph, life, b, a, where):
                continue
            bad.append(
                f"{a} [{sa}, {ea}) live {life[a]} overlaps {b} [{sb}, {eb}) live {life[b]} "
                f"in {ba} chunk {ca}"
            )
    for name, p in placements.items():
        view_t = graph.tensors.get(name)
        if view_t is not None and view_t.is_view and p is not None:
            t = view_t
            root = placements.get(t.view_src or "")
            if root is None or (p.buffer_id, p.chunk, p.offset) != (
                root.buffer_id,
                root.chunk,
                root.offset + t.view_offs,
            ):
                bad.append(
                    f"view {name} at {p}, not at its root {t.view_src} {root} + {t.view_offs}"
                )
    return bad


def _may_share(
    graph: Graph,
    life: Mapping[str, tuple[int, int]],
    a: str,
    b: str,
    where: Mapping[str, tuple[str, int, int, int]],
) -> bool:
    """``a`` is done before ``b`` is placed, or ``b`` took ``a`` over in place."""
    if life[a][1] < life[b][0]:
        return True
    node = graph[b]
    return (
        life[a][1] == life[b][0]
        and node.op in IN_PLACE_OPS
        and a in node.src
        and where[a][2] == where[b][2]
    )
