"""Structural validation of a Batch: ranks, lengths and dtypes of its fields (SAN_SHAPE).

llama.cpp receives raw C arrays whose lengths it cannot check; a Python record can be checked,
so every field is validated and copied into an owned array before any rule runs. Shared by the
vectorized and the scalar sanitizer (it is not a per-token rule).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reference_impl.batch.codes import SAN_SHAPE, fail
from reference_impl.batch.types import Batch
from reference_impl.spec_links import implements

_I32_MIN = -(2**31)
_I32_MAX = 2**31 - 1


@dataclass(frozen=True, eq=False)
class Fields:
    """Owned copies of a batch's fields; ``None`` where the field was absent."""

    n: int
    token: np.ndarray | None  # int32 [n]
    embd: np.ndarray | None  # float32 [n, n_embd]
    pos: np.ndarray | None  # int32 [n] or [n_pos, n]
    n_seq_id: np.ndarray | None  # int32 [n]
    seq_id: np.ndarray | None  # int32 [n, k], k >= 1
    logits: np.ndarray | None  # int8 [n], 0/1

    @property
    def has_token(self) -> bool:
        return self.token is not None


def _int32(x: object, field: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype == np.int32:
        return np.array(arr, dtype=np.int32, copy=True)
    if arr.dtype.kind not in "iub":
        raise fail(SAN_SHAPE, f"{field} must hold integers, got dtype {arr.dtype}", field=field)
    if arr.size and arr.dtype.kind != "b" and (arr.min() < _I32_MIN or arr.max() > _I32_MAX):
        raise fail(SAN_SHAPE, f"{field} holds values outside int32", field=field)
    return arr.astype(np.int32, copy=True)


def _expect_len(arr: np.ndarray, n: int, field: str) -> None:
    if arr.ndim != 1 or arr.shape[0] != n:
        raise fail(
            SAN_SHAPE,
            f"{field} must have shape ({n},), got {tuple(arr.shape)}",
            field=field,
        )


@implements("SAN-003", "SAN-014", "SAN-022", "SAN-025")
def normalize_fields(batch: Batch, n_pos_per_embd: int) -> Fields:
    """Validate shapes and dtypes; return owned int32/float32/int8 copies of every field."""
    token = None if batch.token is None else _int32(batch.token, "token")
    if token is not None and token.ndim != 1:
        raise fail(SAN_SHAPE, f"token must be 1-D, got shape {tuple(token.shape)}", field="token")
    embd = None
    if batch.embd is not None:
        raw = np.asarray(batch.embd)
        n = token.shape[0] if token is not None else (raw.shape[0] if raw.ndim >= 1 else 0)
        if raw.dtype.kind not in "fiu":
            raise fail(SAN_SHAPE, f"embd must hold numbers, got dtype {raw.dtype}", field="embd")
        if raw.ndim != 2 or raw.shape[0] != n or raw.shape[1] < 1:
            raise fail(
                SAN_SHAPE,
                f"embd must have shape ({n}, n_embd >= 1), got {tuple(raw.shape)}",
                field="embd",
            )
        embd = np.array(raw, dtype=np.float32, copy=True)

    n = token.shape[0] if token is not None else (0 if embd is None else embd.shape[0])

    pos = None
    if batch.pos is not None:
        pos = _int32(batch.pos, "pos")
        if token is None and n_pos_per_embd > 1:
            # embedding batch with M-RoPE: one plane per section, section-major
            if pos.ndim == 1 and pos.shape[0] == n_pos_per_embd * n:
                pos = pos.reshape(n_pos_per_embd, n)
            if pos.shape != (n_pos_per_embd, n):
                raise fail(
                    SAN_SHAPE,
                    f"an embedding batch with n_pos_per_embd={n_pos_per_embd} needs pos of shape "
                    f"({n_pos_per_embd}, {n}) (section-major), got {tuple(np.shape(batch.pos))}",
                    field="pos",
                )
        else:
            _expect_len(pos, n, "pos")

    seq_id = None
    if batch.seq_id is not None:
        seq_id = _int32(batch.seq_id, "seq_id")
        if seq_id.ndim == 1:
            seq_id = seq_id.reshape(-1, 1)
        if seq_id.ndim != 2 or seq_id.shape[0] != n or seq_id.shape[1] < 1:
            raise fail(
                SAN_SHAPE,
                f"seq_id must have shape ({n}, k >= 1), got {tuple(np.shape(batch.seq_id))}",
                field="seq_id",
            )

    n_seq_id = None
    if batch.n_seq_id is not None:
        n_seq_id = _int32(batch.n_seq_id, "n_seq_id")
        _expect_len(n_seq_id, n, "n_seq_id")

    logits = None
    if batch.logits is not None:
        raw_l = np.asarray(batch.logits)
        if raw_l.dtype.kind not in "iub":
            raise fail(
                SAN_SHAPE, f"logits must hold flags, got dtype {raw_l.dtype}", field="logits"
            )
        _expect_len(raw_l, n, "logits")
        logits = (raw_l != 0).astype(np.int8)

    return Fields(
        n=n, token=token, embd=embd, pos=pos, n_seq_id=n_seq_id, seq_id=seq_id, logits=logits
    )
