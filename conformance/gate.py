"""What a test may touch of an engine: the members of the capabilities it declares.

A conformance test declares what it drives with ``@pytest.mark.requires("cap", ...)`` (skipped
without them) and, optionally, ``@pytest.mark.uses("cap", ...)`` (used when the engine has them,
asked with ``target.has("cap")``). The ``target`` (and ``peer``) fixture is a :class:`View` of the
engine that exposes exactly those capabilities' members; every object a method returns that has a
role in the protocol (a context, a KV cache handle, a chain) is a View too, and Views passed back
into the engine are unwrapped. Touching anything else raises :class:`SuiteDefect`: the test, not
the engine, is wrong, and the report counts it apart from the engine's failures.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from conformance.protocol import TARGET, Capability, ProtocolMisuse, argument_rules, registry


class AdapterDefect(Exception):
    """An object the target returned lacks a method of a capability the target claims: the
    target's failure (its adapter is incomplete), reported in one line naming the method."""


class SuiteDefect(BaseException):
    """A test touched a member of a capability it does not declare (a defect of the suite).

    A BaseException, so that a test's ``except Exception`` (checking that the engine raises)
    cannot swallow it."""


@dataclass(frozen=True)
class Grant:
    """The capabilities one test may use of one engine."""

    engine: str  # "target 'reference'" / "peer 'llamacpp'" (for messages)
    required: frozenset[str]
    optional: frozenset[str]  # declared with `uses`
    claimed: frozenset[str]  # what the engine claims
    allowed: dict[str, frozenset[str]] = field(compare=False)  # role -> member names
    owners: dict[tuple[str, str], str] = field(compare=False)  # (role, member) -> a capability
    returns: dict[tuple[str, str], str] = field(compare=False)  # (role, method) -> result role
    # role -> {method: capability} the engine's claims need on objects of that role
    needs: dict[str, dict[str, str]] = field(compare=False, default_factory=dict)

    @property
    def declared(self) -> frozenset[str]:
        return self.required | (self.optional & self.claimed)

    def owner_of(self, role: str, name: str) -> str | None:
        return self.owners.get((role, name))


def make_grant(
    engine: str, required: Iterable[str], optional: Iterable[str], claimed: Iterable[str]
) -> Grant:
    caps = registry()
    required, optional, claimed = frozenset(required), frozenset(optional), frozenset(claimed)
    declared = required | (optional & claimed)
    allowed: dict[str, set[str]] = {}
    returns: dict[tuple[str, str], str] = {}
    for cap in (caps[n] for n in sorted(declared)):
        _add(allowed, returns, TARGET, cap.members)
        for role, members in cap.objects.items():
            _add(allowed, returns, role, members)
    owners = _owners(caps.values())
    return Grant(
        engine,
        required,
        optional,
        claimed,
        {r: frozenset(m) for r, m in allowed.items()},
        owners,
        returns,
        _needs(claimed),
    )


@functools.cache
def _needs(claimed: frozenset[str]) -> dict[str, dict[str, str]]:
    caps = registry()
    out: dict[str, dict[str, str]] = {}
    for name in sorted(claimed & set(caps)):
        for role, members in caps[name].objects.items():
            for m in members.values():
                if m.kind == "method" and not m.optional:
                    out.setdefault(role, {}).setdefault(m.name, name)
    return out


_CHECKED: set[tuple[type, str, frozenset[str]]] = set()


def _check_returned(obj: Any, role: str, method: str, grant: Grant) -> None:
    """Once per class: the methods the engine's claims need on a returned object exist."""
    key = (type(obj), role, grant.claimed)
    if key in _CHECKED:
        return
    for name, cap in sorted(grant.needs.get(role, {}).items()):
        if not callable(getattr(obj, name, None)):
            raise AdapterDefect(
                f"{grant.engine}: {method}() returned a {type(obj).__name__}, which lacks "
                f"method {name!r} (capability {cap!r}, which the target claims)"
            )
    _CHECKED.add(key)


def _add(
    allowed: dict[str, set[str]], returns: dict[tuple[str, str], str], role: str, members: Any
) -> None:
    names = allowed.setdefault(role, set())
    for m in members.values():
        names.add(m.name)
        if m.returns:
            returns[(role, m.name)] = m.returns


@functools.cache
def _owners_cached(names: tuple[str, ...]) -> dict[tuple[str, str], str]:
    caps = registry()
    out: dict[tuple[str, str], str] = {}
    for name in names:
        cap = caps[name]
        for m in cap.members:
            out.setdefault((TARGET, m), name)
        for role, members in cap.objects.items():
            for m in members:
                out.setdefault((role, m), name)
    return out


def _owners(caps: Iterable[Capability]) -> dict[tuple[str, str], str]:
    return _owners_cached(tuple(c.name for c in caps))


def unwrap(x: Any) -> Any:
    """The engine object behind a View (also inside lists, tuples and dict values)."""
    if isinstance(x, View):
        return object.__getattribute__(x, "_dc_obj")
    if type(x) in (list, tuple):
        return type(x)(unwrap(i) for i in x) if any(isinstance(i, View) for i in x) else x
    if type(x) is dict and any(isinstance(v, View) for v in x.values()):
        return {k: unwrap(v) for k, v in x.items()}
    return x


_PROBES = frozenset({"execute_example", "setup_example", "teardown_example"})


class View:
    """An engine object seen through a test's grant."""

    __slots__ = ("_dc_cache", "_dc_grant", "_dc_obj", "_dc_role")

    def __init__(self, obj: Any, role: str, grant: Grant) -> None:
        object.__setattr__(self, "_dc_obj", obj)
        object.__setattr__(self, "_dc_role", role)
        object.__setattr__(self, "_dc_grant", grant)
        object.__setattr__(self, "_dc_cache", {})

    def __getattr__(self, name: str) -> Any:
        grant: Grant = object.__getattribute__(self, "_dc_grant")
        role: str = object.__getattribute__(self, "_dc_role")
        cache: dict[str, Any] = object.__getattribute__(self, "_dc_cache")
        if name in cache:
            return cache[name]
        if name not in grant.allowed.get(role, ()):
            if name.startswith(("_", "hypothesis_")) or name in _PROBES:
                # what libraries look for on any argument (hypothesis asks whether a test's
                # first argument runs examples, or is a mock): not an engine member
                raise AttributeError(name)
            raise SuiteDefect(_refusal(grant, role, name))
        obj = object.__getattribute__(self, "_dc_obj")
        value = getattr(obj, name)
        if not callable(value):
            return value  # data attributes are read fresh each time
        method = _bind(value, name, grant, grant.returns.get((role, name)))
        cache[name] = method
        return method

    def __setattr__(self, name: str, value: Any) -> None:
        raise SuiteDefect(f"a test assigned {name!r} on an engine object; tests only call it")

    def __repr__(self) -> str:
        obj = object.__getattribute__(self, "_dc_obj")
        return f"<{object.__getattribute__(self, '_dc_role')} view of {obj!r}>"


class TargetView(View):
    """The engine itself: its members, plus ``name``, ``version`` and ``has(capability)``."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return str(object.__getattribute__(self, "_dc_obj").name)

    @property
    def version(self) -> str:
        return str(object.__getattribute__(self, "_dc_obj").version)

    def has(self, capability: str) -> bool:
        """Whether the engine has a capability the test declares (required: always True)."""
        grant: Grant = object.__getattribute__(self, "_dc_grant")
        if capability in grant.required:
            return True
        if capability in grant.optional:
            return capability in grant.claimed
        raise SuiteDefect(
            f"a test asked whether {grant.engine} has {capability!r}, which it does not declare "
            "(add it to @pytest.mark.uses(...))"
        )


def view(obj: Any, grant: Grant) -> TargetView:
    return TargetView(obj, TARGET, grant)


def _bind(fn: Callable[..., Any], name: str, grant: Grant, result_role: str | None) -> Any:
    rule = argument_rules().get(name)

    def call(*args: Any, **kwargs: Any) -> Any:
        args = tuple(unwrap(a) for a in args)
        kwargs = {k: unwrap(v) for k, v in kwargs.items()}
        if rule is not None:
            try:
                needed = rule(args, kwargs)
            except ProtocolMisuse as exc:
                raise SuiteDefect(f"{name}: {exc}") from None
            missing = sorted(needed - grant.declared)
            if missing:
                raise SuiteDefect(
                    f"a test called {name}(...) with arguments that need {', '.join(missing)}, "
                    f"which it does not declare (it declares {_declared(grant)})"
                )
        result = fn(*args, **kwargs)
        if result_role is not None and result is not None:
            _check_returned(result, result_role, name, grant)
            return View(result, result_role, grant)
        return result

    call.__name__ = name
    call.__doc__ = getattr(fn, "__doc__", None)
    return call


def _declared(grant: Grant) -> str:
    return ", ".join(sorted(grant.declared)) or "nothing"


def _refusal(grant: Grant, role: str, name: str) -> str:
    what = "" if role == TARGET else f" of a {role} returned by {grant.engine}"
    where = grant.engine if role == TARGET else "it"
    owner = grant.owner_of(role, name)
    if owner is None:
        return (
            f"a test touched {name!r}{what}, which no capability of the protocol defines "
            f"(it declares {_declared(grant)}); {where} is used only through the protocol"
        )
    return (
        f"a test touched {name!r}{what}, which belongs to capability {owner!r}; the test "
        f"declares {_declared(grant)} (add {owner!r} to @pytest.mark.requires or .uses)"
    )


_RESULTS: dict[tuple[int, str, tuple[Any, ...]], Any] = {}


def cached(engine_view: TargetView, method: str, *args: Any) -> Any:
    """``engine_view.method(*args)``, computed once per engine for the session (model loading is
    the slow part of many tests) and handed to each test through its own grant."""
    fn = getattr(engine_view, method)  # the test must be allowed to call it
    obj = object.__getattribute__(engine_view, "_dc_obj")
    key = (id(obj), method, args)
    if key not in _RESULTS:
        _RESULTS[key] = (obj, unwrap(fn(*args)))  # keep obj alive: its id stays unique
    result = _RESULTS[key][1]
    grant: Grant = object.__getattribute__(engine_view, "_dc_grant")
    result_role = grant.returns.get((TARGET, method))
    return View(result, result_role, grant) if result_role else result


def release(obj: Any) -> None:
    """Free an engine object that has a ``close()`` (llama_free & co.): lifecycle, outside the
    protocol, so fixtures and tests call this instead of touching ``close`` themselves."""
    close = getattr(unwrap(obj), "close", None)
    if close is not None:
        close()
