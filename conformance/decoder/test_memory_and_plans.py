"""Memory coordination through the context and compute-plan reuse (DEC-034 .. DEC-045, DEC-052)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from conformance.assertions import assert_nmse, unchanged
from conformance.decoder.helpers import batch, invalid, prompt

pytestmark = pytest.mark.requires("decoder.logits")


def last_call_updates(ctx: Any) -> list[dict[str, Any]]:
    return [e.data for e in ctx.trace.of_call(ctx.trace.calls - 1) if e.kind == "memory_update"]


@pytest.mark.invariant("DEC-034", "DEC-035")
@pytest.mark.requires("decoder.introspection", "decoder.memory_ops")
def test_every_decode_runs_one_update_first_which_reports_applied_work(
    new_ctx: Callable[..., Any],
) -> None:
    ctx = new_ctx(n_batch=16, trace=True)
    assert ctx.decode(batch(prompt(6))) == 0
    assert last_call_updates(ctx) == [{"optimize": False, "applied": False}]
    kinds = ctx.trace.kinds(ctx.trace.calls - 1)
    assert kinds.index("memory_update") < kinds.index("init_batch")
    ctx.seq_add(0, 2, -1, 3)  # a pending K-shift
    assert ctx.decode(batch(prompt(1))) == 0
    assert last_call_updates(ctx) == [{"optimize": False, "applied": True}]
    assert ctx.decode(batch(prompt(1))) == 0
    assert last_call_updates(ctx) == [{"optimize": False, "applied": False}]
    # an invalid batch never reaches the memory update
    assert ctx.decode(batch([-1])) == -1
    assert last_call_updates(ctx) == []


@pytest.mark.invariant("DEC-036")
@pytest.mark.requires("decoder.introspection", "decoder.memory_ops")
def test_applied_update_discards_plans(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_batch=16, trace=True)
    assert ctx.decode(batch(prompt(4))) == 0
    assert ctx.decode(batch(prompt(1))) == 0
    assert ctx.decode(batch(prompt(1))) == 0
    built, reservations = ctx.scheduler.n_built, ctx.scheduler.n_reservations
    assert [
        e.data["reused"] for e in ctx.trace.of_call(ctx.trace.calls - 1) if e.kind == "plan"
    ] == [True]
    ctx.seq_add(0, 0, -1, 1)
    assert ctx.decode(batch(prompt(1))) == 0
    assert ctx.scheduler.n_reservations == reservations + 1
    assert ctx.scheduler.n_built == built + 1
    assert [
        e.data["reused"] for e in ctx.trace.of_call(ctx.trace.calls - 1) if e.kind == "plan"
    ] == [False]


@pytest.mark.invariant("DEC-037")
@pytest.mark.requires("decoder.shift", "decoder.memory_ops")
@pytest.mark.parametrize("delta", [3, 17])
def test_shifted_memory_matches_a_fresh_context_at_the_shifted_positions(
    new_ctx: Callable[..., Any], delta: int
) -> None:
    toks = prompt(12)
    ctx = new_ctx(n_batch=16)
    assert ctx.decode(batch(toks[:8])) == 0
    ctx.seq_add(0, 0, -1, delta)  # every cached position moves by delta (K-shift pending)
    assert (ctx.seq_pos_min(0), ctx.seq_pos_max(0)) == (delta, 7 + delta)
    assert ctx.decode(batch(toks[8:], all_out=True)) == 0
    fresh = new_ctx(n_batch=16)
    assert fresh.decode(batch(toks, pos=list(range(delta, delta + 12)), all_out=True)) == 0
    for j in range(4):
        assert_nmse(fresh.get_logits_ith(8 + j), ctx.get_logits_ith(j), 1e-9, f"row {j}")


@pytest.mark.invariant("DEC-053")
@pytest.mark.requires("decoder.shift", "decoder.memory_ops")
def test_context_shift_discard_then_shift_down(new_ctx: Callable[..., Any]) -> None:
    """The usual "context shift": drop the oldest tokens and move the rest down. With one layer
    the cached K/V of a token depend only on the token and its position, so the shifted cache
    must equal a fresh one."""
    toks = prompt(12)
    ctx = new_ctx("layer1", n_batch=16)
    assert ctx.decode(batch(toks[:8])) == 0
    ctx.seq_rm(0, 0, 4)
    ctx.seq_add(0, 4, -1, -4)
    assert (ctx.seq_pos_min(0), ctx.seq_pos_max(0)) == (0, 3)
    assert ctx.decode(batch(toks[8:], all_out=True)) == 0
    fresh = new_ctx("layer1", n_batch=16)
    assert fresh.decode(batch(toks[4:], all_out=True)) == 0
    for j in range(4):
        assert_nmse(fresh.get_logits_ith(4 + j), ctx.get_logits_ith(j), 1e-9, f"row {j}")


@pytest.mark.invariant("DEC-054")
@pytest.mark.requires("decoder.shift", "decoder.memory_ops")
def test_divided_positions_match_a_fresh_context(new_ctx: Callable[..., Any]) -> None:
    toks = prompt(10)
    ctx = new_ctx("layer1", n_batch=16)
    assert ctx.decode(batch(toks[:8])) == 0
    ctx.seq_div(0, 0, -1, 2)  # 0..7 -> 0,0,1,1,2,2,3,3
    assert (ctx.seq_pos_min(0), ctx.seq_pos_max(0)) == (0, 3)
    assert ctx.decode(batch(toks[8:], all_out=True)) == 0
    fresh = new_ctx("layer1", n_batch=16)
    assert fresh.decode(batch(toks, pos=[0, 0, 1, 1, 2, 2, 3, 3, 4, 5], all_out=True)) == 0
    for j in range(2):
        assert_nmse(fresh.get_logits_ith(8 + j), ctx.get_logits_ith(j), 1e-9, f"row {j}")


@pytest.mark.invariant("DEC-038", "DEC-039", "DEC-040")
@pytest.mark.requires("decoder.memory_ops")
def test_memory_operations_through_the_context(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_batch=16, n_seq_max=3, kv_unified=True)
    assert ctx.decode(batch(prompt(6), seqs=[[0]] * 6)) == 0
    ctx.seq_cp(0, 1, -1, -1)
    assert (ctx.seq_pos_min(1), ctx.seq_pos_max(1)) == (0, 5)
    assert ctx.seq_rm(1, 3, -1) is True
    assert ctx.seq_pos_max(1) == 2
    assert ctx.decode(batch(prompt(1), seqs=[[1]])) == 0
    assert ctx.seq_pos_max(1) == 3  # auto position continues at p = 3
    ctx.seq_keep(1)
    assert ctx.seq_pos_max(0) == -1  # shared cells now hold seq 1 only; seq 0's own cells emptied
    assert (ctx.seq_pos_min(1), ctx.seq_pos_max(1)) == (0, 3)
    ctx.memory_clear(True)
    assert all(ctx.seq_pos_max(s) == -1 for s in range(3))
    assert ctx.decode(batch(prompt(2), seqs=[[2], [2]])) == 0
    assert (ctx.seq_pos_min(2), ctx.seq_pos_max(2)) == (0, 1)


@pytest.mark.invariant("DEC-041")
@pytest.mark.requires("decoder.memory_ops")
def test_memory_operations_keep_the_last_outputs(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_batch=16, n_seq_max=2, kv_unified=True)
    assert ctx.decode(batch(prompt(5), all_out=True)) == 0
    with unchanged(ctx.get_logits, "logits"):
        ctx.seq_cp(0, 1, -1, -1)
        ctx.seq_add(0, 0, -1, 2)
        ctx.seq_rm(1, -1, -1)
        ctx.memory_clear(True)


@pytest.mark.invariant("DEC-043", "DEC-044")
@pytest.mark.requires("decoder.introspection", "decoder.graph_reuse")
def test_plans_are_reused_exactly_for_identical_shapes(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_ctx=512, n_batch=300, n_ubatch=300, trace=True)
    assert ctx.decode(batch(prompt(250))) == 0
    reused = []
    for _ in range(10):  # single-token steps: n_kv 256 until the cache passes 256 cells
        assert ctx.decode(batch(prompt(1))) == 0
        reused += [
            e.data["reused"] for e in ctx.trace.of_call(ctx.trace.calls - 1) if e.kind == "plan"
        ]
    # steps 1-6 have n_kv = 256 (first builds, the rest reuse); step 7 reaches 257 cells -> 512
    assert reused == [False, True, True, True, True, True, False, True, True, True]
    off = new_ctx(n_batch=16, graph_reuse=False, trace=True)
    for _ in range(3):
        assert off.decode(batch(prompt(1))) == 0
    assert off.scheduler.n_reused == 0 and off.scheduler.n_built == 3
    # same token count, different output count -> new plan
    ctx2 = new_ctx(n_batch=16, trace=True)
    assert ctx2.decode(batch(prompt(4), out=[1, 0, 0, 1])) == 0
    assert ctx2.decode(batch(prompt(4), out=[0, 1, 0, 1])) == 0
    assert ctx2.decode(batch(prompt(4), out=[1, 1, 1, 0])) == 0
    assert [e.data["reused"] for e in ctx2.trace.events if e.kind == "plan"] == [False, True, False]


@pytest.mark.invariant("DEC-044", "DEC-043")
@pytest.mark.requires("decoder.graph_reuse", "decoder.logits", "decoder.memory_ops")
def test_one_token_steps_reuse_until_n_kv_or_the_sequences_change(
    new_ctx: Callable[..., Any],
) -> None:
    """Counted through the engine's reuse counter alone: after a 250-token prompt, one-token
    steps reuse from the second step while n_kv stays 256 and build once when the cache passes
    256 cells (KV-011's padding); steps over two sequences reuse from their second step, and the
    first step over one of them again builds."""
    ctx = new_ctx(n_ctx=512, n_batch=300, n_ubatch=300, n_seq_max=2, kv_unified=True)
    assert ctx.decode(batch(prompt(250))) == 0

    def step(b: Any) -> int:
        before = ctx.n_reused()
        assert ctx.decode(b) == 0
        return int(ctx.n_reused() - before)

    deltas = [step(batch(prompt(1), pos=[250 + k])) for k in range(10)]
    assert deltas == [0, 1, 1, 1, 1, 1, 0, 1, 1, 1]  # step 7: 257 cells, n_kv 256 -> 512
    assert ctx.seq_pos_max(0) == 259
    pair = [step(batch(prompt(2), seqs=[[0], [1]], pos=[260 + k, k])) for k in range(3)]
    assert pair == [0, 1, 1]
    assert step(batch(prompt(1), pos=[263])) == 0  # one sequence again: a new graph
    # same token count, another output count -> a new graph; the same count again -> reuse
    outs = [[1, 0, 0, 1], [0, 1, 0, 1], [1, 1, 1, 0]]
    got = [
        step(batch(prompt(4), out=o, pos=[264 + 4 * k + j for j in range(4)]))
        for k, o in enumerate(outs)
    ]
    assert got == [0, 1, 0]


@pytest.mark.invariant("DEC-045")
@pytest.mark.requires("decoder.graph_reuse", "decoder.logits")
def test_plan_reuse_never_changes_results(new_ctx: Callable[..., Any]) -> None:
    """Prefill ubatches of one shape, then one-token steps: the reusing context does reuse
    (its counter says so, or bit-identity would prove nothing), the other never does."""
    rows, reused = {}, {}
    for reuse in (True, False):
        ctx = new_ctx(n_batch=16, n_ubatch=4, graph_reuse=reuse)
        assert ctx.decode(batch(prompt(12), all_out=True)) == 0
        out = [ctx.get_logits()]
        for t in prompt(5, start=40):
            assert ctx.decode(batch([t])) == 0
            out.append(ctx.get_logits())
        rows[reuse], reused[reuse] = np.concatenate(out), ctx.n_reused()
    assert reused[True] > 0 and reused[False] == 0, reused
    assert np.array_equal(rows[True], rows[False])


@pytest.mark.invariant("DEC-052")
@pytest.mark.requires("decoder.introspection")
def test_output_count_and_mapping_are_exposed(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx(n_batch=8)
    assert ctx.decode(batch(prompt(4), out=[0, 1, 0, 1])) == 0
    assert ctx.n_outputs() == 2
    assert ctx.output_ids().tolist() == [-1, 0, -1, 1, -1, -1, -1, -1]
    ids = ctx.output_ids()
    ids[0] = 5  # a copy: the context's mapping is not exposed for writing
    assert ctx.output_ids()[0] == -1
    assert invalid(lambda: ctx.get_logits_ith(0))
