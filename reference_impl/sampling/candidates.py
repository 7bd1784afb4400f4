"""The candidate builder: one logits row -> the full-vocabulary candidate array.

``llama_sampler_sample`` (llama.cpp src/llama-sampler.cpp, 82bb485) builds
``{id = i, logit = logits[i], p = 0}`` for every token of the vocabulary, in id order, with
``selected = -1`` and ``sorted = false``, before applying the chain. EMEL's
candidate_builder does the same and can additionally shift the scores so the maximum is 0.
"""

from __future__ import annotations

import numpy as np

from reference_impl.errors import SamplingError
from reference_impl.sampling.token_data import TokenDataArray
from reference_impl.spec_links import implements

F32 = np.float32


@implements("SMP-001", "SMP-002", "SMP-013")
def build_candidates(logits: np.ndarray) -> TokenDataArray:
    """Candidates for every token id of a logits row (float32 [n_vocab], n_vocab >= 1).

    Rejects a row that is not 1-D or is empty (``SMP_LOGITS_SHAPE``) and a NaN logit
    (``SMP_NAN_LOGIT`` with its index). The row is copied, never referenced.
    """
    row = np.asarray(logits)
    if row.ndim != 1 or row.shape[0] == 0:
        raise SamplingError(
            "SMP_LOGITS_SHAPE",
            f"a logits row must be 1-D and non-empty, got shape {row.shape}",
            field="logits",
        )
    if row.dtype.kind not in "fiu":
        raise SamplingError(
            "SMP_LOGITS_SHAPE", f"logits must be numeric, got {row.dtype}", field="logits"
        )
    row = row.astype(F32, copy=True)
    nan = np.nonzero(np.isnan(row))[0]
    if nan.size:
        raise SamplingError("SMP_NAN_LOGIT", "a logit is NaN", field="logits", index=int(nan[0]))
    n = row.shape[0]
    return TokenDataArray(np.arange(n, dtype=np.int32), row, np.zeros(n, F32), -1, False)


@implements("SMP-073")
def normalize_scores(cur: TokenDataArray) -> TokenDataArray:
    """EMEL candidate_builder ``normalize``: subtract the maximum logit from every logit, so
    the maximum becomes 0 (order, ids and p unchanged). A row whose maximum is not finite
    (all -inf, or a +inf) is returned unchanged rather than turned into NaN."""
    top = np.max(cur.logits)
    if not np.isfinite(top):
        return cur
    return cur.with_logits((cur.logits - top).astype(F32))
