"""Deterministic inputs for the kernel tests: GQA cache views and decoupled caches + oracles."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch

from conformance.kernels import _oracle
from conformance.kv_quant import oracle as quant_oracle
from kernels._triton import kernel_device
from kernels.decoupled_cache import DecoupledDims, NullKV

FUSED_POLICY = "ksem=q4_0@32,kgeo=q8_0@32,v=q4_0@32,resid={resid}"
NULL_MODES = ("none", "contiguous", "broadcast", "strided")
# Inputs are drawn on the CPU (reproducible everywhere) and moved to where the kernels run:
# the CPU under the interpreter, the GPU when compiled.
DEVICE = kernel_device()


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------------------------
# GQA decode over views of a [n_stream, kv_size, n_head_kv, head_dim] cache
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GqaCase:
    n_tokens: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16
    n_kv: int = 40
    kv_size: int = 64
    v_head_dim: int | None = None  # None: head_dim
    n_stream: int = 2
    stream: int = 1
    dtype: str = "float32"
    fully_masked_row: bool = False
    seed: int = 0

    def id(self) -> str:
        return (
            f"T{self.n_tokens}-H{self.n_head}/{self.n_head_kv}-D{self.head_dim}-kv{self.n_kv}"
            f"-{self.dtype}{'-masked' if self.fully_masked_row else ''}"
        )


@dataclass
class GqaInputs:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    mask: torch.Tensor
    scale: float
    expected: np.ndarray  # oracle output, float64


def build_gqa(case: GqaCase) -> GqaInputs:
    g = _gen(case.seed)
    dt = getattr(torch, case.dtype)
    shape = (case.n_stream, case.kv_size, case.n_head_kv, case.head_dim)
    dv = case.head_dim if case.v_head_dim is None else case.v_head_dim
    k_store = torch.randn(shape, generator=g).to(dt)
    v_store = torch.randn((*shape[:3], dv), generator=g).to(dt)
    k_store, v_store = k_store.to(DEVICE), v_store.to(DEVICE)
    k = k_store[case.stream, : case.n_kv]  # a view: strided by stream, row-major inside
    v = v_store[case.stream, : case.n_kv]
    q = (torch.randn(case.n_tokens, case.n_head, case.head_dim, generator=g) * 2.0).to(dt)
    q = q.to(DEVICE)
    mask = torch.zeros(case.n_tokens, case.n_kv)
    for t in range(case.n_tokens):  # a causal-looking pattern with a few holes
        visible = case.n_kv - (case.n_tokens - 1 - t)
        mask[t, max(visible, 0) :] = -math.inf
        mask[t, 3 : case.n_kv : 7] = -math.inf
    if case.fully_masked_row and case.n_tokens:
        mask[case.n_tokens - 1] = -math.inf
    mask = mask.to(DEVICE)
    scale = 1.0 / math.sqrt(case.head_dim)
    expected = _oracle.gqa(
        q.double().cpu().numpy(),
        k.double().cpu().numpy(),
        v.double().cpu().numpy(),
        mask.cpu().numpy(),
        scale,
    )
    return GqaInputs(q, k, v, mask, scale, expected)


# ---------------------------------------------------------------------------------------------
# Decoupled decode over a q4_0 / q8_0 / q4_0 cache
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecoupledCase:
    batch: int = 2
    n_head: int = 2
    sem_head_dim: int = 16
    geo_head_dim: int = 32
    v_head_dim: int = 64
    length: int = 40
    resid: int = 0
    null: str = "none"
    policy: str = ""  # "" -> the fused layout with ``resid``
    q_gain: float = 2.0  # sharpens the softmax so that scaling errors show
    seed: int = 0

    @property
    def dims(self) -> DecoupledDims:
        return DecoupledDims(self.n_head, self.sem_head_dim, self.geo_head_dim, self.v_head_dim)

    def id(self) -> str:
        return (
            f"B{self.batch}H{self.n_head}-L{self.length}-r{self.resid}-null:{self.null}"
            f"-d{self.sem_head_dim}/{self.geo_head_dim}/{self.v_head_dim}"
        )


@dataclass
class DecoupledInputs:
    q_sem: torch.Tensor
    q_geo: torch.Tensor
    cache: Any  # a DecoupledKVCache (or a target's cache with the same buffers)
    null: NullKV | None
    sem_scale: float
    geo_scale: float
    expected: np.ndarray  # oracle output [B, H, dv], float64
    oracle_inputs: _oracle.DecoupledInputs


def _null(case: DecoupledCase, g: torch.Generator) -> NullKV | None:
    if case.null == "none":
        return None
    b, h = case.batch, case.n_head
    dims = (case.sem_head_dim, case.geo_head_dim, case.v_head_dim)
    if case.null == "broadcast":  # learned per-head parameters [H, hd], broadcast over batch
        ks, kg, vn = (torch.randn(h, d, generator=g).to(DEVICE) for d in dims)
    elif case.null == "contiguous":
        ks, kg, vn = (torch.randn(b, h, d, generator=g).to(DEVICE) for d in dims)
    elif case.null == "strided":  # head-major storage, every other element: no unit stride
        bases = [torch.randn(h, b, 2 * d, generator=g).to(DEVICE) for d in dims]
        ks, kg, vn = (x.transpose(0, 1)[..., ::2] for x in bases)
    else:
        raise ValueError(case.null)
    return NullKV(ks, kg, vn)


def oracle_inputs(cache: Any, null: NullKV | None) -> _oracle.DecoupledInputs:
    """What the decode must attend, read from the cache buffers with the oracle's dequantizer."""
    n_head = cache.dims.n_head
    parts = []
    for ct in (cache.k_sem, cache.k_geo, cache.v):
        fmt = ct.fmt
        n_pre = cache.prefix_len
        if fmt.quantized:
            assert ct.codes is not None and ct.scales is not None
            pre = quant_oracle.dequantize(
                ct.codes[:, :n_pre].cpu().numpy(),
                ct.scales[:, :n_pre].cpu().numpy(),
                fmt.kind,
                fmt.qblock,
                ct.dim,
            )
            # the tail of a quantized tensor is its fp16 ring, which only a cache without a tail
            # may lack (else the oracle would silently attend fewer tokens than the cache holds)
            assert ct.ring is not None or cache.tail_len == 0, "a quantized tail without a ring"
            tail = (
                ct.ring[:, : cache.tail_len].double().cpu().numpy()
                if ct.ring is not None
                else np.zeros((cache.batch, 0, ct.dim))
            )
        else:  # a float tensor keeps no ring, in a mixed policy too: its buffer holds the tail
            assert ct.buf is not None
            pre = ct.buf[:, :n_pre].double().cpu().numpy()
            tail = ct.buf[:, n_pre : cache.length].double().cpu().numpy()
        parts.append(_oracle.heads(np.concatenate([pre, tail], axis=1), n_head))
    nulls = None
    if null is not None:
        # Broadcast [H, hd] parameters here rather than with the target's own helper
        # (NullKV.expanded), so that a defect in it cannot reach the expected values.
        def bhd(x: torch.Tensor) -> np.ndarray:
            a = x.double().cpu().numpy()
            return np.broadcast_to(a, (cache.batch, *a.shape)) if a.ndim == 2 else a

        nulls = (bhd(null.k_sem), bhd(null.k_geo), bhd(null.v))
    return _oracle.DecoupledInputs(parts[0], parts[1], parts[2], nulls)


def build_decoupled(case: DecoupledCase, target: Any) -> DecoupledInputs:
    """Inputs of one decode step; the cache is made by ``target.decoupled_cache``."""
    g = _gen(case.seed)
    d = case.dims
    policy = case.policy or FUSED_POLICY.format(resid=case.resid)
    head_dims = (d.sem_head_dim, d.geo_head_dim, d.v_head_dim)
    cache = target.decoupled_cache(policy, d.n_head, head_dims, case.batch, max(case.length, 1) + 8)
    if case.length:
        # Per-token magnitudes vary so that the per-block scales differ from token to token.
        def keys(width: int) -> torch.Tensor:
            base = torch.randn(case.batch, case.length, width, generator=g)
            return base * (0.25 + torch.rand(case.batch, case.length, 1, generator=g) * 1.5)

        cache.append(keys(d.sem_dim), keys(d.geo_dim), keys(d.v_dim))
    q_sem = (torch.randn(case.batch, d.n_head, d.sem_head_dim, generator=g) * case.q_gain).to(
        DEVICE
    )
    q_geo = (torch.randn(case.batch, d.n_head, d.geo_head_dim, generator=g) * case.q_gain).to(
        DEVICE
    )
    null = _null(case, g)
    ss = 1.0 / math.sqrt(d.sem_head_dim)
    gs = 1.0 / math.sqrt(d.geo_head_dim)
    oin = oracle_inputs(cache, null)
    expected = _oracle.decoupled(
        q_sem.double().cpu().numpy(), q_geo.double().cpu().numpy(), oin, ss, gs
    )
    return DecoupledInputs(q_sem, q_geo, cache, null, ss, gs, expected, oin)


FUSED = ("triton-1pass", "triton-2pass")
REQUEST = {"triton-1pass": "1pass", "triton-2pass": "2pass", "streaming": "streaming"}


def fused_paths(target: Any) -> list[str]:
    """The fused decoupled decode paths the target offers."""
    return [p for p in FUSED if p in target.decoupled_decode_paths()]


def decode_path(
    target: Any, inp: DecoupledInputs, path: str, ps: int = 32, **kw: Any
) -> torch.Tensor:
    """Decoupled decode of ``inp`` on ``path``, asserting that ``path`` is the one that ran."""
    out, record = target.decoupled_decode(
        inp.q_sem, inp.q_geo, inp.cache, kw.pop("null", inp.null), REQUEST[path], ps, **kw
    )
    assert record.path == path, f"asked for {path}, ran {record.path} ({record.reason})"
    return out


def require_path(target: Any, path: str, offered: tuple[str, ...] | list[str]) -> None:
    """Skip, with the one wording for this cause, when the target offers no ``path`` kernel."""
    if path not in offered:
        pytest.skip(f"target '{target.name}' offers no '{path}' kernel path")
