"""reference_impl: a readable reference decoder with llama.cpp's decode semantics.

Public API (filled in as areas land): Batch, errors; Model, Context, samplers and the
generator arrive with the decoder.
"""

from reference_impl.batch.types import LLAMA_MAX_SEQ, Batch, UBatch
from reference_impl.errors import BatchError, EngineError

__all__ = ["LLAMA_MAX_SEQ", "Batch", "BatchError", "EngineError", "UBatch"]
