"""The target adapter protocol and target loading.

A target is any object with:

* ``name``: short string shown in reports;
* ``version``: string (engine version, commit, ...);
* ``capabilities``: a collection of capability names (see ``capability_registry()``);
* for every capability it claims, the methods that capability requires.

Tests ask for capabilities with ``@pytest.mark.requires("cap", ...)``; a target without one is
skipped for that test, and the skip is counted in the report.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any


class TargetLoadError(Exception):
    """Raised with a single-line, user-facing message when a target cannot be used."""


class Target:
    """Convenience base class for adapters (subclassing it is optional)."""

    name: str = "unnamed"
    version: str = "unknown"
    capabilities: frozenset[str] = frozenset()

    def has(self, capability: str) -> bool:
        return capability in self.capabilities

    def __repr__(self) -> str:
        return f"<target {self.name} {self.version}>"


def capability_registry() -> dict[str, tuple[str, ...]]:
    """All known capabilities and the methods each requires, gathered from the area modules."""
    from conformance.targets.areas import area_modules

    registry: dict[str, tuple[str, ...]] = {}
    for mod in area_modules():
        for cap, methods in getattr(mod, "CAPABILITIES", {}).items():
            if cap in registry:
                raise RuntimeError(f"capability {cap!r} declared twice (second in {mod.__name__})")
            registry[cap] = tuple(methods)
    return registry


def validate_target(obj: Any, label: str) -> Any:
    """Check the adapter protocol; raise TargetLoadError naming the first problem."""
    for attr in ("name", "version", "capabilities"):
        if not hasattr(obj, attr):
            raise TargetLoadError(f"target {label} has no attribute {attr!r}")
    if not isinstance(obj.name, str) or not obj.name:
        raise TargetLoadError(f"target {label}: 'name' must be a non-empty string")
    if not isinstance(obj.version, str):
        raise TargetLoadError(f"target {label}: 'version' must be a string")
    caps = obj.capabilities
    if isinstance(caps, str) or not isinstance(caps, Iterable):
        raise TargetLoadError(f"target {label}: 'capabilities' must be a collection of strings")
    registry = capability_registry()
    for cap in sorted(caps):
        if cap not in registry:
            known = ", ".join(sorted(registry)) or "(none)"
            raise TargetLoadError(
                f"target {label} declares unknown capability {cap!r}; known: {known}"
            )
        for method in registry[cap]:
            if not callable(getattr(obj, method, None)):
                raise TargetLoadError(
                    f"target {label} declares capability {cap!r} but has no method {method!r}"
                )
    return obj


def _import_attr(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise TargetLoadError(f"target {spec!r}: expected 'module:attr'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import failure is the user's module, report it in one line
        raise TargetLoadError(
            f"target {spec!r}: module {module_name!r} failed to import: {type(exc).__name__}: {exc}"
        ) from exc
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise TargetLoadError(
                f"target {spec!r}: module {module_name!r} has no attribute {part!r}"
            )
        obj = getattr(obj, part)
    return obj


BUILTIN_TARGETS = {
    "reference": "conformance.targets.reference:ReferenceTarget",
    "llamacpp": "conformance.targets.llamacpp:LlamaCppTarget",
}


def load_target(spec: str) -> Any:
    """Resolve a ``--target`` value to a validated adapter instance.

    ``reference`` / ``llamacpp``: built-in targets; ``mutant:<id>``: the reference target with one
    named defect; ``module:attr``: a third-party adapter instance, class or factory.
    """
    spec = spec.strip()
    if spec.startswith("mutant:"):
        from conformance.mutants import load_mutant_target

        return validate_target(load_mutant_target(spec[len("mutant:") :]), spec)
    if spec in BUILTIN_TARGETS:
        target_path = BUILTIN_TARGETS[spec]
    elif ":" in spec:
        target_path = spec
    else:
        raise TargetLoadError(
            f"unknown target {spec!r}; use one of {', '.join(BUILTIN_TARGETS)}, "
            "'mutant:<id>' or 'module:attr'"
        )
    obj = _import_attr(target_path)
    if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "capabilities")):
        try:
            obj = obj()
        except TargetLoadError:
            raise
        except Exception as exc:
            raise TargetLoadError(
                f"target {spec!r}: constructing the adapter failed: {type(exc).__name__}: {exc}"
            ) from exc
    return validate_target(obj, repr(spec))
