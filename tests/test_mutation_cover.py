"""Every active invariant has a mutant proof: a hand-written mutant naming it, or a mechanical
mutant recorded in tools/mutation/covered.txt that lies in the code implementing it."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.spec import load_implementations
from tools.mutation import cover
from tools.mutation.sites import Site, all_sites


def test_every_active_invariant_has_a_mutant_proof() -> None:
    problems = cover.problems(
        cover.active_invariants(),
        cover.hand_written(),
        cover.read_covered(),
        load_implementations(),
        all_sites(),
    )
    assert not problems, (
        f"{len(problems)} mutant-coverage problems (write a mutant in conformance/mutants/, or "
        "run `python -m tools.mutation cover --id ID`):\n  " + "\n  ".join(problems)
    )


def _site(function: str, module: str = "reference_impl.kv.cells", kind: str = "cmp") -> Site:
    return Site(
        id=f"x::{function}::{kind}-0",
        area="kv",
        path="reference_impl/kv/cells.py",
        module=module,
        line=1,
        function=function,
        kind=kind,
        before="a < b",
        after="a <= b",
        index=0,
    )


def test_inside_follows_classes_and_nested_functions() -> None:
    link = "reference_impl.kv.cells:KVCells"
    assert cover.inside(_site("KVCells.seq_rm"), link)
    assert cover.inside(_site("KVCells"), link)
    assert not cover.inside(_site("KVCellsView.seq_rm"), link), "a prefix of a name is not a scope"
    assert not cover.inside(_site("KVCells.seq_rm", module="reference_impl.kv.cache"), link)


def test_problems_name_each_kind_of_defect() -> None:
    sites = [_site("KVCells.seq_rm"), _site("other")]
    links = {"KV-1": ["reference_impl.kv.cells:KVCells"], "KV-2": ["reference_impl.kv.cells:f"]}
    active = {"KV-1": "kv", "KV-2": "kv", "KV-3": "kv", "KV-4": "kv"}
    covered = {
        "KV-1": sites[0].id,  # fine
        "KV-2": sites[1].id,  # a site outside KV-2's code
        "KV-5": sites[0].id,  # not active
        "KV-4": "gone::f::cmp-1",  # a site that no longer exists
    }
    found = cover.problems(active, {"KV-3"}, covered, links, sites)
    assert found == [
        "covered.txt: KV-2: site x::other::cmp-0 is not in code implementing KV-2",
        "covered.txt: KV-4: site gone::f::cmp-1 no longer exists (run cover again)",
        "covered.txt: KV-5 is not an active invariant",
    ]
    found = cover.problems(active, set(), {}, links, sites)
    assert found[0] == "KV-1: no hand-written mutant names it and covered.txt has no proof"


def test_covered_file_round_trips_and_rejects_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "covered.txt"
    cover.write_covered({"KV-2": "b::f::cmp-1", "KV-1": "a::g::const-2"}, path)
    assert cover.read_covered(path) == {"KV-1": "a::g::const-2", "KV-2": "b::f::cmp-1"}
    path.write_text("KV-1 a b\n", encoding="utf-8")
    with pytest.raises(ValueError, match="expected"):
        cover.read_covered(path)
    path.write_text("KV-1 a\nKV-1 b\n", encoding="utf-8")
    with pytest.raises(ValueError, match="twice"):
        cover.read_covered(path)


def test_candidates_skip_deletions_and_foreign_code() -> None:
    sites = [
        _site("KVCells.a", kind="delete"),
        _site("KVCells.b", kind="return"),
        _site("Other.c", kind="cmp"),
    ]
    got = cover.candidates("KV-1", ["reference_impl.kv.cells:KVCells"], sites)
    assert [s.function for s in got] == ["KVCells.b"]


def test_test_files_find_markers_and_scenario_tables() -> None:
    assert cover.test_files("KV-001"), "KV-001 is named by test files"
    assert "conformance/allocator" in cover.test_files("ALLOC-041"), (
        "an ID only a scenario table names leads to that table's folder"
    )
