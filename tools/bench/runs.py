"""Records of a bench run (cases, per-round timings, commit, machine) and their JSON files.

A :class:`Run` is what ``nox -s bench`` saves and what ``bench_compare`` reads back: for every
case its ``record()`` metadata (area, work, unit, params, pair/role/peer, bytes) and one timing
per round, plus the commit, machine and versions it was taken on. The raw pytest-benchmark JSON
of every round is kept alongside, so nothing pytest-benchmark measured is lost.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

FORMAT = "decode-conformance-bench-run/1"
CASES_DIR = "tools/bench/cases"
SAVE_DIR = Path(".benchmarks") / "decode-conformance"


class BenchError(Exception):
    """Bad input or a failed round: reported as one clear message, exit status 2."""


@dataclass
class Case:
    """One bench case: what ``record()`` said about it and its timing per round (seconds)."""

    name: str  # pytest node id relative to tools/bench/cases, e.g. "test_floor.py::test_x[1]"
    area: str
    work: float
    unit: str
    params: dict[str, Any] = field(default_factory=dict)
    role: str = "subject"
    pair: str | None = None
    peer: str | None = None
    bytes: float | None = None
    timer: str = ""  # the clock pytest-benchmark used (a case may override the run's)
    medians: list[float] = field(default_factory=list)  # per round: median per iteration
    mins: list[float] = field(default_factory=list)  # per round: fastest iteration

    def samples(self, stat: str = "median") -> list[float]:
        if stat == "median":
            return self.medians
        if stat == "min":
            return self.mins
        raise ValueError(f"unknown statistic {stat!r} (median or min)")

    @property
    def median(self) -> float:
        """The case's figure: median over rounds of the per-round medians."""
        return statistics.median(self.medians)

    @property
    def spread(self) -> float:
        """Half the min..max range of the round medians, relative to their median."""
        if len(self.medians) < 2:
            return float("nan")
        return (max(self.medians) - min(self.medians)) / 2.0 / self.median

    def definition(self) -> tuple[str, float, str, str]:
        """What must match for two timings of this case to be comparable."""
        return (self.area, self.work, self.unit, self.timer)


@dataclass
class Run:
    commit: dict[str, Any]
    machine: dict[str, Any]
    versions: dict[str, Any]
    settings: dict[str, Any]
    created: str
    cases: dict[str, Case]
    raw: list[dict[str, Any]] = field(default_factory=list)  # pytest-benchmark JSON per round
    skipped: dict[str, str] = field(default_factory=dict)  # case -> reason it skipped here
    wall_s: float = 0.0  # seconds the rounds took, process start included
    source: str = ""  # where it was loaded from (not saved)

    @property
    def label(self) -> str:
        cid = str(self.commit.get("id") or "unknown")[:12]
        return cid + ("+dirty" if self.commit.get("dirty") else "")

    @property
    def rounds(self) -> int:
        return max((len(c.medians) for c in self.cases.values()), default=0)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "created": self.created,
            "commit": self.commit,
            "machine": self.machine,
            "versions": self.versions,
            "settings": self.settings,
            "wall_s": round(self.wall_s, 3),
            "skipped": self.skipped,
            "cases": [asdict(c) for c in sorted(self.cases.values(), key=lambda c: c.name)],
            "pytest_benchmark": self.raw,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any], source: str = "") -> Run:
        if doc.get("format") != FORMAT:
            raise BenchError(
                f"{source or 'run'}: not a decode-conformance bench run "
                f"(format {doc.get('format')!r}, expected {FORMAT!r}); "
                "saved runs are written by 'nox -s bench'"
            )
        cases = {}
        try:
            for c in doc["cases"]:
                case = Case(**c)
                cases[case.name] = case
        except (KeyError, TypeError) as exc:
            raise BenchError(f"{source or 'run'}: malformed case record: {exc}") from None
        return cls(
            commit=doc["commit"],
            machine=doc["machine"],
            versions=doc["versions"],
            settings=doc["settings"],
            created=doc["created"],
            cases=cases,
            raw=doc.get("pytest_benchmark", []),
            skipped=doc.get("skipped", {}),
            wall_s=float(doc.get("wall_s", 0.0)),
            source=source,
        )


def save_run(run: Run, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    stamp = run.created.replace("-", "").replace(":", "")[:15]  # 20250101T120000
    name = f"{stamp}_{run.label.replace('+', '_')}.json"
    path = directory / name
    path.write_text(json.dumps(run.to_json(), indent=1, sort_keys=False) + "\n")
    return path


def load_run(path: Path) -> Run:
    if not path.is_file():
        raise BenchError(f"saved run {path} does not exist")
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise BenchError(f"saved run {path} is not valid JSON: {exc}") from None
    return Run.from_json(doc, source=str(path))


def saved_runs(directory: Path) -> list[Path]:
    """Saved runs, oldest first (names start with a UTC time stamp)."""
    return sorted(directory.glob("*.json")) if directory.is_dir() else []


def find_saved(spec: str, directory: Path) -> Path:
    """``latest``, ``latest~N`` or a commit prefix, among the runs saved in ``directory``."""
    runs = saved_runs(directory)
    if not runs:
        raise BenchError(f"no saved runs in {directory}; 'nox -s bench' saves one")
    if spec == "latest" or spec.startswith("latest~"):
        back = int(spec.split("~", 1)[1]) if "~" in spec else 0
        if back >= len(runs):
            raise BenchError(f"run:{spec}: only {len(runs)} saved runs in {directory}")
        return runs[-1 - back]
    hits = [p for p in runs if p.stem.split("_", 1)[-1].startswith(spec)]
    if not hits:
        raise BenchError(
            f"run:{spec}: no saved run of a commit starting with {spec!r} in {directory}"
        )
    return hits[-1]


# -- provenance ----------------------------------------------------------------------------------


def _git(cwd: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def commit_info(checkout: Path, commit: str | None = None) -> dict[str, Any]:
    """Commit id, dirty flag (tracked files only, like ``git describe --dirty``), branch."""
    if commit is not None:  # an exported commit: clean by construction
        return {"id": commit, "dirty": False, "branch": None, "exported": True}
    cid = _git(checkout, "rev-parse", "HEAD")
    status = _git(checkout, "status", "--porcelain", "--untracked-files=no")
    branch = _git(checkout, "rev-parse", "--abbrev-ref", "HEAD")
    return {
        "id": cid,
        "dirty": bool(status) if status is not None else None,
        "branch": branch,
        "exported": False,
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _mem_total_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def machine_info() -> dict[str, Any]:
    return {
        "node": platform.node(),
        "system": platform.system(),
        "release": platform.release(),
        "machine": platform.machine(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "mem_gib": _mem_total_gib(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
    }


VERSIONED = ("numpy", "torch", "triton", "llama_cpp_python", "pytest", "pytest-benchmark", "gguf")


def versions() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dist in VERSIONED:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def same_machine(a: Run, b: Run) -> list[str]:
    """Differences between the machines two runs were taken on (empty when alike)."""
    keys = ("cpu", "cpu_count", "machine", "system", "python")
    return [
        f"{k}: {a.machine.get(k)!r} vs {b.machine.get(k)!r}"
        for k in keys
        if a.machine.get(k) != b.machine.get(k)
    ]
