"""The per-dtype tolerances of spec/kernels.md (section *Tolerances*) and the check applying them.

Errors are measured against the float64 oracle with the suite's one NMSE
(``conformance.assertions.nmse``: ``Σ(out − ref)² / Σ ref²``, llama.cpp's test-backend-ops
metric) and a max-abs relative to the output's magnitude: ``max|ref − out| / max(1, max|ref|)``.
Both must hold. The table is keyed by the dtype of the decode output (= the query's dtype);
tests/kernels/test_tolerance_table.py keeps it equal to the table in the spec.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from conformance.assertions import as_f64, assert_finite, max_abs_diff, nmse


@dataclass(frozen=True)
class Tolerance:
    nmse: float
    max_abs: float


TOLERANCES: dict[str, Tolerance] = {
    "float32": Tolerance(nmse=1e-10, max_abs=2e-5),
    "float16": Tolerance(nmse=1e-6, max_abs=2e-3),
}


def max_abs(ref: object, out: object) -> float:
    """The spec's max-abs: ``max|ref − out| / max(1, max|ref|)`` (0.0 for empty arrays)."""
    r = as_f64(ref)
    if r.size == 0:
        return 0.0
    return max_abs_diff(r, out) / max(1.0, float(np.max(np.abs(r))))


LONG_CONTEXT = 20000  # beyond this many keys the NMSE bound grows linearly (llama.cpp FA rule)


def assert_within(
    out: torch.Tensor, ref: object, what: str = "", n_keys: int = 0
) -> tuple[float, float]:
    """Fail with a diagnostic unless ``out`` is within its dtype's tolerance of ``ref``."""
    __tracebackhide__ = True
    o = as_f64(out)
    r = as_f64(ref)
    if o.shape != r.shape:
        raise AssertionError(f"{what}: shape {o.shape} != oracle {r.shape}")
    assert_finite(o, f"{what} output")
    tol = TOLERANCES[str(out.dtype).removeprefix("torch.")]
    nmse_bound = tol.nmse * max(1.0, n_keys / LONG_CONTEXT)
    e_nmse, e_abs = nmse(r, o), max_abs(r, o)
    if e_nmse > nmse_bound or e_abs > tol.max_abs:
        worst = np.unravel_index(int(np.argmax(np.abs(r - o))), r.shape)
        raise AssertionError(
            f"{what}: NMSE {e_nmse:.3e} (tol {nmse_bound:.1e}), max-abs {e_abs:.3e} "
            f"(tol {tol.max_abs:.0e}); worst at {tuple(int(i) for i in worst)}: "
            f"out {o[worst]:.6g} vs oracle {r[worst]:.6g}"
        )
    return e_nmse, e_abs
