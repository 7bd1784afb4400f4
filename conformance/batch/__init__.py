"""Conformance tests of the batch sanitizer and splitter (spec/batch_sanitizer.md, spec/batch_split.md)."""
