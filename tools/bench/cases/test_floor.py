"""Machine floors, measured in the same run as every other case.

* ``test_memcpy_numpy``: a numpy copy of N bytes, the memory-bandwidth floor. The report
  divides every case that declares ``bytes_moved`` by the largest of these to give an
  efficiency relative to this machine, not to a datasheet. Traffic counts the read and the
  write (2N), as STREAM's copy does.
* ``test_memcpy_memoryview``: the same copy through Python's buffer protocol, paired with the
  numpy copy. A stand-in subject (the harness's own pair, so a run with no area cases still
  shows a peer ratio); expect a ratio near 1.
* ``test_python_loop``: a pure-Python integer loop: how fast this machine runs the
  interpreter, the scale of every reference-implementation figure.
"""

from __future__ import annotations

import numpy as np
import pytest

from tools.bench.common import record

SIZES = {"1MiB": 1 << 20, "64MiB": 64 << 20}


def _buffers(n: int) -> tuple[np.ndarray, np.ndarray]:
    src = np.random.default_rng(0).integers(0, 256, n, dtype=np.uint8)
    return src, np.zeros_like(src)


@pytest.mark.parametrize("size", list(SIZES))
def test_memcpy_numpy(benchmark: object, size: str) -> None:
    n = SIZES[size]
    src, dst = _buffers(n)
    benchmark(np.copyto, dst, src)  # type: ignore[operator]
    assert np.array_equal(dst, src)
    record(
        benchmark,
        area="floor",
        work=n,
        unit="bytes",
        params={"bytes": n},
        pair=f"copy-{size}",
        role="peer",
        peer="numpy-memcpy",
        bytes_moved=2 * n,
    )


@pytest.mark.parametrize("size", list(SIZES))
def test_memcpy_memoryview(benchmark: object, size: str) -> None:
    n = SIZES[size]
    src, dst = _buffers(n)
    s, d = src.data, dst.data

    def copy() -> None:
        d[:] = s

    benchmark(copy)  # type: ignore[operator]
    assert np.array_equal(dst, src)
    record(
        benchmark,
        area="floor",
        work=n,
        unit="bytes",
        params={"bytes": n},
        pair=f"copy-{size}",
        role="subject",
        bytes_moved=2 * n,
    )


def _loop(n: int) -> int:
    acc = 0
    for i in range(n):
        acc += i & 7
    return acc


def test_python_loop(benchmark: object) -> None:
    n = 100_000
    result = benchmark(_loop, n)  # type: ignore[operator]
    assert result == sum(i & 7 for i in range(n))
    record(benchmark, area="floor", work=n, unit="iterations", params={"n": n})
