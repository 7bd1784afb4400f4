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
The sem/geo scales are folded into the query once per program (``q·scale``), which equals
``(q·k)·scale`` up to float rounding.
Strides are runtime arguments (no recompiles when the cache length changes); shapes and flags
are ``tl.constexpr``. The small ``@triton.jit`` helpers are looked up through this module at
call time, which is also how the mutants in conformance/mutants/kernels.py swap one of them.
"""

from kernels._triton import tl, triton

NEG_INF = tl.constexpr(float("-inf"))


@triton.jit
def _empty_state(DV: tl.constexpr):
    """The state of an empty key set: ``(m=-inf, d=0, o=0)`` with scalar ``m`` and ``d``."""
    m = tl.max(tl.full([1], NEG_INF, tl.float32), axis=0)
    d = tl.sum(tl.zeros([1], tl.float32), axis=0)
    return m, d, tl.zeros([DV], tl.float32)


@triton.jit
def _nibble_shift(g):
    """Right shift that brings element ``g``'s 4-bit code down: even ``g`` sits in the high
    nibble (shift 4), odd ``g`` in the low nibble (shift 0)."""
    return tl.where((g % 2) == 0, 4, 0).to(tl.uint8)


@triton.jit
def _scale_index(g, h, HD: tl.constexpr, QBLOCK: tl.constexpr):
    """Index of the scale block holding flattened feature ``g`` (one scale per QBLOCK)."""
    return g // QBLOCK


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
    q_sem,
    q_geo,
    ksn_ptr,
    kgn_ptr,
    vn_ptr,
    b,
    h,
    s_ksn_b,
    s_ksn_h,
    s_ksn_c,
    s_kgn_b,
    s_kgn_h,
    s_kgn_c,
    s_vn_b,
    s_vn_h,
    s_vn_c,
    sem_scale,
    geo_scale,
    DS: tl.constexpr,
    DG: tl.constexpr,
    DV: tl.constexpr,
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
    m,
    d,
    o,
    q_sem,
    q_geo,
    b,
    h,
    lo,
    hi,
    ks_codes,
    ks_scales,
    kg_codes,
    kg_scales,
    v_codes,
    v_scales,
    s_ksc_b,
    s_ksc_t,
    s_kss_b,
    s_kss_t,
    s_kgc_b,
    s_kgc_t,
    s_kgs_b,
    s_kgs_t,
    s_vc_b,
    s_vc_t,
    s_vs_b,
    s_vs_t,
    sem_scale,
    geo_scale,
    DS: tl.constexpr,
    DG: tl.constexpr,
    DV: tl.constexpr,
    QBLOCK: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Fold quantized tokens ``[lo, hi)`` of batch row ``b``, head ``h`` into the state.

    Everything that depends only on the head (byte columns, nibble shifts, scale columns, the
    batch row's base pointers, the query scaled by its path's scale) is computed once, before
    the token loop.
    """
    b = b.to(tl.int64)
    gs = h * DS + tl.arange(0, DS)  # flattened features of this head in each tensor
    gg = h * DG + tl.arange(0, DG)
    gv = h * DV + tl.arange(0, DV)
    ks_shift = _nibble_shift(gs)[None, :]
    v_shift = _nibble_shift(gv)[None, :]
    ks_c = ks_codes + b * s_ksc_b + (gs // 2)[None, :]
    ks_s = ks_scales + b * s_kss_b + _scale_index(gs, h, DS, QBLOCK)[None, :]
    kg_c = kg_codes + b * s_kgc_b + gg[None, :]
    kg_s = kg_scales + b * s_kgs_b + _scale_index(gg, h, DG, QBLOCK)[None, :]
    v_c = v_codes + b * s_vc_b + (gv // 2)[None, :]
    v_s = v_scales + b * s_vs_b + _scale_index(gv, h, DV, QBLOCK)[None, :]
    qs = (q_sem * sem_scale)[None, :]
    qg = (q_geo * geo_scale)[None, :]
    for t0 in tl.range(lo, hi, BLOCK_N):
        t = t0 + tl.arange(0, BLOCK_N)
        tt = t.to(tl.int64)[:, None]
        tm = (t < hi)[:, None]
        k_sem = ((tl.load(ks_c + tt * s_ksc_t, mask=tm, other=0) >> ks_shift) & 0xF).to(
            tl.float32
        ) - 8.0
        k_sem = k_sem * tl.load(ks_s + tt * s_kss_t, mask=tm, other=0.0).to(tl.float32)
        k_geo = tl.load(kg_c + tt * s_kgc_t, mask=tm, other=0).to(tl.float32)
        k_geo = k_geo * tl.load(kg_s + tt * s_kgs_t, mask=tm, other=0.0).to(tl.float32)
        v = ((tl.load(v_c + tt * s_vc_t, mask=tm, other=0) >> v_shift) & 0xF).to(tl.float32) - 8.0
        v = v * tl.load(v_s + tt * s_vs_t, mask=tm, other=0.0).to(tl.float32)
        s = tl.sum(k_sem * qs, axis=1) + tl.sum(k_geo * qg, axis=1)
        s = tl.where(t < hi, s, NEG_INF)
        m, d, o = _online_update(m, d, o, s, v)
    return m, d, o


@triton.jit
def update_kernel(
    qs_ptr,
    qg_ptr,
    ksn_ptr,
    kgn_ptr,
    vn_ptr,
    ks_codes,
    ks_scales,
    kg_codes,
    kg_scales,
    v_codes,
    v_scales,
    m_ptr,
    d_ptr,
    o_ptr,
    start,
    chunk,
    n_prefix,
    sem_scale,
    geo_scale,
    s_ksn_b,
    s_ksn_h,
    s_ksn_c,
    s_kgn_b,
    s_kgn_h,
    s_kgn_c,
    s_vn_b,
    s_vn_h,
    s_vn_c,
    s_ksc_b,
    s_ksc_t,
    s_kss_b,
    s_kss_t,
    s_kgc_b,
    s_kgc_t,
    s_kgs_b,
    s_kgs_t,
    s_vc_b,
    s_vc_t,
    s_vs_b,
    s_vs_t,
    H: tl.constexpr,
    DS: tl.constexpr,
    DG: tl.constexpr,
    DV: tl.constexpr,
    QBLOCK: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HAS_NULL: tl.constexpr,
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
            q_sem,
            q_geo,
            ksn_ptr,
            kgn_ptr,
            vn_ptr,
            b,
            h,
            s_ksn_b,
            s_ksn_h,
            s_ksn_c,
            s_kgn_b,
            s_kgn_h,
            s_kgn_c,
            s_vn_b,
            s_vn_h,
            s_vn_c,
            sem_scale,
            geo_scale,
            DS,
            DG,
            DV,
        )
        m, d, o = _seed_null(m, d, o, start == 0, s_null, v_null)
    hi = tl.minimum(start + chunk, n_prefix)
    m, d, o = _fold_prefix(
        m,
        d,
        o,
        q_sem,
        q_geo,
        b,
        h,
        start,
        hi,
        ks_codes,
        ks_scales,
        kg_codes,
        kg_scales,
        v_codes,
        v_scales,
        s_ksc_b,
        s_ksc_t,
        s_kss_b,
        s_kss_t,
        s_kgc_b,
        s_kgc_t,
        s_kgs_b,
        s_kgs_t,
        s_vc_b,
        s_vc_t,
        s_vs_b,
        s_vs_t,
        sem_scale,
        geo_scale,
        DS,
        DG,
        DV,
        QBLOCK,
        BLOCK_N,
    )
    tl.store(m_ptr + row, m)
    tl.store(d_ptr + row, d)
    tl.store(o_ptr + row * DV + dv, o)


@triton.jit
def partition_kernel(
    qs_ptr,
    qg_ptr,
    ks_codes,
    ks_scales,
    kg_codes,
    kg_scales,
    v_codes,
    v_scales,
    mp_ptr,
    dp_ptr,
    op_ptr,
    n_parts,
    partition_size,
    n_prefix,
    sem_scale,
    geo_scale,
    s_ksc_b,
    s_ksc_t,
    s_kss_b,
    s_kss_t,
    s_kgc_b,
    s_kgc_t,
    s_kgs_b,
    s_kgs_t,
    s_vc_b,
    s_vc_t,
    s_vs_b,
    s_vs_t,
    H: tl.constexpr,
    DS: tl.constexpr,
    DG: tl.constexpr,
    DV: tl.constexpr,
    QBLOCK: tl.constexpr,
    BLOCK_N: tl.constexpr,
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
        m,
        d,
        o,
        q_sem,
        q_geo,
        b,
        h,
        lo,
        hi,
        ks_codes,
        ks_scales,
        kg_codes,
        kg_scales,
        v_codes,
        v_scales,
        s_ksc_b,
        s_ksc_t,
        s_kss_b,
        s_kss_t,
        s_kgc_b,
        s_kgc_t,
        s_kgs_b,
        s_kgs_t,
        s_vc_b,
        s_vc_t,
        s_vs_b,
        s_vs_t,
        sem_scale,
        geo_scale,
        DS,
        DG,
        DV,
        QBLOCK,
        BLOCK_N,
    )
    slot = row * n_parts + part
    tl.store(mp_ptr + slot, m)
    tl.store(dp_ptr + slot, d)
    tl.store(op_ptr + slot * DV + dv, o)


@triton.jit
def reduce_kernel(
    qs_ptr,
    qg_ptr,
    ksn_ptr,
    kgn_ptr,
    vn_ptr,
    mp_ptr,
    dp_ptr,
    op_ptr,
    m_ptr,
    d_ptr,
    o_ptr,
    n_parts,
    sem_scale,
    geo_scale,
    s_ksn_b,
    s_ksn_h,
    s_ksn_c,
    s_kgn_b,
    s_kgn_h,
    s_kgn_c,
    s_vn_b,
    s_vn_h,
    s_vn_c,
    H: tl.constexpr,
    DS: tl.constexpr,
    DG: tl.constexpr,
    DV: tl.constexpr,
    HAS_NULL: tl.constexpr,
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
            q_sem,
            q_geo,
            ksn_ptr,
            kgn_ptr,
            vn_ptr,
            b,
            h,
            s_ksn_b,
            s_ksn_h,
            s_ksn_c,
            s_kgn_b,
            s_kgn_h,
            s_kgn_c,
            s_vn_b,
            s_vn_h,
            s_vn_c,
            sem_scale,
            geo_scale,
            DS,
            DG,
            DV,
        )
        m, d, o = _merge_state(m, d, o, s_null, 1.0, v_null)
    for p in tl.range(0, n_parts):
        slot = row * n_parts + p
        m, d, o = _merge_state(
            m,
            d,
            o,
            tl.load(mp_ptr + slot),
            tl.load(dp_ptr + slot),
            tl.load(op_ptr + slot * DV + dv),
        )
    tl.store(m_ptr + row, m)
    tl.store(d_ptr + row, d)
    tl.store(o_ptr + row * DV + dv, o)


@triton.jit
def finalize_kernel(
    qs_ptr,
    qg_ptr,
    ks_tail,
    kg_tail,
    v_tail,
    m_ptr,
    d_ptr,
    o_ptr,
    out_ptr,
    n_tail,
    sem_scale,
    geo_scale,
    s_kst_b,
    s_kst_t,
    s_kgt_b,
    s_kgt_t,
    s_vt_b,
    s_vt_t,
    s_out_b,
    s_out_h,
    H: tl.constexpr,
    DS: tl.constexpr,
    DG: tl.constexpr,
    DV: tl.constexpr,
    BLOCK_N: tl.constexpr,
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
    ks_p = ks_tail + b * s_kst_b + (h * DS + ds)[None, :]
    kg_p = kg_tail + b * s_kgt_b + (h * DG + dg)[None, :]
    v_p = v_tail + b * s_vt_b + (h * DV + dv)[None, :]
    qs = (q_sem * sem_scale)[None, :]
    qg = (q_geo * geo_scale)[None, :]
    for t0 in tl.range(0, n_tail, BLOCK_N):
        t = t0 + tl.arange(0, BLOCK_N)
        tt = t.to(tl.int64)[:, None]
        tm = (t < n_tail)[:, None]
        k_sem = tl.load(ks_p + tt * s_kst_t, mask=tm, other=0.0).to(tl.float32)
        k_geo = tl.load(kg_p + tt * s_kgt_t, mask=tm, other=0.0).to(tl.float32)
        v = tl.load(v_p + tt * s_vt_t, mask=tm, other=0.0).to(tl.float32)
        s = tl.sum(k_sem * qs, axis=1) + tl.sum(k_geo * qg, axis=1)
        s = tl.where(t < n_tail, s, NEG_INF)
        m, d, o = _online_update(m, d, o, s, v)
    safe = tl.where(d > 0.0, d, 1.0)
    out = tl.where(d > 0.0, o / safe, 0.0)
    tl.store(out_ptr + b * s_out_b + h * s_out_h + dv, out)
