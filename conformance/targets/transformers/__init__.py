"""The ``transformers`` target (placeholder docstring, written at the end)."""

from __future__ import annotations

from conformance.targets.transformers.target import TransformersTarget

__all__ = ["TransformersTarget"]
