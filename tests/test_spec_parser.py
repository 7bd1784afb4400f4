"""The spec parser: rows become invariants; malformed files fail with file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.spec import SpecError, load_spec, parse_spec_file

HEADER = "| ID | Statement | Source | Status |\n|----|-----------|--------|--------|\n"


def write(tmp: Path, name: str, rows: str) -> Path:
    p = tmp / name
    p.write_text("# title\n\nprose | with a pipe\n\n" + HEADER + rows, encoding="utf-8")
    return p


def test_rows_become_invariants(tmp_path: Path) -> None:
    write(
        tmp_path,
        "area_a.md",
        "| AA-001 | First \\| escaped. | seed 000 §Flow | active |\n"
        "| AA-002 | Second. | llama.cpp x.cpp | planned:kv |\n",
    )
    reg = load_spec(tmp_path)
    assert set(reg) == {"AA-001", "AA-002"}
    a1 = reg["AA-001"]
    assert (a1.area, a1.statement, a1.source, a1.status) == (
        "area_a",
        "First | escaped.",
        "seed 000 §Flow",
        "active",
    )
    assert a1.location.endswith("area_a.md:7")
    a2 = reg["AA-002"]
    assert a2.status == "planned" and a2.planned_for == "kv" and not a2.active


def test_white_box_tag_carries_its_reason(tmp_path: Path) -> None:
    write(
        tmp_path,
        "area_a.md",
        "| AA-001 | Cells. | src | active; white-box: the cell table is not public |\n"
        "| AA-002 | Rows. | src | active |\n",
    )
    reg = load_spec(tmp_path)
    assert reg["AA-001"].active and reg["AA-001"].white_box == "the cell table is not public"
    assert reg["AA-002"].white_box is None


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("| AA-001 | Only two | cells |\n", "has 3 columns"),
        ("| AA-001 | Statement. | src | done |\n", "status 'done'"),
        ("| AA-001 | Statement. | src | planned: |\n", "status 'planned:'"),
        ("| AA-001 | Statement. |  | active |\n", "has no source"),
        ("| AA-001 |  | src | active |\n", "empty statement"),
        ("| AA-001 | Statement. | src | active; grey-box: x |\n", "status tag 'grey-box: x'"),
        ("| AA-001 | Statement. | src | active; white-box: |\n", "status tag 'white-box:'"),
    ],
)
def test_malformed_rows_name_file_and_line(tmp_path: Path, row: str, message: str) -> None:
    p = write(tmp_path, "bad.md", row)
    with pytest.raises(SpecError) as exc:
        parse_spec_file(p)
    assert message in str(exc.value)
    assert "spec/bad.md:7" in str(exc.value)


def test_duplicate_ids_across_files(tmp_path: Path) -> None:
    write(tmp_path, "a.md", "| AA-001 | x. | s | active |\n")
    write(tmp_path, "b.md", "| AA-001 | y. | s | active |\n")
    with pytest.raises(SpecError, match="duplicate invariant ID AA-001"):
        load_spec(tmp_path)


def test_empty_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no spec files"):
        load_spec(tmp_path)


def test_readme_is_not_an_area(tmp_path: Path) -> None:
    write(tmp_path, "README.md", "| AA-001 | example. | s | active |\n")
    write(tmp_path, "x.md", "| XX-001 | x. | s | active |\n")
    assert set(load_spec(tmp_path)) == {"XX-001"}


def test_packaged_spec_parses() -> None:
    reg = load_spec()
    assert reg, "the packaged spec has no invariants"
