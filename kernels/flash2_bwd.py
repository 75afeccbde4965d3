"""FlashAttention-2 backward (Dao 2023, Algorithm 2), as flash-attention's kernels run it.

Three kernels:
1. ``flash2_bwd_pre``: one CTA per (batch, head, Q block): D_i = rowsum(dO_i * O_i) written to HBM
   (Algorithm 2, line 4) and the fp32 dQ accumulator zeroed (line 3).
2. ``flash2_bwd``: one CTA per (batch, key/value head, K/V block j), outer loop over K/V
   blocks: K_j, V_j read once and dK_j, dV_j accumulated on chip; for every query head of the
   group and every Q block i it reads Q_i, dO_i, L_i, D_i, recomputes P_ij = exp(S_ij - L_i) from
   the forward's
   logsumexp, and adds dS_ij K_j into dQ_i with an atomic add at L2 (line 15 reads and writes dQ_i;
   the implementation lets L2 do the read-modify-write). O_i is not re-read: D replaces it.
3. ``flash2_bwd_post``: one CTA per (batch, head, Q block): dQ_i converted from the fp32
   accumulator to the input dtype.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from flashio.kernels import flash2
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
    REDUCE,
    STORE,
    buf,
    calc,
    mem,
)
from flashio.kernels._numerics import acc_dtype, to_dtype
from flashio.kernels._record import Recorder, offset4
from flashio.kernels._resources import regs_per_thread
from flashio.kernels._terms import terms
from flashio.kernels.mask import PARTIAL, SKIP, allowed, keep_table, q_tiles, tile_state
from flashio.simulator.trace import KernelInfo, Op, Space, TensorInfo

OPTIONS = ()

(
    Q,
    K,
    V,
    O,
    DO,
    LSE,
    D,
    DQ_ACC,
    DQ,
    DK,
    DV,  # global
    Q_S,
    DO_S,
    K_S,
    V_S,
    LD_S,  # shared memory
    DK_R,
    DV_R,
    S_R,
    DP_R,
    DQ_R,
    ROW_R,
) = range(22)  # registers

# FP32 operations that are not matmuls (docs/model.md): per score, P = exp(scale*S - L) costs one
# fused multiply-add, dS = P * (dP - D) two; per element of a Q row block, D_i = rowsum(dO * O) two
# and the dQ scaling one; per element of dK, its final scaling one.
EW_P_PER_SCORE, EW_DS_PER_SCORE, EW_D_PER_ELEM, EW_DQ_PER_ELEM = 1, 2, 2, 1


def validate(s) -> None:
    return None


def tensors(s) -> tuple[TensorInfo, ...]:
    sh, br, bc = s.shape, s.block_q, s.block_kv
    b, h, kh, n, d, eb, acc = (
        sh.batch,
        sh.heads,
        sh.n_kv_heads,
        sh.seq_len,
        sh.head_dim,
        sh.elem_bytes,
        sh.acc_bytes,
    )
    nk = sh.n_kv
    g, sm, rg = Space.GLOBAL, Space.SHARED, Space.REGISTERS
    return (
        TensorInfo("Q", g, (b, h, n, d), eb),
        TensorInfo("K", g, (b, kh, nk, d), eb),
        TensorInfo("V", g, (b, kh, nk, d), eb),
        TensorInfo("O", g, (b, h, n, d), eb),
        TensorInfo("dO", g, (b, h, n, d), eb),
        TensorInfo("L", g, (b, h, n), acc),
        TensorInfo("D", g, (b, h, n), acc),
        TensorInfo("dQ_acc", g, (b, h, n, d), acc),
        TensorInfo("dQ", g, (b, h, n, d), eb),
        TensorInfo("dK", g, (b, kh, nk, d), eb),
        TensorInfo("dV", g, (b, kh, nk, d), eb),
        TensorInfo("Q_i", sm, (br, d), eb),
        TensorInfo("dO_i", sm, (br, d), eb),
        TensorInfo("K_j", sm, (bc, d), eb),
        TensorInfo("V_j", sm, (bc, d), eb),
        TensorInfo("L_D_i", sm, (2, br), acc),
        TensorInfo("dK_j", rg, (bc, d), acc),
        TensorInfo("dV_j", rg, (bc, d), acc),
        TensorInfo("S_ij", rg, (br, bc), acc),
        TensorInfo("dP_ij", rg, (br, bc), acc),
        TensorInfo("dQ_i", rg, (br, d), acc),
        TensorInfo("rows_i", rg, (2, br, d), acc),
    )


def _sizes(sh, br, bc):
    """Bytes of every on-chip buffer, by tensor index."""
    d, eb, acc = sh.head_dim, sh.elem_bytes, sh.acc_bytes
    return {
        Q_S: br * d * eb,
        DO_S: br * d * eb,
        K_S: bc * d * eb,
        V_S: bc * d * eb,
        LD_S: 2 * br * acc,
        DK_R: bc * d * acc,
        DV_R: bc * d * acc,
        S_R: br * bc * acc,
        DP_R: br * bc * acc,
        DQ_R: br * d * acc,
        ROW_R: 2 * br * d * acc,
    }


MAIN_BUFFERS = (K_S, V_S, Q_S, DO_S, LD_S, DK_R, DV_R, S_R, DP_R, DQ_R)


def kernels(s) -> tuple[KernelInfo, ...]:
    sh, w = s.shape, s.warps
    z = _sizes(sh, s.block_q, s.block_kv)
    rows = sh.batch * sh.heads * s.t_q
    main_smem = sum(z[t] for t in MAIN_BUFFERS[:5])
    main_regs = sum(z[t] for t in MAIN_BUFFERS[5:])
    return (
        KernelInfo("flash2_bwd_pre", rows, w, 0, regs_per_thread(z[ROW_R], w)),
        KernelInfo(
            "flash2_bwd",
            sh.batch * sh.n_kv_heads * s.t_kv,
            w,
            main_smem,
            regs_per_thread(main_regs, w),
        ),
        KernelInfo("flash2_bwd_post", rows, w, 0, regs_per_thread(z[DQ_R], w)),
    )


@njit(**JIT)
def _emit(ev, write, kernel, cta_start, cta_stop, p, kmin, kmax, keep, pages):
    mq, mk = p[P_MASK_BQ], p[P_MASK_BKV]
    nh, nkh, n, nk, d = p[P_HEADS], p[P_KV_HEADS], p[P_SEQ], p[P_KV_SEQ], p[P_DIM]
    eb, acc, br, bc = p[P_EB], p[P_ACC], p[P_BQ], p[P_BKV]
    t_q, t_kv, grp = (n + br - 1) // br, (nk + bc - 1) // bc, nh // nkh
    row, arow = d * eb, d * acc
    bufs = (K_S, V_S, Q_S, DO_S, LD_S, DK_R, DV_R, S_R, DP_R, DQ_R)  # = MAIN_BUFFERS
    sizes = (bc * row, bc * row, br * row, br * row, 2 * br * acc, bc * arow, bc * arow,
             br * bc * acc, br * bc * acc, br * arow)  # fmt: skip
    k = 0
    for cta in range(cta_start, cta_stop):
        if kernel != 1:  # pre- or postprocess: one CTA per (b, h, i)
            bh, i = cta // t_q, cta % t_q
            q0 = i * br
            r = min(br, n - q0)
            off, aoff, voff = (bh * n + q0) * row, (bh * n + q0) * arow, (bh * n + q0) * acc
            if kernel == 0:  # D_i = rowsum(dO_i * O_i); dQ_acc_i = 0
                k = buf(ev, k, write, kernel, cta, ALLOC, ROW_R, 2 * br * arow)
                k = mem(ev, k, write, kernel, cta, -1, LOAD, O, i, -1, off, r, row, row)
                k = mem(ev, k, write, kernel, cta, -1, LOAD, DO, i, -1, off, r, row, row)
                k = calc(ev, k, write, kernel, cta, -1, EW, i, -1, EW_D_PER_ELEM * r * d)
                k = mem(ev, k, write, kernel, cta, -1, STORE, D, i, -1, voff, 1, r * acc, r * acc)
                k = mem(ev, k, write, kernel, cta, -1, STORE, DQ_ACC, i, -1, aoff, r, arow, arow)
                k = buf(ev, k, write, kernel, cta, FREE, ROW_R, 2 * br * arow)
            else:  # dQ_i = dQ_acc_i in the input dtype
                k = buf(ev, k, write, kernel, cta, ALLOC, DQ_R, br * arow)
                k = mem(ev, k, write, kernel, cta, -1, LOAD, DQ_ACC, i, -1, aoff, r, arow, arow)
                k = mem(ev, k, write, kernel, cta, -1, STORE, DQ, i, -1, off, r, row, row)
                k = buf(ev, k, write, kernel, cta, FREE, DQ_R, br * arow)
            continue
        # main kernel: one CTA per (b, kv head, j)
        bkh, j = cta // t_kv, cta % t_kv
        b, kvh = bkh // nkh, bkh % nkh
        k0 = j * bc
        c = min(bc, nk - k0)
        for t in range(10):
            k = buf(ev, k, write, kernel, cta, ALLOC, bufs[t], sizes[t])
        kvoff = (bkh * nk + k0) * row
        lo, hi = q_tiles(kmin, kmax, keep, mq, mk, k0, k0 + c, br, n)
        # K_j, V_j: HBM -> SRAM once per CTA that some Q block visits
        if lo < hi:
            k = mem(ev, k, write, kernel, cta, -1, LOAD, K, j, -1, kvoff, c, row, row)
            k = mem(ev, k, write, kernel, cta, -1, LOAD, V, j, -1, kvoff, c, row, row)
        for g in range(grp):
            bh = b * nh + kvh * grp + g
            for i in range(lo, hi):
                st = g * t_q + i
                q0 = i * br
                r = min(br, n - q0)
                state = tile_state(kmin, kmax, keep, mq, mk, q0, q0 + r, k0, k0 + c)
                if state == SKIP:
                    continue
                off, voff, aoff = (bh * n + q0) * row, (bh * n + q0) * acc, (bh * n + q0) * arow
                # Q_i, dO_i, L_i, D_i: HBM -> SRAM once per (i, j)
                k = mem(ev, k, write, kernel, cta, st, LOAD, Q, i, -1, off, r, row, row)
                k = mem(ev, k, write, kernel, cta, st, LOAD, DO, i, -1, off, r, row, row)
                k = mem(ev, k, write, kernel, cta, st, LOAD, LSE, i, -1, voff, 1, r * acc, r * acc)
                k = mem(ev, k, write, kernel, cta, st, LOAD, D, i, -1, voff, 1, r * acc, r * acc)
                mm = 2 * r * c * d
                ew_p = EW_P_PER_SCORE * r * c
                if state == PARTIAL:
                    ew_p += r * c  # partial block: apply the mask
                ew_ds = EW_DS_PER_SCORE * r * c + EW_DQ_PER_ELEM * r * d
                k = calc(ev, k, write, kernel, cta, st, MMA, i, j, mm)  # S = Q K^T
                k = calc(ev, k, write, kernel, cta, st, EW, i, j, ew_p)
                k = calc(ev, k, write, kernel, cta, st, EXP, i, j, r * c)  # P = exp(S - L)
                k = calc(ev, k, write, kernel, cta, st, MMA, i, j, mm)  # dV += P^T dO
                k = calc(ev, k, write, kernel, cta, st, MMA, i, j, mm)  # dP = dO V^T
                k = calc(ev, k, write, kernel, cta, st, EW, i, j, ew_ds)  # dS = P (dP - D)
                k = calc(ev, k, write, kernel, cta, st, MMA, i, j, mm)  # dS K
                # dQ_i += dS_ij K_j: atomic add into the fp32 accumulator, at L2
                k = mem(ev, k, write, kernel, cta, st, REDUCE, DQ_ACC, i, j, aoff, r, arow, arow)
                k = calc(ev, k, write, kernel, cta, st, MMA, i, j, mm)  # dK += dS^T Q
        if lo < hi:
            k = calc(ev, k, write, kernel, cta, -1, EW, -1, j, c * d)  # dK *= scale
        # dK_j, dV_j (zero for keys no query sees): registers -> HBM once per CTA
        k = mem(ev, k, write, kernel, cta, -1, STORE, DK, j, -1, kvoff, c, row, row)
        k = mem(ev, k, write, kernel, cta, -1, STORE, DV, j, -1, kvoff, c, row, row)
        for t in range(9, -1, -1):
            k = buf(ev, k, write, kernel, cta, FREE, bufs[t], sizes[t])
    return k


def execute(s, q, k, v, grad_out, rec):
    """Run the three kernels tile by tile; returns (dQ, dK, dV) and logs every event."""
    sh = s.shape
    nb, nh, n, d, dt, grp = sh.batch, sh.heads, sh.seq_len, sh.head_dim, sh.dtype, sh.group
    nk, (kmin, kmax) = sh.n_kv, s.mask
    keep, mq, mk = keep_table(sh)
    br, bc, eb, acc = s.block_q, s.block_kv, sh.elem_bytes, sh.acc_bytes
    at = acc_dtype(dt)
    scale = at.type(sh.scale)
    qd, kd = (nb, nh, n, d), (nb, sh.n_kv_heads, nk, d)
    fwd = flash2.execute(s.__class__("flash2", sh, br, bc, s.warps), q, k, v, None, Recorder())
    o, lse = fwd  # what the forward left in HBM: O in the input dtype, L in fp32/fp64
    z = _sizes(sh, br, bc)
    d_vec = np.zeros((nb, nh, n), at)
    dq_acc = np.zeros(qd, at)
    dq, dk, dv = np.zeros(qd, q.dtype), np.zeros(kd, q.dtype), np.zeros(kd, q.dtype)

    def mem(kern, cta, step, op, t, bi, bj, dims, b, h, r0, nrows, elem):
        """Rows r0..r0+nrows of (B, H, R, C) tensor t: a whole-row LOAD or STORE."""
        row = dims[3] * elem
        off = offset4(dims, b, h, r0, 0, elem)
        rec.mem(kern, cta, step, op, t, bi, bj, off, nrows, row, row)

    for cta in range(s.t_q * nb * nh):  # kernel 0: D = rowsum(dO * O), dQ_acc = 0
        bh, i = divmod(cta, s.t_q)
        b, h = divmod(bh, nh)
        q0 = i * br
        r = min(br, n - q0)
        rec.buf(0, cta, Op.ALLOC, ROW_R, z[ROW_R])
        o_i = o[b, h, q0 : q0 + r].astype(at)
        mem(0, cta, -1, Op.LOAD, O, i, -1, qd, b, h, q0, r, eb)
        do_i = grad_out[b, h, q0 : q0 + r].astype(at)
        mem(0, cta, -1, Op.LOAD, DO, i, -1, qd, b, h, q0, r, eb)
        d_vec[b, h, q0 : q0 + r] = (do_i * o_i).sum(axis=1)
        rec.calc(0, cta, -1, Op.ELEMENTWISE, i, -1, EW_D_PER_ELEM * r * d)
        voff = (bh * n + q0) * acc
        rec.mem(0, cta, -1, Op.STORE, D, i, -1, voff, 1, r * acc, r * acc)
        dq_acc[b, h, q0 : q0 + r] = 0
        mem(0, cta, -1, Op.STORE, DQ_ACC, i, -1, qd, b, h, q0, r, acc)
        rec.buf(0, cta, Op.FREE, ROW_R, z[ROW_R])

    for cta in range(nb * sh.n_kv_heads * s.t_kv):  # kernel 1: outer loop over K/V blocks
        bkh, j = divmod(cta, s.t_kv)
        b, kvh = divmod(bkh, sh.n_kv_heads)
        k0 = j * bc
        c = min(bc, nk - k0)
        for t in MAIN_BUFFERS:
            rec.buf(1, cta, Op.ALLOC, t, z[t])
        lo, hi = q_tiles(kmin, kmax, keep, mq, mk, k0, k0 + c, br, n)
        k_j = k[b, kvh, k0 : k0 + c].astype(at)
        v_j = v[b, kvh, k0 : k0 + c].astype(at)
        if lo < hi:
            mem(1, cta, -1, Op.LOAD, K, j, -1, kd, b, kvh, k0, c, eb)
            mem(1, cta, -1, Op.LOAD, V, j, -1, kd, b, kvh, k0, c, eb)
        dk_j, dv_j = np.zeros((c, d), at), np.zeros((c, d), at)
        for g in range(grp):
            h = kvh * grp + g
            for i in range(lo, hi):
                q0 = i * br
                r = min(br, n - q0)
                state = tile_state(kmin, kmax, keep, mq, mk, q0, q0 + r, k0, k0 + c)
                if state == SKIP:
                    continue
                step = g * s.t_q + i
                q_i = q[b, h, q0 : q0 + r].astype(at)
                mem(1, cta, step, Op.LOAD, Q, i, -1, qd, b, h, q0, r, eb)
                do_i = grad_out[b, h, q0 : q0 + r].astype(at)
                mem(1, cta, step, Op.LOAD, DO, i, -1, qd, b, h, q0, r, eb)
                voff = ((b * nh + h) * n + q0) * acc
                l_i = lse[b, h, q0 : q0 + r]
                rec.mem(1, cta, step, Op.LOAD, LSE, i, -1, voff, 1, r * acc, r * acc)
                dd_i = d_vec[b, h, q0 : q0 + r]
                rec.mem(1, cta, step, Op.LOAD, D, i, -1, voff, 1, r * acc, r * acc)
                mm = 2 * r * c * d
                s_ij = (q_i @ k_j.T) * scale
                rec.calc(1, cta, step, Op.MMA, i, j, mm)
                ew = EW_P_PER_SCORE * r * c
                if state == PARTIAL:
                    s_ij = np.where(allowed(sh, q0, q0 + r, k0, k0 + c), s_ij, -np.inf)
                    ew += r * c
                rec.calc(1, cta, step, Op.ELEMENTWISE, i, j, ew)
                p_ij = np.exp(s_ij - l_i[:, None])  # P rebuilt from the forward's logsumexp
                rec.calc(1, cta, step, Op.EXP, i, j, r * c)
                dv_j += to_dtype(p_ij, dt).astype(at).T @ do_i
                rec.calc(1, cta, step, Op.MMA, i, j, mm)
                dp_ij = do_i @ v_j.T
                rec.calc(1, cta, step, Op.MMA, i, j, mm)
                ds_ij = to_dtype(p_ij * (dp_ij - dd_i[:, None]), dt).astype(at)
                ew_ds = EW_DS_PER_SCORE * r * c + EW_DQ_PER_ELEM * r * d
                rec.calc(1, cta, step, Op.ELEMENTWISE, i, j, ew_ds)
                dq_part = (ds_ij @ k_j) * scale
                rec.calc(1, cta, step, Op.MMA, i, j, mm)
                dq_acc[b, h, q0 : q0 + r] += dq_part
                off = offset4(qd, b, h, q0, 0, acc)
                rec.mem(1, cta, step, Op.REDUCE, DQ_ACC, i, j, off, r, d * acc, d * acc)
                dk_j += ds_ij.T @ q_i
                rec.calc(1, cta, step, Op.MMA, i, j, mm)
        dk_j *= scale
        if lo < hi:
            rec.calc(1, cta, -1, Op.ELEMENTWISE, -1, j, c * d)
        dk[b, kvh, k0 : k0 + c] = to_dtype(dk_j, dt)
        mem(1, cta, -1, Op.STORE, DK, j, -1, kd, b, kvh, k0, c, eb)
        dv[b, kvh, k0 : k0 + c] = to_dtype(dv_j, dt)
        mem(1, cta, -1, Op.STORE, DV, j, -1, kd, b, kvh, k0, c, eb)
        for t in reversed(MAIN_BUFFERS):
            rec.buf(1, cta, Op.FREE, t, z[t])

    for cta in range(s.t_q * nb * nh):  # kernel 2: dQ = dQ_acc in the input dtype
        bh, i = divmod(cta, s.t_q)
        b, h = divmod(bh, nh)
        q0 = i * br
        r = min(br, n - q0)
        rec.buf(2, cta, Op.ALLOC, DQ_R, z[DQ_R])
        mem(2, cta, -1, Op.LOAD, DQ_ACC, i, -1, qd, b, h, q0, r, acc)
        dq[b, h, q0 : q0 + r] = to_dtype(dq_acc[b, h, q0 : q0 + r], dt)
        mem(2, cta, -1, Op.STORE, DQ, i, -1, qd, b, h, q0, r, eb)
        rec.buf(2, cta, Op.FREE, DQ_R, z[DQ_R])
    return dq, dk, dv


# -- what analysis asks of this schedule (kernels.registry) -------------------------------------
FORWARD = "flash2"
EVERY_TILE = False
MATMUL_PRODUCTS = 5  # S again, dV, dP, dQ, dK per visited tile
BOUND_CONSTANT = 12  # Q, dO, dQ_acc reduce: 3 rv d, M >= 4 Bc d
WARP_SPECIALIZED = ("flash2_bwd",)


def traffic(s) -> list[tuple[str, int, int, int]]:
    """(tensor, element bytes, elements read, elements written), docs/io.md ``flash2_bwd``:
    pre per (b, h, i); main per (b, kv head, j); post per (b, h, i)."""
    t = terms(s)
    eb, acc, bh, bk, d, rv, n = t.eb, t.acc, t.bh, t.bk, t.d, t.rv, t.n
    kv = t.bs.kv_rows * d
    return [
        ("Q", eb, bh * rv * d, 0),
        ("K", eb, bk * kv, 0),
        ("V", eb, bk * kv, 0),
        ("O", eb, bh * t.nd, 0),  # pre only: D = rowsum(dO * O)
        ("dO", eb, bh * (n + rv) * d, 0),  # pre + once per visited pair
        ("L", acc, bh * rv, 0),
        ("D", acc, bh * rv, bh * n),
        ("dQ_acc", acc, bh * t.nd, bh * (n + rv) * d),  # pre zeroes, REDUCE per pair, post
        ("dQ", eb, 0, bh * t.nd),
        ("dK", eb, 0, bk * t.kd),
        ("dV", eb, 0, bk * t.kd),
    ]


def outer_steps(s, bs) -> tuple[int, ...]:
    """The main kernel: a step per (group head, visited Q block); pre and post none."""
    return (0, s.shape.batch * s.shape.heads * bs.pairs, 0)


def on_chip_bytes(s) -> int:
    """Shared memory plus register tiles per CTA: the main kernel or the preprocess."""
    z = _sizes(s.shape, s.block_q, s.block_kv)
    return max(sum(z[t] for t in MAIN_BUFFERS), z[ROW_R])
