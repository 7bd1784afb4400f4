"""Measure the comparison's error rates on this machine, with the settings you would use in CI.

* **False positives**: compare a commit with itself ``repeats`` times (two exported copies,
  interleaved rounds, exactly what ``bench_compare`` does); every ``slower`` verdict is a false
  alarm. The target is at most 1 failing comparison in 10.
* **Detection**: compare the commit with a copy where every case is made ``slowdown`` slower
  (``1.3`` for +30%): the copy's cases conftest wraps each timed call and busy-waits for the
  extra fraction of the time the call took, on the clock the harness times with, so every case
  slows by the same factor whatever it measures. Every ``slower`` verdict is a detection.

The commit's own files are never modified; the slow copy lives in a temporary folder.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.bench.compare import (
    Comparison,
    Source,
    compare_sources,
    export_commit,
    resolve_commit,
)
from tools.bench.runner import TIMERS, Checkout, ProgressFn, Settings
from tools.bench.runs import CASES_DIR

_INJECT = """

# -- injected by tools.bench.calibrate (a temporary copy only): every timed call slows down --
def _dc_inject_slowdown() -> None:
    import time

    from pytest_benchmark.fixture import BenchmarkFixture

    extra = {extra!r}
    clock = time.{clock}  # the clock the harness times with, so the factor is exact on it

    def slow(function_to_benchmark):
        def slowed(*a, **k):
            t0 = clock()
            result = function_to_benchmark(*a, **k)
            end = clock() + extra * (clock() - t0)
            while clock() < end:
                pass
            return result

        return slowed

    original_call = BenchmarkFixture.__call__
    original_pedantic = BenchmarkFixture.pedantic

    def call(self, function_to_benchmark, *args, **kwargs):
        return original_call(self, slow(function_to_benchmark), *args, **kwargs)

    # Cases that control their rounds (decoder, model, kernels, kv) time through pedantic.
    def pedantic(self, target, *args, **kwargs):
        return original_pedantic(self, slow(target), *args, **kwargs)

    BenchmarkFixture.__call__ = call
    BenchmarkFixture.pedantic = pedantic


_dc_inject_slowdown()
"""


def inject_slowdown(checkout: Path, factor: float, timer: str = "cpu") -> None:
    """Make every case of an exported copy ``factor`` times slower (factor > 1), as measured
    by the harness's ``timer``."""
    if factor <= 1.0:
        raise ValueError("the slowdown factor must be > 1")
    clock = TIMERS[timer].removeprefix("time.")
    conftest = checkout / CASES_DIR / "conftest.py"
    text = conftest.read_text() if conftest.is_file() else ""
    conftest.write_text(text + _INJECT.format(extra=factor - 1.0, clock=clock))


@dataclass
class Calibration:
    settings: dict[str, Any]
    threshold: float
    confidence: float
    slowdown: float
    self_runs: list[dict[str, Any]] = field(default_factory=list)
    slow_runs: list[dict[str, Any]] = field(default_factory=list)

    @staticmethod
    def summarize(comp: Comparison) -> dict[str, Any]:
        return {
            "regressed": comp.regressed,
            "verdicts": dict(Counter(c.verdict for c in comp.cases)),
            "cases": {
                c.name: {
                    "ratio": c.estimate.ratio,
                    "low": c.estimate.low,
                    "high": c.estimate.high,
                    "verdict": c.verdict,
                    "rounds": c.estimate.n_base,
                }
                for c in comp.cases
            },
        }

    def markdown(self) -> str:
        n_self = len(self.self_runs)
        fp = sum(r["regressed"] for r in self.self_runs)
        case_fp = sum(r["verdicts"].get("slower", 0) for r in self.self_runs)
        case_n = sum(len(r["cases"]) for r in self.self_runs)
        lines = [
            "# Bench comparison calibration",
            "",
            f"- settings: {self.settings}; threshold {self.threshold:.0%}, "
            f"confidence {self.confidence:.0%}",
            f"- **self-comparisons reporting a regression: {fp}/{n_self}** "
            f"({case_fp} of {case_n} case comparisons were 'slower')",
        ]
        verdicts: Counter[str] = Counter()
        for r in self.self_runs:
            verdicts.update(r["verdicts"])
        lines.append(f"- self-comparison verdicts: {dict(verdicts)}")
        if self.slow_runs:
            det = sum(r["verdicts"].get("slower", 0) for r in self.slow_runs)
            tot = sum(len(r["cases"]) for r in self.slow_runs)
            caught = sum(r["regressed"] for r in self.slow_runs)
            lines.append(
                f"- **injected ×{self.slowdown:g} slowdown: {det}/{tot} case comparisons "
                f"'slower'; {caught}/{len(self.slow_runs)} comparisons failed**"
            )
            missed: Counter[str] = Counter()
            for r in self.slow_runs:
                for name, c in r["cases"].items():
                    if c["verdict"] != "slower":
                        missed[f"{name} ({c['verdict']})"] += 1
            lines += [f"  - missed: {k} ×{v}" for k, v in sorted(missed.items())]
        lines += ["", "| run | kind | verdicts | max HEAD/BASE |", "|---|---|---|---|"]
        for kind, runs in (("self", self.self_runs), ("slow", self.slow_runs)):
            for i, r in enumerate(runs, 1):
                top = max(c["ratio"] for c in r["cases"].values())
                lines.append(f"| {i} | {kind} | {r['verdicts']} | {top:.3f} |")
        return "\n".join(lines) + "\n"


def calibrate(
    repo: Path,
    settings: Settings,
    *,
    rev: str = "HEAD",
    repeats: int = 10,
    slow_repeats: int = 2,
    slowdown: float = 1.3,
    threshold: float = 0.10,
    confidence: float = 0.95,
    extra_rounds: int = 4,
    progress: ProgressFn | None = None,
    out: Path | None = None,
) -> Calibration:
    sha = resolve_commit(repo, rev)
    cal = Calibration(settings.as_dict(), threshold, confidence, slowdown)
    with tempfile.TemporaryDirectory(prefix="dc-bench-calibrate-") as tmp:
        copies = {}
        for name in ("base", "head", "slow"):
            copies[name] = Path(tmp) / name
            export_commit(repo, sha, copies[name])
        inject_slowdown(copies["slow"], slowdown, settings.timer)
        info = {"id": sha, "dirty": False}
        base = Source("BASE", checkout=Checkout(f"BASE {sha[:12]}", copies["base"], info))
        head = Source("HEAD", checkout=Checkout(f"HEAD {sha[:12]} (again)", copies["head"], info))
        slow = Source(
            "HEAD", checkout=Checkout(f"HEAD {sha[:12]} ×{slowdown:g}", copies["slow"], info)
        )
        plan = [("self", head)] * repeats + [("slow", slow)] * slow_repeats
        for i, (kind, other) in enumerate(plan, 1):
            comp = compare_sources(
                base,
                other,
                settings,
                threshold=threshold,
                confidence=confidence,
                extra_rounds=extra_rounds,
            )
            summary = Calibration.summarize(comp)
            (cal.self_runs if kind == "self" else cal.slow_runs).append(summary)
            if progress is not None:
                progress(f"{i}/{len(plan)} {kind}: {summary['verdicts']}")
            if out is not None:
                out.mkdir(parents=True, exist_ok=True)
                (out / "calibration.json").write_text(json.dumps(cal.__dict__, indent=1) + "\n")
                (out / "calibration.md").write_text(cal.markdown())
    return cal
