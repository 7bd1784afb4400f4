"""Targets: the engines under test, each an adapter implementing :mod:`conformance.protocol`.

``reference`` (:mod:`.reference`) and ``llamacpp`` (:mod:`.llamacpp`) ship with the suite; how a
``--target`` value is resolved is :mod:`conformance.engines`.
"""

from conformance.targets.base import Target, TargetLoadError, validate_target

__all__ = ["Target", "TargetLoadError", "validate_target"]
