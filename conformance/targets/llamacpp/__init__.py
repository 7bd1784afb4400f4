"""The ``llamacpp`` target: llama.cpp (through llama-cpp-python) behind the target protocol.

All of the llama.cpp adapter lives in this package: :mod:`.runtime` (ctypes over llama.cpp's C
API: model, context, batches passed with NULL fields, memory operations, tokenizer),
:mod:`.model` (model and tokenizer areas), :mod:`.decoder` (decode contexts), :mod:`.sampling`
(llama.cpp's CPU samplers) and :mod:`.allocator` (ggml's allocator, through ctypes over
``libggml-base.so``).

It claims what llama.cpp's public API shows: model loading, full-sequence logits and
tokenization, decode contexts (sizes, logits, memory operations, K-shift, embeddings, non-causal
attention, abort, an F16 or F32 K/V cache, graph reuse switched off and counted), the sampler
chain with each sampler it exposes and backend sampling (chains attached to sequences, run in
the decode graph), and ggml-alloc.h: the linear allocator, the graph planner and
the context-tensor helper. Not claimed, so skipped and counted: what llama.cpp does not expose
(its sanitizer and splitter, KV cells, compute traces, dequantized weights, typed error codes,
ggml's chunk allocator, which is static in ggml-alloc.c) and what only the adapter would be
doing: the candidate builder and the checks of the chain-description format, which the adapter
borrows from the reference (claiming them would report the reference's verdicts as llama.cpp's).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from conformance.protocol.sampling import SAMPLERS
from conformance.targets.base import Target
from conformance.targets.llamacpp.allocator import LlamaCppAllocator
from conformance.targets.llamacpp.decoder import LlamaCppDecodeContext, runtime_module
from conformance.targets.llamacpp.model import LlamaCppModels
from conformance.targets.llamacpp.sampling import LlamaCppSampling


class LlamaCppTarget(LlamaCppModels, LlamaCppSampling, LlamaCppAllocator, Target):
    name = "llamacpp"
    capabilities = frozenset(
        {
            "model.load",
            "model.forward",
            "model.vocab_only",
            "model.check_tensors",
            "model.arch.gemma3",
            "model.arch.qwen2vl",
            "model.arch.bert",
            "tokenizer.tokenize",
            "tokenizer.vocab_only",
            "decoder.params",
            "decoder.logits",
            "decoder.memory_ops",
            "decoder.shift",
            "decoder.batch_rules",
            "decoder.embeddings",
            "decoder.pooling",
            "decoder.non_causal",
            "decoder.encode",
            "decoder.abort",
            "decoder.kv_dtype",
            "decoder.graph_reuse",
            "sampling.chain",
            "sampling.default_chain",
            "sampling.dry_strings",
            "sampling.backend",
            *SAMPLERS,
            "allocator.linear",
            "allocator.planner",
            "allocator.ctx_tensors",
        }
    )

    def __init__(self) -> None:
        rt = runtime_module()
        self.version = f"llama-cpp-python {rt.version()}"
        self._models: dict[Any, Any] = {}
        self.n_threads = int(os.environ.get("DC_LLAMACPP_THREADS", "1"))

    def load_model(self, path: str | os.PathLike[str]) -> Any:
        """One llama_model per file version (loading is the slow part of most tests)."""
        p = Path(path).resolve()
        st = p.stat()
        key = (str(p), st.st_mtime_ns, st.st_size)
        if key not in self._models:
            self._models[key] = super().load_model(p)
        return self._models[key]

    def new_context(self, model: Any, **params: Any) -> LlamaCppDecodeContext:
        params.setdefault("n_threads", self.n_threads)
        return LlamaCppDecodeContext(model, **params)
