"""The long-sequence drift validator (DBA-009): the approximation against exact attention.

On ``batch`` random token sequences of ``length`` (seeded), both forwards of the same model
give logits; the report has the max-abs logit difference, the mean next-token NLL of each,
ΔNLL = NLL(approx) − NLL(exact) and the perplexity ratio exp(ΔNLL). The bounds are those of
the decoupled project's validator: max-abs 0.1, |ΔNLL| 0.05, PPL ratio 1.05.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from reference_impl.decoupled.model import DecoupledLM
from reference_impl.spec_links import implements

MAX_ABS_LOGIT = 0.1
MAX_DELTA_NLL = 0.05
MAX_PPL_RATIO = 1.05


@dataclass(frozen=True)
class DriftReport:
    max_abs_logit: float
    nll_exact: float
    nll_approx: float

    @property
    def delta_nll(self) -> float:
        return self.nll_approx - self.nll_exact

    @property
    def ppl_ratio(self) -> float:
        return math.exp(self.delta_nll)

    @property
    def within_bounds(self) -> bool:
        return (
            self.max_abs_logit <= MAX_ABS_LOGIT
            and abs(self.delta_nll) <= MAX_DELTA_NLL
            and self.ppl_ratio <= MAX_PPL_RATIO
        )

    def rows(self) -> list[tuple[str, str]]:
        return [
            ("Max-abs logit diff", f"{self.max_abs_logit:.6f} (bound {MAX_ABS_LOGIT})"),
            ("NLL exact / approx", f"{self.nll_exact:.6f} / {self.nll_approx:.6f}"),
            ("Delta NLL", f"{self.delta_nll:+.6f} (bound {MAX_DELTA_NLL})"),
            ("PPL ratio", f"{self.ppl_ratio:.6f} (bound {MAX_PPL_RATIO})"),
            ("Drift", "within bounds" if self.within_bounds else "OUT OF BOUNDS"),
        ]

    def render(self) -> str:
        return "\n".join(f"{k}: {v}" for k, v in self.rows())


def _nll(logits: torch.Tensor, tokens: torch.Tensor) -> float:
    lp = torch.log_softmax(logits[:, :-1].double(), dim=-1)
    return float(-lp.gather(-1, tokens[:, 1:, None]).mean())


@implements("DBA-009")
def measure(
    model: DecoupledLM, length: int, batch: int, seed: int, mask: str = "bottom-right"
) -> DriftReport:
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, model.cfg.vocab, (batch, length), generator=gen).to(model.device)
    exact = model(tokens)
    approx = model(tokens, approx=mask)
    return DriftReport(
        max_abs_logit=float((exact - approx).abs().max()),
        nll_exact=_nll(exact, tokens),
        nll_approx=_nll(approx, tokens),
    )
