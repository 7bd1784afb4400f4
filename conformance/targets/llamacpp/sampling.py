"""llama.cpp's CPU samplers through llama-cpp-python, behind the ``sampling.*`` protocol.

``LlamaCppSampling`` is the mixin the llamacpp target mounts to claim ``sampling.chain``,
``sampling.default_chain`` and one capability per sampler; ``LlamaCppSamplingTarget`` is a
standalone target for running the sampling suite alone::

    pytest conformance/sampling \
        --target conformance.targets.llamacpp.sampling:LlamaCppSamplingTarget

Chains are built with ``llama_sampler_chain_init`` + ``llama_sampler_init_*`` (no model or
context needed; DRY's breaker token sequences go through the exported C++ test entry point
``llama_sampler_init_dry_testing``, its breaker strings through ``llama_sampler_init_dry`` with
a loaded model's vocabulary), candidate arrays cross the boundary as a numpy structured array
with the ``llama_token_data`` layout. The surface's own checks (chain description, candidate arrays)
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


# samplers that set ``selected`` (a chain needs one for llama_sampler_sample)
SELECTING = frozenset({"greedy", "dist", "mirostat", "mirostat_v2", "adaptive_p"})


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


def _init_member(spec: SamplerSpec, vocab: Any = None, n_vocab: int = 0) -> Any:
    """One ``llama_sampler_init_*``; ``vocab`` is the ``llama_vocab *`` DRY's breaker strings
    are tokenized with, ``n_vocab`` the vocabulary size penalties and logit-bias need when they
    run in the decode graph (backend sampling; 0 for CPU chains)."""
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
            # n_vocab is only read by the backend (graph) path; the CPU path ignores it
            return lib.llama_sampler_init_penalties(
                n_vocab, p["last_n"], p["repeat"], p["freq"], p["present"]
            )
        case "top_n_sigma":
            return lib.llama_sampler_init_top_n_sigma(p["n"])
        case "logit_bias":
            biases = p["biases"]
            arr = (lib.llama_logit_bias * max(len(biases), 1))()
            for i, (token, bias) in enumerate(biases):
                arr[i].token, arr[i].bias = token, bias
            return lib.llama_sampler_init_logit_bias(n_vocab, len(biases), arr)
        case "dry" if p["breaker_strings"]:
            strings = [b.encode() for b in p["breaker_strings"]]
            arr = (ctypes.c_char_p * len(strings))(*strings)
            return lib.llama_sampler_init_dry(
                vocab,
                p["multiplier"],
                p["base"],
                p["allowed_length"],
                p["penalty_last_n"],
                arr,
                len(strings),
            )
        case "dry":
            return _init_dry_tokens(
                p["multiplier"], p["base"], p["allowed_length"], p["penalty_last_n"], p["breakers"]
            )
        case "xtc":
            return lib.llama_sampler_init_xtc(p["p"], p["t"], p["min_keep"], p["seed"])
        case "mirostat":
            return lib.llama_sampler_init_mirostat(
                p["n_vocab"], p["seed"], p["tau"], p["eta"], p["m"]
            )
        case "mirostat_v2":
            return lib.llama_sampler_init_mirostat_v2(p["seed"], p["tau"], p["eta"])
        case "adaptive_p":
            return lib.llama_sampler_init_adaptive_p(p["target"], p["decay"], p["seed"])
    raise SamplingError("SMP_UNKNOWN_SAMPLER", f"unknown sampler {spec.name!r}", field="name")


class _StdVector(ctypes.Structure):
    """libstdc++'s ``std::vector<T>`` layout: begin, end and end-of-storage pointers."""

    _fields_ = [("begin", ctypes.c_void_p), ("end", ctypes.c_void_p), ("cap", ctypes.c_void_p)]


# llama_sampler_init_dry_testing(float, float, int32_t, int32_t,
#                                const std::vector<std::vector<llama_token>> &): the C++ entry
# point llama.cpp's own tests use to give DRY its sequence breakers as token sequences, with
# no vocabulary (the C API's llama_sampler_init_dry tokenizes breaker strings with a model's).
_DRY_TESTING = "_Z30llama_sampler_init_dry_testingffiiRKSt6vectorIS_IiSaIiEESaIS1_EE"


def _init_dry_tokens(
    multiplier: float, base: float, allowed_length: int, last_n: int, breakers: list[list[int]]
) -> Any:
    if not breakers or not (
        np.float32(multiplier) != 0.0 and np.float32(base) >= 1.0 and last_n > 0
    ):
        # the testing entry point would write into the empty sampler's state when DRY is
        # disabled; the C API reads no vocabulary without breakers
        return _lib().llama_sampler_init_dry(
            None, multiplier, base, allowed_length, last_n, None, 0
        )
    fn = getattr(_lib().llama_cpp._lib, _DRY_TESTING)
    fn.argtypes = [
        ctypes.c_float,
        ctypes.c_float,
        ctypes.c_int32,
        ctypes.c_int32,
        ctypes.POINTER(_StdVector),
    ]
    fn.restype = _lib().llama_sampler_p_ctypes
    # the callee copies the tokens, so these buffers only need to outlive the call
    rows = [(ctypes.c_int32 * max(len(b), 1))(*b) for b in breakers]
    inner = (_StdVector * max(len(rows), 1))()
    for vec, row, breaker in zip(inner, rows, breakers, strict=True):
        start = ctypes.addressof(row)
        vec.begin, vec.end = start, start + 4 * len(breaker)
        vec.cap = vec.end
    start = ctypes.addressof(inner)
    outer = _StdVector(start, start + ctypes.sizeof(_StdVector) * len(rows), 0)
    outer.cap = outer.end
    return fn(multiplier, base, allowed_length, last_n, ctypes.byref(outer))


def _chain(specs: list[SamplerSpec], vocab: Any = None, n_vocab: int = 0) -> LlamaSamplerHandle:
    lib = _lib()
    for i, spec in enumerate(specs):  # llama.cpp would dereference a null vocabulary
        if vocab is None and spec.name == "dry" and spec.params["breaker_strings"]:
            raise SamplingError(
                "SMP_PARAM",
                "DRY breaker strings need a vocabulary",
                field=f"spec[{i}].breaker_strings",
                index=i,
            )
    chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
    for spec in specs:
        lib.llama_sampler_chain_add(chain, _init_member(spec, vocab, n_vocab))
    return LlamaSamplerHandle(chain, [s.name for s in specs])


def _common_entries(prm: Mapping[str, Any]) -> list[SamplerSpec]:
    """common_sampler_init's chain (common/sampling.cpp), written against llama.cpp's names."""
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
        "dry": SamplerSpec(
            "dry",
            {
                "multiplier": prm["dry_multiplier"],
                "base": prm["dry_base"],
                "allowed_length": prm["dry_allowed_length"],
                "penalty_last_n": prm["dry_penalty_last_n"],
                "breakers": prm["dry_sequence_breakers"],
                "breaker_strings": [],
            },
        ),
        "top_n_sigma": SamplerSpec("top_n_sigma", {"n": prm["top_n_sigma"]}),
        "top_k": SamplerSpec("top_k", {"k": prm["top_k"]}),
        "typ_p": SamplerSpec("typical", {"p": prm["typ_p"], "min_keep": keep}),
        "top_p": SamplerSpec("top_p", {"p": prm["top_p"], "min_keep": keep}),
        "min_p": SamplerSpec("min_p", {"p": prm["min_p"], "min_keep": keep}),
        "xtc": SamplerSpec(
            "xtc",
            {
                "p": prm["xtc_probability"],
                "t": prm["xtc_threshold"],
                "min_keep": keep,
                "seed": prm["seed"],
            },
        ),
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
    if prm["mirostat"] == 1:
        if prm["n_vocab"] is None:
            raise SamplingError(
                "SMP_PARAM", "mirostat 1 needs llama_vocab_n_tokens", field="params.n_vocab"
            )
        mirostat = {"n_vocab": prm["n_vocab"], "m": 100}
        return [
            *out,
            SamplerSpec("temp", {"t": prm["temp"]}),
            SamplerSpec(
                "mirostat",
                {"seed": prm["seed"], "tau": prm["mirostat_tau"], "eta": prm["mirostat_eta"]}
                | mirostat,
            ),
        ]
    if prm["mirostat"] == 2:
        return [
            *out,
            SamplerSpec("temp", {"t": prm["temp"]}),
            SamplerSpec(
                "mirostat_v2",
                {"seed": prm["seed"], "tau": prm["mirostat_tau"], "eta": prm["mirostat_eta"]},
            ),
        ]
    out += [table[kind] for kind in prm["samplers"] if kind != "adaptive_p"]
    if "adaptive_p" in prm["samplers"]:  # adaptive-p, when listed, replaces dist at the end
        out.append(
            SamplerSpec(
                "adaptive_p",
                {
                    "target": prm["adaptive_target"],
                    "decay": prm["adaptive_decay"],
                    "seed": prm["seed"],
                },
            )
        )
    else:
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

    def sampler_chain_init_vocab(self, spec: Any, vocab: Any) -> LlamaSamplerHandle:
        """``vocab``: a model of the tokenizer area (``load_vocab``/``load_model``)."""
        return _chain(chainspec.parse_chain(spec), vocab._vocab)

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

    # -- sampling.backend ----------------------------------------------------------------------
    # ``ctx`` is the target's decode context (:class:`.decoder.LlamaCppDecodeContext`). The
    # chains attached to it are kept on its ``llama_context`` wrapper, since llama.cpp holds
    # only their pointers: that wrapper's ``__del__`` frees the context before its attributes
    # (the chains) go.

    def backend_set_sampler(self, ctx: Any, seq_id: int, spec: Any) -> None:
        """``llama_set_sampler`` with a fresh chain (a chain is initialised for the graph once,
        so it is never shared). llama.cpp refuses an empty chain, detaching the sequence's
        previous one; the adapter raises then."""
        lib = _lib()
        raw = ctx._ctx
        chains: dict[int, LlamaSamplerHandle] = raw.__dict__.setdefault("_backend_chains", {})
        if spec is None:
            lib.llama_set_sampler(raw.ptr, seq_id, None)
            chains.pop(seq_id, None)
            return
        handle = _chain(chainspec.parse_chain(spec), raw.model._vocab, raw.n_vocab)
        if not lib.llama_set_sampler(raw.ptr, seq_id, handle.ptr):
            chains.pop(seq_id, None)
            raise SamplingError(
                "SMP_BACKEND_REFUSED",
                f"llama_set_sampler refused the chain {handle.names} for sequence {seq_id}",
                field="spec",
                seq_id=seq_id,
            )
        chains[seq_id] = handle  # the previous chain (if any) is freed once detached

    def backend_sample(self, ctx: Any, seq_id: int, i: int) -> int:
        """``llama_sampler_sample(chain, ctx, i)``. Where the graph sampled no token it finishes
        the chain on the CPU, and aborts without a logits row for ``i`` or a selecting sampler
        in the chain; those cases are refused here first."""
        lib = _lib()
        raw = ctx._ctx
        handle = raw.__dict__.get("_backend_chains", {}).get(seq_id)
        if handle is None:
            raise SamplingError(
                "SMP_NO_SAMPLER", f"sequence {seq_id} has no chain attached", seq_id=seq_id
            )
        if lib.llama_get_sampled_token_ith(raw.ptr, i) == lib.LLAMA_TOKEN_NULL:
            if not lib.llama_get_logits_ith(raw.ptr, i):
                raise SamplingError(
                    "SMP_NO_ROW", f"batch token {i} has no output row", field="i", index=i
                )
            if not SELECTING.intersection(handle.names):
                raise SamplingError(
                    "SMP_NO_SELECTION",
                    f"the chain {handle.names} selects no token",
                    field="spec",
                    seq_id=seq_id,
                )
        return int(lib.llama_sampler_sample(handle.ptr, raw.ptr, i))


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
