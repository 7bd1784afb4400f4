"""``sampling.samplers`` over transformers' logits processors.

A chain (the JSON-able description of :mod:`reference_impl.sampling.chainspec`) is built from
transformers' own pieces, the ones ``generate()`` puts together:

=============  ===============================================================================
entry          transformers
=============  ===============================================================================
greedy         ``torch.argmax`` over the scores (``generate``'s greedy step)
dist           ``softmax`` then ``torch.multinomial`` with a ``torch.Generator`` seeded with
               ``seed`` (``generate``'s sampling step); not llama.cpp's mt19937 stream
top_k          ``TopKLogitsWarper``
top_p          ``TopPLogitsWarper`` (``min_keep`` -> ``min_tokens_to_keep``, at least 1)
min_p          ``MinPLogitsWarper``
typical        ``TypicalLogitsWarper``
temp           ``TemperatureLogitsWarper``; ``temp_ext`` only without a dynamic range
penalties      ``RepetitionPenaltyLogitsProcessor`` over the last ``last_n`` accepted tokens;
               transformers has no frequency / presence penalties
logit_bias     ``SequenceBiasLogitsProcessor`` with one-token sequences
top_n_sigma,   no transformers counterpart: accepted disabled (a no-op), refused enabled with
dry, xtc       ``SMP_UNSUPPORTED``
=============  ===============================================================================

A value transformers refuses (e.g. ``temp`` 0, ``min_p`` above 1, ``typical`` 0) is refused
when the chain is built: :class:`~reference_impl.errors.SamplingError` ``SMP_PARAM`` carrying
transformers' message. The llama.cpp "disabled" values (``top_k`` <= 0, ``top_p`` /
``typical`` >= 1, ``min_p`` <= 0, ``temp`` 1, ``last_n`` 0) make a no-op, as in llama.cpp.

What the adapter supplies is the candidate array of llama.cpp's protocol, which transformers
does not have (its processors map a ``[batch, vocab]`` score tensor to a masked one): the
processors run over the array's logits in array order, with NaN as their ``filter_value`` so
that the rows they drop are known; the survivors are laid out like llama.cpp lays them out
(``top_k`` / ``top_p``: sorted by logit, descending; ``typical``: by typicality; ``min_p``:
in place, or sorted when the array was sorted or fewer than ``min_keep`` rows pass;
``penalties``, ``logit_bias``, ``temp``: in place), and the probability column is
``torch.softmax`` of the logits where llama.cpp's sampler writes one (``top_p``, ``typical``,
``dist``).
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from reference_impl.errors import SamplingError
from reference_impl.sampling import candidates as candidate_rules
from reference_impl.sampling import chainspec
from reference_impl.sampling.chainspec import SamplerSpec
from reference_impl.sampling.token_data import TokenDataArray, validate

DEFAULT_SEED = chainspec.LLAMA_DEFAULT_SEED
_NO_INPUT = torch.zeros((1, 0), dtype=torch.long)


def _processors() -> Any:
    from transformers import generation

    return generation


def _softmax(logits: np.ndarray) -> np.ndarray:
    out: np.ndarray = torch.softmax(torch.from_numpy(logits.astype(np.float32)), dim=-1).numpy()
    return out


def _run(proc: Any, cur: TokenDataArray, input_ids: torch.Tensor = _NO_INPUT) -> np.ndarray:
    """A transformers processor over the array's logits (one row, array order)."""
    scores = torch.from_numpy(cur.logits.astype(np.float32).copy())[None, :]
    with torch.no_grad():
        out: np.ndarray = proc(input_ids, scores)[0].numpy().copy()
    return out


def _build(name: str, field: str, index: int, factory: Any, **kwargs: Any) -> Any:
    try:
        return factory(**kwargs)
    except ValueError as exc:  # transformers' own parameter checks
        raise SamplingError(
            "SMP_PARAM", f"transformers refuses {name}: {exc}", field=field, index=index
        ) from exc


class Member:
    """One chain entry: ``apply`` maps a candidate array to the next one."""

    name = "?"

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        return cur

    def accept(self, token: int) -> None:
        return None

    def reset(self) -> None:
        return None


class NoOp(Member):
    def __init__(self, name: str) -> None:
        self.name = name


class Greedy(Member):
    name = "greedy"

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        out = cur.copy()
        if out.size:
            out.selected = int(torch.argmax(torch.from_numpy(out.logits)).item())
        return out


class Dist(Member):
    name = "dist"

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.generator = torch.Generator()
        self.reset()

    def reset(self) -> None:
        seed = secrets.randbits(32) if self.seed == DEFAULT_SEED else self.seed
        self.generator.manual_seed(seed)

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        out = cur.copy()
        if not out.size:
            return out
        probs = torch.softmax(torch.from_numpy(out.logits.astype(np.float32)), dim=-1)
        out.p = probs.numpy().copy()
        out.selected = int(torch.multinomial(probs, 1, generator=self.generator).item())
        return out

    def __deepcopy__(self, memo: dict[int, Any]) -> Dist:
        twin = Dist.__new__(Dist)
        twin.seed = self.seed
        twin.generator = torch.Generator()
        twin.generator.set_state(self.generator.get_state())
        return twin


class Filter(Member):
    """A truncating processor (``filter_value`` NaN marks the rows it drops)."""

    def __init__(self, name: str, proc: Any, layout: str, softmax: bool, probe: Any = None) -> None:
        self.name = name
        self.proc = proc
        self.probe = probe  # min_p: the same filter keeping at least 1 (not min_keep) rows
        self.layout = layout  # "sorted", "typical" or "in_place"
        self.softmax = softmax  # llama.cpp's sampler writes the probability column

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        if not cur.size:
            return cur.copy()
        kept = ~np.isnan(_run(self.proc, cur))
        if self.layout == "in_place":
            # llama.cpp filters in place unless the array is sorted or fewer than min_keep
            # rows pass; then it keeps the best rows, sorted
            passing = int((~np.isnan(_run(self.probe, cur))).sum()) if self.probe else 0
            if not cur.sorted and passing >= int(kept.sum()):
                return cur.take(np.flatnonzero(kept), sorted=cur.sorted)
            idx = np.flatnonzero(kept)
            return cur.take(idx[np.argsort(-cur.logits[idx], kind="stable")], sorted=True)
        p = _softmax(cur.logits) if self.softmax else cur.p
        base = TokenDataArray(cur.ids, cur.logits, p, cur.selected, cur.sorted)
        idx = np.flatnonzero(kept)
        if self.layout == "sorted":
            order = idx[np.argsort(-cur.logits[idx], kind="stable")]
            return base.take(order, sorted=True)
        # typical: most typical first (|-log p - entropy| ascending), as llama.cpp lays it out
        with np.errstate(divide="ignore", invalid="ignore"):
            logp = np.log(p.astype(np.float64))
            entropy = -np.nansum(p * logp)
            score = np.abs(-logp - entropy)
        order = idx[np.argsort(score[idx], kind="stable")]
        return base.take(order, sorted=False)


class Rewrite(Member):
    """A processor that rewrites logits in place (temperature)."""

    def __init__(self, name: str, proc: Any) -> None:
        self.name = name
        self.proc = proc

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        # dividing by a positive temperature keeps the order
        return cur.with_logits(_run(self.proc, cur).astype(np.float32))


class Penalties(Member):
    name = "penalties"

    def __init__(self, last_n: int, proc: Any) -> None:
        self.last_n = last_n
        self.proc = proc
        self.history: list[int] = []

    def accept(self, token: int) -> None:
        self.history.append(int(token))
        del self.history[: -self.last_n]

    def reset(self) -> None:
        self.history.clear()

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        seen = np.flatnonzero(np.isin(cur.ids, np.asarray(self.history, dtype=np.int64)))
        if not seen.size:
            return cur.copy()
        # the processor indexes scores by token id; the array's ids become its row numbers
        ids = torch.from_numpy(seen.astype(np.int64))[None, :]
        return cur.with_logits(_run(self.proc, cur, ids).astype(np.float32), sorted=False)


class LogitBias(Member):
    name = "logit_bias"

    def __init__(self, biases: list[tuple[int, float]]) -> None:
        self.biases = list(biases)

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        # the whole list goes to one processor, which decides about a token listed twice
        rows = [
            [[int(r)], float(bias)]
            for token, bias in self.biases
            for r in np.flatnonzero(cur.ids == token)
        ]
        if not rows:
            return cur.copy()
        proc = _processors().SequenceBiasLogitsProcessor(sequence_bias=rows)
        return cur.with_logits(_run(proc, cur).astype(np.float32))


def _member(spec: SamplerSpec, index: int) -> Member:
    g = _processors()
    p = spec.params
    where = f"spec[{index}]"
    nan = float("nan")
    match spec.name:
        case "greedy":
            return Greedy()
        case "dist":
            return Dist(p["seed"])
        case "top_k":
            if p["k"] <= 0:
                return NoOp("top_k")
            proc = _build("top_k", f"{where}.k", index, g.TopKLogitsWarper, top_k=p["k"])
            proc.filter_value = nan
            return Filter("top_k", proc, "sorted", softmax=False)
        case "top_p" | "min_p" | "typical":
            value, keep = p["p"], max(1, p["min_keep"])
            if (spec.name == "min_p" and value <= 0.0) or (spec.name != "min_p" and value >= 1.0):
                return NoOp(spec.name)
            factory, kwargs, layout = {
                "top_p": (g.TopPLogitsWarper, {"top_p": value}, "sorted"),
                "min_p": (g.MinPLogitsWarper, {"min_p": value}, "in_place"),
                "typical": (g.TypicalLogitsWarper, {"mass": value}, "typical"),
            }[spec.name]
            proc = _build(
                spec.name,
                f"{where}.p",
                index,
                factory,
                min_tokens_to_keep=keep,
                filter_value=nan,
                **kwargs,
            )
            probe = None
            if spec.name == "min_p":
                probe = factory(min_tokens_to_keep=1, filter_value=nan, **kwargs)
            return Filter(spec.name, proc, layout, softmax=spec.name != "min_p", probe=probe)
        case "temp" | "temp_ext":
            if spec.name == "temp_ext" and p["delta"] > 0.0:
                raise SamplingError(
                    "SMP_UNSUPPORTED",
                    "transformers has no dynamic temperature (temp_ext with delta > 0)",
                    field=f"{where}.delta",
                    index=index,
                )
            if np.float32(p["t"]) == 1.0:
                return NoOp(spec.name)
            proc = _build(
                spec.name, f"{where}.t", index, g.TemperatureLogitsWarper, temperature=p["t"]
            )
            return Rewrite(spec.name, proc)
        case "penalties":
            # llama.cpp's disabled forms first: no window, or nothing to penalise
            if p["last_n"] <= 0 or (
                np.float32(p["repeat"]) == 1.0 and p["freq"] == 0.0 and p["present"] == 0.0
            ):
                return NoOp("penalties")
            if p["freq"] != 0.0 or p["present"] != 0.0:
                raise SamplingError(
                    "SMP_UNSUPPORTED",
                    "transformers has no frequency or presence penalty",
                    field=f"{where}.freq" if p["freq"] != 0.0 else f"{where}.present",
                    index=index,
                )
            proc = _build(
                "penalties",
                f"{where}.repeat",
                index,
                g.RepetitionPenaltyLogitsProcessor,
                penalty=p["repeat"],
            )
            return Penalties(p["last_n"], proc)
        case "logit_bias":
            return LogitBias(p["biases"])
        case "top_n_sigma":
            if p["n"] <= 0.0:
                return NoOp("top_n_sigma")
            raise SamplingError(
                "SMP_UNSUPPORTED",
                "transformers has no top-n-sigma sampler",
                field=f"{where}.n",
                index=index,
            )
        case "dry" | "xtc":  # the parser only lets them through disabled
            return NoOp(spec.name)
    raise SamplingError("SMP_UNKNOWN_SAMPLER", f"unknown sampler {spec.name!r}", field=where)


class HFChain:
    """A chain of :class:`Member` objects (``llama_sampler_chain`` semantics)."""

    def __init__(self, members: list[Member]) -> None:
        self.members = members

    def apply(self, cur: TokenDataArray) -> TokenDataArray:
        for m in self.members:
            cur = m.apply(cur)
        return cur

    def accept(self, token: int) -> None:
        for m in self.members:
            m.accept(token)

    def reset(self) -> None:
        for m in self.members:
            m.reset()

    def clone(self) -> HFChain:
        return copy.deepcopy(self)

    def __repr__(self) -> str:
        return f"<transformers chain {[m.name for m in self.members]}>"


def _chain(specs: list[SamplerSpec]) -> HFChain:
    return HFChain([_member(s, i) for i, s in enumerate(specs)])


def _default_specs(prm: Mapping[str, Any]) -> list[SamplerSpec]:
    """llama.cpp common's default chain from its parameters: optional logit biases, the
    samplers in the configured order, then dist."""
    keep = prm["min_keep"]
    by_kind = {
        "penalties": ("penalties", {
            "last_n": prm["penalty_last_n"],
            "repeat": prm["penalty_repeat"],
            "freq": prm["penalty_freq"],
            "present": prm["penalty_present"],
        }),
        "dry": ("dry", {"multiplier": prm["dry_multiplier"]}),
        "top_n_sigma": ("top_n_sigma", {"n": prm["top_n_sigma"]}),
        "top_k": ("top_k", {"k": prm["top_k"]}),
        "typ_p": ("typical", {"p": prm["typ_p"], "min_keep": keep}),
        "top_p": ("top_p", {"p": prm["top_p"], "min_keep": keep}),
        "min_p": ("min_p", {"p": prm["min_p"], "min_keep": keep}),
        "xtc": ("xtc", {"p": prm["xtc_probability"], "t": prm["xtc_threshold"]}),
        "temperature": ("temp_ext", {
            "t": prm["temp"],
            "delta": prm["dynatemp_range"],
            "exponent": prm["dynatemp_exponent"],
        }),
    }  # fmt: skip
    if np.float32(prm["dry_multiplier"]) != 0.0:
        raise SamplingError(
            "SMP_UNSUPPORTED", "DRY is not available", field="params.dry_multiplier"
        )
    if np.float32(prm["xtc_probability"]) > 0.0 and np.float32(prm["xtc_threshold"]) <= 0.5:
        raise SamplingError(
            "SMP_UNSUPPORTED", "XTC is not available", field="params.xtc_probability"
        )
    specs = []
    if prm["logit_bias"]:
        specs.append(SamplerSpec("logit_bias", {"biases": prm["logit_bias"]}))
    specs += [SamplerSpec(*by_kind[kind]) for kind in prm["samplers"]]
    specs.append(SamplerSpec("dist", {"seed": prm["seed"]}))
    return specs


class TransformersSampling:
    """The ``sampling.samplers`` methods (handles are :class:`HFChain` objects)."""

    def sampler_chain_init(self, spec: Any) -> HFChain:
        return _chain(chainspec.parse_chain(spec))

    def sampler_chain_init_default(self, params: Mapping[str, Any] | None = None) -> HFChain:
        return _chain(_default_specs(chainspec.parse_common_params(params)))

    def sampler_apply(self, handle: HFChain, cur: TokenDataArray) -> TokenDataArray:
        return handle.apply(validate(cur, copy=True))

    def sampler_accept(self, handle: HFChain, token: int) -> None:
        handle.accept(int(token))

    def sampler_reset(self, handle: HFChain) -> None:
        handle.reset()

    def sampler_clone(self, handle: HFChain) -> HFChain:
        return handle.clone()

    def sampler_sample(self, handle: HFChain, logits: np.ndarray) -> int:
        """Full-vocabulary candidates from ``logits`` (the suite's candidate builder), apply,
        check the selection, accept. Without a selection the chain's state is put back and
        ``SMP_NO_SELECTION`` raised."""
        cur = candidate_rules.build_candidates(logits)
        saved = handle.clone()
        out = handle.apply(cur)
        if not 0 <= out.selected < out.size:
            handle.members = saved.members
            raise SamplingError(
                "SMP_NO_SELECTION",
                f"the chain selected index {out.selected} of {out.size} candidates",
                field="selected",
                index=out.selected,
            )
        token = int(out.ids[out.selected])
        handle.accept(token)
        return token

    def sampler_free(self, handle: HFChain) -> None:
        return None
