"""The candidate record every sampler reads and writes (llama_token_data_array).

llama.cpp keeps an array of ``{id, logit, p}`` structs plus ``selected`` (an index into the
array, -1 when no token is chosen) and ``sorted`` (true when the array is known to be in
descending logit order). Here the three columns are numpy arrays of the C types (int32,
float32, float32) so every rule can be written with whole-array operations and the float
rounding matches the C code.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reference_impl.errors import SamplingError
from reference_impl.spec_links import implements

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1


@implements("SMP-004")
@dataclass(eq=False)
class TokenDataArray:
    """Candidates: ``ids`` int32 [n], ``logits`` float32 [n], ``p`` float32 [n].

    ``selected`` is an index into the arrays (not a token id), -1 when nothing is selected.
    """

    ids: np.ndarray
    logits: np.ndarray
    p: np.ndarray
    selected: int = -1
    sorted: bool = False

    @property
    def size(self) -> int:
        return int(self.ids.shape[0])

    def copy(self) -> TokenDataArray:
        return TokenDataArray(
            self.ids.copy(), self.logits.copy(), self.p.copy(), self.selected, self.sorted
        )

    def take(self, index: np.ndarray, *, sorted: bool) -> TokenDataArray:
        """Rows ``index`` (a reorder and/or truncation). ``selected`` is kept as is: in
        llama.cpp only the selecting samplers (greedy, dist) ever write it."""
        return TokenDataArray(
            self.ids[index], self.logits[index], self.p[index], self.selected, sorted
        )

    def with_logits(self, logits: np.ndarray, *, sorted: bool | None = None) -> TokenDataArray:
        return TokenDataArray(
            self.ids,
            logits.astype(np.float32, copy=False),
            self.p,
            self.selected,
            self.sorted if sorted is None else sorted,
        )

    def with_p(self, p: np.ndarray) -> TokenDataArray:
        return TokenDataArray(
            self.ids, self.logits, p.astype(np.float32, copy=False), self.selected, self.sorted
        )

    def with_selected(self, selected: int) -> TokenDataArray:
        return TokenDataArray(self.ids, self.logits, self.p, int(selected), self.sorted)


@implements("SMP-003", "SMP-004")
def validate(cur: TokenDataArray, *, copy: bool = False) -> TokenDataArray:
    """Check a candidate record given to a sampler; return it with canonical dtypes.

    Rejects (``SamplingError``): columns that are not 1-D or differ in length
    (``SMP_ARRAY_SHAPE``), an empty array (``SMP_EMPTY_CANDIDATES``; llama.cpp asserts),
    ids that are not integers in the int32 range (``SMP_TOKEN_ID``), a NaN logit
    (``SMP_NAN_LOGIT``, naming the index) and ``selected`` outside [-1, n)
    (``SMP_SELECTED_RANGE``). The input is never modified.
    """
    columns = {"ids": np.asarray(cur.ids), "logits": np.asarray(cur.logits), "p": np.asarray(cur.p)}
    for name, arr in columns.items():
        if arr.ndim != 1:
            raise SamplingError(
                "SMP_ARRAY_SHAPE", f"'{name}' must be 1-D, got shape {arr.shape}", field=name
            )
    n = columns["ids"].shape[0]
    for name in ("logits", "p"):
        if columns[name].shape[0] != n:
            raise SamplingError(
                "SMP_ARRAY_SHAPE",
                f"'{name}' has {columns[name].shape[0]} entries but 'ids' has {n}",
                field=name,
            )
    if n == 0:
        raise SamplingError("SMP_EMPTY_CANDIDATES", "the candidate array is empty", field="ids")
    ids = columns["ids"]
    if ids.dtype.kind not in "iu":
        raise SamplingError("SMP_TOKEN_ID", f"'ids' must be integers, got {ids.dtype}", field="ids")
    if ids.dtype != np.int32:
        bad = np.nonzero((ids < INT32_MIN) | (ids > INT32_MAX))[0]
        if bad.size:
            raise SamplingError(
                "SMP_TOKEN_ID", "token id outside the int32 range", field="ids", index=int(bad[0])
            )
    for name in ("logits", "p"):
        if columns[name].dtype.kind not in "fiu":
            raise SamplingError(
                "SMP_ARRAY_SHAPE",
                f"'{name}' must be numeric, got {columns[name].dtype}",
                field=name,
            )
    logits = columns["logits"].astype(np.float32, copy=copy)
    nan = np.nonzero(np.isnan(logits))[0]
    if nan.size:
        raise SamplingError(
            "SMP_NAN_LOGIT", "a candidate logit is NaN", field="logits", index=int(nan[0])
        )
    selected = cur.selected
    if isinstance(selected, bool) or not isinstance(selected, int | np.integer):
        raise SamplingError("SMP_SELECTED_RANGE", "'selected' must be an integer", field="selected")
    if not -1 <= int(selected) < n:
        raise SamplingError(
            "SMP_SELECTED_RANGE",
            f"'selected' = {selected} is outside [-1, {n})",
            field="selected",
            index=int(selected),
        )
    return TokenDataArray(
        ids.astype(np.int32, copy=copy),
        logits,
        columns["p"].astype(np.float32, copy=copy),
        int(selected),
        bool(cur.sorted),
    )
