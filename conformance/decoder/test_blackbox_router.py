"""The sample router seen through backend sampling alone (OUT-032, black-box).

A greedy chain attached to a sequence (``sampling.backend``, llama.cpp's ``llama_set_sampler``)
samples on the row of the last flagged token listing that sequence; with a chain a sequence
takes one output per batch (OUT-033, the only limit llama.cpp 0.3.36 has), so that row is
the row of its one flagged token. The white-box test (test_pooling.py) reads the router's
rows directly (``decoder.introspection``).

The batch puts the sampled sequence's flagged token neither last in the batch nor last of its
own tokens, with other sequences' flagged tokens after it: a chain that read the batch's last
row, the sequence's last token or a neighbour's row gives another token than the greedy choice
of the flagged token's own history in the target's forward pass (``model.forward``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conformance.decoder.helpers import ForwardOracle, batch, memory_view, prompt
from conformance.decoder.test_blackbox_backend import GREEDY, best

pytestmark = [
    pytest.mark.invariant("OUT-032"),
    pytest.mark.requires(
        "decoder.logits",
        "decoder.memory_ops",
        "sampling.backend",
        "sampling.greedy",
        "model.forward",
    ),
]


def test_a_chain_samples_the_row_of_its_sequences_flagged_token(
    new_ctx: Callable[..., Any], target: Any, load: Callable[[str], Any]
) -> None:
    oracle = ForwardOracle(target, load("gqa"))
    a, b, c = prompt(3, start=5, stride=13), prompt(2, start=60, stride=17), prompt(1, start=91)
    ctx = new_ctx(n_batch=16, n_seq_max=3, kv_unified=True)
    for s in range(3):
        target.backend_set_sampler(ctx, s, GREEDY)
    # batch tokens: a0 a1* a2 | b0 b1* | c0*  (* flagged); sequence 0's row is batch token 1
    seqs = [[0], [0], [0], [1], [1], [2]]
    pos = [0, 1, 2, 0, 1, 0]
    flags = [0, 1, 0, 0, 1, 1]
    assert ctx.decode(batch([*a, *b, *c], seqs=seqs, pos=pos, out=flags)) == 0
    want = {0: best(oracle.row(a[:2])), 1: best(oracle.row(b)), 2: best(oracle.row(c))}
    others = {best(oracle.row(a)), want[1], want[2]}  # the rows a wrong router could read
    assert want[0] not in others, f"the rows' greedy tokens must differ: {want}, {others}"
    assert target.backend_sample(ctx, 0, 1) == want[0], "sequence 0"
    assert target.backend_sample(ctx, 1, 4) == want[1], "sequence 1"
    assert target.backend_sample(ctx, 2, 5) == want[2], "sequence 2"
    assert memory_view(ctx, range(3)) == {0: (0, 2), 1: (0, 1), 2: (0, 0)}
