"""Triton kernels of decoupled decode over the q4_0 / q8_0 / q4_0 cache (one query token).

Program ``row = b*H + h`` computes, for its head, the online-softmax state ``(m, d, o)``: the
running max logit, the sum of ``exp(s - m)`` and the unnormalized ``Σ exp(s - m)·v``, all fp32.
The logit of key ``t`` is ``(q_sem·k_sem[t])·sem_scale + (q_geo·k_geo[t])·geo_scale``.

* ``update_kernel`` (1-pass): reads the state, folds tokens ``[start, min(start+chunk, n))`` of
  the quantized prefix in tiles of ``BLOCK_N``, writes the state back; the driver launches it
  once per chunk, so the state is carried across launches. With ``HAS_NULL`` the launch with
  ``start == 0`` folds the null token in first (the driver always makes that launch).
* ``partition_kernel`` (2-pass, pass 1): program ``(row, p)`` folds partition ``p`` from an
  empty state and writes ``(m, d, o)`` of that partition. It never sees the null token.
* ``reduce_kernel`` (2-pass, pass 2): starts from the null token as a virtual partition
  ``(s_null, 1, v_null)`` (``HAS_NULL``) or the empty state, merges the ``P`` partitions (any
  ``P >= 0``) and writes the state.
* ``finalize_kernel`` (both): folds the exact fp16 residual tail, then writes ``o / d``
  (0 where ``d == 0``: nothing to attend).

Quantized layout (see kernels.quant): q4_0 byte ``g//2`` holds element ``g`` in its high nibble
when ``g`` is even, value ``nibble - 8``; q8_0 is int8; fp16 scale ``g // QBLOCK`` of the token.
Strides are runtime arguments (no recompiles when the cache length changes); shapes and flags
are ``tl.constexpr``. The small ``@triton.jit`` helpers are looked up through this module at
call time, which is also how the mutants in conformance/mutants/kernels.py swap one of them.
"""

from kernels._triton import tl, triton

NEG_INF = float("-inf")


@triton.jit
def _empty_state(DV: tl.constexpr):
    """The state of an empty key set: ``(m=-inf, d=0, o=0)`` with scalar ``m`` and ``d``."""
    m = tl.max(tl.full([1], NEG_INF, tl.float32), axis=0)
    d = tl.sum(tl.zeros([1], tl.float32), axis=0)
    return m, d, tl.zeros([DV], tl.float32)


@triton.jit
def _nibble(byte, g):
    """The 4-bit code of element ``g`` in its byte: even ``g`` -> high nibble."""
    return tl.where((g % 2) == 0, (byte >> 4) & 0xF, byte & 0xF)


@triton.jit
def _scale_index(g, h, HD: tl.constexpr, QBLOCK: tl.constexpr):
    """Index of the scale block holding flattened feature ``g`` (one scale per QBLOCK)."""
    return g // QBLOCK


@triton.jit
def _load_q4(codes_ptr, scales_ptr, code_rows, scale_rows, h, tmask, HD: tl.constexpr, QBLOCK: tl.constexpr):
    """Dequantized q4_0 tile ``[BLOCK_N, HD]`` of head ``h`` for the token rows given."""
    g = h * HD + tl.arange(0, HD)
    byte = tl.load(codes_ptr + code_rows[:, None] + (g // 2)[None, :], mask=tmask[:, None], other=0)
    code = _nibble(byte.to(tl.uint8), g[None, :])
    sidx = _scale_index(g, h, HD, QBLOCK)
    scale = tl.load(scales_ptr + scale_rows[:, None] + sidx[None, :], mask=tmask[:, None], other=0.0)
    return (code.to(tl.float32) - 8.0) * scale.to(tl.float32)


@triton.jit
def _load_q8(codes_ptr, scales_ptr, code_rows, scale_rows, h, tmask, HD: tl.constexpr, QBLOCK: tl.constexpr):
    """Dequantized q8_0 tile ``[BLOCK_N, HD]`` of head ``h``."""
    g = h * HD + tl.arange(0, HD)
    code = tl.load(codes_ptr + code_rows[:, None] + g[None, :], mask=tmask[:, None], other=0)
    sidx = _scale_index(g, h, HD, QBLOCK)
    scale = tl.load(scales_ptr + scale_rows[:, None] + sidx[None, :], mask=tmask[:, None], other=0.0)
    return code.to(tl.int8).to(tl.float32) * scale.to(tl.float32)


@triton.jit
def _online_update(m, d, o, s, v):
    """Fold logits ``s [N]`` (-inf = absent) with values ``v [N, DV]`` into ``(m, d, o)``."""
    m_new = tl.maximum(m, tl.max(s, axis=0))
    m_safe = tl.where(m_new == NEG_INF, 0.0, m_new)
    alpha = tl.exp(m - m_safe)  # rescales the old state when the running max grows
    p = tl.exp(s - m_safe)
    d = d * alpha + tl.sum(p, axis=0)
    o = o * alpha + tl.sum(p[:, None] * v, axis=0)
    return m_new, d, o


@triton.jit
def _merge_state(m, d, o, m2, d2, o2):
    """Merge two online-softmax states (a partition or the null token) into one."""
    m_new = tl.maximum(m, m2)
    m_safe = tl.where(m_new == NEG_INF, 0.0, m_new)
    a = tl.exp(m - m_safe)
    b = tl.exp(m2 - m_safe)
    return m_new, d * a + d2 * b, o * a + o2 * b


@triton.jit
def _null_state(
    q_sem, q_geo, ksn_ptr, kgn_ptr, vn_ptr, b, h,
    s_ksn_b, s_ksn_h, s_ksn_c, s_kgn_b, s_kgn_h, s_kgn_c, s_vn_b, s_vn_h, s_vn_c,
    sem_scale, geo_scale,
    DS: tl.constexpr, DG: tl.constexpr, DV: tl.constexpr,
):
    """The null token's logit and value for row (b, h): ``(s_null, v_null [DV])``."""
    ds = tl.arange(0, DS)
    dg = tl.arange(0, DG)
    dv = tl.arange(0, DV)
    ksn = tl.load(ksn_ptr + b * s_ksn_b + h * s_ksn_h + ds * s_ksn_c).to(tl.float32)
    kgn = tl.load(kgn_ptr + b * s_kgn_b + h * s_kgn_h + dg * s_kgn_c).to(tl.float32)
    vn = tl.load(vn_ptr + b * s_vn_b + h * s_vn_h + dv * s_vn_c).to(tl.float32)
    s = tl.sum(q_sem * ksn, axis=0) * sem_scale + tl.sum(q_geo * kgn, axis=0) * geo_scale
    return s, vn


@triton.jit
def _seed_null(m, d, o, seed, s_null, v_null):
    """1-pass: fold the null token into the state only on the launch that starts the prefix."""
    s = tl.where(seed, s_null, NEG_INF)
    return _merge_state(m, d, o, s, tl.where(seed, 1.0, 0.0), v_null * tl.where(seed, 1.0, 0.0))


@triton.jit
def _fold_prefix(
    m, d, o, q_sem, q_geo, b, h, lo, hi,
    ks_codes, ks_scales, kg_codes, kg_scales, v_codes, v_scales,
    s_ksc_b, s_ksc_t, s_kss_b, s_kss_t, s_kgc_b, s_kgc_t, s_kgs_b, s_kgs_t,
    s_vc_b, s_vc_t, s_vs_b, s_vs_t,
    sem_scale, geo_scale,
    DS: tl.constexpr, DG: tl.constexpr, DV: tl.constexpr, QBLOCK: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Fold quantized tokens ``[lo, hi)`` of batch row ``b``, head ``h`` into the state."""
    b = b.to(tl.int64)
    for t0 in tl.range(lo, hi, BLOCK_N):
        t = t0 + tl.arange(0, BLOCK_N)
        tmask = t < hi
        tt = t.to(tl.int64)
        k_sem = _load_q4(ks_codes, ks_scales, b * s_ksc_b + tt * s_ksc_t, b * s_kss_b + tt * s_kss_t, h, tmask, DS, QBLOCK)
        k_geo = _load_q8(kg_codes, kg_scales, b * s_kgc_b + tt * s_kgc_t, b * s_kgs_b + tt * s_kgs_t, h, tmask, DG, QBLOCK)
        v = _load_q4(v_codes, v_scales, b * s_vc_b + tt * s_vc_t, b * s_vs_b + tt * s_vs_t, h, tmask, DV, QBLOCK)
        s = tl.sum(k_sem * q_sem[None, :], axis=1) * sem_scale + tl.sum(k_geo * q_geo[None, :], axis=1) * geo_scale
        s = tl.where(tmask, s, NEG_INF)
        m, d, o = _online_update(m, d, o, s, v)
    return m, d, o


@triton.jit
def update_kernel(
    qs_ptr, qg_ptr, ksn_ptr, kgn_ptr, vn_ptr,
    ks_codes, ks_scales, kg_codes, kg_scales, v_codes, v_scales,
    m_ptr, d_ptr, o_ptr,
    start, chunk, n_prefix, sem_scale, geo_scale,
    s_ksn_b, s_ksn_h, s_ksn_c, s_kgn_b, s_kgn_h, s_kgn_c, s_vn_b, s_vn_h, s_vn_c,
    s_ksc_b, s_ksc_t, s_kss_b, s_kss_t, s_kgc_b, s_kgc_t, s_kgs_b, s_kgs_t,
    s_vc_b, s_vc_t, s_vs_b, s_vs_t,
    H: tl.constexpr, DS: tl.constexpr, DG: tl.constexpr, DV: tl.constexpr,
    QBLOCK: tl.constexpr, BLOCK_N: tl.constexpr, HAS_NULL: tl.constexpr,
):
    row = tl.program_id(0)
    b = row // H
    h = row % H
    q_sem = tl.load(qs_ptr + row * DS + tl.arange(0, DS))
    q_geo = tl.load(qg_ptr + row * DG + tl.arange(0, DG))
    dv = tl.arange(0, DV)
    m = tl.load(m_ptr + row)
    d = tl.load(d_ptr + row)
    o = tl.load(o_ptr + row * DV + dv)
    if HAS_NULL:
        s_null, v_null = _null_state(
            q_sem, q_geo, ksn_ptr, kgn_ptr, vn_ptr, b, h,
            s_ksn_b, s_ksn_h, s_ksn_c, s_kgn_b, s_kgn_h, s_kgn_c, s_vn_b, s_vn_h, s_vn_c,
            sem_scale, geo_scale, DS, DG, DV,
        )
        m, d, o = _seed_null(m, d, o, start == 0, s_null, v_null)
    hi = tl.minimum(start + chunk, n_prefix)
    m, d, o = _fold_prefix(
        m, d, o, q_sem, q_geo, b, h, start, hi,
        ks_codes, ks_scales, kg_codes, kg_scales, v_codes, v_scales,
        s_ksc_b, s_ksc_t, s_kss_b, s_kss_t, s_kgc_b, s_kgc_t, s_kgs_b, s_kgs_t,
        s_vc_b, s_vc_t, s_vs_b, s_vs_t, sem_scale, geo_scale, DS, DG, DV, QBLOCK, BLOCK_N,
    )
    tl.store(m_ptr + row, m)
    tl.store(d_ptr + row, d)
    tl.store(o_ptr + row * DV + dv, o)


@triton.jit
def partition_kernel(
    qs_ptr, qg_ptr,
    ks_codes, ks_scales, kg_codes, kg_scales, v_codes, v_scales,
    mp_ptr, dp_ptr, op_ptr,
    n_parts, partition_size, n_prefix, sem_scale, geo_scale,
    s_ksc_b, s_ksc_t, s_kss_b, s_kss_t, s_kgc_b, s_kgc_t, s_kgs_b, s_kgs_t,
    s_vc_b, s_vc_t, s_vs_b, s_vs_t,
    H: tl.constexpr, DS: tl.constexpr, DG: tl.constexpr, DV: tl.constexpr,
    QBLOCK: tl.constexpr, BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0)
    part = tl.program_id(1)
    b = row // H
    h = row % H
    q_sem = tl.load(qs_ptr + row * DS + tl.arange(0, DS))
    q_geo = tl.load(qg_ptr + row * DG + tl.arange(0, DG))
    dv = tl.arange(0, DV)
    m, d, o = _empty_state(DV)
    lo = part * partition_size
    hi = tl.minimum(lo + partition_size, n_prefix)
    m, d, o = _fold_prefix(
        m, d, o, q_sem, q_geo, b, h, lo, hi,
        ks_codes, ks_scales, kg_codes, kg_scales, v_codes, v_scales,
        s_ksc_b, s_ksc_t, s_kss_b, s_kss_t, s_kgc_b, s_kgc_t, s_kgs_b, s_kgs_t,
        s_vc_b, s_vc_t, s_vs_b, s_vs_t, sem_scale, geo_scale, DS, DG, DV, QBLOCK, BLOCK_N,
    )
    slot = row * n_parts + part
    tl.store(mp_ptr + slot, m)
    tl.store(dp_ptr + slot, d)
    tl.store(op_ptr + slot * DV + dv, o)


@triton.jit
def reduce_kernel(
    qs_ptr, qg_ptr, ksn_ptr, kgn_ptr, vn_ptr,
    mp_ptr, dp_ptr, op_ptr, m_ptr, d_ptr, o_ptr,
    n_parts, sem_scale, geo_scale,
    s_ksn_b, s_ksn_h, s_ksn_c, s_kgn_b, s_kgn_h, s_kgn_c, s_vn_b, s_vn_h, s_vn_c,
    H: tl.constexpr, DS: tl.constexpr, DG: tl.constexpr, DV: tl.constexpr, HAS_NULL: tl.constexpr,
):
    row = tl.program_id(0)
    b = row // H
    h = row % H
    dv = tl.arange(0, DV)
    m, d, o = _empty_state(DV)
    if HAS_NULL:  # the null token is one more partition: (s_null, 1, v_null), added once
        q_sem = tl.load(qs_ptr + row * DS + tl.arange(0, DS))
        q_geo = tl.load(qg_ptr + row * DG + tl.arange(0, DG))
        s_null, v_null = _null_state(
            q_sem, q_geo, ksn_ptr, kgn_ptr, vn_ptr, b, h,
            s_ksn_b, s_ksn_h, s_ksn_c, s_kgn_b, s_kgn_h, s_kgn_c, s_vn_b, s_vn_h, s_vn_c,
            sem_scale, geo_scale, DS, DG, DV,
        )
        m, d, o = _merge_state(m, d, o, s_null, 1.0, v_null)
    for p in tl.range(0, n_parts):
        slot = row * n_parts + p
        m, d, o = _merge_state(
            m, d, o, tl.load(mp_ptr + slot), tl.load(dp_ptr + slot), tl.load(op_ptr + slot * DV + dv)
        )
    tl.store(m_ptr + row, m)
    tl.store(d_ptr + row, d)
    tl.store(o_ptr + row * DV + dv, o)


@triton.jit
def finalize_kernel(
    qs_ptr, qg_ptr, ks_tail, kg_tail, v_tail,
    m_ptr, d_ptr, o_ptr, out_ptr,
    n_tail, sem_scale, geo_scale,
    s_kst_b, s_kst_t, s_kgt_b, s_kgt_t, s_vt_b, s_vt_t, s_out_b, s_out_h,
    H: tl.constexpr, DS: tl.constexpr, DG: tl.constexpr, DV: tl.constexpr, BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0)
    b = row // H
    h = row % H
    ds = tl.arange(0, DS)
    dg = tl.arange(0, DG)
    dv = tl.arange(0, DV)
    q_sem = tl.load(qs_ptr + row * DS + ds)
    q_geo = tl.load(qg_ptr + row * DG + dg)
    m = tl.load(m_ptr + row)
    d = tl.load(d_ptr + row)
    o = tl.load(o_ptr + row * DV + dv)
    b = b.to(tl.int64)
    for t0 in tl.range(0, n_tail, BLOCK_N):
        t = t0 + tl.arange(0, BLOCK_N)
        tmask = t < n_tail
        tt = t.to(tl.int64)
        k_sem = tl.load(ks_tail + b * s_kst_b + tt[:, None] * s_kst_t + (h * DS + ds)[None, :], mask=tmask[:, None], other=0.0).to(tl.float32)
        k_geo = tl.load(kg_tail + b * s_kgt_b + tt[:, None] * s_kgt_t + (h * DG + dg)[None, :], mask=tmask[:, None], other=0.0).to(tl.float32)
        v = tl.load(v_tail + b * s_vt_b + tt[:, None] * s_vt_t + (h * DV + dv)[None, :], mask=tmask[:, None], other=0.0).to(tl.float32)
        s = tl.sum(k_sem * q_sem[None, :], axis=1) * sem_scale + tl.sum(k_geo * q_geo[None, :], axis=1) * geo_scale
        s = tl.where(tmask, s, NEG_INF)
        m, d, o = _online_update(m, d, o, s, v)
    safe = tl.where(d > 0.0, d, 1.0)
    out = tl.where(d > 0.0, o / safe, 0.0)
    tl.store(out_ptr + b * s_out_b + h * s_out_h + dv, out)
