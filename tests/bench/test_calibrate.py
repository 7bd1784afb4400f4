"""The calibration's injected slowdown reaches every way a case can be timed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tools.bench.calibrate import inject_slowdown
from tools.bench.runs import CASES_DIR

CASES = """
import time


def busy(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_call(benchmark):
    benchmark(busy, 0.002)


def test_pedantic(benchmark):
    benchmark.pedantic(busy, args=(0.002,), rounds=3, iterations=1)
"""


def test_slowdown_covers_call_and_pedantic(tmp_path: Path) -> None:
    cases = tmp_path / CASES_DIR
    cases.mkdir(parents=True)
    (cases / "test_x.py").write_text(CASES)
    inject_slowdown(tmp_path, 3.0, timer="cpu")
    out = tmp_path / "b.json"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(cases),
            "-q",
            "-p",
            "no:cacheprovider",
            f"--benchmark-json={out}",
            "--benchmark-timer=time.process_time",
            "--benchmark-min-rounds=3",
            "--benchmark-max-time=0.05",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    fastest = {b["name"]: b["stats"]["min"] for b in json.loads(out.read_text())["benchmarks"]}
    assert set(fastest) == {"test_call", "test_pedantic"}
    # 2 ms of work made 3x slower: at least 6 ms by construction (2 ms if not injected).
    for name, t in fastest.items():
        assert t >= 0.0055, f"{name} was not slowed: {t * 1e3:.2f} ms"
