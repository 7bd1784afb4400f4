"""Unit tests of the reference llama forward: the cached step, K-shift, inputs and errors."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

from conformance.assertions import assert_nmse
from conformance.fixtures.gguf_models import fixture_path
from conformance.model import oracle
from reference_impl.errors import BatchError
from reference_impl.model import Model, llama

TOKENS = [1, 286, 340, 47, 301, 262, 365, 290, 97, 58, 293, 352, 291, 62, 9, 317]


@pytest.fixture(scope="module", params=["mha", "gqa", "q4"])
def model(request: pytest.FixtureRequest) -> Model:
    return Model.from_gguf(fixture_path(request.param))


class Cache:
    """A minimal preallocated KV cache: one stream, cells filled left to right."""

    def __init__(self, model: Model, size: int = 64) -> None:
        hp = model.hparams
        self.k = torch.zeros(hp.n_layer, size, hp.n_head_kv, hp.head_dim)
        self.v = torch.zeros_like(self.k)
        self.pos = np.full(size, -1)
        self.start = 0
        self.n = 0

    def write(self, il: int, k: torch.Tensor, v: torch.Tensor) -> None:
        self.k[il, self.start : self.start + k.shape[0]] = k
        self.v[il, self.start : self.start + k.shape[0]] = v

    def read(self, il: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.k[il, : self.n], self.v[il, : self.n]

    def step(
        self, model: Model, tokens: list[int], positions: list[int], **kw: object
    ) -> torch.Tensor:
        self.start = self.n
        self.n += len(tokens)
        self.pos[self.start : self.n] = positions
        q = np.asarray(positions)[:, None]
        cells = self.pos[None, : self.n]
        mask = torch.from_numpy(
            np.where((cells >= 0) & (cells <= q), 0.0, -np.inf).astype(np.float32)
        )
        return model.forward_ubatch(
            tokens=tokens,
            positions=positions,
            kv_write=self.write,
            kv_read=self.read,
            kq_mask=mask,
            **kw,
        )


@pytest.mark.parametrize("chunks", [[16], [1] * 16, [5, 1, 7, 3], [8, 8]])
def test_cached_steps_equal_full_sequence(model: Model, chunks: list[int]) -> None:
    full = model.forward(TOKENS)
    cache = Cache(model)
    rows = []
    i = 0
    for c in chunks:
        rows.append(cache.step(model, TOKENS[i : i + c], list(range(i, i + c))))
        i += c
    assert_nmse(full, torch.cat(rows), 1e-10, f"chunks {chunks}")


def test_output_rows_select_rows(model: Model) -> None:
    full = model.forward(TOKENS)
    sel = model.forward(TOKENS, output_rows=[3, 0, 15])
    assert_nmse(full[[3, 0, 15]], sel, 1e-10, "output_rows")
    hidden = Cache(model).step(model, TOKENS, list(range(16)), output_rows=[15], return_hidden=True)
    assert hidden.shape == (1, model.n_embd)
    assert_nmse(full[15:], model.logits_from_hidden(hidden), 1e-10, "logits_from_hidden")


def test_embd_input_equals_token_input(model: Model) -> None:
    embd = model.weights.token_embd[TOKENS].numpy()
    a = Cache(model).step(model, TOKENS, list(range(16)))
    cache = Cache(model)
    cache.start, cache.n = 0, 16
    cache.pos[:16] = np.arange(16)
    mask = torch.full((16, 16), float("-inf")).triu_(1)
    b = model.forward_ubatch(
        embd=embd, positions=list(range(16)), kv_write=cache.write, kv_read=cache.read, kq_mask=mask
    )
    assert torch.equal(a, b)


def test_rope_shift_equals_rotation_at_the_new_position(model: Model) -> None:
    """K-shift: keys computed at position p, re-rotated by d, equal keys computed at p + d."""
    hp = model.hparams
    a = Cache(model)
    a.step(model, TOKENS[:6], [0, 1, 2, 3, 4, 5])
    b = Cache(model)
    b.step(model, TOKENS[:6], [7, 8, 9, 3, 4, 5])  # what seq_add(+7 on the first 3) means
    layer0_a = a.k[0, :6].clone()
    shifted = model.rope_shift(layer0_a, [7, 7, 7, 0, 0, 0])
    assert shifted.shape == (6, hp.n_head_kv, hp.head_dim)
    # layer 0 keys depend only on each token, so they must agree to rounding
    assert torch.allclose(shifted, b.k[0, :6], atol=1e-5, rtol=1e-5)
    back = model.rope_shift(shifted, [-7, -7, -7, 0, 0, 0])
    assert torch.allclose(back, layer0_a, atol=1e-5, rtol=1e-5)


def test_rope_theta_follows_ggml_cumulative_product() -> None:
    theta = llama.rope_theta(np.array([0, 1, 1000]), 8, 10000.0)
    assert theta.dtype == np.float32
    assert np.array_equal(theta[0], np.zeros(4, np.float32))
    scale = np.float32(10000.0) ** np.float32(-2.0 / 8)
    expect = [np.float32(1000.0)]
    for _ in range(3):
        expect.append(np.float32(expect[-1] * scale))
    assert np.array_equal(theta[2], np.array(expect, np.float32))


def test_attention_is_pluggable() -> None:
    calls: list[int] = []

    def attention(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float
    ) -> torch.Tensor:
        calls.append(q.shape[0])
        return llama.sdpa_attention(q, k, v, mask, scale)

    path = fixture_path("gqa")
    m = Model.from_gguf(path, attention=attention)
    out = m.forward(TOKENS[:5])
    assert calls == [5] * m.n_layer
    assert_nmse(oracle.forward(path, TOKENS[:5]), out, 1e-10, "pluggable attention")


BadCall = Callable[[Model, Cache], object]


@pytest.mark.parametrize(
    ("call", "code", "field"),
    [
        (lambda m, c: m.forward([1, 2, 9999]), "MODEL_TOKEN_RANGE", "token"),
        (lambda m, c: c.step(m, [1, -5], [0, 1]), "MODEL_TOKEN_RANGE", "token"),
        (
            lambda m, c: m.forward_ubatch(
                positions=[0], kv_write=c.write, kv_read=c.read, kq_mask=torch.zeros(1, 1)
            ),
            "MODEL_INPUT",
            "token",
        ),
        (
            lambda m, c: m.forward_ubatch(
                tokens=[1, 2],
                positions=[0],
                kv_write=c.write,
                kv_read=c.read,
                kq_mask=torch.zeros(2, 2),
            ),
            "MODEL_INPUT",
            "pos",
        ),
        (
            lambda m, c: m.forward_ubatch(
                embd=np.zeros((1, 3), np.float32),
                positions=[0],
                kv_write=c.write,
                kv_read=c.read,
                kq_mask=torch.zeros(1, 1),
            ),
            "MODEL_INPUT",
            "embd",
        ),
        (lambda m, c: m.rope_shift(torch.zeros(3, 2, 16), [1, 2]), "MODEL_INPUT", "delta"),
    ],
)
def test_bad_inputs_raise_typed_errors(model: Model, call: BadCall, code: str, field: str) -> None:
    cache = Cache(model)
    with pytest.raises(BatchError) as info:
        call(model, cache)
    assert info.value.code == code
    assert info.value.field == field
    assert cache.n == 0 or code == "MODEL_TOKEN_RANGE"
    assert torch.count_nonzero(cache.k) == 0  # nothing written by a refused call


def test_threads_are_set_explicitly() -> None:
    before = torch.get_num_threads()
    try:
        Model.from_gguf(fixture_path("mha"), n_threads=1)
        assert torch.get_num_threads() == 1
        with pytest.raises(ValueError):
            llama.set_threads(0)
    finally:
        torch.set_num_threads(before)
