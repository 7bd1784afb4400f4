"""Static proof that the reference adapter satisfies the protocol (checked by mypy in the
``typecheck`` session; nothing here runs).

The reference target is assembled at import time from one mixin per area, which mypy cannot
follow, so the same mixins are combined here statically and the result is assigned to every
capability's Protocol: a method missing, renamed, or with an incompatible signature (or a returned
context lacking a method the protocol needs) is a type error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conformance.protocol import (
        allocator,
        batch,
        decoder,
        decoupled,
        kernels,
        kv,
        kv_quant,
        memory,
        model,
        sampling,
        tokenizer,
    )
    from conformance.targets.reference import allocator as r_allocator
    from conformance.targets.reference import batch as r_batch
    from conformance.targets.reference import decoder as r_decoder
    from conformance.targets.reference import decoupled as r_decoupled
    from conformance.targets.reference import kernels as r_kernels
    from conformance.targets.reference import kv as r_kv
    from conformance.targets.reference import kv_quant as r_kv_quant
    from conformance.targets.reference import memory as r_memory
    from conformance.targets.reference import model as r_model
    from conformance.targets.reference import sampling as r_sampling
    from conformance.targets.reference import tokenizer as r_tokenizer

    class _Reference(
        r_allocator.Reference,
        r_batch.Reference,
        r_decoder.Reference,
        r_decoupled.Reference,
        r_kernels.Reference,
        r_kv.Reference,
        r_kv_quant.Reference,
        r_memory.Reference,
        r_model.Reference,
        r_sampling.Reference,
        r_tokenizer.Reference,
    ):
        name = "reference"
        version = "static"

    def _conforms(t: _Reference) -> None:
        # one assignment per capability Protocol, so mypy names the member that conflicts
        _a1: allocator.Linear = t
        _a2: allocator.Chunks = t
        _a3: allocator.Planning = t
        _a4: allocator.CtxTensors = t
        _a5: allocator.Errors = t
        _b1: batch.Sanitize = t
        _b2: batch.Split = t
        _b3: batch.SplitPlans = t
        _d1: decoder.Params = t
        _d2: decoder.Logits = t
        _d3: decoder.MemoryOps = t
        _d4: decoder.Shift = t
        _d5: decoder.Embeddings = t
        _d6: decoder.NonCausal = t
        _d7: decoder.Encode = t
        _d8: decoder.Abort = t
        _d9: decoder.Errors = t
        _d10: decoder.Faults = t
        _d11: decoder.SampleRouter = t
        _d12: decoder.Introspection = t
        _d13: decoder.KvDtype = t
        _d14: decoder.Native = t
        _d15: decoder.AttentionBackend = t
        _d16: decoder.BatchRules = t
        _d17: decoder.Pooling = t
        _d18: decoder.GraphReuse = t
        _d19: decoder.EncodeWithMemory = t
        _c1: decoupled.Cache = t
        _c2: decoupled.Model = t
        _c3: decoupled.Runner = t
        _k1: kernels.GqaDecode = t
        _k2: kernels.DecoupledDecode = t
        _v1: kv.Cache = t
        _v2: kv.Storage = t
        _v3: kv.Mask = t
        _q1: kv_quant.Formats = t
        _q2: kv_quant.Policy = t
        _m1: memory.Statuses = t
        _m2: memory.Kinds = t
        _m3: memory.Coordination = t
        _o1: model.LoadsModels = t
        _o2: model.Forward = t
        _o3: model.Weights = t
        _o4: model.Errors = t
        _o5: model.VocabOnly = t
        _o6: model.CheckTensors = t
        _o7: model.Gemma3 = t
        _o8: model.Qwen2VL = t
        _o9: model.Bert = t
        _s1: sampling.Chain = t
        _s2: sampling.DefaultChain = t
        _s3: sampling.InputChecks = t
        _s4: sampling.Candidates = t
        _s5: sampling.Selector = t
        _s6: sampling.DryStrings = t
        _s7: sampling.Pipeline = t
        _s8: sampling.Backend = t
        _t1: tokenizer.Tokenize = t
        _t2: tokenizer.LoadsVocab = t
