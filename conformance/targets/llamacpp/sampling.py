"""llama.cpp's CPU samplers through llama-cpp-python, behind the ``sampling.*`` protocol.

``LlamaCppSampling`` is the mixin the llamacpp target mounts to claim ``sampling.chain``,
``sampling.default_chain`` and one capability per sampler; ``LlamaCppSamplingTarget`` is a
standalone target for running the sampling suite alone::

    pytest conformance/sampling \
        --target conformance.targets.llamacpp.sampling:LlamaCppSamplingTarget

Chains are built with ``llama_sampler_chain_init`` + ``llama_sampler_init_*`` (no model or
context needed), candidate arrays cross the boundary as a numpy structured array with the
``llama_token_data`` layout. The surface's own checks (chain description, candidate arrays)
are done here before llama.cpp sees the data, because llama.cpp aborts the process on the
inputs they reject; they are the reference's rules, so the target does not claim
``sampling.input_checks`` (nor ``sampling.candidates``: ``sampler_sample`` builds the candidates
the way ``llama_sampler_sample`` does, in the adapter, because that function needs a context).
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Mapping
from typing import Any

import numpy as np

from conformance.protocol.sampling import SAMPLERS
from conformance.targets.base import Target
from reference_impl.errors import SamplingError
from reference_impl.sampling import candidates as candidate_rules
from reference_impl.sampling import chainspec
from reference_impl.sampling.chainspec import SamplerSpec
from reference_impl.sampling.token_data import TokenDataArray, validate

TOKEN_DATA = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])

# common/common.h: common_params_sampling.samplers default order (82bb485)
COMMON_ORDER = (
    "penalties",
    "dry",
    "top_n_sigma",
    "top_k",
    "typ_p",
    "top_p",
    "min_p",
    "xtc",
    "temperature",
)


def _lib() -> Any:
    import llama_cpp  # imported lazily: the module must load without llama-cpp-python

    return llama_cpp


class LlamaSamplerHandle:
    """Owns one ``llama_sampler *`` (a chain); freed explicitly or when collected."""

    def __init__(self, ptr: Any, names: list[str]) -> None:
        if not ptr:
            raise SamplingError("SMP_PEER", "llama.cpp returned a null sampler", field="spec")
        self.ptr = ptr
        self.names = names

    def free(self) -> None:
        if self.ptr:
            _lib().llama_sampler_free(self.ptr)
            self.ptr = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter shutdown the library may be gone
            self.free()

    def __repr__(self) -> str:
        return f"<llama.cpp chain {self.names}>"


def _init_member(spec: SamplerSpec) -> Any:
    lib = _lib()
    p = spec.params
    match spec.name:
        case "greedy":
            return lib.llama_sampler_init_greedy()
        case "dist":
            return lib.llama_sampler_init_dist(p["seed"])
        case "top_k":
            return lib.llama_sampler_init_top_k(p["k"])
        case "top_p":
            return lib.llama_sampler_init_top_p(p["p"], p["min_keep"])
        case "min_p":
            return lib.llama_sampler_init_min_p(p["p"], p["min_keep"])
        case "typical":
            return lib.llama_sampler_init_typical(p["p"], p["min_keep"])
        case "temp":
            return lib.llama_sampler_init_temp(p["t"])
        case "temp_ext":
            return lib.llama_sampler_init_temp_ext(p["t"], p["delta"], p["exponent"])
        case "penalties":
            # n_vocab is only read by the backend (GPU) path; the CPU path ignores it
            return lib.llama_sampler_init_penalties(
                0, p["last_n"], p["repeat"], p["freq"], p["present"]
            )
        case "top_n_sigma":
            return lib.llama_sampler_init_top_n_sigma(p["n"])
        case "logit_bias":
            biases = p["biases"]
            arr = (lib.llama_logit_bias * max(len(biases), 1))()
            for i, (token, bias) in enumerate(biases):
                arr[i].token, arr[i].bias = token, bias
            return lib.llama_sampler_init_logit_bias(0, len(biases), arr)
        case "dry":  # disabled only (the parser guarantees it): the empty sampler, no vocab read
            return lib.llama_sampler_init_dry(None, p["multiplier"], 1.75, 2, 0, None, 0)
        case "xtc":  # disabled only
            return lib.llama_sampler_init_xtc(p["p"], p["t"], 0, 0)
    raise SamplingError("SMP_UNKNOWN_SAMPLER", f"unknown sampler {spec.name!r}", field="name")


def _chain(specs: list[SamplerSpec]) -> LlamaSamplerHandle:
    lib = _lib()
    chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
    for spec in specs:
        lib.llama_sampler_chain_add(chain, _init_member(spec))
    return LlamaSamplerHandle(chain, [s.name for s in specs])


def _common_entries(prm: Mapping[str, Any]) -> list[SamplerSpec]:
    """common_sampler_init's chain (common/sampling.cpp), written against llama.cpp's names."""
    if np.float32(prm["dry_multiplier"]) != 0.0:
        raise SamplingError(
            "SMP_UNSUPPORTED", "DRY needs a model vocabulary", field="params.dry_multiplier"
        )
    if np.float32(prm["xtc_probability"]) > 0.0 and np.float32(prm["xtc_threshold"]) <= 0.5:
        raise SamplingError("SMP_UNSUPPORTED", "XTC is not exposed", field="params.xtc_probability")
    keep = prm["min_keep"]
    table = {
        "penalties": SamplerSpec(
            "penalties",
            {
                "last_n": prm["penalty_last_n"],
                "repeat": prm["penalty_repeat"],
                "freq": prm["penalty_freq"],
                "present": prm["penalty_present"],
            },
        ),
        "dry": SamplerSpec("dry", {"multiplier": prm["dry_multiplier"]}),
        "top_n_sigma": SamplerSpec("top_n_sigma", {"n": prm["top_n_sigma"]}),
        "top_k": SamplerSpec("top_k", {"k": prm["top_k"]}),
        "typ_p": SamplerSpec("typical", {"p": prm["typ_p"], "min_keep": keep}),
        "top_p": SamplerSpec("top_p", {"p": prm["top_p"], "min_keep": keep}),
        "min_p": SamplerSpec("min_p", {"p": prm["min_p"], "min_keep": keep}),
        "xtc": SamplerSpec("xtc", {"p": prm["xtc_probability"], "t": prm["xtc_threshold"]}),
        "temperature": SamplerSpec(
            "temp_ext",
            {
                "t": prm["temp"],
                "delta": prm["dynatemp_range"],
                "exponent": prm["dynatemp_exponent"],
            },
        ),
    }
    out = [SamplerSpec("logit_bias", {"biases": prm["logit_bias"]})] if prm["logit_bias"] else []
    out += [table[kind] for kind in prm["samplers"]]
    out.append(SamplerSpec("dist", {"seed": prm["seed"]}))
    return out


def _to_c(cur: TokenDataArray) -> np.ndarray:
    buf = np.empty(cur.size, dtype=TOKEN_DATA)
    buf["id"], buf["logit"], buf["p"] = cur.ids, cur.logits, cur.p
    return buf


def _apply_raw(
    handle: LlamaSamplerHandle, buf: np.ndarray, selected: int, sorted_: bool
) -> TokenDataArray:
    lib = _lib()
    arr = lib.llama_token_data_array(
        buf.ctypes.data_as(lib.llama_token_data_p), buf.shape[0], selected, sorted_
    )
    lib.llama_sampler_apply(handle.ptr, ctypes.byref(arr))
    size = int(arr.size)
    address = ctypes.cast(arr.data, ctypes.c_void_p).value
    if address == buf.ctypes.data:
        out = buf[:size]
    else:  # a sampler may point ``data`` elsewhere (none of the implemented ones does)
        raw = ctypes.string_at(address or 0, size * TOKEN_DATA.itemsize)
        out = np.frombuffer(raw, dtype=TOKEN_DATA)
    return TokenDataArray(
        out["id"].copy(), out["logit"].copy(), out["p"].copy(), int(arr.selected), bool(arr.sorted)
    )


class LlamaCppSampling:
    """The sampling adapter surface over llama.cpp (same methods as the reference's)."""

    # -- sampling.chain / sampling.default_chain ---------------------------------------------

    def sampler_chain_init(self, spec: Any) -> LlamaSamplerHandle:
        return _chain(chainspec.parse_chain(spec))

    def sampler_chain_init_default(
        self, params: Mapping[str, Any] | None = None
    ) -> LlamaSamplerHandle:
        return _chain(_common_entries(chainspec.parse_common_params(params)))

    def sampler_apply(self, handle: LlamaSamplerHandle, cur: TokenDataArray) -> TokenDataArray:
        cur = validate(cur, copy=True)
        return _apply_raw(handle, _to_c(cur), cur.selected, cur.sorted)

    def sampler_accept(self, handle: LlamaSamplerHandle, token: int) -> None:
        _lib().llama_sampler_accept(handle.ptr, int(token))

    def sampler_reset(self, handle: LlamaSamplerHandle) -> None:
        _lib().llama_sampler_reset(handle.ptr)

    def sampler_clone(self, handle: LlamaSamplerHandle) -> LlamaSamplerHandle:
        return LlamaSamplerHandle(_lib().llama_sampler_clone(handle.ptr), list(handle.names))

    def sampler_sample(self, handle: LlamaSamplerHandle, logits: np.ndarray) -> int:
        """llama_sampler_sample without a context: full-vocabulary candidates from ``logits``,
        apply, check ``selected``, accept. On a missing selection the chain's state is put
        back (llama_sampler_copy from a clone taken before) and SMP_NO_SELECTION raised."""
        lib = _lib()
        cur = candidate_rules.build_candidates(logits)
        saved = lib.llama_sampler_clone(handle.ptr)
        try:
            out = _apply_raw(handle, _to_c(cur), -1, False)
            if not 0 <= out.selected < out.size:
                lib.llama_sampler_copy(saved, handle.ptr)
                raise SamplingError(
                    "SMP_NO_SELECTION",
                    f"the chain selected index {out.selected} of {out.size} candidates",
                    field="selected",
                    index=out.selected,
                )
        finally:
            lib.llama_sampler_free(saved)
        token = int(out.ids[out.selected])
        lib.llama_sampler_accept(handle.ptr, token)
        return token

    def sampler_free(self, handle: LlamaSamplerHandle) -> None:
        handle.free()


def llama_cpp_version() -> str:
    try:
        return str(_lib().__version__)
    except ImportError:
        return "unavailable"


class LlamaCppSamplingTarget(LlamaCppSampling, Target):
    """llama.cpp's samplers alone, as a target (``module:attr`` form of ``--target``)."""

    name = "llamacpp-sampling"
    capabilities = frozenset({"sampling.chain", "sampling.default_chain", *SAMPLERS})

    def __init__(self) -> None:
        _lib()  # fail at load time, in one line, when llama-cpp-python is missing
        self.version = f"llama-cpp-python {llama_cpp_version()}"
