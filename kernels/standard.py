"""Standard attention forward (FlashAttention paper, Algorithm 0): S and P make a round trip
through HBM.

Three kernels, in launch order:

1. ``qk``: S = Q K^T / sqrt(d). One CTA per (b, h, i, j) tile of S (Br x Bc): it loads Q_i and
   K_j, multiplies, scales and stores the tile of S in the input dtype. When causal it still
   computes every tile, as a framework's batched GEMM does; the mask is applied by the softmax.
2. ``softmax``: P = softmax(S) row by row (causal: entries with key > query set to -inf first).
   One CTA per (b, h, block of ``softmax_rows`` rows); the rows are read in chunks of Bc columns.
3. ``pv``: O = P V. One CTA per (b, h, i): it streams every P_ij and V_j (causal too: P is zero
   above the diagonal, but the GEMM reads every tile) and stores O_i.

Each of S and P is written once and read once with one softmax pass: 4 N^2 elements of S/P
traffic per head, the count of the seed's demo (``4 * n * n``): the FA paper's Theta(N d + N^2)
(Theorem 2).

Options
-------
softmax_rows : int
    Rows per softmax CTA. Default: the warp count (one row per warp, like a framework's row
    softmax), clipped to ``seq_len``; at most ``seq_len``.
softmax_passes : int
    1: the CTA keeps its whole row block resident in shared memory (softmax_rows * N * elem
    bytes), loads each chunk of S once and stores each chunk of P once (the FA paper's and the
    seeds' accounting). 2: online two-pass: pass 1 loads every chunk and keeps a running max and
    sum (shared memory: one chunk), pass 2 loads every chunk again, computes P and stores it.
    Default: 1 if the resident row block fits in 48 KiB (49,152 bytes: CUDA's limit on static
    shared memory per block; more needs dynamic shared memory and an explicit opt-in), else 2.

FP32 operation counts (EW events), per score of S unless said otherwise:

- ``qk``: EW_QK_PER_SCORE = 1 (the 1/sqrt(d) scale).
- softmax, 1 pass: EW_SOFTMAX_PER_SCORE = 4 (row max, subtract max, row sum, multiply by 1/l)
  and EW_SOFTMAX_PER_ROW = 1 (the reciprocal 1/l); EXP: one per score.
- softmax, 2 passes, pass 1 per chunk: EW_ONLINE_PER_SCORE = 3 (max, subtract, sum) and
  EW_ONLINE_PER_ROW = 3 (m - m_new, alpha * l, + chunk sum); EXP: one per score and one per row
  (alpha). Between the passes EW_SOFTMAX_PER_ROW per row (1/l). Pass 2: EW_NORMALIZE_PER_SCORE
  = 2 (subtract m, multiply by 1/l); EXP: one per score.
- Causal: EW_MASK_PER_SCORE = 1 per score of every chunk a pass reads that has a masked entry.
- ``pv``: none (the matmul accumulates; the final rounding to the storage dtype is not counted).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kernels._emit import (
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
    P_CAUSAL,
    P_DIM,
    P_EB,
    P_EXTRA,
    P_HEADS,
    P_KV_HEADS,
    P_SEQ,
    STORE,
    put,
)
from kernels._numerics import acc_dtype, to_dtype
from kernels._record import offset4
from kernels._resources import regs_per_thread
from simulator.trace import KernelInfo, Op, Space, TensorInfo

OPTIONS = ("softmax_passes", "softmax_rows")
P_SOFTMAX_PASSES, P_SOFTMAX_ROWS = P_EXTRA, P_EXTRA + 1  # options, in sorted-name order

# CUDA's limit on static shared memory per block (48 KiB); more needs a dynamic opt-in.
STATIC_SMEM_LIMIT_BYTES = 49152

# tensor indices, in the order of tensors()
Q, K, V, S, P, O, Q_S, K_S, S_ACC, S_ROWS, M_L, P_S, V_S, O_ACC = range(14)

EW_QK_PER_SCORE = 1
EW_SOFTMAX_PER_SCORE, EW_SOFTMAX_PER_ROW = 4, 1
EW_ONLINE_PER_SCORE, EW_ONLINE_PER_ROW = 3, 3
EW_NORMALIZE_PER_SCORE = 2
EW_MASK_PER_SCORE = 1


def resolve_softmax_options(s, row_buffers: int) -> None:
    """Check the softmax options of schedule ``s`` and fill in their defaults.

    ``row_buffers`` is the number of N-wide row blocks a one-pass CTA keeps resident (1: S;
    2: P and dP in the backward). The default row count depends on ``s.warps``, which
    ``default_options(shape, options)`` is not given, so defaults are filled here, while the
    frozen Schedule is being built (``Schedule.__post_init__`` calls ``validate``).
    """
    opts = dict(s.options)
    unknown = sorted(set(opts) - set(OPTIONS))
    if unknown:
        raise ValueError(
            f"schedule {s.name!r} has no option {unknown[0]!r}; allowed: {', '.join(OPTIONS)}"
        )
    for key, value in opts.items():
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise ValueError(f"{key} must be an integer, got {value!r}")
    n, eb = s.shape.seq_len, s.shape.elem_bytes
    rows = int(opts.get("softmax_rows", min(s.warps, n)))
    if rows < 1:
        raise ValueError(f"softmax_rows must be >= 1 (rows of S per softmax CTA), got {rows}")
    if rows > n:
        raise ValueError(f"softmax_rows={rows} exceeds seq_len={n}; use at most {n} rows")
    resident = row_buffers * rows * n * eb
    passes = int(opts.get("softmax_passes", 1 if resident <= STATIC_SMEM_LIMIT_BYTES else 2))
    if passes not in (1, 2):
        raise ValueError(
            "softmax_passes must be 1 (row block resident in shared memory) or 2 (online "
            f"two-pass, one chunk in shared memory), got {passes}"
        )
    object.__setattr__(s, "options", (("softmax_passes", passes), ("softmax_rows", rows)))


def validate(s) -> None:
    resolve_softmax_options(s, 1)


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
    cols = s.shape.seq_len if s.option("softmax_passes") == 1 else bc
    return [
        [(Q_S, br * d * eb), (K_S, bc * d * eb), (S_ACC, br * bc * acc)],
        [(S_ROWS, rows * cols * eb), (M_L, 2 * rows * acc)],
        [(P_S, br * bc * eb), (V_S, bc * d * eb), (O_ACC, br * d * acc)],
    ][kernel]


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
        TensorInfo("S", g, (b, h, n, n), eb),
        TensorInfo("P", g, (b, h, n, n), eb),
        TensorInfo("O", g, (b, h, n, d), eb),
        TensorInfo("Q_i", sm, (br, d), eb),
        TensorInfo("K_j", sm, (bc, d), eb),
        TensorInfo("S_ij", rg, (br, bc), acc),
        TensorInfo("S_rows", sm, (rows, cols), eb),
        TensorInfo("m_l", rg, (2, rows), acc),
        TensorInfo("P_ij", sm, (br, bc), eb),
        TensorInfo("V_j", sm, (bc, d), eb),
        TensorInfo("O_i", rg, (br, d), acc),
    )


def kernel_infos(s, names, ctas, buffers, tensor_infos) -> tuple[KernelInfo, ...]:
    """KernelInfo per kernel: shared memory and register tiles summed from ``buffers(s, k)``
    (every buffer is live for the whole CTA, so the sum is the peak)."""
    out = []
    for kernel, (name, grid) in enumerate(zip(names, ctas, strict=True)):
        bufs = buffers(s, kernel)
        smem = sum(size for t, size in bufs if tensor_infos[t].space == Space.SHARED)
        regs = sum(size for t, size in bufs if tensor_infos[t].space == Space.REGISTERS)
        out.append(KernelInfo(name, grid, s.warps, smem, regs_per_thread(regs, s.warps)))
    return tuple(out)


def kernels(s) -> tuple[KernelInfo, ...]:
    bh = s.shape.batch * s.shape.heads
    t_rows = -(-s.shape.seq_len // s.option("softmax_rows"))
    ctas = (bh * s.t_q * s.t_kv, bh * t_rows, bh * s.t_q)
    return kernel_infos(s, ("qk", "softmax", "pv"), ctas, _buffers, tensors(s))


# -- fast tracer -------------------------------------------------------------------------------
@njit(inline="always")
def _mem(ev, k, write, kernel, cta, step, op, t, brow, bcol, off, rows, row_bytes, stride):
    """A LOAD or STORE of ``rows`` rows of ``row_bytes`` bytes, ``stride`` bytes apart."""
    return put(
        ev,
        k,
        write,
        kernel,
        cta,
        step,
        op,
        t,
        brow,
        bcol,
        off,
        rows,
        row_bytes,
        stride,
        rows * row_bytes,
        0,
    )


@njit(inline="always")
def _calc(ev, k, write, kernel, cta, step, op, brow, bcol, flops):
    """An MMA, EW or EXP event."""
    return put(ev, k, write, kernel, cta, step, op, -1, brow, bcol, 0, 0, 0, 0, 0, flops)


@njit(inline="always")
def _bufs(ev, k, write, kernel, cta, op, t0, n0, t1, n1, t2, n2):
    """ALLOC buffers t0, t1, t2 in order, or FREE them in reverse; t2 < 0: only two."""
    if op == ALLOC:
        k = put(ev, k, write, kernel, cta, -1, op, t0, -1, -1, 0, 0, 0, 0, n0, 0)
        k = put(ev, k, write, kernel, cta, -1, op, t1, -1, -1, 0, 0, 0, 0, n1, 0)
    if t2 >= 0:
        k = put(ev, k, write, kernel, cta, -1, op, t2, -1, -1, 0, 0, 0, 0, n2, 0)
    if op == FREE:
        k = put(ev, k, write, kernel, cta, -1, op, t1, -1, -1, 0, 0, 0, 0, n1, 0)
        k = put(ev, k, write, kernel, cta, -1, op, t0, -1, -1, 0, 0, 0, 0, n0, 0)
    return k


@njit(**JIT)
def _emit_qk(ev, write, cta_start, cta_stop, p):
    nh, nkh, n, d = p[P_HEADS], p[P_KV_HEADS], p[P_SEQ], p[P_DIM]
    eb, acc, br, bc = p[P_EB], p[P_ACC], p[P_BQ], p[P_BKV]
    t_q, t_kv, grp = (n + br - 1) // br, (n + bc - 1) // bc, nh // nkh
    row, nq, nk, ns = d * eb, br * d * eb, bc * d * eb, br * bc * acc
    k = 0
    for cta in range(cta_start, cta_stop):
        bhi, j = cta // t_kv, cta % t_kv
        bh, i = bhi // t_q, bhi % t_q
        q0, k0 = i * br, j * bc
        r, c = min(br, n - q0), min(bc, n - k0)
        k = _bufs(ev, k, write, 0, cta, ALLOC, Q_S, nq, K_S, nk, S_ACC, ns)
        # Q_i and K_j: HBM -> SRAM, once per tile of S (Q_i Tc times, K_j Tr times in all)
        k = _mem(ev, k, write, 0, cta, -1, LOAD, Q, i, -1, (bh * n + q0) * row, r, row, row)
        off = (((bh // nh) * nkh + (bh % nh) // grp) * n + k0) * row
        k = _mem(ev, k, write, 0, cta, -1, LOAD, K, j, -1, off, c, row, row)
        k = _calc(ev, k, write, 0, cta, -1, MMA, i, j, 2 * r * c * d)
        k = _calc(ev, k, write, 0, cta, -1, EW, i, j, EW_QK_PER_SCORE * r * c)
        # S_ij: registers -> HBM in the input dtype: r rows of the N-wide S
        off = ((bh * n + q0) * n + k0) * eb
        k = _mem(ev, k, write, 0, cta, -1, STORE, S, i, j, off, r, c * eb, n * eb)
        k = _bufs(ev, k, write, 0, cta, FREE, Q_S, nq, K_S, nk, S_ACC, ns)
    return k


@njit(**JIT)
def _emit_softmax(ev, write, cta_start, cta_stop, p):
    n, eb, acc, bc, causal = p[P_SEQ], p[P_EB], p[P_ACC], p[P_BKV], p[P_CAUSAL]
    passes, rows = p[P_SOFTMAX_PASSES], p[P_SOFTMAX_ROWS]
    t_kv, t_r = (n + bc - 1) // bc, (n + rows - 1) // rows
    buf, nml = rows * (n if passes == 1 else bc) * eb, 2 * rows * acc
    k = 0
    for cta in range(cta_start, cta_stop):
        bh, rb = cta // t_r, cta % t_r
        r0 = rb * rows
        r = min(rows, n - r0)
        base = (bh * n + r0) * n  # element (b, h, r0, 0) of S and P
        k = _bufs(ev, k, write, 1, cta, ALLOC, S_ROWS, buf, M_L, nml, -1, 0)
        mask = 0  # one pass: masking cost of the whole row block
        for it in range(passes * t_kv):  # two passes: step t_kv + jc is pass 2's chunk jc
            jc, last = it % t_kv, it >= (passes - 1) * t_kv
            k0 = jc * bc
            c = min(bc, n - k0)
            masked = causal != 0 and k0 + c - 1 > r0
            off = (base + k0) * eb
            # S chunk: HBM -> SRAM (once per pass)
            k = _mem(ev, k, write, 1, cta, it, LOAD, S, rb, jc, off, r, c * eb, n * eb)
            if passes == 1:
                mask += EW_MASK_PER_SCORE * r * c * masked
                continue
            per = EW_NORMALIZE_PER_SCORE if last else EW_ONLINE_PER_SCORE
            ew, exps = (per + EW_MASK_PER_SCORE * masked) * r * c, r * c
            if not last:  # pass 1 also updates m and l per row: alpha = exp(m - m_new)
                ew, exps = ew + EW_ONLINE_PER_ROW * r, exps + r
            k = _calc(ev, k, write, 1, cta, it, EW, rb, jc, ew)
            k = _calc(ev, k, write, 1, cta, it, EXP, rb, jc, exps)
            if last:  # P chunk: SRAM -> HBM
                k = _mem(ev, k, write, 1, cta, it, STORE, P, rb, jc, off, r, c * eb, n * eb)
            elif jc == t_kv - 1:  # between the passes: 1 / l
                k = _calc(ev, k, write, 1, cta, -1, EW, rb, -1, EW_SOFTMAX_PER_ROW * r)
        if passes == 1:
            ew = EW_SOFTMAX_PER_SCORE * r * n + EW_SOFTMAX_PER_ROW * r + mask
            k = _calc(ev, k, write, 1, cta, -1, EW, rb, -1, ew)
            k = _calc(ev, k, write, 1, cta, -1, EXP, rb, -1, r * n)
            for jc in range(t_kv):  # P chunks: SRAM -> HBM, once
                k0 = jc * bc
                c = min(bc, n - k0)
                off = (base + k0) * eb
                k = _mem(ev, k, write, 1, cta, jc, STORE, P, rb, jc, off, r, c * eb, n * eb)
        k = _bufs(ev, k, write, 1, cta, FREE, S_ROWS, buf, M_L, nml, -1, 0)
    return k


@njit(**JIT)
def _emit_pv(ev, write, cta_start, cta_stop, p):
    nh, nkh, n, d = p[P_HEADS], p[P_KV_HEADS], p[P_SEQ], p[P_DIM]
    eb, acc, br, bc = p[P_EB], p[P_ACC], p[P_BQ], p[P_BKV]
    t_q, t_kv, grp = (n + br - 1) // br, (n + bc - 1) // bc, nh // nkh
    row, npp, nv, no = d * eb, br * bc * eb, bc * d * eb, br * d * acc
    k = 0
    for cta in range(cta_start, cta_stop):
        bh, i = cta // t_q, cta % t_q
        q0 = i * br
        r = min(br, n - q0)
        k = _bufs(ev, k, write, 2, cta, ALLOC, P_S, npp, V_S, nv, O_ACC, no)
        for j in range(t_kv):
            k0 = j * bc
            c = min(bc, n - k0)
            # P_ij and V_j: HBM -> SRAM, once per (i, j); causal reads the zero tiles too
            off = ((bh * n + q0) * n + k0) * eb
            k = _mem(ev, k, write, 2, cta, j, LOAD, P, i, j, off, r, c * eb, n * eb)
            off = (((bh // nh) * nkh + (bh % nh) // grp) * n + k0) * row
            k = _mem(ev, k, write, 2, cta, j, LOAD, V, j, -1, off, c, row, row)
            k = _calc(ev, k, write, 2, cta, j, MMA, i, j, 2 * r * c * d)
        # O_i: registers -> HBM, once per CTA
        k = _mem(ev, k, write, 2, cta, -1, STORE, O, i, -1, (bh * n + q0) * row, r, row, row)
        k = _bufs(ev, k, write, 2, cta, FREE, P_S, npp, V_S, nv, O_ACC, no)
    return k


@njit(**JIT)
def _emit(ev, write, kernel, cta_start, cta_stop, p):
    if kernel == 0:
        return _emit_qk(ev, write, cta_start, cta_stop, p)
    if kernel == 1:
        return _emit_softmax(ev, write, cta_start, cta_stop, p)
    return _emit_pv(ev, write, cta_start, cta_stop, p)


# -- numeric executor --------------------------------------------------------------------------
class Tiles:
    """The executors' tile moves: each reads or writes a numpy block and logs its event."""

    def __init__(self, s, rec, buffers):
        self.s, self.put, self.buffers = s, rec.put, buffers
        self.eb, self.dt, self.at = s.shape.elem_bytes, s.shape.dtype, acc_dtype(s.shape.dtype)

    def load(self, kernel, cta, step, t, x, b, h, r0, r, c0, c, brow, bcol):
        """Rows r0..r0+r, columns c0..c0+c of (B, H, R, C) tensor ``x``: HBM -> SRAM, upcast to
        the accumulator type."""
        eb, ncols = self.eb, x.shape[3]
        self.put(
            kernel,
            cta,
            step,
            Op.LOAD,
            t,
            brow,
            bcol,
            offset4(x.shape, b, h, r0, c0, eb),
            r,
            c * eb,
            ncols * eb,
            r * c * eb,
            0,
        )
        return x[b, h, r0 : r0 + r, c0 : c0 + c].astype(self.at)

    def store(self, kernel, cta, step, t, x, b, h, r0, c0, val, brow, bcol):
        """``val`` rounded to the storage dtype into ``x`` at (b, h, r0, c0): -> HBM."""
        (r, c), eb, ncols = val.shape, self.eb, x.shape[3]
        x[b, h, r0 : r0 + r, c0 : c0 + c] = to_dtype(val, self.dt)
        self.put(
            kernel,
            cta,
            step,
            Op.STORE,
            t,
            brow,
            bcol,
            offset4(x.shape, b, h, r0, c0, eb),
            r,
            c * eb,
            ncols * eb,
            r * c * eb,
            0,
        )

    def calc(self, kernel, cta, step, op, brow, bcol, flops):
        self.put(kernel, cta, step, op, -1, brow, bcol, 0, 0, 0, 0, 0, flops)

    def bufs(self, kernel, cta, op):
        order = self.buffers(self.s, kernel)
        for t, size in order if op == Op.ALLOC else reversed(order):
            self.put(kernel, cta, -1, op, t, -1, -1, 0, 0, 0, 0, size, 0)


def _qk(s, run, q, k, s_mat):
    sh, br, bc, d, n = s.shape, s.block_q, s.block_kv, s.shape.head_dim, s.shape.seq_len
    for cta in range(s.kernels[0].ctas):
        bhi, j = divmod(cta, s.t_kv)
        bh, i = divmod(bhi, s.t_q)
        b, h = divmod(bh, sh.heads)
        q0, k0 = i * br, j * bc
        r, c = min(br, n - q0), min(bc, n - k0)
        run.bufs(0, cta, Op.ALLOC)
        q_i = run.load(0, cta, -1, Q, q, b, h, q0, r, 0, d, i, -1)
        k_j = run.load(0, cta, -1, K, k, b, h // sh.group, k0, c, 0, d, j, -1)
        s_ij = q_i @ k_j.T
        run.calc(0, cta, -1, Op.MMA, i, j, 2 * r * c * d)
        s_ij = s_ij * run.at.type(sh.scale)
        run.calc(0, cta, -1, Op.ELEMENTWISE, i, j, EW_QK_PER_SCORE * r * c)
        run.store(0, cta, -1, S, s_mat, b, h, q0, k0, s_ij, i, j)  # S in the input dtype
        run.bufs(0, cta, Op.FREE)


def _softmax(s, run, s_mat, p_mat):
    sh, bc, n, t_kv = s.shape, s.block_kv, s.shape.seq_len, s.t_kv
    rows, at = s.option("softmax_rows"), run.at
    for cta in range(s.kernels[1].ctas):
        bh, rb = divmod(cta, -(-n // rows))
        b, h = divmod(bh, sh.heads)
        r0 = rb * rows
        r = min(rows, n - r0)
        run.bufs(1, cta, Op.ALLOC)
        chunks, m_i, l_i = [], np.full(r, -np.inf, at), np.zeros(r, at)
        for it in range(t_kv * s.option("softmax_passes")):
            jc = it % t_kv
            c = min(bc, n - jc * bc)
            s_c = run.load(1, cta, it, S, s_mat, b, h, r0, r, jc * bc, c, rb, jc)
            masked = np.arange(jc * bc, jc * bc + c)[None, :] > np.arange(r0, r0 + r)[:, None]
            masked = masked if sh.causal and masked.any() else None
            if masked is not None:
                s_c = np.where(masked, -np.inf, s_c)
            ew_mask = 0 if masked is None else EW_MASK_PER_SCORE * r * c
            if s.option("softmax_passes") == 1:
                chunks.append((s_c, ew_mask))
            elif it < t_kv:  # pass 1: running max m and sum l
                m_new = np.maximum(m_i, s_c.max(axis=1))
                l_i = np.exp(m_i - m_new) * l_i + np.exp(s_c - m_new[:, None]).sum(axis=1)
                m_i = m_new
                ew = EW_ONLINE_PER_SCORE * r * c + EW_ONLINE_PER_ROW * r + ew_mask
                run.calc(1, cta, it, Op.ELEMENTWISE, rb, jc, ew)
                run.calc(1, cta, it, Op.EXP, rb, jc, r * c + r)
                if it == t_kv - 1:
                    inv_l = at.type(1) / l_i
                    run.calc(1, cta, -1, Op.ELEMENTWISE, rb, -1, EW_SOFTMAX_PER_ROW * r)
            else:  # pass 2: S read again, P computed and stored
                p_c = np.exp(s_c - m_i[:, None]) * inv_l[:, None]
                ew = EW_NORMALIZE_PER_SCORE * r * c + ew_mask
                run.calc(1, cta, it, Op.ELEMENTWISE, rb, jc, ew)
                run.calc(1, cta, it, Op.EXP, rb, jc, r * c)
                run.store(1, cta, it, P, p_mat, b, h, r0, jc * bc, p_c, rb, jc)
        if chunks:  # one pass: the whole row block is resident
            s_rows = np.concatenate([x for x, _ in chunks], axis=1)
            e = np.exp(s_rows - s_rows.max(axis=1)[:, None])
            p_rows = e * (at.type(1) / e.sum(axis=1))[:, None]
            ew = EW_SOFTMAX_PER_SCORE * r * n + EW_SOFTMAX_PER_ROW * r + sum(x for _, x in chunks)
            run.calc(1, cta, -1, Op.ELEMENTWISE, rb, -1, ew)
            run.calc(1, cta, -1, Op.EXP, rb, -1, r * n)
            for jc in range(t_kv):
                p_c = p_rows[:, jc * bc : (jc + 1) * bc]
                run.store(1, cta, jc, P, p_mat, b, h, r0, jc * bc, p_c, rb, jc)
        run.bufs(1, cta, Op.FREE)


def _pv(s, run, v, p_mat, out):
    sh, br, bc, d, n = s.shape, s.block_q, s.block_kv, s.shape.head_dim, s.shape.seq_len
    for cta in range(s.kernels[2].ctas):
        bh, i = divmod(cta, s.t_q)
        b, h = divmod(bh, sh.heads)
        q0 = i * br
        r = min(br, n - q0)
        run.bufs(2, cta, Op.ALLOC)
        o_i = np.zeros((r, d), run.at)
        for j in range(s.t_kv):
            k0 = j * bc
            c = min(bc, n - k0)
            p_ij = run.load(2, cta, j, P, p_mat, b, h, q0, r, k0, c, i, j)
            v_j = run.load(2, cta, j, V, v, b, h // sh.group, k0, c, 0, d, j, -1)
            o_i += p_ij @ v_j
            run.calc(2, cta, j, Op.MMA, i, j, 2 * r * c * d)
        run.store(2, cta, -1, O, out, b, h, q0, 0, o_i, i, -1)
        run.bufs(2, cta, Op.FREE)


def execute(s, q, k, v, grad_out, rec):
    """Run the three kernels tile by tile, logging every event into ``rec``.

    Returns
    -------
    (O, P, S)
        O (B, H, N, d), then the HBM intermediates P and S (B, H, N, N), in the storage dtype.
    """
    sh = s.shape
    s_mat = np.zeros((sh.batch, sh.heads, sh.seq_len, sh.seq_len), q.dtype)  # HBM, input dtype
    p_mat, out = np.zeros_like(s_mat), np.zeros_like(q)
    run = Tiles(s, rec, _buffers)
    _qk(s, run, q, k, s_mat)
    _softmax(s, run, s_mat, p_mat)
    _pv(s, run, v, p_mat, out)
    return out, p_mat, s_mat
