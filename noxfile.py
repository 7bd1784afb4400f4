"""nox sessions of decode-conformance.

Every session runs with the interpreter that runs nox (no version matrix), so it works where
only the machine's own python3 exists, including with ``CI`` set. Arguments after ``--`` go to
pytest (``nox -s conformance -- --target mymod:adapter -k batch``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nox

nox.options.reuse_venv = "yes"
nox.options.sessions = ["lint", "typecheck", "tests"]
# `nox -s tests` runs on every core (pytest-xdist, -n auto); `nox -s conformance -- -n auto` too.
if hasattr(nox.options, "download_python"):
    nox.options.download_python = "never"

ROOT = Path(__file__).resolve().parent
REPORTS = "reports"


def _install(session: nox.Session, *extras: str) -> None:
    # constraints.txt pins torch to the CPU wheel; plain pip (not uv) sees the local wheel.
    extra = ",".join(("test", *extras))
    session.install("-c", "constraints.txt", "-e", f".[{extra}]")


def _env() -> dict[str, str | None]:
    profile = os.environ.get("DC_HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
    return {
        "DC_HYPOTHESIS_PROFILE": profile,
        # Triton kernels run through the interpreter on machines without a GPU.
        "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", "1"),
        "PYTHONHASHSEED": "0",
        # Bytecode caches on (None unsets the variable): the meta-tests start hundreds of child
        # pytest runs, and without cached .pyc files each one compiles the test modules and
        # their assertion rewrites again, about a second per child on a 2-core machine.
        "PYTHONDONTWRITEBYTECODE": None,
    }


def _pytest(session: nox.Session, *args: str) -> None:
    # Exit code 5 ("no tests collected") is a failure like any other non-zero code.
    session.run("python", "-m", "pytest", *args, env=_env())


def _workers(posargs: list[str]) -> list[str]:
    """``-n auto`` (pytest-xdist, one worker per core) unless the arguments choose: ``-n N``,
    ``-n 0`` for one process, or ``-p no:xdist``."""
    chosen = any(
        a in ("-n", "--numprocesses", "no:xdist") or a.startswith(("-n", "--numprocesses="))
        for a in posargs
    )
    return [] if chosen else ["-n", "auto"]


@nox.session
def conformance(session: nox.Session) -> None:
    """THE MAIN JOB: the conformance suite against a target (default: reference) + report."""
    _install(session)
    _pytest(session, "conformance", "--report-dir", REPORTS, *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """Everything CI needs: conformance (strict traceability) including the differential tests
    against llama.cpp, unit tests, meta-tests, snapshots, the bench harness's own tests, and
    the CI sample of mechanical mutants (``nox -s mutation`` runs the large one).

    Installs the llamacpp extra (llama.cpp is the real peer of the differential tests): pip
    builds llama-cpp-python from source the first time (about 10 minutes on 2 cores) and
    reuses the cached wheel afterwards.
    """
    _install(session, "bench", "llamacpp")
    workers = _workers(session.posargs)
    _pytest(
        session,
        "conformance",
        "--report-dir",
        REPORTS,
        "--traceability",
        "strict",
        *workers,
        *session.posargs,
    )
    # worksteal: the meta-tests' child runs differ in length by 100x; idle workers take work.
    steal = ["--dist", "worksteal"] if workers else []
    # the slowest tests are printed, so CI logs show where the time goes
    _pytest(session, "tests", *workers, *steal, "--durations=15", *session.posargs)
    # a bounded, fixed sample of mechanical mutants; a survivor not triaged fails CI
    session.run(
        "python", "-m", "tools.mutation", "run", "--sample", "ci", "--out", REPORTS, env=_env()
    )


@nox.session
def mutation(session: nox.Session) -> None:
    """Mechanical mutation of reference_impl/ and kernels/: first every site whose line no
    conformance test of its area executes (untriaged ones fail the session), then a seeded
    sample spread over the areas (400 by default; ``-- --sample full`` for every site), each
    mutant run against its area's conformance tests; reports/mutation.json and a table in
    reports/conformance.md. A survivor not triaged in tools/mutation/triage.txt fails the
    session. Then every mechanical proof of tools/mutation/covered.txt (an invariant's own tests
    kill a mutant of its code) runs again; a proof that no longer holds fails the session."""
    _install(session)
    # First the certain survivors: sites no conformance test of their area executes (minutes).
    session.run("python", "-m", "tools.mutation", "unrun", "--out", REPORTS, env=_env())
    session.run(
        "python", "-m", "tools.mutation", "run", "--out", REPORTS, *session.posargs, env=_env()
    )
    session.run("python", "-m", "tools.mutation", "cover", "--verify", env=_env())


@nox.session
def durations(session: nox.Session) -> None:
    """Refresh conformance/durations.json (seconds per conformance test, what --shard balances
    with) from one serial run of the suite against the reference; commit the file."""
    _install(session, "llamacpp")
    _pytest(
        session,
        "conformance",
        "-p",
        "no:xdist",
        "-q",
        "--record-durations",
        "conformance/durations.json",
        *session.posargs,
    )


@nox.session
def snapshots(session: nox.Session) -> None:
    """Regenerate all snapshots (--snapshot-update) and list the files that changed."""
    _install(session)
    _pytest(session, "conformance", "--snapshot-update", *session.posargs)
    session.run("python", "-m", "tools.bench", "baseline", "--update", env=_env())
    changed = subprocess.run(
        ["git", "status", "--porcelain", "--", "snapshots"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    session.log("snapshot files changed:\n" + (changed or "  (none)"))


def _not_yet(session: nox.Session, what: str, issue: str) -> None:
    session.error(f"'{session.name}' is not yet implemented: {what} (tracked in the {issue} issue)")


@nox.session
def bench(session: nox.Session) -> None:
    """Run the benchmark cases and save the run (commit, dirty flag, machine)."""
    # Options after -- go to `python -m tools.bench run` (--rounds, --max-time, -k, ...).
    # DC_BENCH_EXTRAS=llamacpp also installs the llama.cpp peer (built from source: slow).
    extras = [x for x in os.environ.get("DC_BENCH_EXTRAS", "").split(",") if x.strip()]
    _install(session, "bench", *extras)
    session.run("python", "-m", "tools.bench", "run", *session.posargs, env=_env())


@nox.session
def bench_suite(session: nox.Session) -> None:
    """The suite's own wall time, serial against -n 2 (reports/bench/suite-time.md)."""
    # nox -s bench_suite -- --paths conformance tests --workers 1 2 4 --rounds 2
    _install(session, "bench", "llamacpp")
    session.run("python", "-m", "tools.bench", "suite", *session.posargs, env=_env())


@nox.session
def bench_compare(session: nox.Session) -> None:
    """Compare two commits (or two saved runs), interleaved in one job."""
    # nox -s bench_compare -- BASE [HEAD] [--threshold 0.1 --rounds 6 --common-only ...]
    if not session.posargs:
        session.error(
            "usage: nox -s bench_compare -- BASE [HEAD] [options]; see docs/benchmarks.md"
        )
    extras = [x for x in os.environ.get("DC_BENCH_EXTRAS", "").split(",") if x.strip()]
    _install(session, "bench", *extras)
    session.run("python", "-m", "tools.bench", "compare", *session.posargs, env=_env())


@nox.session
def parity(session: nox.Session) -> None:
    """llama.cpp as a real peer: the suite on the reference (differential tests compare it with
    llama.cpp), then the whole suite on llama.cpp (differential tests compare it with the
    reference), and a side-by-side report of both targets (reports/targets.md).

    Installs the llamacpp extra: pip builds llama-cpp-python from source the first time
    (about 10 minutes on 2 cores), then reuses the cached wheel.
    """
    _install(session, "llamacpp")
    env = _env() | {"DC_LLAMACPP_THREADS": os.environ.get("DC_LLAMACPP_THREADS", "1")}
    session.run(
        "python",
        "-m",
        "pytest",
        "conformance",
        "--peer",
        "llamacpp",
        "--report-dir",
        REPORTS,
        *session.posargs,
        env=env,
    )
    # The suite on llama.cpp reports its divergences from the spec: a failure there is a finding
    # about llama.cpp (listed in reports/targets.md), not a broken session.
    session.run(
        "python",
        "-m",
        "pytest",
        "conformance",
        "--target",
        "llamacpp",
        "--peer",
        "reference",
        "--report-dir",
        f"{REPORTS}/llamacpp",
        "--tb=line",
        *session.posargs,
        env=env,
        success_codes=[0, 1],
    )
    session.run(
        "python",
        "-m",
        "conformance.report",
        "compare",
        f"reference={REPORTS}/conformance.json",
        f"llamacpp={REPORTS}/llamacpp/conformance.json",
        "-o",
        f"{REPORTS}/targets.md",
    )


@nox.session
def transformers(session: nox.Session) -> None:
    """Hugging Face transformers as a third engine: the whole suite on the transformers target
    (conformance/targets/transformers/) with llama.cpp as its peer, then a side-by-side report
    with the reference and, when the parity session has left its report, llama.cpp
    (reports/engines.md).

    Installs the transformers and llamacpp extras (llama-cpp-python's wheel is built once). A
    failure of the transformers target is a finding about transformers (its DIVERGENCES.md),
    not a broken session.
    """
    _install(session, "transformers", "llamacpp")
    env = _env() | {"DC_LLAMACPP_THREADS": os.environ.get("DC_LLAMACPP_THREADS", "1")}
    session.run(
        "python",
        "-m",
        "pytest",
        "conformance",
        "--target",
        "transformers",
        "--peer",
        "llamacpp",
        "--report-dir",
        f"{REPORTS}/transformers",
        "--tb=line",
        *session.posargs,
        env=env,
        success_codes=[0, 1],
    )
    if not Path(REPORTS, "conformance.json").exists():
        _pytest(session, "conformance", "--report-dir", REPORTS, "-q")
    reports = [f"reference={REPORTS}/conformance.json"]
    if Path(REPORTS, "llamacpp", "conformance.json").exists():
        reports.append(f"llamacpp={REPORTS}/llamacpp/conformance.json")
    else:
        session.log("no llama.cpp report (run `nox -s parity` first to add it to the table)")
    reports.append(f"transformers={REPORTS}/transformers/conformance.json")
    session.run(
        "python",
        "-m",
        "conformance.report",
        "compare",
        *reports,
        "-o",
        f"{REPORTS}/engines.md",
    )


@nox.session
def gpu(session: nox.Session) -> None:
    """Compiled Triton kernels on a GPU: parity matrix and bandwidth benchmarks."""
    # Compiled kernels (no interpreter), the larger parity grid, then the benchmarks vs torch
    # SDPA; the results go to docs/kernels-gpu-<device>.md (commit them).
    _install(session, "bench")
    probe = "import torch; print('cuda=' + str(torch.cuda.is_available()))"
    found = session.run("python", "-c", probe, silent=True, success_codes=[0, 1]) or ""
    if "cuda=True" not in str(found):
        session.error(
            "the gpu session needs a CUDA device: torch.cuda.is_available() is False here "
            "(use the CPU sessions, which run the kernels through Triton's interpreter)"
        )
    env = {**_env(), "TRITON_INTERPRET": "0", "DC_KERNELS_SCALE": "gpu"}
    session.run(
        "python", "-m", "pytest", "conformance/kernels", "tests/kernels", *session.posargs, env=env
    )
    Path(REPORTS).mkdir(exist_ok=True)
    bench_json = f"{REPORTS}/bench-kernels-gpu.json"
    session.run(
        "python",
        "-m",
        "pytest",
        "tools/bench/cases/test_kernels.py",
        "--benchmark-only",
        f"--benchmark-json={bench_json}",
        env=env,
    )
    session.run("python", "-m", "kernels.gpu_report", bench_json, "docs", env=env)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff: lint and formatting."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy over the packages (with every optional dependency installed, as in development)."""
    _install(session, "dev", "bench", "llamacpp")
    session.run("mypy", "conformance", "reference_impl", "kernels", "tools", "noxfile.py")


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run this file with nox: python3 -m nox -l")
