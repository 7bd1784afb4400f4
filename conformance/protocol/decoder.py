"""Protocol of the decoder area (spec/decoder.md): contexts that decode batches (``llama_context``).

A target creates contexts with ``new_context(model, **params)``; the parameters follow
``llama_context_params`` and each belongs to the capability that gives it a meaning
(:data:`PARAMS`): a test passes a parameter only when it declares that capability, so an
engine never receives one it did not claim. ``n_threads`` is a hint any engine may ignore.

The context a target returns is one object; each capability below describes the part of it
that capability uses (all tagged with the role ``context``). Decode results follow
``llama_decode``: 0 ok, 1 no memory slot, 2 aborted, -1 invalid batch, -2 / -3 failures. A
:class:`~reference_impl.batch.types.Batch` field that is None means a NULL pointer (llama.cpp's
defaults). Invalid output reads raise an exception (llama.cpp returns NULL).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from conformance.protocol import ProtocolMisuse, capability, role
from conformance.protocol.model import LoadsModels
from reference_impl.batch.types import Batch

# Parameters every context-creating capability may pass, as in llama_context_params.
# ``swa_full`` (default True) sizes the sliding-window cache of a model with window layers: the
# whole context, or False: the window plus one ubatch (MEM-015); other models ignore it.
CORE_PARAMS = (
    "n_ctx",
    "n_batch",
    "n_ubatch",
    "n_seq_max",
    "kv_unified",
    "n_outputs_max",
    "swa_full",
)
HINTS = ("n_threads",)  # an engine may ignore these


class CodedError(Protocol):
    """An error as the spec describes it: a stable ``code`` and where it applies."""

    @property
    def code(self) -> str: ...
    @property
    def field(self) -> str | None: ...
    @property
    def index(self) -> int | None: ...
    @property
    def seq_id(self) -> int | None: ...


# -- decoder.logits / decoder.params -------------------------------------------------------


@role("context")
class SizedContext(Protocol):
    """The sizes a context works with (``llama_n_ctx`` ...): every context reports them; that
    they are *derived from the parameters as llama.cpp derives them* is ``decoder.params``."""

    def n_ctx(self) -> int: ...
    def n_ctx_seq(self) -> int: ...
    def n_batch(self) -> int: ...
    def n_ubatch(self) -> int: ...
    def n_seq_max(self) -> int: ...


class Params(LoadsModels, Protocol):
    """``new_context`` derives the sizes as llama.cpp does, and refuses impossible ones
    (e.g. more sequences than output rows) by raising."""

    def new_context(self, model: Any, **params: Any) -> SizedContext: ...


@role("context")
class LogitsContext(SizedContext, Protocol):
    def decode(self, batch: Batch) -> int: ...

    def get_logits(self) -> np.ndarray:
        """``[n_outputs, n_vocab]`` float32 in batch order."""
        ...

    def get_logits_ith(self, i: int) -> np.ndarray:
        """Logits of batch token ``i`` (``i < 0``: rows from the end); raises if invalid."""
        ...

    def n_outputs(self) -> int: ...


class Logits(LoadsModels, Protocol):
    def new_context(self, model: Any, **params: Any) -> LogitsContext: ...


# -- decoder.memory_ops / decoder.shift ----------------------------------------------------


@role("context")
class MemoryOpsContext(Protocol):
    """``llama_memory_*`` on the context's memory. ``seq_add`` / ``seq_div`` move positions
    (visible in ``seq_pos_*``); that logits then follow the moved positions is
    ``decoder.shift``."""

    def memory_clear(self, data: bool = True) -> None: ...
    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool: ...
    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None: ...
    def seq_keep(self, seq_id: int) -> None: ...
    def seq_add(self, seq_id: int, p0: int, p1: int, delta: int) -> None: ...
    def seq_div(self, seq_id: int, p0: int, p1: int, d: int) -> None: ...
    def seq_pos_min(self, seq_id: int) -> int: ...
    def seq_pos_max(self, seq_id: int) -> int: ...


class MemoryOps(LoadsModels, Protocol):
    def new_context(self, model: Any, **params: Any) -> MemoryOpsContext: ...


class Shift(MemoryOps, Protocol):
    """After ``seq_add`` / ``seq_div`` the next decode re-rotates the cached keys (K-shift):
    logits equal those of a fresh context fed the shifted positions."""


# -- decoder.embeddings / decoder.non_causal / decoder.encode(_with_memory) ---------------


@role("context")
class EmbeddingsContext(Protocol):
    """With ``embeddings=True``: per-token rows (pooling NONE), or one row per sequence under
    ``decoder.pooling``; invalid requests raise."""

    def get_embeddings_ith(self, i: int) -> np.ndarray: ...
    def get_embeddings_seq(self, seq_id: int) -> np.ndarray: ...


class Embeddings(LoadsModels, Protocol):
    def new_context(self, model: Any, **params: Any) -> EmbeddingsContext: ...


class BatchRules(Logits, Protocol):
    """``decode`` itself applies llama_batch_allocr's rules (spec/batch.md): refuses (-1) the
    batches they refuse and fills missing positions, sequence ids and output flags as they do.
    An adapter that validates batches with borrowed code (e.g. the reference's sanitizer) must
    not claim it: the verdicts would be that code's, not the engine's."""


@role("context")
class PoolingContext(EmbeddingsContext, Protocol):
    def pooling_type(self) -> int:
        """``llama_pooling_type``: the pooling the context resolved at creation (-1 never)."""
        ...


class Pooling(Embeddings, Protocol):
    """``pooling`` (MEAN 1, CLS 2, LAST 3, NONE 0, -1 the model's) picks the pooled row of each
    sequence (``get_embeddings_seq``) as the engine computes it."""

    def new_context(self, model: Any, **params: Any) -> PoolingContext: ...


class NonCausal(Logits, Protocol):
    """``attention_type=1``: every token attends to every token of its ubatch."""


@role("context")
class EncodeContext(Protocol):
    def encode(self, batch: Batch) -> int:
        """``llama_encode``: the batch as one non-causal ubatch, nothing kept in memory."""
        ...


class Encode(LoadsModels, Protocol):
    def new_context(self, model: Any, **params: Any) -> EncodeContext: ...


class EncodeWithMemory(Encode, Protocol):
    """``encode`` on a context of a decoder model (one with memory), not only on an
    encoder-only model's: the batch is still one non-causal ubatch and the memory is left as
    it was. An engine that refuses or cannot survive that call (llama.cpp 0.3.36 crashes)
    claims ``decoder.encode`` alone."""


# -- decoder.abort / decoder.errors --------------------------------------------------------


@role("context")
class AbortContext(Protocol):
    def set_abort_callback(self, callback: Callable[[], bool] | None) -> None:
        """Asked during each ubatch's compute; True aborts the decode (code 2)."""
        ...


class Abort(LoadsModels, Protocol):
    def new_context(self, model: Any, **params: Any) -> AbortContext: ...


@role("context")
class ErrorsContext(Protocol):
    """After a non-zero decode, ``last_error`` holds the spec's code / field / index /
    seq_id; invalid output reads raise errors with ``OUT_*`` codes."""

    @property
    def last_error(self) -> CodedError | None: ...


class Errors(LoadsModels, Protocol):
    def new_context(self, model: Any, **params: Any) -> ErrorsContext: ...


# -- decoder.faults ------------------------------------------------------------------------


class Faults(LoadsModels, Protocol):
    """Test-only failure injection into a context of this target."""

    def new_context(self, model: Any, **params: Any) -> LogitsContext: ...

    def inject_failure(self, ctx: Any, ubatch: int, status: int) -> None:
        """The ``ubatch``-th ubatch computed from now on fails with a ComputeStatus
        (ALLOC_FAILED -2 or FAILED -1)."""
        ...

    def inject_fault(self, ctx: Any, kind: str) -> None:
        """The next decode hits one flow failure: ``memory_no_update``,
        ``memory_failed_compute``, ``output_reserve``, ``output_rows`` or ``output_total``."""
        ...


# -- decoder.sample_router -----------------------------------------------------------------


@role("context")
class SampleRouterContext(Protocol):
    def set_sampler(self, seq_id: int, chain: Any) -> None:
        """Attach a sampler chain description (or None) to a sequence."""
        ...

    def get_sampled_token_ith(self, i: int) -> int: ...
    def seq_output_rows(self, seq_id: int) -> list[int]: ...


class SampleRouter(LoadsModels, Protocol):
    def new_context(self, model: Any, **params: Any) -> SampleRouterContext: ...


# -- decoder.graph_reuse ------------------------------------------------------------------


@role("context")
class GraphReuseContext(Protocol):
    def n_reused(self) -> int:
        """Compute graphs (plans) reused since the context was created (llama.cpp's
        ``llama_perf_context_data.n_reused``)."""
        ...


class GraphReuse(LoadsModels, Protocol):
    """``graph_reuse=False`` turns compute-graph reuse off for a context
    (``LLAMA_GRAPH_REUSE_DISABLE=1`` on llama.cpp)."""

    def new_context(self, model: Any, **params: Any) -> GraphReuseContext: ...


# -- reference-specific views (white-box) --------------------------------------------------


@role("context")
class IntrospectionContext(Protocol):
    """The reference's inside view: decode ``trace`` (with ``trace=True``), graph
    ``scheduler``, output buffers, the memory, the output id mapping."""

    @property
    def trace(self) -> Any: ...
    @property
    def scheduler(self) -> Any: ...
    @property
    def outputs(self) -> Any: ...
    @property
    def memory(self) -> Any: ...

    def output_ids(self) -> np.ndarray: ...
    def reorder_outputs(self) -> None: ...
    def seq_output_rows(self, seq_id: int) -> list[int]: ...


class Introspection(LoadsModels, Protocol):
    def new_context(self, model: Any, **params: Any) -> IntrospectionContext: ...


class KvDtype(Logits, Protocol):
    """``kv_dtype`` (a torch dtype: float32 or float16) sets the K/V cache element type."""


@role("context")
class NativeContext(Protocol):
    @property
    def native_reason(self) -> str: ...


class Native(LoadsModels, Protocol):
    """``decode_path`` = auto | native | torch picks the reference's one-token C step."""

    def new_context(self, model: Any, **params: Any) -> NativeContext: ...


@role("context")
class AttentionBackendContext(Protocol):
    @property
    def kernel_trace(self) -> list[Any]: ...


class AttentionBackend(LoadsModels, Protocol):
    """``attention_backend`` = torch | triton | triton-1pass | triton-2pass."""

    def new_context(self, model: Any, **params: Any) -> AttentionBackendContext: ...


CAPABILITIES = (
    capability("decoder.params", Params, "context sizes derived from the parameters"),
    capability("decoder.logits", Logits, "decode batches, read logits in batch order"),
    capability("decoder.memory_ops", MemoryOps, "sequence operations on the context memory"),
    capability("decoder.shift", Shift, "K-shift: logits follow seq_add / seq_div"),
    capability("decoder.batch_rules", BatchRules, "decode applies llama_batch_allocr's rules"),
    capability(
        "decoder.embeddings", Embeddings, "embeddings of every token", params=("embeddings",)
    ),
    capability("decoder.pooling", Pooling, "pooled embeddings per sequence", params=("pooling",)),
    capability("decoder.non_causal", NonCausal, "non-causal attention", params=("attention_type",)),
    capability("decoder.encode", Encode, "llama_encode"),
    capability(
        "decoder.encode_with_memory", EncodeWithMemory, "llama_encode on a context with memory"
    ),
    capability("decoder.abort", Abort, "the abort callback"),
    capability("decoder.errors", Errors, "typed errors behind non-zero codes"),
    capability("decoder.faults", Faults, "injected compute and flow failures (tests)"),
    capability(
        "decoder.sample_router",
        SampleRouter,
        "samplers attached to sequences",
        params=("n_outputs_max_per_seq",),
    ),
    capability(
        "decoder.introspection",
        Introspection,
        "the reference's trace, plans, buffers and memory",
        params=("trace",),
    ),
    capability(
        "decoder.graph_reuse",
        GraphReuse,
        "compute-graph reuse can be turned off and counted",
        params=("graph_reuse",),
    ),
    capability("decoder.kv_dtype", KvDtype, "the K/V cache element type", params=("kv_dtype",)),
    capability("decoder.native", Native, "the native one-token step", params=("decode_path",)),
    capability(
        "decoder.attention_backend",
        AttentionBackend,
        "the Triton attention backend",
        params=("attention_backend",),
    ),
)

# parameter -> the capability that gives it a meaning
PARAMS: dict[str, str] = {p: cap.name for cap in CAPABILITIES for p in cap.params}


def _context_params(args: tuple[Any, ...], kwargs: dict[str, Any]) -> set[str]:
    needed: set[str] = set()
    for name in kwargs:
        if name in PARAMS:
            needed.add(PARAMS[name])
        elif name not in CORE_PARAMS and name not in HINTS:
            known = ", ".join(sorted({*CORE_PARAMS, *HINTS, *PARAMS}))
            raise ProtocolMisuse(f"new_context has no parameter {name!r} (known: {known})")
    return needed


ARGUMENT_RULES = {"new_context": _context_params}
