"""One place decides whether Triton kernels run compiled (GPU) or through the interpreter.

``@triton.jit`` reads ``TRITON_INTERPRET`` when a kernel is *decorated*, so the decision must be
taken before any kernel module is imported. Every kernel module imports ``triton``/``tl`` from
here, never directly:

* ``TRITON_INTERPRET`` set: honoured as given (``1`` = interpreter, ``0`` = compiled);
* unset and no CUDA device: set to ``1`` so the kernels run on CPU tensors in numpy;
* unset with a CUDA device: compiled.

``INTERPRETER`` says which one happened; ``triton_available()`` whether kernels can run at all
(Triton imports, and either the interpreter is on or a GPU is present), and ``kernel_device()``
the device kernel inputs must live on.
"""

from __future__ import annotations

import os
from typing import Any


def _cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # no torch or a broken CUDA setup: treat as "no GPU"
        return False


_CUDA = _cuda_available()
if not os.environ.get("TRITON_INTERPRET") and not _CUDA:
    os.environ["TRITON_INTERPRET"] = "1"


def _import() -> tuple[Any, Any, str | None]:
    try:
        import triton as triton_module
        import triton.language as language
    except Exception as exc:  # keep the package importable: dispatch records the reason instead
        return None, None, f"{type(exc).__name__}: {exc}"
    return triton_module, language, None


triton, tl, IMPORT_ERROR = _import()


def _interpreting() -> bool:
    if triton is None:
        return False
    try:
        return bool(triton.knobs.runtime.interpret)
    except AttributeError:  # older Triton without knobs
        return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes")


INTERPRETER: bool = _interpreting()


def triton_available() -> bool:
    """True when Triton kernels can run here (interpreter on CPU, or compiled on a GPU)."""
    return triton is not None and (INTERPRETER or _CUDA)


def unavailable_reason() -> str:
    """Why ``triton_available()`` is False ('' when it is True)."""
    if triton is None:
        return f"triton failed to import ({IMPORT_ERROR})"
    if not (INTERPRETER or _CUDA):
        return "TRITON_INTERPRET=0 but no CUDA device is present"
    return ""


def kernel_device() -> str:
    """Device that kernel inputs must live on: 'cpu' under the interpreter, else 'cuda'."""
    return "cpu" if INTERPRETER or not _CUDA else "cuda"
