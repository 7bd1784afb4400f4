"""The decoupled area of the reference target: :mod:`conformance.protocol.decoupled` over ``reference_impl``."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from kernels.decoupled_cache import DecoupledKVCache
    from reference_impl.decoupled.model import DecodeSession, DecoupledLM

Tokens = Sequence[Sequence[int]] | torch.Tensor


class ReferenceDecoupledSession:
    def __init__(self, session: DecodeSession) -> None:
        self._s = session

    @property
    def length(self) -> int:
        return self._s.length

    def prefill(self, tokens: Tokens) -> torch.Tensor:
        return self._s.prefill(tokens)

    def step(self, tokens: Sequence[int], path: str = "auto") -> tuple[torch.Tensor, list[Any]]:
        out, records = self._s.step(tokens, path=path)
        return out, list(records)


class ReferenceDecoupledModel:
    def __init__(self, model: DecoupledLM) -> None:
        self._m = model

    @property
    def config(self) -> dict[str, Any]:
        return self._m.cfg.to_dict()

    def weights(self) -> dict[str, torch.Tensor]:
        from reference_impl.decoupled import checkpoint

        return checkpoint.weights_of(self._m)

    def load_weights(self, weights: Mapping[str, torch.Tensor]) -> None:
        from reference_impl.decoupled import checkpoint

        checkpoint.load_weights(self._m, weights)

    def save(self, path: str) -> None:
        from reference_impl.decoupled import checkpoint

        checkpoint.save(self._m, path)

    def logits(
        self, tokens: Tokens, positions: Sequence[int] | None = None, stored: str | None = None
    ) -> torch.Tensor:
        return self._m(tokens, positions=positions, stored=stored)

    def approx_logits(self, tokens: Tokens) -> torch.Tensor:
        return self._m(tokens, approx="bottom-right")

    def inspect(
        self, tokens: Tokens, layer: int, positions: Sequence[int] | None = None
    ) -> dict[str, torch.Tensor]:
        return self._m.inspect(tokens, layer, positions)

    def out_proj_calls(self, tokens: Tokens, decode: bool = False) -> list[int]:
        counts = [0] * len(self._m.layers)
        hooks = []
        for il, blk in enumerate(self._m.layers):

            def count(*_: Any, il: int = il) -> None:
                counts[il] += 1

            hooks.append(blk.attn.out.register_forward_hook(count))
        try:
            if decode:
                t = torch.as_tensor(tokens, dtype=torch.int64)
                sess = self._m.session("ksem=fp32,kgeo=fp32,v=fp32,resid=0", t.shape[1], t.shape[0])
                for i in range(t.shape[1]):
                    sess.step(t[:, i].tolist(), path="streaming")
            else:
                self._m(tokens)
        finally:
            for h in hooks:
                h.remove()
        return counts

    def start(
        self,
        policy: str,
        max_len: int,
        batch: int = 1,
        partition_size: int | None = None,
        two_pass_min_tokens: int | None = None,
    ) -> ReferenceDecoupledSession:
        from kernels import dispatch

        cfg = dispatch.DEFAULT_CONFIG
        if partition_size is not None or two_pass_min_tokens is not None:
            cfg = dispatch.DispatchConfig(
                two_pass_min_tokens=cfg.two_pass_min_tokens
                if two_pass_min_tokens is None
                else two_pass_min_tokens,
                partition_size=cfg.partition_size if partition_size is None else partition_size,
            )
        return ReferenceDecoupledSession(self._m.session(policy, max_len, batch, cfg))


class Reference:
    """The decoupled cache of ``kernels.decoupled_cache`` and the model of
    ``reference_impl.decoupled`` through the adapter protocol."""

    # -- decoupled.cache -----------------------------------------------------------
    def decoupled_cache(
        self,
        policy: str,
        n_head: int,
        head_dims: tuple[int, int, int],
        batch: int,
        max_len: int,
    ) -> DecoupledKVCache:
        from kernels._triton import kernel_device
        from kernels.decoupled_cache import DecoupledDims, DecoupledKVCache

        dims = DecoupledDims(n_head, *head_dims)
        return DecoupledKVCache(policy, dims, batch, max_len, device=kernel_device())

    # -- decoupled.model -----------------------------------------------------------
    def decoupled_model(self, config: Mapping[str, Any], seed: int = 0) -> ReferenceDecoupledModel:
        from reference_impl.decoupled import DecoupledConfig, DecoupledLM

        return ReferenceDecoupledModel(DecoupledLM(DecoupledConfig.from_dict(config), seed=seed))

    def load_decoupled_model(self, path: str) -> ReferenceDecoupledModel:
        from reference_impl.decoupled import checkpoint

        return ReferenceDecoupledModel(checkpoint.load(path))

    # -- decoupled.runner ----------------------------------------------------------
    def decoupled_runner(self, argv: Sequence[str]) -> tuple[int, str, str]:
        from reference_impl.decoupled.runner import main

        # As a shell runs it: the CLI picks its own streams (sys.stdout / sys.stderr).
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(list(argv))
        return rc, out.getvalue(), err.getvalue()
