"""Which keys each query sees: the one mask every schedule, executor and closed form reads.

Full, causal, sliding-window and packed-document attention, with queries and keys of
different lengths, share one property: query row i sees an interval of keys,
``kmin[i] <= j <= kmax[i]``, and both ends never decrease with i. So a shape's mask is two
arrays (``key_ranges``), and everything else follows from them:

- the K/V blocks a Q block of rows ``[r0, r1)`` visits are the contiguous range
  ``kmin[r0] // Bc .. kmax[r1 - 1] // Bc`` (``kv_block_range``): the rows' intervals overlap
  or touch, so their union has no gap;
- the Q blocks that visit a K/V block of keys ``[c0, c1)`` are contiguous too
  (``q_block_range``, by binary search on the two arrays);
- a visited block is *full* (no element masking) iff its last row starts at or before ``c0``
  and its first row ends at or after ``c1 - 1`` (``block_full``); otherwise it is *partial*.

Conventions (flash-attn's): with ``kv_seq_len`` keys and ``seq_len`` queries the queries are
aligned to the end of the keys, ``offset = kv_seq_len - seq_len``, so query i's own position
is key ``i + offset`` (bottom-right causal; decoding is ``seq_len = 1``). Causal: keys up to
``i + offset``. ``window=W`` (causal): the W keys ending at ``i + offset``
(flash-attn's ``window_size=(W - 1, 0)``); ``window=(left, right)`` (not causal): keys
``i + offset - left .. i + offset + right``. ``segments``: packed documents
(block-diagonal, flash-attn varlen's ``cu_seqlens``): a query sees only keys of its own
segment, combined with causal and window as above.

``block_ranges`` is the whole block view at once, and ``BlockSums`` its sums over the visited
blocks (rows, keys, scores, partial blocks), the terms of every schedule's closed-form traffic.

A row that sees no key (only when ``kv_seq_len < seq_len``, causal: its own position lies
before the first key) has ``kmin = 0, kmax = -1``. Such rows form a prefix, so both arrays
stay monotone; schedules write O = 0 and logsumexp = +inf for them, as flash-attn does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numba import njit

__all__ = [
    "BlockSums",
    "allowed",
    "block_full",
    "block_ranges",
    "block_sums",
    "key_ranges",
    "kv_block_range",
    "pair_count",
    "q_block_range",
    "seen_counts",
]


@lru_cache(maxsize=16)
def _ranges(shape) -> np.ndarray:
    n_q, n_k = shape.seq_len, shape.n_kv
    rows = np.arange(n_q, dtype=np.int64)
    pos = rows + (n_k - n_q)  # query i's position among the keys
    lo = np.zeros(n_q, np.int64)
    hi = np.full(n_q, n_k - 1, np.int64)
    if shape.causal:
        hi = np.minimum(hi, pos)
    if shape.window is not None:
        left, right = shape.window_bounds
        lo = np.maximum(lo, pos - left)
        hi = np.minimum(hi, pos + right)
    if shape.segments is not None:
        ends = np.cumsum(np.asarray(shape.segments, np.int64))
        seg = np.searchsorted(ends, rows, side="right")
        lo = np.maximum(lo, ends[seg] - np.asarray(shape.segments, np.int64)[seg])
        hi = np.minimum(hi, ends[seg] - 1)
    empty = hi < lo
    lo[empty], hi[empty] = 0, -1
    out = np.stack([lo, hi])
    # the block views rely on both ends being non-decreasing (empty rows: a prefix)
    assert (np.diff(out, axis=1) >= 0).all(), "mask rows are not monotone"
    out.setflags(write=False)
    return out


def key_ranges(shape) -> np.ndarray:
    """int64 array (2, seq_len): row 0 is ``kmin``, row 1 ``kmax``, the first and last key
    query i sees (``kmax < kmin``: none, written ``0, -1``). Read-only, cached per shape."""
    return _ranges(shape)


def allowed(shape, r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
    """Boolean (r1 - r0, c1 - c0): which keys ``c0..c1-1`` queries ``r0..r1-1`` see."""
    kmin, kmax = key_ranges(shape)
    cols = np.arange(c0, c1)[None, :]
    return (cols >= kmin[r0:r1, None]) & (cols <= kmax[r0:r1, None])


def pair_count(shape) -> int:
    """Query-key pairs the mask allows, per (batch, head)."""
    kmin, kmax = key_ranges(shape)
    return int((kmax - kmin + 1).sum())


def block_ranges(shape, block_q: int, block_kv: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The block view of the whole mask, vectorized: for each Q block i, the K/V blocks
    ``lo[i] <= j < hi[i]`` it visits (``kv_block_range``), and for each K/V block whether any
    Q block visits it (``q_block_range`` not empty)."""
    kmin, kmax = key_ranges(shape)
    n_q, n_k = shape.seq_len, shape.n_kv
    r0 = np.arange(0, n_q, block_q, dtype=np.int64)
    last = np.minimum(r0 + block_q, n_q) - 1
    first = np.minimum(np.maximum(r0, np.searchsorted(kmax, 0)), n_q - 1)
    seen = kmax[last] >= 0
    lo = np.where(seen, kmin[first] // block_kv, 0)
    hi = np.where(seen, kmax[last] // block_kv + 1, 0)
    c0 = np.arange(0, n_k, block_kv, dtype=np.int64)
    c1 = np.minimum(c0 + block_kv, n_k)
    a = np.searchsorted(kmax, c0)
    b = np.searchsorted(kmin, c1 - 1, side="right") - 1
    return lo, hi, a <= b


def seen_counts(shape) -> tuple[int, int]:
    """(queries that see at least one key, keys at least one query sees), per (batch, head):
    the rows of Q and of K/V an exact algorithm must read."""
    kmin, kmax = key_ranges(shape)
    nonempty = kmax >= kmin
    if not nonempty.any():
        return 0, 0
    first = int(np.argmax(nonempty))  # the rows' intervals overlap or touch: one key range
    return int(nonempty.sum()), int(kmax[-1] - kmin[first] + 1)


@njit(inline="always")
def kv_block_range(kmin, kmax, r0, r1, bc):
    """First and one-past-last K/V block (of ``bc`` keys) that Q rows ``r0..r1-1`` visit;
    equal when they see no key."""
    if kmax[r1 - 1] < 0:
        return 0, 0
    first = max(r0, np.searchsorted(kmax, 0))  # rows that see no key are a prefix
    return kmin[first] // bc, kmax[r1 - 1] // bc + 1


@njit(inline="always")
def q_block_range(kmin, kmax, c0, c1, br):
    """First and one-past-last Q block (of ``br`` rows) that visits keys ``c0..c1-1``."""
    a = np.searchsorted(kmax, c0)  # first row whose interval reaches c0
    b = np.searchsorted(kmin, c1 - 1, side="right") - 1  # last row starting by c1 - 1
    if a > b:
        return 0, 0
    return a // br, b // br + 1


@njit(inline="always")
def block_full(kmin, kmax, r0, r1, c0, c1):
    """Whether every query of rows ``r0..r1-1`` sees every key of ``c0..c1-1``."""
    return kmin[r1 - 1] <= c0 and kmax[r0] >= c1 - 1


@dataclass(frozen=True, slots=True)
class BlockSums:
    """Sums over the (i, j) block pairs a flash schedule visits, per (batch, query head).

    A pair is visited iff some query of Q block i sees some key of K/V block j
    (``kernels.mask``: causal, window, segments, kv_seq_len). Without a mask every pair is.

    Attributes
    ----------
    row_visits : int
        sum over visited (i, j) of r_i (rows of Q block i): the rows of Q-side tensors moved
        when they travel once per pair. No mask: Tc * N.
    col_visits : int
        sum over visited (i, j) of c_j (rows of K block j): the rows of K and V moved when they
        travel once per pair. No mask: Tr * N_kv.
    area : int
        sum over visited (i, j) of r_i * c_j: scores computed (partial tiles count whole).
        No mask: N N_kv; causal: at least N(N+1)/2.
    pairs : int
        number of visited (i, j): the outer-loop steps of FA2's CTAs. No mask: Tr * Tc.
    q_rows : int
        rows of the Q blocks that visit at least one K/V block (N unless some queries see no
        key: ``kv_seq_len < seq_len`` with causal).
    kv_rows : int
        rows of the K/V blocks at least one Q block visits (N_kv unless a window or
        ``kv_seq_len`` leaves keys no query sees).
    kv_blocks : int
        number of those K/V blocks.
    full_pairs : int
        visited (i, j) in which every query sees every key; the other ``pairs - full_pairs``
        are partial: computed whole and masked element by element. No mask: all of them.
    """

    row_visits: int
    col_visits: int
    area: int
    pairs: int
    q_rows: int
    kv_rows: int
    kv_blocks: int
    full_pairs: int


def block_sums(shape, block_q: int, block_kv: int) -> BlockSums:
    """``BlockSums`` for one (batch, head): one term per Q block i, each in closed form.

    Notes
    -----
    Q block i holds r_i = min(Br, N - i Br) rows and visits the contiguous K/V blocks
    lo_i <= j < hi_i (``kernels.mask.block_ranges``: no mask, 0 and Tc; causal, 0 and
    min(Tc, floor((e_i - 1) / Bc) + 1) with e_i = i Br + r_i), whose rows add up to
    C_i = min(N_kv, hi_i Bc) - lo_i Bc. So row_visits = sum_i (hi_i - lo_i) r_i, col_visits =
    sum_i C_i, area = sum_i r_i C_i and pairs = sum_i (hi_i - lo_i). A block larger than N is
    one partial block: r_0 = N (or c_0 = N_kv), as in a ragged last block.
    """
    n, nk, br, bc = shape.seq_len, shape.n_kv, block_q, block_kv
    t_q, t_kv = math.ceil(n / br), math.ceil(nk / bc)
    if not shape.causal and not shape.variant:
        return BlockSums(t_kv * n, t_q * nk, n * nk, t_q * t_kv, n, nk, t_kv, t_q * t_kv)
    lo, hi, kv_seen = block_ranges(shape, br, bc)
    kmin, kmax = key_ranges(shape)
    r0 = np.arange(t_q, dtype=np.int64) * br
    # full blocks of row block i: j Bc >= kmin(last row) and the block's last key <= kmax(r0)
    first_full = -(-kmin[np.minimum(r0 + br, n) - 1] // bc)
    top = kmax[r0]
    last_full = np.where(top >= nk - 1, t_kv - 1, (top + 1) // bc - 1)
    full = np.maximum(0, np.minimum(last_full, hi - 1) - np.maximum(first_full, lo) + 1)
    rows = np.minimum(br, n - np.arange(t_q, dtype=np.int64) * br)
    visits = hi - lo
    cols = np.where(visits > 0, np.minimum(nk, hi * bc) - lo * bc, 0)
    kv_len = np.minimum(bc, nk - np.arange(t_kv, dtype=np.int64) * bc)
    return BlockSums(
        int(visits @ rows),
        int(cols.sum()),
        int(rows @ cols),
        int(visits.sum()),
        int(rows[visits > 0].sum()),
        int(kv_len[kv_seen].sum()),
        int(kv_seen.sum()),
        int(full.sum()),
    )
