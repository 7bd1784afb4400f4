"""The target protocol: what an engine implements, capability by capability.

Each area of the spec has one module here (``conformance/protocol/<area>.py``, the area being the
spec file's stem) that declares its capabilities. A capability is a :class:`Capability` whose
``protocol`` is a :class:`typing.Protocol` of the *target's* methods; the objects those methods
return (a decode context, a KV cache handle, a sampler chain) are Protocols too, tagged with a
*role* by :func:`role`, and the target method's return annotation names them. So one set of
declarations gives

* an adapter author something to run mypy against (``checker: decoder.Logits = MyTarget()``);
* the loader the members to check on a target that claims the capability
  (:func:`conformance.targets.validate_target`);
* the per-test gate (:mod:`conformance.gate`) the members a test may touch: those of the
  capabilities it declares with ``@pytest.mark.requires`` / ``@pytest.mark.uses``.

Modules are discovered, so adding an area touches no shared file. Besides ``CAPABILITIES`` a
module may declare ``ARGUMENT_RULES``: ``{method name: fn(args, kwargs) -> capabilities}`` for
calls whose *arguments* need a capability (a sampler named in a chain, a context parameter).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

_T = TypeVar("_T")

# What a C-style public decode API (llama.h and engines in its image) offers: load a model, run
# it, tokenize, create contexts, decode/encode with return codes, read logits and embeddings,
# edit sequences in memory, abort, and sample with a chain. ``--claims=black-box`` withdraws
# every other capability from the target, so a run shows what an engine with only this API
# earns; the meta-tests prove that black-box mutants die in such a run.
BLACK_BOX: frozenset[str] = frozenset(
    {
        "model.load",
        "model.forward",
        "model.vocab_only",
        "model.check_tensors",
        "model.arch.gemma3",
        "model.arch.qwen2vl",
        "model.arch.bert",
        "tokenizer.tokenize",
        "tokenizer.vocab_only",
        "decoder.params",
        "decoder.logits",
        "decoder.batch_rules",
        "decoder.memory_ops",
        "decoder.shift",
        "decoder.embeddings",
        "decoder.pooling",
        "decoder.non_causal",
        "decoder.encode",
        "decoder.encode_with_memory",
        "decoder.abort",
        "decoder.kv_dtype",
        "decoder.graph_reuse",
        "sampling.chain",
        "sampling.default_chain",
    }
)


# The sampling capabilities that are this suite's own interfaces, not a sampler chain's.
_SAMPLING_INTERNALS = frozenset(
    {"sampling.candidates", "sampling.input_checks", "sampling.selector", "sampling.pipeline"}
)


def black_box(capabilities: Iterable[str]) -> frozenset[str]:
    """The part of ``capabilities`` a public decode API offers (every sampler counts)."""
    return frozenset(
        c
        for c in capabilities
        if c in BLACK_BOX or (c.startswith("sampling.") and c not in _SAMPLING_INTERNALS)
    )


# Capabilities renamed when areas took their spec file's name (a one-line hint at load time).
RENAMED: dict[str, str] = {
    "decode.logits": "decoder.logits",
    "decode.memory_ops": "decoder.memory_ops",
    "decode.embeddings": "decoder.embeddings",
    "decode.abort": "decoder.abort",
    "decode.errors": "decoder.errors",
    "decode.faults": "decoder.faults",
    "decode.introspection": "decoder.introspection",
    "decode.shift": "decoder.shift",
    "model.tokenize": "tokenizer.tokenize",
    "kernels.quant": "kv_quant.formats",
    "kernels.policy": "kv_quant.policy",
    "kernels.decoupled_cache": "decoupled.cache",
    "sampling.chain": "sampling.chain (+ one capability per sampler)",
}

TARGET = "target"  # the role of the adapter object itself


class ProtocolMisuse(Exception):
    """Raised by an argument rule when a call is outside the protocol (e.g. an unknown context
    parameter): the test that made it is at fault, not the target."""


def role(name: str) -> Callable[[type[_T]], type[_T]]:
    """Tag a Protocol as the shape of objects of role ``name`` (e.g. ``"context"``).

    Several capabilities may describe parts of the same role (a context that decodes, one that
    edits its memory): an object's allowed members are the union over the declared ones."""

    def tag(cls: type[_T]) -> type[_T]:
        cls.__dc_role__ = name  # type: ignore[attr-defined]  # not a protocol member
        return cls

    return tag


def optional(fn: _T) -> _T:
    """Mark a protocol method that only some objects of the role have (e.g. ``state()`` of a
    memory: kv and recurrent memories only). Tests may call it; loading does not require it."""
    fn.__dc_optional__ = True  # type: ignore[attr-defined]
    return fn


def role_of(annotation: Any) -> str | None:
    """The role named by a return annotation (``X``, ``X | None``), or None for plain data."""
    found = getattr(annotation, "__dc_role__", None)
    if isinstance(found, str):
        return found
    for arg in typing.get_args(annotation):
        found = getattr(arg, "__dc_role__", None)
        if isinstance(found, str):
            return found
    return None


@dataclass(frozen=True)
class Member:
    """One method or attribute of a protocol."""

    name: str
    kind: str  # "method" or "attribute"
    owner: type  # the Protocol that declares it
    returns: str | None = None  # role of the result (methods), None for data
    optional: bool = False  # only some objects of the role have it (see optional())


@dataclass(frozen=True)
class Capability:
    """A named capability: the target methods it needs (``protocol``) and what they return."""

    name: str
    protocol: type
    summary: str
    # Context parameters (``new_context(**params)``) whose meaning this capability defines.
    params: tuple[str, ...] = ()
    members: dict[str, Member] = field(default_factory=dict, compare=False)
    # role -> members of objects of that role reachable from this capability
    objects: dict[str, dict[str, Member]] = field(default_factory=dict, compare=False)

    @property
    def area(self) -> str:
        return self.name.split(".", 1)[0]


def _protocol_classes(proto: type) -> list[type]:
    return [
        c
        for c in proto.__mro__
        if c not in (object, typing.Protocol, typing.Generic) and getattr(c, "_is_protocol", False)
    ]


@functools.cache
def protocol_members(proto: type) -> dict[str, Member]:
    """Methods and attributes of a Protocol (and its Protocol bases), with result roles."""
    out: dict[str, Member] = {}
    for cls in reversed(_protocol_classes(proto)):
        for name, value in vars(cls).items():
            if name.startswith("_"):
                continue
            if inspect.isfunction(value):
                hints = typing.get_type_hints(value)  # resolved in the defining module
                out[name] = Member(
                    name,
                    "method",
                    cls,
                    role_of(hints.get("return")),
                    bool(getattr(value, "__dc_optional__", False)),
                )
            elif isinstance(value, property):
                out[name] = Member(name, "attribute", cls)
        for name in vars(cls).get("__annotations__", {}):
            if not name.startswith("_"):
                out[name] = Member(name, "attribute", cls)
    return out


def _role_closure(proto: type) -> dict[str, dict[str, Member]]:
    """Every role reachable from ``proto``'s methods, with the members of its Protocols."""
    objects: dict[str, dict[str, Member]] = {}
    todo = [proto]
    seen: set[type] = set()
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        for member in protocol_members(cls).values():
            if member.kind != "method":
                continue
            ret = typing.get_type_hints(getattr(member.owner, member.name)).get("return")
            for candidate in (ret, *typing.get_args(ret)):
                name = getattr(candidate, "__dc_role__", None)
                if isinstance(name, str):
                    objects.setdefault(name, {}).update(protocol_members(candidate))
                    todo.append(candidate)
    return objects


def capability(
    name: str, protocol: type, summary: str, *, params: Iterable[str] = ()
) -> Capability:
    """Declare a capability (used by the area modules)."""
    return Capability(
        name,
        protocol,
        summary,
        tuple(params),
        protocol_members(protocol),
        _role_closure(protocol),
    )


def area_modules() -> list[Any]:
    import conformance.protocol as pkg

    mods = []
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            mods.append(importlib.import_module(f"{pkg.__name__}.{info.name}"))
    return mods


@functools.cache
def registry() -> Mapping[str, Capability]:
    """Every capability of every area module, by name."""
    caps: dict[str, Capability] = {}
    for mod in area_modules():
        area = mod.__name__.rsplit(".", 1)[1]
        for cap in getattr(mod, "CAPABILITIES", ()):
            if cap.area != area:
                raise RuntimeError(f"capability {cap.name!r} declared in the {area!r} module")
            if cap.name in caps:
                raise RuntimeError(f"capability {cap.name!r} declared twice")
            caps[cap.name] = cap
    return caps


@functools.cache
def argument_rules() -> Mapping[str, Callable[[tuple[Any, ...], dict[str, Any]], set[str]]]:
    """``{method: fn(args, kwargs) -> capabilities the call's arguments need}`` of all areas."""
    rules: dict[str, Callable[[tuple[Any, ...], dict[str, Any]], set[str]]] = {}
    for mod in area_modules():
        for method, fn in getattr(mod, "ARGUMENT_RULES", {}).items():
            if method in rules:
                raise RuntimeError(f"two argument rules for {method!r}")
            rules[method] = fn
    return rules
