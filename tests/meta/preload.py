"""What the meta-tests' fork server imports once, so that each forked child (a pytest session
against a mutant) starts with it: the libraries every run imports, pytest's plugins (what
``load_setuptools_entrypoints`` would otherwise import in each child), the plugin and the
reference target, and Triton (imported by the @implements walk of every run).

Kernel modules are not imported here: ``@triton.jit`` reads ``TRITON_INTERPRET`` when a kernel
is decorated, and that must happen under the child's environment. Last, ``gc.freeze()`` moves
everything imported out of the collector's sight: pytest collects garbage several times as a
session ends, and each pass over this heap would cost a fifth of a second in every child.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
from importlib.metadata import entry_points

import hypothesis  # noqa: F401
import numpy  # noqa: F401
import pytest  # noqa: F401
import syrupy  # noqa: F401
import torch  # noqa: F401

import conformance.assertions
import conformance.mutants
import conformance.plugin
import conformance.targets.reference  # noqa: F401

for _ep in entry_points(group="pytest11"):
    # a broken third-party plugin fails again in the child, where pytest reports it
    with contextlib.suppress(Exception):
        importlib.import_module(_ep.module)

# no Triton: the children report what that means
with contextlib.suppress(Exception):
    importlib.import_module("triton.language")

gc.freeze()
