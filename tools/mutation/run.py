"""Run a seeded, per-area sample of mechanical mutants against their areas' conformance tests.

Each mutant runs in its own pytest process (``python -m tools.mutation.apply``) over
``conformance/<area>/`` (and the folders of ``ALSO_TESTED_BY`` for shared code) against the
reference target, stopping at the first failure: exit 1 is *killed*, 0 *survived*, a run past the time limit *timeout* (counted as killed, reported apart),
and an error before any test ran (the mutant broke an import) *killed at collection*. Survivors
are looked up in the triage file: ``equivalent`` ones leave the score, ``gap`` ones are known
behaviour-changing survivors (they lower the score and wait for a stronger test); any other
survivor is new, and fails the run.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import resource
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path

from tools.mutation.sites import ROOT, Site, all_sites, test_folders

TRIAGE = Path(__file__).with_name("triage.txt")
SAMPLES = {"ci": 24, "default": 400}
MARK_BEGIN = "<!-- mutation:begin -->"
MARK_END = "<!-- mutation:end -->"


@dataclass
class Result:
    site: Site
    outcome: str  # killed | timeout | survived | error
    seconds: float
    detail: str = ""
    triage: str = ""  # equivalent / gap reason for a survivor


def read_triage(path: Path = TRIAGE) -> dict[str, tuple[str, str]]:
    """``id -> (verdict, reason)`` from lines ``<id>  equivalent|gap: <reason>``."""
    out: dict[str, tuple[str, str]] = {}
    if not path.exists():
        return out
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        ident, _, rest = line.partition(" ")
        verdict, _, reason = rest.strip().partition(":")
        if verdict not in ("equivalent", "gap") or not reason.strip():
            raise SystemExit(f"{path}:{n}: expected '<id>  equivalent|gap: <reason>'")
        out[ident] = (verdict, reason.strip())
    return out


def sample(
    sites: Sequence[Site], n: int, seed: int, areas: Sequence[str] | None = None
) -> list[Site]:
    """``n`` mutants spread evenly over the areas. Within an area the sites are ranked by a
    seeded hash of their id and the first ones taken, so a site's chance does not depend on
    the others: editing one file changes the sample only by the sites it adds or removes."""
    by_area: dict[str, list[Site]] = {}
    for s in sites:
        if areas is None or s.area in areas:
            by_area.setdefault(s.area, []).append(s)
    if n <= 0:  # the full set
        return [s for a in sorted(by_area) for s in by_area[a]]
    share = math.ceil(n / max(1, len(by_area)))
    out: list[Site] = []
    for area in sorted(by_area):
        ranked = sorted(
            by_area[area], key=lambda s: hashlib.sha1(f"{seed}:{s.id}".encode()).digest()
        )
        out += sorted(ranked[:share], key=lambda s: (s.path, s.index))
    return out


def run_one(
    site: Site,
    timeout: float,
    tests: Sequence[str] = (),
    extra: Sequence[str] = (),
    peer: str = "none",
) -> Result:
    """Run one mutant against ``tests`` (default: its area's conformance folder)."""
    env = {
        **os.environ,
        "DC_HYPOTHESIS_PROFILE": "ci",
        "DC_MUTATION_RUN": "1",  # the "mutant" hypothesis profile: no shrinking
        "PYTHONHASHSEED": "0",
        "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", "1"),
        "OMP_NUM_THREADS": "1",
    }
    for var in [v for v in env if v.startswith("PYTEST_XDIST") or v == "PYTEST_CURRENT_TEST"]:
        env.pop(var)
    cmd = [
        sys.executable, "-m", "tools.mutation.apply", site.path, str(site.index), "--",
        *(tests or test_folders(site)), *extra, "--target", "reference",
        "--peer", peer, "-x", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--no-header",
        "-rfE",
        "--assert=plain",  # assertion rewriting would load the module before the mutant hook
    ]  # fmt: skip
    start = time.monotonic()
    try:
        proc = subprocess.run(
            cmd,
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            preexec_fn=_limit_memory,
        )
    except subprocess.TimeoutExpired:
        return Result(site, "timeout", time.monotonic() - start, f"over {timeout:.0f} s")
    took = time.monotonic() - start
    tail = (proc.stdout + proc.stderr).strip().splitlines()
    last = tail[-1] if tail else ""
    if proc.returncode == 1:
        failed = next((ln for ln in tail if ln.startswith(("FAILED ", "ERROR "))), last)
        return Result(site, "killed", took, failed[:200])
    if proc.returncode == 0:
        return Result(site, "survived", took, last[:200])
    if proc.returncode in (2, 3, 4):  # collection or import errors: the suite did not run
        err = next((ln for ln in tail if "Error" in ln), last)
        return Result(site, "killed", took, f"collection: {err[:180]}")
    if proc.returncode < 0:  # the run crashed (a runaway mutant hit the memory limit, ...)
        return Result(site, "killed", took, f"crashed: signal {-proc.returncode}")
    return Result(site, "error", took, f"exit {proc.returncode}: {last[:180]}")


def _limit_memory() -> None:
    """Children get an address-space limit: a mutant that loops allocating must die alone."""
    gib = float(os.environ.get("DC_MUTATION_MEMORY_GIB", "6"))
    limit = int(gib * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def summarize(results: Sequence[Result], triage: dict[str, tuple[str, str]]) -> dict[str, object]:
    areas: dict[str, Counter[str]] = {}
    new: list[str] = []
    for r in results:
        c = areas.setdefault(r.site.area, Counter())
        c["sampled"] += 1
        if r.outcome == "survived":
            verdict, reason = triage.get(r.site.id, ("", ""))
            r.triage = f"{verdict}: {reason}" if verdict else ""
            if verdict == "equivalent":
                c["equivalent"] += 1
                continue
            c["survived"] += 1
            if verdict != "gap":
                new.append(r.site.id)
        else:
            c[r.outcome] += 1
    table = {}
    for area, c in sorted(areas.items()):
        changing = c["sampled"] - c["equivalent"] - c["error"]
        caught = c["killed"] + c["timeout"]
        table[area] = {
            **{
                k: c[k] for k in ("sampled", "killed", "timeout", "survived", "equivalent", "error")
            },
            "score": round(caught / changing, 4) if changing else None,
        }
    tot = Counter[str]()
    for row in table.values():
        for k in ("sampled", "killed", "timeout", "survived", "equivalent", "error"):
            tot[k] += int(row[k] or 0)
    changing = tot["sampled"] - tot["equivalent"] - tot["error"]
    return {
        "areas": table,
        "total": {
            **tot,
            "score": round((tot["killed"] + tot["timeout"]) / changing, 4) if changing else None,
        },
        "new_survivors": new,
    }


def render(
    summary: dict[str, object], results: Sequence[Result], meta: Mapping[str, object]
) -> str:
    lines = [
        MARK_BEGIN,
        "## Mechanical mutation",
        "",
        f"{meta['sampled']} mutants of {meta['sites']} sites (seed {meta['seed']}, "
        f"{meta['per_area']} per area), each run against its area's conformance tests "
        "(python -m tools.mutation). Score: caught (killed + timeout) / behaviour-changing "
        "(sampled - equivalent - error).",
        "",
        "| area | sampled | killed | timeout | survived | equivalent | error | score |",
        "|------|--------:|-------:|--------:|---------:|-----------:|------:|------:|",
    ]
    rows = dict(summary["areas"])  # type: ignore[call-overload]
    rows["TOTAL"] = summary["total"]
    for area, r in rows.items():
        score = "—" if r["score"] is None else f"{r['score']:.0%}"
        lines.append(
            f"| {area} | {r['sampled']} | {r['killed']} | {r['timeout']} | {r['survived']} "
            f"| {r['equivalent']} | {r['error']} | {score} |"
        )
    surv = [r for r in results if r.outcome == "survived"]
    if surv:
        lines += ["", "Survivors:", ""]
        for r in surv:
            tag = r.triage or "NEW (not triaged)"
            lines.append(f"- `{r.site.id}` — {r.site.describe()} — {tag}")
    lines.append(MARK_END)
    return "\n".join(lines) + "\n"


def write_reports(
    out_dir: Path, summary: dict[str, object], results: Sequence[Result], meta: Mapping[str, object]
) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = {
        **meta,
        "summary": summary,
        "mutants": [
            {
                **asdict(r.site),
                "outcome": r.outcome,
                "seconds": round(r.seconds, 2),
                "detail": r.detail,
                "triage": r.triage,
            }
            for r in results
        ],
    }
    (out_dir / "mutation.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    section = render(summary, results, meta)
    (out_dir / "mutation.md").write_text(section, encoding="utf-8")
    conf = out_dir / "conformance.md"
    if conf.exists():
        text = conf.read_text(encoding="utf-8")
        if MARK_BEGIN in text and MARK_END in text:
            head, _, rest = text.partition(MARK_BEGIN)
            text = head + section + rest.partition(MARK_END)[2].lstrip("\n")
        else:
            text = text.rstrip("\n") + "\n\n" + section
        conf.write_text(text, encoding="utf-8")


def run(
    n: int,
    seed: int,
    jobs: int,
    timeout: float,
    out_dir: Path,
    areas: Sequence[str] | None = None,
) -> int:
    sites = all_sites()
    chosen = sample(sites, n, seed, areas)
    triage = read_triage()
    print(
        f"mutation: {len(chosen)} mutants of {len(sites)} sites, {jobs} jobs, timeout {timeout:.0f} s",
        flush=True,
    )
    results: list[Result] = []
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(run_one, s, timeout): s for s in chosen}
        for k, fut in enumerate(as_completed(futures), 1):
            r = fut.result()
            results.append(r)
            print(
                f"mutation: [{k}/{len(chosen)}] {r.outcome:8s} {r.seconds:5.1f}s {r.site.describe()}",
                flush=True,
            )
    results.sort(key=lambda r: (r.site.area, r.site.path, r.site.index))
    summary = summarize(results, triage)
    meta: dict[str, object] = {
        "seed": seed,
        "sites": len(sites),
        "sampled": len(chosen),
        "per_area": "all" if n <= 0 else math.ceil(n / max(1, len({s.area for s in sites}))),
        "seconds": round(time.monotonic() - start, 1),
        "jobs": jobs,
        "timeout_s": timeout,
    }
    write_reports(out_dir, summary, results, meta)
    tot = summary["total"]
    print(f"mutation: score {tot['score']} ({tot}); reports in {out_dir}/mutation.json", flush=True)  # type: ignore[index]
    new = summary["new_survivors"]
    if new:
        print(
            "mutation: new survivors (kill them with a stronger conformance test, or triage them "
            f"in {TRIAGE.relative_to(ROOT)}):",
            flush=True,
        )
        for ident in new:  # type: ignore[attr-defined]
            site = next(r.site for r in results if r.site.id == ident)
            print(f"  {ident}  # {site.describe()}", flush=True)
        return 1
    return 0
