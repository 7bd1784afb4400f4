"""Triton fused decode kernels over quantized KV caches (and their torch references)."""
