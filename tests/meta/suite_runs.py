"""Running the conformance suite in a child process, as the meta-tests do."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CONFORMANCE_DIR = Path(__file__).resolve().parents[2] / "conformance"


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
        sys.executable,
        "-m",
        "pytest",
        *(str(p) for p in (paths or [CONFORMANCE_DIR])),
        *args,
        f"--report-dir={report_dir}",
        "-p",
        "no:cacheprovider",
        "-q",
        "--no-header",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    report_path = report_dir / "conformance.json"
    if not report_path.exists():
        pytest.fail(
            f"the run wrote no report (exit {proc.returncode}):\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc, json.loads(report_path.read_text())
