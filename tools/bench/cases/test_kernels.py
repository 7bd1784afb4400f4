"""Benchmarks of the kernels area: decode attention per step, bytes of KV read, bandwidth.

CPU (no GPU, kernels through Triton's interpreter): the interpreter is **not** a speed measure;
these cases only record its *relative cost* against the torch reference measured in the same
run (pairs ``*-interp``). GPU (compiled kernels, ``nox -s gpu``): q4/q8/q4 fused decoupled
decode against torch SDPA over an fp16 cache of the same attention, B=8, H=32, context 1k, 8k,
32k, with the bytes of KV each reads per decode step (pairs ``decoupled-vs-sdpa-L*``), plus a
device copy as the bandwidth floor. ``kernels.gpu_report`` turns the saved JSON into
docs/kernels-gpu-<device>.md. Correctness is checked once per case, outside the timed call.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from conformance.assertions import assert_nmse
from kernels import _triton
from kernels.decode_attention import gqa_decode
from kernels.decoupled import decoupled_decode
from kernels.decoupled_cache import DecoupledDims, DecoupledKVCache, NullKV
from tools.bench.common import record

AREA = "kernels"
GPU = (not _triton.INTERPRETER) and torch.cuda.is_available()
POLICY = "ksem=q4_0@32,kgeo=q8_0@32,v=q4_0@32,resid={r}"

needs_interpreter = pytest.mark.skipif(not _triton.INTERPRETER, reason="CPU interpreter case")
needs_gpu = pytest.mark.skipif(not GPU, reason="needs a CUDA device and compiled Triton")


def _sync() -> None:
    if GPU:
        torch.cuda.synchronize()


def _decoupled_inputs(
    batch: int, n_head: int, dims: tuple[int, int, int], length: int, resid: int, device: str
) -> tuple[torch.Tensor, torch.Tensor, DecoupledKVCache, NullKV]:
    g = torch.Generator(device="cpu").manual_seed(0)
    d = DecoupledDims(n_head, *dims)
    cache = DecoupledKVCache(POLICY.format(r=resid), d, batch, length, device=device)
    step = 4096  # append in slices to bound the temporary fp32 tensors
    for start in range(0, length, step):
        n = min(step, length - start)
        cache.append(
            *(
                torch.randn(batch, n, w, generator=g).to(device)
                for w in (d.sem_dim, d.geo_dim, d.v_dim)
            )
        )
    q_sem = torch.randn(batch, n_head, dims[0], generator=g).to(device)
    q_geo = torch.randn(batch, n_head, dims[1], generator=g).to(device)
    null = NullKV(*(torch.randn(n_head, w, generator=g).to(device) for w in dims))
    return q_sem, q_geo, cache, null


def _kv_bytes(cache: DecoupledKVCache) -> int:
    """Bytes of KV one decode step reads: quantized prefix + fp16 tail, all rows and heads."""
    tail = cache.tail_len * 2 * (cache.dims.sem_dim + cache.dims.geo_dim + cache.dims.v_dim)
    return cache.batch * (cache.prefix_len * cache.bytes_per_token() + tail)


# ---------------------------------------------------------------------------------------------
# CPU: relative cost of the interpreter
# ---------------------------------------------------------------------------------------------

# Each interpreted kernel path (subject) is paired with the torch reference (peer) measured in
# the same run: the ratio is the interpreter's relative cost, never a kernel speed.


@needs_interpreter
@pytest.mark.parametrize("pair", ["1pass", "2pass"])
@pytest.mark.parametrize("role", ["subject", "peer"])
def test_decoupled_decode_interpreter(benchmark: Any, pair: str, role: str) -> None:
    path = pair if role == "subject" else "streaming"
    q_sem, q_geo, cache, null = _decoupled_inputs(2, 4, (16, 32, 64), 256, 32, "cpu")
    ref = decoupled_decode(q_sem, q_geo, cache, null=null, path="streaming")
    trace: list[Any] = []
    out = decoupled_decode(
        q_sem, q_geo, cache, null=null, path=path, partition_size=64, trace=trace
    )
    assert trace[0].path == ("streaming" if role == "peer" else f"triton-{path}")
    assert torch.allclose(out, ref, atol=1e-4)
    benchmark.pedantic(
        lambda: decoupled_decode(q_sem, q_geo, cache, null=null, path=path, partition_size=64),
        rounds=3,
        warmup_rounds=1,
    )
    record(
        benchmark,
        area=AREA,
        work=cache.batch,
        unit="tokens",
        params={"path": trace[0].path, "B": 2, "H": 4, "L": 256, "resid": 32, "interpreter": True},
        pair=f"decoupled-{pair}-interp",
        role=role,
        peer="torch streaming reference" if role == "peer" else None,
        bytes_moved=_kv_bytes(cache),
    )


@needs_interpreter
@pytest.mark.parametrize("pair", ["1pass", "2pass"])
@pytest.mark.parametrize("role", ["subject", "peer"])
def test_gqa_decode_interpreter(benchmark: Any, pair: str, role: str) -> None:
    path = pair if role == "subject" else "torch"
    g = torch.Generator().manual_seed(0)
    k = torch.randn(256, 2, 64, generator=g)
    v = torch.randn(256, 2, 64, generator=g)
    q = torch.randn(1, 8, 64, generator=g)
    mask = torch.zeros(1, 256)

    def run() -> torch.Tensor:
        return gqa_decode(q, k, v, mask, 0.125, path=path, partition_size=64)

    assert torch.allclose(run(), gqa_decode(q, k, v, mask, 0.125, path="torch"), atol=1e-5)
    benchmark.pedantic(run, rounds=3, warmup_rounds=1)
    record(
        benchmark,
        area=AREA,
        work=1,
        unit="tokens",
        params={
            "path": path,
            "n_head": 8,
            "n_head_kv": 2,
            "D": 64,
            "n_kv": 256,
            "interpreter": True,
        },
        pair=f"gqa-{pair}-interp",
        role=role,
        peer="torch reference" if role == "peer" else None,
        bytes_moved=2 * 256 * 2 * 64 * 4,
    )


# ---------------------------------------------------------------------------------------------
# GPU: fused q4/q8/q4 decode vs torch SDPA over an fp16 cache
# ---------------------------------------------------------------------------------------------

GPU_B, GPU_H, GPU_DIMS, GPU_RESID = 8, 32, (32, 64, 128), 128
CONTEXTS = {"1k": 1024, "8k": 8192, "32k": 32768}


@needs_gpu
def test_device_copy_bandwidth(benchmark: Any) -> None:
    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)

    def run() -> None:
        dst.copy_(src)
        _sync()

    benchmark.pedantic(run, rounds=20, warmup_rounds=3)
    record(
        benchmark,
        area=AREA,
        work=1,
        unit="copies",
        params={"bytes": n, "device": torch.cuda.get_device_name()},
        pair="device-copy",
        role="peer",
        peer="torch copy_",
        bytes_moved=2 * n,
    )


@needs_gpu
@pytest.mark.parametrize("context", list(CONTEXTS))
def test_decoupled_fused_gpu(benchmark: Any, context: str) -> None:
    length = CONTEXTS[context]
    q_sem, q_geo, cache, null = _decoupled_inputs(GPU_B, GPU_H, GPU_DIMS, length, GPU_RESID, "cuda")
    trace: list[Any] = []
    out = decoupled_decode(q_sem, q_geo, cache, null=null, trace=trace)
    ref = decoupled_decode(q_sem, q_geo, cache, null=null, path="streaming")
    assert trace[0].fused, trace[0].path
    assert_nmse(ref, out, 1e-10, trace[0].path)

    def run() -> None:
        decoupled_decode(q_sem, q_geo, cache, null=null)
        _sync()

    benchmark.pedantic(run, rounds=30, warmup_rounds=5)
    record(
        benchmark,
        area=AREA,
        work=GPU_B,
        unit="tokens",
        params={
            "path": trace[0].path,
            "B": GPU_B,
            "H": GPU_H,
            "head_dims": list(GPU_DIMS),
            "context": length,
            "resid": GPU_RESID,
            "device": torch.cuda.get_device_name(),
        },
        pair=f"decoupled-vs-sdpa-{context}",
        role="subject",
        bytes_moved=_kv_bytes(cache),
    )


@needs_gpu
@pytest.mark.parametrize("context", list(CONTEXTS))
def test_sdpa_fp16_gpu(benchmark: Any, context: str) -> None:
    """The same decoupled attention as one SDPA over an fp16 cache: q·[k_sem‖k_geo], v."""
    length = CONTEXTS[context]
    ds, dg, dv = GPU_DIMS
    g = torch.Generator(device="cuda").manual_seed(0)
    k = torch.randn(GPU_B, GPU_H, length, ds + dg, generator=g, device="cuda", dtype=torch.float16)
    v = torch.randn(GPU_B, GPU_H, length, dv, generator=g, device="cuda", dtype=torch.float16)
    q = torch.randn(GPU_B, GPU_H, 1, ds + dg, generator=g, device="cuda", dtype=torch.float16)
    q[..., :ds] /= math.sqrt(ds)
    q[..., ds:] /= math.sqrt(dg)

    def run() -> None:
        torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=1.0)
        _sync()

    benchmark.pedantic(run, rounds=30, warmup_rounds=5)
    record(
        benchmark,
        area=AREA,
        work=GPU_B,
        unit="tokens",
        params={
            "B": GPU_B,
            "H": GPU_H,
            "head_dims": list(GPU_DIMS),
            "context": length,
            "device": torch.cuda.get_device_name(),
        },
        pair=f"decoupled-vs-sdpa-{context}",
        role="peer",
        peer="torch SDPA fp16",
        bytes_moved=GPU_B * GPU_H * length * (ds + dg + dv) * 2,
    )
