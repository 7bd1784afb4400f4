"""Mutants of the model area (GGUF loading, the llama forward).

Each swaps one function of ``reference_impl`` for a subtly wrong one; the conformance tests
named in ``kills`` must fail -- without llama.cpp, against the float64 oracle, the gguf-py
dequantizer, the naive SPM oracle and the goldens.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from conformance.mutants import Mutant, replace


def _rope_split_halves(target: Any) -> Any:
    # NEOX-style rotation: pairs (x[j], x[j + d/2]) instead of llama's adjacent pairs.
    def apply_rope(x: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        x0, x1 = x[..., :half], x[..., half:]
        c, s = rot.real, rot.imag
        return x.copy_(torch.cat([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1))  # in place

    replace("reference_impl.model.llama", "apply_rope", apply_rope)
    return target


def _q4_nibbles_swapped(target: Any) -> Any:
    # High nibbles read as the first half of the block, low nibbles as the second.
    def dequantize_q4_0(raw: np.ndarray, n_values: int) -> np.ndarray:
        blocks = np.asarray(raw, dtype=np.uint8).reshape(-1, 18)
        d = np.ascontiguousarray(blocks[:, :2]).view("<f2").astype(np.float32)
        qs = blocks[:, 2:]
        q = np.concatenate([(qs >> 4).astype(np.int8) - 8, (qs & 0xF).astype(np.int8) - 8], 1)
        with np.errstate(invalid="ignore"):
            return (q.astype(np.float32) * d).reshape(-1)

    replace("reference_impl.model.dequant", "dequantize_q4_0", dequantize_q4_0)
    return target


def _tied_output_zeros(target: Any) -> Any:
    def resolve_output(weights: Any) -> torch.Tensor:
        if weights.output is None:
            return torch.zeros_like(weights.token_embd)
        out: torch.Tensor = weights.output
        return out

    replace("reference_impl.model.llama", "resolve_output", resolve_output)
    return target


def _rms_eps_dropped(target: Any) -> Any:
    def rms_normalize(x: torch.Tensor, eps: float) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), None, 0.0)

    def normed_matmul(x: torch.Tensor, w_t: torch.Tensor, eps: float) -> torch.Tensor:
        return torch.mm(rms_normalize(x, eps), w_t)

    replace("reference_impl.model.llama", "rms_normalize", rms_normalize)
    replace("reference_impl.model.llama", "normed_matmul", normed_matmul)
    return target


def _gqa_heads_tiled(target: Any) -> Any:
    # Query head h reads KV head h % n_head_kv instead of h // (n_head / n_head_kv).
    def sdpa_attention(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float
    ) -> torch.Tensor:
        group = q.shape[1] // k.shape[1]
        k = k.repeat(1, group, 1)
        v = v.repeat(1, group, 1)
        out = F.scaled_dot_product_attention(
            q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask, scale=scale
        )
        return out.transpose(0, 1).reshape(q.shape[0], -1)

    replace("reference_impl.model.llama", "sdpa_attention", sdpa_attention)
    return target


def _any_architecture(target: Any) -> Any:
    import reference_impl.model.gguf_loader as loader

    class Anything(tuple[str, ...]):
        def __contains__(self, item: object) -> bool:
            return True

    replace(loader.__name__, "SUPPORTED_ARCHS", Anything(("llama",)))
    return target


def _output_always_tied(target: Any) -> Any:
    # The forward projects through token_embd even when the file stores output.weight.
    replace("reference_impl.model.llama", "resolve_output", lambda weights: weights.token_embd)
    return target


def _k_scale_from_min_byte(target: Any) -> Any:
    # Q4_K / Q5_K sub-blocks 4..7: the top 2 bits of the scale come from the min's byte.
    import reference_impl.model.dequant as dq

    original = dq.k_scale_min

    def k_scale_min(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        sc, mn = original(packed)
        sc = sc.copy()
        sc[:, 4:] = (packed[:, 8:12] & 0xF) | ((packed[:, 4:8] >> 6) << 4)
        return sc, mn

    replace(dq.__name__, "k_scale_min", k_scale_min)
    return target


def _q5_high_bits_reversed(target: Any) -> Any:
    # Q5_0 / Q5_1: bit 31 - j of qh taken as bit 4 of value j.
    def q5_quants(blocks: np.ndarray, qh_at: int) -> np.ndarray:
        qs = blocks[:, qh_at + 4 :]
        low = np.concatenate([qs & 0xF, qs >> 4], axis=1)
        high = np.unpackbits(blocks[:, qh_at : qh_at + 4], axis=1, bitorder="little")[:, ::-1]
        return (low | (high << 4)).astype(np.float32)

    replace("reference_impl.model.dequant", "_q5_quants", q5_quants)
    return target


def _iq4_grid_mirrored(target: Any) -> Any:
    # IQ4_NL / IQ4_XS index the non-linear grid from its other end.
    import reference_impl.model.dequant as dq

    replace(dq.__name__, "IQ4_GRID", -dq.IQ4_GRID[::-1].copy())
    return target


def _ternary_digits_reversed(target: Any) -> Any:
    # TQ1_0: the base-3 digits of each byte in reverse order.
    import reference_impl.model.dequant as dq

    original = dq._ternary_digits

    def ternary_digits(q: np.ndarray, n_digits: int) -> np.ndarray:
        out: np.ndarray = original(q, n_digits)[:, ::-1, :]
        return out

    replace(dq.__name__, "_ternary_digits", ternary_digits)
    return target


def _e8m0_not_halved(target: Any) -> Any:
    # MXFP4: the scale 2^(e-127) is not halved, though the grid holds doubled E2M1 values.
    import reference_impl.model.dequant as dq

    original = dq.e8m0_half
    replace(dq.__name__, "e8m0_half", lambda e: original(e) * np.float32(2.0))
    return target


def _nvfp4_scales_reversed(target: Any) -> Any:
    # NVFP4: sub-block s takes the UE4M3 scale of sub-block 3 - s.
    import reference_impl.model.dequant as dq

    original = dq.ue4m3_half
    replace(dq.__name__, "ue4m3_half", lambda x: original(x)[:, ::-1])
    return target


def _iq_sign_parity_odd(target: Any) -> Any:
    # IQ2_XXS / IQ2_XS / IQ3_XXS: the eighth sign makes the count of negatives odd.
    import reference_impl.model.dequant as dq

    patterns = dq.SIGN_PATTERNS.copy()
    patterns[:, 7] = -patterns[:, 7]
    replace(dq.__name__, "SIGN_PATTERNS", patterns)
    return target


def _iq_scale_nibbles_swapped(target: Any) -> Any:
    # IQ2_XS / IQ2_S / IQ3_S / IQ1_M: a packed byte gives its high nibble to the first value.
    import reference_impl.model.dequant as dq

    def nibbles_paired(packed: np.ndarray) -> np.ndarray:
        return np.stack([packed >> 4, packed & 0xF], axis=2).reshape(packed.shape[0], -1)

    replace(dq.__name__, "_nibbles_paired", nibbles_paired)
    return target


def _iq1_delta_inverted(target: Any) -> Any:
    # IQ1_S / IQ1_M: a clear sign bit shifts the grid by -1/8 instead of +1/8.
    import reference_impl.model.dequant as dq

    replace(dq.__name__, "IQ1S_DELTA", -dq.IQ1S_DELTA)
    return target


def _bf16_rounded_through_f16(target: Any) -> Any:
    # BF16 bits read as IEEE half floats.
    replace(
        "reference_impl.model.dequant",
        "widen_bf16",
        lambda raw: np.asarray(raw).reshape(-1).view("<f2").astype(np.float32),
    )
    return target


def _split_duplicates_overwrite(target: Any) -> Any:
    # A tensor stored in two parts: the later copy silently replaces the earlier one.
    import reference_impl.model.gguf_loader as loader

    def gather_tensors(parts: list[tuple[Any, Any]], meta: Any) -> dict[str, Any]:
        tensors = {t.name: t for _, reader in parts for t in reader.tensors}
        if len(parts) > 1 and meta.get_int("split.tensors.count") != len(tensors):
            raise loader.ModelLoadError(
                "GGUF_SPLIT_MISMATCH", "tensor count", field="split.tensors.count", index=0
            )
        return tensors

    replace(loader.__name__, "gather_tensors", gather_tensors)
    return target


def _split_parts_numbered_from_zero(target: Any) -> Any:
    # Parts looked up as <prefix>-0000k-of-0000N.gguf with k = split.no (0-based), not k + 1.
    import reference_impl.model.gguf_loader as loader

    replace(
        loader.__name__,
        "split_path",
        lambda prefix, no, count: loader.Path(f"{prefix}-{no:05d}-of-{count:05d}.gguf"),
    )
    return target


def _vocab_only_reads_tensors(target: Any) -> Any:
    # vocab_only ignored: the tensors are read and checked anyway.
    import reference_impl.model.gguf_loader as loader

    original = loader.load_gguf

    def load_gguf(path: Any, *, vocab_only: bool = False, check_tensors: bool = False) -> Any:
        return original(path, check_tensors=check_tensors)

    replace(loader.__name__, "load_gguf", load_gguf)
    return target


def _check_tensors_nan_only(target: Any) -> Any:
    # check_tensors looks for NaN only: Inf values and scales pass.
    import reference_impl.model.gguf_loader as loader

    original = loader.check_tensor_data

    def check_tensor_data(name: str, ggml_type: int, raw: np.ndarray, values: np.ndarray) -> None:
        with np.errstate(invalid="ignore"):
            original(name, ggml_type, raw, np.where(np.isinf(values), 0.0, values))

    replace(loader.__name__, "check_tensor_data", check_tensor_data)
    return target


def _check_tensors_products(target: Any) -> Any:
    # check_tensors judges MXFP4 by its dequantized values, not its stored exponent byte.
    import reference_impl.model.gguf_loader as loader

    original = loader.check_tensor_data

    def check_tensor_data(name: str, ggml_type: int, raw: np.ndarray, values: np.ndarray) -> None:
        original(name, -1, raw, values)

    replace(loader.__name__, "check_tensor_data", check_tensor_data)
    return target


def _reader_errors_untyped(target: Any) -> Any:
    # The GGUF reader's own exceptions escape untyped instead of becoming GGUF_MALFORMED.
    import gguf

    import reference_impl.model.gguf_loader as loader

    def _open(path: Any) -> Any:
        if not path.is_file():
            raise loader.ModelLoadError("GGUF_FILE_NOT_FOUND", "no such file", field="path")
        return gguf.GGUFReader(str(path), "r")

    replace(loader.__name__, "_open", _open)
    return target


def _reader_aborts_on_corrupt(target: Any) -> Any:
    # A corrupt file ends the process, as a failed GGML_ASSERT would, instead of a refusal.
    import os

    import reference_impl.model.gguf_loader as loader

    original = loader._open

    def _open(path: Any) -> Any:
        try:
            return original(path)
        except loader.ModelLoadError as exc:
            if exc.code == "GGUF_MALFORMED":
                os.abort()
            raise

    replace(loader.__name__, "_open", _open)
    return target


def _rope_dims_key_ignored(target: Any) -> Any:
    """rope.dimension_count is never read: the head size is assumed."""
    from reference_impl.model.gguf_loader import _Meta

    original = _Meta.get_int

    def get_int(self: Any, key: str, default: int | None = None) -> int:
        if key.endswith(".rope.dimension_count") and default is not None:
            return default
        return original(self, key, default)

    _Meta.get_int = get_int  # type: ignore[method-assign]
    return target


def _unknown_tokenizer_as_no_vocab(target: Any) -> Any:
    """An unknown tokenizer.ggml.model loads as a model without a vocabulary."""
    from reference_impl.errors import EngineError
    from reference_impl.model import gguf_loader

    original = gguf_loader.load_vocab

    def load_vocab(meta: Any) -> Any:
        try:
            return original(meta)
        except EngineError as err:
            if err.code == "GGUF_UNSUPPORTED_TOKENIZER" and err.field == "tokenizer.ggml.model":
                return None
            raise

    replace("reference_impl.model.gguf_loader", "load_vocab", load_vocab)
    return target


def _k_bias_ignored(target: Any) -> Any:
    # The fused Q/K/V bias leaves K's part out (zeros): K is computed without its bias.
    import reference_impl.model.llama as llama

    original = llama.fuse_qkv_bias

    def fuse_qkv_bias(lw: Any) -> torch.Tensor | None:
        out = original(lw)
        if out is not None:
            n_q, n_k = lw.wq.shape[0], lw.wk.shape[0]
            out = out.clone()
            out[n_q : n_q + n_k] = 0.0
        return out

    replace(llama.__name__, "fuse_qkv_bias", fuse_qkv_bias)
    return target


def _rope_factors(how: str) -> Any:
    # rope_freqs ignored, or applied as multipliers of the angles instead of divisors.
    def apply(target: Any) -> Any:
        import reference_impl.model.llama as llama

        original = llama.rope_theta

        def rope_theta(
            positions: np.ndarray, n_rot: int, freq_base: float, freq_factors: Any = None
        ) -> np.ndarray:
            if freq_factors is None or how == "ignored":
                return original(positions, n_rot, freq_base)
            base = original(positions, n_rot, freq_base)
            return (base * np.asarray(freq_factors, dtype=np.float32)).astype(np.float32)

        replace(llama.__name__, "rope_theta", rope_theta)
        return target

    return apply


def _qwen2_rope_norm(target: Any) -> Any:
    # qwen2 rotates adjacent pairs (llama's NORM mode) instead of NEOX's (x[j], x[j + d/2]).
    import reference_impl.model.llama as llama

    replace(llama.__name__, "rope_function", lambda hp: llama.apply_rope)
    return target


def _every_key_decoded(target: Any) -> Any:
    # The loader decodes the value of every metadata key, so an unread key holding a string
    # that is not UTF-8 fails the load.
    import gguf

    import reference_impl.model.gguf_loader as loader

    original = loader.load_gguf

    def load_gguf(path: Any, *args: Any, **kwargs: Any) -> Any:
        for field in gguf.GGUFReader(str(path), "r").fields.values():
            field.contents()
        return original(path, *args, **kwargs)

    replace(loader.__name__, "load_gguf", load_gguf)
    return target


def _fused_qkv_v_before_k(target: Any) -> Any:
    # A fused attn_qkv is split as Q, V, K (V's rows taken before K's), in every architecture.
    import reference_impl.model.gguf_loader as loader

    original = loader.qkv_weights

    def qkv_weights(hp: Any, loaded: dict[str, torch.Tensor], il: int) -> Any:
        (wq, wk, wv), (bq, bk, bv) = original(hp, loaded, il)
        if f"blk.{il}.attn_qkv.weight" not in loaded:
            return [wq, wk, wv], [bq, bk, bv]
        return [wq, wv, wk], [bq, bv, bk]

    replace(loader.__name__, "qkv_weights", qkv_weights)
    replace("reference_impl.model.bert", "qkv_weights", qkv_weights)  # bert imports it by name
    return target


def _bias_length_n_embd(target: Any) -> Any:
    # Every bias is expected to hold n_embd values (the matrix's input size), not its output's.
    import reference_impl.model.gguf_loader as loader

    original = loader.optional_tensor_shapes

    def optional_tensor_shapes(hp: Any, spec: Any) -> dict[str, tuple[int, ...]]:
        shapes = original(hp, spec)
        for name in shapes:
            if name.endswith(".bias") and ".attn_qkv." not in name:
                shapes[name] = (hp.n_embd,)
        return shapes

    replace(loader.__name__, "optional_tensor_shapes", optional_tensor_shapes)
    return target


def _swa_window_one_longer(target: Any) -> Any:
    # The sliding window keeps one key too many: masked only when p1 - p0 > n_swa.
    import reference_impl.kv.swa as swa

    def is_masked_swa_array(n_swa: int, swa_type: int, p0: Any, p1: Any) -> np.ndarray:
        p0, p1 = np.asarray(p0), np.asarray(p1)
        if swa_type == swa.SWAType.NONE:
            return np.zeros(np.broadcast(p0, p1).shape, dtype=bool)
        return np.asarray((p1 - p0) > n_swa)

    replace(swa.__name__, "is_masked_swa_array", is_masked_swa_array)
    return target


def _swa_layers_global_rope_base(target: Any) -> Any:
    # The sliding-window layers rotate with the model's rope.freq_base instead of their own.
    import reference_impl.model.gemma3 as gemma3
    import reference_impl.model.llama as llama

    def sliding_rope(hp: Any) -> Any:
        return llama.RopeCache(hp.n_rot, hp.rope_freq_base) if hp.has_swa else None

    replace(llama.__name__, "sliding_rope", sliding_rope)
    replace(gemma3.__name__, "sliding_rope", sliding_rope)
    return target


def _gemma3_post_norms_skipped(target: Any) -> Any:
    # The RMSNorms after the attention and after the FFN are skipped.
    import reference_impl.model.gemma3 as gemma3

    replace(gemma3.__name__, "post_norm", lambda x, weight, eps: x)
    return target


def _gemma3_embeddings_unscaled(target: Any) -> Any:
    # Token embeddings are not multiplied by sqrt(n_embd).
    import reference_impl.model.gemma3 as gemma3

    replace(gemma3.__name__, "embed_scale", lambda hp: 1.0)
    return target


def _swa_pattern_key_ignored(target: Any) -> Any:
    # attention.sliding_window_pattern is ignored: the sliding layers are always il % 6 < 5.
    import reference_impl.model.gguf_loader as loader

    original = loader.gemma3_hparams

    def gemma3_hparams(meta: Any, hp: Any) -> Any:
        fields = dict(meta.fields)
        fields.pop(f"{hp.arch}.attention.sliding_window_pattern", None)
        meta.fields = fields
        return original(meta, hp)

    replace(loader.__name__, "gemma3_hparams", gemma3_hparams)
    return target


def _k_shift_rope(how: str) -> Any:
    # Only the K-shift is wrong (the forward's own RoPE is untouched): it rotates every layer
    # with the model's global base, or without the rope_freqs factors, or in adjacent pairs.
    def apply(target: Any) -> Any:
        import reference_impl.model.llama as llama

        LlamaForward = llama.LlamaForward
        original_layer = LlamaForward.rope_for_layer

        def rope_for_layer(self: Any, il: int) -> Any:
            if how == "global-base":
                return self.rope
            rope = original_layer(self, il)
            if how == "no-factors" and rope.freq_factors is not None:
                return llama.RopeCache(rope.n_rot, rope.freq_base)
            return rope

        def rope_shift(
            self: Any, k: torch.Tensor, delta_positions: Any, layer: int = 0
        ) -> torch.Tensor:
            d = np.asarray(delta_positions, dtype=np.int64)
            rot = self.rope_for_layer(layer).rotations(d)
            return llama.apply_rope(k.to(torch.float32, copy=True), rot)

        if how == "norm-pairs":
            LlamaForward.rope_shift = rope_shift  # type: ignore[method-assign]
        else:
            LlamaForward.rope_for_layer = rope_for_layer  # type: ignore[method-assign]
        return target

    return apply


def _iswa_sliding_layers_on_base_cache(target: Any) -> Any:
    # The sliding-window layers keep their K/V in the iSWA memory's full cache and attend
    # through its mask (no window) instead of the window cache's.
    import reference_impl.decoder.ubatch_executor as executor

    def attention_caches(memory: Any, mctx: Any) -> list[tuple[Any, Any]]:
        if getattr(memory, "kind", "kv") == "iswa":
            return [(memory.base, mctx.base), (memory.base, mctx.base)]
        return [(memory, mctx)]

    replace(executor.__name__, "attention_caches", attention_caches)
    return target


def _mrope_height_width_swapped(target: Any) -> Any:
    # M-RoPE pairs of the height section turn by the width position and vice versa.
    import reference_impl.model.llama as llama

    original = llama.mrope_planes

    def mrope_planes(sections: Any, n_pairs: int) -> np.ndarray:
        planes = original(sections, n_pairs)
        return np.where(planes == 1, 2, np.where(planes == 2, 1, planes))

    replace(llama.__name__, "mrope_planes", mrope_planes)
    return target


def _qwen2vl_epsilon_read(target: Any) -> Any:
    # qwen2vl's RMSNorms use the file's epsilon (llama.cpp 0.3.36 runs them with 0).
    import dataclasses

    import reference_impl.model.gguf_loader as loader

    original = loader.mrope_hparams

    def mrope_hparams(meta: Any, hp: Any) -> Any:
        eps = meta.get_float(f"{hp.arch}.attention.layer_norm_rms_epsilon", 0.0)
        return dataclasses.replace(original(meta, hp), rms_eps=eps)

    replace(loader.__name__, "mrope_hparams", mrope_hparams)
    return target


# -- bert (GGUF-052, DEC-048, DEC-066) ------------------------------------------------------------


def _bert_mask_causal(target: Any) -> Any:
    # the encode mask (a memory-less context's decode) hides the keys after the query
    from reference_impl.decoder import ubatch_executor

    original = ubatch_executor.encode_mask

    def encode_mask(ub: Any) -> torch.Tensor:
        m = original(ub).clone()
        return m + torch.full_like(m, float("-inf")).triu(1)

    replace("reference_impl.decoder.ubatch_executor", "encode_mask", encode_mask)
    return target


def _bert_token_type_skipped(target: Any) -> Any:
    # row 0 of token_types is not added to the input embeddings
    from reference_impl.model import bert

    original = bert.input_embeddings

    def input_embeddings(
        x: torch.Tensor, positions: np.ndarray, pos_embd: torch.Tensor, type_embd: Any
    ) -> torch.Tensor:
        return original(x, positions, pos_embd, None)

    replace("reference_impl.model.bert", "input_embeddings", input_embeddings)
    return target


def _bert_layer_norm_no_bias(target: Any) -> Any:
    def layer_norm(
        x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
    ) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), weight, None, eps)

    replace("reference_impl.model.bert", "layer_norm", layer_norm)
    return target


def _bert_kv_bias_sized_as_q(target: Any) -> Any:
    # a missing Q/K/V bias is zeros of Q's length, also for K and V: wrong (and a failed
    # encode) when head_count_kv < head_count makes K and V narrower than Q
    import dataclasses

    from reference_impl.model import bert

    original = bert._layer

    def _layer(t: dict[str, torch.Tensor], il: int, hp: Any) -> Any:
        p = f"blk.{il}."
        n_q = hp.n_embd_q
        parts = [t.get(p + m + ".bias", torch.zeros(n_q)) for m in ("attn_q", "attn_k", "attn_v")]
        return dataclasses.replace(original(t, il, hp), b_qkv=torch.cat(parts))

    replace("reference_impl.model.bert", "_layer", _layer)
    return target


def _bert_heads_not_checked(target: Any) -> Any:
    # bert's hyperparameters are read as if the heads tiled n_embd, so a file whose key_length
    # makes them wider (which llama.cpp refuses) loads and encodes with those wide heads
    import dataclasses

    from reference_impl.model import gguf_loader

    original = gguf_loader.bert_hparams

    def bert_hparams(meta: Any, hp: Any) -> Any:
        tiled = dataclasses.replace(hp, head_dim=hp.n_embd // hp.n_head)
        return dataclasses.replace(original(meta, tiled), head_dim=hp.head_dim)

    replace("reference_impl.model.gguf_loader", "bert_hparams", bert_hparams)
    return target


def _cls_pooling_off_by_one(target: Any) -> Any:
    # CLS pooling reads the row after the sequence's first token (the last row stays the last)
    from reference_impl.decoder import pooling

    def pool_cls(hidden: np.ndarray, ub: Any) -> dict[int, np.ndarray]:
        rows = pooling._target_rows(ub, last=False)
        n = ub.n_tokens
        return {s: hidden[min(i + 1, n - 1)].astype(np.float32) for s, i in sorted(rows.items())}

    pooling.POOLERS[pooling.PoolingType.CLS] = pool_cls
    return target


def _memoryless_decode_refused(target: Any) -> Any:
    # decode on a context without memory returns -1 instead of encoding the batch
    from reference_impl.decoder.context import Context

    def _decode_as_encode(self: Any, batch: Any) -> int:
        return -1

    Context._decode_as_encode = _decode_as_encode  # type: ignore[method-assign]
    return target


def _position_table_unchecked(target: Any) -> Any:
    # a bert batch's positions are not checked against the position table
    def _check_position_table(hp: Any, sb: Any) -> None:
        return None

    replace("reference_impl.decoder.context", "_check_position_table", _check_position_table)
    return target


def _no_memory_seq_rm_false(target: Any) -> Any:
    # seq_rm on a context without memory reports failure (llama.cpp: true)
    from reference_impl.decoder.context import _NoMemory

    def seq_rm(self: Any, seq_id: int, p0: int, p1: int) -> bool:
        return False

    _NoMemory.seq_rm = seq_rm  # type: ignore[method-assign]
    return target


def _bert_forward_tied_head(target: Any) -> Any:
    # bert's full-sequence forward projects its hidden states with token_embd, as if tied
    from reference_impl.model.bert import BertForward

    def forward(self: Any, tokens: Any, output_rows: Any = None) -> torch.Tensor:
        return F.linear(self.encode_tokens(tokens), self.token_embd)

    BertForward.forward = forward  # type: ignore[method-assign]
    return target


def _empty_forward_empty_logits(target: Any) -> Any:
    # a forward of no token returns an empty [0, n_vocab] array instead of refusing
    from reference_impl.model import Model

    original = Model.forward

    def forward(self: Any, tokens: Any, output_rows: Any = None) -> torch.Tensor:
        if np.asarray(tokens).size == 0:
            return torch.zeros(0, self.hparams.n_vocab)
        out: torch.Tensor = original(self, tokens, output_rows)
        return out

    Model.forward = forward  # type: ignore[method-assign]
    return target


def _unnamed_tensors_unreadable(target: Any) -> Any:
    # model_tensor reads only the global and per-layer tensors of the separate-Q/K/V table: a
    # stored bias or a fused attn_qkv is not found by its GGUF name
    from reference_impl.model.gguf_loader import ModelWeights

    original = ModelWeights.tensor

    def tensor(self: Any, name: str) -> torch.Tensor:
        if name.endswith(".bias") or ".attn_qkv." in name:
            raise KeyError(name)
        out: torch.Tensor = original(self, name)
        return out

    ModelWeights.tensor = tensor  # type: ignore[method-assign]
    return target


MUTANTS = [
    Mutant(
        "model-k-bias-ignored",
        "model",
        "the K projection's bias (attn_k.bias, or K's part of attn_qkv.bias) is not added",
        kills=("GGUF-044", "GGUF-046"),
        apply=_k_bias_ignored,
    ),
    Mutant(
        "model-rope-factors-ignored",
        "model",
        "rope_freqs is loaded but the RoPE angles are not divided by it",
        kills=("GGUF-047",),
        apply=_rope_factors("ignored"),
    ),
    Mutant(
        "model-rope-factors-multiplied",
        "model",
        "the RoPE angles are multiplied by rope_freqs instead of divided",
        kills=("GGUF-047",),
        apply=_rope_factors("multiplied"),
    ),
    Mutant(
        "model-qwen2-rope-norm",
        "model",
        "qwen2 rotates adjacent pairs (NORM RoPE) instead of (x[j], x[j + n_rot/2]) (NEOX)",
        kills=("GGUF-046",),
        apply=_qwen2_rope_norm,
    ),
    Mutant(
        "model-unread-key-decoded",
        "model",
        "the loader decodes every metadata key, so a non-UTF-8 string in an unread key fails",
        kills=("GGUF-056",),
        apply=_every_key_decoded,
    ),
    Mutant(
        "model-fused-qkv-v-before-k",
        "model",
        "a fused attn_qkv is split as Q, V, K instead of Q, K, V",
        kills=("GGUF-044",),
        apply=_fused_qkv_v_before_k,
    ),
    Mutant(
        "model-bias-length-n-embd",
        "model",
        "every bias must hold n_embd values, so a K bias of n_embd values loads",
        kills=("GGUF-048",),
        apply=_bias_length_n_embd,
    ),
    Mutant(
        "model-output-always-tied",
        "model",
        "logits project through token_embd even when output.weight is stored",
        ("GGUF-005",),
        _output_always_tied,
        black_box=True,
    ),
    Mutant(
        "model-rope-split-halves",
        "model",
        "RoPE rotates (x[j], x[j+d/2]) (NEOX) instead of adjacent pairs (x[2j], x[2j+1])",
        kills=("GGUF-020", "GGUF-025"),
        apply=_rope_split_halves,
    ),
    Mutant(
        "model-q4-nibbles-swapped",
        "model",
        "Q4_0 dequantization takes the high nibbles as the first 16 values of a block",
        kills=("GGUF-003", "GGUF-022"),
        apply=_q4_nibbles_swapped,
    ),
    Mutant(
        "model-tied-output-zeros",
        "model",
        "without output.weight the output projection is zeros instead of token_embd",
        kills=("GGUF-021",),
        apply=_tied_output_zeros,
    ),
    Mutant(
        "model-rms-eps-dropped",
        "model",
        "RMSNorm ignores the file's epsilon",
        kills=("GGUF-020",),
        apply=_rms_eps_dropped,
    ),
    Mutant(
        "model-gqa-heads-tiled",
        "model",
        "GQA maps query head h to KV head h % n_head_kv instead of h // group",
        kills=("GGUF-020",),
        apply=_gqa_heads_tiled,
    ),
    Mutant(
        "model-any-architecture",
        "model",
        "the loader accepts any general.architecture",
        kills=("GGUF-008",),
        apply=_any_architecture,
    ),
    Mutant(
        "model-k-scale-from-min-byte",
        "model",
        "Q4_K/Q5_K sub-blocks 4..7 take the top bits of their 6-bit scale from the min's byte",
        kills=("GGUF-043",),
        apply=_k_scale_from_min_byte,
    ),
    Mutant(
        "model-q5-high-bits-reversed",
        "model",
        "Q5_0/Q5_1 take bit 31 - j of qh as the fifth bit of value j",
        kills=("GGUF-043",),
        apply=_q5_high_bits_reversed,
    ),
    Mutant(
        "model-iq4-grid-mirrored",
        "model",
        "IQ4_NL/IQ4_XS read the non-linear grid from its other end",
        kills=("GGUF-043",),
        apply=_iq4_grid_mirrored,
    ),
    Mutant(
        "model-tq1-digits-reversed",
        "model",
        "TQ1_0 unpacks the base-3 digits of each byte in reverse order",
        kills=("GGUF-043",),
        apply=_ternary_digits_reversed,
    ),
    Mutant(
        "model-mxfp4-scale-not-halved",
        "model",
        "MXFP4 multiplies the doubled E2M1 grid by 2^(e-127) instead of 2^(e-128)",
        kills=("GGUF-043",),
        apply=_e8m0_not_halved,
    ),
    Mutant(
        "model-nvfp4-scales-reversed",
        "model",
        "NVFP4 sub-block s takes the UE4M3 scale of sub-block 3 - s",
        kills=("GGUF-043",),
        apply=_nvfp4_scales_reversed,
    ),
    Mutant(
        "model-iq-sign-parity-odd",
        "model",
        "IQ2_XXS/IQ2_XS/IQ3_XXS complete 7 stored signs to an odd count of negatives",
        kills=("GGUF-043",),
        apply=_iq_sign_parity_odd,
    ),
    Mutant(
        "model-iq-scale-nibbles-swapped",
        "model",
        "IQ2_XS/IQ2_S/IQ3_S scales (IQ1_M high bits) take a byte's high nibble first",
        kills=("GGUF-043",),
        apply=_iq_scale_nibbles_swapped,
    ),
    Mutant(
        "model-iq1-delta-inverted",
        "model",
        "IQ1_S/IQ1_M shift the grid by -1/8 where the sign bit is clear",
        kills=("GGUF-043",),
        apply=_iq1_delta_inverted,
    ),
    Mutant(
        "model-bf16-read-as-f16",
        "model",
        "BF16 tensors are read as IEEE half floats",
        kills=("GGUF-043",),
        apply=_bf16_rounded_through_f16,
    ),
    Mutant(
        "model-split-duplicate-overwrites",
        "model",
        "a tensor stored in two parts of a split model is taken from the later part",
        kills=("GGUF-040",),
        apply=_split_duplicates_overwrite,
        black_box=True,
    ),
    Mutant(
        "model-split-parts-numbered-from-zero",
        "model",
        "split parts are looked up as -0000k- with k = split.no instead of split.no + 1",
        kills=("GGUF-040",),
        apply=_split_parts_numbered_from_zero,
    ),
    Mutant(
        "model-vocab-only-reads-tensors",
        "model",
        "a vocab_only load reads and checks the tensors anyway",
        kills=("GGUF-041",),
        apply=_vocab_only_reads_tensors,
        black_box=True,
    ),
    Mutant(
        "model-check-tensors-nan-only",
        "model",
        "check_tensors refuses NaN but lets Inf values and scales through",
        kills=("GGUF-042",),
        apply=_check_tensors_nan_only,
        black_box=True,
    ),
    Mutant(
        "model-check-tensors-mxfp4-products",
        "model",
        "check_tensors judges MXFP4 by its dequantized values instead of its exponent byte",
        kills=("GGUF-042",),
        apply=_check_tensors_products,
    ),
    Mutant(
        "model-reader-errors-untyped",
        "model",
        "exceptions of the GGUF reader on a corrupt file escape untyped",
        kills=("GGUF-045",),
        apply=_reader_errors_untyped,
    ),
    Mutant(
        "model-reader-aborts-on-corrupt",
        "model",
        "a GGUF file the reader cannot parse aborts the process instead of being refused",
        kills=("GGUF-045",),
        apply=_reader_aborts_on_corrupt,
        black_box=True,
    ),
    Mutant(
        "model-swa-window-one-longer",
        "model",
        "the sliding window hides a key only when p_query - p_key > n_swa (one key too many)",
        kills=("GGUF-049", "DEC-065"),
        apply=_swa_window_one_longer,
        black_box=True,
    ),
    Mutant(
        "model-swa-layers-global-rope-base",
        "model",
        "gemma3's sliding-window layers rotate with rope.freq_base instead of 10000",
        kills=("GGUF-049",),
        apply=_swa_layers_global_rope_base,
        black_box=True,
    ),
    Mutant(
        "model-gemma3-post-norms-skipped",
        "model",
        "gemma3's post-attention and post-FFN RMSNorms are skipped",
        kills=("GGUF-049",),
        apply=_gemma3_post_norms_skipped,
        black_box=True,
    ),
    Mutant(
        "model-gemma3-embeddings-unscaled",
        "model",
        "gemma3's token embeddings are not multiplied by sqrt(n_embd)",
        kills=("GGUF-049",),
        apply=_gemma3_embeddings_unscaled,
        black_box=True,
    ),
    Mutant(
        "model-swa-pattern-key-ignored",
        "model",
        "attention.sliding_window_pattern is ignored (the sliding layers are always il % 6 < 5)",
        kills=("GGUF-050",),
        apply=_swa_pattern_key_ignored,
    ),
    Mutant(
        "model-iswa-sliding-layers-on-base-cache",
        "model",
        "the sliding-window layers keep K/V in the iSWA memory's full cache, without the window",
        kills=("DEC-065",),
        apply=_iswa_sliding_layers_on_base_cache,
        black_box=True,
    ),
    Mutant(
        "model-k-shift-global-base",
        "model",
        "the K-shift rotates gemma3's sliding layers with rope.freq_base instead of their own base",
        kills=("GGUF-053",),
        apply=_k_shift_rope("global-base"),
        black_box=True,
    ),
    Mutant(
        "model-k-shift-without-rope-factors",
        "model",
        "the K-shift rotates cached keys without the file's rope_freqs factors",
        kills=("GGUF-053",),
        apply=_k_shift_rope("no-factors"),
        black_box=True,
    ),
    Mutant(
        "model-k-shift-adjacent-pairs",
        "model",
        "the K-shift rotates adjacent pairs (llama's layout) for every architecture, NEOX included",
        kills=("GGUF-053",),
        apply=_k_shift_rope("norm-pairs"),
        black_box=True,
    ),
    Mutant(
        "model-mrope-height-width-swapped",
        "model",
        "M-RoPE pairs of the height section turn by the width position and vice versa",
        kills=("GGUF-051",),
        apply=_mrope_height_width_swapped,
        black_box=True,
    ),
    Mutant(
        "model-qwen2vl-epsilon-read",
        "model",
        "qwen2vl's RMSNorms use the file's epsilon instead of llama.cpp 0.3.36's 0",
        kills=("GGUF-051",),
        apply=_qwen2vl_epsilon_read,
        black_box=True,
    ),
    Mutant(
        "gguf-rope-dims-key-ignored",
        "model",
        "rope.dimension_count is ignored (the head size is assumed), so a contradictory file loads",
        ("GGUF-011",),
        _rope_dims_key_ignored,
    ),
    Mutant(
        "gguf-unknown-tokenizer-as-no-vocab",
        "model",
        "an unknown tokenizer.ggml.model loads as a model without a vocabulary",
        ("GGUF-016",),
        _unknown_tokenizer_as_no_vocab,
    ),
    Mutant(
        "model-bert-mask-causal",
        "model",
        "a bert context's encode attends causally (keys after the query are hidden)",
        kills=("GGUF-052", "DEC-048"),
        apply=_bert_mask_causal,
        black_box=True,
    ),
    Mutant(
        "model-bert-token-type-skipped",
        "model",
        "bert's input embeddings lack row 0 of the token-type table",
        kills=("GGUF-052",),
        apply=_bert_token_type_skipped,
        black_box=True,
    ),
    Mutant(
        "model-bert-kv-bias-sized-as-q",
        "model",
        "a bert layer's missing K/V bias is zeros of Q's length, not of n_embd_k_gqa",
        kills=("GGUF-052",),
        apply=_bert_kv_bias_sized_as_q,
        black_box=True,
    ),
    Mutant(
        "model-bert-heads-not-checked",
        "model",
        "a bert file whose key_length makes heads wider than n_embd / head_count loads",
        kills=("GGUF-052",),
        apply=_bert_heads_not_checked,  # killed through the error code (model.errors)
    ),
    Mutant(
        "model-bert-layernorm-no-bias",
        "model",
        "bert's LayerNorms apply their weight but not their bias",
        kills=("GGUF-052",),
        apply=_bert_layer_norm_no_bias,
        black_box=True,
    ),
    Mutant(
        "model-bert-cls-pooling-off-by-one",
        "model",
        "CLS pooling takes the row after the sequence's first token",
        kills=("GGUF-052",),
        apply=_cls_pooling_off_by_one,
        black_box=True,
    ),
    Mutant(
        "model-memoryless-decode-refused",
        "model",
        "decode on a context without memory returns -1 instead of encoding the batch",
        kills=("DEC-048",),
        apply=_memoryless_decode_refused,
        black_box=True,
    ),
    Mutant(
        "model-memoryless-seq-rm-false",
        "model",
        "seq_rm on a context without memory returns false (llama.cpp: true)",
        kills=("DEC-066",),
        apply=_no_memory_seq_rm_false,
        black_box=True,
    ),
    Mutant(
        "model-bert-position-table-unchecked",
        "model",
        "a bert batch with a position past the learned position table is not refused with -1",
        kills=("DEC-067",),
        apply=_position_table_unchecked,
    ),
    Mutant(
        "model-bert-forward-tied-head",
        "model",
        "bert's full-sequence forward gives token_embd-projected logits instead of zeros",
        kills=("GGUF-054",),
        apply=_bert_forward_tied_head,
        black_box=True,
    ),
    Mutant(
        "model-empty-forward-empty-logits",
        "model",
        "a forward of an empty token sequence returns no row instead of being refused",
        kills=("GGUF-055",),
        apply=_empty_forward_empty_logits,
        black_box=True,
    ),
    Mutant(
        "model-unnamed-tensors-unreadable",
        "model",
        "model_tensor cannot read a stored bias or fused attn_qkv by its GGUF name",
        kills=("GGUF-004",),
        apply=_unnamed_tensors_unreadable,
    ),
]


def _partial_separate_biases_used(target: Any) -> Any:
    # one or two separate Q/K/V biases beside a fused attn_qkv weight are added too
    replace("reference_impl.model.gguf_loader", "separate_biases_count", lambda biases: True)
    return target


MUTANTS += [
    Mutant(
        "model-fused-qkv-partial-biases-used",
        "model",
        "beside a fused attn_qkv weight, a partial set of separate Q/K/V biases is added",
        kills=("GGUF-057",),
        apply=_partial_separate_biases_used,
        black_box=True,
    ),
]
