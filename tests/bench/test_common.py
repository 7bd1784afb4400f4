"""tools.bench.common.record(): the convention every bench case follows."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tools.bench.common import bench_threads, record


def _fixture(median: float | None = None) -> Any:
    stats = None if median is None else SimpleNamespace(stats=SimpleNamespace(median=median))
    return SimpleNamespace(extra_info={}, group=None, stats=stats)


def test_record_fills_extra_info_and_group() -> None:
    b = _fixture()
    record(b, area="kv", work=512, unit="cells", params={"n_kv": 512})
    assert b.group == "kv"
    assert b.extra_info == {
        "area": "kv",
        "work": 512.0,
        "unit": "cells",
        "params": {"n_kv": 512},
        "role": "subject",
    }


def test_record_adds_throughput_once_timed() -> None:
    b = _fixture(median=0.5)
    record(
        b,
        area="floor",
        work=100,
        unit="bytes",
        pair="p",
        role="peer",
        peer="numpy",
        bytes_moved=200,
    )
    info = b.extra_info
    assert info["throughput"] == 200.0 and info["throughput_unit"] == "bytes/s"
    assert info["gb_per_s"] == pytest.approx(400 / 1e9)
    assert (info["pair"], info["peer"], info["bytes"]) == ("p", "numpy", 200.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"role": "oracle"}, "role must be one of"),
        ({"role": "peer"}, "must name its peer"),
        ({"work": 0}, "work must be positive"),
    ],
)
def test_record_rejects_bad_metadata(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"area": "kv", "work": 1, "unit": "cells", **kwargs}
    with pytest.raises(ValueError, match=message):
        record(_fixture(), **args)


def test_bench_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DC_BENCH_THREADS", raising=False)
    assert bench_threads() == 1
    monkeypatch.setenv("DC_BENCH_THREADS", "2")
    assert bench_threads() == 2
    monkeypatch.setenv("DC_BENCH_THREADS", "lots")
    assert bench_threads() == 1
