"""The engine side: a GGUF file loaded by Hugging Face transformers, and what the adapter asks
of it.

Everything numeric here is computed by transformers' own modules: ``from_pretrained`` with
``gguf_file`` reads and dequantizes the file (through the ``gguf`` package) into a
``LlamaForCausalLM``; forwards run its decoder (``get_decoder()``), its final norm and its
output head (``get_output_embeddings()``); K-shifts use its rotary embedding module and
``apply_rotary_pos_emb``. The adapter only decides *where* K/V rows go: :class:`CellLayer` is a
transformers cache layer (``CacheLayerMixin``, the library's extension point for cache kinds)
whose rows are llama.cpp's KV cells, written at the indices the adapter chose.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

# GGUF tensor name -> transformers parameter name, per block and global (llama architecture).
_BLOCK_TENSORS = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL_TENSORS = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}


class EngineLoadError(RuntimeError):
    """transformers could not load the file (its own exception is chained)."""


def transformers_version() -> str:
    import transformers

    return str(transformers.__version__)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """transformers prints progress bars and warnings while converting GGUF files."""
    loggers = [logging.getLogger(n) for n in ("transformers", "accelerate")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    old = os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS")
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    try:
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
        if old is None:
            os.environ.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
        else:
            os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = old


def gguf_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Row order of a Q/K projection as GGUF stores it (RoPE on adjacent pairs) from the order
    transformers computes with (RoPE on the two halves of each head)."""
    rows, cols = w.shape
    half = rows // n_head // 2
    return w.reshape(n_head, 2, half, cols).swapaxes(1, 2).reshape(rows, cols)


class CellLayer:
    """One layer's K/V storage as llama.cpp's cells, behind transformers' cache-layer protocol.

    Keys and values are ``[1, n_head_kv, kv_size, head_dim]``; ``update`` writes the new rows
    at ``slots`` (the cells the adapter chose for this call) and hands the attention every
    cell, which the adapter's 4-D mask opens or closes.
    """

    is_compileable = False
    is_sliding = False

    def __init__(
        self, kv_size: int, n_head_kv: int, head_dim: int, dtype: torch.dtype = torch.float32
    ) -> None:
        self.kv_size = kv_size
        self.keys = torch.zeros(1, n_head_kv, kv_size, head_dim, dtype=dtype)
        self.values = torch.zeros(1, n_head_kv, kv_size, head_dim, dtype=dtype)
        self.slots = torch.zeros(0, dtype=torch.long)
        self.is_initialized = True

    # -- transformers' CacheLayerMixin surface ----------------------------------------------
    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        return None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys.index_copy_(2, self.slots, key_states.to(self.keys.dtype))
        self.values.index_copy_(2, self.slots, value_states.to(self.values.dtype))
        # a float16 store is read back in the compute dtype (llama.cpp's F16 K/V)
        return self.keys.to(key_states.dtype), self.values.to(value_states.dtype)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.kv_size, 0

    def get_seq_length(self) -> int:
        return 0

    def get_max_length(self) -> int:
        return self.kv_size

    def reset(self) -> None:
        self.keys.zero_()
        self.values.zero_()


def _cell_layer_class() -> type:
    """CellLayer registered as a transformers cache layer (a subclass of its mixin)."""
    from transformers.cache_utils import CacheLayerMixin

    return type("TransformersCellLayer", (CellLayer, CacheLayerMixin), {})


class HFModel:
    """A GGUF file as transformers loads it: the causal LM, its tokenizer and its metadata."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.path = Path(path).resolve()
        if not self.path.is_file():
            raise EngineLoadError(f"no such file: {self.path}")
        where, name = str(self.path.parent), self.path.name
        try:
            with _quiet():
                model = AutoModelForCausalLM.from_pretrained(
                    where, gguf_file=name, dtype=torch.float32
                )
                tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=name)
        except Exception as exc:  # transformers' own errors, one line for the caller
            raise EngineLoadError(
                f"transformers could not load {self.path.name}: {type(exc).__name__}: {exc}"
            ) from exc
        model.eval()
        self.model: Any = model
        self.tokenizer: Any = tokenizer
        cfg = model.config
        self.config: Any = cfg
        self.n_vocab = int(cfg.vocab_size)
        self.n_embd = int(cfg.hidden_size)
        self.n_layer = int(cfg.num_hidden_layers)
        self.n_head = int(cfg.num_attention_heads)
        self.n_head_kv = int(cfg.num_key_value_heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or self.n_embd // self.n_head)
        self.n_ctx_train = int(cfg.max_position_embeddings)
        self.bos: int | None = tokenizer.bos_token_id
        self.eos: int | None = tokenizer.eos_token_id
        self._cell_layer = _cell_layer_class()

    def info(self) -> dict[str, int]:
        return {
            "n_vocab": self.n_vocab,
            "n_embd": self.n_embd,
            "n_layer": self.n_layer,
            "n_head": self.n_head,
            "n_head_kv": self.n_head_kv,
            "n_ctx_train": self.n_ctx_train,
            "eos": -1 if self.eos is None else self.eos,
        }

    # -- forwards -----------------------------------------------------------------------------
    def logits(self, tokens: Sequence[int]) -> np.ndarray:
        """The causal LM's plain call: one sequence at positions 0.., every logit."""
        ids = torch.tensor([list(tokens)], dtype=torch.long)
        with torch.inference_mode():
            out = self.model(input_ids=ids, use_cache=False)
        logits: np.ndarray = out.logits[0].to(torch.float32).numpy().copy()
        return logits

    def new_cache(self, kv_size: int, dtype: torch.dtype = torch.float32) -> Any:
        """An empty transformers ``Cache`` of ``kv_size`` cells per layer, K/V stored in
        ``dtype`` (float32 or float16)."""
        from transformers.cache_utils import Cache

        layers = [
            self._cell_layer(kv_size, self.n_head_kv, self.head_dim, dtype)
            for _ in range(self.n_layer)
        ]
        return Cache(layers=layers)

    def hidden(
        self,
        cache: Any,
        slots: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
        tokens: torch.Tensor | None = None,
        embd: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The decoder over one group of tokens: K/V written at ``slots``, attention through the
        additive ``mask`` ``[n, kv_size]``; returns the final-norm hidden states ``[n, n_embd]``."""
        for layer in cache.layers:
            layer.slots = slots
        kwargs: dict[str, Any] = {
            "position_ids": positions[None, :],
            "attention_mask": mask[None, None, :, :],
            "past_key_values": cache,
            "use_cache": True,
        }
        if tokens is not None:
            kwargs["input_ids"] = tokens[None, :]
        else:
            assert embd is not None
            kwargs["inputs_embeds"] = embd[None, :, :]
        with torch.inference_mode():
            out = self.model.get_decoder()(**kwargs)
        h: torch.Tensor = out.last_hidden_state[0]
        return h

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """The output head (``lm_head``) over final-norm hidden states."""
        with torch.inference_mode():
            out: torch.Tensor = self.model.get_output_embeddings()(hidden)
        return out

    def rotate_keys(self, cache: Any, cells: np.ndarray, delta: np.ndarray) -> None:
        """Re-rotate the cached keys of ``cells`` by ``delta`` positions (K-shift), with the
        model's own rotary embedding and ``apply_rotary_pos_emb``: RoPE is a rotation, so
        rotating a key cached at ``p`` by ``d`` gives the key at ``p + d``."""
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        idx = torch.from_numpy(np.asarray(cells, dtype=np.int64))
        d = torch.from_numpy(np.asarray(delta, dtype=np.int64))[None, :]
        rotary = self.model.get_decoder().rotary_emb
        with torch.inference_mode():
            for layer in cache.layers:
                k = layer.keys.index_select(2, idx).to(torch.float32)
                cos, sin = rotary(k, position_ids=d)
                _, k_rot = apply_rotary_pos_emb(k, k, cos, sin)
                layer.keys.index_copy_(2, idx, k_rot.to(layer.keys.dtype))

    # -- weights ------------------------------------------------------------------------------
    def tensor(self, name: str) -> np.ndarray:
        """A GGUF tensor as transformers computes with it, back in GGUF's name and layout."""
        hf_name = self._hf_name(name)
        params = dict(self.model.named_parameters(remove_duplicate=False))
        if hf_name not in params:
            raise KeyError(f"tensor {name!r} ({hf_name}) is not a parameter of the model")
        w = params[hf_name].detach().to(torch.float32).numpy().copy()
        if name.endswith("attn_q.weight"):
            w = gguf_permute(w, self.n_head)
        elif name.endswith("attn_k.weight"):
            w = gguf_permute(w, self.n_head_kv)
        return w

    def _hf_name(self, name: str) -> str:
        stem, dot, kind = name.rpartition(".")
        if not dot or kind != "weight":
            raise KeyError(f"unknown tensor {name!r}")
        if stem in _GLOBAL_TENSORS:
            return f"{_GLOBAL_TENSORS[stem]}.weight"
        parts = stem.split(".")
        if (
            len(parts) == 3
            and parts[0] == "blk"
            and parts[1].isdigit()
            and parts[2] in _BLOCK_TENSORS
        ):
            return f"model.layers.{parts[1]}.{_BLOCK_TENSORS[parts[2]]}.weight"
        raise KeyError(f"unknown tensor {name!r}")
