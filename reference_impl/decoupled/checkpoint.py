"""Checkpoints of a decoupled model: one safetensors file (DBA-012).

The file holds every parameter of :class:`DecoupledLM` under its ``state_dict`` name, float32,
and two metadata strings: ``architecture`` (``decoupled-dba``) and ``config`` (the JSON of
:class:`DecoupledConfig`). Saving and loading are bit-exact. Loading checks everything before
touching a model: a missing, unexpected, mis-shaped or non-float32 tensor raises
:class:`ModelLoadError` naming the tensor (``field``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import torch

from reference_impl.decoupled.config import DecoupledConfig
from reference_impl.decoupled.model import DecoupledLM
from reference_impl.errors import ModelLoadError
from reference_impl.spec_links import implements

ARCHITECTURE = "decoupled-dba"


@implements("DBA-012")
def check_weights(model: DecoupledLM, weights: Mapping[str, torch.Tensor]) -> None:
    """Raise ModelLoadError naming the first tensor of ``weights`` that ``model`` cannot take."""
    want = model.state_dict()
    for name in sorted(want):
        if name not in weights:
            raise ModelLoadError("DBA_MISSING_TENSOR", f"tensor {name!r} is missing", field=name)
    for name in sorted(weights):
        w = weights[name]
        if name not in want:
            raise ModelLoadError(
                "DBA_UNEXPECTED_TENSOR", f"tensor {name!r} is not a parameter", field=name
            )
        if not isinstance(w, torch.Tensor) or w.dtype != torch.float32:
            got = w.dtype if isinstance(w, torch.Tensor) else type(w).__name__
            raise ModelLoadError(
                "DBA_BAD_DTYPE", f"tensor {name!r} must be float32, got {got}", field=name
            )
        if tuple(w.shape) != tuple(want[name].shape):
            raise ModelLoadError(
                "DBA_BAD_SHAPE",
                f"tensor {name!r} has shape {list(w.shape)}, expected {list(want[name].shape)}",
                field=name,
            )


@implements("DBA-012")
def load_weights(model: DecoupledLM, weights: Mapping[str, torch.Tensor]) -> None:
    """Copy ``weights`` into ``model`` after checking all of them (nothing changes on error)."""
    check_weights(model, weights)
    with torch.no_grad():
        for name, p in model.state_dict().items():
            p.copy_(weights[name])


@implements("DBA-024")
def weights_of(model: DecoupledLM) -> dict[str, torch.Tensor]:
    """Every parameter, as CPU float32 copies (on a CPU model ``.to("cpu")`` alone would hand
    out the parameters themselves, so a caller's in-place edit would reach the model)."""
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


@implements("DBA-012")
def save(model: DecoupledLM, path: str | os.PathLike[str]) -> None:
    from safetensors.torch import save_file

    meta = {"architecture": ARCHITECTURE, "config": json.dumps(model.cfg.to_dict())}
    save_file({k: v.contiguous() for k, v in weights_of(model).items()}, str(path), metadata=meta)


@implements("DBA-012")
def load(path: str | os.PathLike[str], device: str | None = None) -> DecoupledLM:
    from safetensors import SafetensorError, safe_open

    if not Path(path).is_file():
        raise ModelLoadError("DBA_BAD_FILE", f"no checkpoint at {os.fspath(path)!r}", field="path")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - not a dict
    except (SafetensorError, OSError, ValueError) as exc:
        raise ModelLoadError(
            "DBA_BAD_FILE", f"not a safetensors file: {exc}", field="path"
        ) from exc
    if meta.get("architecture") != ARCHITECTURE:
        raise ModelLoadError(
            "DBA_BAD_ARCH",
            f"architecture {meta.get('architecture')!r} is not {ARCHITECTURE!r}",
            field="architecture",
        )
    try:
        raw = json.loads(meta.get("config", ""))
    except json.JSONDecodeError as exc:
        raise ModelLoadError("DBA_BAD_CONFIG", f"config metadata: {exc}", field="config") from exc
    if not isinstance(raw, dict):
        raise ModelLoadError("DBA_BAD_CONFIG", "config metadata is not an object", field="config")
    model = DecoupledLM(DecoupledConfig.from_dict(raw), device=device)
    load_weights(model, tensors)
    return model
