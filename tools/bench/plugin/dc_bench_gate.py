"""pytest plugin that lets the bench harness run two checkouts' cases in lock step.

Loaded with ``-p dc_bench_gate`` from the harness's own folder (so it works for any commit,
including ones older than the harness). When ``DC_BENCH_GATE=<read fd>,<write fd>`` is set,
before each case (setup, call and teardown included) the process writes ``ready <nodeid>``
and blocks until the harness answers ``go``. The harness answers only when the other checkout
is blocked too, so exactly one process runs at a time and the two measure the same case
within a second of each other. Deliberately free of project imports.
"""

from __future__ import annotations

import os
from typing import IO, Any

import pytest

_CHANNEL: tuple[IO[str], IO[str]] | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _CHANNEL
    spec = os.environ.get("DC_BENCH_GATE")
    if spec:
        rfd, wfd = (int(x) for x in spec.split(","))
        _CHANNEL = (os.fdopen(rfd, "r"), os.fdopen(wfd, "w"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> None:
    if _CHANNEL is None:
        return
    inp, out = _CHANNEL
    out.write(f"ready {item.nodeid}\n")
    out.flush()
    if inp.readline().strip() != "go":
        pytest.exit("the bench harness closed the gate", returncode=3)
