"""Links from the spec to the code: ``@spec.implements`` and the checks in ``conformance.spec``.

Every active invariant names where ``reference_impl/`` or ``kernels/`` implements it, so a
reader goes ID -> test (``@pytest.mark.invariant``) -> function (``@implements``) in one hop each
way. The one exemption is the table NOT_IMPLEMENTED_IN_REFERENCE of ``conformance.spec`` (empty
today: every active invariant is implemented).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.spec import (
    ID_PATTERN,
    IMPLEMENTATION_PACKAGES,
    NOT_IMPLEMENTED_IN_REFERENCE,
    Invariant,
    implementation_problems,
    load_implementations,
    load_spec,
    resolve_link,
)
from reference_impl import spec_links
from reference_impl.spec_links import implements

REGISTRY = load_spec()


@pytest.fixture(scope="module")
def links() -> dict[str, list[str]]:
    return load_implementations()


@pytest.fixture
def scratch_registry() -> Iterator[dict[str, list[str]]]:
    """spec_links.IMPLEMENTATIONS restored after the test (the decorator records into it)."""
    saved = {k: list(v) for k, v in spec_links.IMPLEMENTATIONS.items()}
    try:
        yield spec_links.IMPLEMENTATIONS
    finally:
        spec_links.IMPLEMENTATIONS.clear()
        spec_links.IMPLEMENTATIONS.update(saved)


def inv(inv_id: str, status: str = "active") -> Invariant:
    return Invariant(
        id=inv_id,
        area="area",
        statement="A rule.",
        source="decision",
        status="active" if status == "active" else "planned",
        planned_for=None if status == "active" else status.partition(":")[2],
        location=f"spec/area.md:{inv_id[-1]}",
    )


# -- the registry of links ---------------------------------------------------------------------


def test_links_load(links: dict[str, list[str]]) -> None:
    assert links, "no @implements marker found"
    assert list(links) == sorted(links)
    for inv_id, places in links.items():
        assert ID_PATTERN.match(inv_id), inv_id
        assert places and len(places) == len(set(places)), (inv_id, places)
        for where in places:
            module, _, qualname = where.partition(":")
            assert module.split(".")[0] in IMPLEMENTATION_PACKAGES, where
            assert qualname and "<locals>" not in qualname, where


def test_links_are_a_snapshot(links: dict[str, list[str]]) -> None:
    again = load_implementations()
    assert again == links
    next(iter(again.values())).append("x:y")
    assert load_implementations() == links  # callers cannot edit spec_links.IMPLEMENTATIONS


def test_every_active_invariant_is_linked(links: dict[str, list[str]]) -> None:
    exempt = set(NOT_IMPLEMENTED_IN_REFERENCE)
    missing = [
        f"{i.id} ({i.location})"
        for i in REGISTRY.values()
        if i.active and i.id not in links and i.id not in exempt
    ]
    assert not missing, "active invariants without @implements:\n" + "\n".join(missing)


def test_no_link_names_an_unknown_or_planned_invariant(links: dict[str, list[str]]) -> None:
    bad = [
        f"{inv_id}: {', '.join(places)}"
        for inv_id, places in links.items()
        if inv_id not in REGISTRY or not REGISTRY[inv_id].active
    ]
    assert not bad, "links to unknown or planned invariants:\n" + "\n".join(bad)


def test_no_implementation_problem(links: dict[str, list[str]]) -> None:
    assert implementation_problems(REGISTRY, links) == []


def test_exemption_table_is_consistent() -> None:
    for inv_id, reason in NOT_IMPLEMENTED_IN_REFERENCE.items():
        assert REGISTRY[inv_id].active, inv_id
        assert reason.strip() and "\n" not in reason, inv_id


def _unwrap(obj: object) -> object:
    if isinstance(obj, property):
        return obj.fget
    return obj


def test_every_link_resolves_to_the_marked_object(links: dict[str, list[str]]) -> None:
    """Import the module, walk the qualname, and find the very object the decorator saw."""
    problems = []
    for where in sorted({w for places in links.values() for w in places}):
        module, _, qualname = where.partition(":")
        try:
            obj = _unwrap(resolve_link(where))
        except LookupError as exc:
            problems.append(str(exc))
            continue
        got = (getattr(obj, "__module__", None), getattr(obj, "__qualname__", None))
        if got != (module, qualname):
            problems.append(f"{where} resolves to {got}")
    assert not problems, "\n".join(problems)


def test_resolve_link_refuses_what_does_not_exist() -> None:
    with pytest.raises(LookupError, match="not 'module:qualname'"):
        resolve_link("reference_impl.batch.sanitize")
    with pytest.raises(LookupError, match="'nope' not found"):
        resolve_link("reference_impl.batch.sanitize:nope")
    with pytest.raises(LookupError, match="'<locals>' not found"):
        resolve_link("reference_impl.batch.sanitize:sanitize.<locals>.f")


# -- load_implementations imports everything --------------------------------------------------


@pytest.fixture
def probe_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A sys.path entry for throw-away packages; their modules are forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        yield tmp_path
    finally:
        for name in [m for m in sys.modules if m.startswith("dc_links_probe")]:
            del sys.modules[name]


def test_a_module_that_does_not_import_is_an_error_naming_it(probe_path: Path) -> None:
    pkg = probe_path / "dc_links_probe"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "good.py").write_text("X = 1\n")
    (pkg / "sub" / "broken.py").write_text("import dc_links_no_such_module\n")
    with pytest.raises(ImportError, match=r"cannot import dc_links_probe\.sub\.broken"):
        load_implementations(["dc_links_probe"])


def test_a_subpackage_that_does_not_import_is_an_error_naming_it(probe_path: Path) -> None:
    pkg = probe_path / "dc_links_probe2"
    (pkg / "bad").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "bad" / "__init__.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ImportError, match=r"cannot import dc_links_probe2\.bad.*boom"):
        load_implementations(["dc_links_probe2"])


def test_a_missing_package_is_an_error_naming_it() -> None:
    with pytest.raises(ImportError, match="cannot import dc_links_probe_absent"):
        load_implementations(["dc_links_probe_absent"])


# -- the decorator -----------------------------------------------------------------------------


def test_decorator_returns_its_argument_unchanged(scratch_registry: dict[str, list[str]]) -> None:
    def rule(x: int) -> int:
        return x + 1

    class Record:
        def method(self) -> str:
            return "m"

    assert implements("SAN-001")(rule) is rule
    assert rule(1) == 2
    assert implements("SAN-002", "SPL-003")(Record) is Record
    method = Record.__dict__["method"]
    assert implements("KV-001")(method) is method
    assert Record().method() == "m"
    here = f"{__name__}:test_decorator_returns_its_argument_unchanged.<locals>"
    assert scratch_registry["SAN-001"][-1] == f"{here}.rule"
    assert scratch_registry["SAN-002"][-1] == f"{here}.Record"
    assert scratch_registry["SPL-003"][-1] == f"{here}.Record"
    assert scratch_registry["KV-001"][-1] == f"{here}.Record.method"


def test_decorator_records_a_place_once(scratch_registry: dict[str, list[str]]) -> None:
    def rule() -> None:
        return None

    implements("ZZ-999")(rule)
    implements("ZZ-999", "ZZ-999")(rule)
    assert scratch_registry["ZZ-999"] == [f"{rule.__module__}:{rule.__qualname__}"]


@pytest.mark.parametrize(
    "bad",
    ["SAN-1", "SAN-0001", "san-001", "SAN001", "S-001", "TOOLONG-001", " SAN-001", "SAN-001 ", ""],
)
def test_decorator_rejects_malformed_ids(bad: str, scratch_registry: dict[str, list[str]]) -> None:
    before = {k: list(v) for k, v in scratch_registry.items()}
    with pytest.raises(ValueError, match="is not an invariant ID"):
        implements("SAN-001", bad)
    assert scratch_registry == before  # nothing recorded, not even the valid ID


def test_decorator_rejects_no_id_and_non_strings(scratch_registry: dict[str, list[str]]) -> None:
    with pytest.raises(ValueError, match="at least one invariant ID"):
        implements()
    with pytest.raises(ValueError, match="is not an invariant ID"):
        implements(1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="is not an invariant ID"):
        implements(("SAN-001",))  # type: ignore[arg-type]


# -- implementation_problems -------------------------------------------------------------------


def test_problems_name_unknown_and_planned_ids_and_missing_links(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import conformance.spec as cs

    monkeypatch.setattr(cs, "NOT_IMPLEMENTED_IN_REFERENCE", {})
    registry = {"AA-001": inv("AA-001"), "AA-002": inv("AA-002", "planned:kv")}
    problems = implementation_problems(registry, {"AA-002": ["m:f"], "ZZ-001": ["m:g", "m:h"]})
    assert problems == [
        "active invariant AA-001 (spec/area.md:1) has no @implements in reference_impl/ or "
        "kernels/",
        "@implements names AA-002, which is planned:kv (spec/area.md:2), not active (m:f)",
        "@implements names unknown invariant ZZ-001 (m:g, m:h)",
    ]
    assert implementation_problems(registry, {"AA-001": ["m:f"]}) == []


def test_problems_honour_and_police_the_exemption_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import conformance.spec as cs

    registry = {f"AA-00{k}": inv(f"AA-00{k}") for k in range(1, 5)}
    registry["AA-005"] = inv("AA-005", "planned:kv")
    monkeypatch.setattr(
        cs,
        "NOT_IMPLEMENTED_IN_REFERENCE",
        {"AA-003": "about llama.cpp only", "AA-002": "x", "AA-005": "y"},
    )
    problems = implementation_problems(
        registry, {"AA-001": ["m:e"], "AA-002": ["m:f"], "AA-004": ["m:g"]}
    )
    assert problems == [
        "NOT_IMPLEMENTED_IN_REFERENCE lists AA-002, which is linked (m:f): remove it from the table",
        "NOT_IMPLEMENTED_IN_REFERENCE lists AA-005, which is planned (spec/area.md:5)",
    ]
