"""Protocol of the sampling area (spec/sampling.md): llama.cpp's sampler chain, backend sampling
(chains attached to sequences of a decode context), the candidate builder and EMEL's token
selector.

A chain is built from a JSON-able description, a list of ``[name, {params}]`` entries applied in
order (format and parameter table: :mod:`reference_impl.sampling.chainspec`; names follow
``llama_sampler_init_*``). Each sampler is its own capability (``sampling.top_k``...), so an
engine without one is skipped where a test needs it, and a hypothesis-drawn chain draws only the
samplers the target has. ``TokenDataArray`` is :class:`reference_impl.sampling.TokenDataArray`
(numpy columns ``ids``, ``logits``, ``p`` plus ``selected`` and ``sorted``). Invalid input
raises an exception with the ``SMP_*`` code of spec/sampling.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from conformance.protocol import capability, role
from reference_impl.sampling.chainspec import SAMPLER_PARAMS
from reference_impl.sampling.token_data import TokenDataArray


@role("chain")
class ChainHandle(Protocol):
    """An opaque chain (``llama_sampler *``)."""


class Chain(Protocol):
    """``llama_sampler_chain_*``: build, apply, accept, reset, clone, sample, free."""

    def sampler_chain_init(self, spec: Any) -> ChainHandle: ...

    def sampler_apply(self, handle: Any, cur: TokenDataArray) -> TokenDataArray:
        """``llama_sampler_apply`` on a copy of ``cur`` (never modified); the result array."""
        ...

    def sampler_accept(self, handle: Any, token: int) -> None: ...
    def sampler_reset(self, handle: Any) -> None: ...
    def sampler_clone(self, handle: Any) -> ChainHandle: ...

    def sampler_sample(self, handle: Any, logits: np.ndarray) -> int:
        """``llama_sampler_sample`` of one logits row: full-vocabulary candidates, apply,
        accept the selected token, return its id."""
        ...

    def sampler_free(self, handle: Any) -> None: ...


class DefaultChain(Chain, Protocol):
    def sampler_chain_init_default(self, params: Mapping[str, Any] | None = None) -> ChainHandle:
        """The chain llama.cpp's common library builds (``common_sampler_init``) from
        ``common_params_sampling`` overrides such as ``{"seed": 42, "temp": 0.7}``."""
        ...


class DryStrings(Chain, Protocol):
    def sampler_chain_init_vocab(self, spec: Any, vocab: Any) -> ChainHandle:
        """A chain whose DRY entries may give ``breaker_strings``, turned into token sequences
        with ``vocab`` (a handle of the tokenizer area's ``load_vocab``), as
        ``llama_sampler_init_dry`` does with a model's vocabulary."""
        ...


class InputChecks(Chain, Protocol):
    """A malformed chain description (``SMP_SPEC_FORMAT``, ``SMP_UNKNOWN_SAMPLER``,
    ``SMP_PARAM``, ``SMP_UNSUPPORTED``, with ``field`` and ``index``) and a malformed candidate
    array given to ``sampler_apply`` (``SMP_ARRAY_SHAPE``...) are refused with the spec's codes,
    before anything runs. The format is this suite's, so only an engine (or adapter) that
    implements these rules itself should claim it."""


class Sampler(Protocol):
    """A sampler a chain description may name (no methods of its own)."""


class Backend(Protocol):
    """Backend sampling (``llama_set_sampler``): a chain attached to a sequence of a decode
    context runs as part of each decode, in the compute graph as far as the engine can and on
    the CPU for the rest. ``ctx`` is a context of the decoder area (``new_context``)."""

    def backend_set_sampler(self, ctx: Any, seq_id: int, spec: Any) -> None:
        """Attach a fresh chain built from ``spec`` to ``seq_id`` (``None`` detaches it); a
        chain the engine refuses raises."""
        ...

    def backend_sample(self, ctx: Any, seq_id: int, i: int) -> int:
        """The token the chain of ``seq_id`` gives for batch token ``i`` of the last decode:
        ``llama_sampler_sample(chain, ctx, i)``, i.e. the token the graph sampled, or the
        chain finished on the CPU from what the graph kept."""
        ...


class Candidates(Protocol):
    def build_candidates(self, logits: np.ndarray) -> TokenDataArray:
        """The candidate array ``llama_sampler_sample`` builds from a logits row."""
        ...


class Selector(Protocol):
    def select_token(
        self,
        ids: Sequence[int] | np.ndarray,
        scores: Sequence[float] | np.ndarray,
        policy: str,
        random_01: float | None = None,
    ) -> int:
        """``policy``: ``argmax`` or ``categorical``."""
        ...

    def normalize_scores(self, cur: TokenDataArray) -> TokenDataArray: ...


class Pipeline(Protocol):
    def sample_pipeline(self, logits: Sequence[float] | np.ndarray, samplers: Sequence[Any]) -> int:
        """EMEL's pipeline: candidates from the raw logits, each sampler
        ``fn(ids, scores) -> bool`` applied in order (in place, fixed length), then argmax."""
        ...


SAMPLER_NAMES: tuple[str, ...] = tuple(SAMPLER_PARAMS)
# dry (breakers as token sequences), xtc, mirostat, mirostat_v2 and adaptive_p included
SAMPLERS: tuple[str, ...] = tuple(f"sampling.{name}" for name in SAMPLER_NAMES)

CAPABILITIES = (
    capability("sampling.chain", Chain, "build and drive sampler chains"),
    capability("sampling.default_chain", DefaultChain, "common_sampler_init's chain"),
    capability("sampling.input_checks", InputChecks, "coded errors for malformed input"),
    capability("sampling.dry_strings", DryStrings, "DRY breaker strings over a vocabulary"),
    capability("sampling.candidates", Candidates, "the candidate builder"),
    capability("sampling.selector", Selector, "EMEL's token selector"),
    capability("sampling.pipeline", Pipeline, "EMEL's sampler pipeline"),
    capability("sampling.backend", Backend, "chains attached to sequences, run by decode"),
    *(
        capability(cap, Sampler, f"the {name} sampler in a chain description")
        for name, cap in zip(SAMPLER_NAMES, SAMPLERS)
    ),
)
IMPLIES = {
    **{cap: ("sampling.chain",) for cap in SAMPLERS},
    "sampling.dry_strings": ("sampling.chain", "sampling.dry"),
    "sampling.backend": ("sampling.chain", "decoder.logits"),
}


def samplers_named(spec: Any) -> set[str]:
    """The sampler capabilities a chain description names (malformed entries are the
    target's to reject, so they need nothing)."""
    needed: set[str] = set()
    if isinstance(spec, (list, tuple)):
        for entry in spec:
            name = entry[0] if isinstance(entry, (list, tuple)) and entry else entry
            if isinstance(name, str) and name in SAMPLER_PARAMS:
                needed.add(f"sampling.{name}")
    return needed


ARGUMENT_RULES = {
    "sampler_chain_init": lambda args, kwargs: samplers_named(
        args[0] if args else kwargs.get("spec")
    ),
    "sampler_chain_init_vocab": lambda args, kwargs: samplers_named(
        args[0] if args else kwargs.get("spec")
    ),
    "set_sampler": lambda args, kwargs: samplers_named(
        args[1] if len(args) > 1 else kwargs.get("chain")
    ),
    "backend_set_sampler": lambda args, kwargs: samplers_named(
        args[2] if len(args) > 2 else kwargs.get("spec")
    ),
}
