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

A block mask (``shape.block_mask``, block-sparse attention) is the one mask that is not an
interval per row: keys are kept or dropped by blocks of its own grain. ``key_ranges`` stays
the rows' envelope and ``keep_table`` holds the kept blocks as a summed-area table, so any
tile asks in O(1) how many of the mask blocks it overlaps are kept (``tile_state``: skipped,
partial or full). The tile loops walk their envelope range and skip the tiles no kept block
reaches (``kv_tiles``, ``q_tiles`` narrow the range to the first and last visited tile); a
shape without a block mask has one kept block as large as any tensor, so the same code runs.

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

from flashio.simulator.errors import ShapeError

__all__ = [
    "BlockSums",
    "allowed",
    "block_full",
    "block_ranges",
    "block_sums",
    "keep_table",
    "key_ranges",
    "kv_block_range",
    "kv_tiles",
    "pair_count",
    "q_block_range",
    "q_tiles",
    "seen_counts",
    "tile_state",
    "tile_states",
]

# the grain of "no block mask": one kept block larger than any tensor (sizes < 2**31)
NO_GRAIN = 1 << 40
_ALL_KEPT = np.array([[0, 0], [0, 1]], np.int64)
_ALL_KEPT.setflags(write=False)
SKIP, PARTIAL, FULL = 0, 1, 2  # tile_state


# the most query rows the tables of ``key_ranges`` cover: 16 bytes a row, 1 GiB at the limit
# (a context of 67M tokens, beyond any run today; the closed forms of unmasked shapes take any N)
MAX_TABLE_ROWS = 1 << 26


@lru_cache(maxsize=16)
def _ranges(shape) -> np.ndarray:
    n_q, n_k = shape.seq_len, shape.n_kv
    if n_q > MAX_TABLE_ROWS:
        raise ShapeError(
            f"seq_len={n_q:,}: the tracers keep each query's first and last key, 16 bytes a "
            f"row ({16 * n_q / 2**30:,.0f} GiB here); they take up to {MAX_TABLE_ROWS:,} rows "
            "(2**26). Simulate a shorter sequence; the closed forms of an unmasked shape "
            "(flashio tiling, analysis.io_counts) take any length"
        )
    out = np.empty((2, n_q), np.int64)
    lo, hi = out  # views: the tables are filled in place
    pos = np.arange(n_k - n_q, n_k, dtype=np.int64)  # query i's position among the keys
    lo[:] = 0
    hi[:] = n_k - 1
    if shape.causal:
        np.minimum(hi, pos, out=hi)
    if shape.window is not None:
        left, right = shape.window_bounds
        np.maximum(lo, pos - left, out=lo)
        np.minimum(hi, pos + right, out=hi)
    if shape.segments is not None:
        ends = np.cumsum(np.asarray(shape.segments, np.int64))
        seg = np.searchsorted(ends, np.arange(n_q, dtype=np.int64), side="right")
        np.maximum(lo, ends[seg] - np.asarray(shape.segments, np.int64)[seg], out=lo)
        np.minimum(hi, ends[seg] - 1, out=hi)
    empty = hi < lo
    lo[empty], hi[empty] = 0, -1
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
    seen = (cols >= kmin[r0:r1, None]) & (cols <= kmax[r0:r1, None])
    bm = shape.block_mask
    if bm is not None:
        rows = np.arange(r0, r1) // bm.block_q
        seen &= bm.array[rows[:, None], cols // bm.block_kv]
    return seen


def pair_count(shape) -> int:
    """Query-key pairs the mask allows, per (batch, head)."""
    kmin, kmax = key_ranges(shape)
    if shape.block_mask is None:
        return int((kmax - kmin + 1).sum())
    return int(_kept_in(shape, kmin, kmax).sum())


def _kept_in(shape, kmin, kmax) -> np.ndarray:
    """Per row: the keys of ``kmin..kmax`` its block-mask row keeps (0 for an empty row),
    from the kept blocks' prefix sums (keys below x: whole kept blocks, then x's own)."""
    bm = shape.block_mask
    kept = np.zeros((bm.q_blocks, bm.kv_blocks + 1), np.int64)  # a zero block past the end
    kept[:, :-1] = bm.array
    prefix = np.zeros_like(kept)
    np.cumsum(kept[:, :-1], axis=1, out=prefix[:, 1:])
    g = np.arange(shape.seq_len) // bm.block_q

    def below(x):  # kept keys < x of each row's mask row
        j = x // bm.block_kv
        return bm.block_kv * prefix[g, j] + (x - j * bm.block_kv) * kept[g, j]

    return below(np.maximum(kmax + 1, kmin)) - below(kmin)


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
    if shape.block_mask is not None:
        return _seen_counts_blocks(shape, kmin, kmax)
    nonempty = kmax >= kmin
    if not nonempty.any():
        return 0, 0
    first = int(np.argmax(nonempty))  # the rows' intervals overlap or touch: one key range
    return int(nonempty.sum()), int(kmax[-1] - kmin[first] + 1)


def _seen_counts_blocks(shape, kmin, kmax) -> tuple[int, int]:
    """``seen_counts`` with a block mask: rows with a kept key in their interval, and keys
    that some row of a query block keeping their key block has in its interval (the rows of
    one query block cover one key interval, their union: the rows' intervals touch)."""
    bm = shape.block_mask
    rows = int((_kept_in(shape, kmin, kmax) > 0).sum())
    seen = np.zeros(shape.n_kv + 1, np.int64)  # a difference array over keys
    kept = bm.array
    for g in range(bm.q_blocks):
        r0, r1 = g * bm.block_q, min((g + 1) * bm.block_q, shape.seq_len)
        nonempty = np.nonzero(kmax[r0:r1] >= kmin[r0:r1])[0]
        if not len(nonempty):
            continue
        a, b = kmin[r0 + nonempty[0]], kmax[r1 - 1] + 1
        for j in np.nonzero(kept[g])[0]:
            c0, c1 = max(a, j * bm.block_kv), min(b, (j + 1) * bm.block_kv)
            if c0 < c1:
                seen[c0] += 1
                seen[c1] -= 1
    return rows, int((np.cumsum(seen[:-1]) > 0).sum())


@lru_cache(maxsize=16)
def _keep(shape) -> tuple[np.ndarray, int, int]:
    bm = shape.block_mask
    if bm is None:
        return _ALL_KEPT, NO_GRAIN, NO_GRAIN
    sat = np.zeros((bm.q_blocks + 1, bm.kv_blocks + 1), np.int64)
    sat[1:, 1:] = bm.array.cumsum(0).cumsum(1)
    sat.setflags(write=False)
    return sat, bm.block_q, bm.block_kv


def keep_table(shape) -> tuple[np.ndarray, int, int]:
    """The block mask for the tracers: (summed-area table of kept blocks, (q_blocks + 1,
    kv_blocks + 1) int64; block_q; block_kv). Without a block mask one kept block of grain
    ``NO_GRAIN``. Read-only, cached per shape."""
    return _keep(shape)


@njit(inline="always")
def tile_state(kmin, kmax, keep, mq, mk, r0, r1, c0, c1):
    """SKIP (0) when no kept mask block overlaps rows ``r0..r1-1`` x keys ``c0..c1-1``,
    FULL (2) when every overlapped block is kept and every row sees every key
    (``block_full``), else PARTIAL (1): computed whole and masked element by element. The
    loops only ask for tiles their rows' intervals reach."""
    a, b = r0 // mq, (r1 - 1) // mq + 1
    c, e = c0 // mk, (c1 - 1) // mk + 1
    kept = keep[b, e] - keep[a, e] - keep[b, c] + keep[a, c]
    if kept == 0:
        return 0
    if kept == (b - a) * (e - c) and block_full(kmin, kmax, r0, r1, c0, c1):
        return 2
    return 1


@njit(inline="always")
def kv_tiles(kmin, kmax, keep, mq, mk, r0, r1, bc, nk):
    """``kv_block_range`` narrowed to its first and last tile the block mask keeps: the K/V
    blocks (of ``bc`` of the ``nk`` keys) Q rows ``r0..r1-1`` visit, tiles between them
    included (each still asks ``tile_state``); equal when they visit none."""
    lo, hi = kv_block_range(kmin, kmax, r0, r1, bc)
    while (
        lo < hi
        and tile_state(kmin, kmax, keep, mq, mk, r0, r1, lo * bc, min(lo * bc + bc, nk)) == 0
    ):
        lo += 1
    while (
        hi > lo
        and tile_state(kmin, kmax, keep, mq, mk, r0, r1, (hi - 1) * bc, min(hi * bc, nk)) == 0
    ):
        hi -= 1
    return lo, hi


@njit(inline="always")
def q_tiles(kmin, kmax, keep, mq, mk, c0, c1, br, n):
    """``q_block_range`` narrowed as ``kv_tiles``: the Q blocks (of ``br`` of the ``n`` rows)
    that visit keys ``c0..c1-1``."""
    lo, hi = q_block_range(kmin, kmax, c0, c1, br)
    while (
        lo < hi
        and tile_state(kmin, kmax, keep, mq, mk, lo * br, min(lo * br + br, n), c0, c1) == 0
    ):
        lo += 1
    while (
        hi > lo
        and tile_state(kmin, kmax, keep, mq, mk, (hi - 1) * br, min(hi * br, n), c0, c1) == 0
    ):
        hi -= 1
    return lo, hi


def tile_states(shape, block_q: int, block_kv: int) -> np.ndarray:
    """(Tr, Tc) int8: each tile's ``tile_state`` where the rows' intervals reach it
    (``block_ranges``), SKIP elsewhere: the tiles every flash schedule visits, which the
    CUDA kernels read for a block mask."""
    kmin, kmax = key_ranges(shape)
    keep, mq, mk = keep_table(shape)
    lo, hi, _ = block_ranges(shape, block_q, block_kv)
    out = np.zeros((len(lo), math.ceil(shape.n_kv / block_kv)), np.int8)
    _fill_states(
        out, kmin, kmax, keep, mq, mk, lo, hi, block_q, block_kv, shape.seq_len, shape.n_kv
    )
    return out


@njit(cache=True)
def _fill_states(out, kmin, kmax, keep, mq, mk, lo, hi, br, bc, n, nk):
    for i in range(out.shape[0]):
        r0, r1 = i * br, min((i + 1) * br, n)
        for j in range(lo[i], hi[i]):
            out[i, j] = tile_state(kmin, kmax, keep, mq, mk, r0, r1, j * bc, min(j * bc + bc, nk))


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
    if shape.block_mask is not None:
        return _block_sums_of(tile_states(shape, br, bc), n, nk, br, bc)
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


def _block_sums_of(states: np.ndarray, n: int, nk: int, br: int, bc: int) -> BlockSums:
    """``BlockSums`` summed tile by tile over a ``tile_states`` table (a block mask's visited
    tiles need not be contiguous)."""
    t_q, t_kv = states.shape
    rows = np.minimum(br, n - np.arange(t_q, dtype=np.int64) * br)
    cols = np.minimum(bc, nk - np.arange(t_kv, dtype=np.int64) * bc)
    visited = states > 0
    kv_seen = visited.any(axis=0)
    return BlockSums(
        int(rows @ visited.sum(axis=1)),
        int((visited @ cols).sum()),
        int(rows @ visited @ cols),
        int(visited.sum()),
        int(rows[visited.any(axis=1)].sum()),
        int(cols[kv_seen].sum()),
        int(kv_seen.sum()),
        int((states == 2).sum()),
    )
