"""What makes an object a target, and the check a target passes when it is loaded.

A target is any object with

* ``name``: a short string shown in reports;
* ``version``: a string (engine version, commit, ...);
* ``capabilities``: a collection of capability names (:func:`conformance.protocol.registry`);
* for every capability it claims, the members of that capability's Protocol
  (:mod:`conformance.protocol`), with compatible signatures.

:func:`validate_target` checks all of that and names the first problem in one line. Where an
adapter method's return annotation names a concrete class (``-> MyContext``), the methods that
the claimed capabilities need on that object are checked too; objects returned without such an
annotation are checked by the per-test gate when they first appear.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Iterable
from typing import Any

from conformance.protocol import RENAMED, TARGET, Member, registry, role_of


class TargetLoadError(Exception):
    """Raised with a single-line, user-facing message when a target cannot be used."""


class Target:
    """Convenience base class for adapters (subclassing it is optional)."""

    name: str = "unnamed"
    version: str = "unknown"
    capabilities: frozenset[str] = frozenset()

    def __repr__(self) -> str:
        return f"<target {self.name} {self.version}>"


def implied_capabilities() -> dict[str, tuple[str, ...]]:
    """``{capability: capabilities it presupposes}`` from the area modules' ``IMPLIES``."""
    from conformance.protocol import area_modules

    out: dict[str, tuple[str, ...]] = {}
    for mod in area_modules():
        out.update(getattr(mod, "IMPLIES", {}))
    return out


def validate_target(obj: Any, label: str) -> Any:
    """Check the target protocol; raise TargetLoadError naming the first problem."""
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
    caps = set(caps)
    known = registry()
    implied = implied_capabilities()
    for cap in sorted(caps):
        if cap in RENAMED and cap not in known:
            raise TargetLoadError(
                f"target {label} declares {cap!r}, which is now {RENAMED[cap]!r} "
                "(see docs/ADAPTERS.md)"
            )
        if cap not in known:
            raise TargetLoadError(
                f"target {label} declares unknown capability {cap!r}; known: "
                + ", ".join(sorted(known))
            )
        for need in implied.get(cap, ()):
            if need not in caps:
                raise TargetLoadError(
                    f"target {label} declares {cap!r} but not {need!r}, which it presupposes"
                )
        for member in known[cap].members.values():
            problem = _member_problem(obj, member, cap)
            if problem:
                raise TargetLoadError(f"target {label}: {problem}")
    problem = _returned_class_problem(obj, caps)
    if problem:
        raise TargetLoadError(f"target {label}: {problem}")
    return obj


def _member_problem(obj: Any, member: Member, cap: str) -> str | None:
    if member.kind == "attribute":
        if not hasattr(obj, member.name):
            return f"capability {cap!r} needs attribute {member.name!r}"
        return None
    fn = getattr(obj, member.name, None)
    if not callable(fn):
        return f"capability {cap!r} needs method {member.name!r}"
    return signature_problem(fn, getattr(member.owner, member.name), cap)


class _Arg:
    """A stand-in argument for signature checks."""


def signature_problem(fn: Any, proto_fn: Any, cap: str) -> str | None:
    """Whether ``fn`` accepts the calls the protocol method describes: its required
    parameters positionally, its optional ones by their names, ``**params`` if it has them."""
    try:
        proto = inspect.signature(proto_fn)
        have = inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # builtins without signatures: trust them
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    shown: list[str] = []
    for p in list(proto.parameters.values())[1:]:  # skip self
        if p.kind is p.VAR_KEYWORD:
            kwargs["any_parameter"] = _Arg()
            shown.append(f"**{p.name}")
        elif p.kind is p.VAR_POSITIONAL:
            shown.append(f"*{p.name}")
        elif p.default is p.empty and p.kind is not p.KEYWORD_ONLY:
            args.append(_Arg())
            shown.append(p.name)
        else:
            kwargs[p.name] = _Arg()
            shown.append(f"{p.name}=...")
    try:
        have.bind(*args, **kwargs)
    except TypeError as exc:
        call = f"{proto_fn.__name__}({', '.join(shown)})"
        return f"capability {cap!r}: {call} cannot be called on the adapter's method ({exc})"
    return None


def _returned_class_problem(obj: Any, caps: set[str]) -> str | None:
    """Check classes the adapter's annotations promise for returned objects (contexts...)."""
    known = registry()
    need: dict[str, dict[str, tuple[Member, str]]] = {}  # role -> member -> (member, cap)
    for cap in caps:
        for role, members in known[cap].objects.items():
            for m in members.values():
                need.setdefault(role, {})[m.name] = (m, cap)
    for cap in sorted(caps):
        for member in known[cap].members.values():
            if member.kind != "method" or not member.returns:
                continue
            cls = _annotated_class(getattr(obj, member.name, None))
            if cls is None:
                continue
            for name, (m, owner) in sorted(need.get(member.returns, {}).items()):
                if m.kind == "method" and not m.optional and not callable(getattr(cls, name, None)):
                    return (
                        f"{member.name}() returns {cls.__name__}, which lacks method {name!r} "
                        f"(capability {owner!r})"
                    )
    return None


def _annotated_class(fn: Any) -> type | None:
    if fn is None:
        return None
    try:
        ret = typing.get_type_hints(fn).get("return")
    except Exception:  # unresolvable annotations: checked at first use instead
        return None
    if isinstance(ret, type) and ret is not Any and role_of(ret) is None:
        return ret
    return None


__all__ = ["TARGET", "Target", "TargetLoadError", "validate_target"]
