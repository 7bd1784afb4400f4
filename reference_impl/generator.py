"""The generator: an autoregressive loop over several sequences with an inspectable trace.

Prompt ``i`` runs as sequence ``i``. Prefill feeds every prompt (in order, in decode calls of at
most ``n_batch`` tokens, only the last token of each prompt flagged); then each decode step
feeds one token per *active* sequence (ascending seq id, all flagged) at the next position, and
selects the next token of each from its logits row. A sequence finishes when it selects a stop
token (``"stop"``, the token is recorded but neither returned nor fed), when it has returned
``max_tokens`` tokens (``"length"``), or when its next position would not fit its context
(``"context"``). Finished sequences leave the batch; the others go on.

The generator drives its context only through ``decode``, ``get_logits_ith`` and the memory
operations, so the same loop runs on any target with the decode capability. Selection is greedy
(first maximum) unless a sampler chain (a ``reference_impl.sampling`` chain description) is
given: prompt ``i`` then gets its own chain seeded with ``(seed + i) mod 2**32``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from reference_impl.batch.types import Batch
from reference_impl.errors import GeneratorError
from reference_impl.spec_links import implements

SEED_MOD = 2**32


@implements("GEN-024", "GEN-025")
@dataclass(frozen=True)
class GenerationRequest:
    prompts: Sequence[Sequence[int] | str]
    max_tokens: int | Sequence[int] = 16
    sampler: list[Any] | None = None  # chain description; None = greedy
    seed: int = 0
    stop_tokens: Sequence[int] = ()
    use_eos: bool = True  # the model's end-of-generation token stops a sequence
    record_logits: bool = True


@implements("GEN-012")
@dataclass
class TraceStep:
    """One phase of the generation: ``prefill`` (step 0) or a decode step ``t >= 1``."""

    seq_no: int
    phase: str  # "tokenize" | "prefill" | "decode" | "done" | "error"
    step: int
    active: list[int] = field(default_factory=list)
    fed: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # seq -> [(token, pos)]
    calls: list[dict[str, int]] = field(default_factory=list)  # decode calls: n_tokens, code
    chosen: dict[int, int] = field(default_factory=dict)
    logits: dict[int, list[float]] = field(default_factory=dict)
    kv_before: dict[int, tuple[int, int]] = field(default_factory=dict)
    kv_after: dict[int, tuple[int, int]] = field(default_factory=dict)
    finished: dict[int, str] = field(default_factory=dict)


@dataclass
class GenerationResult:
    tokens: dict[int, list[int]]
    reasons: dict[int, str]
    trace: list[TraceStep]
    prompt_tokens: dict[int, list[int]]

    @implements("GEN-012")
    def trace_json(self) -> str:
        return json.dumps([asdict(s) for s in self.trace], sort_keys=True)

    @staticmethod
    @implements("GEN-012")
    def trace_from_json(text: str) -> list[TraceStep]:
        steps = []
        for d in json.loads(text):
            d["fed"] = {int(k): [tuple(x) for x in v] for k, v in d["fed"].items()}
            for key in ("chosen", "logits", "finished"):
                d[key] = {int(k): v for k, v in d[key].items()}
            for key in ("kv_before", "kv_after"):
                d[key] = {int(k): tuple(v) for k, v in d[key].items()}
            steps.append(TraceStep(**d))
        return steps


@implements("GEN-015")
def with_seed(spec: list[Any], seed: int) -> list[Any]:
    """The chain description with every ``dist`` entry seeded with ``seed``."""
    out: list[Any] = []
    for entry in spec:
        name = entry if isinstance(entry, str) else entry[0]
        if name == "dist":
            out.append(["dist", {"seed": seed}])
        else:
            out.append(entry)
    return out


@implements("GEN-018")
class Generator:
    """Runs a :class:`GenerationRequest` on a context (any target's decode context)."""

    def __init__(
        self,
        ctx: Any,
        *,
        n_vocab: int,
        eos: int | None = None,
        tokenize: Any = None,
        n_ctx_seq: int | None = None,
    ) -> None:
        self.ctx = ctx
        self.n_vocab = n_vocab
        self.eos = eos
        self.tokenize = tokenize
        self.n_ctx_seq = n_ctx_seq if n_ctx_seq is not None else ctx.n_ctx_seq()
        self._seq_no = 0

    # ------------------------------------------------------------------ validation

    @implements("GEN-001", "GEN-017", "GEN-020")
    def _validate(self, req: GenerationRequest) -> tuple[list[list[int]], list[int]]:
        n = len(req.prompts)
        if n == 0:
            raise GeneratorError("GEN_EMPTY_PROMPT", "no prompt given", field="prompts")
        if n > self.ctx.n_seq_max():
            raise GeneratorError(
                "GEN_TOO_MANY_PROMPTS",
                f"{n} prompts > n_seq_max = {self.ctx.n_seq_max()}",
                field="prompts",
            )
        if n > self.ctx.n_ubatch():
            raise GeneratorError(
                "GEN_UBATCH_TOO_SMALL",
                f"{n} prompts > n_ubatch = {self.ctx.n_ubatch()}",
                field="prompts",
            )
        limits = [req.max_tokens] * n if isinstance(req.max_tokens, int) else list(req.max_tokens)
        if len(limits) != n:
            raise GeneratorError(
                "GEN_BAD_LIMIT", "one max_tokens per prompt is required", field="max_tokens"
            )
        for i, m in enumerate(limits):
            if m < 0:
                raise GeneratorError(
                    "GEN_BAD_LIMIT", f"max_tokens[{i}] = {m} < 0", field="max_tokens", index=i
                )
        prompts: list[list[int]] = []
        for i, p in enumerate(req.prompts):
            if isinstance(p, str):
                if self.tokenize is None:
                    raise GeneratorError(
                        "GEN_NO_TOKENIZER", "string prompts need a tokenizer", field="prompts"
                    )
                toks = list(self.tokenize(p))
            else:
                toks = [int(t) for t in p]
            if not toks:
                raise GeneratorError(
                    "GEN_EMPTY_PROMPT", f"prompt {i} is empty", field="prompts", index=i
                )
            for j, t in enumerate(toks):
                if not 0 <= t < self.n_vocab:
                    raise GeneratorError(
                        "GEN_TOKEN_RANGE",
                        f"prompt {i} token {j} = {t} is outside [0, {self.n_vocab})",
                        field="prompts",
                        index=j,
                        seq_id=i,
                    )
            prompts.append(toks)
        return prompts, limits

    # ------------------------------------------------------------------ the loop

    @implements("PHASE-005", "GEN-022")
    def _step(self, phase: str, step: int, **kw: Any) -> TraceStep:
        s = TraceStep(seq_no=self._seq_no, phase=phase, step=step, **kw)
        self._seq_no += 1
        return s

    def _kv(self, seqs: Sequence[int]) -> dict[int, tuple[int, int]]:
        return {s: (self.ctx.seq_pos_min(s), self.ctx.seq_pos_max(s)) for s in seqs}

    @implements(
        "GEN-002",
        "GEN-005",
        "GEN-006",
        "GEN-008",
        "GEN-010",
        "GEN-011",
        "GEN-013",
        "GEN-014",
        "GEN-016",
        "GEN-017",
        "GEN-019",
        "GEN-021",
        "GEN-022",
        "GEN-023",
        "PHASE-001",
        "PHASE-002",
        "PHASE-003",
        "PHASE-005",
        "PHASE-006",
        "PHASE-013",
        "PHASE-021",
    )
    def generate(self, req: GenerationRequest) -> GenerationResult:
        trace: list[TraceStep] = []
        self._seq_no = 0  # every trace numbers its records from 0 (GEN-022)
        has_strings = any(isinstance(p, str) for p in req.prompts)
        prompts, limits = self._validate(req)
        if has_strings:
            trace.append(self._step("tokenize", 0))
        n = len(prompts)
        samplers = self._samplers(req, n)
        stops = set(int(t) for t in req.stop_tokens)
        if req.use_eos and self.eos is not None:
            stops.add(self.eos)

        for s in range(n):
            self.ctx.seq_rm(s, -1, -1)
        tokens: dict[int, list[int]] = {s: [] for s in range(n)}
        reasons: dict[int, str] = {}
        pos = {s: len(prompts[s]) - 1 for s in range(n)}  # position of the last fed token

        # -- prefill
        live = [s for s in range(n) if limits[s] > 0]
        for s in range(n):
            if limits[s] == 0:
                reasons[s] = "length"
        pre = self._step("prefill", 0, active=list(live), kv_before=self._kv(range(n)))
        last_logits = self._prefill(prompts, live, pre, trace)
        pre.kv_after = self._kv(range(n))
        nxt = self._select(live, last_logits, samplers, pre, req.record_logits)
        trace.append(pre)

        # -- decode steps
        step = 0
        active = self._advance(live, nxt, tokens, reasons, limits, stops, pos, pre)
        while active:
            step += 1
            st = self._step("decode", step, active=list(active), kv_before=self._kv(range(n)))
            feed = [(s, nxt[s], pos[s] + 1) for s in active]
            st.fed = {s: [(t, p)] for s, t, p in feed}
            b = Batch.from_lists(
                [t for _, t, _ in feed],
                pos=[p for _, _, p in feed],
                seq_ids=[[s] for s, _, _ in feed],
                logits=[1] * len(feed),
            )
            code = self.ctx.decode(b)
            st.calls.append({"n_tokens": len(feed), "code": code})
            if code != 0:
                st.phase = "error"
                trace.append(st)
                raise GeneratorError(
                    "GEN_DECODE_FAILED",
                    f"decode returned {code} at step {step}",
                    field="decode",
                    index=step,
                ).with_trace(trace, code)
            for s, _, p in feed:
                pos[s] = p
            st.kv_after = self._kv(range(n))
            rows = {s: np.asarray(self.ctx.get_logits_ith(k)) for k, (s, _, _) in enumerate(feed)}
            nxt = self._select(active, rows, samplers, st, req.record_logits)
            trace.append(st)
            active = self._advance(active, nxt, tokens, reasons, limits, stops, pos, st)
        trace.append(self._step("done", step + 1))  # one past the last decode step (GEN-023)
        return GenerationResult(tokens, reasons, trace, {s: prompts[s] for s in range(n)})

    @implements("GEN-003", "GEN-004", "GEN-010")
    def _prefill(
        self, prompts: list[list[int]], live: list[int], pre: TraceStep, trace: list[TraceStep]
    ) -> dict[int, np.ndarray]:
        """Feed the prompts; returns, per sequence, the logits of its last prompt token (read
        right after the decode call that carried it: a later chunk's call replaces them)."""
        n_batch = self.ctx.n_batch()
        items = [(s, t, p) for s in live for p, t in enumerate(prompts[s])]
        last_of = {s: len(prompts[s]) - 1 for s in live}
        last_logits: dict[int, np.ndarray] = {}
        for c in range(0, len(items), n_batch):
            chunk = items[c : c + n_batch]
            flags = [int(p == last_of[s]) for s, _, p in chunk]
            b = Batch.from_lists(
                [t for _, t, _ in chunk],
                pos=[p for _, _, p in chunk],
                seq_ids=[[s] for s, _, _ in chunk],
                logits=flags,
            )
            for s, t, p in chunk:
                pre.fed.setdefault(s, []).append((t, p))
            code = self.ctx.decode(b)
            pre.calls.append({"n_tokens": len(chunk), "code": code})
            if code != 0:
                pre.phase = "error"
                trace.append(pre)
                raise GeneratorError(
                    "GEN_DECODE_FAILED",
                    f"decode returned {code} during prefill",
                    field="decode",
                    index=0,
                ).with_trace(trace, code)
            for k, (s, _, p) in enumerate(chunk):
                if p == last_of[s]:
                    last_logits[s] = np.asarray(self.ctx.get_logits_ith(k))
        return last_logits

    @implements("GEN-015")
    def _samplers(self, req: GenerationRequest, n: int) -> list[Any] | None:
        if req.sampler is None:
            return None
        from reference_impl.sampling import chain as sampling_chain

        return [
            sampling_chain.build_chain(with_seed(req.sampler, (req.seed + i) % SEED_MOD))
            for i in range(n)
        ]

    @implements("GEN-004", "PHASE-007", "PHASE-016")
    def _select(
        self,
        seqs: Sequence[int],
        logits_of: dict[int, np.ndarray],
        samplers: list[Any] | None,
        st: TraceStep,
        record: bool,
    ) -> dict[int, int]:
        out: dict[int, int] = {}
        for s in seqs:
            logits = logits_of[s]
            if samplers is None:
                tok = int(np.argmax(logits))  # first maximum
            else:
                tok = int(samplers[s].sample(logits))
            out[s] = tok
            st.chosen[s] = tok
            if record:
                st.logits[s] = [float(x) for x in logits]
        return out

    @implements("GEN-006", "GEN-007", "GEN-008", "GEN-009", "PHASE-018", "PHASE-019")
    def _advance(
        self,
        active: list[int],
        nxt: dict[int, int],
        tokens: dict[int, list[int]],
        reasons: dict[int, str],
        limits: list[int],
        stops: set[int],
        pos: dict[int, int],
        st: TraceStep,
    ) -> list[int]:
        still = []
        for s in active:
            tok = nxt[s]
            if tok in stops:
                reasons[s] = "stop"
            else:
                tokens[s].append(tok)
                if len(tokens[s]) >= limits[s]:
                    reasons[s] = "length"
                elif pos[s] + 1 >= self.n_ctx_seq:
                    reasons[s] = "context"
            if s in reasons:
                st.finished[s] = reasons[s]
            else:
                still.append(s)
        return still
