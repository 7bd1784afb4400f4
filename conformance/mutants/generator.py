"""Generator mutants: one deliberate defect each (see tests/meta)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conformance.mutants import Mutant


def _stop_token_returned(target: Any) -> Any:
    from reference_impl.generator import Generator

    original = Generator._advance

    def _advance(
        self: Generator,
        active: Any,
        nxt: Any,
        tokens: Any,
        reasons: Any,
        limits: Any,
        stops: Any,
        pos: Any,
        st: Any,
    ) -> Any:
        for s in active:
            if nxt[s] in stops:
                tokens[s].append(nxt[s])
        return original(self, active, nxt, tokens, reasons, limits, stops, pos, st)

    Generator._advance = _advance  # type: ignore[method-assign]
    return target


def _generator_skips_memory_clear(target: Any) -> Any:
    from reference_impl.generator import Generator

    original = Generator.generate

    class NoClear:
        """The generator's context with seq_rm doing nothing (the context is left alone)."""

        def __init__(self, ctx: Any) -> None:
            self._ctx = ctx

        def seq_rm(self, *args: Any) -> bool:
            return True

        def __getattr__(self, name: str) -> Any:
            return getattr(self._ctx, name)

    def generate(self: Generator, req: Any) -> Any:
        ctx = self.ctx
        self.ctx = NoClear(ctx)
        try:
            return original(self, req)
        finally:
            self.ctx = ctx

    Generator.generate = generate  # type: ignore[method-assign]
    return target


class _CtxProxy:
    """A generator's context seen through a defect: attributes not overridden pass through."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)


def _with_proxy(proxy: type[_CtxProxy]) -> None:
    """Make every ``Generator.generate`` call drive its context through ``proxy``."""
    from reference_impl.generator import Generator

    original = Generator.generate

    def generate(self: Generator, req: Any) -> Any:
        ctx = self.ctx
        self.ctx = proxy(ctx)
        try:
            return original(self, req)
        finally:
            self.ctx = ctx

    Generator.generate = generate  # type: ignore[method-assign]


def _step_descending(target: Any) -> Any:
    from reference_impl.batch.types import Batch

    class Descending(_CtxProxy):
        """Decode steps submit their entries in descending seq id (rows read back consistently,
        so the trace and the tokens look right)."""

        n_rev = 0

        def decode(self, b: Batch) -> int:
            n = b.n_tokens
            step_like = b.logits is not None and n > 1 and bool(b.logits.all())
            self.n_rev = n if step_like else 0
            if step_like:
                assert b.token is not None and b.pos is not None and b.seq_id is not None
                b = Batch.from_lists(
                    [int(t) for t in b.token[::-1]],
                    pos=[int(p) for p in b.pos[::-1]],
                    seq_ids=[[int(s)] for s in b.seq_id[::-1, 0]],
                    logits=[1] * n,
                )
            return int(self._ctx.decode(b))

        def get_logits_ith(self, i: int) -> Any:
            return self._ctx.get_logits_ith(self.n_rev - 1 - i if self.n_rev else i)

    _with_proxy(Descending)
    return target


def _trace_without_failed_call(target: Any) -> Any:
    from reference_impl.errors import GeneratorError

    def with_trace(self: GeneratorError, trace: Any, code: int) -> GeneratorError:
        self.trace = list(trace)[:-1]  # the defect: the failed call is not in the trace
        self.decode_code = code
        return self

    GeneratorError.with_trace = with_trace  # type: ignore[method-assign]
    return target


def _prefill_error_index_one(target: Any) -> Any:
    """A failed prefill call's GEN_DECODE_FAILED names step 1 instead of 0."""
    from reference_impl.errors import GeneratorError
    from reference_impl.generator import Generator

    original = Generator._prefill

    def _prefill(self: Generator, *args: Any) -> Any:
        try:
            return original(self, *args)
        except GeneratorError as err:
            err.index = 1
            raise

    Generator._prefill = _prefill  # type: ignore[method-assign,assignment]
    return target


_CHAINS: dict[tuple[str, int], Any] = {}


def _sampler_chains_reused(target: Any) -> Any:
    import json

    from reference_impl.generator import SEED_MOD, Generator, with_seed
    from reference_impl.sampling import chain as sampling_chain

    def _samplers(self: Generator, req: Any, n: int) -> Any:
        if req.sampler is None:
            return None
        out = []
        for i in range(n):
            seeded = with_seed(req.sampler, (req.seed + i) % SEED_MOD)
            key = (json.dumps(seeded, sort_keys=True), i)
            if key not in _CHAINS:  # the defect: a chain (and its RNG state) outlives a request
                _CHAINS[key] = sampling_chain.build_chain(seeded)
            out.append(_CHAINS[key])
        return out

    Generator._samplers = _samplers  # type: ignore[method-assign]
    return target


def _ubatch_check_off_by_one(target: Any) -> Any:
    from reference_impl.errors import GeneratorError
    from reference_impl.generator import Generator

    original = Generator._validate

    def _validate(self: Generator, req: Any) -> Any:
        n = len(req.prompts)
        if 0 < n <= self.ctx.n_seq_max() and n >= self.ctx.n_ubatch():  # the defect: >=, not >
            raise GeneratorError(
                "GEN_UBATCH_TOO_SMALL",
                f"{n} prompts >= n_ubatch = {self.ctx.n_ubatch()}",
                field="prompts",
            )
        return original(self, req)

    Generator._validate = _validate  # type: ignore[method-assign]
    return target


def _reference_logits_last_row(target: Any) -> Any:
    from reference_impl.decoder.context import Context

    original = Context.get_logits_ith

    def get_logits_ith(self: Context, i: int) -> Any:
        return original(self, -1)  # the defect: the index is ignored, the last row returned

    Context.get_logits_ith = get_logits_ith  # type: ignore[method-assign]
    return target


def _dist_burns_first_draw(target: Any) -> Any:
    from reference_impl.sampling.samplers import Dist

    original = Dist.__init__

    def init(self: Dist, seed: int) -> None:
        original(self, seed)
        self._draw()  # the defect: the stream's first number is never used

    Dist.__init__ = init  # type: ignore[method-assign]
    return target


def _seq_no_not_reset(target: Any) -> Any:
    from reference_impl.generator import Generator, TraceStep

    counter = {"next": 0}

    def _step(self: Generator, phase: str, step: int, **kw: Any) -> TraceStep:
        # the defect: one counter for the generator's lifetime, so a reused generator's next
        # trace goes on from the previous one's last seq_no
        s = TraceStep(seq_no=counter["next"], phase=phase, step=step, **kw)
        counter["next"] += 1
        return s

    Generator._step = _step  # type: ignore[method-assign]
    return target


def _done_step_skips_one(target: Any) -> Any:
    from reference_impl.generator import Generator

    original = Generator.generate

    def generate(self: Generator, req: Any) -> Any:
        res = original(self, req)
        if res.trace and res.trace[-1].phase == "done":
            res.trace[-1].step += 1  # the defect: done is numbered n + 2
        return res

    Generator.generate = generate  # type: ignore[method-assign]
    return target


def _request_default(field: str, value: Any) -> Callable[[Any], Any]:
    """A mutant that gives ``GenerationRequest``'s ``field`` the default ``value``."""

    def apply(target: Any) -> Any:
        import inspect

        from reference_impl.generator import GenerationRequest

        init = GenerationRequest.__init__
        with_default = [
            n for n, p in inspect.signature(init).parameters.items() if p.default is not p.empty
        ]
        defaults = list(init.__defaults__ or ())
        defaults[with_default.index(field)] = value
        init.__defaults__ = tuple(defaults)
        return target

    return apply


# A request without a seed gets 1.
_default_seed_one = _request_default("seed", 1)


# A request without max_tokens gets one token past the default.
_default_max_tokens_seventeen = _request_default("max_tokens", 17)


def _decode_kv_after_stale(target: Any) -> Any:
    from reference_impl.generator import Generator

    original = Generator.generate

    def generate(self: Generator, req: Any) -> Any:
        res = original(self, req)
        for st in res.trace:  # the defect: a decode step records the memory before it as after
            if st.phase == "decode":
                st.kv_after = dict(st.kv_before)
        return res

    Generator.generate = generate  # type: ignore[method-assign]
    return target


MUTANTS = [
    Mutant(
        "gen-stop-token-returned",
        "generator",
        "the stop token is returned with the generated tokens",
        ("GEN-006",),
        _stop_token_returned,
    ),
    Mutant(
        "gen-no-memory-clear",
        "generator",
        "generation starts without clearing the prompts' sequences",
        ("GEN-002",),
        _generator_skips_memory_clear,
    ),
    Mutant(
        "gen-step-descending-seq-ids",
        "generator",
        "decode steps list the active sequences in descending seq id",
        ("GEN-005",),
        _step_descending,
    ),
    Mutant(
        "gen-error-trace-without-failed-call",
        "generator",
        "a failed decode's error carries the trace without the failed call",
        ("GEN-010",),
        _trace_without_failed_call,
    ),
    Mutant(
        "gen-sampler-chains-reused",
        "generator",
        "sampler chains are cached across requests, so a repeated request continues their draws",
        ("GEN-014",),
        _sampler_chains_reused,
    ),
    Mutant(
        "gen-ubatch-check-off-by-one",
        "generator",
        "a request with exactly n_ubatch prompts is refused with GEN_UBATCH_TOO_SMALL",
        ("GEN-020",),
        _ubatch_check_off_by_one,
    ),
    Mutant(
        "gen-reference-logits-last-row",
        "generator",
        "the reference's get_logits_ith ignores its index and returns the last output row",
        ("GEN-019",),
        _reference_logits_last_row,
    ),
    Mutant(
        "gen-dist-burns-first-draw",
        "generator",
        "a seeded dist sampler skips the first number of its stream, so seeded goldens change",
        ("GEN-021",),
        _dist_burns_first_draw,
        black_box=True,
    ),
    Mutant(
        "gen-seq-no-not-reset",
        "generator",
        "a reused generator numbers its next trace on from the previous trace's seq_no",
        ("GEN-022",),
        _seq_no_not_reset,
    ),
    Mutant(
        "gen-done-step-skips-one",
        "generator",
        "the closing done record has step n + 2 instead of one past the last decode step",
        ("GEN-023",),
        _done_step_skips_one,
    ),
    Mutant(
        "gen-default-seed-one",
        "generator",
        "a request that names no seed is generated with seed 1 instead of 0",
        ("GEN-024",),
        _default_seed_one,
    ),
    Mutant(
        "gen-default-max-tokens-seventeen",
        "generator",
        "a request that leaves out max_tokens returns 17 tokens per prompt instead of 16",
        ("GEN-025",),
        _default_max_tokens_seventeen,
    ),
    Mutant(
        "gen-prefill-error-index-one",
        "generator",
        "a decode call that fails in prefill raises GEN_DECODE_FAILED with index 1, not 0",
        ("GEN-010",),
        _prefill_error_index_one,
    ),
    Mutant(
        "gen-decode-kv-after-stale",
        "generator",
        "a decode step's kv_after repeats its kv_before instead of the memory after the step",
        ("GEN-013",),
        _decode_kv_after_stale,
    ),
]
