"""Mutants: the reference target with one deliberate, named defect.

A conformance check that cannot fail is a defect. Every area ships mutants; the meta-tests
(``tests/meta``) run the suite against each mutant and require that the invariants the mutant
breaks are reported ``failed``. Mutants are declared in one module per area
(``conformance/mutants/<area>.py``) as a module-level ``MUTANTS`` list and discovered here.

A mutant's ``apply`` receives a fresh reference target and returns the mutated target. It may
wrap a method of the target or replace a function inside ``reference_impl`` (use
:func:`replace`); mutants only ever run in a dedicated pytest process, so the change does not
leak into other runs.
"""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from conformance.targets.base import TargetLoadError
from conformance.targets.reference import ReferenceTarget


@dataclass(frozen=True)
class Mutant:
    id: str  # stable kebab-case name, e.g. "san-gap-accepted"
    area: str  # spec area whose tests should catch it
    description: str  # the defect, in one sentence
    kills: tuple[str, ...]  # invariant IDs that must be reported failed
    apply: Callable[[Any], Any]  # reference target -> mutated target
    # True: a public decode API shows the defect, so it must die with --claims=black-box too
    # (tests/meta/test_mutants.py runs it a second time that way).
    black_box: bool = False


def replace(module: str, attr: str, new: Any) -> Any:
    """Replace ``module.attr`` by ``new`` for the rest of the process; returns the original."""
    mod = importlib.import_module(module)
    if not hasattr(mod, attr):
        raise AttributeError(f"mutant patch target {module}.{attr} does not exist")
    original = getattr(mod, attr)
    setattr(mod, attr, new)
    return original


def all_mutants() -> dict[str, Mutant]:
    registry: dict[str, Mutant] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        for mutant in getattr(mod, "MUTANTS", []):
            if mutant.id in registry:
                raise RuntimeError(f"duplicate mutant id {mutant.id!r} in {mod.__name__}")
            registry[mutant.id] = mutant
    return registry


def load_mutant_target(mutant_id: str) -> Any:
    """The ``mutant:<id>`` scheme of :mod:`conformance.engines`."""
    registry = all_mutants()
    if mutant_id not in registry:
        raise TargetLoadError(
            f"unknown mutant {mutant_id!r}; known mutants: {', '.join(sorted(registry)) or '(none)'}"
        )
    mutant = registry[mutant_id]
    target = mutant.apply(ReferenceTarget())
    with contextlib.suppress(AttributeError):  # a read-only adapter keeps its own name
        target.name = f"mutant:{mutant_id}"
    return target
