"""Markdown of a run and of a comparison; the charts render."""

from __future__ import annotations

from pathlib import Path

from tools.bench.chart import compare_chart, run_chart
from tools.bench.compare import compare_runs, synthetic_run
from tools.bench.report import compare_markdown, quantity, run_markdown, throughput
from tools.bench.runs import Case, Run


def _run() -> Run:
    run = synthetic_run("abcdef123456", {})
    run.settings = {"rounds": 2, "inner_rounds": 5, "max_time": 0.2, "timer": "cpu", "threads": 1}

    def add(name: str, **kw: object) -> None:
        run.cases[name] = Case(name=name, **kw)  # type: ignore[arg-type]

    add(
        "f.py::copy",
        area="floor",
        work=64e6,
        unit="bytes",
        role="peer",
        peer="numpy-memcpy",
        pair="copy",
        bytes=128e6,
        medians=[0.010, 0.012],
        mins=[0.01, 0.01],
    )
    add(
        "f.py::mine",
        area="floor",
        work=64e6,
        unit="bytes",
        role="subject",
        pair="copy",
        bytes=64e6,
        medians=[0.020, 0.030],
        mins=[0.02, 0.03],
    )
    add(
        "k.py::decode",
        area="kernels",
        work=4096,
        unit="tokens",
        role="subject",
        pair="sdpa",
        medians=[0.001, 0.001],
        mins=[0.001, 0.001],
        timer="perf_counter",
    )
    run.skipped = {"k.py::gpu": "no GPU"}
    return run


def test_units() -> None:
    assert quantity(4096, "tokens") == "4.1 k tokens"
    assert quantity(512, "cells") == "512 cells"
    assert quantity(3.2e9, "bytes") == "3.2 GB"
    assert throughput(64e6, 0.01, "bytes") == "6.4 GB/s"


def test_run_markdown_reads_per_area_with_floor_and_peers() -> None:
    md = run_markdown(_run())
    assert "## floor" in md and "## kernels" in md
    assert "memory-bandwidth floor: **11.6 GB/s**" in md  # 128 MB / 11 ms
    # The subject moves 64 MB in 25 ms: 2.56 GB/s, 22% of the floor.
    assert (
        "| `f.py::mine` | subject | 64 MB | 25 ms | 20.0% | 2.56 GB/s | 2.56 GB/s | 22.0% |" in md
    )
    assert "| copy | `f.py::mine` | numpy-memcpy: `f.py::copy` | **2.250** | 2.000–2.500 |" in md
    assert "pair `sdpa` has only its subject in this run" in md
    assert "subject (perf_counter)" in md  # a case that overrides the run's timer says so
    assert "- `k.py::gpu`: no GPU" in md


def test_compare_markdown_orders_slowest_first_and_states_the_rule() -> None:
    base = synthetic_run("aaaaaaa", {"a": [1.0] * 6, "b": [1.0] * 6})
    head = synthetic_run("bbbbbbb", {"a": [1.0] * 6, "b": [1.5] * 6})
    md = compare_markdown(compare_runs(base, head, paired=True))
    assert md.index("`b`") < md.index("`a`")
    assert "**FAIL**: 1 slower, 0 faster, 0 inconclusive, 1 no change (of 2 cases)" in md
    assert "*slower* when HEAD/BASE > 1.10 and the 95% interval lies above 1.0" in md
    assert "1.500 *" in md


def test_charts_render(tmp_path: Path) -> None:
    base = synthetic_run("aaaaaaa", {"a": [1.0] * 6, "b": [1.0] * 6})
    head = synthetic_run("bbbbbbb", {"a": [1.0] * 6, "b": [1.5] * 6})
    png = compare_chart(compare_runs(base, head, paired=True), tmp_path / "c.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    png = run_chart(_run(), tmp_path / "r.png")
    assert png.stat().st_size > 1000
