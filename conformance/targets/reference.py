"""The reference target: ``reference_impl`` seen through the adapter protocol.

The class is assembled from the ``Reference`` mixin of every area module, so each area's
adapter lives next to its protocol definition and nothing here changes when an area lands.
"""

from __future__ import annotations

from typing import Any

import conformance
from conformance.targets.areas import area_modules
from conformance.targets.base import Target


def _build_class() -> type:
    mixins: list[type] = []
    caps: set[str] = set()
    for mod in area_modules():
        mixin = getattr(mod, "Reference", None)
        if mixin is not None:
            mixins.append(mixin)
            caps.update(getattr(mod, "CAPABILITIES", {}))
    namespace: dict[str, Any] = {
        "name": "reference",
        "version": conformance.__version__,
        "capabilities": frozenset(caps),
        "__doc__": "reference_impl through the adapter protocol",
    }
    return type("ReferenceTarget", (*mixins, Target), namespace)


ReferenceTarget: Any = _build_class()
