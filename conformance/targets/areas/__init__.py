"""One module per area of the target protocol.

Each module defines:

* ``CAPABILITIES``: ``{capability name: (required method names, ...)}`` -- what a target
  must implement to claim the capability;
* ``Reference``: a mixin implementing those methods on top of ``reference_impl``.

Modules are discovered automatically, so adding an area never edits a shared file.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def area_modules() -> list[ModuleType]:
    mods = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        mods.append(importlib.import_module(f"{__name__}.{info.name}"))
    return mods
