"""GGML tensor storage types to float32: F32, F16 and the Q8_0 / Q4_0 block formats.

Written from the block layouts (ggml ``ggml-common.h``), independently of ``gguf.quants``, which
the tests use as the oracle:

* ``block_q8_0``: an fp16 scale ``d`` then 32 int8 ``qs``; value ``j`` is ``qs[j] * d``
  (34 bytes per 32 values);
* ``block_q4_0``: an fp16 scale ``d`` then 16 bytes ``qs``; value ``j`` (0..15) is
  ``((qs[j] & 0xF) - 8) * d`` and value ``j + 16`` is ``((qs[j] >> 4) - 8) * d`` -- the low
  nibbles hold the first half of the block, not adjacent pairs (18 bytes per 32 values).

Scales are little-endian fp16 and are widened to float32 before multiplying, as ggml does.
"""

from __future__ import annotations

import numpy as np

from reference_impl.spec_links import implements

QK = 32  # values per block for Q8_0 and Q4_0
Q8_0_BYTES = 2 + QK
Q4_0_BYTES = 2 + QK // 2

# ggml type ids (ggml.h ``enum ggml_type``) of the storage types the loader accepts.
GGML_F32 = 0
GGML_F16 = 1
GGML_Q4_0 = 2
GGML_Q8_0 = 8
TYPE_NAMES = {GGML_F32: "F32", GGML_F16: "F16", GGML_Q4_0: "Q4_0", GGML_Q8_0: "Q8_0"}


def _scales(blocks: np.ndarray) -> np.ndarray:
    """The fp16 scale at the start of each block, as a float32 column ``[n_blocks, 1]``."""
    return np.ascontiguousarray(blocks[:, :2]).view("<f2").astype(np.float32)


@implements("GGUF-002")
def dequantize_q8_0(raw: np.ndarray, n_values: int) -> np.ndarray:
    """``raw``: the uint8 bytes of ``n_values / 32`` Q8_0 blocks -> float32 ``[n_values]``."""
    blocks = np.asarray(raw, dtype=np.uint8).reshape(-1, Q8_0_BYTES)
    if blocks.shape[0] * QK != n_values:
        raise ValueError(f"Q8_0: {blocks.shape[0]} blocks cannot hold {n_values} values")
    qs = blocks[:, 2:].view(np.int8).astype(np.float32)
    with np.errstate(invalid="ignore"):  # an inf/nan scale gives nan, as in ggml
        return (qs * _scales(blocks)).reshape(-1)


@implements("GGUF-003")
def dequantize_q4_0(raw: np.ndarray, n_values: int) -> np.ndarray:
    """``raw``: the uint8 bytes of ``n_values / 32`` Q4_0 blocks -> float32 ``[n_values]``."""
    blocks = np.asarray(raw, dtype=np.uint8).reshape(-1, Q4_0_BYTES)
    if blocks.shape[0] * QK != n_values:
        raise ValueError(f"Q4_0: {blocks.shape[0]} blocks cannot hold {n_values} values")
    qs = blocks[:, 2:]
    low = (qs & 0x0F).astype(np.int8) - 8  # values 0..15 of the block
    high = (qs >> 4).astype(np.int8) - 8  # values 16..31
    q = np.concatenate([low, high], axis=1).astype(np.float32)
    with np.errstate(invalid="ignore"):
        return (q * _scales(blocks)).reshape(-1)


@implements("GGUF-004", "GGUF-022")
def dequantize(raw: np.ndarray, ggml_type: int, shape: tuple[int, ...]) -> np.ndarray:
    """Storage array of a GGUF tensor -> float32 array of numpy ``shape`` (ggml dims reversed).

    ``raw`` is what ``gguf.GGUFReader`` exposes: typed values for F32/F16, block bytes for the
    quantized types. Raises ``ValueError`` for any other type (the loader names the tensor).
    """
    n = int(np.prod(shape))
    if ggml_type == GGML_F32:
        out = np.array(raw, dtype=np.float32).reshape(-1)  # a copy: raw may be a read-only memmap
    elif ggml_type == GGML_F16:
        out = np.asarray(raw).view("<f2").astype(np.float32).reshape(-1)
    elif ggml_type == GGML_Q8_0:
        out = dequantize_q8_0(raw, n)
    elif ggml_type == GGML_Q4_0:
        out = dequantize_q4_0(raw, n)
    else:
        raise ValueError(f"unsupported ggml type {ggml_type}")
    if out.size != n:
        raise ValueError(f"{out.size} values for shape {shape}")
    return out.reshape(shape)
