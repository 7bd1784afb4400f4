"""Error metrics and the per-dtype tolerances of spec/kernels.md (section *Tolerances*).

NMSE follows llama.cpp's test-backend-ops: ``Σ(ref − out)² / Σ ref²`` with ``ref`` the float64
oracle. Max-abs is relative to the output's magnitude: ``max|ref − out| / max(1, max|ref|)``.
Both must hold. The table is keyed by the dtype of the decode output (= the query's dtype);
tests/kernels/test_tolerance_table.py keeps it equal to the table in the spec.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Tolerance:
    nmse: float
    max_abs: float


TOLERANCES: dict[str, Tolerance] = {
    "float32": Tolerance(nmse=1e-10, max_abs=2e-5),
    "float16": Tolerance(nmse=1e-6, max_abs=2e-3),
}


def _np(x: object) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().double().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def as_array(x: object) -> np.ndarray:
    """A tensor or array as a float64 numpy array on the CPU (to serve as a reference)."""
    return _np(x)


def nmse(ref: object, out: object) -> float:
    r, o = _np(ref), _np(out)
    num = float(np.sum((r - o) ** 2))
    den = float(np.sum(r**2))
    return num / den if den > 0 else num


def max_abs(ref: object, out: object) -> float:
    r, o = _np(ref), _np(out)
    if r.size == 0:
        return 0.0
    return float(np.max(np.abs(r - o))) / max(1.0, float(np.max(np.abs(r))))


LONG_CONTEXT = 20000  # beyond this many keys the NMSE bound grows linearly (llama.cpp FA rule)


def assert_close(
    out: torch.Tensor, ref: object, what: str = "", n_keys: int = 0
) -> tuple[float, float]:
    """Fail with a diagnostic unless ``out`` is within its dtype's tolerance of ``ref``."""
    o = _np(out)
    r = _np(ref)
    assert o.shape == r.shape, f"{what}: shape {o.shape} != oracle {r.shape}"
    assert np.isfinite(o).all(), (
        f"{what}: output holds NaN/inf at {np.argwhere(~np.isfinite(o))[:5].tolist()}"
    )
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
