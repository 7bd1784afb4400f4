"""Hypothesis strategies and grid sizes for the kernels area.

The Triton interpreter runs every program instance sequentially in numpy, so CI grids stay small
but cross every boundary (tiles, chunks, partitions, scale blocks). ``grid_scale()`` picks the
size: ``ci`` (default), ``thorough`` (the hypothesis profile of the same name) or ``gpu``
(``DC_KERNELS_SCALE=gpu``, set by the ``gpu`` nox session, for compiled kernels).
"""

from __future__ import annotations

import os

from hypothesis import Phase, settings

from conformance import hypothesis_profiles


def grid_scale() -> str:
    env = os.environ.get("DC_KERNELS_SCALE", "").strip().lower()
    if env in ("ci", "thorough", "gpu"):
        return env
    return "thorough" if hypothesis_profiles.selected_profile() == "thorough" else "ci"


def examples(ci: int) -> int:
    """Hypothesis examples for a kernel property: ``ci`` under CI, more elsewhere."""
    return {"ci": ci, "thorough": ci * 10, "gpu": ci * 10}[grid_scale()]


def kernel_settings(ci: int) -> settings:
    """Settings for a property that runs Triton kernels: ``examples(ci)`` examples and no
    shrinking. Each example costs interpreter seconds, and shrinking a failure (as a mutant
    causes) would run hundreds more; the falsifying example is still printed as drawn."""
    return settings(max_examples=examples(ci), phases=(Phase.explicit, Phase.reuse, Phase.generate))
