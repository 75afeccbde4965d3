"""FlashAttention(-1) backward (Dao et al. 2022, Algorithm 4).

One CTA per (batch, key/value head). The outer loop streams the K/V blocks j: K_j and V_j are
read once and dK_j, dV_j accumulate in registers. Inside it the CTA loops over the query heads
that share the kv head (grouped-query attention), and for each over the Q blocks i that see a
key of block j (``kernels.mask``; causal: those with a row at or below the block's first key).
Per (i, j) it reads Q_i, O_i, dO_i, the fp32 dQ_i accumulator, l_i and m_i (line 10),
recomputes P from the forward's m/l ledger (lines 11-13), and writes dQ_i back to HBM (line
20). After the group's i loops it writes dK_j and dV_j (line 23); a K/V block no query sees is
not loaded, and its dK_j and dV_j are written as zeros. So without a mask Q, O, dO, l and m
travel Tc times; dQ_acc is read Tc times and written Tc + 1 times (line 5 initialises it to
zero).

Algorithm 4 writes dQ directly. A kernel in reduced precision cannot accumulate dQ in an fp16
tensor without losing the small contributions, so, like FA1's CUDA code (an fp32 ``dq``
buffer), dQ_acc is a global tensor in the accumulator type; a last pass after the j loop reads
each dQ_acc_i and writes dQ_i in the input dtype.

The forward's O, l and m come from ``kernels.flash1.execute`` with the same block sizes: the
backward recomputes P = diag(l)^-1 exp(S - m) from exactly the ledger the forward left in HBM.

FP32 operations that are not matmuls (per (i, j) step; an FMA is one operation):

- ``EW_P_PER_SCORE = 2`` per score: scale-and-subtract m, multiply by 1/l (P, lines 11-13);
  ``EW_P_PER_ROW = 1`` per row: 1/l. Plus ``r * c`` on blocks crossing the causal diagonal.
- ``EW_D_PER_ELEM = 2`` per element of dO_i: D_i = rowsum(dO_i * O_i), recomputed per (i, j)
  as Algorithm 4 line 18 does.
- ``EW_DS_PER_SCORE = 3`` per score: dP - D_i, times P, times the softmax scale (folded into
  dS once, so both the dQ and the dK matmuls take scale * dS).

EXP per (i, j): ``r * c``. MMA per (i, j): five products of ``2 * r * c * d`` (S, dV, dP, dQ,
dK), so the backward does 2.5x the forward's matmul FLOPs.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from numba import njit

from flashio.kernels import flash1
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
    STORE,
    buf,
    calc,
    mem,
)
from flashio.kernels._numerics import acc_dtype, to_dtype
from flashio.kernels._record import Recorder
from flashio.kernels._resources import regs_per_thread
from flashio.kernels._terms import terms
from flashio.kernels.mask import PARTIAL, SKIP, allowed, keep_table, q_tiles, tile_state
from flashio.simulator.trace import KernelInfo, Space, TensorInfo

OPTIONS = ()

# tensor indices, in the order of tensors()
Q, K, V, O, DO, L, M, DQ_ACC, DQ, DK, DV = range(11)
Q_S, O_S, DO_S, K_S, V_S, DK_T, DV_T, DQ_T, S_T, DP_T, ST_T = range(11, 22)

EW_P_PER_SCORE, EW_P_PER_ROW, EW_D_PER_ELEM, EW_DS_PER_SCORE = 2, 1, 2, 3


def validate(s) -> None:
    return None


def tensors(s) -> tuple[TensorInfo, ...]:
    """Global tensors (inputs, forward outputs, the fp32 dQ_acc, gradients), then the CTA's
    on-chip buffers."""
    sh, br, bc = s.shape, s.block_q, s.block_kv
    b, h, kh, n, d = sh.batch, sh.heads, sh.n_kv_heads, sh.seq_len, sh.head_dim
    eb, acc = sh.elem_bytes, sh.acc_bytes
    g, sm, rg = Space.GLOBAL, Space.SHARED, Space.REGISTERS
    return (
        TensorInfo("Q", g, (b, h, n, d), eb),
        TensorInfo("K", g, (b, kh, n, d), eb),
        TensorInfo("V", g, (b, kh, n, d), eb),
        TensorInfo("O", g, (b, h, n, d), eb),
        TensorInfo("dO", g, (b, h, n, d), eb),
        TensorInfo("l", g, (b, h, n), acc),
        TensorInfo("m", g, (b, h, n), acc),
        TensorInfo("dQ_acc", g, (b, h, n, d), acc),
        TensorInfo("dQ", g, (b, h, n, d), eb),
        TensorInfo("dK", g, (b, kh, sh.n_kv, d), eb),
        TensorInfo("dV", g, (b, kh, sh.n_kv, d), eb),
        TensorInfo("Q_i", sm, (br, d), eb),
        TensorInfo("O_i", sm, (br, d), eb),
        TensorInfo("dO_i", sm, (br, d), eb),
        TensorInfo("K_j", sm, (bc, d), eb),
        TensorInfo("V_j", sm, (bc, d), eb),
        TensorInfo("dK_j", rg, (bc, d), acc),
        TensorInfo("dV_j", rg, (bc, d), acc),
        TensorInfo("dQ_i", rg, (br, d), acc),
        TensorInfo("S_ij", rg, (br, bc), acc),  # S, then P
        TensorInfo("dP_ij", rg, (br, bc), acc),  # dP, then dS
        TensorInfo("l_m_D", rg, (3, br), acc),
    )


def _buffer_sizes(br, bc, d, eb, acc):
    """Bytes of the on-chip buffers Q_S .. ST_T, in tensor order."""
    shared = (br * d * eb, br * d * eb, br * d * eb, bc * d * eb, bc * d * eb)
    regs = (bc * d * acc, bc * d * acc, br * d * acc, br * bc * acc, br * bc * acc, 3 * br * acc)
    return shared + regs


def kernels(s) -> tuple[KernelInfo, ...]:
    sh, br, bc, d = s.shape, s.block_q, s.block_kv, s.shape.head_dim
    sizes = _buffer_sizes(br, bc, d, sh.elem_bytes, sh.acc_bytes)
    smem, reg_tiles = sum(sizes[:5]), sum(sizes[5:])
    ctas = sh.batch * sh.n_kv_heads
    return (KernelInfo("flash1_bwd", ctas, s.warps, smem, regs_per_thread(reg_tiles, s.warps)),)


_jit_sizes = njit(inline="always")(_buffer_sizes)


@njit(**JIT)
def _emit(ev, write, kernel, cta_start, cta_stop, p, kmin, kmax, keep, pages):
    mq, mk = p[P_MASK_BQ], p[P_MASK_BKV]
    nh, nkh, n, nk, d = p[P_HEADS], p[P_KV_HEADS], p[P_SEQ], p[P_KV_SEQ], p[P_DIM]
    eb, acc, br, bc = p[P_EB], p[P_ACC], p[P_BQ], p[P_BKV]
    t_q, t_kv, grp = (n + br - 1) // br, (nk + bc - 1) // bc, nh // nkh
    row, arow = d * eb, d * acc
    sizes = _jit_sizes(br, bc, d, eb, acc)
    k = 0
    for cta in range(cta_start, cta_stop):
        b, kvh = cta // nkh, cta % nkh
        kvbase = (b * nkh + kvh) * nk
        for t in range(11):  # on-chip buffers, live for the whole CTA
            k = buf(ev, k, write, kernel, cta, ALLOC, Q_S + t, sizes[t])
        # line 5: dQ_acc = 0 -> HBM, for every query head of the group
        for g in range(grp):
            aoff = (b * nh + kvh * grp + g) * n * arow
            k = mem(ev, k, write, kernel, cta, -1, STORE, DQ_ACC, -1, -1, aoff, n, arow, arow)
        for j in range(t_kv):
            k0 = j * bc
            c = min(bc, nk - k0)
            lo, hi = q_tiles(kmin, kmax, keep, mq, mk, k0, k0 + c, br, n)
            # K_j, V_j: HBM -> SRAM, once per CTA, if some query sees them
            off = (kvbase + k0) * row
            if lo < hi:
                k = mem(ev, k, write, kernel, cta, j, LOAD, K, j, -1, off, c, row, row)
                k = mem(ev, k, write, kernel, cta, j, LOAD, V, j, -1, off, c, row, row)
            for g in range(grp):
                base = (b * nh + kvh * grp + g) * n
                for i in range(lo, hi):
                    q0 = i * br
                    r = min(br, n - q0)
                    state = tile_state(kmin, kmax, keep, mq, mk, q0, q0 + r, k0, k0 + c)
                    if state == SKIP:
                        continue
                    row0 = base + q0  # Q_i's first row in (B, H, N) order
                    qo, ao, so, vec = row0 * row, row0 * arow, row0 * acc, r * acc
                    # line 10: Q_i, O_i, dO_i, dQ_acc_i, l_i, m_i: HBM -> SRAM/registers
                    k = mem(ev, k, write, kernel, cta, j, LOAD, Q, i, -1, qo, r, row, row)
                    k = mem(ev, k, write, kernel, cta, j, LOAD, O, i, -1, qo, r, row, row)
                    k = mem(ev, k, write, kernel, cta, j, LOAD, DO, i, -1, qo, r, row, row)
                    k = mem(ev, k, write, kernel, cta, j, LOAD, DQ_ACC, i, -1, ao, r, arow, arow)
                    k = mem(ev, k, write, kernel, cta, j, LOAD, L, i, -1, so, 1, vec, vec)
                    k = mem(ev, k, write, kernel, cta, j, LOAD, M, i, -1, so, 1, vec, vec)
                    mm = 2 * r * c * d
                    ew = EW_P_PER_SCORE * r * c + EW_P_PER_ROW * r
                    if state == PARTIAL:
                        ew += r * c  # partial block: apply the mask
                    k = calc(ev, k, write, kernel, cta, j, MMA, i, j, mm)  # S = Q_i K_j^T
                    k = calc(ev, k, write, kernel, cta, j, EW, i, j, ew)  # P, lines 11-13
                    k = calc(ev, k, write, kernel, cta, j, EXP, i, j, r * c)
                    k = calc(ev, k, write, kernel, cta, j, MMA, i, j, mm)  # dV_j += P^T dO_i
                    k = calc(ev, k, write, kernel, cta, j, MMA, i, j, mm)  # dP = dO_i V_j^T
                    ew = EW_D_PER_ELEM * r * d
                    k = calc(ev, k, write, kernel, cta, j, EW, i, j, ew)  # D_i, line 18
                    ew = EW_DS_PER_SCORE * r * c
                    k = calc(ev, k, write, kernel, cta, j, EW, i, j, ew)  # dS
                    k = calc(ev, k, write, kernel, cta, j, MMA, i, j, mm)  # dQ_i += dS K_j
                    # line 20: dQ_acc_i: registers -> HBM, once per (i, j)
                    k = mem(ev, k, write, kernel, cta, j, STORE, DQ_ACC, i, -1, ao, r, arow, arow)
                    k = calc(ev, k, write, kernel, cta, j, MMA, i, j, mm)  # dK_j += dS^T Q_i
            # line 23: dK_j, dV_j: registers -> HBM, once per CTA
            k = mem(ev, k, write, kernel, cta, j, STORE, DK, j, -1, off, c, row, row)
            k = mem(ev, k, write, kernel, cta, j, STORE, DV, j, -1, off, c, row, row)
        # dQ_acc (fp32) -> dQ (input dtype), block by block: HBM -> registers -> HBM
        for g in range(grp):
            base = (b * nh + kvh * grp + g) * n
            for i in range(t_q):
                q0 = i * br
                r = min(br, n - q0)
                qo, ao = (base + q0) * row, (base + q0) * arow
                k = mem(ev, k, write, kernel, cta, -1, LOAD, DQ_ACC, i, -1, ao, r, arow, arow)
                k = mem(ev, k, write, kernel, cta, -1, STORE, DQ, i, -1, qo, r, row, row)
        for t in range(10, -1, -1):
            k = buf(ev, k, write, kernel, cta, FREE, Q_S + t, sizes[t])
    return k


def execute(s, q, k, v, grad_out, rec):
    """Run Algorithm 4 tile by tile, logging every event into ``rec``.

    Returns
    -------
    dQ : ndarray, shaped like q; dK, dV : ndarray, shaped like k and v
        In q's storage dtype; dK and dV summed over the query heads sharing a kv head.
    """
    sh = s.shape
    nb, nh, nkh, n, d, dt = sh.batch, sh.heads, sh.n_kv_heads, sh.seq_len, sh.head_dim, sh.dtype
    br, bc, eb, acc, grp = s.block_q, s.block_kv, sh.elem_bytes, sh.acc_bytes, sh.group
    nk, (kmin, kmax) = sh.n_kv, s.mask
    keep, mq, mk = keep_table(sh)
    at = acc_dtype(dt)
    row, arow = d * eb, d * acc
    # the forward pass, same blocking: O and the m/l ledger it leaves in HBM
    fwd = dataclasses.replace(s, name="flash1")
    o_f, l_f, m_f = flash1.execute(fwd, q, k, v, None, Recorder())
    dq = np.zeros(q.shape, q.dtype)
    dk, dv = np.zeros(k.shape, q.dtype), np.zeros(v.shape, q.dtype)
    dq_acc = np.full(q.shape, np.nan, at)  # HBM, NaN until line 5 writes it
    sizes = _buffer_sizes(br, bc, d, eb, acc)
    scale = at.type(sh.scale)
    for cta in range(nb * nkh):
        b, kvh = divmod(cta, nkh)
        kvbase = (b * nkh + kvh) * nk
        heads = range(kvh * grp, (kvh + 1) * grp)
        for t in range(11):
            rec.buf(0, cta, ALLOC, Q_S + t, sizes[t])
        for h in heads:
            dq_acc[b, h] = 0
            rec.mem(0, cta, -1, STORE, DQ_ACC, -1, -1, (b * nh + h) * n * arow, n, arow, arow)
        for j in range(s.t_kv):
            k0 = j * bc
            c = min(bc, nk - k0)
            kb = slice(k0, k0 + c)
            k_j, v_j = k[b, kvh, kb].astype(at), v[b, kvh, kb].astype(at)
            off = (kvbase + k0) * row
            lo, hi = q_tiles(kmin, kmax, keep, mq, mk, k0, k0 + c, br, n)
            if lo < hi:
                rec.mem(0, cta, j, LOAD, K, j, -1, off, c, row, row)
                rec.mem(0, cta, j, LOAD, V, j, -1, off, c, row, row)
            dk_j, dv_j = np.zeros((c, d), at), np.zeros((c, d), at)
            for h in heads:
                base = (b * nh + h) * n
                for i in range(lo, hi):
                    q0 = i * br
                    r = min(br, n - q0)
                    state = tile_state(kmin, kmax, keep, mq, mk, q0, q0 + r, k0, k0 + c)
                    if state == SKIP:
                        continue
                    blk = slice(q0, q0 + r)
                    row0 = base + q0  # Q_i's first row in (B, H, N) order
                    qo, ao, so, vec = row0 * row, row0 * arow, row0 * acc, r * acc
                    q_i, o_i = q[b, h, blk].astype(at), o_f[b, h, blk].astype(at)
                    do_i = grad_out[b, h, blk].astype(at)
                    for t in (Q, O, DO):
                        rec.mem(0, cta, j, LOAD, t, i, -1, qo, r, row, row)
                    dq_i = dq_acc[b, h, blk].copy()
                    rec.mem(0, cta, j, LOAD, DQ_ACC, i, -1, ao, r, arow, arow)
                    l_i, m_i = l_f[b, h, blk], m_f[b, h, blk]
                    for t in (L, M):
                        rec.mem(0, cta, j, LOAD, t, i, -1, so, 1, vec, vec)
                    mm = 2 * r * c * d
                    s_ij = (q_i @ k_j.T) * scale
                    rec.calc(0, cta, j, MMA, i, j, mm)
                    ew = EW_P_PER_SCORE * r * c + EW_P_PER_ROW * r
                    if state == PARTIAL:
                        s_ij = np.where(allowed(sh, q0, q0 + r, k0, k0 + c), s_ij, -np.inf)
                        ew += r * c
                    # lines 11-13: P = diag(l)^-1 exp(S - m), from the forward's ledger (a row
                    # that sees no key has l = 0, m = -inf, and P = 0)
                    m_use = np.where(np.isneginf(m_i), 0, m_i)
                    with np.errstate(divide="ignore"):
                        inv_l = np.where(l_i > 0, 1 / l_i, 0)
                    p_ij = np.exp(s_ij - m_use[:, None]) * inv_l[:, None]
                    rec.calc(0, cta, j, EW, i, j, ew)
                    rec.calc(0, cta, j, EXP, i, j, r * c)
                    # P and dS enter the tensor cores in the input precision
                    dv_j += to_dtype(p_ij, dt).astype(at).T @ do_i
                    rec.calc(0, cta, j, MMA, i, j, mm)
                    dp = do_i @ v_j.T
                    rec.calc(0, cta, j, MMA, i, j, mm)
                    d_i = (do_i * o_i).sum(axis=1)  # line 18
                    rec.calc(0, cta, j, EW, i, j, EW_D_PER_ELEM * r * d)
                    ds = to_dtype(p_ij * (dp - d_i[:, None]) * scale, dt).astype(at)
                    rec.calc(0, cta, j, EW, i, j, EW_DS_PER_SCORE * r * c)
                    dq_acc[b, h, blk] = dq_i + ds @ k_j  # line 20
                    rec.calc(0, cta, j, MMA, i, j, mm)
                    rec.mem(0, cta, j, STORE, DQ_ACC, i, -1, ao, r, arow, arow)
                    dk_j += ds.T @ q_i
                    rec.calc(0, cta, j, MMA, i, j, mm)
            dk[b, kvh, kb], dv[b, kvh, kb] = to_dtype(dk_j, dt), to_dtype(dv_j, dt)  # line 23
            rec.mem(0, cta, j, STORE, DK, j, -1, off, c, row, row)
            rec.mem(0, cta, j, STORE, DV, j, -1, off, c, row, row)
        for h in heads:
            base = (b * nh + h) * n
            for i in range(s.t_q):
                q0 = i * br
                r = min(br, n - q0)
                blk = slice(q0, q0 + r)
                rec.mem(0, cta, -1, LOAD, DQ_ACC, i, -1, (base + q0) * arow, r, arow, arow)
                dq[b, h, blk] = to_dtype(dq_acc[b, h, blk], dt)
                rec.mem(0, cta, -1, STORE, DQ, i, -1, (base + q0) * row, r, row, row)
        for t in range(10, -1, -1):
            rec.buf(0, cta, FREE, Q_S + t, sizes[t])
    return dq, dk, dv


# -- what analysis asks of this schedule (kernels.registry) -------------------------------------
FORWARD = "flash1"
EVERY_TILE = False
MATMUL_PRODUCTS = 5  # S again, dV, dP, dQ, dK per visited tile
BOUND_CONSTANT = 20  # Q, O, dO, dQ_acc in and out: 5 rv d, M >= 4 Bc d (K_j, V_j, dK_j, dV_j)
WARP_SPECIALIZED = ("flash1_bwd",)


def traffic(s) -> list[tuple[str, int, int, int]]:
    """(tensor, element bytes, elements read, elements written), docs/io.md
    ``flash1_bwd``: CTA per (b, kv head); outer j, the group's heads, inner i."""
    t = terms(s)
    eb, acc, bh, bk, d, rv, n = t.eb, t.acc, t.bh, t.bk, t.d, t.rv, t.n
    kv = t.bs.kv_rows * d
    return [
        ("Q", eb, bh * rv * d, 0),
        ("K", eb, bk * kv, 0),
        ("V", eb, bk * kv, 0),
        ("O", eb, bh * rv * d, 0),
        ("dO", eb, bh * rv * d, 0),
        ("l", acc, bh * rv, 0),
        ("m", acc, bh * rv, 0),
        ("dQ_acc", acc, bh * (rv + n) * d, bh * (n + rv) * d),  # init, per pair, final pass
        ("dQ", eb, 0, bh * t.nd),
        ("dK", eb, 0, bk * t.kd),  # zeros for keys no query sees
        ("dV", eb, 0, bk * t.kd),
    ]


def outer_steps(s, bs) -> tuple[int, ...]:
    """A step per K/V block, mask or not (an unseen block still stores its zero dK_j, dV_j)."""
    return (s.shape.batch * s.shape.n_kv_heads * s.t_kv,)


def on_chip_bytes(s) -> int:
    """Shared memory plus register tiles per CTA."""
    sh = s.shape
    return sum(_buffer_sizes(s.block_q, s.block_kv, sh.head_dim, sh.elem_bytes, sh.acc_bytes))
