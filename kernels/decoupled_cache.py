"""The decoupled (semantic / geometric) KV cache of one layer, in the layout the kernels read.

Three tensors, each token-major ``[B, max_len, dim]`` with heads interleaved along the last dim
(feature ``h*head_dim + c``): ``k_sem`` (``dim = H·d_sem``), ``k_geo`` (``H·d_geo``, keys already
rotated) and ``v`` (``H·d_v``). A quantized tensor stores codes ``[B, max_len, nbytes]`` and fp16
scales ``[B, max_len, n_blocks]`` (see :mod:`kernels.quant`); a float one stores its values.

**Every token is quantized when appended**; when the policy keeps a residual of ``R`` tokens,
the last ``min(R, max_len)`` tokens are *also* kept exactly in an fp16 ring (token ``t`` in slot
``t mod R``). Decode reads tokens ``[0, prefix_len)`` from the quantized buffers and the tail
``[prefix_len, length)`` from the ring, where ``prefix_len = max(0, length - R)``. Because the
tail always fills ring slots ``0 .. tail_len-1``, readers take ``ring[:, :tail_len]`` without
modular arithmetic (softmax does not depend on token order). Only quantized tensors keep a ring:
in a policy that mixes float and quantized tensors the float ones read their tail, like every
other token, from their buffer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels import quant
from kernels.policy import KVCachePolicy, TensorFormat, parse_policy
from reference_impl.errors import KernelError
from reference_impl.spec_links import implements


@dataclass(frozen=True)
class DecoupledDims:
    n_head: int
    sem_head_dim: int
    geo_head_dim: int
    v_head_dim: int

    @property
    def sem_dim(self) -> int:
        return self.n_head * self.sem_head_dim

    @property
    def geo_dim(self) -> int:
        return self.n_head * self.geo_head_dim

    @property
    def v_dim(self) -> int:
        return self.n_head * self.v_head_dim


@implements("DBA-003")
class CacheTensor:
    """One of the three cache tensors for a batch of ``B`` sequences of up to ``max_len``."""

    def __init__(
        self,
        fmt: TensorFormat,
        dim: int,
        batch: int,
        max_len: int,
        residual_len: int,
        device: str | torch.device = "cpu",
    ) -> None:
        self.fmt = fmt
        self.dim = dim
        self.batch = batch
        self.max_len = max_len
        self.codes: torch.Tensor | None = None
        self.scales: torch.Tensor | None = None
        self.buf: torch.Tensor | None = None
        self.ring: torch.Tensor | None = None
        if fmt.quantized:
            quant.check_format(fmt.kind, fmt.qblock)
            pad = quant.padded_dim(dim, fmt.qblock)
            nbytes = pad if fmt.kind == "q8_0" else pad // 2
            code_dtype = torch.int8 if fmt.kind == "q8_0" else torch.uint8
            self.codes = torch.zeros(batch, max_len, nbytes, dtype=code_dtype, device=device)
            self.scales = torch.zeros(
                batch, max_len, pad // fmt.qblock, dtype=torch.float16, device=device
            )
            if residual_len > 0:
                self.ring = torch.zeros(
                    batch, residual_len, dim, dtype=torch.float16, device=device
                )
        else:
            dtype = torch.float16 if fmt.kind == "fp16" else torch.float32
            self.buf = torch.zeros(batch, max_len, dim, dtype=dtype, device=device)

    def prepare(self, x: torch.Tensor) -> quant.QuantizedTensor | None:
        """Quantize ``x [B, T, dim]`` for :meth:`write` (None for float kinds); may raise."""
        if self.buf is not None or x.shape[1] == 0:
            return None
        return quant.quantize(x, self.fmt.kind, self.fmt.qblock)

    @implements("DBA-004")
    def write(self, pos: int, x: torch.Tensor, qt: quant.QuantizedTensor | None) -> None:
        """Store tokens ``[pos, pos + T)`` from ``x [B, T, dim]`` (``qt`` from :meth:`prepare`)."""
        n = x.shape[1]
        if self.buf is not None:
            self.buf[:, pos : pos + n] = x.to(self.buf.device, self.buf.dtype)
            return
        if qt is None:
            return
        assert self.codes is not None and self.scales is not None
        self.codes[:, pos : pos + n] = qt.codes.to(self.codes.device)
        self.scales[:, pos : pos + n] = qt.scales.to(self.scales.device)
        if self.ring is not None:
            r = self.ring.shape[1]
            for i in range(max(0, n - r), n):  # only the last R tokens can survive in the ring
                self.ring[:, (pos + i) % r] = x[:, i].to(self.ring.device, torch.float16)

    def stored(self, start: int, end: int) -> torch.Tensor:
        """Tokens ``[start, end)`` as stored (dequantized when quantized), fp32 ``[B, n, dim]``."""
        if self.buf is not None:
            return self.buf[:, start:end].to(torch.float32)
        assert self.codes is not None and self.scales is not None
        qt = quant.QuantizedTensor(
            self.fmt.kind,
            self.fmt.qblock,
            self.dim,
            self.codes[:, start:end],
            self.scales[:, start:end],
        )
        return quant.dequantize(qt)

    @implements("DBA-004", "KRN-016")
    def tail(self, tail_len: int) -> torch.Tensor:
        """The exact tail tokens, fp32 ``[B, tail_len, dim]`` (ring slots ``0 .. tail_len-1``).

        Only a quantized tensor with a residual has them; a float tensor's tail is read with
        :meth:`stored`, so asking one here (or a tensor without a residual) is a caller's bug."""
        if self.ring is None:
            raise KernelError("KRN_NO_RESIDUAL", "this cache tensor keeps no residual tail")
        return self.ring[:, :tail_len].to(torch.float32)


@implements("DBA-003", "DBA-004", "DBA-019")
class DecoupledKVCache:
    """The decoupled cache of one layer for ``batch`` sequences that share one length."""

    def __init__(
        self,
        policy: KVCachePolicy | str,
        dims: DecoupledDims,
        batch: int,
        max_len: int,
        device: str | torch.device = "cpu",
    ) -> None:
        self.policy = parse_policy(policy) if isinstance(policy, str) else policy
        for name, value in (("batch", batch), ("max_len", max_len)):
            if value <= 0:  # a cache that could hold nothing would refuse every append
                raise KernelError("KRN_BAD_SHAPE", f"{name} must be > 0, got {value}", field=name)
        self.dims = dims
        self.batch = batch
        self.max_len = max_len
        self.length = 0
        quantized = any(f.quantized for f in (self.policy.k_sem, self.policy.k_geo, self.policy.v))
        self.residual_len = min(self.policy.residual_len, max_len) if quantized else 0
        r = self.residual_len
        self.k_sem = CacheTensor(self.policy.k_sem, dims.sem_dim, batch, max_len, r, device)
        self.k_geo = CacheTensor(self.policy.k_geo, dims.geo_dim, batch, max_len, r, device)
        self.v = CacheTensor(self.policy.v, dims.v_dim, batch, max_len, r, device)

    @property
    @implements("DBA-004")
    def prefix_len(self) -> int:
        """Tokens read from the main (quantized) buffers; the rest come from the exact tail."""
        return max(0, self.length - self.residual_len)

    @property
    def tail_len(self) -> int:
        return self.length - self.prefix_len

    @implements("DBA-003", "DBA-004")
    def append(self, k_sem: torch.Tensor, k_geo: torch.Tensor, v: torch.Tensor) -> None:
        """Append ``T`` tokens: ``k_sem [B, T, sem_dim]``, ``k_geo [B, T, geo_dim]``, ``v``."""
        d = self.dims
        want = {"k_sem": d.sem_dim, "k_geo": d.geo_dim, "v": d.v_dim}
        got = {"k_sem": k_sem, "k_geo": k_geo, "v": v}
        n = k_sem.shape[1] if k_sem.ndim == 3 else -1
        for name, x in got.items():
            if x.ndim != 3 or x.shape[0] != self.batch or x.shape[2] != want[name]:
                raise KernelError(
                    "KRN_BAD_SHAPE",
                    f"{name} must be [{self.batch}, T, {want[name]}], got {list(x.shape)}",
                    field=name,
                )
            if x.shape[1] != n:
                raise KernelError("KRN_BAD_SHAPE", "k_sem, k_geo and v differ in T", field=name)
        if self.length + n > self.max_len:
            raise KernelError(
                "KRN_CACHE_FULL", f"appending {n} tokens to {self.length} exceeds {self.max_len}"
            )
        # Quantize all three before writing any, so a failed call leaves the cache unchanged.
        tensors = (self.k_sem, self.k_geo, self.v)
        prepared = [t.prepare(x) for t, x in zip(tensors, got.values())]
        for t, x, qt in zip(tensors, got.values(), prepared):
            t.write(self.length, x, qt)
        self.length += n

    @implements("QNT-019", "DBA-021")
    def bytes_per_token(self) -> int:
        """Bytes one token occupies in the main buffers (the residual ring is extra)."""
        d = self.dims
        p = self.policy
        return (
            quant.bytes_per_token(p.k_sem.kind, d.sem_dim, p.k_sem.qblock)
            + quant.bytes_per_token(p.k_geo.kind, d.geo_dim, p.k_geo.qblock)
            + quant.bytes_per_token(p.v.kind, d.v_dim, p.v.qblock)
        )


@implements("DBA-002")
@dataclass(frozen=True, eq=False)
class NullKV:
    """The learned null ("attend nowhere") token: per-head vectors, ``[H, hd]`` or ``[B, H, hd]``.

    ``k_geo`` is not rotated (the null token has no position). Views of any strides are accepted.
    """

    k_sem: torch.Tensor
    k_geo: torch.Tensor
    v: torch.Tensor

    @implements("KRN-015")
    def expanded(self, batch: int) -> NullKV:
        """The three tensors as ``[B, H, hd]`` views (a broadcast view when given ``[H, hd]``)."""

        def ex(x: torch.Tensor) -> torch.Tensor:
            return x.unsqueeze(0).expand(batch, *x.shape) if x.ndim == 2 else x

        return NullKV(ex(self.k_sem), ex(self.k_geo), ex(self.v))
