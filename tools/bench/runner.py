"""Run the bench cases of one checkout, one *round* per fresh pytest process.

A round runs every selected case once under pytest-benchmark, briefly (``inner_rounds`` timed
repetitions or ``max_time`` seconds, whichever is longer) and returns one timing per case. The
process is started inside the checkout with its own ``PYTHONPATH``, so a round of an exported
commit imports that commit's code, never the code of the checkout running the harness.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from select import select as wait_for_read
from typing import Any

from tools.bench.runs import CASES_DIR, BenchError, Case

TIMERS = {"wall": "time.perf_counter", "cpu": "time.process_time"}


@dataclass(frozen=True)
class Settings:
    """How long and how each round measures. Defaults keep ``nox -s bench`` short on 2 cores."""

    rounds: int = 4  # processes per checkout
    inner_rounds: int = 5  # pytest-benchmark --benchmark-min-rounds within a round
    max_time: float = 0.2  # pytest-benchmark --benchmark-max-time within a round (s)
    timer: str = "cpu"  # cpu (process_time: immune to lost time slices) or wall (perf_counter)
    threads: int = 1  # OMP/MKL/OpenBLAS threads and DC_BENCH_THREADS for the cases
    keyword: str | None = None  # pytest -k expression
    round_timeout: float = 1800.0  # a round that takes longer than this is an error

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise BenchError("rounds must be >= 1")
        if self.inner_rounds < 1:
            raise BenchError("inner rounds must be >= 1")
        if self.max_time <= 0:
            raise BenchError("max time must be positive")
        if self.timer not in TIMERS:
            raise BenchError(f"timer must be one of {sorted(TIMERS)}, got {self.timer!r}")
        if self.threads < 1:
            raise BenchError("threads must be >= 1")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Checkout:
    """A directory holding one version of the project, and how to name it in messages."""

    label: str  # "BASE 1a2b3c4d5e6f", "HEAD working tree", ...
    path: Path
    commit: dict[str, Any] = field(default_factory=dict)


@dataclass
class RoundResult:
    cases: dict[str, Case]  # one timing each
    skipped: dict[str, str]  # case -> reason
    raw: dict[str, Any]
    seconds: float


def case_name(nodeid: str) -> str:
    """Node id relative to the cases folder: stable across checkouts in different places."""
    marker = CASES_DIR + "/"
    i = nodeid.find(marker)
    return nodeid[i + len(marker) :] if i >= 0 else nodeid


def round_env(checkout: Path, settings: Settings, manifest: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(checkout), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    env.setdefault("TRITON_INTERPRET", "1")
    env["PYTHONHASHSEED"] = "0"
    threads = str(settings.threads)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "DC_BENCH_THREADS"):
        env[var] = threads
    if manifest is not None:
        env["DC_BENCH_MANIFEST"] = str(manifest)
    return env


def _targets(checkout: Checkout, select: Sequence[str] | None) -> list[str]:
    cases = checkout.path / CASES_DIR
    if not cases.is_dir():
        raise BenchError(
            f"{checkout.label} has no {CASES_DIR}/ (a commit from before the bench cases?)"
        )
    if not select:
        return [str(cases)]
    return [str(cases / name) for name in select]


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def collect(checkout: Checkout, settings: Settings, python: str = sys.executable) -> list[str]:
    """Names of the bench cases a checkout defines (collected, not run)."""
    cmd = [
        python,
        "-m",
        "pytest",
        *_targets(checkout, None),
        "--collect-only",
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    if settings.keyword:
        cmd += ["-k", settings.keyword]
    proc = subprocess.run(
        cmd,
        cwd=checkout.path,
        env=round_env(checkout.path, settings),
        capture_output=True,
        text=True,
        timeout=settings.round_timeout,
        check=False,
    )
    if proc.returncode == 5:
        raise BenchError(f"{checkout.label}: no bench cases collected under {CASES_DIR}/")
    if proc.returncode != 0:
        raise BenchError(
            f"{checkout.label}: collecting bench cases failed (pytest exit {proc.returncode}):\n"
            + _tail(proc.stdout + proc.stderr)
        )
    names = [case_name(line.strip()) for line in proc.stdout.splitlines() if "::" in line]
    if not names:
        raise BenchError(f"{checkout.label}: no bench cases collected under {CASES_DIR}/")
    return names


def _case_from(bench: dict[str, Any], label: str) -> Case:
    name = case_name(bench["fullname"])
    info = bench.get("extra_info") or {}
    missing = [k for k in ("area", "work", "unit") if k not in info]
    if missing:
        raise BenchError(
            f"{label}: bench case {name} did not call tools.bench.common.record() "
            f"(extra_info lacks {', '.join(missing)})"
        )
    stats = bench["stats"]
    timer = str((bench.get("options") or {}).get("timer", ""))
    return Case(
        name=name,
        area=str(info["area"]),
        work=float(info["work"]),
        unit=str(info["unit"]),
        params=dict(info.get("params") or {}),
        role=str(info.get("role", "subject")),
        pair=info.get("pair"),
        peer=info.get("peer"),
        bytes=float(info["bytes"]) if info.get("bytes") is not None else None,
        timer=timer,
        medians=[float(stats["median"])],
        mins=[float(stats["min"])],
    )


def _round_cmd(
    checkout: Checkout,
    settings: Settings,
    select: Sequence[str] | None,
    out: Path,
    python: str,
) -> list[str]:
    cmd = [
        python,
        "-m",
        "pytest",
        *_targets(checkout, select),
        "-q",
        "-p",
        "no:cacheprovider",
        f"--benchmark-json={out}",
        f"--benchmark-min-rounds={settings.inner_rounds}",
        f"--benchmark-max-time={settings.max_time}",
        "--benchmark-warmup=on",
        "--benchmark-warmup-iterations=5",
        f"--benchmark-timer={TIMERS[settings.timer]}",
        "--benchmark-sort=fullname",
    ]
    if settings.keyword:
        cmd += ["-k", settings.keyword]
    return cmd


def _round_result(
    checkout: Checkout, returncode: int, out: Path, manifest: Path, output: str, seconds: float
) -> RoundResult:
    if returncode == 5:
        raise BenchError(f"{checkout.label}: no bench cases selected under {CASES_DIR}/")
    if returncode != 0 or not out.is_file():
        raise BenchError(
            f"{checkout.label}: a bench case failed (pytest exit {returncode}):\n" + _tail(output)
        )
    raw = json.loads(out.read_text())
    skipped: dict[str, str] = {}
    if manifest.is_file():
        for entry in json.loads(manifest.read_text()):
            if entry["outcome"] == "skipped":
                skipped[case_name(entry["nodeid"])] = entry.get("reason", "")
    cases = {}
    for bench in raw.get("benchmarks", []):
        case = _case_from(bench, checkout.label)
        cases[case.name] = case
    return RoundResult(cases=cases, skipped=skipped, raw=raw, seconds=seconds)


def run_round(
    checkout: Checkout,
    settings: Settings,
    select: Sequence[str] | None = None,
    python: str = sys.executable,
) -> RoundResult:
    """One fresh pytest process over the (selected) cases; one timing per case."""
    with tempfile.TemporaryDirectory(prefix="dc-bench-") as tmp:
        out = Path(tmp) / "round.json"
        manifest = Path(tmp) / "manifest.json"
        start = time.perf_counter()
        try:
            proc = subprocess.run(
                _round_cmd(checkout, settings, select, out, python),
                cwd=checkout.path,
                env=round_env(checkout.path, settings, manifest),
                capture_output=True,
                text=True,
                timeout=settings.round_timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise BenchError(
                f"{checkout.label}: a round took longer than {settings.round_timeout:.0f}s"
            ) from None
        seconds = time.perf_counter() - start
        return _round_result(
            checkout, proc.returncode, out, manifest, proc.stdout + proc.stderr, seconds
        )


GATE_PLUGIN_DIR = Path(__file__).resolve().parent / "plugin"


class _GatedWorker:
    """One checkout's round process, stopped before every case until told ``go``."""

    def __init__(
        self,
        checkout: Checkout,
        settings: Settings,
        select: Sequence[str] | None,
        tmp: Path,
        tag: str,
        python: str,
    ) -> None:
        self.checkout = checkout
        self.timeout = settings.round_timeout
        self.out = tmp / f"{tag}.json"
        self.manifest = tmp / f"{tag}-manifest.json"
        self.log_path = tmp / f"{tag}.log"
        to_worker_r, to_worker_w = os.pipe()
        from_worker_r, from_worker_w = os.pipe()
        env = round_env(checkout.path, settings, self.manifest)
        # The gate plugin comes from the harness, after the checkout on the path.
        env["PYTHONPATH"] += os.pathsep + str(GATE_PLUGIN_DIR)
        env["DC_BENCH_GATE"] = f"{to_worker_r},{from_worker_w}"
        cmd = [*_round_cmd(checkout, settings, select, self.out, python), "-p", "dc_bench_gate"]
        self.start = time.perf_counter()
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                cmd,
                cwd=checkout.path,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(to_worker_r, from_worker_w),
            )
        os.close(to_worker_r)
        os.close(from_worker_w)
        self.to_worker = os.fdopen(to_worker_w, "w")
        self.from_worker = os.fdopen(from_worker_r, "r")

    def next_case(self) -> str | None:
        """The case the worker now waits to run, or None once it has finished and exited."""
        ready, _, _ = wait_for_read([self.from_worker], [], [], self.timeout)
        if not ready:
            raise BenchError(f"{self.checkout.label}: no answer in {self.timeout:.0f}s")
        line = self.from_worker.readline()
        if not line:
            self.proc.wait(timeout=self.timeout)
            return None
        return case_name(line.removeprefix("ready ").strip())

    def go(self) -> None:
        self.to_worker.write("go\n")
        self.to_worker.flush()

    def result(self) -> RoundResult:
        rc = self.proc.wait(timeout=self.timeout)
        return _round_result(
            self.checkout,
            rc,
            self.out,
            self.manifest,
            self.log_path.read_text(),
            time.perf_counter() - self.start,
        )

    def close(self) -> None:
        for f in (self.to_worker, self.from_worker):
            with contextlib.suppress(OSError):
                f.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def run_lockstep_round(
    checkouts: Sequence[Checkout],
    settings: Settings,
    select: Sequence[str] | None = None,
    round_index: int = 0,
    python: str = sys.executable,
) -> list[RoundResult]:
    """One round of two checkouts, case by case: A runs case 1, then B runs case 1, B case 2,
    A case 2, ... (who goes first alternates by case and by round). One process per checkout
    and round as in :func:`run_round`, but only one of them runs at any moment, and the two
    timings of a case are taken seconds apart instead of a whole round apart."""
    if len(checkouts) != 2:
        raise ValueError("lock-step rounds pair exactly two checkouts")
    with tempfile.TemporaryDirectory(prefix="dc-bench-") as tmp:
        workers: list[_GatedWorker] = []
        try:
            at: list[str | None] = []
            for k, c in enumerate(checkouts):  # one at a time: start-up never overlaps a case
                workers.append(_GatedWorker(c, settings, select, Path(tmp), f"w{k}", python))
                at.append(workers[-1].next_case())
            j = 0
            while at[0] is not None or at[1] is not None:
                if at[0] != at[1]:
                    raise BenchError(
                        "the two checkouts do not run the same cases in the same order: "
                        f"{checkouts[0].label} is at {at[0] or '(end)'}, "
                        f"{checkouts[1].label} at {at[1] or '(end)'}" + _failure_hint(workers)
                    )
                order = (0, 1) if (round_index + j) % 2 == 0 else (1, 0)
                for k in order:
                    workers[k].go()
                    at[k] = workers[k].next_case()
                j += 1
            return [w.result() for w in workers]
        finally:
            for w in workers:
                w.close()


def _failure_hint(workers: Sequence[_GatedWorker]) -> str:
    tails = []
    for w in workers:
        if w.proc.poll() not in (None, 0):
            tails.append(f"\n{w.checkout.label} exited {w.proc.returncode}:\n")
            tails.append(_tail(w.log_path.read_text()))
    return "".join(tails)


def merge_rounds(label: str, results: Sequence[RoundResult]) -> dict[str, Case]:
    """Append each round's timing to its case; a case must be defined alike in every round."""
    merged: dict[str, Case] = {}
    seen_in: dict[str, int] = {}
    for r in results:
        for name, case in r.cases.items():
            seen_in[name] = seen_in.get(name, 0) + 1
            have = merged.get(name)
            if have is None:
                merged[name] = Case(**{**asdict(case), "medians": [], "mins": []})
                have = merged[name]
            elif have.definition() != case.definition():
                raise BenchError(
                    f"{label}: bench case {name} changed between rounds "
                    f"({have.definition()} vs {case.definition()})"
                )
            have.medians.extend(case.medians)
            have.mins.extend(case.mins)
    partial = sorted(n for n, k in seen_in.items() if k != len(results))
    if partial:
        raise BenchError(
            f"{label}: bench cases ran in some rounds only (a skip that depends on timing or "
            f"state?): {', '.join(partial)}"
        )
    return merged


ProgressFn = Callable[[str], None]


def measure(
    checkouts: Sequence[Checkout],
    settings: Settings,
    select: Sequence[str] | None = None,
    rounds: int | None = None,
    first_round: int = 0,
    progress: ProgressFn | None = None,
    python: str = sys.executable,
    lockstep: bool = True,
) -> list[list[RoundResult]]:
    """Rounds of every checkout. Two checkouts run in lock step, case by case
    (:func:`run_lockstep_round`); otherwise whole rounds alternate A B, B A, ... (reversing the
    order each round so a machine that drifts during the job favours neither side)."""
    n = settings.rounds if rounds is None else rounds
    results: list[list[RoundResult]] = [[] for _ in checkouts]
    for i in range(first_round, first_round + n):
        if lockstep and len(checkouts) == 2:
            start = time.perf_counter()
            pair = run_lockstep_round(checkouts, settings, select, round_index=i, python=python)
            for j, res in enumerate(pair):
                results[j].append(res)
            if progress is not None:
                progress(
                    f"round {i + 1}: {len(pair[0].cases)} cases of both, case by case, "
                    f"in {time.perf_counter() - start:.1f}s"
                )
            continue
        order = list(range(len(checkouts)))
        if i % 2 == 1:
            order.reverse()
        for j in order:
            res = run_round(checkouts[j], settings, select=select, python=python)
            results[j].append(res)
            if progress is not None:
                progress(
                    f"round {i + 1}: {checkouts[j].label}: {len(res.cases)} cases "
                    f"in {res.seconds:.1f}s"
                )
    return results


@dataclass
class SmokeResult:
    """Every case run once (``--benchmark-disable``): did they work, which ran, which skipped."""

    returncode: int
    output: str
    entries: list[dict[str, Any]]

    @property
    def ran(self) -> dict[str, tuple[float, str]]:
        return {
            case_name(e["nodeid"]): (float(e["extra_info"]["work"]), str(e["extra_info"]["unit"]))
            for e in self.entries
            if e["outcome"] == "passed"
        }

    @property
    def collected(self) -> set[str]:
        return {case_name(e["nodeid"]) for e in self.entries}


def smoke(root: Path, keyword: str | None = None, python: str = sys.executable) -> SmokeResult:
    settings = Settings(keyword=keyword)
    checkout = Checkout(f"checkout {root}", root)
    with tempfile.TemporaryDirectory(prefix="dc-bench-smoke-") as tmp:
        manifest = Path(tmp) / "manifest.json"
        cmd = [
            python,
            "-m",
            "pytest",
            *_targets(checkout, None),
            "-q",
            "-p",
            "no:cacheprovider",
            "--benchmark-disable",
        ]
        if keyword:
            cmd += ["-k", keyword]
        proc = subprocess.run(
            cmd,
            cwd=root,
            env=round_env(root, settings, manifest),
            capture_output=True,
            text=True,
            timeout=settings.round_timeout,
            check=False,
        )
        entries = json.loads(manifest.read_text()) if manifest.is_file() else []
    return SmokeResult(proc.returncode, proc.stdout + proc.stderr, entries)
