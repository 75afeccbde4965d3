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


Four N x N_kv x d matmuls: 8 N N_kv d FLOPs per head, twice the forward (no recomputation;
flash recomputes S and does 2.5x). A mask (``kernels.mask``: causal, window, segments)
changes only the values: P is zero where it masks, so dS is too, and every GEMM still reads
every tile; the ``ds`` kernel needs no mask.

FP32 operation counts (EW events): ``ds`` EW_ROWSUM_PER_SCORE = 2 (multiply P * dP, add) and
EW_DS_PER_SCORE = 2 (subtract the row sum, multiply by P), per score of the row block;
``dq`` and ``dk`` EW_SCALE_PER_ELEM = 1 per output element (the 1/sqrt(d) scale). ``dv`` and
``dp`` have none (rounding to the storage dtype is not counted).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from flashio.kernels._emit import (
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
    P_KV_SEQ,
    P_SEQ,
    STORE,
    buf,
    calc,
    mem,
)
from flashio.kernels._record import Recorder
from flashio.kernels._standard_common import (
    P_SOFTMAX_PASSES,
    P_SOFTMAX_ROWS,
    SOFTMAX_OPTIONS,
    Tiles,
    _emit_rows,
    _emit_tile,
    kernel_infos,
    resolve_softmax_options,
    row_block,
    row_product,
    softmax_steps,
    tile_product,
)
from flashio.kernels._terms import terms
from flashio.simulator.trace import KernelInfo, Space, TensorInfo

OPTIONS = SOFTMAX_OPTIONS

# tensor indices, in the order of tensors()
Q, K, V, DO, P, DP, DS, DQ, DK, DV = range(10)
P_S, DO_S, DV_ACC, V_S, DP_ACC, P_ROWS, DP_ROWS, D_ROW = range(10, 18)
DS_S, K_S, DQ_ACC, Q_S, DK_ACC = range(18, 23)

EW_ROWSUM_PER_SCORE, EW_DS_PER_SCORE, EW_SCALE_PER_ELEM = 2, 2, 1


def validate(s) -> None:
    resolve_softmax_options(s, 2)  # one pass keeps two row blocks resident: P and dP


def tensors(s) -> tuple[TensorInfo, ...]:
    sh, br, bc = s.shape, s.block_q, s.block_kv
    b, h, kh, n, d = sh.batch, sh.heads, sh.n_kv_heads, sh.seq_len, sh.head_dim
    eb, acc, nk = sh.elem_bytes, sh.acc_bytes, sh.n_kv
    rows, cols = row_block(s)
    g, sm, rg = Space.GLOBAL, Space.SHARED, Space.REGISTERS
    return (
        TensorInfo("Q", g, (b, h, n, d), eb),
        TensorInfo("K", g, (b, kh, nk, d), eb),
        TensorInfo("V", g, (b, kh, nk, d), eb),
        TensorInfo("dO", g, (b, h, n, d), eb),
        TensorInfo("P", g, (b, h, n, nk), eb),
        TensorInfo("dP", g, (b, h, n, nk), eb),
        TensorInfo("dS", g, (b, h, n, nk), eb),
        TensorInfo("dQ", g, (b, h, n, d), eb),
        TensorInfo("dK", g, (b, kh, nk, d), eb),
        TensorInfo("dV", g, (b, kh, nk, d), eb),
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
    sh, br, bc = s.shape, s.block_q, s.block_kv
    d, eb, acc = sh.head_dim, sh.elem_bytes, sh.acc_bytes
    rows, cols = row_block(s)
    return [
        [(P_S, br * bc * eb), (DO_S, br * d * eb), (DV_ACC, bc * d * acc)],
        [(DO_S, br * d * eb), (V_S, bc * d * eb), (DP_ACC, br * bc * acc)],
        [(P_ROWS, rows * cols * eb), (DP_ROWS, rows * cols * eb), (D_ROW, rows * acc)],
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
def _emit_kv(ev, write, kernel, cta_start, cta_stop, p, tile, rows_t, out, bufs, ew_per_elem):
    """dv (tile P, rows dO) and dk (tile dS, rows Q, scaled): one CTA per (b, kv head, j)."""
    nh, nkh, n, nk, d = p[P_HEADS], p[P_KV_HEADS], p[P_SEQ], p[P_KV_SEQ], p[P_DIM]
    eb, acc, br, bc = p[P_EB], p[P_ACC], p[P_BQ], p[P_BKV]
    t_q, t_kv, grp = (n + br - 1) // br, (nk + bc - 1) // bc, nh // nkh
    row = d * eb
    sizes = (br * bc * eb, br * row, bc * d * acc)
    k = 0
    for cta in range(cta_start, cta_stop):
        bkh, j = cta // t_kv, cta % t_kv
        b, kvh = bkh // nkh, bkh % nkh
        k0 = j * bc
        c = min(bc, nk - k0)
        for t in range(3):
            k = buf(ev, k, write, kernel, cta, ALLOC, bufs[t], sizes[t])
        for g in range(grp):
            bh = b * nh + kvh * grp + g
            for i in range(t_q):
                q0, st = i * br, g * t_q + i
                r = min(br, n - q0)
                # P_ij (dS_ij) and dO_i (Q_i): HBM -> SRAM, once per (g, i)
                off = ((bh * n + q0) * nk + k0) * eb
                k = mem(ev, k, write, kernel, cta, st, LOAD, tile, i, j, off, r, c * eb, nk * eb)
                off = (bh * n + q0) * row
                k = mem(ev, k, write, kernel, cta, st, LOAD, rows_t, i, -1, off, r, row, row)
                k = calc(ev, k, write, kernel, cta, st, MMA, i, j, 2 * r * c * d)
        if ew_per_elem > 0:  # the 1/sqrt(d) scale, in registers
            k = calc(ev, k, write, kernel, cta, -1, EW, j, -1, ew_per_elem * c * d)
        # dV_j (dK_j): registers -> HBM, once, summed over the group's query heads
        off = (bkh * nk + k0) * row
        k = mem(ev, k, write, kernel, cta, -1, STORE, out, j, -1, off, c, row, row)
        for t in range(2, -1, -1):
            k = buf(ev, k, write, kernel, cta, FREE, bufs[t], sizes[t])
    return k


@njit(**JIT)
def _emit_ds(ev, write, cta_start, cta_stop, p):
    n, nk, eb, acc, bc = p[P_SEQ], p[P_KV_SEQ], p[P_EB], p[P_ACC], p[P_BKV]
    passes, rows = p[P_SOFTMAX_PASSES], p[P_SOFTMAX_ROWS]
    t_kv, t_r = (nk + bc - 1) // bc, (n + rows - 1) // rows
    nrow = rows * (nk if passes == 1 else bc) * eb
    bufs, sizes = (P_ROWS, DP_ROWS, D_ROW), (nrow, nrow, rows * acc)
    k = 0
    for cta in range(cta_start, cta_stop):
        bh, rb = cta // t_r, cta % t_r
        r0 = rb * rows
        r = min(rows, n - r0)
        base = (bh * n + r0) * nk  # element (b, h, r0, 0) of P, dP and dS
        for t in range(3):
            k = buf(ev, k, write, 2, cta, ALLOC, bufs[t], sizes[t])
        for it in range(passes * t_kv):  # two passes: step t_kv + jc is pass 2's chunk jc
            jc, last = it % t_kv, it >= (passes - 1) * t_kv
            k0 = jc * bc
            c = min(bc, nk - k0)
            off = (base + k0) * eb
            # P and dP chunks: HBM -> SRAM, once per pass
            k = mem(ev, k, write, 2, cta, it, LOAD, P, rb, jc, off, r, c * eb, nk * eb)
            k = mem(ev, k, write, 2, cta, it, LOAD, DP, rb, jc, off, r, c * eb, nk * eb)
            if passes == 2:
                ew = (EW_DS_PER_SCORE if last else EW_ROWSUM_PER_SCORE) * r * c
                k = calc(ev, k, write, 2, cta, it, EW, rb, jc, ew)
                if last:  # dS chunk: SRAM -> HBM
                    k = mem(ev, k, write, 2, cta, it, STORE, DS, rb, jc, off, r, c * eb, nk * eb)
        if passes == 1:
            ew = (EW_ROWSUM_PER_SCORE + EW_DS_PER_SCORE) * r * nk
            k = calc(ev, k, write, 2, cta, -1, EW, rb, -1, ew)
            for jc in range(t_kv):  # dS chunks: SRAM -> HBM, once
                k0 = jc * bc
                c = min(bc, nk - k0)
                off = (base + k0) * eb
                k = mem(ev, k, write, 2, cta, jc, STORE, DS, rb, jc, off, r, c * eb, nk * eb)
        for t in range(2, -1, -1):
            k = buf(ev, k, write, 2, cta, FREE, bufs[t], sizes[t])
    return k


@njit(**JIT)
def _emit(ev, write, kernel, cta_start, cta_stop, p, kmin, kmax, keep, pages):
    start, stop = cta_start, cta_stop
    if kernel == 0:  # dv: dV = P^T dO
        return _emit_kv(ev, write, 0, start, stop, p, P, DO, DV, (P_S, DO_S, DV_ACC), 0)
    if kernel == 1:  # dp: dP = dO V^T
        return _emit_tile(ev, write, 1, start, stop, p, DO, V, DP, (DO_S, V_S, DP_ACC), 0)
    if kernel == 2:  # ds: dS = P * (dP - rowsum(P * dP))
        return _emit_ds(ev, write, start, stop, p)
    if kernel == 3:  # dq: dQ = dS K / sqrt(d)
        bufs = (DS_S, K_S, DQ_ACC)
        return _emit_rows(ev, write, 3, start, stop, p, DS, K, DQ, bufs, EW_SCALE_PER_ELEM)
    # dk: dK = dS^T Q / sqrt(d)
    bufs = (DS_S, Q_S, DK_ACC)
    return _emit_kv(ev, write, 4, start, stop, p, DS, Q, DK, bufs, EW_SCALE_PER_ELEM)


# -- numeric executor --------------------------------------------------------------------------
def _kv_side(s, run, kernel, tile_t, tile, rows_t, rows, out_t, out, ew_per_elem):
    """dv (tile P, rows dO) and dk (tile dS, rows Q): out_j = sum_{g,i} tile_ij^T rows_i, times
    the softmax scale if ``ew_per_elem`` > 0."""
    sh, n, d, br, bc = s.shape, s.shape.seq_len, s.shape.head_dim, s.block_q, s.block_kv
    for cta in range(s.kernels[kernel].ctas):
        bkh, j = divmod(cta, s.t_kv)
        b, kvh = divmod(bkh, sh.n_kv_heads)
        k0 = j * bc
        c = min(bc, sh.n_kv - k0)
        run.bufs(kernel, cta, ALLOC)
        acc = np.zeros((c, d), run.at)
        for g in range(sh.group):
            h = kvh * sh.group + g
            for i in range(s.t_q):
                q0, st = i * br, g * s.t_q + i
                r = min(br, n - q0)
                t_ij = run.load(kernel, cta, st, tile_t, tile, b, h, q0, r, k0, c, i, j)
                x_i = run.load(kernel, cta, st, rows_t, rows, b, h, q0, r, 0, d, i, -1)
                acc += t_ij.T @ x_i
                run.calc(kernel, cta, st, MMA, i, j, 2 * r * c * d)
        if ew_per_elem > 0:
            acc = acc * run.at.type(sh.scale)
            run.calc(kernel, cta, -1, EW, j, -1, ew_per_elem * c * d)
        run.store(kernel, cta, -1, out_t, out, b, kvh, k0, 0, acc, j, -1)
        run.bufs(kernel, cta, FREE)


def _ds(s, run, p, dp, ds):
    n, nk, bc, t_kv = s.shape.seq_len, s.shape.n_kv, s.block_kv, s.t_kv
    rows, passes = s.option("softmax_rows"), s.option("softmax_passes")
    for cta in range(s.kernels[2].ctas):
        bh, rb = divmod(cta, -(-n // rows))
        b, h = divmod(bh, s.shape.heads)
        r0 = rb * rows
        r = min(rows, n - r0)
        run.bufs(2, cta, ALLOC)
        chunks, d_r = [], np.zeros(r, run.at)  # D_i = rowsum(P * dP), accumulated
        for it in range(passes * t_kv):
            jc = it % t_kv
            c = min(bc, nk - jc * bc)
            p_c = run.load(2, cta, it, P, p, b, h, r0, r, jc * bc, c, rb, jc)
            dp_c = run.load(2, cta, it, DP, dp, b, h, r0, r, jc * bc, c, rb, jc)
            if passes == 1:
                chunks.append((p_c, dp_c))
            elif it < t_kv:  # pass 1: row sums
                d_r += (p_c * dp_c).sum(axis=1)
                run.calc(2, cta, it, EW, rb, jc, EW_ROWSUM_PER_SCORE * r * c)
            else:  # pass 2: P and dP read again, dS stored in the input dtype
                run.calc(2, cta, it, EW, rb, jc, EW_DS_PER_SCORE * r * c)
                ds_c = p_c * (dp_c - d_r[:, None])
                run.store(2, cta, it, DS, ds, b, h, r0, jc * bc, ds_c, rb, jc)
        if chunks:  # one pass: both row blocks resident
            p_r, dp_r = (np.concatenate(x, axis=1) for x in zip(*chunks, strict=True))
            ds_r = p_r * (dp_r - (p_r * dp_r).sum(axis=1)[:, None])
            run.calc(2, cta, -1, EW, rb, -1, (EW_ROWSUM_PER_SCORE + EW_DS_PER_SCORE) * r * nk)
            for jc in range(t_kv):
                ds_c = ds_r[:, jc * bc : (jc + 1) * bc]
                run.store(2, cta, jc, DS, ds, b, h, r0, jc * bc, ds_c, rb, jc)
        run.bufs(2, cta, FREE)


def execute(s, q, k, v, grad_out, rec):
    """Run the five kernels tile by tile, logging every event into ``rec``; returns (dQ, dK, dV)
    in the storage dtype. P comes from ``kernels.standard``'s executor with the same blocks and
    options, logged into a throwaway Recorder (its events are not part of this trace)."""
    from flashio.kernels import standard
    from flashio.kernels.schedules import Schedule

    fwd = Schedule("standard", s.shape, s.block_q, s.block_kv, s.warps, s.options)
    _, p, _ = standard.execute(fwd, q, k, v, None, Recorder())
    sh = s.shape
    dp = np.zeros((sh.batch, sh.heads, sh.seq_len, sh.n_kv), q.dtype)  # HBM, input dtype
    ds, dq, dk, dv = np.zeros_like(dp), np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    run = Tiles(s, rec, _buffers)
    _kv_side(s, run, 0, P, p, DO, grad_out, DV, dv, 0)  # dv: dV = P^T dO
    tile_product(s, run, 1, DO, grad_out, V, v, DP, dp, 0)  # dp: dP = dO V^T
    _ds(s, run, p, dp, ds)
    row_product(s, run, 3, DS, ds, K, k, DQ, dq, EW_SCALE_PER_ELEM)  # dq: dQ = dS K / sqrt(d)
    _kv_side(s, run, 4, DS, ds, Q, q, DK, dk, EW_SCALE_PER_ELEM)  # dk: dK = dS^T Q / sqrt(d)
    return dq, dk, dv


# -- what analysis asks of this schedule (kernels.registry) -------------------------------------
FORWARD = "standard"
EVERY_TILE = True  # batched GEMMs: every tile, whatever the mask
MATMUL_PRODUCTS = 4  # dV, dP, dQ, dK
BOUND_CONSTANT = 8  # (3 Tc + 2 Tr) N d, the M argument of the forward on the dp kernel
WARP_SPECIALIZED = ("dv", "dp", "dq", "dk")


def traffic(s) -> list[tuple[str, int, int, int]]:
    """(tensor, element bytes, elements read, elements written), docs/io.md
    ``standard_bwd``: dv, dp, ds, dq, dk."""
    t = terms(s)
    eb, bh, bk, nn = t.eb, t.bh, t.bk, t.nn
    return [
        ("Q", eb, bh * t.t_kv * t.nd, 0),  # dk: Q_i once per (g, i) of each K block
        ("K", eb, bh * t.t_q * t.kd, 0),  # dq: K_j once per (i, j)
        ("V", eb, bh * t.t_q * t.kd, 0),  # dp: V_j once per tile of dP
        ("dO", eb, 2 * bh * t.t_kv * t.nd, 0),  # dv and dp: Tc times each
        ("P", eb, (1 + t.passes) * bh * nn, 0),  # dv once, ds once per pass
        ("dP", eb, t.passes * bh * nn, bh * nn),
        ("dS", eb, 2 * bh * nn, bh * nn),  # read by dq and by dk
        ("dQ", eb, 0, bh * t.nd),
        ("dK", eb, 0, bk * t.kd),  # summed over the group's query heads on chip
        ("dV", eb, 0, bk * t.kd),
    ]


def outer_steps(s, bs) -> tuple[int, ...]:
    """Steps per kernel: dv, dk a step per (group head, Q block); dp none; ds as the forward
    softmax; dq a step per K/V block (analysis.closed_form.spills)."""
    _, soft, tiles = softmax_steps(s)
    return (tiles, 0, soft, tiles, tiles)


def on_chip_bytes(s) -> int:
    """Shared memory plus register tiles per CTA, the largest over the kernels."""
    return max(sum(size for _, size in _buffers(s, k)) for k in range(5))
