"""Sliding-window attention: which key positions a query may not see.

One pure rule, ``is_masked_swa(n_swa, swa_type, p0, p1)`` with ``p0`` the key (cell) position
and ``p1`` the query position, used twice: by the KQ mask (a masked key gets -inf) and by
``find_slot`` (a cell whose only sequence has moved past its window may be overwritten).
The numbering of :class:`SWAType` is llama.cpp's ``llama_swa_type``.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np

from reference_impl.spec_links import implements


class SWAType(IntEnum):
    NONE = 0
    STANDARD = 1  # the key is older than the last n_swa positions
    CHUNKED = 2  # the key lies before the start of the query's n_swa-aligned chunk
    SYMMETRIC = 3  # the key is more than n_swa // 2 positions away, on either side


@implements("KV-022")
def is_masked_swa(n_swa: int, swa_type: int, p0: int, p1: int) -> bool:
    """True when key position ``p0`` is outside the window of query position ``p1``."""
    if swa_type == SWAType.NONE:
        return False
    if swa_type == SWAType.STANDARD:
        return p1 - p0 >= n_swa
    if swa_type == SWAType.CHUNKED:
        # Positions are never negative, so floor division is C's truncating division.
        return p0 < (p1 // n_swa) * n_swa
    if swa_type == SWAType.SYMMETRIC:
        half = n_swa // 2
        return p1 - p0 < -half or p1 - p0 > half
    raise ValueError(f"unknown swa_type {swa_type!r}")


@implements("KV-022")
def is_masked_swa_array(
    n_swa: int, swa_type: int, p0: np.ndarray, p1: np.ndarray | int
) -> np.ndarray:
    """Vectorised :func:`is_masked_swa`; ``p0`` and ``p1`` broadcast against each other."""
    p0 = np.asarray(p0, dtype=np.int64)
    p1 = np.asarray(p1, dtype=np.int64)
    if swa_type == SWAType.NONE:
        return np.zeros(np.broadcast_shapes(p0.shape, p1.shape), dtype=bool)
    if swa_type == SWAType.STANDARD:
        return (p1 - p0) >= n_swa
    if swa_type == SWAType.CHUNKED:
        return p0 < (p1 // n_swa) * n_swa
    if swa_type == SWAType.SYMMETRIC:
        half = n_swa // 2
        d = p1 - p0
        return (d < -half) | (d > half)
    raise ValueError(f"unknown swa_type {swa_type!r}")
