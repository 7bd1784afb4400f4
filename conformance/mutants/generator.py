"""Generator mutants: one deliberate defect each (see tests/meta)."""

from __future__ import annotations

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
]
