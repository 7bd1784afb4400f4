"""kernels.dispatch: the path rule, tiling checks and the trace."""

from __future__ import annotations

import pytest
import torch

from kernels import decode_attention, dispatch
from reference_impl.errors import KernelError

CFG = dispatch.DispatchConfig(two_pass_min_tokens=100)


@pytest.mark.parametrize(
    "requested,ineligible,tokens,expected",
    [
        ("torch", "", 10, ("torch", "requested")),
        ("streaming", "", 10, ("torch", "requested")),
        ("1pass", "", 10_000, ("triton-1pass", "requested")),
        ("2pass", "", 0, ("triton-2pass", "requested")),
        ("auto", "", 99, ("triton-1pass", "auto: 99 keys < two_pass_min_tokens")),
        ("auto", "", 100, ("triton-2pass", "auto: 100 keys >= two_pass_min_tokens")),
        ("1pass", "head dim 12", 5, ("torch", "fallback: head dim 12")),
        ("auto", "dtype", 500, ("torch", "fallback: dtype")),
    ],
)
def test_choose(requested: str, ineligible: str, tokens: int, expected: tuple[str, str]) -> None:
    assert dispatch.choose(requested, ineligible, tokens, "torch", CFG) == expected


@pytest.mark.parametrize(
    "block_n,partition", [(0, 32), (24, 48), (2048, 2048), (32, 0), (32, 48), (32, 16)]
)
def test_bad_tiling(block_n: int, partition: int) -> None:
    with pytest.raises(KernelError) as err:
        dispatch.check_tiling(block_n, partition)
    assert err.value.code == "KRN_BAD_PARTITION"


def test_bad_config() -> None:
    with pytest.raises(KernelError):
        dispatch.DispatchConfig(block_n=48)
    with pytest.raises(KernelError):
        dispatch.DispatchConfig(two_pass_min_tokens=-1)


def test_pow2_helpers() -> None:
    assert [dispatch.next_pow2(n) for n in (0, 1, 2, 3, 5, 64, 65)] == [1, 1, 2, 4, 8, 64, 128]
    assert [dispatch.is_pow2(n) for n in (0, 1, 6, 8)] == [False, True, False, True]


def _call(trace: list[dispatch.DispatchRecord] | None = None) -> None:
    q = torch.zeros(1, 2, 8)
    kv = torch.zeros(3, 1, 8)
    decode_attention.gqa_decode(q, kv, kv, torch.zeros(1, 3), 0.5, path="torch", trace=trace)


def test_trace_and_nested_recordings() -> None:
    trace: list[dispatch.DispatchRecord] = []
    with dispatch.recording() as outer:
        _call(trace)
        with dispatch.recording() as inner:
            _call()
        _call()
    _call()
    assert len(trace) == 1 and len(outer) == 3 and len(inner) == 1
    rec = trace[0]
    assert (rec.op, rec.path, rec.requested, rec.reason, rec.tokens) == (
        "gqa_decode",
        "torch",
        "torch",
        "requested",
        3,
    )
    assert not rec.fused and not rec.interpreter


def test_unknown_path() -> None:
    with pytest.raises(KernelError) as err:
        dispatch.check_request("fast")
    assert err.value.code == "KRN_BAD_PATH"
