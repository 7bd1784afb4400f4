"""The native fast path: a one-token llama decode step compiled from C on first use.

The torch forward (:mod:`reference_impl.model.llama`) defines the reference; this package runs
the same computation for one-token ubatches without per-op dispatch. See ``decode_step.c`` for
why, :mod:`.build` for how it is compiled and cached, :mod:`.step` for the binding.
"""

from reference_impl.native.build import NativeLibrary, load
from reference_impl.native.step import NativeDecodeStep, unsupported

__all__ = ["NativeDecodeStep", "NativeLibrary", "load", "unsupported"]
