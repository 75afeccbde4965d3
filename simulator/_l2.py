"""The L2 model: a fully associative LRU cache with write-back, in jitted array code.

Lines are tracked in granules of 64 lines (one uint64 bit per line), so that a tile of a few KiB
costs one or two look-ups rather than dozens. A granule is the unit of replacement (the least
recently used granule is evicted whole); presence and dirtiness are kept per line, so a line is
fetched from HBM once and written back only if it was written. Capacity is
``l2_bytes // granule_bytes`` granules.

State lives in plain arrays (``new_l2``) so the engine and its pure-Python oracle can share the
definition of what it holds: hash table (open addressing, linear probing, backward-shift delete),
per-granule key, present mask, dirty mask, owner tensor, and an LRU doubly linked list.
"""

from __future__ import annotations

import numpy as np
from numba import njit

LINES_PER_GRANULE = 64
EMPTY = -1
# indices into the int64 header array
H_HEAD, H_TAIL, H_COUNT, H_CAP, H_MASK, H_LINE, H_GRANULE = range(7)


def new_l2(l2_bytes: int, line_bytes: int):
    """Empty cache state for an L2 of ``l2_bytes`` with ``line_bytes`` lines."""
    granule = line_bytes * LINES_PER_GRANULE
    cap = max(1, l2_bytes // granule)
    size = 1 << (2 * cap).bit_length()  # hash table at most half full
    head = np.array([EMPTY, EMPTY, 0, cap, size - 1, line_bytes, granule], np.int64)
    return (
        head,
        np.full(size, EMPTY, np.int64),  # table: granule key at each position
        np.zeros(size, np.int64),  # table: slot at each position
        np.zeros(cap, np.int64),  # slot -> granule key
        np.zeros(cap, np.uint64),  # slot -> present lines
        np.zeros(cap, np.uint64),  # slot -> dirty lines
        np.zeros(cap, np.int64),  # slot -> tensor
        np.full(cap, EMPTY, np.int64),  # slot -> previous (more recent) slot
        np.full(cap, EMPTY, np.int64),  # slot -> next (less recent) slot
    )


@njit(inline="always")
def _home(key, mask):
    x = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
    return np.int64(x >> np.uint64(33)) & mask


@njit(inline="always")
def popcount(x):
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@njit(inline="always")
def _unlink(s, head, prev, nxt):
    p, n = prev[s], nxt[s]
    if p != EMPTY:
        nxt[p] = n
    else:
        head[H_HEAD] = n
    if n != EMPTY:
        prev[n] = p
    else:
        head[H_TAIL] = p


@njit(inline="always")
def _push_front(s, head, prev, nxt):
    prev[s] = EMPTY
    nxt[s] = head[H_HEAD]
    if head[H_HEAD] != EMPTY:
        prev[head[H_HEAD]] = s
    head[H_HEAD] = s
    if head[H_TAIL] == EMPTY:
        head[H_TAIL] = s


@njit
def _table_delete(key, head, tkey, tslot):
    mask = head[H_MASK]
    i = _home(key, mask)
    while tkey[i] != key:
        i = (i + 1) & mask
    j = i
    while True:
        j = (j + 1) & mask
        if tkey[j] == EMPTY:
            break
        k = _home(tkey[j], mask)
        # keep entry j where it is if its home lies cyclically in (i, j]
        if (i < j and i < k <= j) or (j < i and (k > i or k <= j)):
            continue
        tkey[i] = tkey[j]
        tslot[i] = tslot[j]
        i = j
    tkey[i] = EMPTY


@njit
def _granule_slot(key, tensor, l2, wb_by_tensor):
    """Slot of granule ``key``, made most recent; inserted (evicting the LRU one) if absent.
    Returns (slot, bytes written back by the eviction)."""
    head, tkey, tslot, gkey, present, dirty, owner, prev, nxt = l2
    mask = head[H_MASK]
    i = _home(key, mask)
    while tkey[i] != EMPTY:
        if tkey[i] == key:
            s = tslot[i]
            if head[H_HEAD] != s:
                _unlink(s, head, prev, nxt)
                _push_front(s, head, prev, nxt)
            return s, 0
        i = (i + 1) & mask
    wb = 0
    if head[H_COUNT] < head[H_CAP]:
        s = head[H_COUNT]
        head[H_COUNT] += 1
    else:  # evict the least recently used granule, writing back its dirty lines
        s = head[H_TAIL]
        wb = popcount(dirty[s]) * head[H_LINE]
        wb_by_tensor[owner[s]] += wb
        _unlink(s, head, prev, nxt)
        _table_delete(gkey[s], head, tkey, tslot)
        i = _home(key, mask)
        while tkey[i] != EMPTY:
            i = (i + 1) & mask
    tkey[i] = key
    tslot[i] = s
    gkey[s] = key
    present[s] = np.uint64(0)
    dirty[s] = np.uint64(0)
    owner[s] = tensor
    _push_front(s, head, prev, nxt)
    return s, wb


@njit
def access(l2, op_is_read, op_writes, tensor, start, end, wb_by_tensor):
    """One contiguous byte range [start, end) of ``tensor`` through the L2.

    ``op_is_read``: the bytes must be present (LOAD, and REDUCE's read-modify-write);
    ``op_writes``: the lines become dirty (STORE, REDUCE). Writes allocate without fetching.
    Returns (missed bytes read from HBM, bytes written back by evictions, newly dirtied bytes).
    """
    head = l2[0]
    present, dirty = l2[4], l2[5]
    line, gran = head[H_LINE], head[H_GRANULE]
    miss = 0
    wb = 0
    dirtied = 0
    if end <= start:  # an empty range touches no line
        return miss, wb, dirtied
    g0, g1 = start // gran, (end - 1) // gran
    for g in range(g0, g1 + 1):
        gs = g * gran
        lo, hi = max(start, gs), min(end, gs + gran)
        b0, b1 = (lo - gs) // line, (hi - 1 - gs) // line
        nbits = b1 - b0 + 1
        req = (
            np.uint64(0xFFFFFFFFFFFFFFFF)
            if nbits == 64
            else ((np.uint64(1) << np.uint64(nbits)) - np.uint64(1)) << np.uint64(b0)
        )
        s, w = _granule_slot((tensor << 44) | g, tensor, l2, wb_by_tensor)
        wb += w
        if op_is_read:
            missing = req & ~present[s]
            if missing == req:
                miss += hi - lo
            elif missing != np.uint64(0):
                for b in range(b0, b1 + 1):
                    if (missing >> np.uint64(b)) & np.uint64(1):
                        ls = gs + b * line
                        miss += min(hi, ls + line) - max(lo, ls)
        present[s] |= req
        if op_writes:
            dirtied += popcount(req & ~dirty[s]) * line
            dirty[s] |= req
    return miss, wb, dirtied


@njit
def dirty_bytes(l2):
    """Bytes in dirty lines still held by the cache."""
    head, dirty = l2[0], l2[5]
    total = 0
    for s in range(head[H_COUNT]):
        total += popcount(dirty[s])
    return total * head[H_LINE]
