"""kernels.decoupled / decode_attention internals: fallbacks, errors, records."""

from __future__ import annotations

import pytest
import torch

from kernels import decode_attention, decoupled, dispatch
from kernels._triton import kernel_device
from kernels.decoupled_cache import DecoupledDims, DecoupledKVCache, NullKV
from reference_impl.errors import KernelError

DIMS = DecoupledDims(2, 8, 8, 16)


def _cache(
    length: int = 10, policy: str = "ksem=q4_0,kgeo=q8_0,v=q4_0,resid=4"
) -> DecoupledKVCache:
    # On the kernels' device (cuda when compiled), else every fused request would fall back.
    dev = kernel_device()
    c = DecoupledKVCache(policy, DIMS, 2, max(length, 16), device=dev)
    g = torch.Generator().manual_seed(0)
    c.append(*(torch.randn(2, length, w, generator=g).to(dev) for w in (16, 16, 32)))
    return c


def _q() -> tuple[torch.Tensor, torch.Tensor]:
    dev = kernel_device()
    return torch.randn(2, 2, 8).to(dev), torch.randn(2, 2, 8).to(dev)


def test_without_triton_the_streaming_path_runs_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(decoupled, "triton_available", lambda: False)
    monkeypatch.setattr(decoupled, "unavailable_reason", lambda: "triton failed to import (x)")
    trace: list[dispatch.DispatchRecord] = []
    decoupled.decoupled_decode(*_q(), _cache(), path="1pass", trace=trace)
    assert (
        trace[0].path == "streaming" and trace[0].reason == "fallback: triton failed to import (x)"
    )


def test_record_details() -> None:
    trace: list[dispatch.DispatchRecord] = []
    decoupled.decoupled_decode(*_q(), _cache(70), path="2pass", partition_size=32, trace=trace)
    d = trace[0].detail
    assert (d["prefix_len"], d["tail_len"], d["partitions"], d["launches"]) == (66, 4, 3, 3)
    decoupled.decoupled_decode(*_q(), _cache(70), path="1pass", partition_size=32, trace=trace)
    assert trace[1].detail["launches"] == 3 + 1


@pytest.mark.parametrize(
    "kwargs,code",
    [
        ({"q_sem": torch.zeros(2, 2, 4)}, "KRN_BAD_SHAPE"),
        ({"q_geo": torch.zeros(2, 2, 8, dtype=torch.int64)}, "KRN_BAD_DTYPE"),
        (
            {"null": NullKV(torch.zeros(2, 8), torch.zeros(2, 8), torch.zeros(2, 8))},
            "KRN_BAD_SHAPE",
        ),
        ({"path": "3pass"}, "KRN_BAD_PATH"),
        ({"partition_size": 33}, "KRN_BAD_PARTITION"),
    ],
)
def test_decoupled_bad_inputs(kwargs: dict[str, object], code: str) -> None:
    q_sem, q_geo = _q()
    args: dict[str, object] = {"q_sem": q_sem, "q_geo": q_geo, "path": "auto"}
    args.update(kwargs)
    with pytest.raises(KernelError) as err:
        decoupled.decoupled_decode(args.pop("q_sem"), args.pop("q_geo"), _cache(), **args)  # type: ignore[arg-type]
    assert err.value.code == code


def test_gqa_bf16_falls_back_to_torch() -> None:
    q = torch.randn(1, 2, 8).bfloat16()
    kv = torch.randn(4, 1, 8).bfloat16()
    trace: list[dispatch.DispatchRecord] = []
    out = decode_attention.gqa_decode(q, kv, kv, torch.zeros(1, 4), 0.3, path="1pass", trace=trace)
    assert (
        trace[0].path == "torch" and "bfloat16" in trace[0].reason and out.dtype == torch.bfloat16
    )


def test_cache_errors() -> None:
    with pytest.raises(KernelError):
        DecoupledKVCache("ksem=q4_0,kgeo=q8_0,v=q4_0,resid=4", DIMS, 0, 16)
    c = _cache(16)
    with pytest.raises(KernelError) as err:
        c.append(torch.zeros(2, 1, 16), torch.zeros(2, 1, 16), torch.zeros(2, 1, 32))
    assert err.value.code == "KRN_CACHE_FULL"
    assert c.bytes_per_token() == (16 + 2) + (32 + 2) + (16 + 2)  # padded to one 32-block each
    no_ring = DecoupledKVCache("ksem=fp16,kgeo=fp16,v=fp16,resid=0", DIMS, 1, 4)
    with pytest.raises(KernelError) as err:
        no_ring.k_sem.tail(1)
    assert err.value.code == "KRN_NO_RESIDUAL"
