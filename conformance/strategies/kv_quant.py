"""Hypothesis strategies for the kv_quant area: values to quantize (ties, zeros, a wide dynamic
range) and policy strings (valid fields and their many spellings). Example counts and settings
come from :mod:`conformance.strategies.kernels` (the formats also run through Triton)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

KINDS = ("q8_0", "q4_0", "nf4")
QBLOCKS = (2, 8, 16, 32, 64)
POLICY_KINDS = ("fp16", "fp32", "q8_0", "q4_0", "nf4")
POLICY_QBLOCKS = (2, 4, 8, 16, 32, 64, 128, 256)


# ---------------------------------------------------------------------------------------------
# Values to quantize
# ---------------------------------------------------------------------------------------------


def _block_values() -> st.SearchStrategy[float]:
    # Mix of ordinary values, exact zeros, values on rounding ties and a wide dynamic range.
    return st.one_of(
        st.floats(-4.0, 4.0, width=32),
        st.just(0.0),
        st.sampled_from([0.5, -0.5, 1.5, -2.5, 3.5, 7.0, -7.0]),
        st.floats(-8192.0, 8192.0, width=32),
        st.floats(-(2.0**-10), 2.0**-10, width=32),
    )


@st.composite
def quant_inputs(draw: st.DrawFn, kinds: tuple[str, ...] = KINDS) -> tuple[np.ndarray, str, int]:
    """(x float32 [rows, dim], kind, qblock)."""
    kind = draw(st.sampled_from(kinds))
    qblock = draw(st.sampled_from(QBLOCKS))
    rows = draw(st.integers(1, 4))
    dim = draw(st.integers(1, 3 * qblock + 5))
    x = draw(hnp.arrays(np.float32, (rows, dim), elements=_block_values()))
    return x, kind, qblock


@st.composite
def ggml_rows(draw: st.DrawFn) -> np.ndarray:
    """float32 [rows, 32·n_blocks] with ties, zeros and blocks whose extreme value is repeated."""
    rows = draw(st.integers(1, 3))
    nb = draw(st.integers(1, 3))
    x = draw(hnp.arrays(np.float32, (rows, 32 * nb), elements=_block_values()))
    # A block whose scale underflows (amax/127 below fp32's normal range) makes 1/d overflow in
    # ggml's reference itself: its codes are undefined there, so such blocks are not drawn.
    x = np.where(np.abs(x) < np.float32(2.0**-100), np.float32(0.0), x).astype(np.float32)
    if draw(st.booleans()):  # same magnitude, both signs: Q4_0 must pick the first one
        block = np.clip(x[0, :32], -2.0, 2.0)
        block[5], block[9] = 3.0, -3.0
        x[0, :32] = block
    return x


# ---------------------------------------------------------------------------------------------
# Policy strings
# ---------------------------------------------------------------------------------------------


@st.composite
def policies(draw: st.DrawFn) -> dict[str, object]:
    """A valid policy as fields {"k_sem": "kind@qb", "k_geo": ..., "v": ..., "resid": int}."""

    def fmt() -> str:
        return f"{draw(st.sampled_from(POLICY_KINDS))}@{draw(st.sampled_from(POLICY_QBLOCKS))}"

    return {"k_sem": fmt(), "k_geo": fmt(), "v": fmt(), "resid": draw(st.integers(0, 100000))}


_ALIASES = {
    "k_sem": ("ksem", "KSEM", "k_sem", "ksem_kind", "KSemKind"),
    "k_geo": ("kgeo", "K_GEO", "kgeokind", "kgeo_kind"),
    "v": ("v", "V", "vkind", "v_kind"),
    "resid": ("resid", "residual", "residual_len", "RESIDUAL_LEN", "residuallen"),
}


@st.composite
def policy_spellings(draw: st.DrawFn, fields: dict[str, object]) -> str:
    """The same policy written with aliases, any key order, spaces, kinds in either case and
    default @32 omitted."""
    items = []
    for key in ("k_sem", "k_geo", "v", "resid"):
        name = draw(st.sampled_from(_ALIASES[key]))
        value = str(fields[key])
        if value.endswith("@32") and draw(st.booleans()):
            value = value[: -len("@32")]
        pad = draw(st.sampled_from(["", " ", "  "]))
        if key != "resid":  # kinds in any case, spaces around "@" (QNT-014)
            kind, at, qb = value.partition("@")
            kind = draw(st.sampled_from([kind, kind.upper()]))
            value = f"{kind}{pad}{at}{pad}{qb}" if at else kind
        items.append(f"{pad}{name}{pad}={pad}{value}{pad}")
    order = draw(st.permutations(items))
    return ",".join(order)
