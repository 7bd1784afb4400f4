"""Samplers with llama.cpp's semantics: candidate builder, samplers, chain, token selector.

* :mod:`token_data` -- ``TokenDataArray`` (llama_token_data_array) and its validation;
* :mod:`candidates` -- full-vocabulary candidates from a logits row;
* :mod:`truncation` / :mod:`scaling` / :mod:`selection` -- the pure sampler rules (XTC's cut
  in :mod:`truncation`);
* :mod:`dry` -- DRY's repeat detection, penalty and breaker strings over a vocabulary;
* :mod:`feedback` -- Mirostat v1/v2 and adaptive-p (selection with state carried forward);
* :mod:`numerics` -- C-rounding float helpers (glibc ``expf``), softmax and sorting;
* :mod:`mt19937` -- std::mt19937, libstdc++'s uniform double/float and discrete_distribution;
* :mod:`samplers` -- stateful samplers and the ``init_*`` constructors (empty-sampler rules);
* :mod:`chainspec` / :mod:`chain` -- the JSON-able chain description, ``Chain`` and the
  default chain of llama.cpp's common library;
* :mod:`selector` -- EMEL's token selector (argmax / categorical with injected randomness).
"""

from reference_impl.sampling.candidates import build_candidates, normalize_scores
from reference_impl.sampling.chain import Chain, build_chain, build_common_chain, common_chain_spec
from reference_impl.sampling.chainspec import SamplerSpec, parse_chain
from reference_impl.sampling.selector import select_token
from reference_impl.sampling.token_data import TokenDataArray

__all__ = [
    "Chain",
    "SamplerSpec",
    "TokenDataArray",
    "build_candidates",
    "build_chain",
    "build_common_chain",
    "common_chain_spec",
    "normalize_scores",
    "parse_chain",
    "select_token",
]
