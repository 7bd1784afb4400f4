"""Protocol of the decoupled area (spec/decoupled.md): the decoupled (semantic + geometric) KV
cache of seed 001, and a small decoupled-attention model built on it (``decoupled.model``) with
its runner (``decoupled.runner``). The oracle reads the cache's buffers directly, so their layout is part of the
protocol: token-major ``[B, L, H·hd]`` per tensor, ``codes``/``scales`` for a quantized format
or ``buf`` for a float one, and the fp16 ``ring`` of the residual tail
(:class:`kernels.decoupled_cache.DecoupledKVCache`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import torch

from conformance.protocol import capability, role


@role("decoupled_cache")
class DecoupledCache(Protocol):
    @property
    def policy(self) -> Any: ...
    @property
    def dims(self) -> Any: ...  # n_head, sem_head_dim, geo_head_dim, v_head_dim
    @property
    def batch(self) -> int: ...
    @property
    def max_len(self) -> int: ...
    @property
    def length(self) -> int: ...
    @property
    def residual_len(self) -> int: ...
    @property
    def k_sem(self) -> Any: ...
    @property
    def k_geo(self) -> Any: ...
    @property
    def v(self) -> Any: ...
    @property
    def prefix_len(self) -> int: ...
    @property
    def tail_len(self) -> int: ...

    def append(self, k_sem: torch.Tensor, k_geo: torch.Tensor, v: torch.Tensor) -> None:
        """Append one token per sequence (``[B, H·hd]`` each)."""
        ...

    def bytes_per_token(self) -> int:
        """Bytes one token of one sequence occupies in the three main buffers (no ring)."""
        ...


class Cache(Protocol):
    def decoupled_cache(
        self, policy: str, n_head: int, head_dims: tuple[int, int, int], batch: int, max_len: int
    ) -> DecoupledCache: ...


# Token ids are ``[B, T]`` (nested lists or an int tensor); logits are float32 tensors.
Tokens = Sequence[Sequence[int]] | torch.Tensor


@role("decoupled_session")
class DecoupledSession(Protocol):
    """Decode state of ``batch`` sequences of one shared length (one cache per layer)."""

    @property
    def length(self) -> int: ...

    def prefill(self, tokens: Tokens) -> torch.Tensor:
        """Exact attention over a prompt ``[B, T]`` of an empty session, then its keys cached;
        logits ``[B, T, vocab]``."""
        ...

    def step(self, tokens: Sequence[int], path: str = "auto") -> tuple[torch.Tensor, list[Any]]:
        """One decode step (``tokens[b]`` per sequence): logits ``[B, vocab]`` and one
        DispatchRecord per layer (``record.path`` is the path that ran)."""
        ...


@role("decoupled_model")
class DecoupledModel(Protocol):
    @property
    def config(self) -> dict[str, Any]: ...

    def weights(self) -> dict[str, torch.Tensor]:
        """Every parameter by name (float32 copies)."""
        ...

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Replace every parameter; all checked first (a failed call changes nothing)."""
        ...

    def save(self, path: str) -> None: ...

    def logits(
        self, tokens: Tokens, positions: Sequence[int] | None = None, stored: str | None = None
    ) -> torch.Tensor:
        """Exact (prefill) logits ``[B, T, vocab]``. ``positions``: RoPE positions ``[T]``
        (default ``0..T-1``). ``stored``: attend keys and values as a cache with this policy
        stores them (no residual), the values a decode reads back."""
        ...

    def approx_logits(self, tokens: Tokens) -> torch.Tensor:
        """Logits of the long-sequence approximation (DBA-008/DBA-009)."""
        ...

    def inspect(
        self, tokens: Tokens, layer: int, positions: Sequence[int] | None = None
    ) -> dict[str, torch.Tensor]:
        """Intermediate values of one layer: ``x`` (normed input ``[B, T, d_model]``),
        ``q_sem``, ``q_geo``, ``k_sem``, ``k_geo``, ``v`` (``[B, H, T, hd]``, queries scaled and
        rotated, k_geo rotated), ``gate`` (``[B, T, H]``), ``sem_logits`` / ``geo_logits``
        (``[B, H, T, T]``, scaled, unmasked), ``null_sem`` / ``null_geo`` (``[B, H, T]``, with a
        null token), ``attn`` (``[B, T, d_v]``, before out_proj) and ``out`` (after it)."""
        ...

    def out_proj_calls(self, tokens: Tokens, decode: bool = False) -> list[int]:
        """Calls of each layer's output projection during one forward of ``tokens`` (or, with
        ``decode``, one decode step per token), counted with a forward hook."""
        ...

    def start(
        self,
        policy: str,
        max_len: int,
        batch: int = 1,
        partition_size: int | None = None,
        two_pass_min_tokens: int | None = None,
    ) -> DecoupledSession: ...


class Model(Protocol):
    def decoupled_model(self, config: Mapping[str, Any], seed: int = 0) -> DecoupledModel:
        """A seeded random model; ``config`` overrides fields of the default tiny config."""
        ...

    def load_decoupled_model(self, path: str) -> DecoupledModel: ...


class Runner(Protocol):
    def decoupled_runner(self, argv: Sequence[str]) -> tuple[int, str, str]:
        """Run the model's command line; ``(exit status, stdout, stderr)``."""
        ...


CAPABILITIES = (
    capability("decoupled.cache", Cache, "the decoupled quantized KV cache"),
    capability(
        "decoupled.model", Model, "a decoupled-attention model: prefill, decode, checkpoint"
    ),
    capability("decoupled.runner", Runner, "the decoupled model's command line"),
)
