"""The target protocol itself: the capability registry, target validation, and the per-test gate."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from conformance import gate
from conformance.protocol import TARGET, registry
from conformance.protocol.sampling import SAMPLERS, samplers_named
from conformance.targets.base import TargetLoadError, validate_target
from conformance.targets.llamacpp import LlamaCppTarget
from conformance.targets.reference import ReferenceTarget
from conformance.targets.transformers.target import TransformersTarget

ROOT = Path(__file__).resolve().parents[1]


def test_every_capability_has_a_protocol_with_members_or_a_meaning() -> None:
    for name, cap in registry().items():
        assert cap.summary, name
        if name not in SAMPLERS:  # a sampler is a name in a chain description
            assert cap.members, f"{name}: its protocol declares no target method"


def test_roles_are_reachable_from_return_annotations() -> None:
    caps = registry()
    assert set(caps["decoder.logits"].objects) == {"model", "context"}
    assert {"decode", "get_logits_ith", "n_ctx"} <= set(caps["decoder.logits"].objects["context"])
    assert "seq_rm" in caps["decoder.memory_ops"].objects["context"]
    assert caps["decoder.logits"].members["new_context"].returns == "context"
    assert caps["memory.kinds"].objects["memory"]["init_batch"].returns == "memory_context"
    assert caps["kv.cache"].members["new_kv_cache"].returns == "kv_cache"


def _typing_module_protocols(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        f"{node.annotation.value.id}.{node.annotation.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.annotation, ast.Attribute)
        and isinstance(node.annotation.value, ast.Name)
    }


def _protocol_name(cap: Any) -> str:
    return f"{cap.protocol.__module__.rsplit('.', 1)[1]}.{cap.protocol.__name__}"


@pytest.mark.parametrize(
    ("module", "claims"),
    [
        ("conformance/targets/reference/_typing.py", set(registry()) - set(SAMPLERS)),
        ("conformance/targets/llamacpp/_typing.py", set(LlamaCppTarget.capabilities)),
        (
            "conformance/targets/transformers/_typing.py",
            set(TransformersTarget.capabilities),
        ),
    ],
)
def test_static_conformance_checks_cover_every_claim(module: str, claims: set[str]) -> None:
    claims = claims - set(SAMPLERS)  # a sampler has no methods to check
    """mypy checks each adapter against the Protocols named in its ``_typing`` module: every
    capability it claims must be there (or the static check proves less than it seems)."""
    checked = _typing_module_protocols(ROOT / module)
    missing = sorted(c for c in claims if _protocol_name(registry()[c]) not in checked)
    assert not missing, f"{module} does not check {missing}"


def test_reference_claims_every_capability_and_validates() -> None:
    target = validate_target(ReferenceTarget(), "'reference'")
    assert frozenset(target.capabilities) == frozenset(registry())


class _Tokenizes:
    name, version = "t", "1"
    capabilities = frozenset({"tokenizer.tokenize"})

    def load_model(self, path: Any) -> Any: ...
    def model_info(self, model: Any) -> Any: ...
    def tokenize(self, model: Any, text: str, add_special: bool = True, parse_special: bool = False) -> Any: ...  # fmt: skip
    def token_to_piece(self, model: Any, token: int, special: bool = False) -> Any: ...
    def detokenize(self, model: Any, tokens: Any, remove_special: bool = False, unparse_special: bool = False) -> Any: ...  # fmt: skip


class Ctx:
    def decode(self, batch: Any) -> int:
        raise NotImplementedError


class Decodes:
    name, version = "d", "1"
    capabilities = frozenset({"decoder.logits"})

    def load_model(self, path: Any) -> Any: ...
    def model_info(self, model: Any) -> Any: ...
    def new_context(self, model: Any, **params: Any) -> Ctx:
        raise NotImplementedError


def test_validation_checks_signatures_and_annotated_returned_classes() -> None:
    validate_target(_Tokenizes(), "'t'")

    class Positional(_Tokenizes):
        def token_to_piece(self, model: Any, token: int) -> Any: ...  # type: ignore[override]

    with pytest.raises(TargetLoadError, match=r"token_to_piece\(model, token, special=\.\.\.\)"):
        validate_target(Positional(), "'p'")

    with pytest.raises(TargetLoadError, match=r"new_context\(\) returns Ctx, which lacks method"):
        validate_target(Decodes(), "'d'")


# -- the gate -------------------------------------------------------------------------------


REF = ReferenceTarget()


def _view(required: set[str], optional: frozenset[str] = frozenset()) -> gate.TargetView:
    return gate.view(
        REF, gate.make_grant("target 'reference'", required, optional, REF.capabilities)
    )


def test_gate_refuses_members_of_undeclared_capabilities() -> None:
    t = _view({"model.load"})
    assert callable(t.load_model)
    with pytest.raises(gate.SuiteDefect, match=r"belongs to capability 'model\.forward'"):
        _ = t.forward_logits
    with pytest.raises(gate.SuiteDefect, match=r"no capability of the protocol defines"):
        _ = t.not_a_protocol_method
    with pytest.raises(gate.SuiteDefect, match=r"tests only call it"):
        t.load_model = None
    with pytest.raises(AttributeError):  # library probes are plain attribute errors
        _ = t.hypothesis_internal_is_this_a_mock_check
    assert not isinstance(gate.SuiteDefect("x"), Exception)  # an `except Exception` cannot eat it


def test_gate_wraps_returned_roles_and_unwraps_them_on_the_way_back() -> None:
    from conformance.fixtures.gguf_models import fixture_path
    from reference_impl.batch.types import Batch

    t = _view({"decoder.logits"})
    model = t.load_model(fixture_path("layer1"))
    assert isinstance(model, gate.View)
    with pytest.raises(gate.SuiteDefect):
        _ = model.hparams  # a model handle is opaque
    ctx = t.new_context(model, n_ctx=256, n_batch=8)  # the handle is unwrapped for the engine
    assert ctx.decode(Batch.get_one([1, 2, 3])) == 0
    assert ctx.n_ctx() == 256
    with pytest.raises(gate.SuiteDefect, match=r"'decoder\.memory_ops'"):
        ctx.seq_rm(0, -1, -1)
    gate.release(ctx)  # lifecycle needs no capability


def test_gate_checks_arguments_that_need_capabilities() -> None:
    from conformance.fixtures.gguf_models import fixture_path

    t = _view({"decoder.logits", "sampling.chain", "sampling.top_k"})
    with pytest.raises(gate.SuiteDefect, match=r"need decoder\.embeddings"):
        t.new_context(t.load_model(fixture_path("layer1")), embeddings=True)
    with pytest.raises(gate.SuiteDefect, match=r"has no parameter 'bogus'"):
        t.new_context(t.load_model(fixture_path("layer1")), bogus=1)
    t.sampler_free(t.sampler_chain_init([["top_k", {"k": 3}]]))
    with pytest.raises(gate.SuiteDefect, match=r"need sampling\.dist"):
        t.sampler_chain_init([["top_k", {"k": 3}], ["dist", {"seed": 1}]])
    assert samplers_named([["top_k", {}], "greedy", ["nope", {}], 7]) == {
        "sampling.top_k",
        "sampling.greedy",
    }


def test_has_answers_declared_capabilities_only() -> None:
    t = _view({"model.load"}, frozenset({"model.forward"}))
    assert t.has("model.load") and t.has("model.forward")
    with pytest.raises(gate.SuiteDefect, match=r"add it to @pytest\.mark\.uses"):
        t.has("model.weights")
    grant = gate.make_grant("target 'r'", {"model.load"}, {"model.forward"}, {"model.load"})
    minimal = gate.view(REF, grant)
    assert not minimal.has("model.forward")
    with pytest.raises(gate.SuiteDefect):
        _ = minimal.forward_logits  # not claimed, so not declared either


def test_cached_calls_run_once_per_engine() -> None:
    from conformance.fixtures.gguf_models import fixture_path

    t1, t2 = _view({"model.load"}), _view({"model.forward"})
    path = str(fixture_path("layer1"))
    a, b = gate.cached(t1, "load_model", path), gate.cached(t2, "load_model", path)
    assert gate.unwrap(a) is gate.unwrap(b)
    with pytest.raises(gate.SuiteDefect):
        gate.cached(_view({"kv.cache"}), "load_model", path)


class ContextWithoutSeqRm:
    def decode(self, batch: Any) -> int:
        return 0


class Lacking:
    name, version = "lacking", "1"
    capabilities = frozenset({"decoder.logits", "decoder.memory_ops"})

    def load_model(self, path: Any) -> Any:
        return object()

    def model_info(self, model: Any) -> Any:
        return {}

    def new_context(self, model: Any, **params: Any) -> Any:  # no annotation: checked on use
        return ContextWithoutSeqRm()


def test_returned_objects_are_checked_against_the_claims_on_first_use() -> None:
    target = validate_target(Lacking(), "'lacking'")
    t = gate.view(
        target, gate.make_grant("target 'lacking'", {"decoder.logits"}, (), target.capabilities)
    )
    with pytest.raises(
        gate.AdapterDefect, match=r"lacks method 'get_logits' \(capability 'decoder\.logits'"
    ):
        t.new_context(t.load_model("x"))
    assert TARGET == "target"


def test_template_adapter_loads_and_validates() -> None:
    from conformance.engines import load_engine

    target = load_engine("conformance.targets.template:make_target")
    assert {"model.load", "decoder.logits", "decoder.memory_ops"} <= set(target.capabilities)
    with pytest.raises(NotImplementedError):
        target.load_model("model.gguf")


def test_llamacpp_claims_only_what_a_public_decode_api_offers() -> None:
    """llama.cpp is the model of a black-box engine: everything it claims is in BLACK_BOX,
    except the allocator, which it reaches through ggml's own public ggml-alloc.h (a library
    API beside llama.h, not the decode API)."""
    from conformance.protocol import black_box

    claimed = frozenset(LlamaCppTarget.capabilities)
    ggml_alloc = {"allocator.linear", "allocator.planner", "allocator.ctx_tensors"}
    assert claimed - black_box(claimed) <= ggml_alloc, sorted(claimed - black_box(claimed))
