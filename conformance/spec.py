"""The invariant registry: parse ``spec/*.md`` into :class:`Invariant` records.

Each spec file is one area (its file stem). Invariants are rows of a Markdown table::

    | ID | Statement | Source | Status |
    |----|-----------|--------|--------|
    | SAN-001 | One checkable sentence. | llama.cpp src/llama-batch.cpp@82bb485 init | active |

Status is ``active`` or ``planned:<area>`` (the issue area that will deliver it).
Anything else in the file (prose, decision records, other tables) is ignored by the parser.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ID_PATTERN = re.compile(r"^[A-Z]{2,6}-[0-9]{3}$")
_ROW = re.compile(r"^\|\s*([A-Z]{2,6}-[0-9]{3})\s*\|(.*)\|\s*$")


class SpecError(ValueError):
    """A malformed spec file; the message names the file and line."""


@dataclass(frozen=True)
class Invariant:
    id: str
    area: str
    statement: str
    source: str
    status: str  # "active" or "planned"
    planned_for: str | None = None  # issue area for planned invariants
    location: str = ""  # "spec/<file>.md:<line>"

    @property
    def active(self) -> bool:
        return self.status == "active"


def default_spec_dir() -> Path:
    import spec  # the top-level package that ships the Markdown files

    return Path(spec.__file__).resolve().parent


def _split_cells(body: str) -> list[str]:
    # Cells are separated by unescaped pipes; "\|" stays inside a cell.
    cells = re.split(r"(?<!\\)\|", body)
    return [c.strip().replace("\\|", "|") for c in cells]


def parse_spec_file(path: Path) -> list[Invariant]:
    area = path.stem
    out: list[Invariant] = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        m = _ROW.match(line.strip())
        if not m:
            continue
        where = f"spec/{path.name}:{lineno}"
        inv_id = m.group(1)
        cells = _split_cells(m.group(2))
        if len(cells) != 3:
            raise SpecError(
                f"{where}: invariant {inv_id} has {len(cells) + 1} columns, expected 4 "
                "(ID | Statement | Source | Status)"
            )
        statement, source, status_cell = cells
        if not statement:
            raise SpecError(f"{where}: invariant {inv_id} has an empty statement")
        if not source:
            raise SpecError(f"{where}: invariant {inv_id} has no source")
        status_cell = status_cell.strip("` ")
        planned_for: str | None = None
        if status_cell == "active":
            status = "active"
        elif status_cell.startswith("planned:") and status_cell[len("planned:") :].strip():
            status = "planned"
            planned_for = status_cell[len("planned:") :].strip()
        else:
            raise SpecError(
                f"{where}: invariant {inv_id} has status {status_cell!r}; "
                "expected 'active' or 'planned:<area>'"
            )
        out.append(
            Invariant(
                id=inv_id,
                area=area,
                statement=statement,
                source=source,
                status=status,
                planned_for=planned_for,
                location=where,
            )
        )
    return out


def load_spec(spec_dir: Path | None = None) -> dict[str, Invariant]:
    """All invariants of all areas, keyed by ID; duplicate IDs are an error."""
    spec_dir = spec_dir or default_spec_dir()
    registry: dict[str, Invariant] = {}
    files = sorted(p for p in spec_dir.glob("*.md") if p.name.lower() != "readme.md")
    if not files:
        raise SpecError(f"no spec files found in {spec_dir}")
    for path in files:
        for inv in parse_spec_file(path):
            if inv.id in registry:
                raise SpecError(
                    f"{inv.location}: duplicate invariant ID {inv.id} "
                    f"(first defined at {registry[inv.id].location})"
                )
            registry[inv.id] = inv
    return registry


def areas(registry: dict[str, Invariant]) -> list[str]:
    return sorted({inv.area for inv in registry.values()})
