"""--shard I/N: parsing, and a placement that is deterministic, complete and balanced."""

from __future__ import annotations

import random

import pytest

from conformance.sharding import Shard, assign, parse_shard


@pytest.mark.parametrize("text", ["", "1", "0/4", "5/4", "a/b", "2/0", "-1/3", "1/2/3"])
def test_malformed_shard_is_refused_naming_the_value(text: str) -> None:
    with pytest.raises(ValueError, match=r"--shard .*expected I/N"):
        parse_shard(text)


def test_shard_parses() -> None:
    assert parse_shard(" 2/4 ") == Shard(2, 4) and str(Shard(2, 4)) == "2/4"


def _suite(seed: int) -> tuple[list[str], dict[str, float]]:
    rng = random.Random(seed)
    ids, durations = [], {}
    for m in range(12):
        for t in range(rng.randint(1, 40)):
            nodeid = f"conformance/area{m % 4}/test_m{m}.py::test_{t}"
            ids.append(nodeid)
            durations[nodeid] = rng.expovariate(1 / 0.3)
    ids.append("conformance/big/test_slow.py::test_whole_suite")  # one test longer than a share
    durations[ids[-1]] = 60.0
    return ids, durations


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7])
def test_every_test_lands_in_exactly_one_shard_whatever_the_order(count: int) -> None:
    ids, durations = _suite(count)
    place = assign(ids, count, durations)
    assert set(place) == set(ids) and set(place.values()) <= set(range(1, count + 1))
    shuffled = ids[:]
    random.Random(0).shuffle(shuffled)
    assert assign(shuffled, count, durations) == place  # every shard computes the same split


def test_shards_are_balanced_by_recorded_durations() -> None:
    ids, durations = _suite(11)
    del durations[ids[-1]]  # the slow test unknown: it costs the median
    place = assign(ids, 4, durations)
    loads = [sum(durations.get(n, 0.0) for n in ids if place[n] == i) for i in range(1, 5)]
    assert max(loads) - min(loads) <= max(durations.values()) + 1e-9, loads


def test_a_short_module_stays_in_one_shard_a_long_one_is_spread() -> None:
    ids, durations = _suite(5)
    place = assign(ids, 4, durations)
    total = sum(durations.values())
    for module in {n.split("::")[0] for n in ids}:
        members = [n for n in ids if n.startswith(module + "::")]
        shards = {place[n] for n in members}
        if sum(durations[n] for n in members) <= total / 8:
            assert len(shards) == 1, module
