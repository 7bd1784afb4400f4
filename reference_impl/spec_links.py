"""The one link from code back to the spec: ``@implements("ID", ...)``.

It marks the function, method or class of the reference (``reference_impl/``, ``kernels/``) where
an invariant is implemented, so a reader goes ID -> test -> implementation in one hop each way
(``grep -rn 'DEC-012' conformance reference_impl kernels``). The decorator records and returns
its argument unchanged: nothing runs at call time, and the production code does not depend on
the conformance suite (``conformance.spec.load_implementations`` reads the records).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")
_ID = re.compile(r"^[A-Z]{2,6}-[0-9]{3}$")

# invariant ID -> "module:qualname" of every object marked as implementing it
IMPLEMENTATIONS: dict[str, list[str]] = {}


def implements(*ids: str) -> Callable[[_T], _T]:
    """Mark the decorated function, method or class as implementing the invariants ``ids``."""
    for inv_id in ids:
        if not isinstance(inv_id, str) or not _ID.match(inv_id):
            raise ValueError(f"@implements: {inv_id!r} is not an invariant ID (PREFIX-NNN)")
    if not ids:
        raise ValueError("@implements needs at least one invariant ID")

    def mark(obj: _T) -> _T:
        where = f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', repr(obj))}"
        for inv_id in ids:
            places = IMPLEMENTATIONS.setdefault(inv_id, [])
            if where not in places:
                places.append(where)
        return obj

    return mark
