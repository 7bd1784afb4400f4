"""docs/ADAPTERS.md carries the protocol reference generated from conformance/protocol/."""

from __future__ import annotations

from pathlib import Path

from conformance.protocol.__main__ import main

DOC = Path(__file__).resolve().parents[1] / "docs" / "ADAPTERS.md"


def test_adapter_guide_protocol_section_is_current() -> None:
    assert main(["--check", str(DOC)]) == 0, (
        "docs/ADAPTERS.md is out of date: python -m conformance.protocol --write docs/ADAPTERS.md"
    )


def test_every_capability_appears_in_the_guide() -> None:
    from conformance.protocol import registry

    text = DOC.read_text(encoding="utf-8")
    missing = [name for name in registry() if f"`{name}`" not in text]
    assert not missing, missing
