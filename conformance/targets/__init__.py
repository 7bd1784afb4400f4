"""Targets: the engines under test, seen through one adapter protocol."""

from conformance.targets.base import Target, TargetLoadError, capability_registry, load_target

__all__ = ["Target", "TargetLoadError", "capability_registry", "load_target"]
