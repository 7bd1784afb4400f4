"""kernels.policy: the dataclass view of a policy string."""

from __future__ import annotations

from kernels.policy import KVCachePolicy, TensorFormat, parse_policy


def test_parse_short_round_trip_and_fused_layout() -> None:
    p = parse_policy("ksem=q4_0@32,kgeo=q8_0@32,v=q4_0@32,resid=128")
    assert p == KVCachePolicy(TensorFormat("q4_0"), TensorFormat("q8_0"), TensorFormat("q4_0"), 128)
    assert p.is_fused_layout() and parse_policy(p.short()) == p
    assert not parse_policy("ksem=q4_0,kgeo=q8_0,v=fp16,resid=0").is_fused_layout()


def test_unicode_digits_are_not_block_sizes() -> None:
    import pytest

    from reference_impl.errors import KernelError

    with pytest.raises(KernelError) as err:
        parse_policy("ksem=q4_0@３２,kgeo=q8_0,v=q4_0,resid=1")
    assert err.value.code == "QNT_POLICY_BAD_BLOCK"
