"""Hypothesis strategies, one module per area (batches, memory states, kv op sequences, ...)."""
