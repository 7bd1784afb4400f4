"""The project's shape: one name per area, and no import cycles.

An area is a spec file's stem (``spec/<area>.md``); everything of that area carries the same name:
its test folder ``conformance/<area>/``, protocol ``conformance/protocol/<area>.py``, reference
adapter ``conformance/targets/reference/<area>.py``, strategies, mutants, bench cases
``tools/bench/cases/test_<area>.py``, snapshot folder ``snapshots/conformance/<area>/`` and the
prefix of its capabilities. Adding an area touches no shared file.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conformance.mutants import all_mutants
from conformance.protocol import registry
from conformance.spec import default_spec_dir
from tools import imports

ROOT = Path(__file__).resolve().parents[1]
AREAS = sorted(p.stem for p in default_spec_dir().glob("*.md") if p.stem != "README")
# Names that are not areas, and why.
NOT_AREAS = {
    "bench:floor": "the bench harness's own calibration case (tools/bench/cases/test_floor.py)",
}


def _modules(folder: Path) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))


def _test_folders() -> list[str]:
    conf = ROOT / "conformance"
    return sorted(d.name for d in conf.iterdir() if d.is_dir() and any(d.glob("test_*.py")))


@pytest.mark.parametrize(
    ("what", "names"),
    [
        ("test folder conformance/<area>/", _test_folders()),
        ("protocol module conformance/protocol/<area>.py", _modules(ROOT / "conformance/protocol")),
        (
            "reference adapter conformance/targets/reference/<area>.py",
            _modules(ROOT / "conformance/targets/reference"),
        ),
        ("strategies conformance/strategies/<area>.py", _modules(ROOT / "conformance/strategies")),
        ("mutants conformance/mutants/<area>.py", _modules(ROOT / "conformance/mutants")),
        (
            "snapshot folder snapshots/conformance/<area>/",
            sorted(d.name for d in (ROOT / "snapshots/conformance").iterdir() if d.is_dir()),
        ),
        (
            "bench cases tools/bench/cases/test_<area>.py",
            [
                n.removeprefix("test_")
                for n in _modules(ROOT / "tools/bench/cases")
                if n.startswith("test_") and f"bench:{n.removeprefix('test_')}" not in NOT_AREAS
            ],
        ),
    ],
)
def test_area_names_are_spec_stems(what: str, names: list[str]) -> None:
    stray = [n for n in names if n not in AREAS]
    assert names, f"no {what} found"
    assert not stray, f"{what}: {stray} are not spec areas ({', '.join(AREAS)})"


def test_capabilities_are_named_after_their_area() -> None:
    stray = [c for c in registry() if c.split(".", 1)[0] not in AREAS]
    assert not stray, f"capabilities outside any spec area: {stray}"


def test_each_mutant_lives_in_its_area_module() -> None:
    wrong = [
        f"{m.id} ({m.area}) in {m.apply.__module__}"
        for m in all_mutants().values()
        if m.area not in AREAS or m.apply.__module__.rsplit(".", 1)[1] != m.area
    ]
    assert not wrong, f"mutants outside conformance/mutants/<their area>.py: {wrong}"


def test_bench_cases_record_their_own_area() -> None:
    wrong = []
    for path in sorted((ROOT / "tools/bench/cases").glob("test_*.py")):
        area = path.stem.removeprefix("test_")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        consts = {
            t.id: n.value.value
            for n in tree.body
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
            for t in n.targets
            if isinstance(t, ast.Name)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword) and node.arg == "area":
                value = node.value
                got = value.value if isinstance(value, ast.Constant) else None
                if isinstance(value, ast.Name):
                    got = consts.get(value.id)
                if got != area:
                    wrong.append(f"{path.name}:{node.value.lineno} records area {got!r}")
    assert not wrong, wrong


def test_no_import_cycles() -> None:
    found = imports.cycles(imports.graph(ROOT))
    assert not found, "import cycles (python -m tools.imports):\n" + "\n".join(
        " -> ".join(c) for c in found
    )


def test_cycle_finder_finds_a_cycle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert imports.cycles(edges) == [["a", "b", "c"]]
    assert imports.cycles({"a": {"b"}, "b": set()}) == []


def test_lazy_imports_count(tmp_path: Path) -> None:
    pkg = tmp_path / "conformance"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from conformance import b\n")
    (pkg / "b.py").write_text("import conformance.a\n")
    edges = {
        name: imports.imports_of(name, path, imports.project_modules(tmp_path, ("conformance",)))
        for name, path in imports.project_modules(tmp_path, ("conformance",)).items()
    }
    assert imports.cycles(edges) == [["conformance.a", "conformance.b"]]
