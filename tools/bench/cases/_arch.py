"""Each supported architecture through the whole decode path, next to llama.cpp in the same run.

One model per architecture, built from its conformance fixture (same architecture keys and
tensors: qwen2's Q/K/V biases, qwen2vl's M-RoPE sections, gemma3's 32-value heads, interleaved
8-position sliding window and tied output) but widened to 256-value embeddings so that the
matrix work is not lost in per-call overhead (a few million f32 parameters). Both engines load
the same GGUF file and run ``decode`` with one thread (``DC_BENCH_THREADS``) and an F32 K/V
cache. Pairs (subject: the reference, peer: llama.cpp):

* ``arch.<arch>.prefill64``: one 64-token batch into an empty cache, logits of the last token;
* ``arch.<arch>.decode32``: 32 single-token decode calls from an empty cache;
* ``arch.bert.encode64``: a 64-token sequence through the encoder, MEAN-pooled embedding;
* ``arch.load.whole`` / ``arch.load.split3``: loading the llama model from one file and from
  the same tensors split over 3 parts (``write_split_gguf``), the file already in page cache.

Which one-token path the reference took (the native C step, or the torch forward and why) is
recorded in the case's params (``decode_path``). Reference and llama.cpp outputs are compared
once, outside the timed code (NMSE below 1e-6: f32 weights on both sides).
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conformance.fixtures.bert_model import BERT_FIXTURES, write_bert_gguf
from conformance.fixtures.cache import cache_dir, cached_gguf
from conformance.fixtures.gguf_models import (
    ALL_CONFIGS,
    FixtureConfig,
    write_gguf,
    write_split_gguf,
)
from reference_impl.batch.types import Batch
from tools.bench.common import bench_threads, record

THREADS = bench_threads()
N_PREFILL = 64
N_DECODE = 32
N_SPLIT = 3
ROUNDS = 5
NMSE_BAR = 1e-6
CTX: dict[str, Any] = {"n_ctx": 128, "n_batch": 128, "n_ubatch": 128, "n_threads": THREADS}
N_EMBD, N_FF, N_CTX_TRAIN = 256, 768, 512
WIDE = {"n_embd": N_EMBD, "n_ff": N_FF, "n_ctx_train": N_CTX_TRAIN}
# architecture -> (fixture it is widened from, layers); gemma3 keeps its 6 layers, so layers
# 0-4 slide and layer 5 is global
ARCHS: dict[str, tuple[str, int]] = {
    "llama": ("gqa", 4),
    "qwen2": ("qwen2", 4),
    "qwen2vl": ("qwen2vl", 4),
    "gemma3": ("gemma3", 6),
}
BERT = dataclasses.replace(
    BERT_FIXTURES["bert"], name="bench_bert", n_embd=256, n_layer=4, n_ff=1024, n_ctx_train=128
)
ROLE = {"reference": "subject", "llama.cpp": "peer"}


def arch_config(arch: str) -> FixtureConfig:
    base, n_layer = ARCHS[arch]
    return dataclasses.replace(
        ALL_CONFIGS[base],
        name=f"bench_{arch}",
        n_layer=n_layer,
        n_embd=N_EMBD,
        n_ff=N_FF,
        n_ctx_train=N_CTX_TRAIN,
    )


def model_path(arch: str) -> Path:
    if arch == "bert":

        def write_bert(tmp: str) -> None:
            write_bert_gguf(BERT, tmp)

        return cached_gguf(BERT.name, BERT.key(), write_bert)
    cfg = arch_config(arch)

    def write(tmp: str) -> None:
        write_gguf(cfg, tmp)

    return cached_gguf(cfg.name, cfg.key(), write)


def split_parts() -> list[Path]:
    """The llama bench model in ``N_SPLIT`` parts, written once into the fixture cache (a whole
    folder renamed into place, so a half-written set is never read)."""
    cfg = arch_config("llama")
    folder = cache_dir() / f"{cfg.name}-split{N_SPLIT}-{cfg.key()}"
    names = [f"part-{no:05d}-of-{N_SPLIT:05d}.gguf" for no in range(1, N_SPLIT + 1)]
    if not folder.is_dir():
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
        try:
            write_split_gguf(cfg, tmp, N_SPLIT, prefix="part")
            tmp.rename(folder)
        except OSError:
            if not folder.is_dir():  # not a concurrent writer that got there first
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return [folder / n for n in names]


def _llama_cpp() -> Any:
    pytest.importorskip("llama_cpp", reason="llama.cpp peer needs the llamacpp extra")
    from conformance.targets.llamacpp import LlamaCppTarget

    return LlamaCppTarget()


_CONTEXTS: dict[tuple[str, str], Any] = {}


def context(engine: str, arch: str) -> Any:
    """One context per engine and architecture for the whole module (loading is not timed)."""
    key = (engine, arch)
    if key not in _CONTEXTS:
        params = {**CTX, "embeddings": True} if arch == "bert" else CTX
        if engine == "reference":
            from reference_impl.decoder import Context
            from reference_impl.model import Model

            _CONTEXTS[key] = Context(Model.from_gguf(model_path(arch)), **params)
        else:
            t = _llama_cpp()
            _CONTEXTS[key] = t.new_context(t.load_model(model_path(arch)), **params)
    return _CONTEXTS[key]


def _tokens(n: int, n_vocab: int, first: int) -> list[int]:
    rng = np.random.default_rng(n)
    return [first, *(int(t) for t in rng.integers(5, n_vocab, n - 1))]


PROMPT = _tokens(N_PREFILL, 508, 1)  # the llama fixtures' 508-token vocabulary, BOS first
STEPS = PROMPT[:N_DECODE]
BERT_PROMPT = [*_tokens(N_PREFILL - 1, 700, 2), 3]  # [CLS] ... [SEP] of the WordPiece fixture


def prefill(ctx: Any, tokens: list[int]) -> None:
    ctx.memory_clear(True)
    if ctx.decode(Batch.from_lists(tokens)) != 0:
        raise RuntimeError("prefill failed")


def decode_steps(ctx: Any, tokens: list[int]) -> None:
    ctx.memory_clear(True)
    for t in tokens:
        if ctx.decode(Batch.from_lists([t])) != 0:
            raise RuntimeError("decode step failed")


def encode(ctx: Any, tokens: list[int]) -> None:
    if ctx.decode(Batch.from_lists(tokens)) != 0:
        raise RuntimeError("encode failed")


def _nmse(a: Any, b: Any) -> float:
    x = np.asarray(a, dtype=np.float64).reshape(-1)
    y = np.asarray(b, dtype=np.float64).reshape(-1)
    return float(np.sum((x - y) ** 2) / np.sum(x * x))


def _check_against_reference(engine: str, arch: str, run: Callable[[Any], Any]) -> None:
    """Outside the timing: the output after ``run`` is finite and, for llama.cpp, matches the
    reference's after the same ``run``."""
    out = run(context(engine, arch))
    assert np.isfinite(out).all()
    if engine != "reference":
        want = run(context("reference", arch))
        assert _nmse(want, out) < NMSE_BAR, f"{arch}: llama.cpp and the reference disagree"


def _params(engine: str, arch: str, **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"arch": arch, "threads": THREADS, "kv": "f32", **WIDE, **extra}
    if engine == "reference" and arch != "bert":
        params["decode_path"] = context(engine, arch).native_reason
    return params


def _record(benchmark: Any, engine: str, pair: str, work: int, params: dict[str, Any]) -> None:
    record(
        benchmark,
        area="model",
        work=work,
        unit="tokens",
        params=params,
        pair=pair,
        role=ROLE[engine],
        peer=None if engine == "reference" else engine,
    )


@pytest.mark.parametrize("engine", sorted(ROLE))
@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_prefill64(benchmark: Any, arch: str, engine: str) -> None:
    def run(ctx: Any) -> np.ndarray:
        prefill(ctx, PROMPT)
        return np.asarray(ctx.get_logits_ith(-1))

    _check_against_reference(engine, arch, run)
    ctx = context(engine, arch)
    benchmark.pedantic(prefill, args=(ctx, PROMPT), rounds=ROUNDS, warmup_rounds=1)
    _record(
        benchmark, engine, f"arch.{arch}.prefill64", N_PREFILL, _params(engine, arch, n=N_PREFILL)
    )


@pytest.mark.parametrize("engine", sorted(ROLE))
@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_decode32(benchmark: Any, arch: str, engine: str) -> None:
    def run(ctx: Any) -> np.ndarray:
        decode_steps(ctx, STEPS)
        return np.asarray(ctx.get_logits_ith(-1))

    _check_against_reference(engine, arch, run)
    ctx = context(engine, arch)
    benchmark.pedantic(decode_steps, args=(ctx, STEPS), rounds=ROUNDS, warmup_rounds=1)
    _record(benchmark, engine, f"arch.{arch}.decode32", N_DECODE, _params(engine, arch, n=N_DECODE))


@pytest.mark.parametrize("engine", sorted(ROLE))
def test_bert_encode64(benchmark: Any, engine: str) -> None:
    def run(ctx: Any) -> np.ndarray:
        encode(ctx, BERT_PROMPT)
        return np.asarray(ctx.get_embeddings_seq(0))

    _check_against_reference(engine, "bert", run)
    params = _params(
        engine,
        "bert",
        n=len(BERT_PROMPT),
        n_embd=BERT.n_embd,
        n_ff=BERT.n_ff,
        n_ctx_train=BERT.n_ctx_train,
        n_layer=BERT.n_layer,
        pooling="mean",
    )
    ctx = context(engine, "bert")
    benchmark.pedantic(encode, args=(ctx, BERT_PROMPT), rounds=ROUNDS, warmup_rounds=1)
    _record(benchmark, engine, "arch.bert.encode64", len(BERT_PROMPT), params)


def _loader(engine: str) -> Callable[[Path], Any]:
    if engine == "reference":
        from reference_impl.model import Model

        return Model.from_gguf
    _llama_cpp()
    from conformance.targets.llamacpp.runtime import LlamaCppModel

    def load(path: Path) -> Any:
        model = LlamaCppModel(path)
        n_vocab = model.n_vocab
        model.close()  # freeing is part of the round: nothing piles up between rounds
        return n_vocab

    return load


@pytest.mark.parametrize("engine", sorted(ROLE))
@pytest.mark.parametrize("layout", ["whole", "split3"])
def test_load(benchmark: Any, layout: str, engine: str) -> None:
    """Loading the llama bench model, from one file or from its first of 3 parts (the loader
    finds the others); the reference's load includes its weight preparation (fused matrices)."""
    path = model_path("llama") if layout == "whole" else split_parts()[0]
    load = _loader(engine)
    loaded = load(path)  # also brings the files into page cache before the timed rounds
    n_vocab = loaded if isinstance(loaded, int) else loaded.n_vocab
    assert n_vocab == 508
    files = [path] if layout == "whole" else split_parts()
    size = sum(p.stat().st_size for p in files)
    benchmark.pedantic(load, args=(path,), rounds=ROUNDS, warmup_rounds=1)
    record(
        benchmark,
        area="model",
        work=1,
        unit="loads",
        params={"arch": "llama", "layout": layout, "files": len(files), "bytes": size, **WIDE},
        pair=f"arch.load.{layout}",
        role=ROLE[engine],
        peer=None if engine == "reference" else engine,
    )
