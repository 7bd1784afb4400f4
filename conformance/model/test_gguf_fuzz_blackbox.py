"""Corrupted GGUF files through a public load API alone (GGUF-045, observable half).

The white-box test (``test_gguf_fuzz.py``) also demands a code of the load-error table; an
engine with only ``model.load`` cannot show that, but it can show the other half of the rule:
each load of a corrupted file ends within the CPU-time and address-space limits with a model or
a refusal of any kind (an exception, a NULL turned into an error), never a crash (an abort, a
signal), a hang or a runaway allocation. The same deterministic corruptions of the ``mha``
fixture run through the same child-process harness.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from conformance.model.test_gguf_fuzz import load_corruptions

pytestmark = [pytest.mark.invariant("GGUF-045"), pytest.mark.requires("model.load")]


def _ended_cleanly(outcome: str) -> bool:
    """A model, or a refusal the engine reported from inside the load call: a typed or untyped
    exception or a MemoryError within the limit. A child that died or gave no answer did not."""
    return outcome in ("loaded", "out of memory") or outcome.startswith(("code ", "untyped "))


@pytest.mark.skipif(
    "forkserver" not in multiprocessing.get_all_start_methods(), reason="needs fork"
)
def test_corrupted_files_load_or_are_refused_without_crash(
    target: Any, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    outcomes = load_corruptions(request, tmp_path)
    bad = {name: got for name, got in outcomes.items() if not _ended_cleanly(got)}
    assert not bad, f"{len(bad)} of {len(outcomes)} corrupted files crashed or hung the load: {bad}"
    refused = sum(got != "loaded" for got in outcomes.values())
    request.node.user_properties.append(("fuzz_cases", len(outcomes)))
    request.node.user_properties.append(("fuzz_refused", refused))
