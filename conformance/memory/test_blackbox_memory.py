"""Memory-coordinator rules seen through ``decode`` alone (black-box): pending K-shifts are
applied by the update that runs before a batch is placed, exactly once.

``seq_rm`` + ``seq_add`` leave cached keys rotated for their old positions; a one-layer model's
key depends only on its token and position, so after the update the cache must hold exactly what
a fresh prefill of the moved history would, and every later row equals the target's own
full-sequence forward pass of that history (``model.forward``). An update that is skipped, runs
after the batch attended, or leaves the shift pending (so a later update rotates the keys again)
changes a row. The white-box tests (test_coordinator.py) watch the statuses and calls themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from conformance.assertions import assert_nmse
from conformance.decoder.helpers import ForwardOracle, batch, prompt

pytestmark = pytest.mark.requires(
    "decoder.logits", "decoder.memory_ops", "decoder.shift", "model.forward"
)

F32 = 1e-9  # decode_phase.md D1: the f32 tolerance class
MODEL = "layer1"  # one layer: a cached key depends only on its token and position


@pytest.mark.invariant("MEM-004", "MEM-006", "DEC-034")
@pytest.mark.parametrize("n_ubatch", [1, 8])
def test_a_pending_shift_is_applied_once_before_the_next_batch_attends(
    new_ctx: Callable[..., Any], target: Any, load: Callable[[str], Any], n_ubatch: int
) -> None:
    oracle = ForwardOracle(target, load(MODEL))
    t = prompt(12, start=9, stride=17)
    ctx = new_ctx(MODEL, n_batch=16, n_ubatch=n_ubatch)
    assert ctx.decode(batch(t[:6], pos=range(6))) == 0
    assert ctx.seq_rm(0, 2, 4)  # positions 0, 1, 4, 5
    ctx.seq_add(0, 4, -1, -2)  # ... moved to 0, 1, 2, 3: the keys of t4, t5 are now stale
    assert (ctx.seq_pos_min(0), ctx.seq_pos_max(0)) == (0, 3)
    history = [t[0], t[1], t[4], t[5]]
    # two tokens in one batch (one or two ubatches) attend the re-rotated keys
    assert ctx.decode(batch(t[6:8], pos=[4, 5], all_out=True)) == 0
    assert_nmse(oracle.row([*history, t[6]]), np.asarray(ctx.get_logits_ith(0)), F32, "t6")
    assert_nmse(oracle.row([*history, t[6], t[7]]), np.asarray(ctx.get_logits_ith(1)), F32, "t7")
    # nothing pending any more: later decodes must not rotate the moved keys again
    history += [t[6], t[7]]
    for k in range(8, 10):
        assert ctx.decode(batch([t[k]], pos=[len(history)])) == 0
        history.append(t[k])
        assert_nmse(oracle.row(history), np.asarray(ctx.get_logits_ith(0)), F32, f"t{k}")
    # a uniform move of the whole sequence changes no logit (attention sees only distances)
    ctx.seq_add(0, -1, -1, 7)
    assert ctx.decode(batch([t[10]], pos=[len(history) + 7])) == 0
    assert_nmse(oracle.row([*history, t[10]]), np.asarray(ctx.get_logits_ith(0)), F32, "t10")
    assert ctx.decode(batch([t[11]], pos=[len(history) + 8])) == 0
    assert_nmse(oracle.row([*history, t[10], t[11]]), np.asarray(ctx.get_logits_ith(0)), F32)


@pytest.mark.invariant("DEC-036")
@pytest.mark.requires("decoder.graph_reuse")
def test_an_applied_update_discards_the_stored_graph(
    new_ctx: Callable[..., Any], target: Any, load: Callable[[str], Any]
) -> None:
    """Counted by the engine's reuse counter: one-token steps of one shape reuse the stored
    graph, except the step right after an update that applied a K-shift, which must build
    again; a memory operation that leaves nothing pending (``seq_rm``) does not stop reuse."""
    oracle = ForwardOracle(target, load(MODEL))
    t = prompt(12, start=4, stride=19)
    ctx = new_ctx(MODEL, n_batch=16, n_ubatch=16)
    assert ctx.decode(batch(t[:4], pos=range(4))) == 0

    def step(tok: int, p: int) -> int:
        before = ctx.n_reused()
        assert ctx.decode(batch([tok], pos=[p])) == 0
        return int(ctx.n_reused() - before)

    assert [step(t[k], k) for k in range(4, 7)] == [0, 1, 1]
    assert ctx.seq_rm(0, 6, -1)  # nothing to update: the next step still reuses
    assert step(t[7], 6) == 1
    ctx.seq_add(0, -1, -1, 3)  # a pending shift: applied by the next decode's update
    assert [step(t[k], k + 2) for k in range(8, 11)] == [0, 1, 1]  # positions 10, 11, 12
    history = [*t[:6], *t[7:11]]
    assert_nmse(oracle.row(history), np.asarray(ctx.get_logits_ith(0)), F32, "after the shift")


def _updates(ctx: Any) -> list[tuple[bool, bool]]:
    """The memory updates the last decode ran, as (optimize, applied), in order."""
    events = ctx.trace.of_call(ctx.trace.calls - 1)
    return [(e.data["optimize"], e.data["applied"]) for e in events if e.kind == "memory_update"]


@pytest.mark.invariant("MEM-010")
@pytest.mark.requires("decoder.introspection")
def test_the_first_update_of_a_decode_never_optimizes(new_ctx: Callable[..., Any]) -> None:
    """Watched through the decode trace: every batch first runs one non-optimizing update
    (``update(false)``, applied only when a shift is pending); only a batch that then finds no
    slot gets the optimizing one, once."""
    ctx = new_ctx(MODEL, n_ctx=256, n_batch=256, n_ubatch=64, trace=True)
    assert ctx.decode(batch(prompt(250))) == 0
    assert _updates(ctx) == [(False, False)]
    ctx.seq_add(0, 200, -1, -1)  # a pending shift: applied by the next update(false)
    assert ctx.decode(batch(prompt(1), pos=[249])) == 0
    assert _updates(ctx) == [(False, True)]
    assert ctx.decode(batch(prompt(10), pos=range(250, 260))) == 1  # no slot
    assert _updates(ctx) == [(False, False), (True, False)]
