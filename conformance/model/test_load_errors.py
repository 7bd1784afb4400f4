"""Files llama.cpp refuses to load, and (with ``model.errors``) the codes the spec gives them.

Each case builds a deliberately broken variant of a fixture. ``test_refused`` runs the cases
llama.cpp 0.3.36 itself refuses (``refused_by_llamacpp``): an engine that loads one of them is
more permissive than llama.cpp (a default for a missing key, an unknown tensor ignored...), which
is a divergence the report shows, not necessarily a bug. ``test_error_code_names_the_culprit``
checks the spec's stable codes and the ``field`` naming the key or tensor at fault.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from conformance.assertions import assert_unchanged, raises_code
from conformance.fixtures.gguf_models import FIXTURES, FixtureConfig, fixture_path, write_gguf

pytestmark = pytest.mark.requires("model.load")

CFG = FIXTURES["mha"]


@dataclass(frozen=True)
class Case:
    id: str
    invariant: str
    code: str
    field: str
    build: Callable[[Path], Path]
    refused_by_llamacpp: bool = True


def _variant(**kwargs: Any) -> Callable[[Path], Path]:
    def build(tmp: Path) -> Path:
        return write_gguf(CFG, tmp / "variant.gguf", **kwargs)

    return build


def _wide_variant(**kwargs: Any) -> Callable[[Path], Path]:
    """A variant of a model whose rows hold 256 values (room for one 256-value block)."""
    wide = FixtureConfig("wide", n_embd=256, n_layer=1, n_head=4, n_head_kv=2, n_ff=256, seed=40)

    def build(tmp: Path) -> Path:
        return write_gguf(wide, tmp / "variant.gguf", **kwargs)

    return build


def _bytes_variant(edit: Callable[[bytes], bytes]) -> Callable[[Path], Path]:
    def build(tmp: Path) -> Path:
        out = tmp / "variant.gguf"
        out.write_bytes(edit(fixture_path("mha").read_bytes()))
        return out

    return build


def _missing(tmp: Path) -> Path:
    return tmp / "no-such-model.gguf"


def _garbage_header(data: bytes) -> bytes:
    # Valid magic and version, then a tensor count and key count far beyond the file.
    return data[:8] + (2**40).to_bytes(8, "little") + (2**40).to_bytes(8, "little") + data[24:]


def _retype_array_items(
    key: str, old: gguf.GGUFValueType, new: gguf.GGUFValueType
) -> Callable[[bytes], bytes]:
    """Change the item type of the array-valued key ``key`` in place (same item size, so the
    file stays well formed): ``<key bytes> ARRAY <item type>``."""

    def edit(data: bytes) -> bytes:
        head = key.encode() + int(gguf.GGUFValueType.ARRAY).to_bytes(4, "little")
        needle = head + int(old).to_bytes(4, "little")
        assert data.count(needle) == 1, f"{key} is not an array of {old.name} in the fixture"
        return data.replace(needle, head + int(new).to_bytes(4, "little"))

    return edit


def _q8_k_tensor() -> tuple[np.ndarray, Any]:
    # Q8_K packs 256 values per block (one block per row of the wide model's attn_q); it is
    # llama.cpp's activation type, not a storage type the reference accepts for weights.
    qtype = gguf.GGMLQuantizationType.Q8_K
    raw = np.zeros((256, gguf.GGML_QUANT_SIZES[qtype][1]), dtype=np.uint8)
    return raw, qtype


CASES = [
    Case("not-a-file", "GGUF-006", "GGUF_FILE_NOT_FOUND", "path", _missing),
    Case(
        "bad-magic", "GGUF-007", "GGUF_MALFORMED", "path", _bytes_variant(lambda d: b"GGUX" + d[4:])
    ),
    Case("garbage-header", "GGUF-007", "GGUF_MALFORMED", "path", _bytes_variant(_garbage_header)),
    Case(
        "truncated-data",
        "GGUF-007",
        "GGUF_MALFORMED",
        "path",
        _bytes_variant(lambda d: d[: len(d) * 2 // 3]),
    ),
    Case(
        "truncated-header", "GGUF-007", "GGUF_MALFORMED", "path", _bytes_variant(lambda d: d[:300])
    ),
    Case("empty-file", "GGUF-007", "GGUF_MALFORMED", "path", _bytes_variant(lambda d: b"")),
    Case(
        "unknown-arch",
        "GGUF-008",
        "GGUF_UNSUPPORTED_ARCH",
        "general.architecture",
        _variant(architecture="notllama"),
    ),
    Case(
        "missing-rms-eps",
        "GGUF-009",
        "GGUF_MISSING_KEY",
        "llama.attention.layer_norm_rms_epsilon",
        _variant(omit_keys=["llama.attention.layer_norm_rms_epsilon"]),
    ),
    Case(
        "missing-embedding-length",
        "GGUF-009",
        "GGUF_MISSING_KEY",
        "llama.embedding_length",
        _variant(omit_keys=["llama.embedding_length"]),
    ),
    Case(
        "missing-tokenizer-model",
        "GGUF-009",
        "GGUF_MISSING_KEY",
        "tokenizer.ggml.model",
        _variant(omit_keys=["tokenizer.ggml.model"]),
    ),
    Case(
        "block-count-as-string",
        "GGUF-010",
        "GGUF_KEY_TYPE",
        "llama.block_count",
        _variant(override_keys={"llama.block_count": "2"}),
    ),
    Case(
        "eps-as-string",
        "GGUF-010",
        "GGUF_KEY_TYPE",
        "llama.attention.layer_norm_rms_epsilon",
        _variant(override_keys={"llama.attention.layer_norm_rms_epsilon": "1e-5"}),
    ),
    Case(
        "token-types-as-float-array",
        "GGUF-010",
        "GGUF_KEY_TYPE",
        "tokenizer.ggml.token_type",
        _bytes_variant(
            _retype_array_items(
                "tokenizer.ggml.token_type", gguf.GGUFValueType.INT32, gguf.GGUFValueType.FLOAT32
            )
        ),
        refused_by_llamacpp=False,  # llama.cpp reads the array data without checking its type
    ),
    Case(
        "heads-not-multiple-of-kv-heads",
        "GGUF-011",
        "GGUF_INVALID_HPARAM",
        "llama.attention.head_count_kv",
        _variant(override_keys={"llama.attention.head_count_kv": 3}),
    ),
    # a zero count: llama.cpp 0.3.36 refuses these two at load (tensor shapes with a 0 dimension)
    Case(
        "zero-head-count-kv",
        "GGUF-011",
        "GGUF_INVALID_HPARAM",
        "llama.attention.head_count_kv",
        _variant(override_keys={"llama.attention.head_count_kv": 0}),
    ),
    Case(
        "zero-feed-forward-length",
        "GGUF-011",
        "GGUF_INVALID_HPARAM",
        "llama.feed_forward_length",
        _variant(override_keys={"llama.feed_forward_length": 0}),
    ),
    Case(
        "zero-context-length",
        "GGUF-011",
        "GGUF_INVALID_HPARAM",
        "llama.context_length",
        _variant(override_keys={"llama.context_length": 0}),
        refused_by_llamacpp=False,  # llama.cpp loads it (decision: spec/model.md GGUF-011)
    ),
    Case(
        "rope-dims-not-head-size",
        "GGUF-011",
        "GGUF_INVALID_HPARAM",
        "llama.rope.dimension_count",
        _variant(override_keys={"llama.rope.dimension_count": CFG.head_dim // 2}),
    ),
    Case(
        "missing-ffn-down",
        "GGUF-012",
        "GGUF_MISSING_TENSOR",
        "blk.1.ffn_down.weight",
        _variant(omit_tensors=["blk.1.ffn_down.weight"]),
    ),
    Case(
        "missing-output-norm",
        "GGUF-012",
        "GGUF_MISSING_TENSOR",
        "output_norm.weight",
        _variant(omit_tensors=["output_norm.weight"]),
    ),
    Case(
        "k-proj-wrong-shape",
        "GGUF-013",
        "GGUF_SHAPE_MISMATCH",
        "blk.0.attn_k.weight",
        _variant(
            override_tensors={
                "blk.0.attn_k.weight": np.zeros((CFG.head_dim, CFG.n_embd), np.float32)
            }
        ),
    ),
    Case(
        "embd-wrong-vocab",
        "GGUF-013",
        "GGUF_SHAPE_MISMATCH",
        "token_embd.weight",
        _variant(override_tensors={"token_embd.weight": np.zeros((100, CFG.n_embd), np.float32)}),
    ),
    Case(
        "q8_k-tensor",
        "GGUF-014",
        "GGUF_UNSUPPORTED_TENSOR_TYPE",
        "blk.0.attn_q.weight",
        _wide_variant(override_tensors={"blk.0.attn_q.weight": _q8_k_tensor()}),
        refused_by_llamacpp=False,  # llama.cpp loads a Q8_K weight
    ),
    Case(
        "extra-tensor",
        "GGUF-015",
        "GGUF_UNEXPECTED_TENSOR",
        "blk.0.extra.weight",
        _variant(override_tensors={"blk.0.extra.weight": np.zeros((CFG.n_embd,), np.float32)}),
    ),
    # a mixture-of-experts tensor (no expert_count key): the feature is unsupported, whatever
    # follows the tensor's kind in its name, no suffix at all included
    Case(
        "moe-router-tensor",
        "GGUF-015",
        "GGUF_UNSUPPORTED_FEATURE",
        "blk.0.ffn_gate_inp.weight",
        _variant(
            override_tensors={"blk.0.ffn_gate_inp.weight": np.zeros((4, CFG.n_embd), np.float32)}
        ),
    ),
    Case(
        "moe-experts-tensor-without-suffix",
        "GGUF-015",
        "GGUF_UNSUPPORTED_FEATURE",
        "blk.1.ffn_gate_exps",
        _variant(
            override_tensors={
                "blk.1.ffn_gate_exps": np.zeros((2, CFG.n_ff, CFG.n_embd), np.float32)
            }
        ),
    ),
    Case(
        "unknown-tokenizer",
        "GGUF-016",
        "GGUF_UNSUPPORTED_TOKENIZER",
        "tokenizer.ggml.model",
        _variant(override_keys={"tokenizer.ggml.model": "no-such-tokenizer"}),
    ),
]


def _params(cases: list[Case]) -> list[Any]:
    return [pytest.param(c, id=c.id, marks=pytest.mark.invariant(c.invariant)) for c in cases]


@pytest.mark.parametrize("case", _params([c for c in CASES if c.refused_by_llamacpp]))
def test_refused(case: Case, target: Any, tmp_path: Path) -> None:
    path = case.build(tmp_path)
    with pytest.raises(Exception):  # noqa: B017 -- any engine-specific error counts here
        target.load_model(path)


@pytest.mark.requires("model.errors")
@pytest.mark.parametrize("case", _params(CASES))
def test_error_code_names_the_culprit(case: Case, target: Any, tmp_path: Path) -> None:
    path = case.build(tmp_path)
    with raises_code(case.code, field=case.field):
        target.load_model(path)


# -- keys no rule reads -------------------------------------------------------------------------


def _unread_keys(data: bytes) -> bytes:
    """Make the marker strings of the added keys invalid UTF-8 (a 0xFF byte; same length)."""
    return data.replace(b"zz-unread-zz", b"zz\xffunread-zz")


# keys outside every namespace the spec reads (a string that is not UTF-8, and an array of such
# strings), and general.name, which is read (family names pick token attributes) but whose 0xFF
# byte must not stop the load either; each file must load and compute as the plain file
NOT_UTF8_KEYS: dict[str, dict[str, Any]] = {
    "unread keys": {
        "decode-conformance.note": "zz-unread-zz",
        "decode-conformance.list": ["zz-unread-zz"],
    },
    "general.name": {"general.name": "zz-unread-zz"},
}


@pytest.mark.invariant("GGUF-056")
@pytest.mark.requires("model.forward")
@pytest.mark.parametrize("what", sorted(NOT_UTF8_KEYS))
def test_unread_keys_are_ignored_whatever_their_bytes(
    target: Any, tmp_path: Path, what: str
) -> None:
    plain = write_gguf(CFG, tmp_path / "plain.gguf")
    extra = write_gguf(CFG, tmp_path / "extra.gguf", override_keys=NOT_UTF8_KEYS[what])
    extra.write_bytes(_unread_keys(extra.read_bytes()))
    assert b"\xffunread" in extra.read_bytes()
    tokens = [1, 290, 97, 58, 293]
    want = np.asarray(target.forward_logits(target.load_model(plain), tokens))
    got = np.asarray(target.forward_logits(target.load_model(extra), tokens))
    assert_unchanged(want, got, f"logits of the file with non-UTF-8 {what}")
