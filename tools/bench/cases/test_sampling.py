"""Sampling benchmarks: one candidate array through a sampler chain, per round.

Each case builds the full-vocabulary candidates of one logits row (vocab 32k and 128k) and
times one ``apply`` of a chain: the default chain of llama.cpp's common library and single
samplers. The subject is the reference (``reference_impl.sampling.Chain.apply``; it never
writes its input, so no copy per round); the peer is llama.cpp's own chain through
llama-cpp-python (``llama_sampler_apply`` on a copy of the same rows, the copy being what
llama.cpp's tests/test-sampling.cpp bench does each iteration too). One round = one sample.
"""

from __future__ import annotations

import ctypes
import importlib.util
from typing import Any

import numpy as np
import pytest

from reference_impl.sampling import build_candidates, chain
from tools.bench.common import record


def _llama_cpp_installed() -> bool:
    try:
        return importlib.util.find_spec("llama_cpp") is not None
    except (ImportError, ValueError):
        return False


HAVE_LLAMA_CPP = _llama_cpp_installed()
VOCABS = (32000, 131072)
HISTORY = list(range(0, 640, 10))  # 64 accepted tokens for the penalties window

CHAINS: dict[str, Any] = {
    "default": None,  # common_sampler_init with seed 42 (top-k 40, top-p, min-p, temp, dist)
    "greedy": ["greedy"],
    "dist": [["dist", {"seed": 42}]],
    "top_k-40": [["top_k", {"k": 40}]],
    "top_p-0.95": [["top_p", {"p": 0.95}]],
    "min_p-0.05": [["min_p", {"p": 0.05}]],
    "typical-0.5": [["typical", {"p": 0.5}]],
    "temp-0.8": [["temp", {"t": 0.8}]],
    "penalties-64": [["penalties", {"last_n": 64, "repeat": 1.1, "freq": 0.1, "present": 0.1}]],
}


def _logits(n_vocab: int) -> np.ndarray:
    return (np.random.default_rng(n_vocab).standard_normal(n_vocab) * 3.0).astype(np.float32)


def _reference_chain(name: str) -> chain.Chain:
    spec = CHAINS[name]
    built = chain.build_common_chain({"seed": 42}) if spec is None else chain.build_chain(spec)
    for token in HISTORY:
        built.accept(token)
    return built


def _peer_runner(name: str, logits: np.ndarray) -> tuple[Any, Any]:
    """A zero-argument llama.cpp apply (copy rows, apply) and the handle keeping it alive."""
    import llama_cpp as lib

    from conformance.targets.llamacpp.sampling import TOKEN_DATA, LlamaCppSampling

    adapter = LlamaCppSampling()
    spec = CHAINS[name]
    handle = (
        adapter.sampler_chain_init_default({"seed": 42})
        if spec is None
        else adapter.sampler_chain_init(spec)
    )
    for token in HISTORY:
        adapter.sampler_accept(handle, token)
    base = np.empty(logits.shape[0], dtype=TOKEN_DATA)
    base["id"], base["logit"], base["p"] = np.arange(logits.shape[0]), logits, 0.0
    buf = base.copy()
    arr = lib.llama_token_data_array(
        buf.ctypes.data_as(lib.llama_token_data_p), buf.shape[0], -1, False
    )
    ref = ctypes.byref(arr)
    apply = lib.llama_sampler_apply

    src, dst = base.view(np.uint8), buf.view(np.uint8)  # a plain memcpy of the 12-byte rows

    def run() -> int:
        np.copyto(dst, src)
        arr.size, arr.selected, arr.sorted = base.shape[0], -1, False
        apply(handle.ptr, ref)
        return int(arr.selected)

    return run, handle


@pytest.mark.parametrize("n_vocab", VOCABS)
@pytest.mark.parametrize("name", list(CHAINS))
@pytest.mark.parametrize("role", ["subject", "peer"])
def test_sampling(benchmark: Any, role: str, name: str, n_vocab: int) -> None:
    logits = _logits(n_vocab)
    pair = f"sampling/{name}/n_vocab={n_vocab}"
    params = {"n_vocab": n_vocab, "chain": name}
    if role == "subject":
        built = _reference_chain(name)
        cur = build_candidates(logits)
        out = benchmark(built.apply, cur)
        assert out.size >= 1 and out.selected < out.size
        record(benchmark, area="sampling", work=1, unit="samples", params=params, pair=pair)
        return
    if not HAVE_LLAMA_CPP:
        pytest.skip("llama-cpp-python is not importable (the 'llamacpp' extra)")
    run, handle = _peer_runner(name, logits)
    selected = benchmark(run)
    assert selected < n_vocab
    record(
        benchmark,
        area="sampling",
        work=1,
        unit="samples",
        params=params,
        pair=pair,
        role="peer",
        peer="llama.cpp",
    )
    handle.free()
