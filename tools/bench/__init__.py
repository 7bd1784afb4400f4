"""Benchmark cases (pytest-benchmark) and cross-commit comparison."""
