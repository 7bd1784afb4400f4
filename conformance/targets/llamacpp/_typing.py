"""Static proof that the llamacpp adapter satisfies the Protocols of the capabilities it claims
(checked by mypy in the ``typecheck`` session; nothing here runs)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conformance.protocol import allocator, decoder, model, sampling, tokenizer
    from conformance.targets.llamacpp import LlamaCppTarget

    def _conforms(t: LlamaCppTarget) -> None:
        _o1: model.LoadsModels = t
        _o2: model.Forward = t
        _o3: model.VocabOnly = t
        _o4: model.CheckTensors = t
        _o5: model.Gemma3 = t
        _o6: model.Qwen2VL = t
        _o7: model.Bert = t
        _t1: tokenizer.Tokenize = t
        _t2: tokenizer.LoadsVocab = t
        _d1: decoder.Params = t
        _d2: decoder.Logits = t
        _d3: decoder.MemoryOps = t
        _d4: decoder.Shift = t
        _d5: decoder.Embeddings = t
        _d6: decoder.NonCausal = t
        _d7: decoder.Abort = t
        _d8: decoder.BatchRules = t
        _d9: decoder.Pooling = t
        _d10: decoder.KvDtype = t
        _d11: decoder.GraphReuse = t
        _d12: decoder.Encode = t
        _s1: sampling.Chain = t
        _s2: sampling.DefaultChain = t
        _s3: sampling.DryStrings = t
        _s4: sampling.Backend = t
        _a1: allocator.Linear = t
        _a2: allocator.Planning = t
        _a3: allocator.CtxTensors = t
