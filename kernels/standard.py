"""Standard attention forward (FlashAttention paper, Algorithm 0): S and P make a round trip
through HBM.

Three kernels, in launch order:

1. ``qk``: S = Q K^T / sqrt(d). One CTA per (b, h, i, j) tile of S (Br x Bc): it loads Q_i and
   K_j, multiplies, scales and stores the tile of S in the input dtype. When causal it still
   computes every tile, as a framework's batched GEMM does; the mask is applied by the softmax.
2. ``softmax``: P = softmax(S) row by row (masked entries, ``kernels.mask``, set to -inf first;
   a row that sees no key gets P = 0).
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
    softmax), clipped to ``seq_len``; more than ``seq_len`` is one partial row block.
softmax_passes : int
    1: the CTA keeps its whole row block resident in shared memory (softmax_rows * N * elem
    bytes), loads each chunk of S once and stores each chunk of P once (the FA paper's and the
    seeds' accounting). 2: online two-pass: pass 1 loads every chunk and keeps a running max and
    sum (shared memory: one chunk), pass 2 loads every chunk again, computes P and stores it.
    Default: 1 if the resident row block fits in 48 KiB (49,152 bytes: CUDA's limit on static
    shared memory per block; more needs dynamic shared memory and an explicit opt-in), else 2.
unfused : int
    1: the kernels eager PyTorch launches (kernels._standard_unfused, the ``pytorch``
    preset's default): qk stores S unscaled, then ``scale`` (S *= 1/sqrt(d)) and, where the
    shape has a mask, ``masked_fill`` (reading a boolean N x N_kv mask) each read and write S,
    and ``row_softmax`` (PyTorch's launch: whole rows a CTA) reads S once and writes P;
    ``softmax_passes`` and ``softmax_rows`` then have no effect. Default 0.

FP32 operation counts (EW events), per score of S unless said otherwise:

- ``qk``: EW_QK_PER_SCORE = 1 (the 1/sqrt(d) scale).
- softmax, 1 pass: EW_SOFTMAX_PER_SCORE = 4 (row max, subtract max, row sum, multiply by 1/l)
  and EW_SOFTMAX_PER_ROW = 1 (the reciprocal 1/l); EXP: one per score. The per-score work is
  charged chunk by chunk (step jc for chunk jc of ``softmax_chunk`` columns: max(Bc, 256))
  after the whole row block has arrived, as the kernel walks the resident rows.
- softmax, 2 passes, pass 1 per chunk: EW_ONLINE_PER_SCORE = 3 (max, subtract, sum) and
  EW_ONLINE_PER_ROW = 3 (m - m_new, alpha * l, + chunk sum); EXP: one per score and one per row
  (alpha). Between the passes EW_SOFTMAX_PER_ROW per row (1/l). Pass 2: EW_NORMALIZE_PER_SCORE
  = 2 (subtract m, multiply by 1/l); EXP: one per score.
- Masks (causal, window, segments, kv_seq_len): EW_MASK_PER_SCORE = 1 per score of every
  chunk a pass reads that has a masked entry.
- ``pv``: none (the matmul accumulates; the final rounding to the storage dtype is not counted).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from flashio.kernels import _standard_unfused as unfused
from flashio.kernels._emit import (
    ALLOC,
    EW,
    EXP,
    FREE,
    JIT,
    LOAD,
    P_ACC,
    P_BKV,
    P_EB,
    P_EXTRA,
    P_KV_SEQ,
    P_MASK_BKV,
    P_MASK_BQ,
    P_SEQ,
    STORE,
    buf,
    calc,
    mem,
)
from flashio.kernels._standard_common import (
    P_SOFTMAX_PASSES,
    P_SOFTMAX_ROWS,
    RESIDENT_CHUNK,
    SOFTMAX_OPTIONS,
    Tiles,
    _emit_rows,
    _emit_tile,
    kernel_infos,
    resolve_softmax_options,
    row_block,
    row_product,
    softmax_chunk,
    softmax_steps,
    tile_product,
)
from flashio.kernels._terms import terms
from flashio.kernels.mask import FULL, allowed, keep_table, tile_state
from flashio.simulator.trace import KernelInfo, Space, TensorInfo

OPTIONS = (*SOFTMAX_OPTIONS, "unfused")
P_UNFUSED = P_EXTRA + 2  # after softmax_passes and softmax_rows (options in sorted-name order)

# tensor indices, in the order of tensors(); MASK only with unfused=1 and a mask
Q, K, V, S, P, O, Q_S, K_S, S_ACC, S_ROWS, M_L, P_S, V_S, O_ACC, MASK = range(15)

EW_QK_PER_SCORE = 1
EW_SOFTMAX_PER_SCORE, EW_SOFTMAX_PER_ROW = 4, 1
EW_ONLINE_PER_SCORE, EW_ONLINE_PER_ROW = 3, 3
EW_NORMALIZE_PER_SCORE = 2
EW_MASK_PER_SCORE = 1


def validate(s) -> None:
    resolve_softmax_options(s, 1, ("unfused",))


def is_unfused(s) -> bool:
    return bool(dict(s.options).get("unfused", 0))


def roles(s) -> tuple[str, ...]:
    """The kernels' names in launch order: three, or eager PyTorch's four or five."""
    if not is_unfused(s):
        return ("qk", "softmax", "pv")
    fill = ("masked_fill",) if unfused.has_mask(s.shape) else ()
    return ("qk", "scale", *fill, "row_softmax", "pv")


def _buffers(s, kernel: int) -> list[tuple[int, int]]:
    """(tensor, bytes) of each on-chip buffer of one kernel, in ALLOC order (full block sizes);
    none for the unfused elementwise and row-softmax kernels (they work in registers)."""
    sh, br, bc = s.shape, s.block_q, s.block_kv
    d, eb, acc = sh.head_dim, sh.elem_bytes, sh.acc_bytes
    role = roles(s)[kernel]
    if role == "qk":
        return [(Q_S, br * d * eb), (K_S, bc * d * eb), (S_ACC, br * bc * acc)]
    if role == "softmax":
        rows, cols = row_block(s)
        return [(S_ROWS, rows * cols * eb), (M_L, 2 * rows * acc)]
    if role == "pv":
        return [(P_S, br * bc * eb), (V_S, bc * d * eb), (O_ACC, br * d * acc)]
    return []


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
        TensorInfo("S", g, (b, h, n, nk), eb),
        TensorInfo("P", g, (b, h, n, nk), eb),
        TensorInfo("O", g, (b, h, n, d), eb),
        TensorInfo("Q_i", sm, (br, d), eb),
        TensorInfo("K_j", sm, (bc, d), eb),
        TensorInfo("S_ij", rg, (br, bc), acc),
        TensorInfo("S_rows", sm, (rows, cols), eb),
        TensorInfo("m_l", rg, (2, rows), acc),
        TensorInfo("P_ij", sm, (br, bc), eb),
        TensorInfo("V_j", sm, (bc, d), eb),
        TensorInfo("O_i", rg, (br, d), acc),
    ) + ((TensorInfo("mask", g, (n, nk), 1),) if "masked_fill" in roles(s) else ())


def kernels(s) -> tuple[KernelInfo, ...]:
    sh = s.shape
    bh = sh.batch * sh.heads
    if is_unfused(s):
        return _unfused_kernels(s, bh)
    t_rows = -(-sh.seq_len // s.option("softmax_rows"))
    ctas = (bh * s.t_q * s.t_kv, bh * t_rows, bh * s.t_q)
    return kernel_infos(s, ("qk", "softmax", "pv"), ctas, _buffers, tensors(s))


def _unfused_kernels(s, bh: int) -> tuple[KernelInfo, ...]:
    """Eager PyTorch's launches: the GEMMs at the schedule's tiling and warps, the
    elementwise kernels and the row softmax at PyTorch's own (kernels._standard_unfused)."""
    sh = s.shape
    scores = bh * sh.seq_len * sh.n_kv
    rows, warps = unfused.softmax_launch(sh.n_kv, sh.elem_bytes)
    grid = {
        "qk": (bh * s.t_q * s.t_kv, s.warps),
        "scale": (-(-scores // unfused.SCALE_ELEMS), 4),
        "masked_fill": (-(-scores // unfused.FILL_ELEMS), 4),
        "row_softmax": (bh * -(-sh.seq_len // rows), warps),
        "pv": (bh * s.t_q, s.warps),
    }
    ctas, per_cta = zip(*(grid[role] for role in roles(s)), strict=True)
    return kernel_infos(s, roles(s), ctas, _buffers, tensors(s), per_cta)


# -- fast tracer -------------------------------------------------------------------------------
@njit(**JIT)
def _emit_softmax(ev, write, cta_start, cta_stop, p, kmin, kmax, keep):
    mq, mk = p[P_MASK_BQ], p[P_MASK_BKV]
    n, nk, eb, acc, bc = p[P_SEQ], p[P_KV_SEQ], p[P_EB], p[P_ACC], p[P_BKV]
    passes, rows = p[P_SOFTMAX_PASSES], p[P_SOFTMAX_ROWS]
    t_kv, t_r = (nk + bc - 1) // bc, (n + rows - 1) // rows
    bufs, sizes = (S_ROWS, M_L), (rows * (nk if passes == 1 else bc) * eb, 2 * rows * acc)
    k = 0
    for cta in range(cta_start, cta_stop):
        bh, rb = cta // t_r, cta % t_r
        r0 = rb * rows
        r = min(rows, n - r0)
        base = (bh * n + r0) * nk  # element (b, h, r0, 0) of S and P
        for t in range(2):
            k = buf(ev, k, write, 1, cta, ALLOC, bufs[t], sizes[t])
        for it in range(passes * t_kv):  # two passes: step t_kv + jc is pass 2's chunk jc
            jc, last = it % t_kv, it >= (passes - 1) * t_kv
            k0 = jc * bc
            c = min(bc, nk - k0)
            masked = tile_state(kmin, kmax, keep, mq, mk, r0, r0 + r, k0, k0 + c) != FULL
            off = (base + k0) * eb
            # S chunk: HBM -> SRAM (once per pass)
            k = mem(ev, k, write, 1, cta, it, LOAD, S, rb, jc, off, r, c * eb, nk * eb)
            if passes == 1:  # the whole row block first, then the chunks' arithmetic
                continue
            per = EW_NORMALIZE_PER_SCORE if last else EW_ONLINE_PER_SCORE
            ew, exps = (per + EW_MASK_PER_SCORE * masked) * r * c, r * c
            if not last:  # pass 1 also updates m and l per row: alpha = exp(m - m_new)
                ew, exps = ew + EW_ONLINE_PER_ROW * r, exps + r
            k = calc(ev, k, write, 1, cta, it, EW, rb, jc, ew)
            k = calc(ev, k, write, 1, cta, it, EXP, rb, jc, exps)
            if last:  # P chunk: SRAM -> HBM
                k = mem(ev, k, write, 1, cta, it, STORE, P, rb, jc, off, r, c * eb, nk * eb)
            elif jc == t_kv - 1:  # between the passes: 1 / l
                k = calc(ev, k, write, 1, cta, -1, EW, rb, -1, EW_SOFTMAX_PER_ROW * r)
        if passes == 1:
            w = max(bc, RESIDENT_CHUNK)  # the kernel's chunk of the resident rows: a step each
            for jc in range((nk + w - 1) // w):
                k0 = jc * w
                c = min(w, nk - k0)
                masked = tile_state(kmin, kmax, keep, mq, mk, r0, r0 + r, k0, k0 + c) != FULL
                ew = (EW_SOFTMAX_PER_SCORE + EW_MASK_PER_SCORE * masked) * r * c
                k = calc(ev, k, write, 1, cta, jc, EW, rb, jc, ew)
                k = calc(ev, k, write, 1, cta, jc, EXP, rb, jc, r * c)
            k = calc(ev, k, write, 1, cta, -1, EW, rb, -1, EW_SOFTMAX_PER_ROW * r)
            for jc in range(t_kv):  # P chunks: SRAM -> HBM, once
                k0 = jc * bc
                c = min(bc, nk - k0)
                off = (base + k0) * eb
                k = mem(ev, k, write, 1, cta, jc, STORE, P, rb, jc, off, r, c * eb, nk * eb)
        for t in range(1, -1, -1):
            k = buf(ev, k, write, 1, cta, FREE, bufs[t], sizes[t])
    return k


@njit(**JIT)
def _emit(ev, write, kernel, cta_start, cta_stop, p, kmin, kmax, keep, pages):
    if p[P_UNFUSED]:
        return _emit_unfused(ev, write, kernel, cta_start, cta_stop, p, kmin, kmax, keep)
    if kernel == 0:  # qk: S = Q K^T / sqrt(d)
        bufs = (Q_S, K_S, S_ACC)
        return _emit_tile(ev, write, 0, cta_start, cta_stop, p, Q, K, S, bufs, EW_QK_PER_SCORE)
    if kernel == 1:
        return _emit_softmax(ev, write, cta_start, cta_stop, p, kmin, kmax, keep)
    # pv: O = P V
    return _emit_rows(ev, write, 2, cta_start, cta_stop, p, P, V, O, (P_S, V_S, O_ACC), 0)


@njit(**JIT)
def _emit_unfused(ev, write, kernel, cta_start, cta_stop, p, kmin, kmax, keep):
    """Eager PyTorch's kernels (``roles``): qk unscaled, scale, [masked_fill], row_softmax, pv."""
    fill = unfused.masked(kmin, kmax, keep, p[P_KV_SEQ])
    last = 3 + fill
    if kernel == 0:  # qk: S = Q K^T, unscaled
        return _emit_tile(ev, write, 0, cta_start, cta_stop, p, Q, K, S, (Q_S, K_S, S_ACC), 0)
    if kernel == 1:
        return unfused.emit_scale(ev, write, 1, cta_start, cta_stop, p, S)
    if fill and kernel == 2:
        return unfused.emit_fill(ev, write, 2, cta_start, cta_stop, p, S, MASK)
    if kernel == last:
        bufs = (P_S, V_S, O_ACC)
        return _emit_rows(ev, write, last, cta_start, cta_stop, p, P, V, O, bufs, 0)
    rows = unfused.softmax_launch(p[P_KV_SEQ], p[P_EB])[0]
    return unfused.emit_softmax(ev, write, kernel, cta_start, cta_stop, p, S, P, rows)


# -- numeric executor --------------------------------------------------------------------------
def _softmax(s, run, s_mat, p_mat):
    sh, bc, n, nk, t_kv = s.shape, s.block_kv, s.shape.seq_len, s.shape.n_kv, s.t_kv
    rows, at = s.option("softmax_rows"), run.at
    kmin, kmax = s.mask
    keep, mq, mk = keep_table(sh)
    for cta in range(s.kernels[1].ctas):
        bh, rb = divmod(cta, -(-n // rows))
        b, h = divmod(bh, sh.heads)
        r0 = rb * rows
        r = min(rows, n - r0)
        run.bufs(1, cta, ALLOC)
        chunks, m_i, l_i = [], np.full(r, -np.inf, at), np.zeros(r, at)
        for it in range(t_kv * s.option("softmax_passes")):
            jc = it % t_kv
            c = min(bc, nk - jc * bc)
            s_c = run.load(1, cta, it, S, s_mat, b, h, r0, r, jc * bc, c, rb, jc)
            masked = tile_state(kmin, kmax, keep, mq, mk, r0, r0 + r, jc * bc, jc * bc + c) != FULL
            if masked:
                s_c = np.where(allowed(sh, r0, r0 + r, jc * bc, jc * bc + c), s_c, -np.inf)
            ew_mask = EW_MASK_PER_SCORE * r * c * masked
            if s.option("softmax_passes") == 1:
                chunks.append(s_c)
            elif it < t_kv:  # pass 1: running max m and sum l
                m_new = np.maximum(m_i, s_c.max(axis=1))
                m_use = np.where(np.isneginf(m_new), 0, m_new)  # no key seen yet
                l_i = np.exp(m_i - m_use) * l_i + np.exp(s_c - m_use[:, None]).sum(axis=1)
                m_i = m_new
                ew = EW_ONLINE_PER_SCORE * r * c + EW_ONLINE_PER_ROW * r + ew_mask
                run.calc(1, cta, it, EW, rb, jc, ew)
                run.calc(1, cta, it, EXP, rb, jc, r * c + r)
                if it == t_kv - 1:  # a row that sees no key: P = 0
                    with np.errstate(divide="ignore"):
                        inv_l = np.where(l_i > 0, at.type(1) / l_i, 0).astype(at)
                    m_i = np.where(np.isneginf(m_i), 0, m_i)
                    run.calc(1, cta, -1, EW, rb, -1, EW_SOFTMAX_PER_ROW * r)
            else:  # pass 2: S read again, P computed and stored
                p_c = np.exp(s_c - m_i[:, None]) * inv_l[:, None]
                ew = EW_NORMALIZE_PER_SCORE * r * c + ew_mask
                run.calc(1, cta, it, EW, rb, jc, ew)
                run.calc(1, cta, it, EXP, rb, jc, r * c)
                run.store(1, cta, it, P, p_mat, b, h, r0, jc * bc, p_c, rb, jc)
        if chunks:  # one pass: the whole row block is resident
            s_rows = np.concatenate(chunks, axis=1)
            m_r = s_rows.max(axis=1)
            e = np.exp(s_rows - np.where(np.isneginf(m_r), 0, m_r)[:, None])
            l_r = e.sum(axis=1)
            with np.errstate(divide="ignore"):  # a row that sees no key: P = 0
                p_rows = e * np.where(l_r > 0, at.type(1) / l_r, 0).astype(at)[:, None]
            w = softmax_chunk(bc, 1)
            for jc in range(-(-nk // w)):  # the kernel's chunks of the resident rows
                c = min(w, nk - jc * w)
                masked = (
                    tile_state(kmin, kmax, keep, mq, mk, r0, r0 + r, jc * w, jc * w + c) != FULL
                )
                ew = (EW_SOFTMAX_PER_SCORE + EW_MASK_PER_SCORE * masked) * r * c
                run.calc(1, cta, jc, EW, rb, jc, ew)
                run.calc(1, cta, jc, EXP, rb, jc, r * c)
            run.calc(1, cta, -1, EW, rb, -1, EW_SOFTMAX_PER_ROW * r)
            for jc in range(t_kv):
                p_c = p_rows[:, jc * bc : (jc + 1) * bc]
                run.store(1, cta, jc, P, p_mat, b, h, r0, jc * bc, p_c, rb, jc)
        run.bufs(1, cta, FREE)


def execute(s, q, k, v, grad_out, rec):
    """Run the three kernels tile by tile, logging every event into ``rec``.

    Returns
    -------
    (O, P, S)
        O (B, H, N, d), then the HBM intermediates P and S (B, H, N, N_kv), in the storage
        dtype.
    """
    sh = s.shape
    s_mat = np.zeros((sh.batch, sh.heads, sh.seq_len, sh.n_kv), q.dtype)  # HBM, input dtype
    p_mat, out = np.zeros_like(s_mat), np.zeros_like(q)
    run = Tiles(s, rec, _buffers)
    if is_unfused(s):  # eager PyTorch: S unscaled, then a kernel per elementwise step
        tile_product(s, run, 0, Q, q, K, k, S, s_mat, 0)
        unfused.scale(s, rec, S, s_mat)
        if "masked_fill" in roles(s):
            unfused.fill(s, rec, S, MASK, s_mat)
        last = len(roles(s)) - 1
        rows = unfused.softmax_launch(sh.n_kv, sh.elem_bytes)[0]
        unfused.softmax(s, rec, last - 1, S, P, s_mat, p_mat, rows)
        row_product(s, run, last, P, p_mat, V, v, O, out, 0)
        return out, p_mat, s_mat
    tile_product(s, run, 0, Q, q, K, k, S, s_mat, EW_QK_PER_SCORE)  # qk: S = Q K^T / sqrt(d)
    _softmax(s, run, s_mat, p_mat)
    row_product(s, run, 2, P, p_mat, V, v, O, out, 0)  # pv: O = P V
    return out, p_mat, s_mat


# -- what analysis asks of this schedule (kernels.registry) -------------------------------------
FORWARD = "standard"
EVERY_TILE = True  # a batched GEMM: every tile of S, whatever the mask
MATMUL_PRODUCTS = 2  # S = Q K^T, O = P V: 2 products of 2 N N_kv d FLOPs per head
BOUND_CONSTANT = 4  # Q, K reads (Tc + Tr) N d >= 4 N^2 d / (Br + Bc), M >= (Br + Bc) d
WARP_SPECIALIZED = ("qk", "pv")  # the tiled loops an implementation's warp roles describe


def traffic(s) -> list[tuple[str, int, int, int]]:
    """(tensor, element bytes, elements read, elements written), docs/io.md ``standard``:
    qk one CTA per tile (i, j); softmax row blocks; pv one CTA per Q block."""
    t = terms(s)
    eb, bh = t.eb, t.bh
    # unfused: S read once by the row softmax, and read and written by scale and masked_fill
    extra = len(roles(s)) - 3
    passes = 1 + extra if is_unfused(s) else t.passes
    out = [
        ("Q", eb, bh * t.t_kv * t.nd, 0),  # Q_i once per tile of S: Tc times
        ("K", eb, bh * t.t_q * t.kd, 0),  # K_j once per tile of S: Tr times (per query head)
        ("V", eb, bh * t.t_q * t.kd, 0),  # V_j once per (i, j) in pv: Tr times
        ("S", eb, passes * bh * t.nn, (1 + extra) * bh * t.nn),  # qk, then each pass over S
        ("P", eb, bh * t.nn, bh * t.nn),  # written by softmax, read by pv
        ("O", eb, 0, bh * t.nd),
    ]
    if "masked_fill" in roles(s):  # the boolean mask, one byte a score, read for every head
        out.append(("mask", 1, bh * t.nn, 0))
    return out


def outer_steps(s, bs) -> tuple[int, ...]:
    """Outer-loop steps per kernel, summed over CTAs (analysis.closed_form.spills): qk none;
    a softmax CTA walks its p Tc chunks, and with one pass its P stores walk 0 .. Tc - 1
    again, a new step each unless Tc = 1; pv a step per K/V block. Unfused, only pv has
    steps."""
    if is_unfused(s):
        return (0,) * (len(roles(s)) - 1) + (softmax_steps(s)[2],)
    return softmax_steps(s)


def on_chip_bytes(s) -> int:
    """Shared memory plus register tiles per CTA, the largest over the kernels."""
    return max(sum(size for _, size in _buffers(s, k)) for k in range(len(roles(s))))
