"""Conformance tests of the batch sanitizer and splitter (spec/batch.md, spec/batch.md)."""
