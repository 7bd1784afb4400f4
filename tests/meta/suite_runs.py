"""Running the conformance suite in a child process, as the meta-tests do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CONFORMANCE_DIR = Path(__file__).resolve().parents[2] / "conformance"


def run_conformance(
    report_dir: Path, *args: str, timeout: int
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """The suite with ``args`` (hypothesis profile ``ci``: derandomized, so a verdict is
    reproducible) and its ``conformance.json``; fails the calling test when none was written."""
    env = dict(os.environ)
    env["DC_HYPOTHESIS_PROFILE"] = "ci"
    env.setdefault("TRITON_INTERPRET", "1")
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(CONFORMANCE_DIR),
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
