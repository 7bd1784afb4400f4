"""Conformance report: per-invariant outcomes as JSON and Markdown.

``reports/conformance.json`` holds one record per invariant (id, area, statement, source,
status, tests, outcome) and a ``summary`` with counts per outcome and per area, the target and
the git commit. ``reports/conformance.md`` renders the same as tables. A run with ``--shard I/N`` writes a
partial report (a ``shard`` record: the tests it ran and their outcomes);
``python -m conformance.report merge parts/*.json -o reports/`` combines the N parts. When the meta-tests have
written ``mutation.json`` next to it, both files also carry the mutation score.
"""

from __future__ import annotations

import datetime as _dt
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.spec import Invariant

# "suite-defect": a test of the invariant touched what its markers do not declare
# (conformance.gate): the suite, not the target, is wrong, so the invariant has no verdict.
OUTCOMES = ("passed", "failed", "skipped", "suite-defect", "untested", "planned")
SCHEMA_VERSION = 1


@dataclass
class TestResult:
    nodeid: str
    outcome: str  # passed | failed | skipped | suite-defect
    reason: str = ""


@dataclass
class InvariantResult:
    invariant: Invariant
    tests: list[str] = field(default_factory=list)
    results: list[TestResult] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        if not self.invariant.active:
            return "planned"
        if not self.tests:
            return "untested"
        outcomes = {r.outcome for r in self.results}
        if "suite-defect" in outcomes:
            return "suite-defect"
        if "failed" in outcomes:
            return "failed"
        if "passed" in outcomes:
            return "passed"
        return "skipped"


def git_commit(cwd: Path | None = None) -> dict[str, Any]:
    def run(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=True
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip()

    sha = run("rev-parse", "HEAD")
    status = run("status", "--porcelain", "--untracked-files=no")
    return {"id": sha, "dirty": bool(status) if status is not None else None}


def aggregate(
    registry: Mapping[str, Invariant],
    tests_by_invariant: Mapping[str, Iterable[str]],
    results_by_test: Mapping[str, TestResult],
    missing_reason: str = "not selected in this run",
) -> list[InvariantResult]:
    out = []
    for inv_id in sorted(registry, key=_id_sort_key):
        tests = sorted(set(tests_by_invariant.get(inv_id, ())))
        res = []
        for t in tests:
            if t in results_by_test:
                res.append(results_by_test[t])
            else:
                res.append(TestResult(t, "skipped", missing_reason))
        out.append(InvariantResult(registry[inv_id], tests, res))
    return out


def _id_sort_key(inv_id: str) -> tuple[str, int]:
    prefix, _, num = inv_id.partition("-")
    return (prefix, int(num))


def build_report(
    results: list[InvariantResult],
    target: Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
    cwd: Path | None = None,
    links: Mapping[str, list[str]] | None = None,
    commit: Mapping[str, Any] | None = None,
    needs: Mapping[str, list[str]] | None = None,
) -> dict[str, Any]:
    """The report record; ``links`` (invariant -> reference code, from ``@implements``) adds
    each invariant's ``implemented_by``; ``needs`` (invariant -> the fewest capabilities the
    target lacks for one of its tests) is kept for the invariants without a verdict; ``commit`` (default: the checkout in ``cwd``) is the
    code the results come from."""
    per_area: dict[str, Counter[str]] = {}
    totals: Counter[str] = Counter()
    skip_reasons: Counter[str] = Counter()
    invariants = []
    needs = needs or {}
    for r in results:
        outcome = r.outcome
        totals[outcome] += 1
        per_area.setdefault(r.invariant.area, Counter())[outcome] += 1
        for t in r.results:
            if t.outcome == "skipped" and t.reason:
                skip_reasons[t.reason] += 1
        inv = r.invariant
        invariants.append(
            {
                "id": inv.id,
                "area": inv.area,
                "statement": inv.statement,
                "source": inv.source,
                "status": inv.status if inv.active else f"planned:{inv.planned_for}",
                **({"white_box": inv.white_box} if inv.white_box else {}),
                "tests": r.tests,
                **({"implemented_by": list(links.get(inv.id, []))} if links is not None else {}),
                "outcome": outcome,
                **(
                    {"needs": list(needs[inv.id])}
                    if needs.get(inv.id) and outcome in ("skipped", "untested")
                    else {}
                ),
                "details": [
                    {
                        "test": t.nodeid,
                        "outcome": t.outcome,
                        **({"reason": t.reason} if t.reason else {}),
                    }
                    for t in r.results
                    if t.outcome != "passed"
                ],
            }
        )
    summary = {
        "total": len(results),
        "outcomes": {o: totals.get(o, 0) for o in OUTCOMES},
        "reach": reach(results, needs),
        "areas": {
            area: {o: c.get(o, 0) for o in OUTCOMES} | {"total": sum(c.values())}
            for area, c in sorted(per_area.items())
        },
        "skip_reasons": dict(skip_reasons.most_common()),
        "target": dict(target),
        "commit": dict(commit) if commit is not None else git_commit(cwd),
        "generated": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
    if extra:
        summary.update(extra)
    return {"schema": SCHEMA_VERSION, "summary": summary, "invariants": invariants}


def reach(
    results: Iterable[InvariantResult], needs: Mapping[str, list[str]] | None = None
) -> dict[str, Any]:
    """How much of the spec the run gave a verdict on: ``verdicts`` (passed or failed) of
    ``active`` invariants; ``white_box_only`` active invariants without a verdict that no public
    decode API can show (tagged in spec/; an engine that exposes another API may still reach
    some, as llama.cpp reaches the allocator's through ggml-alloc.h), and of the others,
    ``reachable_unreached`` ones still skipped or untested — what a black-box test (or one more
    claimed capability) would add. The three counts add up to ``active``.
    ``one_capability_away``: per capability the target does not claim, how many of those it
    alone would unlock (the invariant has a test needing just it)."""
    needs = needs or {}
    active = [r for r in results if r.invariant.active]
    verdicts = [r for r in active if r.outcome in ("passed", "failed")]
    white = [r for r in active if r.invariant.white_box and r.outcome not in ("passed", "failed")]
    unreached = [
        r for r in active if r.outcome in ("skipped", "untested") and not r.invariant.white_box
    ]
    away: Counter[str] = Counter(
        needs[r.invariant.id][0]
        for r in active
        if r.outcome in ("skipped", "untested") and len(needs.get(r.invariant.id, ())) == 1
    )
    return {
        "verdicts": len(verdicts),
        "active": len(active),
        "white_box_only": len(white),
        "reachable_unreached": len(unreached),
        "one_capability_away": dict(sorted(away.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


def reach_line(report: Mapping[str, Any]) -> str:
    r = report["summary"].get("reach")
    if not r or not r["active"]:
        return ""
    return (
        f"verdicts on {r['verdicts']}/{r['active']} active invariants "
        f"({r['verdicts'] / r['active']:.0%}); {r['white_box_only']} white-box only; "
        f"{r['reachable_unreached']} without a verdict though a public API could show them"
    )


def area_table(report: Mapping[str, Any]) -> list[list[str]]:
    rows = [["area", "invariants", *OUTCOMES]]
    for area, counts in report["summary"]["areas"].items():
        rows.append([area, str(counts["total"]), *(str(counts[o]) for o in OUTCOMES)])
    tot = report["summary"]["outcomes"]
    rows.append(["TOTAL", str(report["summary"]["total"]), *(str(tot[o]) for o in OUTCOMES)])
    return rows


def format_table(rows: list[list[str]], markdown: bool = False) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]

    def fmt(r: list[str]) -> str:
        cells = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))]
        return ("| " + " | ".join(cells) + " |") if markdown else "  ".join(cells)

    lines = [fmt(rows[0])]
    if markdown:
        lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    else:
        lines.append("  ".join("-" * w for w in widths))
    lines += [fmt(r) for r in rows[1:]]
    return "\n".join(lines)


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: Mapping[str, Any]) -> str:
    s = report["summary"]
    tgt = s["target"]
    commit = s.get("commit") or {}
    lines = [
        "# Conformance report",
        "",
        f"- Target: `{tgt.get('name')}` version `{tgt.get('version')}`",
        f"- Commit: `{commit.get('id')}`{' (dirty)' if commit.get('dirty') else ''}",
        f"- Generated: {s.get('generated')}",
    ]
    if "hypothesis_profile" in s:
        lines.append(f"- Hypothesis profile: `{s['hypothesis_profile']}`")
    if reach_line(report):
        lines.append(f"- Reach: {reach_line(report)}")
        away = s["reach"].get("one_capability_away") or {}
        if away:
            lines.append(
                "- Claiming one more capability would add: "
                + ", ".join(f"`{cap}` +{n}" for cap, n in away.items())
            )
    mutation = s.get("mutation")
    if mutation:
        lines.append(
            f"- Mutation score: {mutation['killed']}/{mutation['total']} mutants killed"
            f" ({mutation['score']:.0%})"
        )
    lines += ["", "## Summary by area", "", format_table(area_table(report), markdown=True), ""]
    if s.get("skip_reasons"):
        lines += ["## Skip reasons", "", "| reason | tests |", "|---|---|"]
        lines += [f"| {_md_escape(k)} | {v} |" for k, v in s["skip_reasons"].items()]
        lines.append("")
    if mutation:
        lines += [
            "## Mutants",
            "",
            "| mutant | area | defect | must fail | killed |",
            "|---|---|---|---|---|",
        ]
        for m in mutation["mutants"]:
            lines.append(
                f"| `{m['id']}` | {m['area']} | {_md_escape(m['description'])} | "
                f"{', '.join(m['kills'])} | {'yes' if m['killed'] else '**NO**'} |"
            )
        lines.append("")
    by_area: dict[str, list[Mapping[str, Any]]] = {}
    for inv in report["invariants"]:
        by_area.setdefault(inv["area"], []).append(inv)
    lines += ["## Invariants", ""]
    for area, invs in sorted(by_area.items()):
        lines += [f"### {area}", "", "| ID | outcome | statement | tests |", "|---|---|---|---|"]
        for inv in invs:
            outcome = inv["outcome"]
            if outcome == "failed":
                outcome = "**FAILED**"
            elif outcome == "suite-defect":
                outcome = "**SUITE DEFECT**"
            elif outcome == "planned":
                outcome = f"planned ({inv['status'].partition(':')[2]})"
            lines.append(
                f"| {inv['id']} | {outcome} | {_md_escape(inv['statement'])} | {len(inv['tests'])} |"
            )
        lines.append("")
    for outcome, title in (("failed", "Failures"), ("suite-defect", "Defects of the suite")):
        hits = [inv for inv in report["invariants"] if inv["outcome"] == outcome]
        if not hits:
            continue
        lines += [f"## {title}", ""]
        for inv in hits:
            lines.append(f"- **{inv['id']}** {_md_escape(inv['statement'])}")
            for d in inv["details"]:
                if d["outcome"] == outcome:
                    why = f": {_md_escape(d['reason'])}" if d.get("reason") else ""
                    lines.append(f"  - `{d['test']}`{why}")
        lines.append("")
    return "\n".join(lines)


def write_report(
    report: Mapping[str, Any], report_dir: Path, stem: str = "conformance"
) -> tuple[Path, Path]:
    report_dir.mkdir(parents=True, exist_ok=True)
    jpath = report_dir / f"{stem}.json"
    mpath = report_dir / f"{stem}.md"
    jpath.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    mpath.write_text(render_markdown(report), encoding="utf-8")
    return jpath, mpath


def merge_mutation(
    report_dir: Path, mutation: Mapping[str, Any], stem: str = "conformance"
) -> None:
    """Attach a mutation summary to an existing report (written by the meta-tests)."""
    jpath = report_dir / f"{stem}.json"
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "mutation.json").write_text(
        json.dumps(mutation, indent=2) + "\n", encoding="utf-8"
    )
    if not jpath.exists():
        return
    report = json.loads(jpath.read_text(encoding="utf-8"))
    report["summary"]["mutation"] = mutation
    write_report(report, report_dir, stem)


class MergeError(ValueError):
    """Shard reports that cannot be combined (the message is one line)."""


def _run_identity(summary: Mapping[str, Any]) -> dict[str, Any]:
    """What every part of one sharded run shares: a part that differs comes from another run.
    (The peer's version is absent from a part that ran no differential test, so only the peer
    as named on the command line counts.)"""
    t = summary["target"]
    return {
        "commit": (summary.get("commit") or {}).get("id"),
        "target": t.get("spec"),
        "target version": t.get("version"),
        "capabilities": len(t.get("capabilities") or ()),
        "claims": t.get("claims"),
        "peer": (t.get("peer") or {}).get("spec"),
        "hypothesis profile": summary.get("hypothesis_profile"),
    }


def merge_shards(parts: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """One report from the partial reports of ``--shard 1/N`` .. ``N/N`` ((name, report) pairs).

    Refused (:class:`MergeError`): a report that is not a shard's, parts of different commits,
    targets, peers or hypothesis profiles, a shard count that differs, a shard given twice or
    missing, and parts that disagree on the collected tests."""
    if not parts:
        raise MergeError("no shard reports given")
    items = list(parts)
    for name, rep in items:
        if "shard" not in rep:
            raise MergeError(f"{name}: not a shard report (written by a run without --shard I/N)")
    first_name, first = items[0]
    count = first["shard"]["count"]
    ident = _run_identity(first["summary"])
    for name, rep in items[1:]:
        for what, value in _run_identity(rep["summary"]).items():
            if value != ident[what]:
                raise MergeError(
                    f"{name}: {what} {value!r} differs from {first_name}'s {ident[what]!r} "
                    "(parts of different runs)"
                )
        if rep["shard"]["count"] != count:
            raise MergeError(
                f"{name}: shard {rep['shard']['index']}/{rep['shard']['count']} is not one of "
                f"{count} like {first_name}"
            )
        if [i["tests"] for i in rep["invariants"]] != [i["tests"] for i in first["invariants"]]:
            raise MergeError(f"{name}: collected other tests than {first_name}")
    seen: dict[int, str] = {}
    for name, rep in items:
        idx = rep["shard"]["index"]
        if idx in seen:
            raise MergeError(f"shard {idx}/{count} given twice ({seen[idx]} and {name})")
        seen[idx] = name
    missing = sorted(set(range(1, count + 1)) - set(seen))
    if missing:
        raise MergeError(
            f"missing shard {', '.join(f'{i}/{count}' for i in missing)} "
            f"(have {', '.join(str(i) for i in sorted(seen))})"
        )
    owner: dict[str, str] = {}
    results: dict[str, TestResult] = {}
    for name, rep in items:
        for nodeid in rep["shard"]["selected"]:
            if nodeid in owner:
                raise MergeError(f"{nodeid} ran in two shards ({owner[nodeid]} and {name})")
            owner[nodeid] = name
        for nodeid, r in rep["shard"]["results"].items():
            results[nodeid] = TestResult(nodeid, r["outcome"], r.get("reason", ""))
    registry: dict[str, Invariant] = {}
    tests: dict[str, list[str]] = {}
    links: dict[str, list[str]] | None = None
    needs = {rec["id"]: rec["needs"] for rec in first["invariants"] if rec.get("needs")}
    for rec in first["invariants"]:
        status, _, planned_for = rec["status"].partition(":")
        registry[rec["id"]] = Invariant(
            rec["id"],
            rec["area"],
            rec["statement"],
            rec["source"],
            status,
            planned_for or None,
            white_box=rec.get("white_box"),
        )
        tests[rec["id"]] = rec["tests"]
        if "implemented_by" in rec:
            links = links if links is not None else {}
            links[rec["id"]] = rec["implemented_by"]
    s = first["summary"]
    target = dict(s["target"])
    # The peer as loaded by any part that ran a differential test (with its version).
    target["peer"] = max((rep["summary"]["target"].get("peer") or {} for _, rep in items), key=len)
    extra = {k: v for k, v in s.items() if k == "hypothesis_profile"}
    extra["shards"] = count
    return build_report(
        aggregate(registry, tests, results),
        target,
        extra=extra,
        links=links,
        commit=s.get("commit") or {},
        needs=needs,
    )


def compare_targets(reports: Mapping[str, Mapping[str, Any]]) -> str:
    """Markdown: per area, the outcome counts of each target, then every invariant whose outcome
    differs between targets (a failure on one side is a divergence worth reading)."""
    names = list(reports)
    lines = ["# Conformance by target", ""]
    for name, rep in reports.items():
        t = rep["summary"]["target"]
        line = f"- `{name}`: {t.get('name')} {t.get('version') or ''}".rstrip()
        extra = []
        if t.get("capabilities") is not None:
            extra.append(f"claims {len(t['capabilities'])} capabilities")
        peer = t.get("peer") or {}
        if peer.get("name"):
            extra.append(f"differential tests against {peer['name']}")
        if reach_line(rep):
            extra.append(reach_line(rep))
        lines.append(line + (f" ({'; '.join(extra)})" if extra else ""))
    lines += ["", "## Passed / failed / skipped per area", ""]
    header = "| area | " + " | ".join(names) + " |"
    lines += [header, "|---|" + "---|" * len(names)]
    areas = sorted({a for rep in reports.values() for a in rep["summary"]["areas"]})
    for area in areas:
        cells = []
        for rep in reports.values():
            c = rep["summary"]["areas"].get(area)
            cells.append("–" if c is None else f"{c['passed']} / {c['failed']} / {c['skipped']}")
        lines.append(f"| {area} | " + " | ".join(cells) + " |")
    by_id: dict[str, dict[str, str]] = {}
    statements: dict[str, str] = {}
    for name, rep in reports.items():
        for inv in rep["invariants"]:
            by_id.setdefault(inv["id"], {})[name] = inv["outcome"]
            statements[inv["id"]] = inv["statement"]
    differ = [
        i
        for i in sorted(by_id, key=_id_sort_key)
        if {"failed", "suite-defect"} & set(by_id[i].values())
    ]
    lines += ["", "## Failures on any target", ""]
    if not differ:
        lines.append("None.")
    else:
        lines += [
            "| ID | " + " | ".join(names) + " | statement |",
            "|---|" + "---|" * (len(names) + 1),
        ]
        for i in differ:
            lines.append(
                f"| {i} | "
                + " | ".join(by_id[i].get(n, "–") for n in names)
                + f" | {_md_escape(statements[i])} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m conformance.report compare NAME=PATH ... -o OUT.md``"""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m conformance.report")
    sub = ap.add_subparsers(dest="cmd", required=True)
    cmp_ = sub.add_parser("compare", help="compare conformance.json reports of several targets")
    cmp_.add_argument("reports", nargs="+", help="NAME=path/to/conformance.json")
    cmp_.add_argument("-o", "--output", required=True)
    mrg = sub.add_parser("merge", help="combine the reports of --shard 1/N .. N/N into one")
    mrg.add_argument("parts", nargs="+", help="the shards' conformance.json files")
    mrg.add_argument("-o", "--output", required=True, help="directory for conformance.json/.md")
    args = ap.parse_args(argv)
    if args.cmd == "merge":
        parts: list[tuple[str, Any]] = []
        for path in args.parts:
            p = Path(path)
            if not p.exists():
                ap.error(f"shard report {p} does not exist")
            parts.append((str(p), json.loads(p.read_text(encoding="utf-8"))))
        try:
            merged = merge_shards(parts)
        except MergeError as exc:
            print(f"merge: {exc}", file=sys.stderr)
            return 2
        jpath, _ = write_report(merged, Path(args.output))
        o = merged["summary"]["outcomes"]
        print(
            f"wrote {jpath} and conformance.md from {len(parts)} shards: "
            + ", ".join(f"{v} {k}" for k, v in o.items() if v)
        )
        return 0
    reports: dict[str, Any] = {}
    for item in args.reports:
        name, _, path = item.partition("=")
        p = Path(path)
        if not p.exists():
            ap.error(f"report {p} does not exist (run the conformance suite for {name!r} first)")
        reports[name] = json.loads(p.read_text(encoding="utf-8"))
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(compare_targets(reports), encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
