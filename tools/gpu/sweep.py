"""Tiling sweep of the fused decoupled decode on a CUDA device (never run by CI).

    TRITON_INTERPRET=0 python3 -m tools.gpu.sweep [CONTEXT ...]   # default 1024 8192 32768

For each context (B=8, H=32, head dims 32/64/128, residual 128: the benchmark's geometry) it
times every path x block_n x partition_size x num_warps, checks each output against the
streaming path (NMSE), and prints the fastest configurations next to the default one, with the
achieved bandwidth over the KV bytes read. ``num_warps`` is not a knob of the public API: the
sweep injects it at launch, so a winner there needs a code change to become the default.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from typing import Any

import torch

from kernels import decoupled_triton as K
from kernels.decoupled import decoupled_decode
from kernels.dispatch import DEFAULT_CONFIG
from tools.bench.cases.test_kernels import (
    GPU_B,
    GPU_DIMS,
    GPU_H,
    GPU_RESID,
    _decoupled_inputs,
    _kv_bytes,
)

KERNELS = ("update_kernel", "partition_kernel", "reduce_kernel", "finalize_kernel")
BLOCKS, PARTITIONS, WARPS = (16, 32, 64, 128), (256, 1024, 4096), (1, 2, 4, 8)


class _Warps:
    """A jitted kernel whose launches all get ``num_warps``."""

    def __init__(self, kernel: Any, warps: int) -> None:
        self.kernel, self.warps = kernel, warps

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        launch = self.kernel[grid]
        return lambda *a, **k: launch(*a, num_warps=self.warps, **k)


def _median_ms(fn: Callable[[], object], reps: int = 15) -> float:
    fn()
    torch.cuda.synchronize()
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(reps)
    ]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in events)
    return times[len(times) // 2]


def sweep(context: int) -> tuple[float, list[tuple[str, int, int, int, float, float]]]:
    """MB of KV read per step, and (path, block_n, partition_size, num_warps, ms, NMSE vs
    streaming) per configuration."""
    q_sem, q_geo, cache, null = _decoupled_inputs(
        GPU_B, GPU_H, GPU_DIMS, context, GPU_RESID, "cuda"
    )
    ref = decoupled_decode(q_sem, q_geo, cache, null=null, path="streaming").double()
    original = {name: getattr(K, name) for name in KERNELS}
    rows = []
    try:
        for path, bn, ps, warps in itertools.product(("1pass", "2pass"), BLOCKS, PARTITIONS, WARPS):
            if ps % bn:
                continue
            for name, kernel in original.items():
                setattr(K, name, _Warps(kernel, warps))

            def run(path: str = path, bn: int = bn, ps: int = ps) -> torch.Tensor:
                return decoupled_decode(
                    q_sem, q_geo, cache, null=null, path=path, block_n=bn, partition_size=ps
                )

            out = run().double()
            err = float(((out - ref) ** 2).mean() / (ref**2).mean().clamp_min(1e-30))
            rows.append((path, bn, ps, warps, _median_ms(run), err))
    finally:
        for name, kernel in original.items():
            setattr(K, name, kernel)
    return _kv_bytes(cache) / 1e6, rows


def main(argv: list[str]) -> int:
    if not torch.cuda.is_available():
        print("the sweep needs a CUDA device and TRITON_INTERPRET=0", file=sys.stderr)
        return 2
    for context in [int(a) for a in argv] or [1024, 8192, 32768]:
        mb, rows = sweep(context)
        print(f"context {context}: {mb:.1f} MB of KV per step; fastest 8, then the default")
        default = [
            r
            for r in rows
            if (r[1], r[2], r[3]) == (DEFAULT_CONFIG.block_n, DEFAULT_CONFIG.partition_size, 4)
        ]
        for path, bn, ps, warps, ms, err in sorted(rows, key=lambda r: r[4])[:8] + default:
            print(
                f"  {path} block_n={bn:<4d} partition={ps:<5d} warps={warps} "
                f"{ms:8.3f} ms {mb / ms:7.1f} GB/s  nmse={err:.1e}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
