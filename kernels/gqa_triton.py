"""Triton kernels of standard (GQA) decode attention over the reference decoder's KV cache.

Query token ``t`` and head ``h`` attend key cells ``j`` of one stream with logits
``scale·(q[t,h]·k[j,kvh]) + mask[t,j]`` where ``kvh = h // GROUP`` (llama.cpp's broadcast:
consecutive query heads share a KV head). Program ``(t, kvh)`` handles the ``GROUP`` query heads
of one KV head together, so each K/V tile is read once per group. Head dims are padded to the
next power of two (``BLOCK_D``/``BLOCK_DV``) with masks, so any head size works.

* ``one_pass_kernel``: loops over all cells in ``BLOCK_N`` tiles, writes the normalized output.
* ``partition_kernel`` + ``reduce_kernel`` (split-K): program ``(t, kvh, p)`` writes the
  unnormalized state ``(m, l, acc)`` of partition ``p``; the reduce merges the ``P`` states.

A row whose cells are all masked (-inf) gets output 0 (llama.cpp's CPU flash-attention rule).
All strides are runtime arguments; k/v may be views of a larger cache.
"""

from kernels._triton import tl, triton

NEG_INF = tl.constexpr(float("-inf"))


@triton.jit
def _tile_update(m, l, acc, s, v):
    """Fold logits ``s [G, N]`` and values ``v [N, DV]`` into per-head states."""
    m_new = tl.maximum(m, tl.max(s, axis=1))
    m_safe = tl.where(m_new == NEG_INF, 0.0, m_new)
    alpha = tl.exp(m - m_safe)
    p = tl.exp(s - m_safe[:, None])
    l = l * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
    return m_new, l, acc


@triton.jit
def _group_heads(kvh, n_head_kv, GROUP: tl.constexpr, GROUP_P2: tl.constexpr):
    """Query heads reading KV head ``kvh``: ``kvh*GROUP + g`` (llama.cpp maps query head ``h``
    to KV head ``h / (n_head / n_head_kv)``, so consecutive query heads share a KV head)."""
    return kvh * GROUP + tl.arange(0, GROUP_P2)


@triton.jit
def _fold_cells(
    m,
    l,
    acc,
    q,
    t,
    kvh,
    lo,
    hi,
    k_ptr,
    v_ptr,
    mask_ptr,
    scale,
    s_k_n,
    s_k_h,
    s_k_d,
    s_v_n,
    s_v_h,
    s_v_d,
    s_m_t,
    s_m_n,
    D: tl.constexpr,
    DV: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    dd = tl.arange(0, BLOCK_D)
    dv = tl.arange(0, BLOCK_DV)
    for j0 in tl.range(lo, hi, BLOCK_N):
        j = j0 + tl.arange(0, BLOCK_N)
        jm = j < hi
        jj = j.to(tl.int64)
        k = tl.load(
            k_ptr + jj[:, None] * s_k_n + kvh * s_k_h + dd[None, :] * s_k_d,
            mask=jm[:, None] & (dd[None, :] < D),
            other=0.0,
        ).to(tl.float32)
        v = tl.load(
            v_ptr + jj[:, None] * s_v_n + kvh * s_v_h + dv[None, :] * s_v_d,
            mask=jm[:, None] & (dv[None, :] < DV),
            other=0.0,
        ).to(tl.float32)
        bias = tl.load(mask_ptr + t * s_m_t + jj * s_m_n, mask=jm, other=NEG_INF).to(tl.float32)
        s = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale + bias[None, :]
        s = tl.where(jm[None, :], s, NEG_INF)
        m, l, acc = _tile_update(m, l, acc, s, v)
    return m, l, acc


@triton.jit
def _load_q(
    q_ptr,
    t,
    kvh,
    n_head_kv,
    s_q_t,
    s_q_h,
    s_q_d,
    GROUP: tl.constexpr,
    GROUP_P2: tl.constexpr,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    g = tl.arange(0, GROUP_P2)
    dd = tl.arange(0, BLOCK_D)
    heads = _group_heads(kvh, n_head_kv, GROUP, GROUP_P2)
    ok = (g[:, None] < GROUP) & (dd[None, :] < D)
    q = tl.load(
        q_ptr + t * s_q_t + heads[:, None] * s_q_h + dd[None, :] * s_q_d, mask=ok, other=0.0
    )
    return q.to(tl.float32), heads


@triton.jit
def one_pass_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    mask_ptr,
    out_ptr,
    n_kv,
    n_head_kv,
    scale,
    s_q_t,
    s_q_h,
    s_q_d,
    s_k_n,
    s_k_h,
    s_k_d,
    s_v_n,
    s_v_h,
    s_v_d,
    s_m_t,
    s_m_n,
    s_o_t,
    s_o_h,
    s_o_d,
    D: tl.constexpr,
    DV: tl.constexpr,
    GROUP: tl.constexpr,
    GROUP_P2: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1).to(tl.int64)
    q, heads = _load_q(q_ptr, t, kvh, n_head_kv, s_q_t, s_q_h, s_q_d, GROUP, GROUP_P2, D, BLOCK_D)
    m = tl.full([GROUP_P2], NEG_INF, tl.float32)
    l = tl.zeros([GROUP_P2], tl.float32)
    acc = tl.zeros([GROUP_P2, BLOCK_DV], tl.float32)
    m, l, acc = _fold_cells(
        m,
        l,
        acc,
        q,
        t,
        kvh,
        0,
        n_kv,
        k_ptr,
        v_ptr,
        mask_ptr,
        scale,
        s_k_n,
        s_k_h,
        s_k_d,
        s_v_n,
        s_v_h,
        s_v_d,
        s_m_t,
        s_m_n,
        D,
        DV,
        BLOCK_D,
        BLOCK_DV,
        BLOCK_N,
    )
    g = tl.arange(0, GROUP_P2)
    dv = tl.arange(0, BLOCK_DV)
    out = tl.where(l[:, None] > 0.0, acc / tl.where(l > 0.0, l, 1.0)[:, None], 0.0)
    ok = (g[:, None] < GROUP) & (dv[None, :] < DV)
    tl.store(out_ptr + t * s_o_t + heads[:, None] * s_o_h + dv[None, :] * s_o_d, out, mask=ok)


@triton.jit
def partition_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    mask_ptr,
    mp_ptr,
    lp_ptr,
    ap_ptr,
    n_kv,
    n_head_kv,
    n_parts,
    partition_size,
    scale,
    n_head,
    s_q_t,
    s_q_h,
    s_q_d,
    s_k_n,
    s_k_h,
    s_k_d,
    s_v_n,
    s_v_h,
    s_v_d,
    s_m_t,
    s_m_n,
    D: tl.constexpr,
    DV: tl.constexpr,
    GROUP: tl.constexpr,
    GROUP_P2: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DV: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    kvh = tl.program_id(1).to(tl.int64)
    part = tl.program_id(2)
    q, heads = _load_q(q_ptr, t, kvh, n_head_kv, s_q_t, s_q_h, s_q_d, GROUP, GROUP_P2, D, BLOCK_D)
    m = tl.full([GROUP_P2], NEG_INF, tl.float32)
    l = tl.zeros([GROUP_P2], tl.float32)
    acc = tl.zeros([GROUP_P2, BLOCK_DV], tl.float32)
    lo = part * partition_size
    hi = tl.minimum(lo + partition_size, n_kv)
    m, l, acc = _fold_cells(
        m,
        l,
        acc,
        q,
        t,
        kvh,
        lo,
        hi,
        k_ptr,
        v_ptr,
        mask_ptr,
        scale,
        s_k_n,
        s_k_h,
        s_k_d,
        s_v_n,
        s_v_h,
        s_v_d,
        s_m_t,
        s_m_n,
        D,
        DV,
        BLOCK_D,
        BLOCK_DV,
        BLOCK_N,
    )
    g = tl.arange(0, GROUP_P2)
    dv = tl.arange(0, BLOCK_DV)
    slot = (t * n_head + heads) * n_parts + part  # [GROUP_P2]
    gm = g < GROUP
    tl.store(mp_ptr + slot, m, mask=gm)
    tl.store(lp_ptr + slot, l, mask=gm)
    tl.store(ap_ptr + slot[:, None] * BLOCK_DV + dv[None, :], acc, mask=gm[:, None])


@triton.jit
def _merge(m, l, acc, m2, l2, acc2):
    m_new = tl.maximum(m, m2)
    m_safe = tl.where(m_new == NEG_INF, 0.0, m_new)
    a = tl.exp(m - m_safe)
    b = tl.exp(m2 - m_safe)
    return m_new, l * a + l2 * b, acc * a + acc2 * b


@triton.jit
def reduce_kernel(
    mp_ptr,
    lp_ptr,
    ap_ptr,
    out_ptr,
    n_parts,
    s_o_t,
    s_o_h,
    s_o_d,
    N_HEAD: tl.constexpr,
    DV: tl.constexpr,
    BLOCK_DV: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    dv = tl.arange(0, BLOCK_DV)
    row = t * N_HEAD + h
    m = tl.max(tl.full([1], NEG_INF, tl.float32), axis=0)
    l = tl.sum(tl.zeros([1], tl.float32), axis=0)
    acc = tl.zeros([BLOCK_DV], tl.float32)
    for p in tl.range(0, n_parts):
        slot = row * n_parts + p
        m, l, acc = _merge(
            m,
            l,
            acc,
            tl.load(mp_ptr + slot),
            tl.load(lp_ptr + slot),
            tl.load(ap_ptr + slot * BLOCK_DV + dv),
        )
    out = tl.where(l > 0.0, acc / tl.where(l > 0.0, l, 1.0), 0.0)
    tl.store(out_ptr + t * s_o_t + h * s_o_h + dv * s_o_d, out, mask=dv < DV)
