"""Path choice for the decode kernels, eligibility rules, and the trace of which path ran.

Every call of :func:`kernels.decode_attention.gqa_decode` and
:func:`kernels.decoupled.decoupled_decode` produces one :class:`DispatchRecord` naming the path
that actually ran and why. Callers get it by passing ``trace=[]`` (appended to) or by wrapping
code in :func:`recording` (collects every record produced inside, e.g. by a whole model forward).

Rules (spec KRN-020..KRN-024):

* ``path="torch"`` / ``"streaming"``: the torch reference, always;
* ``path="1pass"`` / ``"2pass"``: that Triton kernel if the configuration is eligible, else the
  reference with ``reason`` saying why (never an exception for an *ineligible* configuration;
  invalid inputs still raise KernelError);
* ``path="auto"``: ineligible -> reference; else 2-pass when the number of keys the kernels read
  is at least ``DispatchConfig.two_pass_min_tokens`` (default 4096), else 1-pass.

Errors raised *inside* an eligible kernel are not caught: a crash there is a bug to surface, not
a reason to fall back silently.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from reference_impl.errors import KernelError
from reference_impl.spec_links import implements

TRITON_1PASS = "triton-1pass"
TRITON_2PASS = "triton-2pass"
TORCH = "torch"  # GQA reference
STREAMING = "streaming"  # decoupled reference
FUSED_PATHS = (TRITON_1PASS, TRITON_2PASS)
REQUESTS = ("auto", "1pass", "2pass", "torch", "streaming")


@implements("KRN-006")
def check_tiling(block_n: int, partition_size: int) -> None:
    if block_n < 1 or block_n & (block_n - 1) or block_n > 1024:
        raise KernelError(
            "KRN_BAD_PARTITION", f"block_n must be a power of two <= 1024, got {block_n}"
        )
    if partition_size < block_n or partition_size % block_n:
        raise KernelError(
            "KRN_BAD_PARTITION",
            f"partition_size ({partition_size}) must be a positive multiple of block_n ({block_n})",
            field="partition_size",
        )


@dataclass(frozen=True)
class DispatchConfig:
    """Knobs of the path choice; every field is documented in docs/kernels.md."""

    two_pass_min_tokens: int = 4096  # auto: 2-pass from this many keys read by the kernels
    block_n: int = 32  # tokens per tile inside a kernel program (power of two)
    partition_size: int = 256  # 2-pass: tokens per partition; 1-pass: tokens per launch
    max_head_dim: int = 256
    max_group: int = 64  # GQA: query heads sharing one KV head

    def __post_init__(self) -> None:
        check_tiling(self.block_n, self.partition_size)
        if self.two_pass_min_tokens < 0:
            raise KernelError("KRN_BAD_CONFIG", "two_pass_min_tokens must be >= 0")


DEFAULT_CONFIG = DispatchConfig()


@implements("KRN-020")
@dataclass(frozen=True)
class DispatchRecord:
    """Which path one kernel call took. ``path`` is one of triton-1pass, triton-2pass, torch,
    streaming; ``requested`` is the caller's ``path`` argument; ``reason`` explains the choice."""

    op: str
    path: str
    requested: str
    reason: str
    tokens: int  # keys attended (excluding the null token)
    interpreter: bool = False
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def fused(self) -> bool:
        return self.path in FUSED_PATHS


_RECORDERS: contextvars.ContextVar[tuple[list[DispatchRecord], ...]] = contextvars.ContextVar(
    "kernel_dispatch_recorders", default=()
)


@contextlib.contextmanager
def recording() -> Iterator[list[DispatchRecord]]:
    """Collect every DispatchRecord produced inside the ``with`` block (nesting allowed)."""
    sink: list[DispatchRecord] = []
    token = _RECORDERS.set((*_RECORDERS.get(), sink))
    try:
        yield sink
    finally:
        _RECORDERS.reset(token)


@implements("KRN-020")
def emit(record: DispatchRecord, trace: list[DispatchRecord] | None) -> None:
    if trace is not None:
        trace.append(record)
    for sink in _RECORDERS.get():
        sink.append(record)


def check_request(path: str) -> None:
    if path not in REQUESTS:
        raise KernelError(
            "KRN_BAD_PATH", f"unknown path {path!r}; expected one of {', '.join(REQUESTS)}"
        )


@implements("KRN-021", "KRN-022", "KRN-023")
def choose(
    requested: str,
    ineligible: str,
    tokens: int,
    reference: str,
    config: DispatchConfig,
) -> tuple[str, str]:
    """(path, reason) from the request, the first ineligibility reason ('' if eligible) and the
    number of keys the kernels would read."""
    if requested in ("torch", "streaming"):
        return reference, "requested"
    if ineligible:
        return reference, f"fallback: {ineligible}"
    if requested == "1pass":
        return TRITON_1PASS, "requested"
    if requested == "2pass":
        return TRITON_2PASS, "requested"
    if tokens >= config.two_pass_min_tokens:
        return TRITON_2PASS, f"auto: {tokens} keys >= two_pass_min_tokens"
    return TRITON_1PASS, f"auto: {tokens} keys < two_pass_min_tokens"


def is_pow2(n: int) -> bool:
    return n >= 1 and not n & (n - 1)


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()
