"""FlashAttention-2 forward (Dao 2023, Algorithm 1).

One CTA per (batch, head, Q block i), in the grid's order or, with ``longest_first=1``, in
FlashAttention-3's causal order (``tile_of``): Q_i is read once; the CTA streams every K_j,
V_j block the mask lets its rows see (``kernels.mask``: all Tc of them, those at or below the
diagonal when causal, a band for a window), keeps O_i, m_i, l_i on chip, and writes O_i and the
logsumexp L_i = m_i + log(l_i) once. Its warps split the Q rows (split-Q), so they never
exchange partial results. K and V are re-read once per Q block: Tr times in all without a
mask. A Q block none of whose rows sees a key loads nothing and writes O = 0 and L = +inf, as
flash-attn does; so does every such row of a visiting block.
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
    P_BATCH,
    P_BKV,
    P_BQ,
    P_DIM,
    P_EB,
    P_EXTRA,
    P_HEADS,
    P_KV_HEADS,
    P_KV_SEQ,
    P_MASK_BKV,
    P_MASK_BQ,
    P_PAGE,
    P_SEQ,
    STORE,
    buf,
    calc,
    mem,
)
from flashio.kernels._numerics import acc_dtype, to_dtype
from flashio.kernels._record import offset4
from flashio.kernels._resources import regs_per_thread
from flashio.kernels._terms import terms
from flashio.kernels.mask import PARTIAL, SKIP, allowed, keep_table, kv_tiles, tile_state
from flashio.kernels.paged_kv import TABLE_BYTES
from flashio.simulator.errors import TilingError
from flashio.simulator.trace import KernelInfo, Op, Space, TensorInfo

# longest_first=1: the grid's tiles in FlashAttention-3's causal order (its
# DynamicPersistentTileScheduler, Dao-AILab/flash-attention hopper/tile_scheduler.hpp): the
# (batch, head) pairs in sections whose K and V fit FA3_KV_SECTION_BYTES (as many K/V heads as
# fit, at least one, rounded down to a power of two, times the query heads sharing one), and
# within a section the last Q block of every pair first, then the one before: the longest
# tiles first (``tile_of``)
OPTIONS = ("longest_first",)
P_LONGEST_FIRST = P_EXTRA
FA3_KV_SECTION_BYTES = 32 * 1024 * 1024  # hopper/tile_scheduler.hpp: "32 MB for K & V"

# tensor indices, in the order of tensors()
Q, K, V, O, LSE, Q_S, K_S, V_S, O_ACC, S_ACC, M_L = range(11)
BLOCK_TABLE = 14  # flash_decode's paged cache's table (its tensors() index)

# FP32 operations per score and per row that are not matmuls (documented in docs/model.md):
# scale-and-subtract, row max, row sum per score; rescale of O per output element; m, l updates.
EW_PER_SCORE, EW_PER_ROW = 3, 3


@njit(**JIT)
def section_pairs(kv_seq, head_dim, elem_bytes, group):
    """(batch, head) pairs of a section of FA3's longest-first order."""
    fit = FA3_KV_SECTION_BYTES // (kv_seq * head_dim * elem_bytes * 2)  # K/V heads that fit
    heads = 1
    while 2 * heads <= fit:
        heads *= 2
    return heads * group


@njit(inline="always")
def tile_of(cta, t_q, pairs, section):
    """(b * heads + h, Q block i) of the grid's ``cta``-th tile: in the grid's order where
    ``section`` is 0, else FA3's longest-first order in sections of ``section`` pairs (the
    last one of ``pairs % section`` when they do not divide evenly)."""
    if section == 0:
        return cta // t_q, cta % t_q
    first, rest = cta // (section * t_q), cta % (section * t_q)
    width = section if first < pairs // section else pairs % section
    return first * section + rest % width, t_q - 1 - rest // width


@njit(inline="always")
def _section(p):
    """The tracer's section of pairs: 0 for the grid's order."""
    if p[P_LONGEST_FIRST] == 0:
        return 0
    return section_pairs(p[P_KV_SEQ], p[P_DIM], p[P_EB], p[P_HEADS] // p[P_KV_HEADS])


def validate(s) -> None:
    order = dict(s.options).get("longest_first", 0)
    if isinstance(order, bool) or order not in (0, 1):
        raise TilingError(f"flash2's longest_first is 0 (the grid's order) or 1, got {order!r}")


def tensors(s) -> tuple[TensorInfo, ...]:
    sh, br, bc = s.shape, s.block_q, s.block_kv
    b, h, kh, n, nk, d, eb, acc = (
        sh.batch,
        sh.heads,
        sh.n_kv_heads,
        sh.seq_len,
        sh.n_kv,
        sh.head_dim,
        sh.elem_bytes,
        sh.acc_bytes,
    )
    g, sm, rg = Space.GLOBAL, Space.SHARED, Space.REGISTERS
    return (
        TensorInfo("Q", g, (b, h, n, d), eb),
        TensorInfo("K", g, (b, kh, nk, d), eb),
        TensorInfo("V", g, (b, kh, nk, d), eb),
        TensorInfo("O", g, (b, h, n, d), eb),
        TensorInfo("L", g, (b, h, n), acc),
        TensorInfo("Q_i", sm, (br, d), eb),
        TensorInfo("K_j", sm, (bc, d), eb),
        TensorInfo("V_j", sm, (bc, d), eb),
        TensorInfo("O_i", rg, (br, d), acc),
        TensorInfo("S_ij", rg, (br, bc), acc),
        TensorInfo("m_l", rg, (2, br), acc),
    )


def kernels(s) -> tuple[KernelInfo, ...]:
    sh, br, bc, d = s.shape, s.block_q, s.block_kv, s.shape.head_dim
    smem = (br + 2 * bc) * d * sh.elem_bytes
    reg_tiles = (br * d + br * bc + 2 * br) * sh.acc_bytes
    ctas = sh.batch * sh.heads * s.t_q
    return (KernelInfo("flash2_fwd", ctas, s.warps, smem, regs_per_thread(reg_tiles, s.warps)),)


@njit(inline="always")
def emit_kv(ev, k, write, kernel, cta, j, k0, c, kvbase, p, pages, b):
    """The loads of key block j (rows k0..k0+c-1) of K and V: one run of rows each at byte
    ``kvbase + k0 row``, or from a paged cache (``p[P_PAGE]`` > 0) first the block table's
    entries for those rows (int32, row ``b`` of ``pages``), then a run per page they span,
    ``kvbase`` being the head's first row within a page (``kernels.paged_kv``'s layout)."""
    row, ps = p[P_DIM] * p[P_EB], p[P_PAGE]
    if ps == 0:
        k = mem(ev, k, write, kernel, cta, j, LOAD, K, j, -1, kvbase + k0 * row, c, row, row)
        return mem(ev, k, write, kernel, cta, j, LOAD, V, j, -1, kvbase + k0 * row, c, row, row)
    first, span = k0 // ps, (k0 + c - 1) // ps - k0 // ps + 1
    off = (b * pages.shape[1] + first) * TABLE_BYTES
    nb = span * TABLE_BYTES
    k = mem(ev, k, write, kernel, cta, j, LOAD, BLOCK_TABLE, j, -1, off, 1, nb, nb)
    page_rows = p[P_KV_HEADS] * ps  # rows of one page over every kv head
    for tensor in (K, V):
        t = k0
        while t < k0 + c:
            pg = t // ps
            end = min(k0 + c, (pg + 1) * ps)
            off = kvbase + (pages[b, pg] * page_rows + t - pg * ps) * row
            k = mem(ev, k, write, kernel, cta, j, LOAD, tensor, j, -1, off, end - t, row, row)
            t = end
    return k


@njit(inline="always")
def emit_blocks(ev, k, write, kernel, cta, brow, lo, hi, r0, r, kvbase, p, kmin, kmax, keep,
                pages, b):  # fmt: skip
    """FA2's inner loop for Q rows r0..r0+r-1 (of the rows ``kmin, kmax`` describe): the key
    blocks lo..hi-1 the block mask ``keep`` keeps, of the K/V head whose first row is at byte
    ``kvbase`` (loaded by ``emit_kv``, batch ``b``), then, if any was visited, the
    normalization; ``brow`` labels the events' Q block. Shared by flash_decode."""
    nk, d, bc = p[P_KV_SEQ], p[P_DIM], p[P_BKV]
    mq, mk = p[P_MASK_BQ], p[P_MASK_BKV]
    for j in range(lo, hi):
        k0 = j * bc
        c = min(bc, nk - k0)
        state = tile_state(kmin, kmax, keep, mq, mk, r0, r0 + r, k0, k0 + c)
        if state == SKIP:
            continue
        # K_j, V_j: HBM -> SRAM, once per (i, j)
        k = emit_kv(ev, k, write, kernel, cta, j, k0, c, kvbase, p, pages, b)
        k = calc(ev, k, write, kernel, cta, j, MMA, brow, j, 2 * r * c * d)  # S = Q K^T
        ew = EW_PER_SCORE * r * c + r * d + EW_PER_ROW * r
        if state == PARTIAL:
            ew += r * c  # apply the mask
        k = calc(ev, k, write, kernel, cta, j, EW, brow, j, ew)
        k = calc(ev, k, write, kernel, cta, j, EXP, brow, j, r * c + r)
        k = calc(ev, k, write, kernel, cta, j, MMA, brow, j, 2 * r * c * d)  # O += P V
    if lo < hi:  # O_i /= l_i, L_i = m_i + log(l_i)
        k = calc(ev, k, write, kernel, cta, -1, EW, brow, -1, r * d + r)
        k = calc(ev, k, write, kernel, cta, -1, EXP, brow, -1, r)
    return k


@njit(**JIT)
def _emit(ev, write, kernel, cta_start, cta_stop, p, kmin, kmax, keep, pages):
    nh, nkh, n, nk, d = p[P_HEADS], p[P_KV_HEADS], p[P_SEQ], p[P_KV_SEQ], p[P_DIM]
    eb, acc, br, bc = p[P_EB], p[P_ACC], p[P_BQ], p[P_BKV]
    t_q, grp = (n + br - 1) // br, nh // nkh
    pairs, section = p[P_BATCH] * nh, _section(p)
    row = d * eb
    bufs = (Q_S, K_S, V_S, O_ACC, S_ACC, M_L)
    sizes = (br * row, bc * row, bc * row, br * d * acc, br * bc * acc, 2 * br * acc)
    k = 0
    for cta in range(cta_start, cta_stop):
        bh, i = tile_of(cta, t_q, pairs, section)
        b, h = bh // nh, bh % nh
        kvh = h // grp
        q0 = i * br
        r = min(br, n - q0)
        # on-chip buffers, live for the whole CTA
        for t in range(6):
            k = buf(ev, k, write, kernel, cta, ALLOC, bufs[t], sizes[t])
        # Q_i: HBM -> SRAM, once per CTA that visits a K/V block
        qoff = ((b * nh + h) * n + q0) * row
        lo, hi = kv_tiles(kmin, kmax, keep, p[P_MASK_BQ], p[P_MASK_BKV], q0, q0 + r, bc, nk)
        if lo < hi:
            k = mem(ev, k, write, kernel, cta, -1, LOAD, Q, i, -1, qoff, r, row, row)
        kvbase = (b * nkh + kvh) * nk * row
        k = emit_blocks(
            ev, k, write, kernel, cta, i, lo, hi, q0, r, kvbase, p, kmin, kmax, keep, pages, b
        )
        # O_i, L_i: SRAM -> HBM, once per CTA
        k = mem(ev, k, write, kernel, cta, -1, STORE, O, i, -1, qoff, r, row, row)
        loff = ((b * nh + h) * n + q0) * acc
        k = mem(ev, k, write, kernel, cta, -1, STORE, LSE, i, -1, loff, 1, r * acc, r * acc)
        for t in range(5, -1, -1):
            k = buf(ev, k, write, kernel, cta, FREE, bufs[t], sizes[t])
    return k


def contiguous_kv(k_h, v_h, kvbase, row):
    """The K/V loads of ``attend_blocks`` for one head held contiguously (``k_h, v_h``:
    (N_kv, d), first row at byte ``kvbase``): ``fetch(rec, cta, j, k0, c)`` logs a run of
    rows of each and returns them."""

    def fetch(rec, cta, j, k0, c):
        rec.mem(0, cta, j, Op.LOAD, K, j, -1, kvbase + k0 * row, c, row, row)
        rec.mem(0, cta, j, Op.LOAD, V, j, -1, kvbase + k0 * row, c, row, row)
        return k_h[k0 : k0 + c], v_h[k0 : k0 + c]

    return fetch


def attend_blocks(s, rec, q_i, fetch, *, cta, brow, blocks, r0):
    """The numeric twin of ``emit_blocks`` (kernel 0 of schedule ``s``): Q rows ``q_i``, rows
    r0.. of ``s.mask``, against the kept key blocks of ``blocks = (lo, hi)`` of one K/V head,
    whose rows ``fetch(rec, cta, j, k0, c)`` loads and logs (``contiguous_kv``), online
    softmax in the accumulator type, each event logged. Returns the normalized O rows and
    their logsumexp (a row that saw no key: O = 0, L = -inf)."""
    sh, (kmin, kmax), (lo, hi), kernel = s.shape, s.mask, blocks, 0
    keep, mq, mk = keep_table(sh)
    at, dt, d, bc = acc_dtype(sh.dtype), sh.dtype, sh.head_dim, s.block_kv
    r = q_i.shape[0]
    o_i, m_i, l_i = np.zeros((r, d), at), np.full(r, -np.inf, at), np.zeros(r, at)
    for j in range(lo, hi):
        k0 = j * bc
        c = min(bc, sh.n_kv - k0)
        state = tile_state(kmin, kmax, keep, mq, mk, r0, r0 + r, k0, k0 + c)
        if state == SKIP:
            continue
        k_j, v_j = (x.astype(at) for x in fetch(rec, cta, j, k0, c))
        s_ij = (q_i @ k_j.T) * at.type(sh.scale)
        rec.calc(kernel, cta, j, Op.MMA, brow, j, 2 * r * c * d)
        ew = EW_PER_SCORE * r * c + r * d + EW_PER_ROW * r
        if state == PARTIAL:
            if sh.block_mask is None:  # s.mask's rows (flash_decode packs heads into them)
                cols = np.arange(k0, k0 + c)[None, :]
                seen = (cols >= kmin[r0 : r0 + r, None]) & (cols <= kmax[r0 : r0 + r, None])
            else:
                seen = allowed(sh, r0, r0 + r, k0, k0 + c)
            s_ij = np.where(seen, s_ij, -np.inf)
            ew += r * c
        m_new = np.maximum(m_i, s_ij.max(axis=1))
        m_use = np.where(np.isneginf(m_new), 0, m_new)  # a row that has seen no key yet
        alpha = np.exp(m_i - m_use)
        p_ij = np.exp(s_ij - m_use[:, None])
        l_i = alpha * l_i + p_ij.sum(axis=1)
        rec.calc(kernel, cta, j, Op.ELEMENTWISE, brow, j, ew)
        rec.calc(kernel, cta, j, Op.EXP, brow, j, p_ij.size + r)
        # P enters the tensor cores in the input precision; O accumulates in fp32/fp64
        o_i = alpha[:, None] * o_i + to_dtype(p_ij, dt).astype(at) @ v_j
        rec.calc(kernel, cta, j, Op.MMA, brow, j, 2 * r * c * d)
        m_i = m_new
    seen = l_i > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        o_i = np.where(seen[:, None], o_i / l_i[:, None], 0)
        lse = np.where(seen, m_i + np.log(l_i), -np.inf)
    if lo < hi:
        rec.calc(kernel, cta, -1, Op.ELEMENTWISE, brow, -1, r * d + r)
        rec.calc(kernel, cta, -1, Op.EXP, brow, -1, r)
    return o_i, lse


def execute(s, q, k, v, grad_out, rec):
    """Run the schedule tile by tile; returns (O, L) and logs every event into ``rec``."""
    sh = s.shape
    nb, nh, n, nk, d, dt = sh.batch, sh.heads, sh.seq_len, sh.n_kv, sh.head_dim, sh.dtype
    br, bc, eb, acc = s.block_q, s.block_kv, sh.elem_bytes, sh.acc_bytes
    at = acc_dtype(dt)
    qd, kd = (nb, nh, n, d), (nb, sh.n_kv_heads, nk, d)
    kmin, kmax = s.mask
    out = np.zeros(qd, q.dtype)
    lse = np.zeros((nb, nh, n), at)
    buffers = [
        (Q_S, br * d * eb),
        (K_S, bc * d * eb),
        (V_S, bc * d * eb),
        (O_ACC, br * d * acc),
        (S_ACC, br * bc * acc),
        (M_L, 2 * br * acc),
    ]
    pairs, section = sh.batch * nh, _section(s.params())
    for cta in range(s.kernels[0].ctas):
        bh, i = tile_of(cta, s.t_q, pairs, section)
        b, h = divmod(bh, nh)
        kvh = h // sh.group
        q0 = i * br
        r = min(br, n - q0)
        for t, size in buffers:
            rec.buf(0, cta, Op.ALLOC, t, size)
        lo, hi = kv_tiles(kmin, kmax, *keep_table(sh), q0, q0 + r, bc, nk)
        q_i = q[b, h, q0 : q0 + r].astype(at)
        if lo < hi:
            qoff = offset4(qd, b, h, q0, 0, eb)
            rec.mem(0, cta, -1, Op.LOAD, Q, i, -1, qoff, r, d * eb, d * eb)
        kvbase = offset4(kd, b, kvh, 0, 0, eb)
        fetch = contiguous_kv(k[b, kvh], v[b, kvh], kvbase, d * eb)
        o_i, part = attend_blocks(s, rec, q_i, fetch, cta=cta, brow=i, blocks=(lo, hi), r0=q0)
        lse[b, h, q0 : q0 + r] = np.where(np.isneginf(part), np.inf, part)  # no key: +inf
        out[b, h, q0 : q0 + r] = to_dtype(o_i, dt)
        rec.mem(0, cta, -1, Op.STORE, O, i, -1, offset4(qd, b, h, q0, 0, eb), r, d * eb, d * eb)
        loff = ((b * nh + h) * n + q0) * acc
        rec.mem(0, cta, -1, Op.STORE, LSE, i, -1, loff, 1, r * acc, r * acc)
        for t, size in reversed(buffers):
            rec.buf(0, cta, Op.FREE, t, size)
    return out, lse


# -- what analysis asks of this schedule (kernels.registry) -------------------------------------
FORWARD = "flash2"
EVERY_TILE = False
MATMUL_PRODUCTS = 2  # S = Q K^T, O += P V per visited tile
BOUND_CONSTANT = 4  # K, V: 2 cv d >= 2 W d / Br, M > 2 Br d (Q_i, O_i)
WARP_SPECIALIZED = ("flash2_fwd",)


def traffic(s) -> list[tuple[str, int, int, int]]:
    """(tensor, element bytes, elements read, elements written), docs/io.md ``flash2``: CTA
    per (b, h, i); K_j, V_j once per visited (i, j)."""
    t = terms(s)
    eb, bh, d = t.eb, t.bh, t.d
    return [
        ("Q", eb, bh * t.bs.q_rows * d, 0),  # not by a CTA whose rows see no key
        ("K", eb, bh * t.cv * d, 0),
        ("V", eb, bh * t.cv * d, 0),
        ("O", eb, 0, bh * t.nd),
        ("L", t.acc, 0, bh * t.n),
    ]


def outer_steps(s, bs) -> tuple[int, ...]:
    """A step per visited (i, j)."""
    return (s.shape.batch * s.shape.heads * bs.pairs,)


def on_chip_bytes(s) -> int:
    """Shared memory (Q_i, K_j, V_j) plus register tiles (O_i, S_ij, m, l) per CTA."""
    sh, br, bc, d = s.shape, s.block_q, s.block_kv, s.shape.head_dim
    return (br + 2 * bc) * d * sh.elem_bytes + (br * d + br * bc + 2 * br) * sh.acc_bytes
