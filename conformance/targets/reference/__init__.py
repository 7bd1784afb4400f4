"""The reference target: ``reference_impl`` seen through the target protocol.

The class is assembled from the ``Reference`` mixin of every module of this package (one per
area, named like the area's spec file), so landing an area never edits a shared file. It claims
every capability of :mod:`conformance.protocol`; ``conformance/targets/reference/test_typing``
style checks (``checker: protocol.decoder.Logits = ReferenceTarget()``) live in
:mod:`conformance.targets.reference._typing` so mypy proves the adapter matches the protocol.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import conformance
from conformance.protocol import registry
from conformance.targets.base import Target


def _build_class() -> type:
    mixins: list[type] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        mixin = getattr(mod, "Reference", None)
        if mixin is not None:
            mixins.append(mixin)
    namespace: dict[str, Any] = {
        "name": "reference",
        "version": conformance.__version__,
        "capabilities": frozenset(registry()),
        "__doc__": "reference_impl through the target protocol",
        "__module__": __name__,
    }
    return type("ReferenceTarget", (*mixins, Target), namespace)


ReferenceTarget: Any = _build_class()
