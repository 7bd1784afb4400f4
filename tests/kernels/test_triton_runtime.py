"""kernels._triton: interpreter vs compiled is decided before any kernel module is imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import json, os; from kernels import _triton as t; "
    "print(json.dumps([t.INTERPRETER, t.triton_available(), t.unavailable_reason(), "
    "t.kernel_device(), os.environ.get('TRITON_INTERPRET')]))"
)


def _probe(env_value: str | None) -> list[object]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if env_value is not None:
        env["TRITON_INTERPRET"] = env_value
    env["PYTHONPATH"] = str(ROOT)
    env["CUDA_VISIBLE_DEVICES"] = ""  # behave as this CPU-only machine even where a GPU exists
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=300,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("value", [None, ""])
def test_unset_without_cuda_turns_the_interpreter_on(value: str | None) -> None:
    interpreter, available, reason, device, env = _probe(value)
    assert (interpreter, available, reason, device, env) == (True, True, "", "cpu", "1")


def test_explicit_interpreter_is_honoured() -> None:
    assert _probe("1")[:2] == [True, True]


def test_compiled_without_cuda_is_unavailable_with_a_reason() -> None:
    interpreter, available, reason, _device, env = _probe("0")
    assert (interpreter, available, env) == (False, False, "0")
    assert "no CUDA device" in str(reason)
