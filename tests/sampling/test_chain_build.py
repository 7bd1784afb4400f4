"""Chain construction details that the adapter surface does not expose."""

from __future__ import annotations

import pytest

from reference_impl.errors import SamplingError
from reference_impl.sampling import chain, chainspec, samplers


@pytest.mark.parametrize(
    ("sampler", "name"),
    [
        (samplers.init_top_k(0), "?top-k"),
        (samplers.init_top_p(1.0), "?top-p"),
        (samplers.init_min_p(0.0), "?min-p"),
        (samplers.init_typical(1.0), "?typical"),
        (samplers.init_temp(1.0), "?temp"),
        (samplers.init_temp_ext(1.0, 0.0, 1.0), "?temp-ext"),
        (samplers.init_penalties(-1, 2.0), "?penalties"),
        (samplers.init_penalties(64, 1.0, 0.0, 0.0), "?penalties"),
        (samplers.init_top_n_sigma(-1.0), "?top-n-sigma"),
        (samplers.init_logit_bias([]), "?logit-bias"),
        (samplers.init_top_k(40), "top-k"),
        (samplers.init_temp_ext(1.0, 0.5, 1.0), "temp-ext"),
    ],
)
def test_constructor_names(sampler: samplers.Sampler, name: str) -> None:
    assert sampler.name == name


def test_default_chain_members() -> None:
    built = chain.build_common_chain({"seed": 3})
    assert [s.name for s in built.samplers] == [
        "?penalties", "?dry", "?top-n-sigma", "top-k", "?typical", "top-p", "min-p", "?xtc",
        "temp-ext", "dist",
    ]  # fmt: skip
    with_bias = chain.common_chain_spec({"logit_bias": [[5, -1.0]]})
    assert with_bias[0].name == "logit_bias" and with_bias[-1].params == {"seed": 0xFFFFFFFF}


def test_parse_fills_defaults() -> None:
    spec = chainspec.parse_chain([["penalties", {"last_n": 8}], "greedy", ("top_p", {"p": 0.5})])
    assert spec[0].params == {"last_n": 8, "repeat": 1.0, "freq": 0.0, "present": 0.0}
    assert spec[1] == chainspec.SamplerSpec("greedy", {})
    assert spec[2].params == {"p": 0.5, "min_keep": 0}


def test_sample_restores_state_on_failure() -> None:
    c = chain.build_chain([["dist", {"seed": 1}], ["top_k", {"k": 1}]])
    import numpy as np

    logits = np.zeros(100, np.float32)
    before = c.clone()
    with pytest.raises(SamplingError):
        c.sample(logits)
    dist_now, dist_before = c.samplers[0], before.samplers[0]
    assert isinstance(dist_now, samplers.Dist) and isinstance(dist_before, samplers.Dist)
    assert dist_now._rng.outputs(3) == dist_before._rng.outputs(3)
