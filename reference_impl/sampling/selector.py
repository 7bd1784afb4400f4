"""EMEL's token selector: pick one candidate by argmax or by a categorical draw whose uniform
number is passed in by the caller (EMEL injects randomness through the event payload).

Source: stateforward/emel.cpp ``src/emel/sampler/token_selector`` as summarised in the
project's research notes (emel.md §2.7); EMEL lists it as not yet validated against
llama.cpp, so these rules are EMEL's, not llama.cpp's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from reference_impl.errors import SamplingError
from reference_impl.spec_links import implements

POLICIES = ("argmax", "categorical")


@implements("SMP-070", "SMP-071", "SMP-072")
def select_token(
    ids: Sequence[int] | np.ndarray,
    scores: Sequence[float] | np.ndarray,
    policy: str,
    random_01: float | None = None,
) -> int:
    """Return the chosen token id.

    * ``argmax``: the first index holding the maximum score (strict ``>``);
    * ``categorical``: weights ``exp(s_i - max)``, target ``random_01 * sum``; the first
      index whose running sum is ``>= target``, else the last candidate.

    Errors: ``SMP_ARRAY_SHAPE`` (ids/scores not 1-D or of different lengths),
    ``SMP_EMPTY_CANDIDATES`` (no candidate), ``SMP_POLICY`` (unknown policy),
    ``SMP_RANDOM_RANGE`` (categorical without ``random_01`` in [0, 1)), ``SMP_NO_MASS``
    (the weights do not sum to a positive number, e.g. every score is -inf).
    """
    id_arr, score_arr = np.asarray(ids), np.asarray(scores, dtype=np.float64)
    if id_arr.ndim != 1 or score_arr.ndim != 1 or id_arr.shape != score_arr.shape:
        raise SamplingError(
            "SMP_ARRAY_SHAPE",
            f"ids {id_arr.shape} and scores {score_arr.shape} must be 1-D of equal length",
            field="scores",
        )
    if id_arr.shape[0] == 0:
        raise SamplingError("SMP_EMPTY_CANDIDATES", "no candidates to select from", field="ids")
    if policy not in POLICIES:
        raise SamplingError(
            "SMP_POLICY", f"unknown policy {policy!r}; use one of {POLICIES}", field="policy"
        )
    if policy == "argmax":
        return int(id_arr[int(np.argmax(score_arr))])
    if (
        random_01 is None
        or isinstance(random_01, bool)
        or not isinstance(random_01, int | float | np.floating)
        or not 0.0 <= float(random_01) < 1.0
    ):
        raise SamplingError(
            "SMP_RANDOM_RANGE", f"random_01 must be in [0, 1), got {random_01!r}", field="random_01"
        )
    with np.errstate(invalid="ignore", over="ignore"):
        weights = np.exp(score_arr - np.max(score_arr))
        running = np.cumsum(weights)
    total = float(running[-1])
    if not (total > 0.0 and math.isfinite(total)):
        raise SamplingError("SMP_NO_MASS", "the candidate weights sum to no mass", field="scores")
    index = int(np.searchsorted(running, float(random_01) * total, side="left"))
    return int(id_arr[min(index, id_arr.shape[0] - 1)])


# A pipeline sampler rescores or permutes the candidates in place (ids and scores together) and
# returns False when it fails. The arrays have a fixed length: a sampler cannot truncate.
PipelineSampler = Callable[[np.ndarray, np.ndarray], bool]


@implements("SMP-085")
def sample_pipeline(
    logits: Sequence[float] | np.ndarray, samplers: Sequence[PipelineSampler]
) -> int:
    """EMEL's sampler pipeline: candidates ``ids = 0..n-1`` with the raw logits as scores (no
    max-normalization), each sampler applied in order, then argmax (the first maximum).

    Errors: ``SMP_ARRAY_SHAPE`` (logits not 1-D), ``SMP_EMPTY_CANDIDATES`` (no logits),
    ``SMP_SAMPLER_FAILED`` (a sampler that is not callable or returns False; ``index`` is its
    position, and no later sampler runs).
    """
    row = np.asarray(logits)
    if row.ndim != 1:
        raise SamplingError(
            "SMP_ARRAY_SHAPE", f"logits must be 1-D, got {row.shape}", field="logits"
        )
    if row.shape[0] == 0:
        raise SamplingError(
            "SMP_EMPTY_CANDIDATES", "no logits to build candidates from", field="logits"
        )
    ids = np.arange(row.shape[0], dtype=np.int32)
    scores = row.astype(np.float32, copy=True)
    for k, fn in enumerate(samplers):
        if not callable(fn) or fn(ids, scores) is False:
            raise SamplingError(
                "SMP_SAMPLER_FAILED", f"pipeline sampler {k} failed", field="samplers", index=k
            )
    return select_token(ids, scores, "argmax")
