"""Dispatch: the path that runs, fallback reasons, the auto threshold, launch counts (KRN-020..025)."""

from __future__ import annotations

from typing import Any

import pytest

from conformance.kernels import _cases, _tolerance

DECOUPLED = ("decoupled.cache", "kernels.decoupled_decode")


@pytest.mark.requires(*DECOUPLED)
@pytest.mark.invariant("KRN-020")
@pytest.mark.parametrize("request_,path", [("1pass", "triton-1pass"), ("2pass", "triton-2pass")])
def test_a_requested_kernel_runs(target: Any, request_: str, path: str) -> None:
    inp = _cases.build_decoupled(_cases.DecoupledCase(length=50, resid=8, null="broadcast"), target)
    out, record = target.decoupled_decode(inp.q_sem, inp.q_geo, inp.cache, inp.null, request_, 32)
    assert (record.path, record.reason) == (path, "requested")
    _tolerance.assert_within(out, inp.expected, path)


@pytest.mark.requires("kernels.gqa_decode")
@pytest.mark.invariant("KRN-020")
@pytest.mark.parametrize("request_,path", [("1pass", "triton-1pass"), ("2pass", "triton-2pass")])
def test_a_requested_gqa_kernel_runs(target: Any, request_: str, path: str) -> None:
    inp = _cases.build_gqa(_cases.GqaCase(n_kv=20))
    out, record = target.gqa_decode(inp.q, inp.k, inp.v, inp.mask, inp.scale, request_, 32)
    assert (record.path, record.reason) == (path, "requested")
    _tolerance.assert_within(out, inp.expected, path)


@pytest.mark.requires(*DECOUPLED)
@pytest.mark.invariant("KRN-021", "KRN-020")
@pytest.mark.parametrize(
    "head_dims", [(256, 32, 64), (16, 256, 64), (16, 32, 256)], ids=["dsem256", "dgeo256", "dv256"]
)
def test_head_dim_of_exactly_256_is_eligible(target: Any, head_dims: tuple[int, int, int]) -> None:
    """The limit is inclusive: a head dim equal to DispatchConfig.max_head_dim (256) still runs
    the requested kernel (only a dim above it falls back, case dv512 below)."""
    ds, dg, dv = head_dims
    case = _cases.DecoupledCase(
        batch=1, n_head=1, length=4, sem_head_dim=ds, geo_head_dim=dg, v_head_dim=dv
    )
    inp = _cases.build_decoupled(case, target)
    out, record = target.decoupled_decode(inp.q_sem, inp.q_geo, inp.cache, None, "1pass", 32)
    assert (record.path, record.reason) == ("triton-1pass", "requested")
    _tolerance.assert_within(out, inp.expected, "triton-1pass", n_keys=4)


INELIGIBLE = [
    pytest.param(
        "ksem=nf4@32,kgeo=q8_0@32,v=q4_0@32,resid=8", (16, 32, 64), "policy", id="nf4-ksem"
    ),
    pytest.param(
        "ksem=q4_0@16,kgeo=q8_0@32,v=q4_0@32,resid=8", (16, 32, 64), "policy", id="qblock16"
    ),
    pytest.param(
        "ksem=q4_0@32,kgeo=q4_0@32,v=q4_0@32,resid=0", (16, 32, 64), "policy", id="q4-kgeo"
    ),
    pytest.param("ksem=fp16,kgeo=fp16,v=fp16,resid=0", (16, 32, 64), "policy", id="fp16"),
    # float and quantized tensors with a residual: the float ones keep no ring (DBA-004)
    pytest.param("ksem=q8_0@32,kgeo=fp16,v=fp32,resid=8", (16, 32, 64), "policy", id="mixed-float"),
    pytest.param(
        "ksem=q4_0@32,kgeo=q8_0@32,v=q4_0@32,resid=8", (16, 32, 12), "power of two", id="dv12"
    ),
    pytest.param(
        "ksem=q4_0@32,kgeo=q8_0@32,v=q4_0@32,resid=8", (6, 32, 32), "power of two", id="dsem6"
    ),
    # a power of two, but above DispatchConfig.max_head_dim (256)
    pytest.param(
        "ksem=q4_0@32,kgeo=q8_0@32,v=q4_0@32,resid=8", (16, 32, 512), "exceeds 256", id="dv512"
    ),
]


@pytest.mark.requires(*DECOUPLED)
@pytest.mark.invariant("KRN-021")
@pytest.mark.parametrize("policy,head_dims,rule", INELIGIBLE)
@pytest.mark.parametrize("request_", ["auto", "1pass", "2pass"])
def test_ineligible_configurations_fall_back_with_a_reason(
    target: Any, policy: str, head_dims: tuple[int, int, int], rule: str, request_: str
) -> None:
    ds, dg, dv = head_dims
    case = _cases.DecoupledCase(
        length=45, resid=8, null="contiguous", policy=policy,
        sem_head_dim=ds, geo_head_dim=dg, v_head_dim=dv,
    )  # fmt: skip
    inp = _cases.build_decoupled(case, target)
    out, record = target.decoupled_decode(inp.q_sem, inp.q_geo, inp.cache, inp.null, request_, 32)
    assert record.path == "streaming", f"{record.path}: {record.reason}"
    assert rule in record.reason, record.reason
    _tolerance.assert_within(out, inp.expected, f"fallback {policy}")


@pytest.mark.requires(*DECOUPLED)
@pytest.mark.invariant("KRN-022")
@pytest.mark.parametrize(
    "length,resid,path",
    [
        (49, 0, "triton-1pass"),
        (50, 0, "triton-2pass"),
        (60, 20, "triton-1pass"),
        (90, 20, "triton-2pass"),
    ],
)
def test_auto_picks_two_pass_from_the_threshold(
    target: Any, length: int, resid: int, path: str
) -> None:
    inp = _cases.build_decoupled(
        _cases.DecoupledCase(length=length, resid=resid, null="broadcast"), target
    )
    out, record = target.decoupled_decode(
        inp.q_sem, inp.q_geo, inp.cache, inp.null, "auto", 32, two_pass_min_tokens=50
    )
    assert record.path == path, f"prefix {length - min(length, resid)}: {record.reason}"
    _tolerance.assert_within(out, inp.expected, path)


@pytest.mark.requires(*DECOUPLED)
@pytest.mark.invariant("KRN-022")
@pytest.mark.parametrize("length,path", [(40, "triton-1pass"), (4096, "triton-2pass")])
def test_auto_default_threshold_is_4096(target: Any, length: int, path: str) -> None:
    case = _cases.DecoupledCase(
        batch=1, n_head=1, length=length, sem_head_dim=8, geo_head_dim=8, v_head_dim=8
    )
    inp = _cases.build_decoupled(case, target)
    out, record = target.decoupled_decode(inp.q_sem, inp.q_geo, inp.cache, None, "auto", 1024)
    assert record.path == path, record.reason
    _tolerance.assert_within(out, inp.expected, path, n_keys=length)


@pytest.mark.requires("kernels.gqa_decode")
@pytest.mark.invariant("KRN-022")
@pytest.mark.parametrize(
    "n_kv,path", [(39, "triton-1pass"), (40, "triton-2pass"), (70, "triton-2pass")]
)
def test_gqa_auto_threshold(target: Any, n_kv: int, path: str) -> None:
    inp = _cases.build_gqa(_cases.GqaCase(n_kv=n_kv, kv_size=80))
    out, record = target.gqa_decode(inp.q, inp.k, inp.v, inp.mask, inp.scale, "auto", 32, 40)
    assert record.path == path, record.reason
    _tolerance.assert_within(out, inp.expected, path)


@pytest.mark.requires("kernels.gqa_decode")
@pytest.mark.invariant("KRN-022")
def test_gqa_auto_threshold_zero_always_runs_two_pass(target: Any) -> None:
    # 0 is a valid threshold (every call reads at least 0 keys), not a refused configuration
    inp = _cases.build_gqa(_cases.GqaCase(n_kv=3, kv_size=8))
    out, record = target.gqa_decode(inp.q, inp.k, inp.v, inp.mask, inp.scale, "auto", 32, 0)
    assert record.path == "triton-2pass", record.reason
    _tolerance.assert_within(out, inp.expected, "threshold 0")


@pytest.mark.requires(*DECOUPLED, "kernels.gqa_decode")
@pytest.mark.invariant("KRN-023")
def test_reference_paths_run_when_requested(target: Any) -> None:
    inp = _cases.build_decoupled(_cases.DecoupledCase(length=30, resid=4, null="strided"), target)
    out, record = target.decoupled_decode(
        inp.q_sem, inp.q_geo, inp.cache, inp.null, "streaming", 32
    )
    assert (record.path, record.reason) == ("streaming", "requested")
    _tolerance.assert_within(out, inp.expected, "streaming")
    g = _cases.build_gqa(_cases.GqaCase(n_kv=9))
    out, record = target.gqa_decode(g.q, g.k, g.v, g.mask, g.scale, "torch", 32)
    assert (record.path, record.reason) == ("torch", "requested")
    _tolerance.assert_within(out, g.expected, "torch")


def _assert_counts(record: Any, keys: int, partition_size: int, launches: int) -> None:
    """KRN-024: the record's launch and partition counts are exactly those of the path it names
    (``launches``: what that fused path launches for this call)."""
    detail = dict(record.detail)
    if record.path in ("torch", "streaming"):
        assert detail.get("launches", 0) == 0, f"{record.path} records launches: {detail}"
        # no Triton kernel ran, so none ran through the interpreter either
        assert not getattr(record, "interpreter", False), f"{record.path} claims the interpreter"
        return
    want = 0 if record.path == "triton-1pass" else -(-keys // partition_size)
    assert detail.get("partitions") == want, f"{record.path}: {detail}, want {want} partitions"
    assert detail.get("launches") == launches, f"{record.path}: {detail}, want {launches} launches"


def _gqa_launches(path: str, n_kv: int) -> int:
    """GQA: one kernel for 1-pass; the partition kernel (when a partition exists) + the reduce."""
    return 1 if path == "triton-1pass" else 1 + (n_kv > 0)


def _decoupled_launches(path: str, prefix: int, has_null: bool, partition_size: int) -> int:
    """Decoupled: 1-pass runs one update per chunk of the quantized prefix (one to seed the null
    token when the prefix is empty) and the finalize; 2-pass the partition kernel when a
    partition exists, the reduce and the finalize."""
    chunks = -(-prefix // partition_size)
    if path == "triton-1pass":
        return max(chunks, int(has_null)) + 1
    return int(chunks > 0) + 2


@pytest.mark.requires("kernels.gqa_decode")
@pytest.mark.invariant("KRN-024")
@pytest.mark.parametrize("n_kv", [0, 9, 40, 70])
@pytest.mark.parametrize("request_", ["1pass", "2pass", "torch", "auto"])
def test_gqa_records_count_their_launches(target: Any, request_: str, n_kv: int) -> None:
    inp = _cases.build_gqa(_cases.GqaCase(n_kv=n_kv, kv_size=80))
    out, record = target.gqa_decode(inp.q, inp.k, inp.v, inp.mask, inp.scale, request_, 32, 40)
    _assert_counts(record, n_kv, 32, _gqa_launches(record.path, n_kv))
    # ... and what it read, on every path: the query rows (2 here, against 4 query heads)
    assert record.detail.get("n_tokens") == inp.q.shape[0], f"{record.path}: {record.detail}"
    _tolerance.assert_within(out, inp.expected, record.path)


@pytest.mark.requires(*DECOUPLED)
@pytest.mark.invariant("KRN-024")
@pytest.mark.parametrize(
    "length,resid,null",
    [
        (70, 6, "broadcast"),  # prefix 64: two chunks / partitions of 32
        (100, 0, "none"),  # prefix 100: four, the last one ragged
        (5, 8, "none"),  # everything in the tail: no update, no partition
        (5, 8, "contiguous"),  # ... but one update still seeds the null token
    ],
)
@pytest.mark.parametrize("request_", ["1pass", "2pass", "streaming", "auto"])
def test_decoupled_records_count_their_launches(
    target: Any, request_: str, length: int, resid: int, null: str
) -> None:
    case = _cases.DecoupledCase(length=length, resid=resid, null=null)
    inp = _cases.build_decoupled(case, target)
    out, record = target.decoupled_decode(
        inp.q_sem, inp.q_geo, inp.cache, inp.null, request_, 32, two_pass_min_tokens=50
    )
    prefix = max(length - resid, 0)  # the quantized prefix: all but the last `resid` tokens
    launches = _decoupled_launches(record.path, prefix, inp.null is not None, 32)
    _assert_counts(record, prefix, 32, launches)
    # ... and what it read, on every path: the inputs the counts follow from
    read = {key: record.detail.get(key) for key in ("prefix_len", "tail_len", "has_null")}
    want = {
        "prefix_len": prefix,
        "tail_len": length - prefix,
        "has_null": int(inp.null is not None),
    }
    assert read == want, f"{record.path}: {record.detail}, want {want}"
    _tolerance.assert_within(out, inp.expected, record.path)


GQA_INELIGIBLE = [
    pytest.param({"dtype": "float64"}, "dtype", id="float64"),
    pytest.param({"head_dim": 512, "n_kv": 12}, "head dim", id="head-dim-512"),
    # the limit holds for V's head dim too, not only Q/K's (each kernel tile spans both)
    pytest.param({"head_dim": 16, "v_head_dim": 512, "n_kv": 12}, "head dim", id="v-head-dim-512"),
    # the reason names the group it found (130 query heads over 2 KV heads: 65)
    pytest.param({"n_head": 130, "n_head_kv": 2, "n_kv": 12}, "group 65", id="group-65"),
]


@pytest.mark.requires("kernels.gqa_decode")
@pytest.mark.invariant("KRN-025")
@pytest.mark.parametrize("fields,rule", GQA_INELIGIBLE)
@pytest.mark.parametrize("request_", ["auto", "1pass", "2pass"])
def test_gqa_ineligible_calls_fall_back_with_a_reason(
    target: Any, fields: dict[str, Any], rule: str, request_: str
) -> None:
    inp = _cases.build_gqa(_cases.GqaCase(**fields))
    out, record = target.gqa_decode(inp.q, inp.k, inp.v, inp.mask, inp.scale, request_, 32)
    assert record.path == "torch", f"{record.path}: {record.reason}"
    assert rule in record.reason, record.reason
    _tolerance.assert_within(out.float(), inp.expected, f"fallback {rule}")


@pytest.mark.requires("kernels.gqa_decode")
@pytest.mark.invariant("KRN-025")
def test_gqa_head_dim_at_the_limit_runs_the_kernel(target: Any) -> None:
    # the limit is inclusive: only a head dim *above* 256 falls back
    inp = _cases.build_gqa(_cases.GqaCase(n_tokens=1, n_head=2, n_head_kv=1, head_dim=256, n_kv=5))
    out, record = target.gqa_decode(inp.q, inp.k, inp.v, inp.mask, inp.scale, "1pass", 32)
    assert (record.path, record.reason) == ("triton-1pass", "requested"), record.reason
    _tolerance.assert_within(out, inp.expected, "head dim 256")


GQA_AT_BOTH_LIMITS = [
    pytest.param({"n_head": 64, "n_head_kv": 1, "head_dim": 256}, id="group64-d256"),
    pytest.param(
        {"n_head": 128, "n_head_kv": 2, "head_dim": 16, "v_head_dim": 256}, id="group64-dv256"
    ),
]


@pytest.mark.requires("kernels.gqa_decode")
@pytest.mark.invariant("KRN-025", "KRN-020")
@pytest.mark.parametrize("fields", GQA_AT_BOTH_LIMITS)
@pytest.mark.parametrize("request_,path", [("1pass", "triton-1pass"), ("2pass", "triton-2pass")])
def test_gqa_group_and_head_dim_at_their_limits_together_run_the_kernel(
    target: Any, fields: dict[str, Any], request_: str, path: str
) -> None:
    # both limits are inclusive at once: 64 query heads per KV head with a head dim of 256 is
    # eligible, so the kernel's per-program tile (group x cells x head dim) must fit there too
    inp = _cases.build_gqa(_cases.GqaCase(n_tokens=1, n_kv=5, **fields))
    out, record = target.gqa_decode(inp.q, inp.k, inp.v, inp.mask, inp.scale, request_, 32)
    assert (record.path, record.reason) == (path, "requested"), record.reason
    _tolerance.assert_within(out, inp.expected, f"{path} at group 64, head dim 256")


@pytest.mark.requires("kernels.gqa_decode")
@pytest.mark.invariant("KRN-025")
@pytest.mark.parametrize("request_", ["auto", "1pass", "2pass"])
def test_gqa_inputs_off_the_kernel_device_fall_back(target: Any, request_: str) -> None:
    # "meta" tensors live on no device a kernel can read: the call must not launch one
    inp = _cases.build_gqa(_cases.GqaCase(n_kv=12))
    q, k, v, mask = (x.to("meta") for x in (inp.q, inp.k, inp.v, inp.mask))
    out, record = target.gqa_decode(q, k, v, mask, inp.scale, request_, 32)
    assert record.path == "torch", f"{record.path}: {record.reason}"
    assert "device" in record.reason or "must be on" in record.reason, record.reason
    assert tuple(out.shape) == (*inp.q.shape[:2], inp.v.shape[-1])
