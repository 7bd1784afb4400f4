"""The cache's side of the native one-token step (DEC-062): a one-token ubatch in one stream
is a slot of exactly one cell, which the native step writes itself; a wider slot is not.

The decoder's own tests (conformance/decoder/test_native.py) check the step's numbers; this
one only checks that the cache hands the step its one-cell slots, seen as the compute path
the trace records for each ubatch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conformance.decoder.helpers import batch, prompt

pytestmark = pytest.mark.requires("decoder.introspection", "decoder.native", "decoder.logits")


def _paths(ctx: Any) -> list[str]:
    """The compute path of every ubatch of the last decode call, in order."""
    return [e.data["path"] for e in ctx.trace.of_call(ctx.trace.calls - 1) if e.kind == "compute"]


@pytest.mark.invariant("DEC-062")
def test_one_token_ubatches_take_the_one_cell_path(new_ctx: Callable[..., Any]) -> None:
    ctx = new_ctx("gqa", n_batch=8, n_ubatch=2, trace=True)
    assert ctx.native_reason == "native"
    assert ctx.decode(batch(prompt(3))) == 0
    assert _paths(ctx) == ["torch", "native"]  # ubatches of 2 tokens, then 1 token
    for p in (3, 4):
        assert ctx.decode(batch([7 + p], pos=[p])) == 0
        assert _paths(ctx) == ["native"]
