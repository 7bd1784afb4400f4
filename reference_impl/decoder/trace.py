"""An inspectable record of what the decoder did: one event per flow step.

Events are appended in execution order with a global sequence number, so tests can check the
seven-step flow of seed 000 (``sanitize``, ``split``, ``memory_update``, ``init_batch``,
``output_reserve``, per ubatch ``apply``/``plan``/``alloc``/``bind``/``compute``/``extract``,
``map_outputs``, then ``done`` or ``error``) and the order of KV writes per layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TraceEvent:
    seq_no: int
    call: int  # index of the decode call this event belongs to
    kind: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class DecodeTrace:
    enabled: bool = False
    events: list[TraceEvent] = field(default_factory=list)
    calls: int = 0
    _next: int = 0

    def begin_call(self) -> None:
        self.calls += 1  # the events added from here on carry call index calls - 1

    def add(self, kind: str, **data: Any) -> None:
        if not self.enabled:
            return
        self.events.append(TraceEvent(self._next, self.calls - 1, kind, data))
        self._next += 1

    def of_call(self, call: int) -> list[TraceEvent]:
        return [e for e in self.events if e.call == call]

    def kinds(self, call: int | None = None) -> list[str]:
        evs = self.events if call is None else self.of_call(call)
        return [e.kind for e in evs]
