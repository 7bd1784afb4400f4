"""Meta-test: no conformance test leans on more than it declares.

The whole suite runs once, in two shards, with ``--claims=minimal``: every test sees a target
that claims exactly the capabilities the test requires (what it ``uses`` is absent, so its
fallback path runs), and the gate (:mod:`conformance.gate`) refuses everything else. A test
requiring one capability C therefore runs against a target with C alone; one requiring C1 and C2
against a target with just those two. The run must have no suite defect and no failure: the
reference passes every test with its full capabilities, so a test that fails here depends on
something it did not declare.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.meta.suite_runs import run_conformance

SHARDS = 2  # halves that two xdist workers run side by side (the whole run is minutes)


@pytest.mark.parametrize("shard", range(1, SHARDS + 1))
def test_every_test_passes_against_a_target_with_only_its_required_capabilities(
    shard: int, tmp_path: Path
) -> None:
    proc, report = run_conformance(
        tmp_path, "--claims=minimal", "--tb=line", f"--shard={shard}/{SHARDS}", timeout=1800
    )
    outcomes = report["summary"]["outcomes"]
    bad = [
        f"{d['test']}: {d['outcome']} {d.get('reason', '')}".rstrip()
        for inv in report["invariants"]
        for d in inv["details"]
        if d["outcome"] in ("failed", "suite-defect")
    ]
    assert not bad, "tests that need more than they declare:\n" + "\n".join(sorted(set(bad)))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert outcomes["passed"] > 150, outcomes  # the shard did run its part of the suite
