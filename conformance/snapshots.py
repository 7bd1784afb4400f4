"""Syrupy configuration: one top-level ``snapshots/`` tree and a deterministic array format.

* Snapshot files live under ``<repo>/snapshots/`` mirroring the test file's path, e.g.
  ``conformance/batch/test_corpus.py`` -> ``snapshots/conformance/batch/test_corpus.ambr``
  (override the root with ``DC_SNAPSHOT_ROOT``).
* numpy arrays and torch tensors serialize as ``dtype``, ``shape`` and their values: integers
  exactly, floats rounded to a stated number of significant digits (6 unless the test wraps the
  array with :func:`array_record`), 16 values per line with their flat index. numpy's truncating
  ``repr`` is never used.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from syrupy.extensions.amber import AmberDataSerializer, AmberSnapshotExtension

DEFAULT_SIG = 6
VALUES_PER_LINE = 16


def snapshot_root() -> Path:
    env = os.environ.get("DC_SNAPSHOT_ROOT")
    if env:
        return Path(env).resolve()
    return Path(__file__).resolve().parent.parent / "snapshots"


def _is_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _fmt_float(v: float, sig: int) -> str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    text = f"{v:.{sig}g}"
    return "0" if text in ("-0", "0") else text


def array_record(x: Any, sig: int = DEFAULT_SIG) -> dict[str, Any]:
    """Canonical, diff-friendly form of an array: dtype, shape, rounding rule and values."""
    if _is_tensor(x):
        dtype_name = str(x.dtype).removeprefix("torch.")
        t = x.detach().cpu()
        if t.dtype.is_floating_point:
            t = t.float()
        arr = t.numpy()
    else:
        arr = np.asarray(x)
        dtype_name = str(arr.dtype)
    flat = arr.reshape(-1)
    if arr.dtype.kind == "f" or arr.dtype.kind == "c":
        values = [_fmt_float(float(v), sig) for v in flat.astype(np.float64)]
        rounding = f"{sig} significant digits"
    elif arr.dtype.kind == "b":
        values = ["1" if v else "0" for v in flat]
        rounding = "exact"
    else:
        values = [str(int(v)) for v in flat]
        rounding = "exact"
    lines = [
        f"[{i}:{min(i + VALUES_PER_LINE, len(values))}] "
        + " ".join(values[i : i + VALUES_PER_LINE])
        for i in range(0, len(values), VALUES_PER_LINE)
    ]
    return {
        "dtype": dtype_name,
        "shape": tuple(int(d) for d in arr.shape),
        "rounding": rounding,
        "values": lines,
    }


class ArrayAmberSerializer(AmberDataSerializer):
    @classmethod
    def _assign_serialize_method(cls, data: Any) -> Callable[..., str]:
        if isinstance(data, np.ndarray) or _is_tensor(data):

            def serialize_array(*, data: Any, **kwargs: Any) -> str:
                return cls.serialize_dict(data=dict(array_record(data).items()), **kwargs)

            return serialize_array
        if isinstance(data, np.generic):

            def serialize_scalar(*, data: Any, **kwargs: Any) -> str:
                return cls._serialize(data.item(), **kwargs)

            return serialize_scalar
        return super()._assign_serialize_method(data)


class ConformanceSnapshotExtension(AmberSnapshotExtension):
    serializer_class = ArrayAmberSerializer

    @classmethod
    def dirname(cls, *, test_location: Any) -> str:
        test_dir = Path(test_location.filepath).resolve().parent
        # Mirror the test's path inside this project, whatever the root (DC_SNAPSHOT_ROOT).
        repo = Path(__file__).resolve().parent.parent
        try:
            rel = test_dir.relative_to(repo)
        except ValueError:
            rel = Path(test_dir.name)
        return str(snapshot_root() / rel)
