"""The KV cache policy string (spec/kv_quant.md QNT-012..QNT-019)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.assertions import raises_code
from conformance.strategies import kernels as ks
from conformance.strategies import kv_quant as qs
from reference_impl.errors import EngineError

CANONICAL = "ksem=q4_0@32,kgeo=q8_0@32,v=q4_0@32,resid=128"


def _refused(target: Any, text: str, code: str, field: str | None) -> Any:
    """parse_kv_policy(text) must raise ``code`` naming ``field``; returns the error."""
    with raises_code(code, field=field, exc=EngineError, what=repr(text)) as raised:
        target.parse_kv_policy(text)
    return raised.value


@pytest.mark.requires("kv_quant.policy")
@pytest.mark.invariant("QNT-012")
def test_canonical_policy_is_the_fused_layout(target: Any) -> None:
    got = target.parse_kv_policy(CANONICAL)
    assert got == {
        "k_sem": "q4_0@32",
        "k_geo": "q8_0@32",
        "v": "q4_0@32",
        "resid": 128,
        "fused": True,
    }


@pytest.mark.requires("kv_quant.policy")
@pytest.mark.invariant("QNT-012")
@pytest.mark.parametrize(
    "text",
    [
        "ksem=q4_0@16,kgeo=q8_0@32,v=q4_0@32,resid=128",
        "ksem=nf4@32,kgeo=q8_0@32,v=q4_0@32,resid=128",
        "ksem=q4_0@32,kgeo=q4_0@32,v=q4_0@32,resid=0",
        "ksem=fp16,kgeo=fp16,v=fp16,resid=0",
        "ksem=q4_0@32,kgeo=q8_0@32,v=q8_0@32,resid=128",
    ],
)
def test_other_policies_are_not_the_fused_layout(target: Any, text: str) -> None:
    assert target.parse_kv_policy(text)["fused"] is False


@pytest.mark.requires("kv_quant.policy")
@pytest.mark.invariant("QNT-013")
@settings(max_examples=ks.examples(40))
@given(fields=qs.policies())
def test_canonical_string_round_trips(target: Any, fields: dict[str, Any]) -> None:
    text = target.format_kv_policy(fields)
    assert text == (
        f"ksem={fields['k_sem']},kgeo={fields['k_geo']},v={fields['v']},resid={fields['resid']}"
    )
    parsed = target.parse_kv_policy(text)
    assert {k: parsed[k] for k in fields} == fields
    assert target.format_kv_policy(parsed) == text


@pytest.mark.requires("kv_quant.policy")
@pytest.mark.invariant("QNT-014")
@settings(max_examples=ks.examples(40))
@given(data=st.data(), fields=qs.policies())
def test_aliases_case_spaces_and_default_block(
    target: Any, data: Any, fields: dict[str, Any]
) -> None:
    text = data.draw(qs.policy_spellings(fields))
    parsed = target.parse_kv_policy(text)
    assert {k: parsed[k] for k in fields} == fields, text


@pytest.mark.requires("kv_quant.policy")
@pytest.mark.invariant("QNT-014")
def test_residual_len_alias_and_default_block(target: Any) -> None:
    got = target.parse_kv_policy("KSem_Kind=q4_0, kgeo = q8_0 ,V=q4_0@32,residual_len=7")
    assert (got["k_sem"], got["k_geo"], got["v"], got["resid"]) == (
        "q4_0@32",
        "q8_0@32",
        "q4_0@32",
        7,
    )


@pytest.mark.requires("kv_quant.policy")
@pytest.mark.invariant("QNT-014")
@pytest.mark.parametrize(
    ("text", "formats"),
    [
        ("ksem=Q4_0,kgeo=q8_0@16,v=NF4@64,resid=0", ("q4_0@32", "q8_0@16", "nf4@64")),
        ("ksem=q4_0 @16,kgeo=q8_0@ 8,v=FP16 @ 128,resid=0", ("q4_0@16", "q8_0@8", "fp16@128")),
    ],
)
def test_kinds_ignore_case_and_spaces_around_the_block(
    target: Any, text: str, formats: tuple[str, str, str]
) -> None:
    got = target.parse_kv_policy(text)
    assert (got["k_sem"], got["k_geo"], got["v"]) == formats, text


@pytest.mark.requires("kv_quant.policy")
@pytest.mark.invariant("QNT-015")
@pytest.mark.parametrize(
    "text,field",
    [
        ("ksem=q5_0@32,kgeo=q8_0,v=q4_0,resid=1", "ksem"),
        ("ksem=q4_0,kgeo=int8,v=q4_0,resid=1", "kgeo"),
        ("ksem=q4_0,kgeo=q8_0,v=bf16,resid=1", "v"),
        ("ksem=,kgeo=q8_0,v=q4_0,resid=1", "ksem"),
    ],
)
def test_unknown_kind(target: Any, text: str, field: str) -> None:
    _refused(target, text, "QNT_POLICY_UNKNOWN_KIND", field)


@pytest.mark.requires("kv_quant.policy")
@pytest.mark.invariant("QNT-016")
@pytest.mark.parametrize(
    "text,field",
    [
        ("ksem=q4_0@0,kgeo=q8_0,v=q4_0,resid=1", "ksem"),
        ("ksem=q4_0@33,kgeo=q8_0,v=q4_0,resid=1", "ksem"),
        ("ksem=q4_0,kgeo=q8_0@-32,v=q4_0,resid=1", "kgeo"),
        ("ksem=q4_0,kgeo=q8_0@x,v=q4_0,resid=1", "kgeo"),
        ("ksem=q4_0,kgeo=q8_0,v=q4_0@512,resid=1", "v"),
        ("ksem=q4_0,kgeo=q8_0,v=q4_0@1,resid=1", "v"),
        ("ksem=q4_0,kgeo=q8_0,v=q4_0@,resid=1", "v"),
    ],
)
def test_bad_block_size(target: Any, text: str, field: str) -> None:
    err = _refused(target, text, "QNT_POLICY_BAD_BLOCK", field)
    if text.partition(f"{field}=")[2].split(",")[0].partition("@")[2].isdigit():
        # an int outside the allowed sizes: the message tells the user which sizes are allowed
        assert "[2, 256]" in str(err), str(err)


@pytest.mark.requires("kv_quant.policy")
@pytest.mark.invariant("QNT-017")
@pytest.mark.parametrize(
    "text,field",
    [
        ("kgeo=q8_0,v=q4_0,resid=1", "ksem"),
        ("ksem=q4_0,v=q4_0,resid=1", "kgeo"),
        ("ksem=q4_0,kgeo=q8_0,resid=1", "v"),
        ("ksem=q4_0,kgeo=q8_0,v=q4_0", "resid"),
        ("resid=1", "ksem"),
    ],
)
def test_missing_key(target: Any, text: str, field: str) -> None:
    _refused(target, text, "QNT_POLICY_MISSING_KEY", field)


@pytest.mark.requires("kv_quant.policy")
@pytest.mark.invariant("QNT-018")
@pytest.mark.parametrize(
    "text,code,field",
    [
        ("ksem=q4_0,kgoe=q8_0,v=q4_0,resid=1", "QNT_POLICY_UNKNOWN_KEY", "kgoe"),
        (
            "ksem=q4_0,kgeo=q8_0,v=q4_0,resid=1,decode_block=64",
            "QNT_POLICY_UNKNOWN_KEY",
            "decode_block",
        ),
        ("ksem=q4_0,kgeo=q8_0,v=q4_0,resid=1,ksemkind=nf4", "QNT_POLICY_DUPLICATE_KEY", "ksem"),
        ("ksem=q4_0,kgeo=q8_0,v=q4_0,resid=1,residual=2", "QNT_POLICY_DUPLICATE_KEY", "resid"),
        ("ksem=q4_0,kgeo=q8_0,v=q4_0,resid=-1", "QNT_POLICY_BAD_RESID", "resid"),
        ("ksem=q4_0,kgeo=q8_0,v=q4_0,resid=lots", "QNT_POLICY_BAD_RESID", "resid"),
        ("ksem=q4_0,kgeo=q8_0,v=q4_0,resid=1.5", "QNT_POLICY_BAD_RESID", "resid"),
        ("ksem=q4_0,kgeo=q8_0,v=q4_0,resid", "QNT_POLICY_SYNTAX", None),
        ("ksem=q4_0,,kgeo=q8_0,v=q4_0,resid=1", "QNT_POLICY_SYNTAX", None),
        ("", "QNT_POLICY_SYNTAX", None),
        (" \t ", "QNT_POLICY_SYNTAX", None),
        (None, "QNT_POLICY_SYNTAX", None),  # not a string: refused, not an AttributeError
        (CANONICAL.encode(), "QNT_POLICY_SYNTAX", None),
    ],
)
def test_malformed_policy(target: Any, text: Any, code: str, field: str | None) -> None:
    _refused(target, text, code, field)


@pytest.mark.requires("kv_quant.formats")
@pytest.mark.invariant("QNT-019")
@pytest.mark.parametrize(
    "kind,dim,qblock,expected",
    [
        ("fp16", 10, 32, 20),
        ("fp32", 10, 32, 40),
        ("q8_0", 32, 32, 34),
        ("q4_0", 32, 32, 18),
        ("nf4", 32, 32, 18),
        ("q8_0", 128, 32, 136),
        ("q4_0", 384, 32, 216),
        ("q8_0", 40, 16, 48 + 6),
        ("q4_0", 40, 16, 24 + 6),
        ("nf4", 384, 64, 192 + 12),
        ("q8_0", 5, 1, 5 + 10),  # a block of one value: the smallest positive size is valid
    ],
)
def test_reported_cost_per_token(
    target: Any, kind: str, dim: int, qblock: int, expected: int
) -> None:
    # The cost the target reports (what a cache sizes its buffers by) is the spec's count; for
    # quantized kinds it also equals what kv_quantize actually stores for one token.
    got = target.kv_bytes_per_token(kind, dim, qblock)
    assert type(got) is int and got == expected, f"{kind}@{qblock} dim {dim}: {got!r}"
    if kind in qs.KINDS:
        codes, scales = target.kv_quantize(torch.randn(1, dim), kind, qblock, "torch")
        stored = codes.numel() * codes.element_size() + scales.numel() * scales.element_size()
        assert stored == got, f"{kind}@{qblock} dim {dim}: stores {stored}, reports {got}"


@pytest.mark.requires("kv_quant.formats")
@pytest.mark.invariant("QNT-019")
@pytest.mark.parametrize(
    "kind,qblock,code",
    [("q5_0", 32, "QNT_BAD_KIND"), ("q4_0", 3, "QNT_BAD_BLOCK"), ("q8_0", 0, "QNT_BAD_BLOCK")],
)
def test_cost_of_a_bad_format_raises(target: Any, kind: str, qblock: int, code: str) -> None:
    with raises_code(code, exc=EngineError, what=f"{kind}@{qblock}"):
        target.kv_bytes_per_token(kind, 32, qblock)
