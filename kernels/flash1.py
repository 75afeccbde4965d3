"""FlashAttention(-1) forward (Dao et al. 2022, Algorithm 1).

One CTA per (batch, head): FA1 parallelises over batch and heads only. The CTA follows the
paper's loop order: the outer loop streams the K/V blocks j (each read from HBM once), the inner
loop visits every Q block i that sees a key of block j (``kernels.mask``; causal: those with a
row at or below the block's first key); K/V blocks no query sees are skipped. The
running output and statistics live in HBM between outer steps, as in FA1's CUDA code (an fp32
``o_tmp`` buffer and fp32 softmax statistics): per (i, j) the CTA reads Q_i, O_acc_i, l_i, m_i
and writes O_acc_i, l_i, m_i back. Line 2 initialises O_acc = 0, l = 0, m = -inf in HBM; at the
last K block that touches Q block i the CTA writes the final O_i (input dtype) instead of
O_acc_i. Without a mask, Q, O_acc, l and m therefore travel Tc times, K and V once.

FA1 splits K and V across the CTA's warps (split-K, FA2 paper Sec. 3.3): every warp holds a
slice of the keys, so after each (i, j) step the warps exchange their partial P~V_j, row maxima
and row sums through shared memory, synchronise and add them up. With ``warps > 1`` that is one
SHARED event of ``2 * warps * r * (d + 2) * acc`` bytes (each warp writes, then reads, its
partials), a SYNC, and ``(warps - 1) * r * (d + 2)`` FP32 additions; FA2's split-Q pays none.
The events sit after the P~V_j matmul, where the partial outputs exist.

FP32 operations that are not matmuls (module constants, counted per (i, j) step; an FMA is one
operation, as in ``kernels.flash2``):

- ``EW_PER_SCORE = 3`` per score: scale-and-subtract the block max m~, row max, row sum.
- ``EW_PER_ROW = 8`` per row: m_new = max(m, m~); m - m_new and m~ - m_new; l_new =
  e^(m-m_new) l + e^(m~-m_new) l~ (2); the coefficients of line 12, l e^(m-m_new) / l_new (2)
  and e^(m~-m_new) / l_new (1).
- ``EW_PER_OUT = 2`` per output element: O_new = a O + b (P~V_j), a multiply and an FMA.
- ``r * c`` more on blocks that cross the causal diagonal (the mask).

EXP per (i, j): ``r * c`` (P~ = exp(S - m~)) plus ``2 * r`` (the two rescale factors).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from flashio.kernels._emit import (
    ALLOC,
    EW,
    EXP,
    FREE,
    JIT,
    LOAD,
    MMA,
    P_ACC,
    P_BKV,
    P_BQ,
    P_DIM,
    P_EB,
    P_HEADS,
    P_KV_HEADS,
    P_KV_SEQ,
    P_MASK_BKV,
    P_MASK_BQ,
    P_SEQ,
    P_WARPS,
    SHARED,
    STORE,
    SYNC,
    buf,
    calc,
    mem,
    put,
)
from flashio.kernels._numerics import acc_dtype, to_dtype
from flashio.kernels._resources import regs_per_thread
from flashio.kernels._terms import terms
from flashio.kernels.mask import PARTIAL, SKIP, allowed, keep_table, kv_tiles, q_tiles, tile_state
from flashio.simulator.trace import KernelInfo, Space, TensorInfo

OPTIONS = ()

# tensor indices, in the order of tensors(); the split-K exchange buffer X_S comes last and
# exists only when warps > 1
Q, K, V, O, O_ACC, L, M, Q_S, K_S, V_S, O_T, S_T, ML_T, X_S = range(14)

EW_PER_SCORE, EW_PER_ROW, EW_PER_OUT = 3, 8, 2


def validate(s) -> None:
    return None


def tensors(s) -> tuple[TensorInfo, ...]:
    """Global tensors (Q, K, V, O, the fp32 O_acc, l, m), then the CTA's on-chip buffers."""
    sh, br, bc = s.shape, s.block_q, s.block_kv
    b, h, kh, n, d = sh.batch, sh.heads, sh.n_kv_heads, sh.seq_len, sh.head_dim
    eb, acc, nk = sh.elem_bytes, sh.acc_bytes, sh.n_kv
    g, sm, rg = Space.GLOBAL, Space.SHARED, Space.REGISTERS
    out = (
        TensorInfo("Q", g, (b, h, n, d), eb),
        TensorInfo("K", g, (b, kh, nk, d), eb),
        TensorInfo("V", g, (b, kh, nk, d), eb),
        TensorInfo("O", g, (b, h, n, d), eb),
        TensorInfo("O_acc", g, (b, h, n, d), acc),
        TensorInfo("l", g, (b, h, n), acc),
        TensorInfo("m", g, (b, h, n), acc),
        TensorInfo("Q_i", sm, (br, d), eb),
        TensorInfo("K_j", sm, (bc, d), eb),
        TensorInfo("V_j", sm, (bc, d), eb),
        TensorInfo("O_i", rg, (br, d), acc),
        TensorInfo("S_ij", rg, (br, bc), acc),
        TensorInfo("m_l", rg, (2, br), acc),
    )
    if s.warps > 1:
        out += (TensorInfo("split_k", sm, (s.warps, br, d + 2), acc),)
    return out


# the CTA's on-chip buffers in ALLOC order: shared memory (Q_S .. X_S), then registers
BUFFERS = (Q_S, K_S, V_S, X_S, O_T, S_T, ML_T)


def _buffer_sizes(br, bc, d, eb, acc, warps):
    """Bytes of the buffers in ``BUFFERS``; X_S (split-K exchange) has 0, absent, with one warp."""
    xb = warps * br * (d + 2) * acc if warps > 1 else 0
    return (br * d * eb, bc * d * eb, bc * d * eb, xb, br * d * acc, br * bc * acc, 2 * br * acc)


_jit_sizes = njit(inline="always")(_buffer_sizes)


def _sizes(s) -> tuple[int, ...]:
    sh = s.shape
    return _buffer_sizes(s.block_q, s.block_kv, sh.head_dim, sh.elem_bytes, sh.acc_bytes, s.warps)


def exchange_bytes(s) -> int:
    """Shared-memory bytes of the split-K exchange buffer: warps * Br * (d + 2) * acc, or 0."""
    return _sizes(s)[BUFFERS.index(X_S)]


def kernels(s) -> tuple[KernelInfo, ...]:
    sh, sizes = s.shape, _sizes(s)
    smem, reg_tiles = sum(sizes[:4]), sum(sizes[4:])
    ctas = sh.batch * sh.heads
    return (KernelInfo("flash1_fwd", ctas, s.warps, smem, regs_per_thread(reg_tiles, s.warps)),)


@njit(**JIT)
def _emit(ev, write, kernel, cta_start, cta_stop, p, kmin, kmax, keep, pages):
    mq, mk = p[P_MASK_BQ], p[P_MASK_BKV]
    nh, nkh, n, nk, d = p[P_HEADS], p[P_KV_HEADS], p[P_SEQ], p[P_KV_SEQ], p[P_DIM]
    eb, acc, br, bc, warps = p[P_EB], p[P_ACC], p[P_BQ], p[P_BKV], p[P_WARPS]
    t_q, t_kv, grp = (n + br - 1) // br, (nk + bc - 1) // bc, nh // nkh
    row, arow = d * eb, d * acc
    sizes = _jit_sizes(br, bc, d, eb, acc, warps)
    k = 0
    for cta in range(cta_start, cta_stop):
        b, h = cta // nh, cta % nh
        base = (b * nh + h) * n  # first row of (b, h) in Q, O, O_acc, l, m
        kvbase = (b * nkh + h // grp) * nk
        for t in range(7):  # on-chip buffers, live for the whole CTA
            if sizes[t] > 0:
                k = buf(ev, k, write, kernel, cta, ALLOC, BUFFERS[t], sizes[t])
        # line 2: O_acc = 0, l = 0, m = -inf written to HBM for the CTA's (b, h)
        k = mem(ev, k, write, kernel, cta, -1, STORE, O_ACC, -1, -1, base * arow, n, arow, arow)
        k = mem(ev, k, write, kernel, cta, -1, STORE, L, -1, -1, base * acc, 1, n * acc, n * acc)
        k = mem(ev, k, write, kernel, cta, -1, STORE, M, -1, -1, base * acc, 1, n * acc, n * acc)
        for j in range(t_kv):
            k0 = j * bc
            c = min(bc, nk - k0)
            lo, hi = q_tiles(kmin, kmax, keep, mq, mk, k0, k0 + c, br, n)
            if lo == hi:
                continue  # no query sees these keys
            # K_j, V_j: HBM -> SRAM, once per CTA
            off = (kvbase + k0) * row
            k = mem(ev, k, write, kernel, cta, j, LOAD, K, j, -1, off, c, row, row)
            k = mem(ev, k, write, kernel, cta, j, LOAD, V, j, -1, off, c, row, row)
            for i in range(lo, hi):
                q0 = i * br
                r = min(br, n - q0)
                state = tile_state(kmin, kmax, keep, mq, mk, q0, q0 + r, k0, k0 + c)
                if state == SKIP:
                    continue
                qo, ao, so, vec = (base + q0) * row, (base + q0) * arow, (base + q0) * acc, r * acc
                # Q_i, O_acc_i, l_i, m_i: HBM -> SRAM/registers, once per (i, j)
                k = mem(ev, k, write, kernel, cta, j, LOAD, Q, i, -1, qo, r, row, row)
                k = mem(ev, k, write, kernel, cta, j, LOAD, O_ACC, i, -1, ao, r, arow, arow)
                k = mem(ev, k, write, kernel, cta, j, LOAD, L, i, -1, so, 1, vec, vec)
                k = mem(ev, k, write, kernel, cta, j, LOAD, M, i, -1, so, 1, vec, vec)
                mm = 2 * r * c * d
                ew = EW_PER_SCORE * r * c + EW_PER_ROW * r
                if state == PARTIAL:
                    ew += r * c  # partial block: apply the mask
                k = calc(ev, k, write, kernel, cta, j, MMA, i, j, mm)  # S = Q_i K_j^T
                k = calc(ev, k, write, kernel, cta, j, EW, i, j, ew)  # m~, l~, m_new, l_new
                k = calc(ev, k, write, kernel, cta, j, EXP, i, j, r * c + 2 * r)
                k = calc(ev, k, write, kernel, cta, j, MMA, i, j, mm)  # P~ V_j
                if warps > 1:
                    # split-K: partial O, row max, row sum of every warp through shared memory
                    xb = 2 * warps * r * (d + 2) * acc
                    k = put(ev, k, write, kernel, cta, j, SHARED, X_S, i, j, 0, 0, 0, 0, xb, 0)
                    k = put(ev, k, write, kernel, cta, j, SYNC, -1, i, j, 0, 0, 0, 0, 0, 0)
                ew = EW_PER_OUT * r * d + (warps - 1) * r * (d + 2)
                k = calc(ev, k, write, kernel, cta, j, EW, i, j, ew)  # line 12: O_new
                last = kv_tiles(kmin, kmax, keep, mq, mk, q0, q0 + r, bc, nk)[1] - 1
                # O_i (input dtype, final) or O_acc_i, then l_i, m_i: registers -> HBM
                if j == last:
                    k = mem(ev, k, write, kernel, cta, j, STORE, O, i, -1, qo, r, row, row)
                else:
                    k = mem(ev, k, write, kernel, cta, j, STORE, O_ACC, i, -1, ao, r, arow, arow)
                k = mem(ev, k, write, kernel, cta, j, STORE, L, i, -1, so, 1, vec, vec)
                k = mem(ev, k, write, kernel, cta, j, STORE, M, i, -1, so, 1, vec, vec)
        for i in range(t_q):  # O_i = 0 for a Q block that sees no key
            q0 = i * br
            r = min(br, n - q0)
            lo, hi = kv_tiles(kmin, kmax, keep, mq, mk, q0, q0 + r, bc, nk)
            if lo == hi:
                qo = (base + q0) * row
                k = mem(ev, k, write, kernel, cta, -1, STORE, O, i, -1, qo, r, row, row)
        for t in range(6, -1, -1):
            if sizes[t] > 0:
                k = buf(ev, k, write, kernel, cta, FREE, BUFFERS[t], sizes[t])
    return k


def execute(s, q, k, v, grad_out, rec):
    """Run Algorithm 1 tile by tile, logging every event into ``rec``.

    Returns
    -------
    O : ndarray (batch, heads, seq_len, head_dim), q's storage dtype
    l, m : ndarray (batch, heads, seq_len), accumulator dtype
        The final row sums and row maxima of the scaled scores, as left in HBM.

    Notes
    -----
    Line 12, O_new = diag(l_new)^-1 (diag(l) e^(m - m_new) O + e^(m~ - m_new) P~ V_j), is
    evaluated as a O + b P~V_j with a = l e^(m - m_new) / l_new and b = e^(m~ - m_new) / l_new,
    each divided directly. The normalised O is re-rounded at every outer step, so rounding in
    a accumulates over Tc steps: computing a through a reciprocal 1/l_new (one more rounding)
    put the fp32 error at 3x the dense fp32 reference's (N=22, Br=19, Bc=2, causal), beyond the
    flash-attention error rule. A row whose keys in block j are all masked (causal, diagonal
    block) has m~ = -inf and P~ = 0.
    """
    sh = s.shape
    nb, nh, n, d, dt = sh.batch, sh.heads, sh.seq_len, sh.head_dim, sh.dtype
    br, bc, eb, acc, warps = s.block_q, s.block_kv, sh.elem_bytes, sh.acc_bytes, s.warps
    nk, (kmin, kmax) = sh.n_kv, s.mask
    keep, mq, mk = keep_table(sh)
    at = acc_dtype(dt)
    row, arow = d * eb, d * acc
    # HBM: NaN until written, so a read before line 2's initialisation would show
    out = np.zeros((nb, nh, n, d), q.dtype)
    o_acc = np.full((nb, nh, n, d), np.nan, at)
    l_hbm = np.full((nb, nh, n), np.nan, at)
    m_hbm = np.full((nb, nh, n), np.nan, at)
    buffers = [(t, size) for t, size in zip(BUFFERS, _sizes(s), strict=True) if size > 0]
    scale = at.type(sh.scale)
    for cta in range(nb * nh):
        b, h = divmod(cta, nh)
        base, kvbase = (b * nh + h) * n, (b * sh.n_kv_heads + h // sh.group) * nk
        for t, size in buffers:
            rec.buf(0, cta, ALLOC, t, size)
        o_acc[b, h], l_hbm[b, h], m_hbm[b, h] = 0, 0, -np.inf  # line 2
        rec.mem(0, cta, -1, STORE, O_ACC, -1, -1, base * arow, n, arow, arow)
        rec.mem(0, cta, -1, STORE, L, -1, -1, base * acc, 1, n * acc, n * acc)
        rec.mem(0, cta, -1, STORE, M, -1, -1, base * acc, 1, n * acc, n * acc)
        for j in range(s.t_kv):
            k0 = j * bc
            c = min(bc, nk - k0)
            lo, hi = q_tiles(kmin, kmax, keep, mq, mk, k0, k0 + c, br, n)
            if lo == hi:
                continue  # no query sees these keys
            k_j = k[b, h // sh.group, k0 : k0 + c].astype(at)
            v_j = v[b, h // sh.group, k0 : k0 + c].astype(at)
            off = (kvbase + k0) * row
            rec.mem(0, cta, j, LOAD, K, j, -1, off, c, row, row)
            rec.mem(0, cta, j, LOAD, V, j, -1, off, c, row, row)
            for i in range(lo, hi):
                q0 = i * br
                r = min(br, n - q0)
                state = tile_state(kmin, kmax, keep, mq, mk, q0, q0 + r, k0, k0 + c)
                if state == SKIP:
                    continue
                blk = slice(q0, q0 + r)
                qo, ao, so, vec = (base + q0) * row, (base + q0) * arow, (base + q0) * acc, r * acc
                q_i = q[b, h, blk].astype(at)
                rec.mem(0, cta, j, LOAD, Q, i, -1, qo, r, row, row)
                o_i = o_acc[b, h, blk].copy()
                rec.mem(0, cta, j, LOAD, O_ACC, i, -1, ao, r, arow, arow)
                l_i = l_hbm[b, h, blk].copy()
                rec.mem(0, cta, j, LOAD, L, i, -1, so, 1, vec, vec)
                m_i = m_hbm[b, h, blk].copy()
                rec.mem(0, cta, j, LOAD, M, i, -1, so, 1, vec, vec)
                s_ij = (q_i @ k_j.T) * scale
                rec.calc(0, cta, j, MMA, i, j, 2 * r * c * d)
                ew = EW_PER_SCORE * r * c + EW_PER_ROW * r
                if state == PARTIAL:
                    s_ij = np.where(allowed(sh, q0, q0 + r, k0, k0 + c), s_ij, -np.inf)
                    ew += r * c
                rec.calc(0, cta, j, EW, i, j, ew)
                m_t = s_ij.max(axis=1)  # m~: this block's row max
                p_t = np.exp(s_ij - np.where(np.isneginf(m_t), 0, m_t)[:, None])
                l_t = p_t.sum(axis=1)
                m_new = np.maximum(m_i, m_t)
                m_use = np.where(np.isneginf(m_new), 0, m_new)  # no key seen yet
                alpha, beta = np.exp(m_i - m_use), np.exp(m_t - m_use)
                l_new = alpha * l_i + beta * l_t
                rec.calc(0, cta, j, EXP, i, j, r * c + 2 * r)
                # P~ enters the tensor cores in the input precision, accumulates in fp32/fp64
                pv = to_dtype(p_t, dt).astype(at) @ v_j
                rec.calc(0, cta, j, MMA, i, j, 2 * r * c * d)
                if warps > 1:
                    nbytes = 2 * warps * r * (d + 2) * acc
                    rec.put(0, cta, j, SHARED, X_S, i, j, 0, 0, 0, 0, nbytes, 0)
                    rec.put(0, cta, j, SYNC, -1, i, j, 0, 0, 0, 0, 0, 0)
                # line 12, with both coefficients divided by l_new directly (see Notes)
                with np.errstate(divide="ignore", invalid="ignore"):
                    o_new = (l_i * alpha / l_new)[:, None] * o_i + (beta / l_new)[:, None] * pv
                o_new = np.where((l_new > 0)[:, None], o_new, 0)  # rows that saw no key
                rec.calc(0, cta, j, EW, i, j, EW_PER_OUT * r * d + (warps - 1) * r * (d + 2))
                last = kv_tiles(kmin, kmax, keep, mq, mk, q0, q0 + r, bc, nk)[1] - 1
                if j == last:
                    out[b, h, blk] = to_dtype(o_new, dt)
                    rec.mem(0, cta, j, STORE, O, i, -1, qo, r, row, row)
                else:
                    o_acc[b, h, blk] = o_new
                    rec.mem(0, cta, j, STORE, O_ACC, i, -1, ao, r, arow, arow)
                l_hbm[b, h, blk] = l_new
                rec.mem(0, cta, j, STORE, L, i, -1, so, 1, vec, vec)
                m_hbm[b, h, blk] = m_new
                rec.mem(0, cta, j, STORE, M, i, -1, so, 1, vec, vec)
        for i in range(s.t_q):  # O_i = 0 for a Q block that sees no key
            q0 = i * br
            r = min(br, n - q0)
            lo, hi = kv_tiles(kmin, kmax, keep, mq, mk, q0, q0 + r, bc, nk)
            if lo == hi:
                rec.mem(0, cta, -1, STORE, O, i, -1, (base + q0) * row, r, row, row)
        for t, size in reversed(buffers):
            rec.buf(0, cta, FREE, t, size)
    return out, l_hbm, m_hbm


# -- what analysis asks of this schedule (kernels.registry) -------------------------------------
FORWARD = "flash1"
EVERY_TILE = False
MATMUL_PRODUCTS = 2  # S = Q K^T, O += P V per visited tile
BOUND_CONSTANT = 6  # Q, O_acc in and out: 3 rv d >= 3 W d / Bc, M > 2 Bc d (K_j, V_j)
WARP_SPECIALIZED = ("flash1_fwd",)


def traffic(s) -> list[tuple[str, int, int, int]]:
    """(tensor, element bytes, elements read, elements written), docs/io.md ``flash1``: CTA
    per (b, h); outer j, inner i; O_acc, l, m live in HBM."""
    t = terms(s)
    eb, acc, bh, d, rv, n = t.eb, t.acc, t.bh, t.d, t.rv, t.n
    kv = t.bs.kv_rows * d  # K/V rows some query sees
    return [
        ("Q", eb, bh * rv * d, 0),  # once per visited (i, j)
        ("K", eb, bh * kv, 0),  # once per CTA, i.e. per query head
        ("V", eb, bh * kv, 0),
        ("O", eb, 0, bh * t.nd),  # at the last j of each i (zeros where no key is seen)
        # init: N rows, then at every visited (i, j) but each i's last
        ("O_acc", acc, bh * rv * d, bh * (n + rv - t.bs.q_rows) * d),
        ("l", acc, bh * rv, bh * (n + rv)),  # init + once per visited (i, j)
        ("m", acc, bh * rv, bh * (n + rv)),
    ]


def outer_steps(s, bs) -> tuple[int, ...]:
    """A step per K/V block some query sees, per (b, h) CTA."""
    return (s.shape.batch * s.shape.heads * bs.kv_blocks,)


def on_chip_bytes(s) -> int:
    """Shared memory plus register tiles per CTA (the split-K exchange buffer included)."""
    return sum(_sizes(s))
