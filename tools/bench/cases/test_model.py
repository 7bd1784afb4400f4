"""The llama forward on the ~25M-parameter f32 fixture, side by side with llama.cpp.

Two pairs, each measured on the reference (``subject``) and on llama.cpp (``peer``) over the
same GGUF file, with the same thread count (``DC_BENCH_THREADS``, default: all cores):

* ``model.prefill128``: 128 prompt tokens in one ubatch into an empty KV cache, logits of the
  last token (llama.cpp: ``llama_decode`` of one 128-token batch);
* ``model.decode128``: 128 single-token steps from an empty cache, logits every step
  (llama.cpp: 128 ``llama_decode`` calls of one token); two subjects: the torch forward
  (``test_decode128_reference``) and the native one-token step (``test_decode128_native``).

One floor, on the reference's weights: ``test_decode128_weight_stream`` runs only the
matrix-vector products of 128 decode steps (the whole model is read per step), so the report
shows what part of ``model.decode128`` is weight streaming and what part is everything else.

The reference runs :meth:`Model.forward_ubatch` over a preallocated float32 KV cache
(:class:`BenchCache`); llama.cpp uses an F32 KV cache and no flash attention, the same math.
Correctness is checked once, outside the timed code.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from conformance.fixtures.gguf_models import FIXTURES, fixture_path, fixture_vocab, tensor_shapes
from reference_impl.batch.types import Batch
from reference_impl.model import Model

# Each architecture next to llama.cpp (prefill, decode steps, bert encode, split-file load): the
# cases live in _arch.py and are collected here, under the area they record.
from tools.bench.cases._arch import (  # noqa: F401
    test_bert_encode64,
    test_decode32,
    test_load,
    test_prefill64,
)
from tools.bench.common import record

N_TOKENS = 128
CTX = 256
FIXTURE = "bench25m"
THREADS = int(os.environ.get("DC_BENCH_THREADS") or os.cpu_count() or 1)
ROUNDS = int(os.environ.get("DC_BENCH_MODEL_ROUNDS", "5"))
PARAMS = {"fixture": FIXTURE, "n_tokens": N_TOKENS, "threads": THREADS, "weights": "f32"}


def _tokens() -> list[int]:
    rng = np.random.default_rng(0)
    return [1, *(int(t) for t in rng.integers(3, 508, N_TOKENS - 1))]


class BenchCache:
    """A preallocated single-sequence KV cache: cells ``[0, n)`` hold positions ``0..n-1``."""

    def __init__(self, model: Model, size: int = CTX) -> None:
        hp = model.hparams
        shape = (size, hp.n_head_kv, hp.head_dim)
        self.k = [torch.zeros(shape) for _ in range(hp.n_layer)]
        self.v = [torch.zeros(shape) for _ in range(hp.n_layer)]
        self.start = 0
        self.end = 0
        # decode masks: one query sees every filled cell
        self.row_masks = [torch.zeros(1, n) for n in range(size + 1)]

    def write(self, il: int, k: torch.Tensor, v: torch.Tensor) -> None:
        self.k[il][self.start : self.end] = k
        self.v[il][self.start : self.end] = v

    def read(self, il: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.k[il][: self.end], self.v[il][: self.end]

    def reset(self) -> None:
        self.start = self.end = 0


def reference_prefill(model: Model, cache: BenchCache, tokens: list[int]) -> torch.Tensor:
    n = len(tokens)
    cache.start, cache.end = 0, n
    mask = torch.full((n, n), float("-inf")).triu_(1)
    return model.forward_ubatch(
        tokens=tokens,
        positions=np.arange(n),
        kv_write=cache.write,
        kv_read=cache.read,
        kq_mask=mask,
        output_rows=[n - 1],
    )


def reference_decode(model: Model, cache: BenchCache, tokens: list[int]) -> torch.Tensor:
    out = torch.empty(0)
    for i, tok in enumerate(tokens):
        cache.start, cache.end = i, i + 1
        out = model.forward_ubatch(
            tokens=[tok],
            positions=[i],
            kv_write=cache.write,
            kv_read=cache.read,
            kq_mask=cache.row_masks[i + 1],
        )
    return out


@pytest.fixture(scope="module")
def reference() -> Iterator[tuple[Model, BenchCache]]:
    previous = torch.get_num_threads()
    model = Model.from_gguf(fixture_path(FIXTURE), n_threads=THREADS)
    yield model, BenchCache(model)
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def llama() -> Iterator[Any]:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from conformance.targets.llamacpp.runtime import LlamaCppContext, LlamaCppModel

    model = LlamaCppModel(fixture_path(FIXTURE))
    ctx = LlamaCppContext(model, n_ctx=CTX, n_batch=CTX, n_ubatch=CTX, n_threads=THREADS)
    yield ctx
    ctx.close()
    model.close()


def llama_prefill(ctx: Any, tokens: list[int]) -> np.ndarray:
    ctx.memory_clear()
    n = len(tokens)
    batch = Batch.from_lists(
        tokens, pos=list(range(n)), seq_ids=[[0]] * n, logits=[0] * (n - 1) + [1]
    )
    if ctx.decode(batch) != 0:
        raise RuntimeError("llama_decode failed")
    out = ctx.logits_ith(-1)
    assert out is not None
    return np.asarray(out)


def llama_decode(ctx: Any, tokens: list[int]) -> np.ndarray:
    ctx.memory_clear()
    out = None
    for i, tok in enumerate(tokens):
        if ctx.decode(Batch.from_lists([tok], pos=[i], seq_ids=[[0]], logits=[1])) != 0:
            raise RuntimeError("llama_decode failed")
        out = ctx.logits_ith(-1)
    assert out is not None
    return np.asarray(out)


def _close(a: Any, b: Any) -> None:
    a = np.asarray(a, dtype=np.float64).reshape(-1)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    assert np.sum((a - b) ** 2) / np.sum(a * a) < 1e-6


def _record(benchmark: Any, pair: str, role: str) -> None:
    record(
        benchmark,
        area="model",
        work=N_TOKENS,
        unit="tokens",
        params={**PARAMS, "n_params": _n_params()},
        pair=pair,
        role=role,
        peer="llama.cpp" if role == "peer" else None,
    )


def _n_params() -> int:
    shapes = tensor_shapes(FIXTURES[FIXTURE], len(fixture_vocab()[0]))
    return sum(int(np.prod(s)) for s in shapes.values())


def test_prefill128_reference(benchmark: Any, reference: tuple[Model, BenchCache]) -> None:
    model, cache = reference
    tokens = _tokens()
    _close(
        model.forward(tokens, output_rows=[N_TOKENS - 1]), reference_prefill(model, cache, tokens)
    )
    benchmark.pedantic(
        reference_prefill, args=(model, cache, tokens), rounds=ROUNDS, warmup_rounds=1
    )
    _record(benchmark, "model.prefill128", "subject")


def test_prefill128_llamacpp(
    benchmark: Any, llama: Any, reference: tuple[Model, BenchCache]
) -> None:
    tokens = _tokens()
    _close(reference[0].forward(tokens, output_rows=[N_TOKENS - 1]), llama_prefill(llama, tokens))
    benchmark.pedantic(llama_prefill, args=(llama, tokens), rounds=ROUNDS, warmup_rounds=1)
    _record(benchmark, "model.prefill128", "peer")


def test_decode128_reference(benchmark: Any, reference: tuple[Model, BenchCache]) -> None:
    model, cache = reference
    tokens = _tokens()
    _close(
        model.forward(tokens, output_rows=[N_TOKENS - 1]), reference_decode(model, cache, tokens)
    )
    benchmark.pedantic(
        reference_decode, args=(model, cache, tokens), rounds=ROUNDS, warmup_rounds=1
    )
    _record(benchmark, "model.decode128", "subject")


def native_decode(model: Model, cache: BenchCache, tokens: list[int]) -> np.ndarray:
    """The decode loop on the native one-token step (the path ``Context`` takes for one-token
    ubatches), over the same cache tensors."""
    step = model.native_step()
    k = [t.unsqueeze(0) for t in cache.k]  # one stream
    v = [t.unsqueeze(0) for t in cache.v]
    logits = np.empty(model.n_vocab, dtype=np.float32)
    for i, tok in enumerate(tokens):
        step(
            token=tok,
            embd=None,
            position=i,
            k_cache=k,
            v_cache=v,
            stream=0,
            cell=i,
            mask=cache.row_masks[i + 1],
            logits=logits,
            n_threads=THREADS,
        )
    return logits


def test_decode128_native(benchmark: Any, reference: tuple[Model, BenchCache]) -> None:
    """``model.decode128`` on the native step: a second subject of the pair, so the report shows
    the torch forward and the native step against the same llama.cpp measurement."""
    model, cache = reference
    try:
        model.native_step()
    except (RuntimeError, ValueError) as exc:
        pytest.skip(f"native step unavailable: {exc}")
    tokens = _tokens()
    _close(model.forward(tokens, output_rows=[N_TOKENS - 1]), native_decode(model, cache, tokens))
    benchmark.pedantic(native_decode, args=(model, cache, tokens), rounds=ROUNDS, warmup_rounds=1)
    _record(benchmark, "model.decode128", "subject")


def test_decode128_llamacpp(
    benchmark: Any, llama: Any, reference: tuple[Model, BenchCache]
) -> None:
    tokens = _tokens()
    _close(reference[0].forward(tokens, output_rows=[N_TOKENS - 1]), llama_decode(llama, tokens))
    benchmark.pedantic(llama_decode, args=(llama, tokens), rounds=ROUNDS, warmup_rounds=1)
    _record(benchmark, "model.decode128", "peer")


def weight_stream(model: Model, steps: int) -> torch.Tensor:
    """Only the matrix-vector products of ``steps`` decode steps: every layer's fused QKV, output,
    gate/up and down projections and the vocabulary projection, on the reference's own fused
    weights (the bytes a single-token step must read), with nothing in between."""
    graph = model.graph
    x = torch.ones(1, model.hparams.n_embd)
    out = x
    with torch.inference_mode():
        for _ in range(steps):
            for layer in graph.layers:
                torch.mm(x, layer.wqkv_t)
                torch.mm(x, layer.wo_t)
                gate_up = torch.mm(x, layer.w_gate_up_t)
                torch.mm(gate_up[:, : layer.w_down_t.shape[0]], layer.w_down_t)
            out = graph.logits_from_hidden(x)
    return out


def test_decode128_weight_stream(benchmark: Any, reference: tuple[Model, BenchCache]) -> None:
    """The floor under ``model.decode128``: how long reading the weights 128 times takes in torch,
    so the report shows how much of a decode step is matrix-vector work and how much is the rest
    (attention, norms, RoPE, per-op dispatch); its GB/s against the memcpy floor says how close
    torch's GEMV gets to this machine's memory bandwidth."""
    model, _ = reference
    graph = model.graph
    # every tensor of a layer (optional biases are None on this bias-free model)
    mats = [m for layer in graph.layers for m in vars(layer).values() if m is not None]
    mats.append(graph.output)
    n_bytes = sum(m.numel() * m.element_size() for m in mats)
    assert n_bytes > 90e6  # ~25M f32 parameters: the whole model is read every step
    benchmark.pedantic(weight_stream, args=(model, N_TOKENS), rounds=ROUNDS, warmup_rounds=1)
    record(
        benchmark,
        area="model",
        work=N_TOKENS,
        unit="tokens",
        params={**PARAMS, "n_params": _n_params(), "weight_bytes": n_bytes},
        bytes_moved=float(n_bytes) * N_TOKENS,
    )
