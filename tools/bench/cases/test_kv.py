"""KV cache bench cases (area ``kv``): slot planning + apply, sequence ops, KQ mask.

* ``test_prepare_apply``: ``prepare([ubatch]) + apply_ubatch`` of 1, 32 and 512 tokens into
  caches of 4096 and 65536 cells already holding 1024 tokens (the same fill, so only the cache
  size differs). The target is a cost that follows the ubatch, not the cache: the 65536-cell
  figure within 1.5x of the 4096-cell one for 32 tokens. Work = cells written.
* ``test_seq_op``: each sequence operation over a whole sequence of 4096 / 65536 cells.
  Work = cells the operation covers.
* ``test_kq_mask``: the additive mask of a ubatch of 1, 32 or 512 tokens over ``n_kv`` columns.
  Work = mask entries.

Each round starts from the same state (the untimed setup undoes the previous round).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from conformance.strategies.kv import run_of
from reference_impl.kv.cache import KVCache, KVCacheConfig
from reference_impl.kv.mask import build_kq_mask
from tools.bench.common import record

PREFILL = 1024


def _filled(kv_size: int, n: int, *, n_seq_max: int = 2) -> KVCache:
    cache = KVCache(KVCacheConfig(kv_size=kv_size, n_seq_max=n_seq_max, unified=True))
    if n:
        ub = run_of(0, 0, n)
        slots = cache.prepare([ub])
        assert slots is not None
        cache.apply_ubatch(slots[0], ub)
    return cache


@pytest.mark.parametrize("kv_size", [4096, 65536])
@pytest.mark.parametrize("n_tokens", [1, 32, 512])
def test_prepare_apply(benchmark: Any, kv_size: int, n_tokens: int) -> None:
    cache = _filled(kv_size, PREFILL)
    ub = run_of(0, PREFILL, n_tokens)
    undo: list[Any] = []

    def setup() -> None:
        while undo:
            cache.restore(undo.pop())

    def run() -> None:
        slots = cache.prepare([ub])
        assert slots is not None
        undo.append(cache.apply_ubatch(slots[0], ub))

    benchmark.pedantic(run, setup=setup, rounds=60 if n_tokens < 512 else 20, iterations=1)
    assert cache.seq_pos_max(0) == PREFILL + n_tokens - 1
    record(
        benchmark,
        area="kv",
        work=n_tokens,
        unit="cells",
        params={"kv_size": kv_size, "n_tokens": n_tokens, "prefill": PREFILL},
    )


SEQ_OPS: dict[str, Callable[[KVCache], object]] = {
    "seq_rm": lambda c: c.seq_rm(0, -1, -1),
    "seq_cp": lambda c: c.seq_cp(0, 1, -1, -1),
    "seq_keep": lambda c: c.seq_keep(1),
    "seq_add": lambda c: c.seq_add(0, -1, -1, 3),
    "seq_div": lambda c: c.seq_div(0, -1, -1, 2),
    "seq_pos_max": lambda c: c.seq_pos_max(0),
}


@pytest.mark.parametrize("kv_size", [4096, 65536])
@pytest.mark.parametrize("op", list(SEQ_OPS))
def test_seq_op(benchmark: Any, kv_size: int, op: str) -> None:
    n = kv_size // 2
    state: dict[str, KVCache] = {}

    def setup() -> tuple[tuple[KVCache], dict[str, Any]]:
        state["c"] = _filled(kv_size, n)
        return (state["c"],), {}

    benchmark.pedantic(SEQ_OPS[op], setup=setup, rounds=5 if kv_size > 4096 else 15, iterations=1)
    record(
        benchmark,
        area="kv",
        work=n,
        unit="cells",
        params={"kv_size": kv_size, "op": op, "cells": n},
    )


@pytest.mark.parametrize(("kv_size", "n_tokens"), [(4096, 1), (4096, 32), (4096, 512), (65536, 32)])
def test_kq_mask(benchmark: Any, kv_size: int, n_tokens: int) -> None:
    cache = _filled(kv_size, kv_size - n_tokens)
    ub = run_of(0, kv_size - n_tokens, n_tokens)
    slots = cache.prepare([ub])
    assert slots is not None
    cache.apply_ubatch(slots[0], ub)
    n_kv = cache.get_n_kv(slots[0])
    assert n_kv == kv_size
    mask = benchmark.pedantic(
        build_kq_mask, args=(cache, ub, n_kv), rounds=20 if n_tokens * n_kv < 1 << 22 else 5
    )
    assert mask.shape == (1, n_tokens, n_kv)
    record(
        benchmark,
        area="kv",
        work=n_tokens * n_kv,
        unit="mask entries",
        params={"kv_size": kv_size, "n_tokens": n_tokens, "n_kv": n_kv},
        bytes_moved=4 * n_tokens * n_kv,
    )
