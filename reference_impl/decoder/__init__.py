"""The decoder: ``Context`` (seed 000's seven-step decode flow) and its parts."""

from reference_impl.decoder.context import Context
from reference_impl.decoder.params import AttentionType, ContextParams
from reference_impl.decoder.pooling import PoolingType

__all__ = ["AttentionType", "Context", "ContextParams", "PoolingType"]
