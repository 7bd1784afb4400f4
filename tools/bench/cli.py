"""``python -m tools.bench run | compare | baseline | smoke`` (what the nox sessions call).

Exit status: 0 fine; 1 a regression (compare), baseline problems (baseline --check) or a failed
case (smoke); 2 bad input (unknown commit, differing cases, missing or malformed files).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path

from tools.bench import baseline as baseline_mod
from tools.bench.runs import SAVE_DIR, BenchError, Run, commit_info, save_run

REPORT_DIR = Path("reports") / "bench"


def log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def _settings_args(p: argparse.ArgumentParser, rounds: int) -> None:
    g = p.add_argument_group("measurement")
    g.add_argument(
        "--rounds", type=int, default=rounds, help=f"processes per side (default {rounds})"
    )
    g.add_argument(
        "--inner-rounds",
        type=int,
        default=5,
        help="timed repetitions per case and round, at least (default 5)",
    )
    g.add_argument(
        "--max-time",
        type=float,
        default=0.2,
        help="seconds per case and round, at most unless the repetitions need more (default 0.2)",
    )
    g.add_argument(
        "--timer",
        choices=("cpu", "wall"),
        default=None,
        help="cpu: the process's CPU time (immune to time slices lost to other processes on "
        "a shared machine); wall: elapsed time. Default: cpu with one thread, wall with more "
        "(CPU time sums every thread, spin-waits included, so it is no throughput measure)",
    )
    g.add_argument("--threads", type=int, default=1, help="threads per case (default 1)")
    g.add_argument("-k", dest="keyword", default=None, help="pytest -k expression")


def _settings(a: argparse.Namespace):  # -> Settings (import kept lazy for the CLI's start)
    from tools.bench.runner import Settings

    timer = a.timer or ("cpu" if a.threads == 1 else "wall")
    if timer == "cpu" and a.threads > 1:
        log(
            f"note: --timer cpu with {a.threads} threads sums the CPU time of every thread "
            "(spin-waits included): times are not throughput; use --timer wall on a quiet machine"
        )
    return Settings(
        rounds=a.rounds,
        inner_rounds=a.inner_rounds,
        max_time=a.max_time,
        timer=timer,
        threads=a.threads,
        keyword=a.keyword,
    )


def _root() -> Path:
    from tools.bench.compare import repo_root

    try:
        return repo_root(Path.cwd())
    except BenchError:
        return Path.cwd()


def measure_here(a: argparse.Namespace) -> Run:
    from tools.bench.compare import run_from_rounds
    from tools.bench.runner import Checkout, measure

    settings = _settings(a)
    root = _root()
    info = commit_info(root)
    label = f"working tree {str(info.get('id') or 'unknown')[:12]}"
    label += "+dirty" if info.get("dirty") else ""
    log(f"{label}: {settings.rounds} round(s) of the bench cases")
    (rounds,) = measure([Checkout(label, root, info)], settings, progress=log)
    return run_from_rounds(Checkout(label, root, info), settings, rounds)


def _have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        log("matplotlib is not installed: no chart (pip install -e '.[bench]')")
        return False
    return True


def write_run_reports(run: Run, report_dir: Path, chart: bool = True) -> list[Path]:
    from tools.bench.report import run_markdown

    report_dir.mkdir(parents=True, exist_ok=True)
    md = report_dir / "bench.md"
    md.write_text(run_markdown(run))
    js = report_dir / "bench.json"
    js.write_text(json.dumps(run.to_json(), indent=1) + "\n")
    out = [md, js]
    if chart and _have_matplotlib():
        from tools.bench.chart import run_chart

        out.append(run_chart(run, report_dir / "bench.png"))
    return out


def cmd_run(a: argparse.Namespace) -> int:
    start = time.perf_counter()
    run = measure_here(a)
    if not a.no_save:
        log(f"saved {save_run(run, a.save_dir)}")
    for p in write_run_reports(run, a.report_dir, chart=not a.no_chart):
        log(f"wrote {p}")
    print(Path(a.report_dir / "bench.md").read_text())
    log(f"{len(run.cases)} cases, {len(run.skipped)} skipped, {time.perf_counter() - start:.0f} s")
    return 0


def cmd_compare(a: argparse.Namespace) -> int:
    from tools.bench.compare import compare_sources, open_sources
    from tools.bench.report import compare_markdown

    if not 0 < a.threshold < 10:
        raise BenchError("--threshold is a fraction, e.g. 0.10 for 10%")
    if not 0.5 <= a.confidence < 1:
        raise BenchError("--confidence must be in [0.5, 1), e.g. 0.95")
    settings = _settings(a)
    root = _root()
    start = time.perf_counter()
    with open_sources((a.base, a.head), root, a.save_dir) as (base, head):
        comp = compare_sources(
            base,
            head,
            settings,
            threshold=a.threshold,
            confidence=a.confidence,
            stat=a.stat,
            common_only=a.common_only,
            extra_rounds=a.extra_rounds,
            progress=log,
        )
    a.report_dir.mkdir(parents=True, exist_ok=True)
    md = a.report_dir / "compare.md"
    md.write_text(compare_markdown(comp))
    (a.report_dir / "compare.json").write_text(json.dumps(comp.to_json(), indent=1) + "\n")
    written = [md, a.report_dir / "compare.json"]
    if not a.no_chart and _have_matplotlib():
        from tools.bench.chart import compare_chart

        written.append(compare_chart(comp, a.report_dir / "compare.png"))
    print(md.read_text())
    for p in written:
        log(f"wrote {p}")
    log(f"compared in {time.perf_counter() - start:.0f} s")
    if comp.regressed:
        log(f"FAIL: {comp.count('slower')} case(s) slower beyond {a.threshold:.0%}")
        return 1
    if a.strict and comp.count("inconclusive"):
        log(f"FAIL (--strict): {comp.count('inconclusive')} inconclusive case(s)")
        return 1
    return 0


def cmd_baseline(a: argparse.Namespace) -> int:
    path = a.file
    if a.check:
        from tools.bench.runner import smoke

        base = baseline_mod.read(path)
        res = smoke(_root(), keyword=None)
        if res.returncode != 0:
            log("bench cases fail when run once:\n" + res.output[-4000:])
            return 1
        problems = baseline_mod.check(base, res.ran, res.collected)
        for p in problems:
            log(p)
        if not problems:
            log(f"{path}: {len(base.lines)} lines, every bench case that runs here has one")
        return 1 if problems else 0
    # --update
    from tools.bench.compare import load_saved_ref

    if a.source:
        run = load_saved_ref(a.source, a.save_dir)
        log(f"baseline from saved run {run.source}")
    else:
        run = measure_here(a)
        log(f"saved {save_run(run, a.save_dir)}")
    old = baseline_mod.read(path) if path.is_file() else None
    new, changes = baseline_mod.refresh(old, run, tolerance=a.tolerance, force=a.force)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(baseline_mod.render(new))
    log(
        f"wrote {path}: "
        + ", ".join(f"{len(v)} {k}" for k, v in changes.items())
        + (f" (kept: within {a.tolerance:.0%})" if changes["kept"] else "")
    )
    return 0


def cmd_smoke(a: argparse.Namespace) -> int:
    from tools.bench.runner import smoke

    start = time.perf_counter()
    res = smoke(_root(), keyword=a.keyword)
    print(res.output)
    log(
        f"{len(res.ran)} ran, {len(res.collected) - len(res.ran)} did not "
        f"({time.perf_counter() - start:.1f} s)"
    )
    return 0 if res.returncode == 0 else 1


def cmd_calibrate(a: argparse.Namespace) -> int:
    from tools.bench.calibrate import calibrate

    start = time.perf_counter()
    cal = calibrate(
        _root(),
        _settings(a),
        rev=a.rev,
        repeats=a.repeats,
        slow_repeats=a.slow_repeats,
        slowdown=a.slowdown,
        threshold=a.threshold,
        confidence=a.confidence,
        extra_rounds=a.extra_rounds,
        progress=log,
        out=a.report_dir,
    )
    print(cal.markdown())
    log(f"wrote {a.report_dir / 'calibration.md'} in {time.perf_counter() - start:.0f} s")
    return 0


def cmd_suite(a: argparse.Namespace) -> int:
    from tools.bench import suite_time

    runs = suite_time.measure(a.paths, a.workers, a.rounds, a.pytest_args, progress=log)
    md = suite_time.write(runs, a.paths, a.pytest_args, a.report_dir)
    print(md.read_text())
    log(f"wrote {md} and suite-time.json")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run the cases, save the run, write reports/bench/bench.md")
    _settings_args(r, rounds=4)
    r.add_argument("--save-dir", type=Path, default=SAVE_DIR)
    r.add_argument("--report-dir", type=Path, default=REPORT_DIR)
    r.add_argument("--no-save", action="store_true", help="do not keep the run")
    r.add_argument("--no-chart", action="store_true")
    r.set_defaults(fn=cmd_run)

    c = sub.add_parser(
        "compare",
        help="BASE [HEAD]: commits (interleaved in this job) or saved runs (path or run:SPEC)",
        description="BASE and HEAD are each a commit (HEAD by default; '.' is the working tree "
        "as it is), a saved run file, or run:latest / run:latest~N / run:<commit prefix> among "
        "the saved runs.",
    )
    c.add_argument("base")
    c.add_argument("head", nargs="?", default="HEAD")
    _settings_args(c, rounds=6)
    c.add_argument("--threshold", type=float, default=0.10, help="default 0.10 (10%%)")
    c.add_argument("--confidence", type=float, default=0.95, help="default 0.95")
    c.add_argument(
        "--stat",
        choices=("median", "min"),
        default="median",
        help="per-round statistic compared (default median)",
    )
    c.add_argument(
        "--extra-rounds",
        type=int,
        default=4,
        help="more interleaved rounds for cases still inconclusive (default 4; 0: none)",
    )
    c.add_argument(
        "--common-only",
        action="store_true",
        help="compare the cases both sides have (the others are listed); default: differing "
        "case sets are an error",
    )
    c.add_argument("--strict", action="store_true", help="fail on inconclusive cases too")
    c.add_argument("--save-dir", type=Path, default=SAVE_DIR)
    c.add_argument("--report-dir", type=Path, default=REPORT_DIR)
    c.add_argument("--no-chart", action="store_true")
    c.set_defaults(fn=cmd_compare)

    b = sub.add_parser(
        "baseline", help=f"refresh (--update) or check (--check) {baseline_mod.BASELINE}"
    )
    mode = b.add_mutually_exclusive_group(required=True)
    mode.add_argument("--update", action="store_true", help="measure (or --from) and rewrite")
    mode.add_argument("--check", action="store_true", help="every case that runs has a line")
    b.add_argument("--from", dest="source", default=None, help="a saved run (path or run:SPEC)")
    b.add_argument("--file", type=Path, default=baseline_mod.BASELINE)
    b.add_argument("--tolerance", type=float, default=0.10, help="keep lines within this")
    b.add_argument("--force", action="store_true", help="rewrite every line")
    b.add_argument("--save-dir", type=Path, default=SAVE_DIR)
    _settings_args(b, rounds=4)
    b.set_defaults(fn=cmd_baseline)

    k = sub.add_parser(
        "calibrate",
        help="false-positive rate (self-comparisons) and detection of an injected slowdown",
    )
    k.add_argument("--rev", default="HEAD", help="the commit to calibrate on (default HEAD)")
    k.add_argument("--repeats", type=int, default=10, help="self-comparisons (default 10)")
    k.add_argument("--slow-repeats", type=int, default=2, help="comparisons with the slow copy")
    k.add_argument("--slowdown", type=float, default=1.3, help="injected factor (default 1.3)")
    k.add_argument("--threshold", type=float, default=0.10)
    k.add_argument("--confidence", type=float, default=0.95)
    k.add_argument("--extra-rounds", type=int, default=4)
    k.add_argument("--report-dir", type=Path, default=REPORT_DIR)
    _settings_args(k, rounds=6)
    k.set_defaults(fn=cmd_calibrate)

    t = sub.add_parser(
        "suite",
        help="the suite's own wall time, serial against -n N workers (suite-time.md)",
    )
    t.add_argument("--paths", nargs="+", default=["conformance"], help="default: conformance")
    t.add_argument(
        "--workers", type=int, nargs="+", default=[1, 2], help="1 = serial (default: 1 2)"
    )
    t.add_argument("--rounds", type=int, default=1, help="alternating rounds (default 1)")
    t.add_argument(
        "--pytest-args", nargs=argparse.REMAINDER, default=[], help="the rest goes to pytest"
    )
    t.add_argument("--report-dir", type=Path, default=REPORT_DIR)
    t.set_defaults(fn=cmd_suite)

    s = sub.add_parser("smoke", help="run every case once (--benchmark-disable): do they work?")
    s.add_argument("-k", dest="keyword", default=None)
    s.set_defaults(fn=cmd_smoke)
    return p


def _terminate(signum: int, frame: object) -> None:
    # CI kills a job with SIGTERM: unwind, so temporary checkouts are removed and the running
    # round's pytest process is killed by subprocess.run on the way out.
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        return int(a.fn(a))
    except BenchError as exc:
        log(f"error: {exc}")
        return 2
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
