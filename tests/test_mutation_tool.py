"""tools.mutation: sites, planting a mutant, the seeded per-area sample, triage and the verdict."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from tools.mutation import run as runner
from tools.mutation import unrun
from tools.mutation.sites import ROOT, Site, all_sites, area_of, mutate, sites_of

CHUNKS = ROOT / "reference_impl/allocator/chunks.py"


def test_every_source_file_has_an_area_and_sites() -> None:
    sites = all_sites()
    assert {s.area for s in sites} >= {"allocator", "batch", "decoder", "kv", "sampling"}
    assert area_of("kernels/quant_triton.py") == "kv_quant"
    assert area_of("reference_impl/kv/cache.py") == "kv"
    assert area_of("kernels/gpu_report.py") is None, "tooling is not mutated"
    assert len({s.id for s in sites}) == len(sites), "mutant ids are unique"


def test_ids_survive_an_unrelated_edit(tmp_path: Path) -> None:
    """Ids name the function and the text, not the line: moving code keeps them."""
    text = CHUNKS.read_text(encoding="utf-8")
    moved = tmp_path / "reference_impl" / "allocator" / "chunks.py"
    moved.parent.mkdir(parents=True)
    moved.write_text("\n\n# a comment\n" + text, encoding="utf-8")
    import tools.mutation.sites as sites_mod

    old_root = sites_mod.ROOT
    sites_mod.ROOT = tmp_path
    try:
        shifted = sites_of(moved)
    finally:
        sites_mod.ROOT = old_root
    original = sites_of(CHUNKS)
    assert [s.id for s in shifted] == [s.id for s in original]
    assert all(a.line == b.line + 3 for a, b in zip(shifted, original, strict=True))


def _sites_of_text(tmp_path: Path, text: str) -> list[Site]:
    path = tmp_path / "reference_impl" / "allocator" / "chunks.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    import tools.mutation.sites as sites_mod

    old_root = sites_mod.ROOT
    sites_mod.ROOT = tmp_path
    try:
        return sites_of(path)
    finally:
        sites_mod.ROOT = old_root


def test_ids_survive_removing_a_like_site(tmp_path: Path) -> None:
    """Removing the first of two alike mutations in a function (the same operator and text)
    keeps the second one's id: a triage line written for it must not slide onto another site,
    nor another site's line onto it."""
    before = "def f(x, y):\n    a = x + 1\n    b = y + 1\n    return a + b\n"
    after = "def f(x, y):\n    a = x\n    b = y + 1\n    return a + b\n"

    def ones(sites: list[Site]) -> dict[int, str]:
        return {s.line: s.id for s in sites if s.kind == "const"}

    old, new = ones(_sites_of_text(tmp_path, before)), ones(_sites_of_text(tmp_path, after))
    assert sorted(old) == [2, 3] and sorted(new) == [3]
    assert new[3] == old[3], "the 1 of `b = y + 1` kept its id"
    same = "def f(x):\n    a = x + 1\n    a = x + 1\n    return a\n"
    twins = _sites_of_text(tmp_path, same)
    assert len(twins) == 7 and len({s.id for s in twins}) == 7, "alike statements still count"


def test_no_mutants_in_protocol_stubs(tmp_path: Path) -> None:
    """A method whose body is ``...`` (a typing.Protocol's) never runs: its defaults and body
    plant nothing, while a real method of the same class still does."""
    text = (
        "from typing import Protocol\n\n"
        "class P(Protocol):\n"
        '    def f(self, n: int = 0) -> int:\n        """Doc."""\n        ...\n\n'
        "    def g(self, n: int = 0) -> int:\n        return n + 1\n"
    )
    sites = _sites_of_text(tmp_path, text)
    assert {s.function for s in sites} == {"P.g"}, [s.describe() for s in sites]


def test_mutate_plants_exactly_the_site() -> None:
    site = next(s for s in sites_of(CHUNKS) if s.function == "best_last" and s.kind == "return")
    tree = mutate(CHUNKS, site.index)
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "best_last")
    ret = fn.body[-1]
    assert isinstance(ret, ast.Return) and ret.value is None
    untouched = ast.parse(CHUNKS.read_text(encoding="utf-8"))
    assert ast.unparse(tree).count("\n") == ast.unparse(untouched).count("\n")
    with pytest.raises(IndexError):
        mutate(CHUNKS, 10**6)


def test_no_mutants_in_docstrings_annotations_asserts_or_triton_jit() -> None:
    for s in all_sites():
        assert s.kind != "delete" or s.function != "<module>"
        assert not s.before.startswith(("assert ", '"""'))
    jit = [s for s in all_sites() if s.path.endswith("gqa_triton.py") and "_kernel" in s.function]
    assert not jit, f"sites inside triton.jit functions: {jit[:3]}"


def test_the_minus_one_of_a_reshape_is_not_mutated() -> None:
    """``x.reshape(-1)`` and ``x.reshape(n, -1)`` plant nothing in their ``-1`` (numpy infers
    any negative size); the other constants on those lines still do."""
    path = ROOT / "reference_impl/model/dequant.py"
    source = path.read_text(encoding="utf-8")
    assert "reshape(-1)" in source and "reshape(packed.shape[0], -1)" in source
    lines = source.splitlines()
    ones = [s for s in sites_of(path) if s.kind == "const" and s.before == "1"]
    assert [s for s in ones if "reshape(-1)" in lines[s.line - 1]], "other 1s there stay sites"
    for s in ones:
        planted = ast.unparse(mutate(path, s.index))
        assert "reshape(-2)" not in planted and "reshape(packed.shape[0], -2)" not in planted, s


def _site(ident: str, area: str) -> Site:
    return Site(ident, area, "x.py", "x", 1, "f", "cmp", "a < b", "a <= b", 0)


def test_sample_is_spread_and_stable() -> None:
    sites = [_site(f"{a}::{i}", a) for a in ("p", "q", "r") for i in range(50)]
    chosen = runner.sample(sites, 12, seed=7)
    assert [sum(s.area == a for s in chosen) for a in "pqr"] == [4, 4, 4]
    more = [*sites, *(_site(f"p::new{i}", "p") for i in range(5))]
    again = runner.sample(more, 12, seed=7)
    kept = {s.id for s in chosen} & {s.id for s in again}
    assert len(kept) >= 10, "adding sites must not reshuffle the rest of the sample"
    assert runner.sample(sites, 12, seed=8) != chosen
    assert len(runner.sample(sites, 0, seed=7)) == len(sites), "0 means every site"


def test_triage_and_score(tmp_path: Path) -> None:
    path = tmp_path / "triage.txt"
    path.write_text("# note\na  equivalent: same output\nb  gap: needs a test\n", encoding="utf-8")
    triage = runner.read_triage(path)
    results = [
        runner.Result(_site("a", "p"), "survived", 1.0),
        runner.Result(_site("b", "p"), "survived", 1.0),
        runner.Result(_site("c", "p"), "survived", 1.0),
        runner.Result(_site("d", "p"), "killed", 1.0),
        runner.Result(_site("e", "p"), "timeout", 1.0),
    ]
    summary = runner.summarize(results, triage)
    row = summary["areas"]["p"]  # type: ignore[index]
    assert (row["equivalent"], row["survived"], row["killed"], row["timeout"]) == (1, 2, 1, 1)
    assert row["score"] == 0.5, "caught 2 of 4 behaviour-changing"
    assert summary["new_survivors"] == ["c"]
    path.write_text("a  maybe: ?\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"equivalent\|gap"):
        runner.read_triage(path)


def test_a_planted_defect_is_killed() -> None:
    """A real child run on the allocator area: best_last returning None breaks the chunk
    allocator's choice of last blocks."""
    sites = sites_of(CHUNKS)
    killed = next(s for s in sites if s.function == "best_last" and s.kind == "return")
    r = runner.run_one(killed, timeout=300)
    assert r.outcome == "killed", r


def test_triage_names_only_existing_sites() -> None:
    """A triage line whose site moved or changed is stale: the survivor it explained would come
    back under a new id, so the line must go (or follow the code)."""
    ids = {s.id for s in all_sites()}
    stale = sorted(k for k in runner.read_triage() if k not in ids)
    assert not stale, "triage.txt names sites that no longer exist:\n  " + "\n  ".join(stale)


def test_unrun_maps_a_site_inside_a_multiline_statement_to_its_first_line() -> None:
    """A site on a later line of a multi-line statement (a table literal, a wrapped condition)
    counts as run when any line of that statement ran: coverage records some under the first
    line, and Python 3.11 records a wrapped ``if (`` under its condition's lines."""
    parsers: dict[str, object] = {}
    path = "tools/mutation/sites.py"
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    table = next(
        n for n in tree.body if isinstance(n, ast.AnnAssign) and ast.unparse(n.target) == "AREAS"
    )
    assert table.end_lineno and table.end_lineno > table.lineno + 2
    inner = table.lineno + 2
    assert unrun.statement_start(path, inner, parsers) == table.lineno
    moved = dataclasses.replace(_site("x", "p"), path=path, line=inner)
    assert unrun.unrun_sites([moved], {path: {table.lineno}}) == []
    assert unrun.unrun_sites([moved], {path: {table.end_lineno}}) == [], "a later line of it ran"
    assert unrun.unrun_sites([moved], {path: {table.end_lineno + 1}}) == [moved]


def test_unrun_runs_the_area_under_coverage(tmp_path: Path) -> None:
    """A real coverage run of conformance/generator: the generator's entry point is among the
    lines it reports as run."""
    lines, last = unrun.executed_lines("generator", tmp_path)
    assert "passed" in last, last
    gen = "reference_impl/generator.py"
    sites = [s for s in all_sites() if s.path == gen and s.function == "Generator.generate"]
    assert sites and not unrun.unrun_sites(sites, lines), "Generator.generate ran"


def test_unrun_fails_on_untriaged_sites(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing executed every site of the area is unrun: the untriaged ones are new, the
    command fails, and the per-area JSON counts them."""
    monkeypatch.setattr(unrun, "executed_lines", lambda area, workdir: ({}, "0 passed"))
    assert unrun.unrun(["generator"], 1, tmp_path) == 1
    row = json.loads((tmp_path / "mutation_unrun.json").read_text(encoding="utf-8"))["generator"]
    n = sum(1 for s in all_sites() if s.area == "generator")
    assert row["sites"] == row["unrun"] == n
    assert row["triaged"] + len(row["new"]) == n
