"""Backend sampling (SMP-084, SMP-089): a chain attached to a sequence of a decode context
(``sampling.backend``, llama.cpp's ``llama_set_sampler``) gives, for each output row of the
sequence, the token the same chain description gives on the CPU.

Every test decodes the same batches in two contexts of the target: one with chains attached
and a twin without any, whose rows are the raw logits (an engine that samples in the graph may
hand back the graph's filtered logits from ``get_logits_ith``; llama.cpp does). The expected
token of an output row is a CPU chain's ``sampler_sample`` over the twin's row: the target's
own chain, or the peer's in the differential test. The sampled token is fed back, so every
step depends on the previous ones; each sequence has its own seed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from conformance.sampling.support import needs_samplers
from reference_impl.batch.types import Batch

# three sequences with prompts of different lengths; n_ubatch 8 splits the first batch
PROMPTS = {0: [1, 5, 9, 13], 1: [1, 7, 22], 2: [1, 40, 41, 42, 43]}
PARAMS = {"n_ctx": 768, "n_batch": 64, "n_ubatch": 8, "n_seq_max": 3, "kv_unified": True}


def _with_seed(spec: list[Any], seq: int) -> list[Any]:
    """``spec`` with every seed moved by ``7 * seq`` (one stream per sequence)."""
    out: list[Any] = []
    for entry in spec:
        if isinstance(entry, list) and "seed" in entry[1]:
            entry = [entry[0], {**entry[1], "seed": entry[1]["seed"] + 7 * seq}]
        out.append(entry)
    return out


# Chains whose samplers llama.cpp 0.3.36 runs in the graph, and hybrids (a sampler without a
# graph implementation ends the graph part; the rest runs on the CPU). Not here: top-k or
# temp-ext (delta > 0) before a selecting sampler, and greedy after top-k, top-p or
# temp <= 0: spec/sampling.md, *Backend sampling*.
BACKEND_CHAINS = {
    "greedy": ["greedy"],
    "dist": [["dist", {"seed": 42}]],
    "temp-dist": [["temp", {"t": 0.3}], ["dist", {"seed": 5}]],
    "temp0-dist": [["temp", {"t": 0.0}], ["dist", {"seed": 5}]],
    "min_p-dist": [["min_p", {"p": 0.05, "min_keep": 1}], ["dist", {"seed": 3}]],
    "top_p-dist": [["top_p", {"p": 0.9, "min_keep": 1}], ["dist", {"seed": 3}]],
    "min_p-temp-top_p-dist": [
        ["min_p", {"p": 0.02, "min_keep": 1}],
        ["temp", {"t": 1.3}],
        ["top_p", {"p": 0.8, "min_keep": 1}],
        ["dist", {"seed": 9}],
    ],
    "temp-min_p-greedy": [["temp", {"t": 0.5}], ["min_p", {"p": 0.1, "min_keep": 1}], "greedy"],
    "penalties-greedy": [
        ["penalties", {"last_n": 8, "repeat": 1.5, "freq": 0.5, "present": 0.5}],
        "greedy",
    ],
    "logit_bias-dist": [
        ["logit_bias", {"biases": [[3, 2.0], [332, -1.0], [100, 1.5]]}],
        ["dist", {"seed": 4}],
    ],
}
HYBRID_CHAINS = {
    "temp-typical-dist": [
        ["temp", {"t": 0.8}],
        ["typical", {"p": 0.9, "min_keep": 1}],
        ["dist", {"seed": 4}],
    ],
    "min_p-xtc-dist": [
        ["min_p", {"p": 0.05, "min_keep": 1}],
        ["xtc", {"p": 0.9, "t": 0.1, "min_keep": 1, "seed": 2}],
        ["dist", {"seed": 4}],
    ],
    "top_k-mirostat_v2": [
        ["top_k", {"k": 20}],
        ["mirostat_v2", {"seed": 3, "tau": 5.0, "eta": 0.1}],
    ],
    "temp-top_n_sigma-dist": [
        ["temp", {"t": 0.8}],
        ["top_n_sigma", {"n": 1.0}],
        ["dist", {"seed": 4}],
    ],
}
CHAINS = [
    needs_samplers(spec, spec, id=name)
    for name, spec in {**BACKEND_CHAINS, **HYBRID_CHAINS}.items()
]


@contextmanager
def cpu_chains(engine: Any, specs: dict[int, Any]) -> Iterator[dict[int, Any]]:
    handles = {s: engine.sampler_chain_init(spec) for s, spec in specs.items()}
    try:
        yield handles
    finally:
        for handle in handles.values():
            engine.sampler_free(handle)


def run_steps(
    target: Any,
    new_ctx: Callable[..., Any],
    specs: dict[int, Any],
    oracle: Callable[[int, Any], int],
    plan: list[dict[int, bool]],
) -> list[tuple[int, int, int, int]]:
    """Decode ``plan`` (per step: sequence -> whether its last token is an output; a sequence
    missing from a step is not in that batch) with ``specs`` attached, and return
    ``(step, seq, backend token, oracle token)`` for every output row. ``oracle(seq, logits)``
    samples the CPU chain of ``seq`` over the twin context's row."""
    ctx, twin = new_ctx(**PARAMS), new_ctx(**PARAMS)
    for s, spec in specs.items():
        target.backend_set_sampler(ctx, s, spec)
    pending = {s: list(p) for s, p in PROMPTS.items()}
    pos = dict.fromkeys(PROMPTS, 0)
    rows: list[tuple[int, int, int, int]] = []
    for step, outputs in enumerate(plan):
        tokens: list[int] = []
        positions: list[int] = []
        seqs: list[list[int]] = []
        flags: list[int] = []
        for s, out in outputs.items():
            n = len(pending[s])
            tokens += pending[s]
            positions += range(pos[s], pos[s] + n)
            seqs += [[s]] * n
            flags += [0] * (n - 1) + [int(out)]
            pos[s] += n
        batch = Batch.from_lists(tokens, pos=positions, seq_ids=seqs, logits=flags)
        assert ctx.decode(batch) == 0 and twin.decode(batch) == 0
        last = len(tokens) - 1
        for s in reversed(list(outputs)):
            n = len(pending[s])
            if outputs[s]:
                want = oracle(s, twin.get_logits_ith(last))
                got = target.backend_sample(ctx, s, last)
                rows.append((step, s, got, want))
                pending[s] = [want]
            else:  # no output row: feed a fixed token
                pending[s] = [3 + step]
            last -= n
    return rows


def cpu_oracle_rows(
    target: Any,
    new_ctx: Callable[..., Any],
    spec: list[Any],
    plan: list[dict[int, bool]],
    oracle: Any = None,
) -> list[tuple[int, int, int, int]]:
    """:func:`run_steps` with ``spec`` attached to every sequence (one seed each), the expected
    token of a row being ``sampler_sample`` of that sequence's CPU chain on ``oracle`` (the
    target itself unless another engine is given)."""
    engine = target if oracle is None else oracle
    specs = {s: _with_seed(spec, s) for s in PROMPTS}
    with cpu_chains(engine, specs) as cpu:
        return run_steps(
            target,
            new_ctx,
            specs,
            lambda s, logits: int(engine.sampler_sample(cpu[s], logits)),
            plan,
        )


def assert_same_tokens(rows: list[tuple[int, int, int, int]]) -> None:
    wrong = [r for r in rows if r[2] != r[3]]
    assert not wrong, (
        f"{len(wrong)} of {len(rows)} rows differ (step, seq, backend, CPU chain): {wrong}"
    )


ALL_OUTPUTS = [dict.fromkeys(PROMPTS, True)] * 6


@pytest.mark.invariant("SMP-084")
@pytest.mark.requires("sampling.backend", "sampling.chain", "decoder.logits")
@pytest.mark.parametrize("spec", CHAINS)
def test_backend_token_equals_the_cpu_chain(
    target: Any, new_ctx: Callable[..., Any], spec: list[Any]
) -> None:
    rows = cpu_oracle_rows(target, new_ctx, spec, ALL_OUTPUTS)
    assert len(rows) == 18
    assert_same_tokens(rows)


@pytest.mark.invariant("SMP-084")
@pytest.mark.requires("sampling.backend", "sampling.chain", "decoder.logits")
@pytest.mark.parametrize("spec", CHAINS)
def test_backend_token_equals_the_peer_cpu_chain(
    target: Any, peer: Any, new_ctx: Callable[..., Any], spec: list[Any]
) -> None:
    rows = cpu_oracle_rows(target, new_ctx, spec, ALL_OUTPUTS, oracle=peer)
    assert_same_tokens(rows)


# steps where some sequences are absent, or present without an output row
GAPPY = [
    {0: True, 1: True, 2: True},
    {0: True, 1: False, 2: False},
    {0: True, 2: True},
    {1: True},
    {0: False, 1: True, 2: True},
    {2: False, 0: True},
    {0: True, 1: True, 2: True},
]


@pytest.mark.invariant("SMP-089")
@pytest.mark.requires(
    "sampling.backend", "sampling.chain", "decoder.logits", "sampling.dist", "sampling.temp"
)
@pytest.mark.parametrize(
    "spec",
    [[["dist", {"seed": 11}]], [["temp", {"t": 0.4}], ["dist", {"seed": 2}]]],
    ids=["dist", "temp-dist"],
)
def test_backend_dist_draws_once_per_output_row(
    target: Any, new_ctx: Callable[..., Any], spec: list[Any]
) -> None:
    rows = cpu_oracle_rows(target, new_ctx, spec, GAPPY)
    assert [(step, s) for step, s, *_ in rows] == [
        (0, 2), (0, 1), (0, 0), (1, 0), (2, 2), (2, 0), (3, 1),
        (4, 2), (4, 1), (5, 0), (6, 2), (6, 1), (6, 0),
    ]  # fmt: skip
    assert_same_tokens(rows)
