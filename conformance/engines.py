"""Where ``--target`` and ``--peer`` values come from: built-in names, schemes, ``module:attr``.

One registry, so that :mod:`conformance.targets` needs to know nothing about mutants (a mutant is
a target made by :mod:`conformance.mutants`, reached through the ``mutant:`` scheme here):

* a built-in name (:data:`BUILTINS`): ``reference``, ``llamacpp``, ``transformers``;
* a scheme ``name:argument`` (:data:`SCHEMES`): ``mutant:<id>``;
* ``module:attr``: a third-party adapter instance, class or factory.

Entries are import strings, imported only when used.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from conformance.targets.base import TargetLoadError, validate_target

BUILTINS: dict[str, str] = {
    "reference": "conformance.targets.reference:ReferenceTarget",
    "llamacpp": "conformance.targets.llamacpp:LlamaCppTarget",
    "transformers": "conformance.targets.transformers:TransformersTarget",
}
SCHEMES: dict[str, str] = {
    "mutant": "conformance.mutants:load_mutant_target",  # mutant:<id> -> target
}
# The differential peer when --peer is not given: llama.cpp where llama-cpp-python is installed.
DEFAULT_PEER = "llamacpp"
PEER_MODULE = "llama_cpp"
NO_PEER = "none"


def default_peer() -> str:
    """The peer to use when none is named: llama.cpp if it can be imported, else none."""
    return DEFAULT_PEER if importlib.util.find_spec(PEER_MODULE) is not None else NO_PEER


def import_attr(path: str, label: str) -> Any:
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise TargetLoadError(f"{label}: expected 'module:attr'")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # any import failure is the user's module, report it in one line
        raise TargetLoadError(
            f"{label}: module {module_name!r} failed to import: {type(exc).__name__}: {exc}"
        ) from exc
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise TargetLoadError(f"{label}: module {module_name!r} has no attribute {part!r}")
        obj = getattr(obj, part)
    return obj


def load_engine(spec: str, role: str = "target") -> Any:
    """Resolve a ``--target`` / ``--peer`` value to a validated adapter instance; ``role``
    names it in error messages."""
    spec = spec.strip()
    label = f"{role} {spec!r}"
    scheme, sep, rest = spec.partition(":")
    if sep and scheme in SCHEMES:
        factory = import_attr(SCHEMES[scheme], label)
        return validate_target(factory(rest), repr(spec))
    if spec in BUILTINS:
        obj = import_attr(BUILTINS[spec], label)
    elif sep:
        obj = import_attr(spec, label)
    else:
        choices = ", ".join([*BUILTINS, *(f"'{s}:...'" for s in SCHEMES)])
        raise TargetLoadError(f"unknown {role} {spec!r}; use one of {choices} or 'module:attr'")
    if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "capabilities")):
        try:
            obj = obj()
        except TargetLoadError:
            raise
        except Exception as exc:
            raise TargetLoadError(
                f"{label}: constructing the adapter failed: {type(exc).__name__}: {exc}"
            ) from exc
    return validate_target(obj, repr(spec))
