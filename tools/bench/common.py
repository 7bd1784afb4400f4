"""Conventions shared by every bench case (pytest-benchmark).

Cases live in ``tools/bench/cases/test_<area>.py`` and call :func:`record` once, so the saved
JSON carries what the harness needs to report throughput and peer ratios:

* ``area``: spec area (``batch``, ``kv``, ``decoder``, ``kernels``, ...), also the group;
* ``work`` and ``unit``: the amount of work one round does (e.g. 4096 ``tokens``); the
  harness reports ``work / median`` as ``<unit>/s``;
* ``params``: the work size parameters (n_tokens, n_seqs, cells, context, ...);
* ``pair`` and ``role``: cases measuring the same work on the subject (``"subject"``) and on a
  real peer (``"peer"``, e.g. llama.cpp, torch SDPA, a numpy memcpy) share a ``pair`` key so the
  report can give the ratio measured in the same run;
* ``bytes`` (optional): bytes moved per round, for GB/s on memory-bound cases.

Called after the timed call, :func:`record` also stores ``throughput`` (``work / median``, in
``throughput_unit``) and, with ``bytes``, ``gb_per_s``.

Cases that take a thread count (torch, llama.cpp) use :func:`bench_threads`, the count the
harness also gives OpenMP/MKL/OpenBLAS, so subject and peer get the same cores.

The harness times with the process's CPU time by default (on a shared machine it does not
count the time slices other processes take). A case whose work happens outside this process's
CPU time (a GPU kernel, several threads whose latency matters) asks for wall time with
``@pytest.mark.benchmark(timer=time.perf_counter)``.

Never assert on timings in a bench case; check correctness outside the timed function.
"""

from __future__ import annotations

import os
from typing import Any

ROLES = ("subject", "peer")


def bench_threads(default: int = 1) -> int:
    """Threads a case may use (``DC_BENCH_THREADS``, set by the harness; 1 by default)."""
    try:
        return max(1, int(os.environ.get("DC_BENCH_THREADS", default)))
    except ValueError:
        return default


def record(
    benchmark: Any,
    *,
    area: str,
    work: float,
    unit: str,
    params: dict[str, Any] | None = None,
    pair: str | None = None,
    role: str = "subject",
    peer: str | None = None,
    bytes_moved: float | None = None,
) -> None:
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    if role == "peer" and not peer:
        raise ValueError("a peer case must name its peer (e.g. peer='llama.cpp')")
    if work <= 0:
        raise ValueError("work must be positive")
    benchmark.group = area
    info = benchmark.extra_info
    info["area"] = area
    info["work"] = float(work)
    info["unit"] = unit
    info["params"] = dict(params or {})
    info["role"] = role
    if pair is not None:
        info["pair"] = pair
    if peer is not None:
        info["peer"] = peer
    if bytes_moved is not None:
        info["bytes"] = float(bytes_moved)
    _throughput(benchmark, info)


def _throughput(benchmark: Any, info: dict[str, Any]) -> None:
    """When the timed call already ran, put its throughput into extra_info too, so
    pytest-benchmark's own JSON and tables read on their own (the harness recomputes it from
    the rounds either way)."""
    meta = getattr(benchmark, "stats", None)
    median = getattr(getattr(meta, "stats", None), "median", None)
    if not isinstance(median, float) or median <= 0:
        return
    info["throughput"] = info["work"] / median
    info["throughput_unit"] = f"{info['unit']}/s"
    if "bytes" in info:
        info["gb_per_s"] = info["bytes"] / median / 1e9
