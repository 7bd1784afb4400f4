"""Splitting one suite run over N machines: ``--shard I/N``.

Every shard collects the whole suite and keeps its own part, so the split must be a pure
function of the collected node IDs and the committed durations file
(``conformance/durations.json``, refreshed by ``nox -s durations``). Tests of one module stay
together (their module-scoped fixtures — models, contexts — are built once per shard) unless
the module alone is longer than half a shard's fair share, in which case its tests are placed
one by one. Placement is longest-first onto the least-loaded shard (ties: the lowest index).
A test the durations file does not know costs the median recorded duration.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

DURATIONS_PATH = Path(__file__).resolve().parent / "durations.json"
DEFAULT_COST = 0.05  # seconds, for a test when no duration is recorded at all


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``"2/4"`` -> Shard(2, 4); a malformed value raises ValueError naming it."""
    index_s, sep, count_s = text.strip().partition("/")
    try:
        index, count = int(index_s), int(count_s)
    except ValueError:
        index = count = 0
    if not sep or count < 1 or not 1 <= index <= count:
        raise ValueError(f"--shard {text!r}: expected I/N with 1 <= I <= N (e.g. --shard 2/4)")
    return Shard(index, count)


def load_durations(path: Path = DURATIONS_PATH) -> dict[str, float]:
    """Recorded seconds per node ID ({} when the file does not exist)."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return {str(k): float(v) for k, v in data.get("durations", {}).items()}


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def assign(nodeids: Iterable[str], count: int, durations: Mapping[str, float]) -> dict[str, int]:
    """Node ID -> 1-based shard index, balanced by ``durations``."""
    ids = sorted(set(nodeids))
    known = [durations[n] for n in ids if n in durations]
    fallback = statistics.median(known) if known else DEFAULT_COST
    cost = {n: durations.get(n, fallback) for n in ids}
    modules: dict[str, list[str]] = {}
    for n in ids:
        modules.setdefault(_module(n), []).append(n)
    total = sum(cost.values())
    limit = total / count / 2
    units: list[tuple[float, str, list[str]]] = []
    for mod, members in modules.items():
        mod_cost = sum(cost[n] for n in members)
        if mod_cost > limit and len(members) > 1:
            units += [(cost[n], n, [n]) for n in members]
        else:
            units.append((mod_cost, mod, members))
    # Longest first; the key's name breaks ties so the order never depends on dict order.
    units.sort(key=lambda u: (-u[0], u[1]))
    load = [0.0] * count
    out: dict[str, int] = {}
    for unit_cost, _, members in units:
        shard = min(range(count), key=lambda i: (load[i], i))
        load[shard] += unit_cost
        for n in members:
            out[n] = shard + 1
    return out


def write_durations(durations: Mapping[str, float], path: Path = DURATIONS_PATH) -> None:
    """Record per-test seconds (rounded to milliseconds, sorted: a stable diff)."""
    data = {
        "about": "seconds per test (setup + call + teardown), one serial run of the suite; "
        "read by --shard to balance shards; refresh with `nox -s durations`",
        "durations": {k: round(v, 3) for k, v in sorted(durations.items())},
    }
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
