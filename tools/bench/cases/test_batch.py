"""Bench: the batch sanitizer and each split mode (reference_impl.batch).

Work is ``n_tokens`` tokens per round (throughput in tokens/s). The batch is what parallel
prompt processing sends: ``n_seqs`` sequences of consecutive tokens, explicit positions and
sequence ids, one output (the last token) per sequence; ``n_ubatch`` is llama.cpp's default
512. ``sanitize_split_equal`` is the decode front end of a multi-stream KV cache: sanitize, then
sequential split_equal until the batch is used up.

Correctness is checked outside the timed function; timings are never asserted.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from reference_impl.batch.sanitize import SanitizedBatch, sanitize
from reference_impl.batch.split import BatchSplitter
from reference_impl.batch.types import Batch
from tools.bench.common import record

N_TOKENS = (32, 512, 4096, 32768)
N_SEQS = (1, 4, 64)
N_UBATCH = 512
N_VOCAB = 32_000
N_SEQ_MAX = 64


def make_batch(n_tokens: int, n_seqs: int) -> Batch:
    """``n_seqs`` sequences (ids 0..n_seqs-1, at most one per token) of consecutive tokens."""
    n_seqs = min(n_seqs, n_tokens)
    seq = (np.arange(n_tokens, dtype=np.int64) * n_seqs // n_tokens).astype(np.int32)
    starts = np.searchsorted(seq, seq, side="left")
    pos = (np.arange(n_tokens) - starts).astype(np.int32)
    last = np.r_[seq[1:] != seq[:-1], True]
    return Batch(
        token=(np.arange(n_tokens, dtype=np.int32) * 7919) % N_VOCAB,
        pos=pos,
        n_seq_id=np.ones(n_tokens, dtype=np.int32),
        seq_id=seq.reshape(-1, 1),
        logits=last.astype(np.int8),
    )


def _sanitize(b: Batch) -> SanitizedBatch:
    return sanitize(b, n_vocab=N_VOCAB, n_seq_max=N_SEQ_MAX)


def _drain(sb: SanitizedBatch, mode: str) -> int:
    sp = BatchSplitter(sb)
    n = 0
    while True:
        if mode == "simple":
            ub = sp.split_simple(N_UBATCH)
        elif mode == "equal":
            ub = sp.split_equal(N_UBATCH, True)
        else:
            ub = sp.split_seq(N_UBATCH)
        if ub.n_tokens == 0:
            return n
        n += ub.n_tokens


def _record(benchmark: Any, n_tokens: int, params: dict[str, Any]) -> None:
    record(benchmark, area="batch", work=n_tokens, unit="tokens", params=params)
    # tokens/s in the saved JSON even where record() does not add a throughput itself
    median = getattr(getattr(getattr(benchmark, "stats", None), "stats", None), "median", None)
    if isinstance(median, float) and median > 0:
        benchmark.extra_info["tokens_per_s"] = n_tokens / median


def _params(n_tokens: int, n_seqs: int) -> dict[str, Any]:
    return {"n_tokens": n_tokens, "n_seqs": min(n_seqs, n_tokens), "n_ubatch": N_UBATCH}


CASES = [(n, s) for n in N_TOKENS for s in N_SEQS]
IDS = [f"{n}tok-{s}seq" for n, s in CASES]


@pytest.mark.parametrize(("n_tokens", "n_seqs"), CASES, ids=IDS)
def test_sanitize(benchmark: Any, n_tokens: int, n_seqs: int) -> None:
    b = make_batch(n_tokens, n_seqs)
    sb = benchmark(_sanitize, b)
    assert sb.n_tokens == n_tokens and sb.n_outputs == min(n_seqs, n_tokens)
    _record(benchmark, n_tokens, _params(n_tokens, n_seqs))


@pytest.mark.parametrize("mode", ["simple", "equal", "seq"])
@pytest.mark.parametrize(("n_tokens", "n_seqs"), CASES, ids=IDS)
def test_split(benchmark: Any, n_tokens: int, n_seqs: int, mode: str) -> None:
    sb = _sanitize(make_batch(n_tokens, n_seqs))
    used = benchmark(_drain, sb, mode)
    assert used == n_tokens
    params = {**_params(n_tokens, n_seqs), "mode": mode}
    _record(benchmark, n_tokens, params)


def _front_end(b: Batch) -> int:
    return _drain(_sanitize(b), "equal")


@pytest.mark.parametrize(("n_tokens", "n_seqs"), CASES, ids=IDS)
def test_sanitize_split_equal(benchmark: Any, n_tokens: int, n_seqs: int) -> None:
    b = make_batch(n_tokens, n_seqs)
    assert benchmark(_front_end, b) == n_tokens
    _record(benchmark, n_tokens, _params(n_tokens, n_seqs))
