"""Scripts for a machine with a CUDA device (never run by CI)."""
