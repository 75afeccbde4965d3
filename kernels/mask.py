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

A row that sees no key (only when ``kv_seq_len < seq_len``, causal: its own position lies
before the first key) has ``kmin = 0, kmax = -1``. Such rows form a prefix, so both arrays
stay monotone; schedules write O = 0 and logsumexp = +inf for them, as flash-attn does.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import njit

__all__ = [
    "allowed",
    "block_full",
    "block_ranges",
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
