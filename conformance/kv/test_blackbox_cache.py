"""KV cache rules seen through ``decode`` alone (black-box): cell accounting as the step at which
a decode no longer fits (return code 1, nothing changed), stream placement as per-stream
capacity, and the cells each sequence attends to as logits equal to the target's own
full-sequence forward pass of that sequence's history (``model.forward``, no KV cache).

The white-box tests of the same rows (test_slots.py, test_mask.py, test_stateful.py) read the
cell table, the slots and the KQ mask themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from conformance.assertions import assert_nmse, unchanged
from conformance.decoder.helpers import ForwardOracle, batch, memory_view, prompt

pytestmark = pytest.mark.requires(
    "decoder.logits", "decoder.batch_rules", "decoder.memory_ops", "model.forward"
)

F32 = 1e-9  # decode_phase.md D1: the f32 tolerance class
MODEL = "gqa"
KV = 256  # llama.cpp pads a stream to 256 cells: the smallest cache both engines build


def _toks(n: int, start: int) -> list[int]:
    return prompt(n, start=start, stride=11)


def _run(ctx: Any, toks: list[int], seq: int, start: int) -> int:
    """Decode ``toks`` as positions ``start..`` of ``seq`` (last token an output)."""
    return int(
        ctx.decode(batch(toks, seqs=[[seq]] * len(toks), pos=range(start, start + len(toks))))
    )


@pytest.mark.invariant("KV-002", "KV-005", "KV-008", "KV-010", "MEM-010")
def test_a_full_cache_refuses_at_the_predicted_step(
    new_ctx: Callable[..., Any], target: Any, load: Callable[[str], Any]
) -> None:
    """One stream of 256 cells. A decode fits exactly when the cache has as many free cells
    (cells holding no sequence) as the batch has tokens, wherever they are: a cell shared by
    two sequences is one used cell and stays used until both left it, and the holes
    ``seq_rm`` leaves between other cells are usable. When the last of several ubatches does
    not fit, decode returns 1 and none of the batch stays (the earlier ubatches' simulated
    placement is undone); when they fit, each ubatch gets its own cells, so no token of the
    batch overwrites another and every row equals the sequence's forward pass."""
    oracle = ForwardOracle(target, load(MODEL))
    ctx = new_ctx(MODEL, n_ctx=KV, n_batch=KV, n_ubatch=32, n_seq_max=4, kv_unified=True)
    assert ctx.n_ctx() == KV
    view = lambda: memory_view(ctx)  # noqa: E731
    a, b, c = _toks(KV // 2, 3), _toks(KV // 2, 40), _toks(KV // 2 + 1, 90)
    # sequences 0 and 1 interleaved: every cell used, sequence 1's cells are every other one
    inter = [t for pair in zip(a, b, strict=True) for t in pair]
    seqs = [[0], [1]] * (KV // 2)
    assert ctx.decode(batch(inter, seqs=seqs, out=[0] * (KV - 1) + [1])) == 0
    assert view() == {0: (0, KV // 2 - 1), 1: (0, KV // 2 - 1), 2: (-1, -1), 3: (-1, -1)}
    with unchanged(view, "a full cache"):
        assert _run(ctx, c[:1], 2, 0) == 1
    assert ctx.seq_rm(1, -1, -1)  # 128 free cells, none adjacent to another
    with unchanged(view, "one token more than the free cells"):
        assert _run(ctx, c, 2, 0) == 1  # four ubatches of 32 fit, the fifth (1 token) does not
    assert _run(ctx, c[:-1], 2, 0) == 0
    assert_nmse(oracle.row(c[:-1]), np.asarray(ctx.get_logits_ith(KV // 2 - 1)), F32, "seq 2")
    assert view() == {0: (0, KV // 2 - 1), 1: (-1, -1), 2: (0, KV // 2 - 1), 3: (-1, -1)}
    # sequence 3 shares sequence 0's cells: no cell is added, none freed by removing 0
    ctx.seq_cp(0, 3, -1, -1)
    ctx.seq_rm(0, -1, -1)
    with unchanged(view, "cells still held by sequence 3"):
        assert _run(ctx, c[:1], 1, 0) == 1
    ctx.seq_rm(2, 0, KV // 4)  # the first 64 cells of sequence 2 become free
    assert _run(ctx, b[: KV // 4], 1, 0) == 0
    assert_nmse(oracle.row(b[: KV // 4]), np.asarray(ctx.get_logits_ith(KV // 4 - 1)), F32)
    with unchanged(view, "a full cache again"):
        assert _run(ctx, a[:1], 0, 0) == 1
    # one freed cell takes one token; sequence 3 reads its 128 cells as sequence 0 wrote them
    assert ctx.seq_rm(1, KV // 4 - 1, -1)
    assert _run(ctx, [7], 3, KV // 2) == 0
    assert_nmse(oracle.row([*a, 7]), np.asarray(ctx.get_logits_ith(0)), F32, "seq 3")


@pytest.mark.invariant("KV-006")
def test_each_sequence_fills_its_own_stream(
    new_ctx: Callable[..., Any], target: Any, load: Callable[[str], Any]
) -> None:
    """One stream per sequence: a sequence's tokens go to its own stream, so filling one
    sequence's stream leaves the other's whole capacity, and a batch that needs a cell of the
    full stream is refused whole (1, nothing changed) even though the other stream has room."""
    oracle = ForwardOracle(target, load(MODEL))
    ctx = new_ctx(MODEL, n_ctx=2 * KV, n_batch=KV, n_ubatch=64, n_seq_max=2, kv_unified=False)
    assert (ctx.n_ctx(), ctx.n_ctx_seq()) == (2 * KV, KV)
    view = lambda: memory_view(ctx)  # noqa: E731
    a, b = _toks(KV, 5), _toks(KV, 77)
    assert _run(ctx, a, 0, 0) == 0
    with unchanged(view, "sequence 0's full stream"):
        assert _run(ctx, [9], 0, KV) == 1
    assert _run(ctx, b[:-1], 1, 0) == 0  # sequence 1 has all of its stream
    with unchanged(view, "a batch needing a cell of the full stream"):
        assert ctx.decode(batch([9, b[-1]], seqs=[[0], [1]], pos=[KV, KV - 1])) == 1
    assert _run(ctx, b[-1:], 1, KV - 1) == 0
    assert view() == {0: (0, KV - 1), 1: (0, KV - 1)}
    assert_nmse(oracle.row(b), np.asarray(ctx.get_logits_ith(0)), F32, "seq 1")


@pytest.mark.invariant("KV-009", "KV-023")
@pytest.mark.parametrize("n_ubatch", [2, 16])
def test_each_sequence_attends_to_its_own_earlier_cells(
    new_ctx: Callable[..., Any], target: Any, load: Callable[[str], Any], n_ubatch: int
) -> None:
    """A token listing several sequences gets one cell that holds all of them; a query of
    sequence ``q`` at position ``p1`` attends exactly to the cells holding ``q`` at positions
    ``<= p1`` (its own included). So every row equals the forward pass of its sequence's own
    history — shared prefix included, other sequences' continuations and later positions
    excluded — also after another sharer removed its sequence from the shared cells."""
    oracle = ForwardOracle(target, load(MODEL))
    ctx = new_ctx(MODEL, n_batch=32, n_ubatch=n_ubatch, n_seq_max=3, kv_unified=True)
    shared = _toks(4, 17)
    own = {0: [101], 1: [202, 203], 2: [151, 152, 153]}
    toks = [*shared, 101, 202, 151, 203, 152, 153]
    seqs = [[0, 1, 2]] * 4 + [[0], [1], [2], [1], [2], [2]]
    pos = [0, 1, 2, 3, 4, 4, 4, 5, 5, 6]
    assert ctx.decode(batch(toks, seqs=seqs, pos=pos, all_out=True)) == 0
    assert memory_view(ctx, range(3)) == {0: (0, 4), 1: (0, 5), 2: (0, 6)}
    seen: dict[int, list[int]] = {0: [], 1: [], 2: []}
    for i, (t, ids) in enumerate(zip(toks, seqs, strict=True)):
        for s in ids:
            seen[s].append(t)
        q = ids[0]
        assert_nmse(oracle.row(seen[q]), np.asarray(ctx.get_logits_ith(i)), F32, f"row {i}")
    assert all(seen[s] == [*shared, *own[s]] for s in own)
    ctx.seq_rm(0, -1, -1)  # the shared cells keep sequences 1 and 2
    assert ctx.decode(batch([44, 45], seqs=[[1], [2]], pos=[6, 7], all_out=True)) == 0
    assert_nmse(oracle.row([*seen[1], 44]), np.asarray(ctx.get_logits_ith(0)), F32, "seq 1")
    assert_nmse(oracle.row([*seen[2], 45]), np.asarray(ctx.get_logits_ith(1)), F32, "seq 2")
    assert memory_view(ctx, range(3)) == {0: (-1, -1), 1: (0, 6), 2: (0, 7)}


@pytest.mark.invariant("KV-011", "KV-002")
@pytest.mark.requires("decoder.graph_reuse")
def test_attention_width_follows_the_last_used_cell_in_steps_of_256(
    new_ctx: Callable[..., Any], target: Any, load: Callable[[str], Any]
) -> None:
    """A one-token step reuses the previous step's compute graph exactly when the attention
    width ``n_kv`` is unchanged (DEC-044), so the engine's reuse counter shows ``n_kv``: the
    last used cell + 1 rounded up to 256. It grows at the step that uses cell 256, stays when
    ``seq_rm`` frees cells below the last used one (the used count falls, the last used cell
    does not), and shrinks when the cells past 255 are freed. A width taken from the used count
    would also drop cells 256.. from attention: the step rows are checked against the forward
    pass while the positions are contiguous."""
    oracle = ForwardOracle(target, load(MODEL))
    ctx = new_ctx(MODEL, n_ctx=2 * KV, n_batch=300, n_ubatch=300, kv_unified=True)
    assert ctx.n_ctx() == 2 * KV
    toks = _toks(250, 7)
    assert _run(ctx, toks, 0, 0) == 0

    def step(tok: int, p: int) -> int:
        before = ctx.n_reused()
        assert _run(ctx, [tok], 0, p) == 0
        return int(ctx.n_reused() - before)

    grow = []
    for k in range(10):  # cells 250..259: the step writing cell 256 widens n_kv to 512
        grow.append(step(k + 3, 250 + k))
        toks.append(k + 3)
        assert_nmse(oracle.row(toks), np.asarray(ctx.get_logits_ith(0)), F32, f"step {k}")
    assert grow == [0, 1, 1, 1, 1, 1, 0, 1, 1, 1]
    assert ctx.seq_rm(0, 100, 110)  # ten cells below the last used one: n_kv stays 512
    assert [step(20 + k, 260 + k) for k in range(3)] == [1, 1, 1]
    assert ctx.seq_rm(0, 200, -1)  # every cell from 200 on: the last used cell is 199
    assert [step(30 + k, 200 + k) for k in range(3)] == [0, 1, 1]
    assert (ctx.seq_pos_min(0), ctx.seq_pos_max(0)) == (0, 202)
