"""decode-conformance: the conformance suite, its pytest plugin, targets and mutants."""

__version__ = "0.1.0"
