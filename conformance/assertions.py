"""The assertion vocabulary of the conformance suite: one definition per check, one message form.

Every area checks the same few things: a numeric result against a reference (NMSE, elementwise
tolerance), an error's code and location, and that a refused call changed nothing. They are
written here once, so a bound means the same everywhere and a failure reads the same in every
area. Each helper raises ``AssertionError`` with a message that starts with ``what`` (the
caller's name for the checked quantity) when given; ``tests/test_assertions.py`` makes every
helper fail on each kind of difference it is meant to catch.

Numbers (arrays, tensors, lists; compared in float64, ``ref`` first, then the output checked):

* ``nmse(ref, out)`` -- ``Σ(out − ref)² / Σ ref²`` (llama.cpp's test-backend-ops metric). A
  zero ``ref`` gives 0.0 when ``out`` is zero too and ``inf`` otherwise. NaN or ±inf on either
  side, or shapes that differ, raise ``AssertionError``: no comparison, ``≤ bound`` or
  ``> floor``, may pass on a broken output.
* ``assert_nmse(ref, out, bound, what)`` -- passes iff ``nmse(ref, out) ≤ bound`` (the spec's
  "NMSE ≤ bound"); message ``"{what}: NMSE {value} > bound {bound}"``. Returns the value.
* ``max_abs_diff(ref, out)`` -- ``max |out − ref|`` (0.0 for empty arrays), same input rules as
  ``nmse``.
* ``assert_close(ref, out, *, atol, rtol=0, what)`` -- elementwise
  ``|out − ref| ≤ atol + rtol·|ref|``; NaN matches NaN and an infinity matches the same
  infinity at the same index, anything else non-finite fails. Shapes must be equal (no
  broadcasting). The message counts the elements out of tolerance and shows the worst one.
* ``assert_finite(x, what)`` -- no NaN or ±inf; the message lists the first offending indices.

Errors (``reference_impl.errors.EngineError`` and any engine error with the same attributes):

* ``assert_code(err, code, *, field=..., index=..., seq_id=..., what)`` -- ``err.code == code``
  and each of ``field`` / ``index`` / ``seq_id`` that is given (``...``, the default, leaves
  it unchecked; ``None`` requires it to be ``None``). ``err`` may be ``None`` (no error: fails)
  or a ``last_error``. Returns ``err``.
* ``raises_code(code, *, field=..., index=..., seq_id=..., exc=Exception, what)`` -- a context
  manager: the block must raise an ``exc`` that passes ``assert_code``; it fails when nothing
  is raised, when another exception type is raised, or when the error has no ``code``. The
  yielded object's ``value`` is the error after the block.

State:

* ``assert_unchanged(before, after, what)`` -- deep equality of two readings (tuples, lists,
  dicts, dataclasses, sets, numpy arrays and torch tensors, dtype and shape included; NaN equals
  NaN); the message lists the paths that differ (``.streams[0].pos[3]: 5 -> 7``).
* ``unchanged(read, what)`` -- a context manager: reads (a deep copy of) ``read()`` before and
  after the block and applies ``assert_unchanged`` when the block exits normally. Put it
  outside ``raises_code`` to check that a refused call changes nothing::

      with unchanged(lambda: memory_view(ctx), "memory"), raises_code("DEC_PARAM"):
          ctx.decode(bad)
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

__all__ = [
    "Raised",
    "as_f64",
    "assert_close",
    "assert_code",
    "assert_finite",
    "assert_nmse",
    "assert_unchanged",
    "max_abs_diff",
    "nmse",
    "raises_code",
    "unchanged",
]

_SHOWN = 5  # offending indices listed in a message
_DIFF_LINES = 10  # differing paths listed by assert_unchanged


def _prefix(what: str) -> str:
    return f"{what}: " if what else ""


def _is_tensor(x: object) -> bool:
    return hasattr(x, "detach") and hasattr(x, "cpu") and hasattr(x, "dtype")


def as_f64(x: object) -> np.ndarray:
    """A tensor, array, list or scalar as a float64 numpy array on the CPU."""
    if _is_tensor(x):
        return x.detach().cpu().double().numpy()  # type: ignore[attr-defined]
    return np.asarray(x, dtype=np.float64)


def _nonfinite(a: np.ndarray) -> str:
    bad = np.argwhere(~np.isfinite(a))
    return f"{bad[:_SHOWN].tolist()} ({len(bad)} of {a.size})"


def assert_finite(x: object, what: str = "") -> None:
    """Fail unless every element of ``x`` is finite (no NaN, no ±inf)."""
    __tracebackhide__ = True
    a = as_f64(x)
    if not np.isfinite(a).all():
        raise AssertionError(f"{_prefix(what)}holds NaN/inf at {_nonfinite(a)}")


def _pair(ref: object, out: object, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Both sides in float64, equal shapes, finite; else AssertionError naming the problem."""
    __tracebackhide__ = True
    r, o = as_f64(ref), as_f64(out)
    if r.shape != o.shape:
        raise AssertionError(f"{_prefix(what)}shapes differ: ref {r.shape}, out {o.shape}")
    for name, a in (("ref", r), ("out", o)):
        if not np.isfinite(a).all():
            raise AssertionError(f"{_prefix(what)}{name} holds NaN/inf at {_nonfinite(a)}")
    return r, o


def nmse(ref: object, out: object) -> float:
    """Normalized mean squared error ``Σ(out − ref)² / Σ ref²`` in float64, ``ref`` the reference.

    ``ref`` all zero: 0.0 when ``out`` is all zero, else ``inf``. Non-finite values or unequal
    shapes raise ``AssertionError`` (see the module docstring).
    """
    __tracebackhide__ = True
    r, o = _pair(ref, out, "nmse")
    num = float(np.sum((o - r) ** 2))
    den = float(np.sum(r * r))
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / den


def assert_nmse(ref: object, out: object, bound: float, what: str = "") -> float:
    """Fail unless ``nmse(ref, out) ≤ bound``; returns the measured NMSE."""
    __tracebackhide__ = True
    r, o = _pair(ref, out, what)
    value = nmse(r, o)
    if not value <= bound:
        raise AssertionError(f"{_prefix(what)}NMSE {value:.3e} > bound {bound:g}")
    return value


def max_abs_diff(ref: object, out: object) -> float:
    """``max |out − ref|`` in float64 (0.0 for empty arrays); input rules as ``nmse``."""
    __tracebackhide__ = True
    r, o = _pair(ref, out, "max_abs_diff")
    return float(np.max(np.abs(o - r))) if r.size else 0.0


def assert_close(
    ref: object, out: object, *, atol: float, rtol: float = 0.0, what: str = ""
) -> None:
    """Fail unless ``|out − ref| ≤ atol + rtol·|ref|`` at every index (float64)."""
    __tracebackhide__ = True
    r, o = as_f64(ref), as_f64(out)
    if r.shape != o.shape:
        raise AssertionError(f"{_prefix(what)}shapes differ: ref {r.shape}, out {o.shape}")
    with np.errstate(invalid="ignore"):
        allowed = atol + rtol * np.abs(r)
        excess = np.abs(o - r) - allowed
        same_special = (np.isnan(r) & np.isnan(o)) | (np.isinf(r) & (r == o))
        ok = same_special | (excess <= 0)
    if ok.all():
        return
    # rank the failures: any non-finite mismatch first, then by excess over the allowance
    rank = np.where(ok, -np.inf, np.where(np.isfinite(excess), excess, np.inf))
    worst = np.unravel_index(int(np.argmax(rank)), r.shape)
    where = tuple(int(i) for i in worst)
    raise AssertionError(
        f"{_prefix(what)}{int((~ok).sum())} of {r.size} elements out of tolerance "
        f"(atol {atol:g}, rtol {rtol:g}); worst at {where}: out {o[worst]:.7g} vs ref "
        f"{r[worst]:.7g} (|diff| {abs(o[worst] - r[worst]):.3e}, allowed {allowed[worst]:.3e})"
    )


# ---------------------------------------------------------------------------------- errors


def _describe(values: Mapping[str, object]) -> str:
    return " ".join(f"{k}={v!r}" for k, v in values.items())


def assert_code(
    err: object,
    code: str,
    *,
    field: object = ...,
    index: object = ...,
    seq_id: object = ...,
    what: str = "",
) -> Any:
    """Fail unless ``err`` is an error with ``code`` and each given field/index/seq_id."""
    __tracebackhide__ = True
    wanted: dict[str, object] = {"code": code, "field": field, "index": index, "seq_id": seq_id}
    wanted = {k: v for k, v in wanted.items() if v is not ...}
    if err is None:
        raise AssertionError(f"{_prefix(what)}expected an error {_describe(wanted)}, got none")
    if not hasattr(err, "code"):
        raise AssertionError(
            f"{_prefix(what)}expected an error {_describe(wanted)}, got {err!r}, which has no code"
        )
    got = {k: getattr(err, k, None) for k in wanted}
    if got != wanted:
        raise AssertionError(
            f"{_prefix(what)}expected an error {_describe(wanted)}, got {_describe(got)} "
            f"({type(err).__name__}: {err})"
        )
    return err


class Raised:
    """What ``raises_code`` caught: ``value`` is the error once the block has raised it."""

    value: Any = None


@contextmanager
def raises_code(
    code: str,
    *,
    field: object = ...,
    index: object = ...,
    seq_id: object = ...,
    exc: type[BaseException] | tuple[type[BaseException], ...] = Exception,
    what: str = "",
) -> Iterator[Raised]:
    """The block must raise ``exc`` carrying ``code`` (and the given field/index/seq_id)."""
    __tracebackhide__ = True
    raised = Raised()
    wanted = {"code": code, "field": field, "index": index, "seq_id": seq_id}
    shown = _describe({k: v for k, v in wanted.items() if v is not ...})
    try:
        yield raised
    except Exception as e:
        if not isinstance(e, exc):
            names = exc.__name__ if isinstance(exc, type) else "/".join(t.__name__ for t in exc)
            raise AssertionError(
                f"{_prefix(what)}expected {names} {shown}, got {type(e).__name__}: {e}"
            ) from e
        raised.value = e
        assert_code(e, code, field=field, index=index, seq_id=seq_id, what=what)
        return
    raise AssertionError(f"{_prefix(what)}expected an error {shown}, nothing was raised")


# ----------------------------------------------------------------------------------- state


def _array(x: object) -> np.ndarray:
    if _is_tensor(x):
        t = x.detach().cpu()  # type: ignore[attr-defined]
        try:
            return np.asarray(t.numpy())
        except TypeError:  # dtypes numpy lacks (bfloat16): compare as float32
            return np.asarray(t.float().numpy())
    return np.asarray(x)


def _dtype(x: object) -> str:
    return str(x.dtype).removeprefix("torch.")  # type: ignore[attr-defined]


def _short(x: object) -> str:
    text = repr(x)
    return text if len(text) <= 80 else text[:77] + "..."


def _diff(a: object, b: object, path: str, out: list[str]) -> None:
    """Append one line per difference between ``a`` and ``b`` to ``out``."""
    at = path or "value"
    if isinstance(a, np.ndarray | np.generic) or _is_tensor(a):
        if type(a) is not type(b):
            out.append(f"{at}: {type(a).__name__} -> {type(b).__name__}")
            return
        if _dtype(a) != _dtype(b):
            out.append(f"{at}: dtype {_dtype(a)} -> {_dtype(b)}")
            return
        x, y = _array(a), _array(b)
        if x.shape != y.shape:
            out.append(f"{at}: shape {x.shape} -> {y.shape}")
            return
        equal_nan = x.dtype.kind in "fc"
        same = x == y
        if equal_nan:
            same |= np.isnan(x) & np.isnan(y)
        if not same.all():
            bad = np.argwhere(~same)
            first = tuple(int(i) for i in bad[0])
            out.append(
                f"{at}: {len(bad)} of {x.size} elements differ, first at {first}: "
                f"{x[first].item()!r} -> {y[first].item()!r}"
            )
        return
    if type(a) is not type(b):
        out.append(f"{at}: {_short(a)} -> {_short(b)}")
        return
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        for f in dataclasses.fields(a):
            _diff(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}", out)
        return
    if isinstance(a, Mapping):
        assert isinstance(b, Mapping)
        for k in a:
            if k not in b:
                out.append(f"{path}[{k!r}]: {_short(a[k])} -> absent")
            else:
                _diff(a[k], b[k], f"{path}[{k!r}]", out)
        out.extend(f"{path}[{k!r}]: absent -> {_short(b[k])}" for k in b if k not in a)
        return
    if isinstance(a, list | tuple):
        assert isinstance(b, list | tuple)
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, f"{path}[{i}]", out)
        if len(a) != len(b):
            out.append(f"{at}: length {len(a)} -> {len(b)}")
        return
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return
    if bool(a != b):
        if isinstance(a, set | frozenset) and isinstance(b, set | frozenset):
            out.append(f"{at}: lost {_short(set(a - b))}, gained {_short(set(b - a))}")
        else:
            out.append(f"{at}: {_short(a)} -> {_short(b)}")


def assert_unchanged(before: object, after: object, what: str = "state") -> None:
    """Fail unless ``after`` equals ``before`` deeply; the message lists what changed."""
    __tracebackhide__ = True
    lines: list[str] = []
    _diff(before, after, "", lines)
    if lines:
        shown = [f"  {line}" for line in lines[:_DIFF_LINES]]
        if len(lines) > _DIFF_LINES:
            shown.append(f"  ... and {len(lines) - _DIFF_LINES} more")
        raise AssertionError(f"{what} changed (before -> after):\n" + "\n".join(shown))


@contextmanager
def unchanged(read: Callable[[], object], what: str = "state") -> Iterator[object]:
    """Check that the block leaves ``read()`` as it was (when the block exits normally)."""
    __tracebackhide__ = True
    before = copy.deepcopy(read())
    yield before
    assert_unchanged(before, copy.deepcopy(read()), what)
