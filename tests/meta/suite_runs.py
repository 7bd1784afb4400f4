"""Running the conformance suite in a child process, as the meta-tests do.

A child is forked from a multiprocessing fork server that has imported what every run imports
(:mod:`tests.meta.preload`): most of the time a fresh interpreter needs for a one-file mutant
run, times four hundred mutants. The fork server itself runs no tensor code, so forking it is
safe; each child is a fresh pytest session (``pytest.main``) whose mutations die with it. Where
fork servers do not exist, or with ``DC_META_SUBPROCESS=1``, a plain subprocess runs instead.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

CONFORMANCE_DIR = Path(__file__).resolve().parents[2] / "conformance"
PRELOAD = ["tests.meta.preload"]


def _forked_pytest(args: list[str], env: dict[str, str], out: str, err: str) -> None:
    os.environ.clear()
    os.environ.update(env)
    for fd, path in ((1, out), (2, err)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(target, fd)
        os.close(target)
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - the child's whole life
    sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
    try:
        code = int(pytest.main(args))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


_CONTEXT: Any = None


def _fork_server() -> Any:
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(PRELOAD)
    return _CONTEXT


def run_pytest(
    args: list[str], env: dict[str, str], timeout: int
) -> subprocess.CompletedProcess[str]:
    """``python -m pytest ARGS`` with ``env``: forked from the fork server, or a subprocess."""
    forking = os.environ.get("DC_META_SUBPROCESS") != "1" and (
        "forkserver" in multiprocessing.get_all_start_methods()
    )
    if not forking:
        cmd = [sys.executable, "-m", "pytest", *args]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    with tempfile.TemporaryDirectory() as tmp:
        out, err = os.path.join(tmp, "out"), os.path.join(tmp, "err")
        child = _fork_server().Process(target=_forked_pytest, args=(args, env, out, err))
        child.start()
        child.join(timeout)
        if child.is_alive():
            child.kill()
            child.join()
            raise subprocess.TimeoutExpired(["pytest", *args], timeout)
        with open(out, encoding="utf-8", errors="replace") as f_out:
            stdout = f_out.read()
        with open(err, encoding="utf-8", errors="replace") as f_err:
            stderr = f_err.read()
    return subprocess.CompletedProcess(["pytest", *args], child.exitcode or 0, stdout, stderr)


def files_naming(invariants: list[str]) -> list[Path]:
    """The conformance test files that mention any of ``invariants``: a mutant run collects
    these instead of the whole suite (collection is most of a short run). A file that mentions
    an ID without testing it costs a little time; a test of the ID outside these files could
    only make a kill harder, never give one that the whole suite would not."""
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, invariants)) + r")\b")
    files = sorted(
        f for f in CONFORMANCE_DIR.rglob("test_*.py") if pattern.search(f.read_text("utf-8"))
    )
    return files or [CONFORMANCE_DIR]


def run_conformance(
    report_dir: Path,
    *args: str,
    timeout: int,
    paths: list[Path] | None = None,
    env: dict[str, str] | None = None,
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """The suite (or the test files ``paths``) with ``args`` (hypothesis profile ``ci``:
    derandomized, so a verdict is reproducible) and its ``conformance.json``; fails the calling
    test when none was written."""
    env = dict(os.environ) | (env or {})
    env["DC_HYPOTHESIS_PROFILE"] = "ci"
    env.setdefault("TRITON_INTERPRET", "1")
    cmd = [
        *(str(p) for p in (paths or [CONFORMANCE_DIR])),
        *args,
        f"--report-dir={report_dir}",
        "-p",
        "no:cacheprovider",
        "-q",
        "--no-header",
    ]
    proc = run_pytest(cmd, env, timeout)
    report_path = report_dir / "conformance.json"
    if not report_path.exists():
        pytest.fail(
            f"the run wrote no report (exit {proc.returncode}):\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc, json.loads(report_path.read_text())
