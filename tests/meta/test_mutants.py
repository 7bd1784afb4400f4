"""Meta-tests: the suite must catch every mutant (a check that cannot fail is a defect).

Each mutant runs in its own pytest process against only the tests that check the invariants
the mutant breaks; every one of those invariants must be reported ``failed``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conformance.mutants import Mutant, all_mutants
from conformance.spec import load_spec
from tests.meta.suite_runs import files_naming, run_conformance

MUTANTS = all_mutants()


def run_suite_against_mutant(mutant: Mutant, report_dir: Path, *extra: str) -> dict[str, Any]:
    _, report = run_conformance(
        report_dir,
        f"--target=mutant:{mutant.id}",
        *extra,
        f"--only-invariants={','.join(mutant.kills)}",
        "--stop-once-failed",  # the verdict is final once every named invariant has failed
        "--snapshot-warn-unused",
        "--tb=no",
        timeout=900,
        paths=files_naming(list(mutant.kills)),
    )
    return {inv["id"]: inv["outcome"] for inv in report["invariants"] if inv["id"] in mutant.kills}


def test_registry_is_well_formed() -> None:
    registry = load_spec()
    assert MUTANTS, "no mutants registered"
    for m in MUTANTS.values():
        assert m.kills, f"mutant {m.id} names no invariant it breaks"
        for inv_id in m.kills:
            assert inv_id in registry, f"mutant {m.id} names unknown invariant {inv_id}"
            assert registry[inv_id].active, f"mutant {m.id} targets planned invariant {inv_id}"


@pytest.mark.parametrize("mutant_id", sorted(MUTANTS))
def test_mutant_is_killed(
    mutant_id: str, tmp_path: Path, record_verdict: Callable[..., None]
) -> None:
    """Every invariant the mutant names must be reported failed. A black-box mutant (a defect a
    public decode API shows) runs once, with the mutant target keeping only that API
    (``--claims=black-box``): the decode-level tests must catch it without the white-box ones,
    and a test failing under the narrower claims also runs, and fails, under the full ones, so
    the second run would prove nothing new."""
    mutant = MUTANTS[mutant_id]
    extra = ("--claims=black-box",) if mutant.black_box else ()
    outcomes = run_suite_against_mutant(mutant, tmp_path, *extra)
    survived = {k: v for k, v in outcomes.items() if v != "failed"}
    record_verdict(mutant_id, killed=not survived, outcomes=outcomes)
    kind = "black-box mutant" if mutant.black_box else "mutant"
    assert not survived, f"{kind} {mutant_id} ({mutant.description}) survived: " + ", ".join(
        f"{k} was {v}" for k, v in sorted(survived.items())
    )
