"""Mutants of the sampling area: the reference with one deliberate sampler defect each."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

from conformance.mutants import Mutant, replace
from reference_impl.sampling import chain as chain_mod
from reference_impl.sampling import mt19937, samplers
from reference_impl.sampling.token_data import TokenDataArray

F32 = np.float32


def _patch(module: str, attr: str, make: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A mutant ``apply`` that replaces ``module.attr`` by ``make(original)``."""

    def apply(target: Any) -> Any:
        import importlib

        original = getattr(importlib.import_module(module), attr)
        replace(module, attr, make(original))
        return target

    return apply


def _temperature_before_top_k(_: Any) -> tuple[str, ...]:
    order = [k for k in chain_mod.COMMON_ORDER if k != "temperature"]
    order.insert(order.index("top_k"), "temperature")
    return tuple(order)


def _top_p_strict(_: Any) -> Callable[..., TokenDataArray]:
    def top_p(cur: TokenDataArray, p: float, min_keep: int) -> TokenDataArray:
        # the defect: a running sum equal to p is not enough (">" instead of ">=")
        if F32(p) >= 1.0:
            return cur
        from reference_impl.sampling import numerics

        cur = numerics.softmax(cur, do_sort=False)
        cur = cur.take(numerics.descending_order(cur.logits), sorted=True)
        running = numerics.cumsum_f32(cur.p)
        ok = np.nonzero((running > F32(p)) & (np.arange(1, cur.size + 1) >= min_keep))[0]
        keep = int(ok[0]) + 1 if ok.size else cur.size
        return cur.take(np.arange(keep), sorted=True)

    return top_p


def _penalise_everything(original: Callable[..., TokenDataArray]) -> Callable[..., TokenDataArray]:
    def penalties(
        cur: TokenDataArray, counts: Any, repeat: float, freq: float, present: float
    ) -> TokenDataArray:
        # the defect: every candidate is treated as seen once
        every = {int(t): max(1, int(counts.get(int(t), 0))) for t in cur.ids}
        return original(cur, every, repeat, freq, present)

    return penalties


def _greedy_last(_: Any) -> Callable[[TokenDataArray], TokenDataArray]:
    def greedy(cur: TokenDataArray) -> TokenDataArray:
        reversed_best = int(np.argmax(cur.logits[::-1]))
        return cur.with_selected(cur.size - 1 - reversed_best)  # the defect: last maximum

    return greedy


def _dist_unnormalised(original: Callable[..., TokenDataArray]) -> Callable[..., TokenDataArray]:
    def dist(cur: TokenDataArray, draw: Callable[[], float]) -> TokenDataArray:
        out = original(cur, draw)
        if out.size < 2:
            return out
        from reference_impl.sampling import numerics

        max_l = np.max(cur.logits)
        return out.with_p(numerics.expf(cur.logits - F32(max_l)))  # the defect: p not divided

    return dist


def _one_draw_canonical(_: Any) -> Callable[[mt19937.MT19937], float]:
    def uniform_01(rng: mt19937.MT19937) -> float:
        return rng.next_u32() / 2.0**32  # the defect: 32 random bits instead of two draws

    return uniform_01


def _unbounded_window(original: Callable[..., None]) -> Callable[..., None]:
    def accept(self: samplers.Penalties, token: int) -> None:
        self._counts[int(token)] += 1  # the defect: tokens never leave the window
        self._window.append(int(token))

    return accept


def _typical_ge(_: Any) -> Callable[..., TokenDataArray]:
    def typical(cur: TokenDataArray, p: float, min_keep: int) -> TokenDataArray:
        from reference_impl.sampling import numerics

        if F32(p) >= 1.0:
            return cur
        cur = numerics.softmax(cur, do_sort=True)
        log_p = numerics.logf(cur.p)
        entropy = numerics.sum_f32(-cur.p * log_p)
        order = np.argsort(np.abs(-log_p - entropy), kind="stable")
        running = numerics.cumsum_f32(cur.p[order])
        pos = np.arange(cur.size)
        ok = np.nonzero((running >= F32(p)) & ((min_keep == 0) | (pos >= min_keep - 1)))[0]
        keep = int(ok[0]) + 1 if ok.size else cur.size  # the defect: ">=" instead of ">"
        return cur.take(order[:keep], sorted=False)

    return typical


def _min_p_reorders(original: Callable[..., TokenDataArray]) -> Callable[..., TokenDataArray]:
    def min_p(cur: TokenDataArray, p: float, min_keep: int) -> TokenDataArray:
        out = original(cur, p, min_keep)
        order = np.argsort(-out.logits, kind="stable")
        return out.take(order, sorted=out.sorted)  # the defect: the filtered rows get sorted

    return min_p


def _top_n_sigma_needs_a_live_logit(
    original: Callable[..., TokenDataArray],
) -> Callable[..., TokenDataArray]:
    def top_n_sigma(cur: TokenDataArray, n: float) -> TokenDataArray:
        live = cur.logits[cur.logits != -np.inf]
        if F32(n) > 0.0 and cur.size > 1:
            # the defect: the maximum is taken over the live logits alone, with no case for
            # none (numpy's max of an empty array raises)
            np.max(live)
        return original(cur, n)

    return top_n_sigma


def _normalize_any_maximum(_: Any) -> Callable[[TokenDataArray], TokenDataArray]:
    def normalize_scores(cur: TokenDataArray) -> TokenDataArray:
        # the defect: a maximum of -inf or +inf is subtracted too, which leaves NaN logits
        with np.errstate(invalid="ignore"):
            return cur.with_logits((cur.logits - np.max(cur.logits)).astype(F32))

    return normalize_scores


def _temp_zero_last_max(original: Callable[..., TokenDataArray]) -> Callable[..., TokenDataArray]:
    def temp(cur: TokenDataArray, t: float) -> TokenDataArray:
        if F32(t) > 0.0 or cur.size == 0:
            return original(cur, t)
        best = cur.size - 1 - int(np.argmax(cur.logits[::-1]))  # the defect: last maximum
        out = np.full(cur.size, -np.inf, dtype=F32)
        out[best] = cur.logits[best]
        return cur.with_logits(out)

    return temp


def _accept_first_only(target: Any) -> Any:
    def accept(self: chain_mod.Chain, token: int) -> None:
        if self.samplers:  # the defect: only the first member hears about the token
            self.samplers[0].accept(token)

    chain_mod.Chain.accept = accept  # type: ignore[method-assign]
    return target


def _reset_keeps_stream(target: Any) -> Any:
    def reset(self: samplers.Dist) -> None:
        return None  # the defect: dist's reset does not reseed

    samplers.Dist.reset = reset  # type: ignore[method-assign]
    return target


def _mirostat_v2_reset_keeps_stream(target: Any) -> Any:
    def reset(self: samplers.MirostatV2) -> None:
        self.mu = F32(F32(2.0) * self.tau)  # the defect: mu restored, the stream not reseeded

    samplers.MirostatV2.reset = reset  # type: ignore[method-assign]
    return target


def _seeded_reset_replays_drawn_seed(target: Any) -> Any:
    def _reseed(self: samplers._Seeded) -> None:
        self._rng.seed(self.seed_cur)  # the defect: LLAMA_DEFAULT_SEED is not drawn again

    samplers._Seeded._reseed = _reseed  # type: ignore[method-assign]
    return target


def _float_draw_of_one_kept(_: Any) -> Callable[[mt19937.MT19937], np.float32]:
    def uniform_float_01(rng: mt19937.MT19937) -> np.float32:
        # the defect: an output that rounds to 2^32 gives 1, not the float below 1
        return F32(F32(rng.next_u32()) / F32(2.0**32))

    return uniform_float_01


def _dry_allowed_length_3(original: dict[str, Any]) -> dict[str, Any]:
    check, _ = original["dry_allowed_length"]
    return original | {"dry_allowed_length": (check, 3)}  # the defect: default 3, not 2


def _sample_without_accept(target: Any) -> Any:
    def sample(self: chain_mod.Chain, logits: np.ndarray) -> int:
        from reference_impl.sampling import candidates

        out = self.apply(candidates.build_candidates(logits))
        if not 0 <= out.selected < out.size:
            raise RuntimeError("no selection")
        return int(out.ids[out.selected])  # the defect: the token is not accepted

    chain_mod.Chain.sample = sample  # type: ignore[method-assign]
    return target


def _no_restore_on_failure(target: Any) -> Any:
    from reference_impl.errors import SamplingError
    from reference_impl.sampling import candidates

    def sample(self: chain_mod.Chain, logits: np.ndarray) -> int:
        out = self.apply(candidates.build_candidates(logits))
        if not 0 <= out.selected < out.size:  # the defect: the advanced stream is kept
            raise SamplingError("SMP_NO_SELECTION", "no selection", field="selected")
        token = int(out.ids[out.selected])
        self.accept(token)
        return token

    chain_mod.Chain.sample = sample  # type: ignore[method-assign]
    return target


def _apply_mutates_input(target: Any) -> Any:
    original = target.sampler_apply

    def sampler_apply(handle: Any, cur: TokenDataArray) -> TokenDataArray:
        out: TokenDataArray = original(handle, cur)
        cur.selected, cur.sorted = out.selected, out.sorted  # the defect: writes the input
        return out

    target.sampler_apply = sampler_apply
    return target


def _unbounded_window_mutant(target: Any) -> Any:
    samplers.Penalties.accept = _unbounded_window(samplers.Penalties.accept)  # type: ignore[method-assign]
    return target


def _dry_off_by_one(original: Callable[..., dict[int, int]]) -> Callable[..., dict[int, int]]:
    def extension_lengths(window: Any, cap: int, allowed_length: int) -> dict[int, int]:
        longest = original(window, cap, allowed_length)
        return {t: n + 1 for t, n in longest.items()}  # the defect: one token too long

    return extension_lengths


def _dry_breakers_ignored(_: Any) -> Callable[..., int]:
    def repeat_cap(window: Any, table: Any) -> int:
        return len(window)  # the defect: sequence breakers never cap a repeat

    return repeat_cap


def _dry_always_unsorted(original: Callable[..., TokenDataArray]) -> Callable[..., TokenDataArray]:
    def dry(cur: TokenDataArray, *args: Any) -> TokenDataArray:
        out = original(cur, *args)
        # the defect: a window too short to look at still marks the array unsorted
        return out if out is not cur else cur.with_logits(cur.logits.copy(), sorted=False)

    return dry


def _xtc_keeps_first(_: Any) -> Callable[..., TokenDataArray]:
    def xtc(cur: TokenDataArray, threshold: float, min_keep: int) -> TokenDataArray:
        from reference_impl.sampling import numerics

        cur = numerics.softmax(cur, do_sort=True)
        above = int(np.count_nonzero(np.cumprod(cur.p >= F32(threshold))))
        if above > 1 and cur.size - (above - 1) >= min_keep:
            # the defect: the most likely top choice stays instead of the least likely
            keep = np.concatenate([[0], np.arange(above, cur.size)]).astype(np.int64)
            return cur.take(keep, sorted=True)
        return cur

    return xtc


def _mirostat_frozen_mu(_: Any) -> Callable[..., np.float32]:
    def surprise_update(mu: Any, p: Any, tau: Any, eta: Any) -> np.float32:
        return F32(mu)  # the defect: mu never learns

    return surprise_update


def _mirostat_v1_m_rows(original: Callable[..., int]) -> Callable[..., int]:
    def mirostat_k(cur: TokenDataArray, n_vocab: int, mu: Any, m: int) -> int:
        return original(cur, n_vocab, mu, m + 1)  # the defect: fits one ratio too many

    return mirostat_k


def _int_of_2_pow_31_fits(original: Callable[[Any], int]) -> Callable[[Any], int]:
    def float_to_int(x: Any) -> int:
        # the defect: 2^31 is taken as a row count instead of overflowing int32
        return 2**31 if np.isfinite(x) and float(x) == 2.0**31 else original(x)

    return float_to_int


def _mirostat_v2_ignores_sorted_flag(original: Callable[..., Any]) -> Callable[..., Any]:
    def mirostat_v2(cur: TokenDataArray, tau: Any, eta: Any, mu: Any, pick: Any) -> Any:
        # the defect: an array marked sorted is sorted again instead of kept in its order
        return original(cur.take(np.arange(cur.size), sorted=False), tau, eta, mu, pick)

    return mirostat_v2


def _adaptive_wrong_decay(_: Any) -> Callable[..., Any]:
    from reference_impl.sampling import feedback

    def adaptive_update(state: Any, original_p: Any, decay: Any) -> Any:
        d = F32(1.0) - F32(decay)  # the defect: the complement of the decay weights history
        return feedback.AdaptiveState(
            F32(F32(original_p) + F32(d * state.weighted_sum)),
            F32(F32(1.0) + F32(d * state.total_weight)),
        )

    return adaptive_update


def _feedback_accepts_everything(target: Any) -> Any:
    from reference_impl.sampling import feedback

    def accept(self: samplers.AdaptiveP, token: int) -> None:
        if self._pending is not None:  # the defect: any accepted token updates the average
            original = self._original[self._pending[1]]
            self.state = feedback.adaptive_update(self.state, original, self.decay)
        self._pending = None

    samplers.AdaptiveP.accept = accept  # type: ignore[method-assign]
    return target


def _adaptive_clone_copies_stream(target: Any) -> Any:
    original = samplers.AdaptiveP.clone

    def clone(self: samplers.AdaptiveP) -> Any:
        other: Any = original(self)
        other._rng = copy.deepcopy(self._rng)  # the defect: the clone continues the stream
        return other

    samplers.AdaptiveP.clone = clone  # type: ignore[method-assign]
    return target


def _mirostat_mode_without_temp(original: Callable[..., Any]) -> Callable[..., Any]:
    def common_chain_spec(params: Any = None) -> Any:
        specs = original(params)
        if params and params.get("mirostat", 0) != 0:  # the defect: temperature is dropped
            return [s for s in specs if s.name != "temp"]
        return specs

    return common_chain_spec


def _breaker_strings_without_tails(original: Callable[..., Any]) -> Callable[..., Any]:
    def string_breakers(tokenizer: Any, strings: Any) -> list[list[int]]:
        # the defect: tokens that end with the start of a breaker string are not breaker heads
        return [b for b in original(tokenizer, strings) if len(b) == 1]

    return string_breakers


def _no_mass_accepted(_: Any) -> Callable[[TokenDataArray], None]:
    def require_mass(cur: TokenDataArray) -> None:
        return None  # the defect: arrays without a finite logit reach the selection

    return require_mass


def _pipeline_samplers_reversed(target: Any) -> Any:
    """The pipeline runs its samplers last to first."""
    from reference_impl.sampling import selector

    original = selector.sample_pipeline

    def sample_pipeline(logits: Any, samplers: Any) -> int:
        return original(logits, list(samplers)[::-1])

    replace("reference_impl.sampling.selector", "sample_pipeline", sample_pipeline)
    return target


# -- backend sampling: the reference's sample router (reference_impl/decoder/context.py) -------


def _router_patch(attr: str, make: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A mutant ``apply`` that replaces the method ``Context.attr`` by ``make(original)``."""

    def apply(target: Any) -> Any:
        from reference_impl.decoder.context import Context

        setattr(Context, attr, make(getattr(Context, attr)))
        return target

    return apply


def _router_reads_first_row(original: Callable[..., None]) -> Callable[..., None]:
    def sample_rows(self: Any, ub: Any, rows: np.ndarray, row0: int) -> None:
        for k, r in enumerate(rows):
            for s in ub.seq_ids_of(int(r)):
                chain = self.samplers.get(s)
                if chain is not None:  # the defect: every row samples the ubatch's first row
                    self.outputs.sampled[row0 + k] = chain.sample(self.outputs.logits[row0])
                    break

    return sample_rows


def _entries_rewritten(rewrite: Callable[[list[Any]], list[Any]]) -> Any:
    def make(original: Callable[..., None]) -> Callable[..., None]:
        def set_sampler(self: Any, seq_id: int, chain: Any) -> None:
            if isinstance(chain, list):
                chain = rewrite([list(e) if isinstance(e, (list, tuple)) else e for e in chain])
            original(self, seq_id, chain)

        return set_sampler

    return make


def _without_temp(entries: list[Any]) -> list[Any]:
    # the defect: the attached chain loses its temperature
    return [e for e in entries if not (isinstance(e, list) and e[0] == "temp")]


def _next_seed(entries: list[Any]) -> list[Any]:
    # the defect: the attached chain draws from another stream than its seed's
    return [
        [e[0], {**e[1], "seed": e[1]["seed"] + 1}]
        if isinstance(e, list) and len(e) > 1 and "seed" in e[1]
        else e
        for e in entries
    ]


def _router_draws_for_idle_sequences(original: Callable[..., None]) -> Callable[..., None]:
    def sample_rows(self: Any, ub: Any, rows: np.ndarray, row0: int) -> None:
        original(self, ub, rows, row0)
        sampled = {s for r in rows for s in ub.seq_ids_of(int(r))}
        for s, chain in self.samplers.items():
            if s not in sampled and len(rows):  # the defect: a draw without an output row
                chain.sample(self.outputs.logits[row0])

    return sample_rows


MUTANTS = [
    Mutant(
        "smp-default-chain-temperature-first",
        "sampling",
        "the default chain applies temperature before top-k instead of last before dist",
        ("SMP-050",),
        _patch("reference_impl.sampling.chain", "COMMON_ORDER", _temperature_before_top_k),
    ),
    Mutant(
        "smp-top-p-strict",
        "sampling",
        "top-p needs a running sum strictly greater than p (> instead of >=)",
        ("SMP-031",),
        _patch("reference_impl.sampling.truncation", "top_p", _top_p_strict),
    ),
    Mutant(
        "smp-penalties-all-tokens",
        "sampling",
        "penalties rewrite every candidate, not only tokens seen in the window",
        ("SMP-043",),
        _patch("reference_impl.sampling.scaling", "penalties", _penalise_everything),
    ),
    Mutant(
        "smp-greedy-last-max",
        "sampling",
        "greedy selects the last row holding the maximum logit",
        ("SMP-020",),
        _patch("reference_impl.sampling.selection", "greedy", _greedy_last),
    ),
    Mutant(
        "smp-dist-unnormalised",
        "sampling",
        "dist leaves p as expf(l - max) without dividing by the sum",
        ("SMP-021",),
        _patch("reference_impl.sampling.selection", "dist", _dist_unnormalised),
    ),
    Mutant(
        "smp-canonical-single-draw",
        "sampling",
        "dist's uniform number uses one 32-bit draw instead of generate_canonical's two",
        ("SMP-023",),
        _patch("reference_impl.sampling.mt19937", "uniform_01", _one_draw_canonical),
    ),
    Mutant(
        "smp-penalties-unbounded-window",
        "sampling",
        "the penalties ring buffer never drops old tokens",
        ("SMP-044",),
        _unbounded_window_mutant,
    ),
    Mutant(
        "smp-typical-ge",
        "sampling",
        "typical stops at a running sum >= p instead of strictly > p",
        ("SMP-034",),
        _patch("reference_impl.sampling.truncation", "typical", _typical_ge),
    ),
    Mutant(
        "smp-min-p-unsorted-reorders",
        "sampling",
        "min-p's unsorted path sorts the rows it keeps",
        ("SMP-032",),
        _patch("reference_impl.sampling.truncation", "min_p", _min_p_reorders),
    ),
    Mutant(
        "smp-top-n-sigma-all-masked-fails",
        "sampling",
        "top-n-sigma fails on an array whose every logit is -inf instead of passing it through",
        ("SMP-035",),
        _patch(
            "reference_impl.sampling.truncation", "top_n_sigma", _top_n_sigma_needs_a_live_logit
        ),
    ),
    Mutant(
        "smp-normalize-non-finite-max",
        "sampling",
        "normalize_scores subtracts a maximum of -inf or +inf, turning logits into NaN",
        ("SMP-073",),
        _patch("reference_impl.sampling.candidates", "normalize_scores", _normalize_any_maximum),
    ),
    Mutant(
        "smp-temp-zero-last-max",
        "sampling",
        "temperature <= 0 keeps the last maximum instead of the first",
        ("SMP-041",),
        _patch("reference_impl.sampling.scaling", "temp", _temp_zero_last_max),
    ),
    Mutant(
        "smp-accept-first-member-only",
        "sampling",
        "the chain's accept reaches only its first member",
        ("SMP-011",),
        _accept_first_only,
    ),
    Mutant(
        "smp-dist-reset-keeps-stream",
        "sampling",
        "dist's reset does not reseed, so the stream does not restart",
        ("SMP-024",),
        _reset_keeps_stream,
    ),
    Mutant(
        "smp-seeded-reset-replays-drawn-seed",
        "sampling",
        "xtc, mirostat and adaptive-p reseed from the seed drawn at construction, so with"
        " LLAMA_DEFAULT_SEED a reset replays their stream",
        ("SMP-024",),
        _seeded_reset_replays_drawn_seed,
    ),
    Mutant(
        "smp-sample-skips-accept",
        "sampling",
        "sampler_sample returns the token without accepting it into the chain",
        ("SMP-013",),
        _sample_without_accept,
    ),
    Mutant(
        "smp-failed-sample-keeps-state",
        "sampling",
        "a sample without a selection keeps the advanced random stream",
        ("SMP-014",),
        _no_restore_on_failure,
    ),
    Mutant(
        "smp-apply-writes-input",
        "sampling",
        "sampler_apply writes selected/sorted back into the caller's array",
        ("SMP-004",),
        _apply_mutates_input,
    ),
    Mutant(
        "smp-dry-repeat-off-by-one",
        "sampling",
        "DRY counts every repeated run one token longer than it is",
        ("SMP-080",),
        _patch("reference_impl.sampling.dry", "extension_lengths", _dry_off_by_one),
    ),
    Mutant(
        "smp-dry-breakers-ignored",
        "sampling",
        "DRY's sequence breakers never cap the repeat length",
        ("SMP-080",),
        _patch("reference_impl.sampling.dry", "repeat_cap", _dry_breakers_ignored),
    ),
    Mutant(
        "smp-dry-short-window-unsorted",
        "sampling",
        "DRY marks the array unsorted even when its window is not longer than allowed_length",
        ("SMP-080",),
        _patch("reference_impl.sampling.dry", "dry", _dry_always_unsorted),
    ),
    Mutant(
        "smp-xtc-keeps-first",
        "sampling",
        "XTC keeps the most likely top choice instead of the least likely one",
        ("SMP-081",),
        _patch("reference_impl.sampling.truncation", "xtc", _xtc_keeps_first),
    ),
    Mutant(
        "smp-xtc-draw-of-one-kept",
        "sampling",
        "XTC's float draw keeps a quotient of 1 instead of the largest float below 1",
        ("SMP-081",),
        _patch("reference_impl.sampling.mt19937", "uniform_float_01", _float_draw_of_one_kept),
    ),
    Mutant(
        "smp-mirostat-v2-reset-keeps-stream",
        "sampling",
        "Mirostat v2's reset restores mu but does not reseed its stream",
        ("SMP-082",),
        _mirostat_v2_reset_keeps_stream,
    ),
    Mutant(
        "smp-default-dry-allowed-length-3",
        "sampling",
        "the default chain's dry_allowed_length defaults to 3 instead of 2",
        ("SMP-051",),
        _patch("reference_impl.sampling.chainspec", "COMMON_PARAMS", _dry_allowed_length_3),
    ),
    Mutant(
        "smp-mirostat-frozen-mu",
        "sampling",
        "Mirostat never updates mu after a selection",
        ("SMP-082",),
        _patch("reference_impl.sampling.feedback", "_surprise_update", _mirostat_frozen_mu),
    ),
    Mutant(
        "smp-mirostat-v1-extra-ratio",
        "sampling",
        "Mirostat v1 fits its Zipf exponent on m + 1 probabilities",
        ("SMP-082",),
        _patch("reference_impl.sampling.feedback", "mirostat_k", _mirostat_v1_m_rows),
    ),
    Mutant(
        "smp-mirostat-v1-k-2-pow-31-fits",
        "sampling",
        "Mirostat v1 keeps 2^31 rows for a float k of exactly 2^31 instead of one",
        ("SMP-082",),
        _patch("reference_impl.sampling.feedback", "float_to_int", _int_of_2_pow_31_fits),
    ),
    Mutant(
        "smp-mirostat-v2-ignores-sorted-flag",
        "sampling",
        "Mirostat v2 sorts an array already marked sorted instead of keeping its order",
        ("SMP-082",),
        _patch("reference_impl.sampling.feedback", "mirostat_v2", _mirostat_v2_ignores_sorted_flag),
    ),
    Mutant(
        "smp-adaptive-p-wrong-decay",
        "sampling",
        "adaptive-p weights its moving average with 1 - decay instead of decay",
        ("SMP-083",),
        _patch("reference_impl.sampling.feedback", "adaptive_update", _adaptive_wrong_decay),
    ),
    Mutant(
        "smp-adaptive-p-any-accept",
        "sampling",
        "adaptive-p updates its moving average for any accepted token, not only its selection",
        ("SMP-083",),
        _feedback_accepts_everything,
    ),
    Mutant(
        "smp-adaptive-p-clone-continues-stream",
        "sampling",
        "adaptive-p's clone continues the original's random stream instead of reseeding",
        ("SMP-083",),
        _adaptive_clone_copies_stream,
    ),
    Mutant(
        "smp-no-mass-selected",
        "sampling",
        "Mirostat and adaptive-p try to select from an array without a finite logit",
        ("SMP-086",),
        _patch("reference_impl.sampling.feedback", "require_mass", _no_mass_accepted),
    ),
    Mutant(
        "smp-default-mirostat-without-temp",
        "sampling",
        "the default chain's mirostat modes leave out the temperature before mirostat",
        ("SMP-088",),
        _patch("reference_impl.sampling.chain", "common_chain_spec", _mirostat_mode_without_temp),
    ),
    Mutant(
        "smp-dry-strings-no-overlaps",
        "sampling",
        "DRY breaker strings only make single-token breakers, never head + tail sequences",
        ("SMP-087",),
        _patch("reference_impl.sampling.dry", "string_breakers", _breaker_strings_without_tails),
    ),
    Mutant(
        "smp-pipeline-samplers-reversed",
        "sampling",
        "EMEL's pipeline applies its samplers last to first",
        ("SMP-085",),
        _pipeline_samplers_reversed,
    ),
    Mutant(
        "smp-backend-reads-first-row",
        "sampling",
        "the sample router samples every output row of a ubatch from the logits of its first row",
        ("SMP-084",),
        _router_patch("_sample_rows", _router_reads_first_row),
        black_box=True,
    ),
    Mutant(
        "smp-backend-skips-temp",
        "sampling",
        "a chain attached to a sequence runs without its temp samplers",
        ("SMP-084",),
        _router_patch("set_sampler", _entries_rewritten(_without_temp)),
        black_box=True,
    ),
    Mutant(
        "smp-backend-other-stream",
        "sampling",
        "a chain attached to a sequence draws from the stream of seed + 1",
        ("SMP-084", "SMP-089"),
        _router_patch("set_sampler", _entries_rewritten(_next_seed)),
        black_box=True,
    ),
    Mutant(
        "smp-backend-draws-without-output",
        "sampling",
        "the sample router advances the chains of sequences without an output row in a ubatch",
        ("SMP-089",),
        _router_patch("_sample_rows", _router_draws_for_idle_sequences),
        black_box=True,
    ),
]
