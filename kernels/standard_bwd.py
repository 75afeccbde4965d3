"""Standard attention backward (FlashAttention paper, Algorithm 3): P is read back from HBM.

Inputs Q, K, V, dO and the forward's P (B, H, N, N), in the input dtype as the forward stored it;
no recomputation. Five kernels, in launch order:

1. ``dv``: dV = P^T dO. One CTA per (b, kv head, j): loops over the group's query heads g and
   the Q blocks i, loading P_ij and dO_i, and stores dV_j (summed over the group).
2. ``dp``: dP = dO V^T. One CTA per (b, h, i, j) tile: loads dO_i and V_j, stores the dP tile
   (input dtype) into dP (B, H, N, N).
3. ``ds``: dS = P * (dP - rowsum(P * dP)), row by row, with the forward softmax's row blocking
   and options (see ``kernels.standard``): 1 pass keeps the P and dP row blocks resident in
   shared memory (2 * softmax_rows * N * elem bytes; the default when that is at most 48 KiB);
   2 passes reads the P and dP chunks once to form the row sums and again to store dS.
4. ``dq``: dQ = dS K / sqrt(d). One CTA per (b, h, i): streams dS_ij and K_j, stores dQ_i.
5. ``dk``: dK = dS^T Q / sqrt(d). One CTA per (b, kv head, j): loops over the group's heads g and
   the Q blocks i, loading dS_ij and Q_i, and stores dK_j.


Four N x N x d matmuls: 8 N^2 d FLOPs per head, twice the forward (no recomputation; flash
recomputes S and does 2.5x). Causal changes only the values: P is zero above the diagonal, so dS
is too, and every GEMM still reads every tile; the ``ds`` kernel needs no mask.

FP32 operation counts (EW events): ``ds`` EW_ROWSUM_PER_SCORE = 2 (multiply P * dP, add) and
EW_DS_PER_SCORE = 2 (subtract the row sum, multiply by P), per score of the row block;
``dq`` and ``dk`` EW_SCALE_PER_ELEM = 1 per output element (the 1/sqrt(d) scale). ``dv`` and
``dp`` have none (rounding to the storage dtype is not counted).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kernels._emit import (
    ALLOC,
    EW,
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
    P_SEQ,
    STORE,
)
from kernels._record import Recorder
from kernels.standard import (
    OPTIONS,
    P_SOFTMAX_PASSES,
    P_SOFTMAX_ROWS,
    Tiles,
    _bufs,
    _calc,
    _mem,
    kernel_infos,
    resolve_softmax_options,
)
from simulator.trace import KernelInfo, Op, Space, TensorInfo

__all__ = ["OPTIONS"]

# tensor indices, in the order of tensors()
Q, K, V, DO, P, DP, DS, DQ, DK, DV = range(10)
P_S, DO_S, DV_ACC, V_S, DP_ACC, P_ROWS, DP_ROWS, D_ROW = range(10, 18)
DS_S, K_S, DQ_ACC, Q_S, DK_ACC = range(18, 23)

EW_ROWSUM_PER_SCORE, EW_DS_PER_SCORE, EW_SCALE_PER_ELEM = 2, 2, 1


def validate(s) -> None:
    resolve_softmax_options(s, 2)  # one pass keeps two row blocks resident: P and dP


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
    rows = s.option("softmax_rows")
    cols = n if s.option("softmax_passes") == 1 else bc
    g, sm, rg = Space.GLOBAL, Space.SHARED, Space.REGISTERS
    return (
        TensorInfo("Q", g, (b, h, n, d), eb),
        TensorInfo("K", g, (b, kh, n, d), eb),
        TensorInfo("V", g, (b, kh, n, d), eb),
        TensorInfo("dO", g, (b, h, n, d), eb),
        TensorInfo("P", g, (b, h, n, n), eb),
        TensorInfo("dP", g, (b, h, n, n), eb),
        TensorInfo("dS", g, (b, h, n, n), eb),
        TensorInfo("dQ", g, (b, h, n, d), eb),
        TensorInfo("dK", g, (b, kh, n, d), eb),
        TensorInfo("dV", g, (b, kh, n, d), eb),
        TensorInfo("P_ij", sm, (br, bc), eb),
        TensorInfo("dO_i", sm, (br, d), eb),
        TensorInfo("dV_j", rg, (bc, d), acc),
        TensorInfo("V_j", sm, (bc, d), eb),
        TensorInfo("dP_ij", rg, (br, bc), acc),
        TensorInfo("P_rows", sm, (rows, cols), eb),
        TensorInfo("dP_rows", sm, (rows, cols), eb),
        TensorInfo("D_rows", rg, (rows,), acc),
        TensorInfo("dS_ij", sm, (br, bc), eb),
        TensorInfo("K_j", sm, (bc, d), eb),
        TensorInfo("dQ_i", rg, (br, d), acc),
        TensorInfo("Q_i", sm, (br, d), eb),
        TensorInfo("dK_j", rg, (bc, d), acc),
    )


def _buffers(s, kernel: int) -> list[tuple[int, int]]:
    """(tensor, bytes) of each on-chip buffer of one kernel, in ALLOC order (full block sizes)."""
    br, bc, d, eb, acc = (
        s.block_q,
        s.block_kv,
        s.shape.head_dim,
        s.shape.elem_bytes,
        s.shape.acc_bytes,
    )
    rows = s.option("softmax_rows")
    row_block = rows * (s.shape.seq_len if s.option("softmax_passes") == 1 else bc) * eb
    return [
        [(P_S, br * bc * eb), (DO_S, br * d * eb), (DV_ACC, bc * d * acc)],
        [(DO_S, br * d * eb), (V_S, bc * d * eb), (DP_ACC, br * bc * acc)],
        [(P_ROWS, row_block), (DP_ROWS, row_block), (D_ROW, rows * acc)],
        [(DS_S, br * bc * eb), (K_S, bc * d * eb), (DQ_ACC, br * d * acc)],
        [(DS_S, br * bc * eb), (Q_S, br * d * eb), (DK_ACC, bc * d * acc)],
    ][kernel]


def kernels(s) -> tuple[KernelInfo, ...]:
    sh = s.shape
    bh, bkh = sh.batch * sh.heads, sh.batch * sh.n_kv_heads
    t_rows = -(-sh.seq_len // s.option("softmax_rows"))
    ctas = (bkh * s.t_kv, bh * s.t_q * s.t_kv, bh * t_rows, bh * s.t_q, bkh * s.t_kv)
    return kernel_infos(s, ("dv", "dp", "ds", "dq", "dk"), ctas, _buffers, tensors(s))


# -- fast tracer -------------------------------------------------------------------------------
@njit(**JIT)
def _emit_kv(ev, write, kernel, cta_start, cta_stop, p, tile, rows_t, out, tile_s, rows_s, acc_r):
    """dv (tile P, rows dO) and dk (tile dS, rows Q): one CTA per (b, kv head, j)."""
    nh, nkh, n, d = p[P_HEADS], p[P_KV_HEADS], p[P_SEQ], p[P_DIM]
    eb, acc, br, bc = p[P_EB], p[P_ACC], p[P_BQ], p[P_BKV]
    t_q, t_kv, grp = (n + br - 1) // br, (n + bc - 1) // bc, nh // nkh
    row, nt, nr, na = d * eb, br * bc * eb, br * d * eb, bc * d * acc
    k = 0
    for cta in range(cta_start, cta_stop):
        bkh, j = cta // t_kv, cta % t_kv
        b, kvh = bkh // nkh, bkh % nkh
        k0 = j * bc
        c = min(bc, n - k0)
        k = _bufs(ev, k, write, kernel, cta, ALLOC, tile_s, nt, rows_s, nr, acc_r, na)
        for g in range(grp):
            bh = b * nh + kvh * grp + g
            for i in range(t_q):
                q0, st = i * br, g * t_q + i
                r = min(br, n - q0)
                # P_ij (dS_ij) and dO_i (Q_i): HBM -> SRAM, once per (g, i)
                off = ((bh * n + q0) * n + k0) * eb
                k = _mem(ev, k, write, kernel, cta, st, LOAD, tile, i, j, off, r, c * eb, n * eb)
                off = (bh * n + q0) * row
                k = _mem(ev, k, write, kernel, cta, st, LOAD, rows_t, i, -1, off, r, row, row)
                k = _calc(ev, k, write, kernel, cta, st, MMA, i, j, 2 * r * c * d)
        if out == DK:
            k = _calc(ev, k, write, kernel, cta, -1, EW, j, -1, EW_SCALE_PER_ELEM * c * d)
        # dV_j (dK_j): registers -> HBM, once, summed over the group's query heads
        off = (bkh * n + k0) * row
        k = _mem(ev, k, write, kernel, cta, -1, STORE, out, j, -1, off, c, row, row)
        k = _bufs(ev, k, write, kernel, cta, FREE, tile_s, nt, rows_s, nr, acc_r, na)
    return k


@njit(**JIT)
def _emit_dp(ev, write, cta_start, cta_stop, p):
    nh, nkh, n, d = p[P_HEADS], p[P_KV_HEADS], p[P_SEQ], p[P_DIM]
    eb, acc, br, bc = p[P_EB], p[P_ACC], p[P_BQ], p[P_BKV]
    t_q, t_kv, grp = (n + br - 1) // br, (n + bc - 1) // bc, nh // nkh
    row, ndo, nv, ndp = d * eb, br * d * eb, bc * d * eb, br * bc * acc
    k = 0
    for cta in range(cta_start, cta_stop):
        bhi, j = cta // t_kv, cta % t_kv
        bh, i = bhi // t_q, bhi % t_q
        q0, k0 = i * br, j * bc
        r, c = min(br, n - q0), min(bc, n - k0)
        k = _bufs(ev, k, write, 1, cta, ALLOC, DO_S, ndo, V_S, nv, DP_ACC, ndp)
        # dO_i and V_j: HBM -> SRAM, once per tile of dP
        k = _mem(ev, k, write, 1, cta, -1, LOAD, DO, i, -1, (bh * n + q0) * row, r, row, row)
        off = (((bh // nh) * nkh + (bh % nh) // grp) * n + k0) * row
        k = _mem(ev, k, write, 1, cta, -1, LOAD, V, j, -1, off, c, row, row)
        k = _calc(ev, k, write, 1, cta, -1, MMA, i, j, 2 * r * c * d)
        # dP_ij: registers -> HBM in the input dtype
        off = ((bh * n + q0) * n + k0) * eb
        k = _mem(ev, k, write, 1, cta, -1, STORE, DP, i, j, off, r, c * eb, n * eb)
        k = _bufs(ev, k, write, 1, cta, FREE, DO_S, ndo, V_S, nv, DP_ACC, ndp)
    return k


@njit(**JIT)
def _emit_ds(ev, write, cta_start, cta_stop, p):
    n, eb, acc, bc = p[P_SEQ], p[P_EB], p[P_ACC], p[P_BKV]
    passes, rows = p[P_SOFTMAX_PASSES], p[P_SOFTMAX_ROWS]
    t_kv, t_r = (n + bc - 1) // bc, (n + rows - 1) // rows
    buf, nd = rows * (n if passes == 1 else bc) * eb, rows * acc
    k = 0
    for cta in range(cta_start, cta_stop):
        bh, rb = cta // t_r, cta % t_r
        r0 = rb * rows
        r = min(rows, n - r0)
        base = (bh * n + r0) * n  # element (b, h, r0, 0) of P, dP and dS
        k = _bufs(ev, k, write, 2, cta, ALLOC, P_ROWS, buf, DP_ROWS, buf, D_ROW, nd)
        for it in range(passes * t_kv):  # two passes: step t_kv + jc is pass 2's chunk jc
            jc, last = it % t_kv, it >= (passes - 1) * t_kv
            k0 = jc * bc
            c = min(bc, n - k0)
            off = (base + k0) * eb
            # P and dP chunks: HBM -> SRAM, once per pass
            k = _mem(ev, k, write, 2, cta, it, LOAD, P, rb, jc, off, r, c * eb, n * eb)
            k = _mem(ev, k, write, 2, cta, it, LOAD, DP, rb, jc, off, r, c * eb, n * eb)
            if passes == 2:
                ew = (EW_DS_PER_SCORE if last else EW_ROWSUM_PER_SCORE) * r * c
                k = _calc(ev, k, write, 2, cta, it, EW, rb, jc, ew)
                if last:  # dS chunk: SRAM -> HBM
                    k = _mem(ev, k, write, 2, cta, it, STORE, DS, rb, jc, off, r, c * eb, n * eb)
        if passes == 1:
            ew = (EW_ROWSUM_PER_SCORE + EW_DS_PER_SCORE) * r * n
            k = _calc(ev, k, write, 2, cta, -1, EW, rb, -1, ew)
            for jc in range(t_kv):  # dS chunks: SRAM -> HBM, once
                k0 = jc * bc
                c = min(bc, n - k0)
                off = (base + k0) * eb
                k = _mem(ev, k, write, 2, cta, jc, STORE, DS, rb, jc, off, r, c * eb, n * eb)
        k = _bufs(ev, k, write, 2, cta, FREE, P_ROWS, buf, DP_ROWS, buf, D_ROW, nd)
    return k


@njit(**JIT)
def _emit_dq(ev, write, cta_start, cta_stop, p):
    nh, nkh, n, d = p[P_HEADS], p[P_KV_HEADS], p[P_SEQ], p[P_DIM]
    eb, acc, br, bc = p[P_EB], p[P_ACC], p[P_BQ], p[P_BKV]
    t_q, t_kv, grp = (n + br - 1) // br, (n + bc - 1) // bc, nh // nkh
    row, nds, nk, ndq = d * eb, br * bc * eb, bc * d * eb, br * d * acc
    k = 0
    for cta in range(cta_start, cta_stop):
        bh, i = cta // t_q, cta % t_q
        q0 = i * br
        r = min(br, n - q0)
        k = _bufs(ev, k, write, 3, cta, ALLOC, DS_S, nds, K_S, nk, DQ_ACC, ndq)
        for j in range(t_kv):
            k0 = j * bc
            c = min(bc, n - k0)
            # dS_ij and K_j: HBM -> SRAM, once per (i, j)
            off = ((bh * n + q0) * n + k0) * eb
            k = _mem(ev, k, write, 3, cta, j, LOAD, DS, i, j, off, r, c * eb, n * eb)
            off = (((bh // nh) * nkh + (bh % nh) // grp) * n + k0) * row
            k = _mem(ev, k, write, 3, cta, j, LOAD, K, j, -1, off, c, row, row)
            k = _calc(ev, k, write, 3, cta, j, MMA, i, j, 2 * r * c * d)
        k = _calc(ev, k, write, 3, cta, -1, EW, i, -1, EW_SCALE_PER_ELEM * r * d)
        # dQ_i: registers -> HBM, once per CTA
        k = _mem(ev, k, write, 3, cta, -1, STORE, DQ, i, -1, (bh * n + q0) * row, r, row, row)
        k = _bufs(ev, k, write, 3, cta, FREE, DS_S, nds, K_S, nk, DQ_ACC, ndq)
    return k


@njit(**JIT)
def _emit(ev, write, kernel, cta_start, cta_stop, p):
    if kernel == 0:
        return _emit_kv(ev, write, 0, cta_start, cta_stop, p, P, DO, DV, P_S, DO_S, DV_ACC)
    if kernel == 1:
        return _emit_dp(ev, write, cta_start, cta_stop, p)
    if kernel == 2:
        return _emit_ds(ev, write, cta_start, cta_stop, p)
    if kernel == 3:
        return _emit_dq(ev, write, cta_start, cta_stop, p)
    return _emit_kv(ev, write, 4, cta_start, cta_stop, p, DS, Q, DK, DS_S, Q_S, DK_ACC)


# -- numeric executor --------------------------------------------------------------------------
def _kv_side(s, run, kernel, tile, tile_t, rows, rows_t, out, out_t, scale):
    """dv (tile P, rows dO) and dk (tile dS, rows Q): out_j = scale sum_{g,i} tile_ij^T rows_i."""
    sh, n, d, br, bc = s.shape, s.shape.seq_len, s.shape.head_dim, s.block_q, s.block_kv
    for cta in range(s.kernels[kernel].ctas):
        bkh, j = divmod(cta, s.t_kv)
        b, kvh = divmod(bkh, sh.n_kv_heads)
        k0 = j * bc
        c = min(bc, n - k0)
        run.bufs(kernel, cta, Op.ALLOC)
        acc = np.zeros((c, d), run.at)
        for g in range(sh.group):
            h = kvh * sh.group + g
            for i in range(s.t_q):
                q0, st = i * br, g * s.t_q + i
                r = min(br, n - q0)
                t_ij = run.load(kernel, cta, st, tile_t, tile, b, h, q0, r, k0, c, i, j)
                x_i = run.load(kernel, cta, st, rows_t, rows, b, h, q0, r, 0, d, i, -1)
                acc += t_ij.T @ x_i
                run.calc(kernel, cta, st, Op.MMA, i, j, 2 * r * c * d)
        if scale is not None:
            acc = acc * scale
            run.calc(kernel, cta, -1, Op.ELEMENTWISE, j, -1, EW_SCALE_PER_ELEM * c * d)
        run.store(kernel, cta, -1, out_t, out, b, kvh, k0, 0, acc, j, -1)
        run.bufs(kernel, cta, Op.FREE)


def _dp(s, run, do, v, dp):
    sh, n, d, br, bc = s.shape, s.shape.seq_len, s.shape.head_dim, s.block_q, s.block_kv
    for cta in range(s.kernels[1].ctas):
        bhi, j = divmod(cta, s.t_kv)
        bh, i = divmod(bhi, s.t_q)
        b, h = divmod(bh, sh.heads)
        q0, k0 = i * br, j * bc
        r, c = min(br, n - q0), min(bc, n - k0)
        run.bufs(1, cta, Op.ALLOC)
        do_i = run.load(1, cta, -1, DO, do, b, h, q0, r, 0, d, i, -1)
        v_j = run.load(1, cta, -1, V, v, b, h // sh.group, k0, c, 0, d, j, -1)
        run.calc(1, cta, -1, Op.MMA, i, j, 2 * r * c * d)
        run.store(1, cta, -1, DP, dp, b, h, q0, k0, do_i @ v_j.T, i, j)  # input dtype
        run.bufs(1, cta, Op.FREE)


def _ds(s, run, p, dp, ds):
    n, bc, t_kv = s.shape.seq_len, s.block_kv, s.t_kv
    rows, passes = s.option("softmax_rows"), s.option("softmax_passes")
    for cta in range(s.kernels[2].ctas):
        bh, rb = divmod(cta, -(-n // rows))
        b, h = divmod(bh, s.shape.heads)
        r0 = rb * rows
        r = min(rows, n - r0)
        run.bufs(2, cta, Op.ALLOC)
        chunks, d_r = [], np.zeros(r, run.at)  # D_i = rowsum(P * dP), accumulated
        for it in range(passes * t_kv):
            jc = it % t_kv
            c = min(bc, n - jc * bc)
            p_c = run.load(2, cta, it, P, p, b, h, r0, r, jc * bc, c, rb, jc)
            dp_c = run.load(2, cta, it, DP, dp, b, h, r0, r, jc * bc, c, rb, jc)
            if passes == 1:
                chunks.append((p_c, dp_c))
            elif it < t_kv:  # pass 1: row sums
                d_r += (p_c * dp_c).sum(axis=1)
                run.calc(2, cta, it, Op.ELEMENTWISE, rb, jc, EW_ROWSUM_PER_SCORE * r * c)
            else:  # pass 2: P and dP read again, dS stored in the input dtype
                run.calc(2, cta, it, Op.ELEMENTWISE, rb, jc, EW_DS_PER_SCORE * r * c)
                run.store(
                    2, cta, it, DS, ds, b, h, r0, jc * bc, p_c * (dp_c - d_r[:, None]), rb, jc
                )
        if chunks:  # one pass: both row blocks resident
            p_r, dp_r = (np.concatenate(x, axis=1) for x in zip(*chunks, strict=True))
            ds_r = p_r * (dp_r - (p_r * dp_r).sum(axis=1)[:, None])
            ew = (EW_ROWSUM_PER_SCORE + EW_DS_PER_SCORE) * r * n
            run.calc(2, cta, -1, Op.ELEMENTWISE, rb, -1, ew)
            for jc in range(t_kv):
                ds_c = ds_r[:, jc * bc : (jc + 1) * bc]
                run.store(2, cta, jc, DS, ds, b, h, r0, jc * bc, ds_c, rb, jc)
        run.bufs(2, cta, Op.FREE)


def _dq(s, run, ds, k, dq):
    sh, n, d, br, bc = s.shape, s.shape.seq_len, s.shape.head_dim, s.block_q, s.block_kv
    for cta in range(s.kernels[3].ctas):
        bh, i = divmod(cta, s.t_q)
        b, h = divmod(bh, sh.heads)
        q0 = i * br
        r = min(br, n - q0)
        run.bufs(3, cta, Op.ALLOC)
        acc = np.zeros((r, d), run.at)
        for j in range(s.t_kv):
            k0 = j * bc
            c = min(bc, n - k0)
            ds_ij = run.load(3, cta, j, DS, ds, b, h, q0, r, k0, c, i, j)
            k_j = run.load(3, cta, j, K, k, b, h // sh.group, k0, c, 0, d, j, -1)
            acc += ds_ij @ k_j
            run.calc(3, cta, j, Op.MMA, i, j, 2 * r * c * d)
        acc = acc * run.at.type(sh.scale)
        run.calc(3, cta, -1, Op.ELEMENTWISE, i, -1, EW_SCALE_PER_ELEM * r * d)
        run.store(3, cta, -1, DQ, dq, b, h, q0, 0, acc, i, -1)
        run.bufs(3, cta, Op.FREE)


def execute(s, q, k, v, grad_out, rec):
    """Run the five kernels tile by tile, logging every event into ``rec``; returns (dQ, dK, dV)
    in the storage dtype. P comes from ``kernels.standard``'s executor with the same blocks and
    options, logged into a throwaway Recorder (its events are not part of this trace)."""
    from kernels import standard
    from kernels.schedule import Schedule

    fwd = Schedule("standard", s.shape, s.block_q, s.block_kv, s.warps, s.options)
    _, p, _ = standard.execute(fwd, q, k, v, None, Recorder())
    sh = s.shape
    dp = np.zeros((sh.batch, sh.heads, sh.seq_len, sh.seq_len), q.dtype)  # HBM, input dtype
    ds, dq, dk, dv = np.zeros_like(dp), np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    run = Tiles(s, rec, _buffers)
    _kv_side(s, run, 0, p, P, grad_out, DO, dv, DV, None)
    _dp(s, run, grad_out, v, dp)
    _ds(s, run, p, dp, ds)
    _dq(s, run, ds, k, dq)
    _kv_side(s, run, 4, ds, DS, q, Q, dk, DK, run.at.type(sh.scale))
    return dq, dk, dv
