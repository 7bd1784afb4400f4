"""Mutants of the native one-token decode step and of its place in the decoder (decision D17).

The step's own defects are broken *builds* of the same C source (``DC_MUTANT_*`` defines,
compiled into their own cached library); the others patch the Python around it. DEC-060 ..
DEC-063 must catch each against the torch forward.
"""

from __future__ import annotations

from typing import Any

import torch

from conformance.mutants import Mutant, replace


def _build(define: str) -> Any:
    def apply(target: Any) -> Any:
        from reference_impl.native import build

        library = build.load((define,))
        if library.lib is None:  # a mutant that cannot be built must not pass as killed
            raise RuntimeError(library.reason)
        replace("reference_impl.native.step", "load", lambda: library)
        return target

    return apply


def _wrong_cell(target: Any) -> Any:
    # The slot's neighbour receives the token's K/V.
    from reference_impl.kv.cache import KVCache

    original = KVCache.single_cell

    def single_cell(self: KVCache, sinfo: Any) -> tuple[int, int] | None:
        cell = original(self, sinfo)
        return None if cell is None else (cell[0], (cell[1] + 1) % self.kv_size)

    KVCache.single_cell = single_cell  # type: ignore[method-assign]
    return target


def _wrap_native_decode_path(change: Any) -> None:
    """Replace Context._native_decode_path by ``change(self, name, step, reason)`` applied to
    the original's result."""
    from reference_impl.decoder.context import Context

    original = Context._native_decode_path

    def native_decode_path(self: Context, name: str) -> tuple[Any, str]:
        return change(self, name, *original(self, name))

    Context._native_decode_path = native_decode_path  # type: ignore[method-assign]


def _never_native(target: Any) -> Any:
    # "auto" and "native" both run the torch forward, and the context still says "native".
    _wrap_native_decode_path(lambda self, name, step, reason: (None, reason))
    return target


def _fallback_raises(target: Any) -> Any:
    # "auto" refuses to create a context the native step cannot serve (no library, F16 K/V, ...)
    # instead of falling back to the torch forward.
    from reference_impl.errors import DecoderError

    def change(self: Any, name: str, step: Any, reason: str) -> tuple[Any, str]:
        if step is None and name == "auto":
            raise DecoderError("DEC_NATIVE_UNAVAILABLE", reason, field="decode_path")
        return step, reason

    _wrap_native_decode_path(change)
    return target


def _f16_kv_read_raw(target: Any) -> Any:
    # The forward gets the cache's float16 views as they are.
    def kv_reader(cache: Any, streams: tuple[int, ...], n_kv: int) -> Any:
        def read(il: int) -> tuple[torch.Tensor, torch.Tensor]:
            views = [cache.kv_view(il, st, n_kv) for st in streams]
            return torch.cat([k for k, _ in views]), torch.cat([v for _, v in views])

        return read

    replace("reference_impl.decoder.ubatch_executor", "kv_reader", kv_reader)
    return target


MUTANTS = [
    Mutant(
        "native-rope-split-halves",
        "decoder",
        "the native step rotates (x[j], x[j + d/2]) pairs (NEOX) instead of adjacent pairs",
        ("DEC-060",),
        _build("DC_MUTANT_ROPE_HALVES"),
    ),
    Mutant(
        "native-mask-ignored",
        "decoder",
        "the native step attends every cell up to n_kv, ignoring the KQ mask",
        ("DEC-060",),
        _build("DC_MUTANT_MASK_IGNORED"),
    ),
    Mutant(
        "native-gqa-heads-tiled",
        "decoder",
        "the native step maps query head h to KV head h % n_head_kv",
        ("DEC-060",),
        _build("DC_MUTANT_GQA_TILED"),
    ),
    Mutant(
        "native-kv-not-written",
        "decoder",
        "the native step attends without storing the token's K/V in the cache",
        ("DEC-060", "DEC-061"),
        _build("DC_MUTANT_KV_NOT_WRITTEN"),
    ),
    Mutant(
        "native-wrong-cell",
        "decoder",
        "the native step writes the token's K/V into the cell after the slot",
        ("DEC-061",),
        _wrong_cell,
    ),
    Mutant(
        "native-never-runs",
        "decoder",
        "one-token ubatches silently run the torch forward while the context reports native",
        ("DEC-060", "DEC-062"),
        _never_native,
    ),
    Mutant(
        "native-fallback-raises",
        "decoder",
        "an 'auto' context without the native library fails at creation instead of falling back",
        ("DEC-063",),
        _fallback_raises,
    ),
    Mutant(
        "dec-f16-kv-read-raw",
        "decoder",
        "the torch forward reads a float16 K/V cache without converting it to float32",
        ("DEC-064",),
        _f16_kv_read_raw,
    ),
]
