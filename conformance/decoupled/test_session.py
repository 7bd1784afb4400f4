"""A decoupled decode session's refusals (spec/decoupled.md DBA-022, DBA-023): bad tokens, a
wrong batch, a full session, a second prefill and a step's unknown path are refused before any
cache is touched; a call that fails inside the layers breaks the session for good."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from conformance.assertions import raises_code
from conformance.decoupled import _model as M
from reference_impl.errors import EngineError

pytestmark = pytest.mark.requires("decoupled.model")

F0 = M.FUSED.format(resid=0)  # quantized: a cache refuses non-finite keys (DBA-004)


@pytest.mark.invariant("DBA-022")
@pytest.mark.parametrize(
    "toks,seq_id,index",
    [
        ([[1, 2, 3], [4, -1, 70]], 1, 1),  # the first bad id in row-major order
        ([[5, 64, 0], [99, 1, 2]], 0, 1),
        ([[0, 63, 7], [8, 9, 64]], 1, 2),  # 63 = vocab - 1 is a token
    ],
)
def test_an_out_of_range_token_is_named_by_sequence_and_position(
    target: Any, toks: list[list[int]], seq_id: int, index: int
) -> None:
    model = target.decoupled_model(M.TINY, seed=30)
    with raises_code("DBA_BAD_TOKENS", field="tokens", seq_id=seq_id, index=index):
        model.logits(toks)
    session = model.start(M.FP32, max_len=4, batch=2)
    with raises_code("DBA_BAD_TOKENS", field="tokens", seq_id=seq_id, index=index):
        session.prefill(toks)
    assert session.length == 0
    column = [row[index] for row in toks]
    with raises_code("DBA_BAD_TOKENS", field="tokens", seq_id=seq_id, index=0):
        session.step(column, path="streaming")
    assert session.length == 0


@pytest.mark.invariant("DBA-022")
def test_refused_calls_leave_the_session_as_it_was(target: Any) -> None:
    model = target.decoupled_model(M.NULL, seed=31)
    toks = M.tokens(2, 6, seed=32)
    prompt = [row[:3] for row in toks]

    def fresh() -> list[torch.Tensor]:
        s = model.start(M.FP32, max_len=6, batch=2)
        out = [s.prefill(prompt)]
        out += [s.step([row[i] for row in toks], path="streaming")[0] for i in range(3, 6)]
        return out

    want = fresh()
    session = model.start(M.FP32, max_len=6, batch=2)
    with raises_code("DBA_SESSION_FULL"):
        session.prefill(M.tokens(2, 7, seed=33))
    with raises_code("DBA_BAD_TOKENS", field="tokens"):
        session.prefill(M.tokens(3, 3, seed=34))  # three sequences in a batch of two
    assert session.length == 0
    got = [session.prefill(prompt)]
    for i in range(3, 6):
        with raises_code("DBA_PREFILL_NOT_EMPTY"):
            session.prefill([[1], [2]])  # one token: it would fit
        with raises_code("DBA_BAD_TOKENS", field="tokens"):
            session.step([1, 2, 3], path="streaming")
        with raises_code("DBA_BAD_TOKENS", field="tokens", seq_id=0, index=0):
            session.step([64, 1], path="streaming")
        with raises_code("KRN_BAD_PATH"):
            session.step([1, 2], path="fused")  # not a path: refused before any layer runs
        assert session.length == i
        got.append(session.step([row[i] for row in toks], path="streaming")[0])
    assert session.length == 6
    with raises_code("DBA_SESSION_FULL"):
        session.step([1, 2], path="streaming")
    assert session.length == 6
    for n, (w, g) in enumerate(zip(want, got)):
        assert torch.equal(w, g), f"call {n}: the refused calls changed the session's logits"


def _poisoned(model: Any, layer: int) -> dict[str, torch.Tensor]:
    """The model's weights, with NaN values of ``layer``: its cache refuses the token's v."""
    good = model.weights()
    bad = dict(good)
    bad[f"blocks.{layer}.attn.v.weight"] = torch.full_like(
        good[f"blocks.{layer}.attn.v.weight"], float("nan")
    )
    model.load_weights(bad)
    return good


@pytest.mark.invariant("DBA-023")
def test_a_prefill_that_fails_in_a_layer_breaks_the_session(target: Any) -> None:
    model = target.decoupled_model(M.TINY, seed=35)
    prompt = M.tokens(2, 3, seed=36)
    session = model.start(F0, max_len=12, batch=2)
    good = _poisoned(model, layer=1)  # layer 0's cache takes the prompt, layer 1's refuses it
    with pytest.raises(EngineError):
        session.prefill(prompt)
    model.load_weights(good)
    with raises_code("DBA_SESSION_BROKEN"):
        session.prefill(prompt)
    with raises_code("DBA_SESSION_BROKEN"):
        session.step([1, 2], path="streaming")
    # the model itself is fine: a new session decodes
    assert model.start(F0, max_len=12, batch=2).prefill(prompt).shape == (2, 3, 64)


@pytest.mark.invariant("DBA-023")
def test_a_step_that_fails_in_a_layer_breaks_the_session(target: Any) -> None:
    model = target.decoupled_model(M.TINY, seed=37)
    session = model.start(F0, max_len=12, batch=2)
    session.prefill(M.tokens(2, 3, seed=38))
    good = _poisoned(model, layer=1)
    with pytest.raises(EngineError):
        session.step([4, 5], path="streaming")
    model.load_weights(good)
    with raises_code("DBA_SESSION_BROKEN"):
        session.step([4, 5], path="streaming")
    with raises_code("DBA_SESSION_BROKEN"):
        session.step([6, 7], path="streaming")
