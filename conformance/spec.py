"""The invariant registry: parse ``spec/*.md`` into :class:`Invariant` records.

Each spec file is one area (its file stem). Invariants are rows of a Markdown table::

    | ID | Statement | Source | Status |
    |----|-----------|--------|--------|
    | SAN-001 | One checkable sentence. | llama.cpp src/llama-batch.cpp@82bb485 init | active |

Status is ``active`` or ``planned:<area>`` (the issue area that will deliver it).
Anything else in the file (prose, decision records, other tables) is ignored by the parser.

The second half of the module checks the links from the spec to the code: every active
invariant names, with ``@spec.implements("ID")``, the function, method or class of
``reference_impl/`` or ``kernels/`` that implements it (:func:`load_implementations`,
:func:`implementation_problems`, :func:`resolve_link`).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import sys
from collections.abc import Sequence
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
    # Why no public decode API can show this rule (Status "active; white-box: <reason>"): an
    # engine reaches it only by exposing the internal capability its tests require.
    white_box: str | None = None

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
        # One tag at most, after the first semicolon (its reason may hold more of them).
        status_cell, *tags = (part.strip("` ") for part in status_cell.split(";", 1))
        white_box: str | None = None
        for tag in tags:
            key, _, reason = tag.partition(":")
            if key.strip() != "white-box" or not reason.strip():
                raise SpecError(
                    f"{where}: invariant {inv_id} has status tag {tag!r}; "
                    "expected 'white-box: <reason>'"
                )
            white_box = reason.strip()
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
                white_box=white_box,
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


# --------------------------------------------------------------------------------------------
# Links from the spec to the implementation (``@spec.implements``)
# --------------------------------------------------------------------------------------------

# The packages whose modules carry @implements markers; every module of them is imported.
IMPLEMENTATION_PACKAGES: tuple[str, ...] = ("reference_impl", "kernels")

# Active invariants with no code in the reference to link to (a rule about llama.cpp alone or
# about the suite itself), each with the reason. Empty: every active invariant is implemented.
NOT_IMPLEMENTED_IN_REFERENCE: dict[str, str] = {}


def load_implementations(
    packages: Sequence[str] = IMPLEMENTATION_PACKAGES,
) -> dict[str, list[str]]:
    """Import every module of ``packages`` and return the links their ``@implements`` markers
    recorded: ``{invariant ID: ["module:qualname", ...]}`` (a copy of
    ``reference_impl.spec_links.IMPLEMENTATIONS``,
    IDs sorted).

    No module is skipped: one that fails to import raises ImportError naming it (a skipped
    module would silently drop its links). The Triton kernel modules import without a GPU
    (Triton is a dependency and runs through its interpreter on CPU), so none is exempt.
    """
    from reference_impl import spec_links

    def fail(name: str, exc: BaseException | None) -> ImportError:
        why = f"{type(exc).__name__}: {exc}" if exc is not None else "import failed"
        return ImportError(f"cannot import {name} to collect its @implements links: {why}")

    def on_error(name: str) -> None:  # a subpackage whose import failed during the walk
        exc = sys.exc_info()[1]
        raise fail(name, exc) from exc

    for pkg_name in packages:
        try:
            pkg = importlib.import_module(pkg_name)
        except Exception as exc:
            raise fail(pkg_name, exc) from exc
        for info in pkgutil.walk_packages(pkg.__path__, pkg_name + ".", onerror=on_error):
            if info.name.endswith(".__main__"):  # a command-line entry point runs on import
                continue
            try:
                importlib.import_module(info.name)
            except Exception as exc:
                raise fail(info.name, exc) from exc
    found = spec_links.IMPLEMENTATIONS
    return {inv_id: list(found[inv_id]) for inv_id in sorted(found)}


def implementation_problems(
    registry: dict[str, Invariant],
    implementations: dict[str, list[str]] | None = None,
) -> list[str]:
    """Every inconsistency between the invariant ``registry`` and the ``@implements`` links
    (default: :func:`load_implementations`), one line each, sorted by ID:

    * a link naming an unknown ID, or a planned invariant;
    * an active invariant without any link, unless NOT_IMPLEMENTED_IN_REFERENCE lists it;
    * an entry of those tables that is not an active invariant, that is in both tables, or that
      has a link after all (the entry is stale: remove it).
    """
    links = load_implementations() if implementations is None else implementations
    absent = set(NOT_IMPLEMENTED_IN_REFERENCE)
    problems: list[tuple[str, str]] = []

    def add(inv_id: str, message: str) -> None:
        problems.append((inv_id, message))

    for inv_id, places in links.items():
        inv = registry.get(inv_id)
        if inv is None:
            add(inv_id, f"@implements names unknown invariant {inv_id} ({', '.join(places)})")
        elif not inv.active:
            add(
                inv_id,
                f"@implements names {inv_id}, which is planned:{inv.planned_for} "
                f"({inv.location}), not active ({', '.join(places)})",
            )
    table = "NOT_IMPLEMENTED_IN_REFERENCE"
    for inv_id in absent:
        inv = registry.get(inv_id)
        if inv is None or not inv.active:
            what = "an unknown ID" if inv is None else f"planned ({inv.location})"
            add(inv_id, f"{table} lists {inv_id}, which is {what}")
        elif links.get(inv_id):
            add(
                inv_id,
                f"{table} lists {inv_id}, which is linked ({', '.join(links[inv_id])}): "
                "remove it from the table",
            )
    where = " or ".join(f"{p}/" for p in IMPLEMENTATION_PACKAGES)
    for inv in registry.values():
        if inv.active and not links.get(inv.id) and inv.id not in absent:
            add(inv.id, f"active invariant {inv.id} ({inv.location}) has no @implements in {where}")
    return [message for _, message in sorted(problems)]


def resolve_link(where: str) -> object:
    """The object a link ``"module:qualname"`` names (imports the module); raises LookupError
    when the module has no such attribute path."""
    module_name, sep, qualname = where.partition(":")
    if not sep or not qualname:
        raise LookupError(f"{where!r} is not 'module:qualname'")
    obj: object = importlib.import_module(module_name)
    for part in qualname.split("."):
        if part == "<locals>" or not hasattr(obj, part):
            raise LookupError(f"{where}: {part!r} not found")
        obj = getattr(obj, part)
    return obj
