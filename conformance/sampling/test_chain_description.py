"""Validation of chain descriptions and default-chain parameters (SMP-060..062)."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.assertions import raises_code
from conformance.sampling.support import needs_samplers
from reference_impl.errors import SamplingError

NAN, INF = float("nan"), float("inf")

# (id, spec, code, field, index)
BAD_SPECS: list[tuple[str, Any, str, str, int | None]] = [
    ("not-a-list", {"top_k": 40}, "SMP_SPEC_FORMAT", "spec", None),
    ("a-string", "greedy", "SMP_SPEC_FORMAT", "spec", None),
    ("entry-int", ["greedy", 7], "SMP_SPEC_FORMAT", "spec[1]", 1),
    ("entry-too-long", [["top_k", {"k": 1}, {}]], "SMP_SPEC_FORMAT", "spec[0]", 0),
    ("params-not-mapping", [["top_k", [40]]], "SMP_SPEC_FORMAT", "spec[0]", 0),
    ("unknown-name", ["greedy", ["nucleus", {"p": 0.9}]], "SMP_UNKNOWN_SAMPLER", "spec[1].name", 1),
    ("name-not-str", [[3, {}]], "SMP_UNKNOWN_SAMPLER", "spec[0].name", 0),
    ("unknown-param", [["top_k", {"k": 4, "min_keep": 1}]], "SMP_PARAM", "spec[0].min_keep", 0),
    ("missing-param", [["top_p", {"min_keep": 1}]], "SMP_PARAM", "spec[0].p", 0),
    ("missing-seed", ["greedy", "greedy", "dist"], "SMP_PARAM", "spec[2].seed", 2),
    ("k-float", [["top_k", {"k": 4.0}]], "SMP_PARAM", "spec[0].k", 0),
    ("k-bool", [["top_k", {"k": True}]], "SMP_PARAM", "spec[0].k", 0),
    ("k-range", [["top_k", {"k": 2**31}]], "SMP_PARAM", "spec[0].k", 0),
    ("seed-negative", [["dist", {"seed": -1}]], "SMP_PARAM", "spec[0].seed", 0),
    ("seed-range", [["dist", {"seed": 2**32}]], "SMP_PARAM", "spec[0].seed", 0),
    (
        "min_keep-negative",
        [["min_p", {"p": 0.1, "min_keep": -1}]],
        "SMP_PARAM",
        "spec[0].min_keep",
        0,
    ),
    ("p-string", [["top_p", {"p": "0.9"}]], "SMP_PARAM", "spec[0].p", 0),
    ("p-nan", [["min_p", {"p": NAN}]], "SMP_PARAM", "spec[0].p", 0),
    ("t-inf", [["temp", {"t": INF}]], "SMP_PARAM", "spec[0].t", 0),
    (
        "bias-pair",
        [["logit_bias", {"biases": [[1, 2.0], [3]]}]],
        "SMP_PARAM",
        "spec[0].biases[1]",
        0,
    ),
    ("bias-nan", [["logit_bias", {"biases": [[1, NAN]]}]], "SMP_PARAM", "spec[0].biases[0]", 0),
    ("biases-int", [["logit_bias", {"biases": 5}]], "SMP_PARAM", "spec[0].biases", 0),
    ("biases-str", [["logit_bias", {"biases": "ab"}]], "SMP_PARAM", "spec[0].biases", 0),
    ("dry-breakers-str", [["dry", {"multiplier": 0.8, "breakers": "\n"}]], "SMP_PARAM", "spec[0].breakers", 0),
    ("dry-breaker-str", [["dry", {"multiplier": 0.8, "breakers": [[3], "ab"]}]], "SMP_PARAM", "spec[0].breakers[1]", 0),
    ("dry-breaker-token", [["dry", {"multiplier": 0.8, "breakers": [[3, 2**31]]}]], "SMP_PARAM", "spec[0].breakers[0][1]", 0),
    ("dry-base-nan", [["dry", {"multiplier": 0.8, "base": NAN}]], "SMP_PARAM", "spec[0].base", 0),
    ("dry-strings-no-vocab", [["dry", {"multiplier": 0.8, "breaker_strings": [":"]}]], "SMP_PARAM", "spec[0].breaker_strings", 0),
    ("dry-strings-ascii", [["dry", {"multiplier": 0.8, "breaker_strings": ["é"]}]], "SMP_PARAM", "spec[0].breaker_strings[0]", 0),
    ("dry-strings-and-tokens", [["dry", {"multiplier": 0.8, "breakers": [[1]], "breaker_strings": [":"]}]], "SMP_PARAM", "spec[0].breaker_strings", 0),
    ("xtc-min-keep", [["xtc", {"p": 0.5, "min_keep": -1}]], "SMP_PARAM", "spec[0].min_keep", 0),
    ("mirostat-n-vocab", [["mirostat", {"seed": 1}]], "SMP_PARAM", "spec[0].n_vocab", 0),
    ("mirostat-v2-tau", [["mirostat_v2", {"seed": 1, "tau": INF}]], "SMP_PARAM", "spec[0].tau", 0),
    ("adaptive-p-decay", [["adaptive_p", {"target": 0.5, "seed": 1}]], "SMP_PARAM", "spec[0].decay", 0),
]  # fmt: skip


@pytest.mark.invariant("SMP-060")
@pytest.mark.requires("sampling.chain", "sampling.input_checks")
@pytest.mark.parametrize("case", [needs_samplers(c[1], c, id=c[0]) for c in BAD_SPECS])
def test_malformed_chain_descriptions(
    target: Any, case: tuple[str, Any, str, str, int | None]
) -> None:
    _, spec, code, field, index = case
    with raises_code(code, field=field, index=index, exc=SamplingError):
        target.sampler_chain_init(spec)


@pytest.mark.invariant("SMP-060")
@pytest.mark.requires(
    "sampling.chain",
    "sampling.input_checks",
    "sampling.greedy",
    "sampling.logit_bias",
    "sampling.top_k",
    "sampling.xtc",
)
def test_well_formed_variants_are_accepted(target: Any) -> None:
    spec: list[Any] = [
        "greedy",
        ["greedy"],
        ("top_k", {"k": 3}),
        ["logit_bias", {"biases": [(2, float("-inf"))]}],
        ["xtc", {"p": 0.9, "t": 0.6}],  # t > 0.5: disabled, so accepted
    ]
    target.sampler_free(target.sampler_chain_init(spec))
    target.sampler_free(target.sampler_chain_init([]))


@pytest.mark.invariant("SMP-061")
@pytest.mark.requires(
    "sampling.chain", "sampling.input_checks", "sampling.penalties", "sampling.default_chain"
)
@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("repeat", 0.0),
        ("repeat", -1.0),
        ("repeat", INF),
        ("repeat", NAN),
        ("freq", INF),
        ("present", NAN),
    ],
)
def test_penalty_values_must_be_finite(target: Any, param: str, value: float) -> None:
    with raises_code("SMP_PARAM", field=f"spec[0].{param}", exc=SamplingError):
        target.sampler_chain_init([["penalties", {"last_n": 8, param: value}]])
    key = f"penalty_{param}"
    with raises_code("SMP_PARAM", field=f"params.{key}", exc=SamplingError):
        target.sampler_chain_init_default({key: value})


@pytest.mark.invariant("SMP-062")
@pytest.mark.requires("sampling.chain", "sampling.input_checks", "sampling.default_chain")
@pytest.mark.parametrize(
    ("params", "code", "field"),
    [
        ({"topk": 3}, "SMP_PARAM", "params.topk"),
        ({"top_k": "40"}, "SMP_PARAM", "params.top_k"),
        ({"samplers": ["top_k", "nucleus"]}, "SMP_PARAM", "params.samplers[1]"),
        ({"dry_sequence_breakers": ["\n"]}, "SMP_PARAM", "params.dry_sequence_breakers[0]"),
        ({"mirostat": 3}, "SMP_PARAM", "params.mirostat"),
        ({"mirostat": 1}, "SMP_PARAM", "params.n_vocab"),
        ({"n_vocab": 0}, "SMP_PARAM", "params.n_vocab"),
    ],
)
def test_default_chain_parameters_are_checked(
    target: Any, params: dict[str, Any], code: str, field: str
) -> None:
    with raises_code(code, field=field, exc=SamplingError):
        target.sampler_chain_init_default(params)
    # DRY, XTC and the mirostat modes are fine
    for good in (
        {"dry_multiplier": 0.8, "dry_sequence_breakers": [[3]], "xtc_probability": 0.5},
        {"mirostat": 0},
        {"mirostat": 1, "n_vocab": 100},
        {"mirostat": 2, "samplers": ["adaptive_p"]},
    ):
        target.sampler_free(target.sampler_chain_init_default(good))
