"""Unit tests for the invariant registry (``spec/*.md``).

The table in ``spec/README.md`` ("Areas and prefixes") is the authority on which spec files
exist and which ID prefixes each may use. A file listed there but not yet written (another
area's work in progress) is skipped; a file that exists is checked strictly.

Conventions checked here, beyond what ``conformance.spec`` already enforces:

* **Sources** name where a rule comes from: a seed with a section (``seed 002 §Definition``),
  a file of a known upstream project (``llama.cpp src/llama-context.cpp llama_context::decode
  (82bb485)``, ``ggml ggml/src/ggml-alloc.c ...``, ``EMEL src/emel/decoder/sm.hpp (e46fd521)``,
  ``gguf-py gguf/quants.py ...``, ``decoupled-bottleneck-attention production/kvcache_backend.py
  (eee67df)``), or ``decision`` (a choice of this suite). A project named without a file is
  refused, and so is a research note (``decoupled.md §2.2``) in place of the project.
* **Decision-based rows** are rows whose Source contains the word ``decision``. Their file must
  have a ``Decisions`` heading (any level). The section under it must either mention the row's
  ID, or contain an entry that starts with the decision label the Source names (a label is
  ``D`` followed by digits, e.g. Source ``decision D3`` and an entry ``### D3 — ...``,
  ``- **D3** ...`` or a table row ``| D3 | ...``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conformance.spec import (
    ID_PATTERN,
    Invariant,
    SpecError,
    default_spec_dir,
    load_spec,
    parse_spec_file,
)

SPEC_DIR = default_spec_dir()
README = SPEC_DIR / "README.md"

# Upstream projects a Source may cite a file of; extend here when an area needs another one.
PROJECTS = (
    "llama.cpp",
    "ggml",
    "gguf",
    "gguf-py",
    "emel",
    "llama-cpp-python",
    "decoupled-bottleneck-attention",  # seed 001's project (github.com/TheApeMachine/...)
)

_SEED = re.compile(r"\bseed 00[0-4]\b", re.IGNORECASE)
_DECISION = re.compile(r"\bdecision\b", re.IGNORECASE)
_FILE = re.compile(r"[\w./-]+\.(?:c|cc|cpp|h|hpp|py|md|txt|json)\b")
_LABEL = re.compile(r"\bD\d+\b")
_PLANNED_AREA = re.compile(r"^[a-z][a-z0-9_-]*$")
# A table row whose first cell looks like an attempt at an invariant ID.
_ID_LIKE = re.compile(r"^\|\s*([A-Z][A-Za-z]*-\d+[A-Za-z]*)\s*\|")
_HEADING = re.compile(r"^(#+)\s+(.*)$")


def area_table(readme: Path = README) -> dict[str, tuple[str, ...]]:
    """``{file name: prefixes}`` from the README's "Areas and prefixes" table."""
    table: dict[str, tuple[str, ...]] = {}
    for line in readme.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3:
            continue
        m = re.fullmatch(r"`([a-z0-9_]+\.md)`", cells[0])
        if not m:
            continue
        prefixes = tuple(p.strip() for p in cells[-1].split(",") if p.strip())
        table[m.group(1)] = prefixes
    return table


AREAS = area_table()
EXISTING = sorted(p.name for p in SPEC_DIR.glob("*.md") if p.name.lower() != "readme.md")
# Listed areas whose file exists; the others are being written on other branches.
WRITTEN = [name for name in sorted(AREAS) if name in EXISTING]


def source_problem(source: str) -> str | None:
    """Why a Source cell does not name an acceptable origin, or None when it does."""
    if _DECISION.search(source):
        return None
    if _SEED.search(source):
        return None if "§" in source else "cites a seed without a section (§...)"
    lowered = source.lower()
    if any(project in lowered for project in PROJECTS):
        # "llama.cpp" / "emel.cpp" are project names, not files: drop them before looking.
        rest = re.sub(r"(?<![/\w])(?:llama|emel)\.cpp\b", " ", source, flags=re.IGNORECASE)
        return None if _FILE.search(rest) else "cites a project but names no file"
    return "names no seed, no file of a known project and no decision"


def decisions_section(text: str) -> str | None:
    """The bodies under every heading named Decisions (each up to the next heading of its level;
    a file with two parts, like batch.md, has one per part), or None without such a heading."""
    lines = text.splitlines()
    bodies: list[str] = []
    for i, line in enumerate(lines):
        m = _HEADING.match(line)
        if not m or not re.match(r"(?:\d+[.)]?\s*)?decisions?\b", m.group(2), re.IGNORECASE):
            continue
        level = len(m.group(1))
        body: list[str] = []
        for nxt in lines[i + 1 :]:
            h = _HEADING.match(nxt)
            if h and len(h.group(1)) <= level:
                break
            body.append(nxt)
        bodies.append("\n".join(body))
    return "\n".join(bodies) if bodies else None


def decision_recorded(inv: Invariant, section: str) -> bool:
    if re.search(rf"\b{re.escape(inv.id)}\b", section):
        return True
    for label in _LABEL.findall(inv.source):
        entry = re.compile(rf"^\s*(?:[-*]\s+|#+\s+|\|\s*)?(?:\*\*)?{label}\b", re.MULTILINE)
        if entry.search(section):
            return True
    return False


# -- the README table ---------------------------------------------------------------------


def test_readme_lists_areas_with_valid_unique_prefixes() -> None:
    assert AREAS, "spec/README.md has no 'Areas and prefixes' table"
    seen: dict[str, str] = {}
    for name, prefixes in AREAS.items():
        assert prefixes, f"{name}: no prefix listed"
        for prefix in prefixes:
            assert re.fullmatch(r"[A-Z]{2,6}", prefix), f"{name}: bad prefix {prefix!r}"
            assert prefix not in seen, f"prefix {prefix} listed for {seen[prefix]} and {name}"
            seen[prefix] = name


def test_every_spec_file_is_a_listed_area() -> None:
    unlisted = [name for name in EXISTING if name not in AREAS]
    assert not unlisted, f"spec files missing from spec/README.md's area table: {unlisted}"


def test_listed_areas_not_written_yet() -> None:
    missing = [name for name in sorted(AREAS) if name not in EXISTING]
    if missing:
        pytest.skip(f"areas listed but not written on this branch: {', '.join(missing)}")


# -- the registry as a whole ------------------------------------------------------------------


def test_registry_loads_with_unique_ids() -> None:
    registry = load_spec()  # raises SpecError on a malformed row or a duplicate ID
    assert registry
    for inv_id, inv in registry.items():
        assert inv.id == inv_id
        assert ID_PATTERN.match(inv_id)


# -- each area file ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", WRITTEN)
def test_area_file_has_rows_with_its_prefixes(name: str) -> None:
    path = SPEC_DIR / name
    rows = parse_spec_file(path)
    assert rows, f"spec/{name} has no invariant row"
    allowed = AREAS[name]
    wrong = [inv.id for inv in rows if inv.id.split("-")[0] not in allowed]
    assert not wrong, f"spec/{name} may only use prefixes {allowed}; found {wrong}"
    ids = [inv.id for inv in rows]
    dups = sorted({i for i in ids if ids.count(i) > 1})
    assert not dups, f"spec/{name} repeats IDs {dups}"


@pytest.mark.parametrize("name", WRITTEN)
def test_area_file_has_no_malformed_id_rows(name: str) -> None:
    path = SPEC_DIR / name
    bad = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        m = _ID_LIKE.match(line.strip())
        if m and not ID_PATTERN.match(m.group(1)):
            bad.append(f"line {lineno}: {m.group(1)}")
    assert not bad, f"spec/{name} has rows whose ID is not PREFIX-NNN: {bad}"


@pytest.mark.parametrize("name", WRITTEN)
def test_area_file_sources_name_an_origin(name: str) -> None:
    path = SPEC_DIR / name
    problems = []
    for inv in parse_spec_file(path):
        why = source_problem(inv.source)
        if why:
            problems.append(f"{inv.id} ({inv.source!r}): {why}")
    assert not problems, f"spec/{name}:\n" + "\n".join(problems)


@pytest.mark.parametrize("name", WRITTEN)
def test_area_file_statuses_are_valid(name: str) -> None:
    path = SPEC_DIR / name
    for inv in parse_spec_file(path):
        assert inv.status in ("active", "planned"), inv.id
        if inv.status == "planned":
            assert inv.planned_for and _PLANNED_AREA.match(inv.planned_for), (
                f"{inv.id}: planned area {inv.planned_for!r} must be a lowercase name"
            )
        else:
            assert inv.planned_for is None, inv.id


@pytest.mark.parametrize("name", WRITTEN)
def test_area_file_decision_rows_are_recorded(name: str) -> None:
    path = SPEC_DIR / name
    rows = [inv for inv in parse_spec_file(path) if _DECISION.search(inv.source)]
    if not rows:
        return
    section = decisions_section(path.read_text(encoding="utf-8"))
    assert section is not None, (
        f"spec/{name} has decision-based rows {[r.id for r in rows]} but no Decisions heading"
    )
    missing = [inv.id for inv in rows if not decision_recorded(inv, section)]
    assert not missing, (
        f"spec/{name}: decision-based rows without an entry in the Decisions section "
        f"(mention the ID, or start an entry with the D-label the Source names): {missing}"
    )


# -- the helpers and the parser on crafted input --------------------------------------------

_HEADER = "| ID | Statement | Source | Status |\n|----|-----------|--------|--------|\n"


def _write(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return path


def test_parser_rejects_a_row_with_a_missing_column(tmp_path: Path) -> None:
    path = _write(tmp_path, "x.md", _HEADER + "| XX-001 | A rule. | seed 000 §Flow |\n")
    with pytest.raises(SpecError, match="columns"):
        parse_spec_file(path)


def test_parser_rejects_an_unknown_status(tmp_path: Path) -> None:
    path = _write(tmp_path, "x.md", _HEADER + "| XX-001 | A rule. | seed 000 §Flow | done |\n")
    with pytest.raises(SpecError, match="status"):
        parse_spec_file(path)


def test_parser_rejects_duplicates_across_files(tmp_path: Path) -> None:
    row = "| XX-001 | A rule. | seed 000 §Flow | planned:x |\n"
    _write(tmp_path, "a.md", _HEADER + row)
    _write(tmp_path, "b.md", _HEADER + row)
    with pytest.raises(SpecError, match="duplicate"):
        load_spec(tmp_path)


def test_parser_keeps_escaped_pipes_and_planned_area(tmp_path: Path) -> None:
    path = _write(tmp_path, "x.md", _HEADER + r"| XX-001 | a \| b | decision D1 | planned:x |" "\n")
    (inv,) = parse_spec_file(path)
    assert inv.statement == "a | b"
    assert (inv.status, inv.planned_for, inv.area) == ("planned", "x", "x")


@pytest.mark.parametrize(
    ("source", "ok"),
    [
        ("seed 002 §Definition", True),
        ("seed 002", False),
        ("llama.cpp src/llama-context.cpp llama_context::decode (82bb485)", True),
        ("llama.cpp decode", False),
        ("ggml ggml/src/ggml-alloc.c ggml_dyn_tallocr_alloc (82bb485)", True),
        ("EMEL src/emel/decoder/sm.hpp (e46fd521)", True),
        (
            "decoupled-bottleneck-attention production/kvcache_backend.py `SeqCacheTensor` (eee67df)",
            True,
        ),
        ("decoupled-bottleneck-attention (eee67df)", False),
        ("decoupled.md §2.2", False),
        ("seed 001 §Null token integration; decoupled.md §1.5", True),
        ("decision D4", True),
        ("vLLM tests", False),
        ("", False),
    ],
)
def test_source_rule(source: str, ok: bool) -> None:
    assert (source_problem(source) is None) is ok


def test_decision_rule_accepts_id_or_label_and_rejects_neither() -> None:
    doc = "# X\n\n## Decisions\n\n### D2 — something\n\nRows: XX-009.\n\n## Other\n\nD7 here\n"
    section = decisions_section(doc)
    assert section is not None and "D7" not in section

    def inv(inv_id: str, source: str) -> Invariant:
        return Invariant(id=inv_id, area="x", statement="s", source=source, status="planned")

    assert decision_recorded(inv("XX-009", "decision"), section)  # by ID
    assert decision_recorded(inv("XX-001", "decision D2"), section)  # by label
    assert not decision_recorded(inv("XX-001", "decision D7"), section)  # label outside
    assert not decision_recorded(inv("XX-001", "decision"), section)


def test_area_table_parses_a_crafted_readme(tmp_path: Path) -> None:
    readme = _write(
        tmp_path,
        "README.md",
        "| file | area | prefixes |\n|---|---|---|\n"
        "| `decoder.md` | decode flow | DEC, OUT |\n| `x.md` | x | XX |\n",
    )
    assert area_table(readme) == {"decoder.md": ("DEC", "OUT"), "x.md": ("XX",)}
