"""Loader features of llama_model_params and split files: ``vocab_only`` (GGUF-041),
``check_tensors`` (GGUF-042) and split GGUF models (GGUF-040).

Each broken file is built from a fixture; where llama.cpp 0.3.36 refuses the same file, the
peer comparison checks that both engines agree on refusing or loading it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from conformance.assertions import assert_nmse, raises_code
from conformance.fixtures.gguf_models import (
    BLOCK_SCALE_FIELDS,
    FIXTURES,
    WEIGHT_TYPES,
    FixtureConfig,
    fixture_path,
    random_blocks,
    write_gguf,
    write_split_gguf,
)
from conformance.gate import cached
from conformance.model.test_forward import PROMPTS

pytestmark = pytest.mark.requires("model.load")

CFG = FIXTURES["mha"]
WIDE = FixtureConfig("wide", n_embd=256, n_layer=1, n_head=4, n_head_kv=2, n_ff=256, seed=40)
TEXTS = ["Hello world", "The quick brown fox, 2024!", " leading space", "ünïcode ✓ <|sep|> end"]


def _loads(load: Callable[[Any], Any], path: Path) -> bool:
    try:
        load(path)
    except Exception:
        return False
    return True


# -- vocab_only (GGUF-041) --------------------------------------------------------------------

# Files a full load refuses for their tensors; a vocab-only load reads no tensor, so it loads
# them (llama.cpp 0.3.36 as well).
BROKEN_TENSORS: dict[str, dict[str, Any]] = {
    "missing-tensor": {"omit_tensors": ["blk.1.ffn_down.weight"]},
    "wrong-shape": {
        "override_tensors": {"blk.0.attn_k.weight": np.zeros((16, CFG.n_embd), np.float32)}
    },
    "extra-tensor": {
        "override_tensors": {"blk.0.extra.weight": np.zeros((CFG.n_embd,), np.float32)}
    },
}


def _same_vocab(target: Any, a: Any, b: Any) -> None:
    assert target.vocab_info(a) == target.vocab_info(b)
    for text in TEXTS:
        for add_special in (True, False):
            want = target.tokenize(b, text, add_special, True)
            assert target.tokenize(a, text, add_special, True) == want, text
    for tok in (0, 1, 2, 3, 100, 259, 300, 507):
        assert target.token_to_piece(a, tok, True) == target.token_to_piece(b, tok, True), tok


@pytest.mark.invariant("GGUF-041")
@pytest.mark.requires("model.vocab_only", "tokenizer.tokenize")
@pytest.mark.parametrize("name", ["mha", "gqa", "q4"])
def test_vocab_only_tokenizes_like_the_full_model(
    name: str, target: Any, load: Callable[[str], Any]
) -> None:
    vocab = target.load_model_vocab_only(fixture_path(name))
    assert target.vocab_info(vocab)["n_vocab"] == target.model_info(load(name))["n_vocab"]
    _same_vocab(target, vocab, load(name))


@pytest.mark.invariant("GGUF-041")
@pytest.mark.requires("model.vocab_only", "tokenizer.tokenize")
@pytest.mark.parametrize("case", list(BROKEN_TENSORS))
def test_vocab_only_reads_no_tensor(
    case: str, target: Any, load: Callable[[str], Any], tmp_path: Path
) -> None:
    path = write_gguf(CFG, tmp_path / f"{case}.gguf", **BROKEN_TENSORS[case])
    with pytest.raises(Exception):  # noqa: B017 -- the full load is refused (GGUF-012/013/015)
        target.load_model(path)
    _same_vocab(target, target.load_model_vocab_only(path), load("mha"))


@pytest.mark.invariant("GGUF-041")
@pytest.mark.requires("model.vocab_only", "model.forward", "model.errors")
def test_vocab_only_model_does_not_run(target: Any) -> None:
    vocab = target.load_model_vocab_only(fixture_path("mha"))
    with raises_code("MODEL_VOCAB_ONLY"):
        target.forward_logits(vocab, PROMPTS["short"])


# -- check_tensors (GGUF-042) -----------------------------------------------------------------


@dataclass(frozen=True)
class DataCase:
    id: str
    cfg: FixtureConfig
    tensor: str
    value: np.ndarray | tuple[np.ndarray, Any]
    bad_index: int | None  # first flat value at fault; None: the file is clean
    notes: str = field(default="")


def _f32(shape: tuple[int, ...], at: tuple[int, ...], value: float, dtype: Any) -> np.ndarray:
    out = np.full(shape, 0.5, dtype=dtype)
    out[at] = value
    return out


def _blocks(weight_type: str, row: int, which: str, value: float) -> tuple[np.ndarray, Any]:
    """[256, 256] block bytes of ``weight_type`` with field ``which`` (``d`` / ``m``) of the
    first block of ``row`` set to the fp16 ``value``."""
    raw = random_blocks(weight_type, (256, 256), np.random.default_rng(7), 0.02).reshape(256, -1)
    at = BLOCK_SCALE_FIELDS[weight_type][0 if which == "d" else 1]
    assert at is not None
    raw[row, at : at + 2] = np.frombuffer(np.float16(value).tobytes(), np.uint8)
    return raw, WEIGHT_TYPES[weight_type]


def _q8_0(row: int, value: float) -> tuple[np.ndarray, Any]:
    qtype = WEIGHT_TYPES["q8_0"]
    raw = gguf.quants.quantize(np.full((256, 256), 0.01, np.float32), qtype).copy()
    raw[row, 0:2] = np.frombuffer(np.float16(value).tobytes(), np.uint8)
    return raw, qtype


def _bf16(at: tuple[int, int], bits: int) -> tuple[np.ndarray, Any]:
    qtype = WEIGHT_TYPES["bf16"]
    raw = gguf.quants.quantize(np.full((256, 256), 0.01, np.float32), qtype).copy()
    raw.view(np.uint16)[at] = bits
    return raw, qtype


def _mxfp4(row: int, exponent: int) -> tuple[np.ndarray, Any]:
    raw = random_blocks("mxfp4", (256, 256), np.random.default_rng(7), 0.02).reshape(256, -1)
    raw[row, 0] = exponent
    raw[row, 1:17] = 0x77  # every quant 6 (grid 12): 12 * 2^(254 - 128) overflows float32
    return raw, WEIGHT_TYPES["mxfp4"]


ATTN_Q = "blk.0.attn_q.weight"
DATA_CASES = [
    DataCase("f32-nan", CFG, "blk.0.attn_norm.weight", _f32((64,), (5,), np.nan, np.float32), 5),
    DataCase("f32-inf", CFG, "output_norm.weight", _f32((64,), (63,), -np.inf, np.float32), 63),
    DataCase(
        "f16-inf", CFG, "blk.1.attn_q.weight", _f32((64, 64), (3, 7), np.inf, np.float16), 199
    ),
    DataCase("bf16-nan", WIDE, ATTN_Q, _bf16((2, 9), 0x7FC0), 2 * 256 + 9),
    DataCase("q8_0-nan-scale", WIDE, ATTN_Q, _q8_0(3, np.nan), 768),
    DataCase("q4_1-inf-min", WIDE, ATTN_Q, _blocks("q4_1", 3, "m", np.inf), 768),
    DataCase("q4_k-nan-scale", WIDE, ATTN_Q, _blocks("q4_k", 3, "d", np.nan), 768),
    DataCase("q2_k-inf-dmin", WIDE, ATTN_Q, _blocks("q2_k", 4, "m", -np.inf), 1024),
    DataCase("q6_k-inf-scale", WIDE, ATTN_Q, _blocks("q6_k", 1, "d", np.inf), 256),
    DataCase("iq4_xs-nan-scale", WIDE, ATTN_Q, _blocks("iq4_xs", 0, "d", np.nan), 0),
    DataCase("tq1_0-inf-scale", WIDE, ATTN_Q, _blocks("tq1_0", 9, "d", np.inf), 9 * 256),
    DataCase("mxfp4-nan-exponent", WIDE, ATTN_Q, _mxfp4(3, 0xFF), 768),
    # E8M0 254 is a finite scale: llama.cpp checks stored numbers, not their products.
    DataCase("mxfp4-overflowing-product", WIDE, ATTN_Q, _mxfp4(3, 0xFE), None),
    DataCase("clean-q4_k", WIDE, ATTN_Q, _blocks("q4_k", 3, "d", 65504.0), None),
]


def _data_file(case: DataCase, tmp: Path) -> Path:
    return write_gguf(case.cfg, tmp / f"{case.id}.gguf", override_tensors={case.tensor: case.value})


def _cases(bad: bool | None = None) -> list[Any]:
    return [
        pytest.param(c, id=c.id)
        for c in DATA_CASES
        if bad is None or (c.bad_index is not None) == bad
    ]


@pytest.mark.invariant("GGUF-042")
@pytest.mark.requires("model.check_tensors")
@pytest.mark.parametrize("case", _cases())
def test_check_tensors_refuses_nan_and_inf(case: DataCase, target: Any, tmp_path: Path) -> None:
    path = _data_file(case, tmp_path)
    target.load_model(path)  # without check_tensors the file loads
    loaded = _loads(target.load_model_checked, path)
    assert loaded == (case.bad_index is None), f"{case.id}: check_tensors loaded={loaded}"


@pytest.mark.invariant("GGUF-042")
@pytest.mark.requires("model.check_tensors", "model.errors")
@pytest.mark.parametrize("case", _cases(bad=True))
def test_check_tensors_error_names_the_tensor(case: DataCase, target: Any, tmp_path: Path) -> None:
    with raises_code("GGUF_TENSOR_NOT_FINITE", field=case.tensor, index=case.bad_index):
        target.load_model_checked(_data_file(case, tmp_path))


@pytest.mark.invariant("GGUF-042")
@pytest.mark.requires("model.check_tensors")
@pytest.mark.parametrize("case", _cases())
def test_check_tensors_agrees_with_peer(
    case: DataCase, target: Any, peer: Any, tmp_path: Path
) -> None:
    path = _data_file(case, tmp_path)
    ours = _loads(target.load_model_checked, path)
    theirs = _loads(peer.load_model_checked, path)
    assert ours == theirs, f"{case.id}: target loaded={ours}, peer loaded={theirs}"


# -- split files (GGUF-040) -------------------------------------------------------------------


@pytest.mark.invariant("GGUF-040")
@pytest.mark.requires("model.forward")
@pytest.mark.parametrize(("name", "n_split"), [("mha", 3), ("q4", 2), ("gqa", 5)])
def test_split_model_gives_the_unsplit_logits(
    name: str, n_split: int, target: Any, load: Callable[[str], Any], tmp_path: Path
) -> None:
    parts = write_split_gguf(FIXTURES[name], tmp_path, n_split, prefix=name)
    assert [p.name for p in parts][-1] == f"{name}-{n_split:05d}-of-{n_split:05d}.gguf"
    split = target.load_model(parts[0])
    for label, tokens in PROMPTS.items():
        whole = np.asarray(target.forward_logits(load(name), tokens))
        got = np.asarray(target.forward_logits(split, tokens))
        assert np.array_equal(got, whole), f"{name}/{label}: split logits differ"


@pytest.mark.invariant("GGUF-040")
@pytest.mark.requires("model.forward")
def test_split_model_matches_peer(target: Any, peer: Any, tmp_path: Path) -> None:
    parts = write_split_gguf(FIXTURES["gqa"], tmp_path, 3, prefix="gqa")
    ours, theirs = target.load_model(parts[0]), cached(peer, "load_model", str(parts[0]))
    for label, tokens in PROMPTS.items():
        assert_nmse(
            np.asarray(peer.forward_logits(theirs, tokens)),
            np.asarray(target.forward_logits(ours, tokens)),
            1e-4,
            f"gqa split/{label}",
        )


@dataclass(frozen=True)
class SplitCase:
    id: str
    code: str
    field: str
    index: int | None
    build: Callable[[Path], Path]
    refused_by_llamacpp: bool = True


def _split(n_split: int = 3, **kwargs: Any) -> Callable[[Path], Path]:
    def build(tmp: Path) -> Path:
        return write_split_gguf(CFG, tmp, n_split, **kwargs)[0]

    return build


def _from_part(no: int) -> Callable[[Path], Path]:
    def build(tmp: Path) -> Path:
        return write_split_gguf(CFG, tmp, 3)[no]

    return build


def _renamed_first(tmp: Path) -> Path:
    first = write_split_gguf(CFG, tmp, 3)[0]
    return first.rename(tmp / "model.gguf")


SPLIT_CASES = [
    SplitCase("missing-part", "GGUF_SPLIT_MISSING", "path", 2, _split(skip_parts=[2])),
    SplitCase(
        "tensor-in-two-parts",
        "GGUF_DUPLICATE_TENSOR",
        "output_norm.weight",
        2,
        _split(duplicate={"output_norm.weight": 2}),
    ),
    SplitCase(
        "part-with-wrong-number",
        "GGUF_SPLIT_MISMATCH",
        "split.no",
        2,
        _split(part_keys={2: {"split.no": 1}}),
    ),
    SplitCase(
        "part-without-number",
        "GGUF_MISSING_KEY",
        "split.no",
        1,
        _split(part_keys={1: {"split.no": None}}),
    ),
    SplitCase(
        "tensor-count-mismatch",
        "GGUF_SPLIT_MISMATCH",
        "split.tensors.count",
        0,
        _split(part_keys={0: {"split.tensors.count": 20}}),
    ),
    # the smallest split (N = 2) checks the count as well
    SplitCase(
        "tensor-count-mismatch-two-parts",
        "GGUF_SPLIT_MISMATCH",
        "split.tensors.count",
        0,
        _split(2, part_keys={0: {"split.tensors.count": 20}}),
    ),
    SplitCase("loaded-from-second-part", "GGUF_SPLIT_MISMATCH", "split.no", 0, _from_part(1)),
    SplitCase("first-part-renamed", "GGUF_SPLIT_MISMATCH", "path", 0, _renamed_first),
    SplitCase(
        "part-with-other-count",
        "GGUF_SPLIT_MISMATCH",
        "split.count",
        1,
        _split(part_keys={1: {"split.count": 4}}),
        refused_by_llamacpp=False,  # llama.cpp reads split.count from the first file only
    ),
]


def _split_params(cases: list[SplitCase]) -> list[Any]:
    return [pytest.param(c, id=c.id) for c in cases]


@pytest.mark.invariant("GGUF-040")
@pytest.mark.parametrize("case", _split_params([c for c in SPLIT_CASES if c.refused_by_llamacpp]))
def test_inconsistent_split_loads(case: SplitCase, target: Any, tmp_path: Path) -> None:
    with pytest.raises(Exception):  # noqa: B017 -- any engine-specific error counts here
        target.load_model(case.build(tmp_path))


@pytest.mark.invariant("GGUF-040")
@pytest.mark.requires("model.errors")
@pytest.mark.parametrize("case", _split_params(SPLIT_CASES))
def test_split_error_names_the_part(case: SplitCase, target: Any, tmp_path: Path) -> None:
    with raises_code(case.code, field=case.field, index=case.index):
        target.load_model(case.build(tmp_path))
