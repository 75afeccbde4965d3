"""FlashDecoding: split-KV attention for decoding over a KV cache (flash-attn 2's
``flash_fwd_splitkv_kernel`` and ``flash_fwd_splitkv_combine_kernel``).

A decoding step has few queries (``seq_len`` 1, or a few for speculative decoding) and a long
cache (``kv_seq_len``): FA2's grid of one CTA per (batch, head, Q block) leaves most SMs idle.
FlashDecoding splits the keys as well. Two kernels:

1. ``flash_decode``: one CTA per (unit, Q block, split). A *unit* is a (batch, query head), or,
   with grouped-query attention at ``seq_len == 1`` and no window, a (batch, kv head) whose Q
   tile holds the group's query heads as its rows (flash-attn's ``seqlenq_ngroups_swapped``:
   q reshaped from (b, 1, h_kv g, d) to (b, g, h_kv, d), so K and V are read once per kv head).
   The Tc key blocks are dealt out ceil(Tc / S) to a split; split s walks blocks s ceil(Tc/S)
   .. (s+1) ceil(Tc/S) - 1 that the mask lets its rows see, as FA2's forward does (online
   softmax), and writes its partial output O_s = P_s V / l_s and logsumexp LSE_s (fp32) to
   O_accum and LSE_accum; a split that sees no key writes O_s = 0 and LSE_s = -inf. With one
   split it writes O and L directly, and there is no second kernel.
2. ``flash_decode_combine`` (S > 1): one CTA per ``combine_rows`` rows of (batch, head, query):
   reads every split's LSE_s and O_s and writes L = log sum_s exp(LSE_s) and O = sum_s
   exp(LSE_s - L) O_s. A row that sees no key gets L = +inf and O = 0, as flash-attn does.

Over a paged KV cache (``AttentionShape.paged_kv``, ``kernels.paged_kv``) K and V are pools of
(pages, kv heads, page size, d): a visited key block reads its span of the block table (int32
page ids), then a run of rows per page it spans; everything else is as above.

Options
-------
num_splits : int or None
    S. None (or absent) applies flash-attn's ``num_splits_heuristic`` (pytorch@03b7c19d
    aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp, ``set_params_splitkv``):
    with U units of Tr Q blocks and Tc key blocks, 1 if U Tr >= 0.8 * 2 * SMs (flash-attn
    counts each SM twice for its 128-thread CTAs); otherwise, over S = 1 .. min(128, 2 SMs,
    Tc) taking only S whose ceil(Tc / S) differs from ceil(Tc / (S - 1)), the smallest S whose
    wave efficiency n / ceil(n), n = U Tr S / (2 SMs), is at least 0.85 of the best.
    flash-attn feeds it its own blocks (64 query rows; 256, 128 or 64 keys for d <= 64, <= 128,
    larger); flashio feeds the schedule's, which are those by default.
sm_count : int
    SMs the heuristic assumes (default 132, the H200's; ``flashio simulate`` passes the GPU's).

After the schedule is built its options hold the S used and ``split_heuristic`` (1 if the
heuristic chose it).

FP32 work that is not matmuls: per visited block as ``kernels.flash2`` (EW_PER_SCORE,
EW_PER_ROW, the O rescale, one per score on a partial block); a split's epilogue r d + r
(normalize, logsumexp). The combine, per row: COMBINE_PER_SPLIT = 3 per split (max, subtract,
sum) and 2 (log, reciprocal), one EXP per split, and 2 per split per output element (scale,
add).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from flashio.kernels._emit import (
    ALLOC,
    EW,
    EXP,
    FREE,
    JIT,
    LOAD,
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
    P_PAGE,
    P_SEQ,
    STORE,
    buf,
    calc,
    mem,
)
from flashio.kernels._numerics import acc_dtype, to_dtype
from flashio.kernels._resources import regs_per_thread
from flashio.kernels.flash2 import BLOCK_TABLE, attend_blocks, contiguous_kv, emit_blocks
from flashio.kernels.mask import key_ranges, kv_block_range
from flashio.kernels.paged_kv import TABLE_BYTES
from flashio.simulator.errors import TilingError
from flashio.simulator.trace import KernelInfo, Op, Space, TensorInfo

OPTIONS = ("num_splits", "sm_count", "split_heuristic")
P_NUM_SPLITS = P_EXTRA  # options in sorted-name order
DEFAULT_SM_COUNT = 132  # the H200's
MAX_SPLITS = 128  # flash-attn: TORCH_CHECK(params.num_splits <= 128)
COMBINE_PER_SPLIT, COMBINE_PER_ROW, COMBINE_PER_SPLIT_ELEM = 3, 2, 2

# tensor indices, in the order of tensors() (BLOCK_TABLE = 14 with a paged cache)
Q, K, V, O, LSE, O_ACCUM, LSE_ACCUM, Q_S, K_S, V_S, O_ACC, S_ACC, M_L, C_ROWS = range(14)
PAGED_KV = True  # reads AttentionShape.paged_kv (kernels.Schedule refuses it elsewhere)


# -- units, splits ------------------------------------------------------------------------------
def packs_group(shape) -> bool:
    """flash-attn's ``seqlenq_ngroups_swapped``: one query, several query heads per kv head,
    no window (one at least as long as the keys is none)."""
    window = shape.window_bounds
    no_window = window is None or max(window) >= shape.n_kv
    return shape.seq_len == 1 and shape.group > 1 and no_window


def units(shape) -> tuple[int, int]:
    """(units, rows per unit): (B Hkv, g) when the group's heads share a Q tile, else (B H, N)."""
    if packs_group(shape):
        return shape.batch * shape.n_kv_heads, shape.group
    return shape.batch * shape.heads, shape.seq_len


def split_heuristic(n_units_blocks: int, sm_count: int, n_kv_blocks: int) -> int:
    """flash-attn's ``num_splits_heuristic`` (module docstring), with its 2 x SMs."""
    sms = 2 * sm_count
    if n_units_blocks >= 0.8 * sms:
        return 1
    most = min(MAX_SPLITS, sms, n_kv_blocks)

    def eligible(s):
        return s == 1 or math.ceil(n_kv_blocks / s) != math.ceil(n_kv_blocks / (s - 1))

    eff = {}
    for s in range(1, most + 1):
        if eligible(s):
            waves = n_units_blocks * s / sms
            eff[s] = waves / math.ceil(waves)
    best = max(eff.values())
    return next(s for s in sorted(eff) if eff[s] >= 0.85 * best)


def validate(s) -> None:
    """Check the options and resolve ``num_splits`` (the heuristic when None or absent)."""
    if s.shape.block_mask is not None:
        raise TilingError(
            "flash_decode takes no block mask (its rows pack a group's query heads); "
            "run a block-sparse shape with flash2 or flash1"
        )
    opts = dict(s.options)
    unknown = sorted(set(opts) - set(OPTIONS))
    if unknown:
        raise TilingError(
            f"flash_decode has no option {unknown[0]!r}; allowed: num_splits, sm_count"
        )
    sms = opts.get("sm_count", DEFAULT_SM_COUNT)
    if isinstance(sms, bool) or not isinstance(sms, int | np.integer) or sms < 1:
        raise TilingError(f"sm_count must be a positive integer, got {sms!r}")
    n_units, rows = units(s.shape)
    t_m, t_kv = -(-rows // s.block_q), s.t_kv
    splits = opts.get("num_splits")
    chosen = splits is None
    if chosen:
        splits = split_heuristic(n_units * t_m, int(sms), t_kv)
    if isinstance(splits, bool) or not isinstance(splits, int | np.integer) or splits < 1:
        raise TilingError(f"num_splits must be a positive integer or None, got {splits!r}")
    if splits > min(MAX_SPLITS, t_kv):
        raise TilingError(
            f"num_splits={splits} exceeds min(128, Tc = {t_kv} key blocks): a split needs a "
            "key block (flash-attn allows at most 128)"
        )
    resolved = (("num_splits", int(splits)), ("sm_count", int(sms)),
                ("split_heuristic", int(chosen)))  # fmt: skip
    object.__setattr__(s, "options", resolved)


def default_blocks(shape) -> tuple[int, int]:
    """flash-attn's split-KV tiles (``run_mha_fwd_splitkv_dispatch``): 64 query rows, and 256
    keys for d <= 64, 128 for d <= 128, 64 beyond."""
    d = shape.head_dim
    return 64, 256 if d <= 64 else 128 if d <= 128 else 64


def splits(s) -> int:
    return s.option("num_splits")


def combine_rows(d: int) -> int:
    """Rows per combine CTA: flash-attn's kBlockM of the combine kernel (4 if 128 divides d,
    8 if 64 does, else 16)."""
    return 4 if d % 128 == 0 else 8 if d % 64 == 0 else 16


def mask(s) -> np.ndarray:
    """The keys each row of a unit sees, (2, rows): the shape's mask, or with the group
    packed, query 0's range for every head of the group."""
    kr = key_ranges(s.shape)
    if not packs_group(s.shape):
        return kr
    return np.ascontiguousarray(np.repeat(kr[:, :1], s.shape.group, axis=1))


# -- tensors and kernels ------------------------------------------------------------------------
def tensors(s) -> tuple[TensorInfo, ...]:
    sh, br, bc = s.shape, s.block_q, s.block_kv
    b, h, kh, n, nk, d = sh.batch, sh.heads, sh.n_kv_heads, sh.seq_len, sh.n_kv, sh.head_dim
    eb, acc, ns = sh.elem_bytes, sh.acc_bytes, splits(s)
    g, sm, rg = Space.GLOBAL, Space.SHARED, Space.REGISTERS
    pk = sh.paged_kv  # a pool of pages, (pages, kv heads, page size, d), and its table
    kv = (b, kh, nk, d) if pk is None else (pk.num_pages, kh, pk.page_size, d)
    table = () if pk is None else (TensorInfo("block_table", g, pk.table.shape, TABLE_BYTES),)
    return (
        TensorInfo("Q", g, (b, h, n, d), eb),
        TensorInfo("K", g, kv, eb),
        TensorInfo("V", g, kv, eb),
        TensorInfo("O", g, (b, h, n, d), eb),
        TensorInfo("L", g, (b, h, n), acc),
        TensorInfo("O_accum", g, (ns, b, h, n, d), acc),
        TensorInfo("LSE_accum", g, (ns, b, h, n), acc),
        TensorInfo("Q_i", sm, (br, d), eb),
        TensorInfo("K_j", sm, (bc, d), eb),
        TensorInfo("V_j", sm, (bc, d), eb),
        TensorInfo("O_i", rg, (br, d), acc),
        TensorInfo("S_ij", rg, (br, bc), acc),
        TensorInfo("m_l", rg, (2, br), acc),
        TensorInfo("O_rows", rg, (ns + 1, combine_rows(d), d), acc),
        *table,
    )


def _split_sizes(s) -> tuple[int, ...]:
    sh, br, bc, d = s.shape, s.block_q, s.block_kv, s.shape.head_dim
    eb, acc = sh.elem_bytes, sh.acc_bytes
    return (br * d * eb, bc * d * eb, bc * d * eb, br * d * acc, br * bc * acc, 2 * br * acc)


def _combine_bytes(s) -> int:
    """The combine CTA's registers: every split's LSE and one O row block at a time."""
    return (splits(s) + 1) * combine_rows(s.shape.head_dim) * s.shape.head_dim * s.shape.acc_bytes


def kernels(s) -> tuple[KernelInfo, ...]:
    sh = s.shape
    n_units, rows = units(sh)
    t_m = -(-rows // s.block_q)
    z = _split_sizes(s)
    # paged: two slots of a key block's page ids beside the tiles (kernels/cuda/flash2_fwd.cu)
    ids = 0 if sh.paged_kv is None else 2 * int(page_spans(s).max()) * TABLE_BYTES
    split = KernelInfo(
        "flash_decode", n_units * t_m * splits(s), s.warps, sum(z[:3]) + ids,
        regs_per_thread(sum(z[3:]), s.warps),
    )  # fmt: skip
    if splits(s) == 1:
        return (split,)
    total_rows = sh.batch * sh.heads * sh.seq_len
    ctas = -(-total_rows // combine_rows(sh.head_dim))
    combine = KernelInfo(
        "flash_decode_combine", ctas, s.warps, 0, regs_per_thread(_combine_bytes(s), s.warps)
    )
    return (split, combine)


# -- fast tracer ---------------------------------------------------------------------------------
@njit(**JIT)
def _emit(ev, write, kernel, cta_start, cta_stop, p, kmin, kmax, keep, pages):
    nb, nh, nkh, n, nk, d = p[P_BATCH], p[P_HEADS], p[P_KV_HEADS], p[P_SEQ], p[P_KV_SEQ], p[P_DIM]
    eb, acc, br, bc, ns = p[P_EB], p[P_ACC], p[P_BQ], p[P_BKV], p[P_NUM_SPLITS]
    grp = nh // nkh
    rows = kmin.shape[0]  # rows per unit: g when the group is packed, else N
    packed = rows != n
    t_m, t_kv = (rows + br - 1) // br, (nk + bc - 1) // bc
    per_split = (t_kv + ns - 1) // ns
    row, arow = d * eb, d * acc
    k = 0
    if kernel == 1:  # combine: CTA per `cr` rows of (b, h, query)
        cr = 4 if d % 128 == 0 else 8 if d % 64 == 0 else 16
        total = nb * nh * n
        size = (ns + 1) * cr * arow
        for cta in range(cta_start, cta_stop):
            r0 = cta * cr
            r = min(cr, total - r0)
            k = buf(ev, k, write, 1, cta, ALLOC, C_ROWS, size)
            for sp in range(ns):  # every split's logsumexp, then a step per partial output
                off = (sp * total + r0) * acc
                k = mem(
                    ev, k, write, 1, cta, -1, LOAD, LSE_ACCUM, cta, sp, off, 1, r * acc, r * acc
                )
            k = calc(
                ev,
                k,
                write,
                1,
                cta,
                -1,
                EW,
                cta,
                -1,
                (COMBINE_PER_SPLIT * ns + COMBINE_PER_ROW) * r,
            )
            k = calc(ev, k, write, 1, cta, -1, EXP, cta, -1, ns * r)
            for sp in range(ns):
                off = (sp * total + r0) * arow
                k = mem(ev, k, write, 1, cta, sp, LOAD, O_ACCUM, cta, sp, off, r, arow, arow)
                k = calc(ev, k, write, 1, cta, sp, EW, cta, sp, COMBINE_PER_SPLIT_ELEM * r * d)
            k = mem(ev, k, write, 1, cta, -1, STORE, O, cta, -1, r0 * row, r, row, row)
            k = mem(ev, k, write, 1, cta, -1, STORE, LSE, cta, -1, r0 * acc, 1, r * acc, r * acc)
            k = buf(ev, k, write, 1, cta, FREE, C_ROWS, size)
        return k
    bufs = (Q_S, K_S, V_S, O_ACC, S_ACC, M_L)
    sizes = (br * row, bc * row, bc * row, br * arow, br * bc * acc, 2 * br * acc)
    for cta in range(cta_start, cta_stop):
        unit, rest = cta // (t_m * ns), cta % (t_m * ns)
        m, sp = rest // ns, rest % ns
        r0 = m * br
        r = min(br, rows - r0)
        if packed:  # unit (b, kv head): rows are the group's query heads at query 0
            b, kvh = unit // nkh, unit % nkh
            first = b * nh + kvh * grp + r0  # row of (b, h, query) space
        else:  # unit (b, h): rows are its queries
            b, h = unit // nh, unit % nh
            kvh = h // grp
            first = (b * nh + h) * n + r0
        for t in range(6):
            k = buf(ev, k, write, 0, cta, ALLOC, bufs[t], sizes[t])
        lo, hi = kv_block_range(kmin, kmax, r0, r0 + r, bc)
        lo, hi = max(lo, sp * per_split), min(hi, (sp + 1) * per_split)
        if lo < hi:  # Q_i: HBM -> SRAM, once per CTA that visits a key block
            k = mem(ev, k, write, 0, cta, -1, LOAD, Q, m, sp, first * row, r, row, row)
        # the head's first row: in its (b, kv head) slab, or within a page when paged
        kvbase = (b * nkh + kvh) * nk * row if p[P_PAGE] == 0 else kvh * p[P_PAGE] * row
        k = emit_blocks(
            ev, k, write, 0, cta, m, lo, hi, r0, r, kvbase, p, kmin, kmax, keep, pages, b
        )
        if ns == 1:  # O, L directly
            k = mem(ev, k, write, 0, cta, -1, STORE, O, m, -1, first * row, r, row, row)
            k = mem(ev, k, write, 0, cta, -1, STORE, LSE, m, -1, first * acc, 1, r * acc, r * acc)
        else:  # this split's partial output and logsumexp, fp32
            total = nb * nh * n
            off = (sp * total + first) * arow
            k = mem(ev, k, write, 0, cta, -1, STORE, O_ACCUM, m, sp, off, r, arow, arow)
            off = (sp * total + first) * acc
            k = mem(ev, k, write, 0, cta, -1, STORE, LSE_ACCUM, m, sp, off, 1, r * acc, r * acc)
        for t in range(5, -1, -1):
            k = buf(ev, k, write, 0, cta, FREE, bufs[t], sizes[t])
    return k


# -- numeric executor -----------------------------------------------------------------------------
def execute(s, q, k, v, grad_out, rec):
    """Run both kernels tile by tile; returns (O, L) and logs every event into ``rec``."""
    sh = s.shape
    nb, nh, n, nk, d, dt = sh.batch, sh.heads, sh.seq_len, sh.n_kv, sh.head_dim, sh.dtype
    br, bc, eb, acc, ns, grp = (
        s.block_q,
        s.block_kv,
        sh.elem_bytes,
        sh.acc_bytes,
        splits(s),
        sh.group,
    )
    at = acc_dtype(dt)
    kmin, kmax = s.mask
    rows = kmin.shape[0]
    packed = packs_group(sh)
    t_m, per_split = -(-rows // br), -(-s.t_kv // ns)
    if sh.paged_kv is not None:
        k_pool, v_pool = page_pool(sh, k), page_pool(sh, v)
    total = nb * nh * n
    q_rows = q.reshape(total, d)  # (b, h, query) rows, the order the kernels address
    out = np.zeros((total, d), q.dtype)
    lse = np.full(total, np.inf, at)
    o_acc = np.zeros((ns, total, d), at)
    lse_acc = np.full((ns, total), -np.inf, at)
    row, arow = d * eb, d * acc
    sizes = _split_sizes(s)
    bufs = (Q_S, K_S, V_S, O_ACC, S_ACC, M_L)
    for cta in range(s.kernels[0].ctas):
        unit, rest = divmod(cta, t_m * ns)
        m, sp = divmod(rest, ns)
        r0 = m * br
        r = min(br, rows - r0)
        if packed:
            b, kvh = divmod(unit, sh.n_kv_heads)
            first = b * nh + kvh * grp + r0
        else:
            b, h = divmod(unit, nh)
            kvh, first = h // grp, (b * nh + h) * n + r0
        for t, size in zip(bufs, sizes, strict=True):
            rec.buf(0, cta, Op.ALLOC, t, size)
        lo, hi = kv_block_range(kmin, kmax, r0, r0 + r, bc)
        lo, hi = max(lo, sp * per_split), min(hi, (sp + 1) * per_split)
        q_i = q_rows[first : first + r].astype(at)
        if lo < hi:
            rec.mem(0, cta, -1, Op.LOAD, Q, m, sp, first * row, r, row, row)
        if sh.paged_kv is None:
            fetch = contiguous_kv(k[b, kvh], v[b, kvh], (b * sh.n_kv_heads + kvh) * nk * row, row)
        else:
            fetch = paged_kv_rows(sh, k_pool, v_pool, b, kvh)
        o_i, part_lse = attend_blocks(s, rec, q_i, fetch, cta=cta, brow=m, blocks=(lo, hi), r0=r0)
        seen = ~np.isneginf(part_lse)
        if ns == 1:
            out[first : first + r] = to_dtype(o_i, dt)
            lse[first : first + r] = np.where(seen, part_lse, np.inf)
            rec.mem(0, cta, -1, Op.STORE, O, m, -1, first * row, r, row, row)
            rec.mem(0, cta, -1, Op.STORE, LSE, m, -1, first * acc, 1, r * acc, r * acc)
        else:
            o_acc[sp, first : first + r], lse_acc[sp, first : first + r] = o_i, part_lse
            off = (sp * total + first) * arow
            rec.mem(0, cta, -1, Op.STORE, O_ACCUM, m, sp, off, r, arow, arow)
            off = (sp * total + first) * acc
            rec.mem(0, cta, -1, Op.STORE, LSE_ACCUM, m, sp, off, 1, r * acc, r * acc)
        for t, size in reversed(list(zip(bufs, sizes, strict=True))):
            rec.buf(0, cta, Op.FREE, t, size)
    if ns > 1:
        _combine(s, rec, o_acc, lse_acc, out, lse)
    return out.reshape(q.shape), lse.reshape(nb, nh, n)


def page_pool(shape, x: np.ndarray) -> np.ndarray:
    """K or V, (batch, kv heads, N_kv, d), laid out in ``shape.paged_kv``'s pool, (pages, kv
    heads, page size, d); slots no sequence fills are NaN, so a wrong page read shows. A page
    that sequences share must hold the same keys in each."""
    pk, nk = shape.paged_kv, shape.n_kv
    ps = pk.page_size
    pool = np.full((pk.num_pages, x.shape[1], ps, x.shape[3]), np.nan, x.dtype)
    owner = {}
    for b, row in enumerate(pk.table):
        for i in range(-(-nk // ps)):
            rows = x[b, :, i * ps : (i + 1) * ps]
            page = int(row[i])
            if page in owner and not np.array_equal(pool[page, :, : rows.shape[1]], rows):
                raise ValueError(
                    f"sequences {owner[page]} and {b} share page {page} but hold other keys there"
                )
            owner.setdefault(page, b)
            pool[page, :, : rows.shape[1]] = rows
    return pool


def paged_kv_rows(shape, k_pool, v_pool, b: int, kvh: int):
    """The K/V loads of ``attend_blocks`` from a paged cache, as ``flash2.emit_kv`` traces
    them: sequence ``b``'s table entries for a key block, then a run of rows per page it
    spans, of K and then of V, gathered from the pools."""
    pk, kh, d = shape.paged_kv, shape.n_kv_heads, shape.head_dim
    ps, table, row = pk.page_size, pk.table, d * shape.elem_bytes

    def fetch(rec, cta, j, k0, c):
        first, last = k0 // ps, (k0 + c - 1) // ps
        nb = (last - first + 1) * TABLE_BYTES
        off = (b * pk.pages_per_seq + first) * TABLE_BYTES
        rec.mem(0, cta, j, Op.LOAD, BLOCK_TABLE, j, -1, off, 1, nb, nb)
        out = []
        for tensor, pool in ((K, k_pool), (V, v_pool)):
            parts = []
            for pg in range(first, last + 1):
                t0, t1 = max(k0, pg * ps), min(k0 + c, (pg + 1) * ps)
                page = int(table[b, pg])
                off = ((page * kh + kvh) * ps + t0 - pg * ps) * row
                rec.mem(0, cta, j, Op.LOAD, tensor, j, -1, off, t1 - t0, row, row)
                parts.append(pool[page, kvh, t0 - pg * ps : t1 - pg * ps])
            out.append(np.concatenate(parts))
        return out

    return fetch


def _combine(s, rec, o_acc, lse_acc, out, lse):
    """Kernel 1: L = log sum_s exp(LSE_s), O = sum_s exp(LSE_s - L) O_s, per row block."""
    sh = s.shape
    d, eb, acc, ns, dt = sh.head_dim, sh.elem_bytes, sh.acc_bytes, splits(s), sh.dtype
    cr, total = combine_rows(d), o_acc.shape[1]
    row, arow, size = d * eb, d * acc, _combine_bytes(s)
    for cta in range(s.kernels[1].ctas):
        r0 = cta * cr
        r = min(cr, total - r0)
        rec.buf(1, cta, Op.ALLOC, C_ROWS, size)
        for sp in range(ns):
            off = (sp * total + r0) * acc
            rec.mem(1, cta, -1, Op.LOAD, LSE_ACCUM, cta, sp, off, 1, r * acc, r * acc)
        parts = lse_acc[:, r0 : r0 + r]
        top = parts.max(axis=0)
        top_use = np.where(np.isneginf(top), 0, top)
        weight_sum = np.exp(parts - top_use).sum(axis=0)
        with np.errstate(divide="ignore"):
            total_lse = np.where(weight_sum > 0, np.log(weight_sum) + top_use, np.inf)
        rec.calc(
            1, cta, -1, Op.ELEMENTWISE, cta, -1, (COMBINE_PER_SPLIT * ns + COMBINE_PER_ROW) * r
        )
        rec.calc(1, cta, -1, Op.EXP, cta, -1, ns * r)
        o = np.zeros((r, d), o_acc.dtype)
        for sp in range(ns):
            rec.mem(1, cta, sp, Op.LOAD, O_ACCUM, cta, sp, (sp * total + r0) * arow, r, arow, arow)
            o += np.exp(parts[sp] - total_lse)[:, None] * o_acc[sp, r0 : r0 + r]
            rec.calc(1, cta, sp, Op.ELEMENTWISE, cta, sp, COMBINE_PER_SPLIT_ELEM * r * d)
        out[r0 : r0 + r] = to_dtype(o, dt)
        lse[r0 : r0 + r] = total_lse
        rec.mem(1, cta, -1, Op.STORE, O, cta, -1, r0 * row, r, row, row)
        rec.mem(1, cta, -1, Op.STORE, LSE, cta, -1, r0 * acc, 1, r * acc, r * acc)
        rec.buf(1, cta, Op.FREE, C_ROWS, size)


# -- what analysis asks of this schedule (kernels.registry) -------------------------------------
FORWARD = "flash_decode"
EVERY_TILE = False
MATMUL_PRODUCTS = 2  # S = Q K^T, O += P V per visited tile
BOUND_CONSTANT = 4  # as flash2: K, V: 2 cv d >= 2 W d / Br, M > 2 Br d
WARP_SPECIALIZED = ("flash_decode",)


def _visits(s) -> tuple:
    """Per (Q block m, split): rows r_m, the visited key blocks' count and rows, and their
    range (first, stop) of key blocks, vectorized."""
    kmin, kmax = mask(s)
    rows, br, bc, nk, ns = kmin.shape[0], s.block_q, s.block_kv, s.shape.n_kv, splits(s)
    per_split = -(-s.t_kv // ns)
    r0 = np.arange(0, rows, br, dtype=np.int64)
    last = np.minimum(r0 + br, rows) - 1
    seen = kmax[last] >= 0
    first = np.minimum(np.maximum(r0, np.searchsorted(kmax, 0)), rows - 1)
    lo = np.where(seen, kmin[first] // bc, 0)[:, None]
    hi = np.where(seen, kmax[last] // bc + 1, 0)[:, None]
    sp = np.arange(ns, dtype=np.int64)[None, :]
    a, b = np.maximum(lo, sp * per_split), np.minimum(hi, (sp + 1) * per_split)
    blocks = np.maximum(0, b - a)
    keys = np.where(blocks > 0, np.minimum(nk, b * bc) - a * bc, 0)
    return np.minimum(br, rows - r0)[:, None], blocks, keys, (a, np.maximum(a, b))


def page_spans(s) -> np.ndarray:
    """Pages each key block's rows span in ``s.shape.paged_kv``, (Tc,)."""
    ps, bc, nk = s.shape.paged_kv.page_size, s.block_kv, s.shape.n_kv
    k0 = np.arange(s.t_kv, dtype=np.int64) * bc
    return (np.minimum(k0 + bc, nk) - 1) // ps - k0 // ps + 1


def _table_entries(s, first, stop) -> int:
    """Block-table entries a unit reads: per visited key block, one per page its rows span,
    summed over the (Q block, split) block ranges ``first..stop-1``."""
    before = np.concatenate(([0], np.cumsum(page_spans(s))))
    first, stop = np.minimum(first, s.t_kv), np.minimum(stop, s.t_kv)  # empty splits past Tc
    return int((before[stop] - before[first]).sum())


def traffic(s) -> list[tuple[str, int, int, int]]:
    """(tensor, element bytes, elements read, elements written): per unit, Q rows once per
    (Q block, split) that visits a key block, K and V the rows of its visited blocks (and,
    paged, the block table's entries of their pages), and the fp32 partial results of every
    split once written and once read by the combine."""
    sh = s.shape
    eb, acc, d, ns = sh.elem_bytes, sh.acc_bytes, sh.head_dim, splits(s)
    n_units, _ = units(sh)
    r, blocks, keys, ranges = _visits(s)
    q = n_units * int((r * (blocks > 0)).sum()) * d
    kv = n_units * int(keys.sum()) * d
    rows = sh.batch * sh.heads * sh.seq_len  # every (b, h, query) row
    part = int(ns > 1)  # one split writes O and L itself
    table = [] if sh.paged_kv is None else [
        ("block_table", TABLE_BYTES, n_units * _table_entries(s, *ranges), 0)
    ]  # fmt: skip
    return [
        ("Q", eb, q, 0),
        ("K", eb, kv, 0),
        ("V", eb, kv, 0),
        ("O", eb, 0, rows * d),
        ("L", acc, 0, rows),
        ("O_accum", acc, part * ns * rows * d, part * ns * rows * d),
        ("LSE_accum", acc, part * ns * rows, part * ns * rows),
        *table,
    ]


def outer_steps(s, bs) -> tuple[int, ...]:
    """Split kernel: a step per visited key block of each (unit, Q block, split); the combine
    a step per split it reads (the LSE and O loads of split s are step s)."""
    n_units, _ = units(s.shape)
    _, blocks, _, _ = _visits(s)
    split = (n_units * int(blocks.sum()),)
    return split if splits(s) == 1 else (*split, s.kernels[1].ctas * splits(s))


def on_chip_bytes(s) -> int:
    """Shared memory plus register tiles per CTA: the split kernel's (or the combine's)."""
    split = sum(_split_sizes(s))
    return split if splits(s) == 1 else max(split, _combine_bytes(s))
