"""Standard attention as eager PyTorch runs it (``standard`` with ``unfused=1``): the scale and
the mask are kernels of their own, and the softmax is PyTorch's row softmax.

``torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * scale [masked_fill_], dim=-1) @ v``
launches, in order (kernels as the profiler named them, data/impl/impl_measure.json):

1. ``qk``: cuBLAS's GEMM writes S = Q K^T, unscaled, in the input dtype;
2. ``scale``: S = S * scale, ``vectorized_elementwise_kernel<8>``: 128 threads of 8 elements,
   ``SCALE_ELEMS`` consecutive elements of S a CTA (one 16-byte load and store a thread);
3. ``masked_fill`` (only where the shape has a mask): S = mask ? -inf : S over every score,
   ``elementwise_kernel<128, 4>``: ``FILL_ELEMS`` elements a CTA, reading the boolean mask
   (N x N_kv bytes, broadcast over batch and heads) beside S;
4. ``row_softmax``: P = softmax(S) row by row: ``softmax_warp_forward`` (a warp a row, four
   rows a CTA, eight at 128 keys or fewer) for rows of at most 2,048 keys and 8 KiB, else
   ``cunn_SoftMaxForwardReg`` (a CTA of 1,024 threads a row, the row held in registers);
   PyTorch's ``host_softmax`` dispatch (aten/src/ATen/native/cuda/SoftMax.cu);
5. ``pv``: cuBLAS's GEMM, O = P V.

Every kernel moves its whole operand: S is written once by ``qk``, read and written by
``scale`` and ``masked_fill``, read by ``row_softmax``; P written once and read once.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from flashio.kernels._emit import (
    EW,
    EXP,
    JIT,
    LOAD,
    P_BATCH,
    P_EB,
    P_HEADS,
    P_KV_SEQ,
    P_SEQ,
    STORE,
    calc,
    mem,
)
from flashio.kernels._numerics import acc_dtype, to_dtype
from flashio.kernels.mask import allowed, keep_table, key_ranges

SCALE_ELEMS = 128 * 8  # vectorized_elementwise_kernel<8>: 128 threads x 8 elements
FILL_ELEMS = 128 * 4  # elementwise_kernel<128, 4>: 128 threads x 4 elements
WARP_SOFTMAX_MAX_KEYS = 2048  # host_softmax: dim_size <= 2048 and dim_size * bytes <= 8192
WARP_SOFTMAX_MAX_BYTES = 8192
BLOCK_SOFTMAX_THREADS = 1024  # cunn_SoftMaxForwardReg's block at the row lengths measured
EW_SOFTMAX_PER_SCORE, EW_SOFTMAX_PER_ROW = 4, 1  # as the fused softmax (kernels.standard)


@njit(**JIT)
def softmax_launch(n_kv: int, elem_bytes: int) -> tuple[int, int]:
    """(rows per CTA, warps) of PyTorch's row softmax for rows of ``n_kv`` keys."""
    if n_kv <= WARP_SOFTMAX_MAX_KEYS and n_kv * elem_bytes <= WARP_SOFTMAX_MAX_BYTES:
        return (8 if n_kv <= 128 else 4), 4  # two rows a warp up to 128 keys
    return 1, BLOCK_SOFTMAX_THREADS // 32


def has_mask(shape) -> bool:
    """Whether eager attention of ``shape`` needs a masked_fill: ``masked`` of its tables."""
    kmin, kmax = key_ranges(shape)
    return bool(masked(kmin, kmax, keep_table(shape)[0], shape.n_kv))


@njit(**JIT)
def masked(kmin, kmax, keep, nk) -> bool:
    """Whether some query misses a key: a row's key range short of all N_kv keys, or a block
    mask (its summed-area table other than the 2 x 2 of no block mask)."""
    for i in range(kmin.shape[0]):
        if kmin[i] > 0 or kmax[i] < nk - 1:
            return True
    return keep.shape[0] != 2 or keep.shape[1] != 2 or keep[1, 1] != 1


@njit(**JIT)
def emit_scale(ev, write, kernel, cta_start, cta_stop, p, s_t):
    """``scale``: each CTA loads SCALE_ELEMS consecutive scores, multiplies, stores them."""
    total, eb = p[P_BATCH] * p[P_HEADS] * p[P_SEQ] * p[P_KV_SEQ], p[P_EB]
    k = 0
    for cta in range(cta_start, cta_stop):
        e0 = cta * SCALE_ELEMS
        m = min(SCALE_ELEMS, total - e0)
        k = mem(ev, k, write, kernel, cta, -1, LOAD, s_t, -1, -1, e0 * eb, 1, m * eb, m * eb)
        k = calc(ev, k, write, kernel, cta, -1, EW, -1, -1, m)
        k = mem(ev, k, write, kernel, cta, -1, STORE, s_t, -1, -1, e0 * eb, 1, m * eb, m * eb)
    return k


@njit(**JIT)
def emit_fill(ev, write, kernel, cta_start, cta_stop, p, s_t, mask_t):
    """``masked_fill``: each CTA loads FILL_ELEMS scores and their mask bytes, selects, stores
    the scores (a CTA's range of a head's N x N_kv mask wraps at the head's end)."""
    nn, eb = p[P_SEQ] * p[P_KV_SEQ], p[P_EB]
    total = p[P_BATCH] * p[P_HEADS] * nn
    k = 0
    for cta in range(cta_start, cta_stop):
        e0 = cta * FILL_ELEMS
        m = min(FILL_ELEMS, total - e0)
        k = mem(ev, k, write, kernel, cta, -1, LOAD, s_t, -1, -1, e0 * eb, 1, m * eb, m * eb)
        m0 = e0 % nn
        first = min(m, nn - m0)
        k = mem(ev, k, write, kernel, cta, -1, LOAD, mask_t, -1, -1, m0, 1, first, first)
        if first < m:
            rest = m - first
            k = mem(ev, k, write, kernel, cta, -1, LOAD, mask_t, -1, -1, 0, 1, rest, rest)
        k = calc(ev, k, write, kernel, cta, -1, EW, -1, -1, m)
        k = mem(ev, k, write, kernel, cta, -1, STORE, s_t, -1, -1, e0 * eb, 1, m * eb, m * eb)
    return k


@njit(**JIT)
def emit_softmax(ev, write, kernel, cta_start, cta_stop, p, s_t, p_t, rows):
    """``row_softmax``: each CTA loads ``rows`` whole rows of S, computes, stores them as P."""
    n, nk, eb = p[P_SEQ], p[P_KV_SEQ], p[P_EB]
    t_r = (n + rows - 1) // rows
    k = 0
    for cta in range(cta_start, cta_stop):
        bh, rb = cta // t_r, cta % t_r
        r0 = rb * rows
        r = min(rows, n - r0)
        off = (bh * n + r0) * nk * eb
        nbytes = r * nk * eb  # the rows are contiguous
        k = mem(ev, k, write, kernel, cta, -1, LOAD, s_t, rb, -1, off, 1, nbytes, nbytes)
        ew = EW_SOFTMAX_PER_SCORE * r * nk + EW_SOFTMAX_PER_ROW * r
        k = calc(ev, k, write, kernel, cta, -1, EW, rb, -1, ew)
        k = calc(ev, k, write, kernel, cta, -1, EXP, rb, -1, r * nk)
        k = mem(ev, k, write, kernel, cta, -1, STORE, p_t, rb, -1, off, 1, nbytes, nbytes)
    return k


# -- numeric executors --------------------------------------------------------------------------
def _flat_range(rec, kernel, cta, op, tensor, start, count, eb):
    rec.mem(kernel, cta, -1, op, tensor, -1, -1, start * eb, 1, count * eb, count * eb)


def scale(s, rec, s_t, s_mat):
    """Executor of ``emit_scale``: S *= scale, rounded to the storage dtype, CTA by CTA."""
    flat, eb, at = s_mat.reshape(-1), s.shape.elem_bytes, acc_dtype(s.shape.dtype)
    for cta in range(s.kernels[1].ctas):
        e0 = cta * SCALE_ELEMS
        m = min(SCALE_ELEMS, flat.size - e0)
        _flat_range(rec, 1, cta, LOAD, s_t, e0, m, eb)
        scaled = flat[e0 : e0 + m].astype(at) * at.type(s.shape.scale)
        rec.calc(1, cta, -1, EW, -1, -1, m)
        flat[e0 : e0 + m] = to_dtype(scaled, s.shape.dtype)
        _flat_range(rec, 1, cta, STORE, s_t, e0, m, eb)


def fill(s, rec, s_t, mask_t, s_mat):
    """Executor of ``emit_fill``: masked scores of S set to -inf, CTA by CTA (kernel 2)."""
    sh = s.shape
    nn, eb = sh.seq_len * sh.n_kv, sh.elem_bytes
    keep = allowed(sh, 0, sh.seq_len, 0, sh.n_kv).reshape(-1)  # the boolean mask, inverted
    flat = s_mat.reshape(-1)
    for cta in range(s.kernels[2].ctas):
        e0 = cta * FILL_ELEMS
        m = min(FILL_ELEMS, flat.size - e0)
        _flat_range(rec, 2, cta, LOAD, s_t, e0, m, eb)
        m0 = e0 % nn
        first = min(m, nn - m0)
        rec.mem(2, cta, -1, LOAD, mask_t, -1, -1, m0, 1, first, first)
        if first < m:
            rec.mem(2, cta, -1, LOAD, mask_t, -1, -1, 0, 1, m - first, m - first)
        idx = (e0 + np.arange(m)) % nn
        rec.calc(2, cta, -1, EW, -1, -1, m)
        flat[e0 : e0 + m] = np.where(keep[idx], flat[e0 : e0 + m], -np.inf)
        _flat_range(rec, 2, cta, STORE, s_t, e0, m, eb)


def softmax(s, rec, kernel, s_t, p_t, s_mat, p_mat, rows):
    """Executor of ``emit_softmax``: P = softmax(S) over whole rows, ``rows`` a CTA; a row
    that sees no key (all -inf) gives NaN, as PyTorch's does."""
    sh = s.shape
    n, nk, eb, at = sh.seq_len, sh.n_kv, sh.elem_bytes, acc_dtype(sh.dtype)
    s_rows, p_rows = s_mat.reshape(-1, n, nk), p_mat.reshape(-1, n, nk)
    t_r = -(-n // rows)
    for cta in range(s.kernels[kernel].ctas):
        bh, rb = divmod(cta, t_r)
        r0 = rb * rows
        r = min(rows, n - r0)
        off = (bh * n + r0) * nk * eb
        rec.mem(kernel, cta, -1, LOAD, s_t, rb, -1, off, 1, r * nk * eb, r * nk * eb)
        x = s_rows[bh, r0 : r0 + r].astype(at)
        with np.errstate(invalid="ignore"):
            e = np.exp(x - x.max(axis=1, keepdims=True))
            out = e / e.sum(axis=1, keepdims=True)
        ew = EW_SOFTMAX_PER_SCORE * r * nk + EW_SOFTMAX_PER_ROW * r
        rec.calc(kernel, cta, -1, EW, rb, -1, ew)
        rec.calc(kernel, cta, -1, EXP, rb, -1, r * nk)
        p_rows[bh, r0 : r0 + r] = to_dtype(out, sh.dtype)
        rec.mem(kernel, cta, -1, STORE, p_t, rb, -1, off, 1, r * nk * eb, r * nk * eb)
