"""The tolerance table in spec/kernels.md and the constants the tests use are the same."""

from __future__ import annotations

import re
from pathlib import Path

from conformance.kernels._tolerance import TOLERANCES

SPEC = Path(__file__).resolve().parents[2] / "spec" / "kernels.md"


def test_spec_table_matches_the_code() -> None:
    rows = {}
    for line in SPEC.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\|\s*(float\d+)\s*\|\s*([0-9.e+-]+)\s*\|\s*([0-9.e+-]+)\s*\|", line)
        if m:
            rows[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    assert rows == {k: (t.nmse, t.max_abs) for k, t in TOLERANCES.items()}
