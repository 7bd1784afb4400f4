"""Unit tests of the native step's build cache and of its argument checks."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from conformance.fixtures.gguf_models import fixture_path
from reference_impl.model import Model
from reference_impl.native import build


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    monkeypatch.setenv("DC_NATIVE_CACHE", str(tmp_path))
    build.load.cache_clear()
    yield tmp_path
    build.load.cache_clear()


def test_build_is_cached_per_source_and_defines(cache: Path) -> None:
    a = build.build()
    mtime = a.stat().st_mtime_ns
    assert build.build() == a and a.stat().st_mtime_ns == mtime  # reused, not rebuilt
    b = build.build(("DC_MUTANT_ROPE_HALVES",))
    assert b != a and b.parent.parent == a.parent.parent == cache
    assert not list(cache.glob("*/.build-*"))  # no half-written library left behind


def test_build_failure_names_the_compiler_and_its_message(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CC", "dc-no-such-compiler")
    with pytest.raises(RuntimeError, match=r"no C compiler .*dc-no-such-compiler"):
        build.build()
    lib = build.load()
    assert lib.lib is None and "no C compiler" in lib.reason
    monkeypatch.setenv("CC", "cc")
    with pytest.raises(RuntimeError, match=r"-Dstatic=@ .*failed:\n.*error"):
        build.build(("static=@",))  # a define that breaks the source
    assert not list(cache.glob("*/*.so"))  # neither a library nor a half-written one


def _step_args(model: Model, kv_size: int, **over: Any) -> dict[str, Any]:
    """Arguments of one native step into a fresh one-stream cache of ``kv_size`` cells: token 5
    at position 0 into cell 0, one thread (``over`` replaces any of them)."""
    hp = model.hparams
    k = [torch.zeros(1, kv_size, hp.n_head_kv, hp.head_dim) for _ in range(hp.n_layer)]
    args: dict[str, Any] = {
        "token": 5,
        "embd": None,
        "position": 0,
        "k_cache": k,
        "v_cache": [torch.zeros_like(t) for t in k],
        "stream": 0,
        "cell": 0,
        "mask": torch.zeros(1, 1),
        "logits": np.zeros(hp.n_vocab, dtype=np.float32),
        "n_threads": 1,
    }
    return {**args, **over}


def test_step_rejects_bad_arguments_before_running() -> None:
    model = Model.from_gguf(fixture_path("gqa"))
    step = model.native_step()
    hp = model.hparams
    ok = _step_args(model, 16)
    k, v = ok["k_cache"], ok["v_cache"]
    step(**ok)
    assert np.isfinite(ok["logits"]).all() and ok["logits"].any()
    for bad, words in (
        ({"cell": 16}, "outside the cache"),
        ({"mask": torch.zeros(1, 17)}, "outside the cache"),
        ({"mask": torch.zeros(2, 4)[:, :1]}, "contiguous float32 row"),
        ({"token": hp.n_vocab}, "outside the vocabulary"),
        ({"token": None}, "token id or an embedding row"),
        ({"stream": 1}, "stream 1"),
        ({"k_cache": [t.half() for t in k]}, "float32"),
        ({"k_cache": k[:-1], "v_cache": v[:-1]}, "one K and one V cache per layer"),
    ):
        before = [t.clone() for t in k]
        with pytest.raises(ValueError, match=words):
            step(**{**ok, **bad})
        assert all(torch.equal(a, b) for a, b in zip(before, k, strict=True))  # nothing written


def test_embedding_input_equals_the_token_path() -> None:
    model = Model.from_gguf(fixture_path("gqa"))
    step = model.native_step()
    out = []
    for token, embd in ((7, None), (None, model.graph.token_embd[7].numpy())):
        args = _step_args(
            model,
            8,
            token=token,
            embd=embd,
            position=3,
            cell=2,
            mask=torch.zeros(1, 3),
            n_threads=2,
        )
        step(**args)
        out.append(args["logits"])
    assert np.array_equal(out[0], out[1])


def test_worker_threads_survive_a_fork() -> None:
    if not hasattr(os, "fork"):
        pytest.skip("no fork")
    model = Model.from_gguf(fixture_path("gqa"))
    step = model.native_step()
    args = _step_args(model, 8, n_threads=2)
    logits = args["logits"]
    step(**args)  # the parent's pool is running
    want = logits.copy()
    pid = os.fork()
    if pid == 0:  # the child has no workers: the step must rebuild them, not wait forever
        logits[:] = 0
        step(**args)
        os._exit(0 if np.array_equal(logits, want) else 1)
    for _ in range(600):  # a hung child (a pool waiting for dead workers) fails, not hangs
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child's step did not finish in 60 s")
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_a_vocab_only_model_has_no_native_step() -> None:
    """A vocab-only model has no tensors for the C step to read (it crashed the process on the
    first decode): the step is refused, so a decode context falls back to the torch path,
    whose forward refuses the model (decode returns -3 with MODEL_VOCAB_ONLY as the cause)."""
    from reference_impl.batch import Batch
    from reference_impl.decoder import Context, ContextParams

    model = Model.from_gguf(fixture_path("mha"), vocab_only=True)
    with pytest.raises(ValueError, match="vocab_only"):
        model.native_step()
    ctx = Context(model, ContextParams(n_ctx=64, n_batch=16, n_ubatch=16))
    assert ctx.native_step is None
    assert ctx.decode(Batch.from_lists([1, 2, 3])) == -3
    assert "MODEL_VOCAB_ONLY" in str(ctx.last_error)
