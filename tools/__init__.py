"""Developer tools shipped with the suite (benchmarks)."""
