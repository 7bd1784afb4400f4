"""The ``transformers`` target: Hugging Face transformers (PyTorch) behind the adapter protocol.

Run the suite on it with::

    pip install -e '.[test,transformers]'
    pytest conformance --target conformance.targets.transformers:TransformersTarget

or ``nox -s transformers`` (the suite, then a table next to the reference and llama.cpp).

It is the worked example of an adapter for an engine that was not written for llama.cpp's
API and that only offers per-call forwards. **What the engine owns** -- everything that
produces a number: ``AutoModelForCausalLM.from_pretrained(dir, gguf_file=name)`` reads the
GGUF file and dequantizes its F32 / F16 / Q8_0 / Q4_0 tensors (un-permuting Q and K for its
rotate-half RoPE); ``AutoTokenizer.from_pretrained(dir, gguf_file=name)`` converts the SPM
vocabulary; the forward passes are the model's decoder, final norm and output head, called
with ``position_ids``, a 4-D ``attention_mask`` and a ``Cache``; K-shifts re-rotate cached keys
with the model's own rotary embedding and ``apply_rotary_pos_emb``; samplers are its logits
processors, ``torch.argmax`` and ``torch.multinomial``. **What the adapter supplies** -- the
books llama.cpp keeps and transformers does not: the cell table of a KV cache (position and
sequence set per cell, streams, slot search, sequence operations, the KQ mask handed to the
model), a transformers cache layer that stores K/V rows at the cells chosen for them,
llama_decode's batch contract and return codes (validated and split by the suite's own
sanitizer and splitter, ``reference_impl.batch``), the context sizes (llama.cpp's derivation,
``reference_impl.decoder.params``), output rows in batch order, pooling of embeddings, the
abort check between ubatches, the rendering of one token as bytes (transformers has no such
call), and the candidate-array layout of llama.cpp's sampler protocol. Those parts are
bookkeeping: when an invariant they enforce passes here, the credit is the adapter's.

Claimed: ``model.load``, ``model.forward``, ``model.weights``, ``tokenizer.tokenize``,
``decoder.logits``, ``decoder.memory_ops``, ``decoder.shift``, ``decoder.embeddings``,
``decoder.non_causal``, ``decoder.abort``, ``sampling.chain`` and the samplers its logits
processors provide (greedy, dist, top_k, top_p, min_p, typical, temp, logit_bias, penalties).
Not claimed, because the verdicts would be the borrowed code's: ``decoder.params`` (llama.cpp's
size derivation, from ``reference_impl.decoder.params``), ``decoder.batch_rules`` (the
reference's sanitizer and splitter), ``decoder.pooling`` (the reference's poolers),
``decoder.kv_dtype`` (F16 storage in the adapter's cache layer), ``sampling.input_checks`` (the
reference's chain-description parser). Not claimed otherwise: ``model.errors`` /
``decoder.errors`` (transformers raises its own exceptions, with no GGUF_* / DEC_* codes),
``decoder.faults`` and ``decoder.introspection`` (reference hooks), ``sampling.candidates``,
``sampling.selector`` and ``sampling.default_chain`` (no transformers counterpart), and the
component areas (batch, kv, memory, kernels, kv_quant, decoupled), which transformers does not
expose. Where transformers departs from llama.cpp is
written down, with evidence, in ``DIVERGENCES.md`` next to this file.

Modules: :mod:`.engine` (the loaded model, the cell-indexed cache layer, GGUF tensor names),
:mod:`.model`, :mod:`.tokenizer`, :mod:`.context` (decoder area), :mod:`.sampling`,
:mod:`.target` (the target class assembled from the per-area mixins).
"""

from __future__ import annotations

from conformance.targets.transformers.target import TransformersTarget

__all__ = ["TransformersTarget"]
