"""Compare two versions case by case: two commits run interleaved in this job, or two saved runs.

Commits are exported with ``git archive`` into a temporary folder each (a clean, unregistered
worktree that disappears with the folder, even when the job is killed, and that leaves the
repository's own ``.git`` untouched). Both run with the interpreter and packages of this job;
only the project code differs.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tools.bench import stats
from tools.bench.runner import Checkout, ProgressFn, RoundResult, Settings, measure, merge_rounds
from tools.bench.runs import (
    SAVE_DIR,
    BenchError,
    Case,
    Run,
    commit_info,
    find_saved,
    load_run,
    machine_info,
    same_machine,
    utc_now,
    versions,
)


@dataclass
class CaseComparison:
    name: str
    area: str
    work: float
    unit: str
    base: list[float]
    head: list[float]
    estimate: stats.RatioEstimate
    verdict: stats.Verdict

    @property
    def base_median(self) -> float:
        return stats._median(self.base)

    @property
    def head_median(self) -> float:
        return stats._median(self.head)


@dataclass
class Comparison:
    base_label: str
    head_label: str
    mode: str  # "interleaved" (paired rounds) or "unpaired" (saved runs)
    threshold: float
    confidence: float
    stat: str
    cases: list[CaseComparison]
    only_base: list[str] = field(default_factory=list)
    only_head: list[str] = field(default_factory=list)
    redefined: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    base_commit: dict[str, Any] = field(default_factory=dict)
    head_commit: dict[str, Any] = field(default_factory=dict)

    def count(self, verdict: str) -> int:
        return sum(1 for c in self.cases if c.verdict == verdict)

    @property
    def regressed(self) -> bool:
        return self.count("slower") > 0

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        for c, d in zip(self.cases, doc["cases"]):
            d["base_median"] = c.base_median
            d["head_median"] = c.head_median
        return doc


def compare_runs(
    base: Run,
    head: Run,
    *,
    paired: bool,
    threshold: float = 0.10,
    confidence: float = 0.95,
    stat: str = "median",
    common_only: bool = False,
) -> Comparison:
    """Per-case ratio HEAD/BASE, interval and verdict; differing case sets are an error unless
    ``common_only`` (then the cases on one side only are listed, never silently dropped)."""
    only_base = sorted(set(base.cases) - set(head.cases))
    only_head = sorted(set(head.cases) - set(base.cases))
    common = sorted(set(base.cases) & set(head.cases))
    redefined = [n for n in common if base.cases[n].definition() != head.cases[n].definition()]
    if (only_base or only_head or redefined) and not common_only:
        raise BenchError(
            case_set_message(base.label, head.label, only_base, only_head, redefined, base, head)
        )
    rows = []
    for name in common:
        if name in redefined:
            continue
        b, h = base.cases[name], head.cases[name]
        bs, hs = b.samples(stat), h.samples(stat)
        est = (
            stats.paired_ratio(bs, hs, confidence)
            if paired
            else stats.unpaired_ratio(bs, hs, confidence)
        )
        rows.append(
            CaseComparison(
                name=name,
                area=h.area,
                work=h.work,
                unit=h.unit,
                base=list(bs),
                head=list(hs),
                estimate=est,
                verdict=stats.verdict(est, threshold, confidence),
            )
        )
    if not rows:
        raise BenchError(f"no bench case in common between {base.label} and {head.label}")
    warnings = []
    if not paired:
        diff = same_machine(base, head)
        if diff:
            warnings.append(
                "the saved runs come from different machines (" + "; ".join(diff) + "): "
                "ratios mix code and machine"
            )
        vdiff = [
            f"{k} {base.versions.get(k)} vs {head.versions.get(k)}"
            for k in sorted(set(base.versions) | set(head.versions))
            if base.versions.get(k) != head.versions.get(k)
        ]
        if vdiff:
            warnings.append("package versions differ: " + "; ".join(vdiff))
        warnings.append(
            "saved runs were not interleaved: drift of the machine between them counts as change"
        )
    short = [c.name for c in rows if c.estimate.confidence + 1e-12 < confidence]
    if short:
        need = stats.min_rounds_for(confidence, paired)
        warnings.append(
            f"{len(short)} case(s) have too few rounds for {confidence:.0%} confidence "
            f"(need >= {need} per side): they can only be 'no change' or 'inconclusive'"
        )
    return Comparison(
        base_label=base.label,
        head_label=head.label,
        mode="interleaved" if paired else "unpaired",
        threshold=threshold,
        confidence=confidence,
        stat=stat,
        cases=rows,
        only_base=only_base,
        only_head=only_head,
        redefined=redefined,
        warnings=warnings,
        settings=dict(head.settings),
        base_commit=dict(base.commit),
        head_commit=dict(head.commit),
    )


def case_set_message(
    base_label: str,
    head_label: str,
    only_base: list[str],
    only_head: list[str],
    redefined: list[str],
    base: Run | None = None,
    head: Run | None = None,
) -> str:
    lines = [f"the bench cases of BASE {base_label} and HEAD {head_label} differ:"]
    if only_base:
        lines.append(f"  only in BASE ({len(only_base)}): " + ", ".join(only_base))
    if only_head:
        lines.append(f"  only in HEAD ({len(only_head)}): " + ", ".join(only_head))
    for n in redefined:
        detail = ""
        if base is not None and head is not None:
            detail = f" ({base.cases[n].definition()} -> {head.cases[n].definition()})"
        lines.append(f"  redefined (area, work, unit or timer changed): {n}{detail}")
    lines.append("pass --common-only to compare the cases both sides have")
    return "\n".join(lines)


# -- sources: commits, the working tree, saved runs ----------------------------------------------


def repo_root(start: Path) -> Path:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"],
            cwd=start,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        raise BenchError(f"{start} is not inside a git repository") from None
    return Path(out.stdout.strip())


def resolve_commit(repo: Path, rev: str) -> str:
    proc = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        raise BenchError(
            f"unknown commit {rev!r}: git cannot resolve it in {repo} "
            "(a typo, or a shallow clone without it: fetch it first, e.g. fetch-depth: 0 in CI)"
        )
    return proc.stdout.strip()


def export_commit(repo: Path, sha: str, dest: Path) -> None:
    proc = subprocess.run(
        ["git", "archive", "--format=tar", sha], cwd=repo, capture_output=True, check=False
    )
    if proc.returncode != 0:
        raise BenchError(f"git archive {sha} failed: {proc.stderr.decode(errors='replace')}")
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        tar.extractall(dest, filter="data")


WORKING_TREE = (".", "WORKTREE")


@dataclass
class Source:
    """One side of a comparison: a saved run or a checkout to measure."""

    role: str  # BASE or HEAD
    run: Run | None = None
    checkout: Checkout | None = None


def is_saved_ref(ref: str) -> bool:
    return ref.startswith("run:") or (ref.endswith(".json") and Path(ref).is_file())


def load_saved_ref(ref: str, save_dir: Path) -> Run:
    if ref.startswith("run:"):
        return load_run(find_saved(ref[4:], save_dir))
    return load_run(Path(ref))


@contextmanager
def open_sources(
    refs: tuple[str, str], repo: Path, save_dir: Path = SAVE_DIR
) -> Iterator[tuple[Source, Source]]:
    """Resolve BASE and HEAD (saved runs first, so a bad ref fails before any export)."""
    with tempfile.TemporaryDirectory(prefix="dc-bench-compare-") as tmp:
        sides = []
        for role, ref in zip(("BASE", "HEAD"), refs):
            if is_saved_ref(ref):
                sides.append(Source(role, run=load_saved_ref(ref, save_dir)))
            elif ref in WORKING_TREE:
                info = commit_info(repo)
                label = f"{role} working tree {str(info.get('id') or '')[:12]}"
                if info.get("dirty"):
                    label += "+dirty"
                sides.append(Source(role, checkout=Checkout(label, repo, info)))
            else:
                sha = resolve_commit(repo, ref)
                sides.append(Source(role, checkout=None, run=None))
                sides[-1].checkout = Checkout(
                    f"{role} {sha[:12]}", Path(tmp) / role.lower(), commit_info(repo, sha)
                )
        for s in sides:
            if s.checkout is not None and s.checkout.path != repo:
                export_commit(repo, s.checkout.commit["id"], s.checkout.path)
        yield sides[0], sides[1]


def run_from_rounds(checkout: Checkout, settings: Settings, rounds: list[RoundResult]) -> Run:
    skipped: dict[str, str] = {}
    for r in rounds:
        skipped.update(r.skipped)
    return Run(
        commit=checkout.commit,
        machine=machine_info(),
        versions=versions(),
        settings=settings.as_dict(),
        created=utc_now(),
        cases=merge_rounds(checkout.label, rounds),
        raw=[r.raw for r in rounds],
        skipped=skipped,
        wall_s=sum(r.seconds for r in rounds),
        source=checkout.label,
    )


def _extend(run: Run, extra: list[RoundResult], label: str) -> None:
    for r in extra:
        for name, case in r.cases.items():
            have = run.cases.get(name)
            if have is None or have.definition() != case.definition():
                raise BenchError(f"{label}: case {name} changed during the comparison")
            have.medians.extend(case.medians)
            have.mins.extend(case.mins)


def compare_sources(
    base: Source,
    head: Source,
    settings: Settings,
    *,
    threshold: float = 0.10,
    confidence: float = 0.95,
    stat: str = "median",
    common_only: bool = False,
    extra_rounds: int = 0,
    progress: ProgressFn | None = None,
) -> Comparison:
    """Measure what needs measuring and compare. Two checkouts: interleaved paired rounds, then
    up to ``extra_rounds`` more rounds of the cases still inconclusive. Otherwise: unpaired."""
    checkouts = [s.checkout for s in (base, head) if s.checkout is not None]
    select: list[str] | None = None
    if len(checkouts) == 2:
        from tools.bench.runner import collect

        names = [collect(c, settings) for c in checkouts]
        a, b = set(names[0]), set(names[1])
        if a != b:
            only_a, only_b = sorted(a - b), sorted(b - a)
            if not common_only:
                raise BenchError(
                    case_set_message(checkouts[0].label, checkouts[1].label, only_a, only_b, [])
                )
            select = sorted(a & b)
            if not select:
                raise BenchError("the two commits have no bench case in common")
        results = measure(checkouts, settings, select=select, progress=progress)
        runs = [run_from_rounds(c, settings, r) for c, r in zip(checkouts, results)]
        comp = compare_runs(
            runs[0],
            runs[1],
            paired=True,
            threshold=threshold,
            confidence=confidence,
            stat=stat,
            common_only=common_only,
        )
        if select is not None:
            comp.only_base = sorted(set(names[0]) - set(names[1]))
            comp.only_head = sorted(set(names[1]) - set(names[0]))
        pending = [c.name for c in comp.cases if c.verdict == "inconclusive"]
        if pending and extra_rounds > 0:
            if progress is not None:
                progress(f"{len(pending)} inconclusive case(s): {extra_rounds} more rounds of them")
            more = measure(
                checkouts,
                settings,
                select=pending,
                rounds=extra_rounds,
                first_round=settings.rounds,
                progress=progress,
            )
            for run, extra, c in zip(runs, more, checkouts):
                _extend(run, extra, c.label)
            again = compare_runs(
                runs[0],
                runs[1],
                paired=True,
                threshold=threshold,
                confidence=confidence,
                stat=stat,
                common_only=common_only,
            )
            again.only_base, again.only_head = comp.only_base, comp.only_head
            comp = again
            comp.warnings.append(
                f"{len(pending)} case(s) got {extra_rounds} extra rounds after an inconclusive "
                "first pass: " + ", ".join(pending)
            )
        return comp
    side_runs: list[Run] = []
    for s in (base, head):
        if s.run is not None:
            side_runs.append(s.run)
        else:
            assert s.checkout is not None
            (res,) = measure([s.checkout], settings, progress=progress)
            side_runs.append(run_from_rounds(s.checkout, settings, res))
    return compare_runs(
        side_runs[0],
        side_runs[1],
        paired=False,
        threshold=threshold,
        confidence=confidence,
        stat=stat,
        common_only=common_only,
    )


def synthetic_run(label: str, samples: dict[str, list[float]], unit: str = "items") -> Run:
    """A run built from given timings (tests, docs): every case does 1 unit of work."""
    cases = {
        n: Case(name=n, area="synthetic", work=1.0, unit=unit, medians=list(v), mins=list(v))
        for n, v in samples.items()
    }
    return Run(
        commit={"id": label, "dirty": False},
        machine={},
        versions={},
        settings={},
        created=utc_now(),
        cases=cases,
    )
