"""The L2 model: a fully associative LRU cache with write-back, in jitted array code.

Lines are tracked in granules of 64 lines (one 64-bit mask per granule), so that a tile of a few
KiB costs one or two look-ups rather than dozens. A granule is the unit of replacement (the least
recently used granule is evicted whole); presence and dirtiness are kept per line, so a line is
fetched from HBM once and written back only if it was written. Capacity is
``l2_bytes // granule_bytes`` granules (docs/model.md).

All state lives in one flat int64 array (``new_l2``): a header, a hash table (open addressing,
linear probing, backward-shift deletion) from granule key to slot, and per slot the granule key,
present mask, dirty mask, owner tensor and the links of an LRU doubly linked list. One array,
not several, because every array a jitted call receives costs reference counting on the hot path.
"""

from __future__ import annotations

import numpy as np
from numba import njit

LINES_PER_GRANULE = 64
EMPTY = -1
# header fields
H_HEAD, H_TAIL, H_COUNT, H_CAP, H_MASK, H_LINE, H_GRANULE = range(7)
# offsets of the sections, stored in the header after the fields above
H_TKEY, H_TSLOT, H_GKEY, H_PRESENT, H_DIRTY, H_OWNER, H_PREV, H_NEXT = range(7, 15)
HEADER = 15


def new_l2(l2_bytes: int, line_bytes: int) -> np.ndarray:
    """Empty cache state for an L2 of ``l2_bytes`` with ``line_bytes`` lines."""
    granule = line_bytes * LINES_PER_GRANULE
    cap = max(1, l2_bytes // granule)
    size = 1 << (2 * cap).bit_length()  # hash table at most half full
    sections = [size, size, cap, cap, cap, cap, cap, cap]
    offsets = np.cumsum([HEADER, *sections[:-1]])
    state = np.zeros(HEADER + sum(sections), np.int64)
    state[:HEADER] = [EMPTY, EMPTY, 0, cap, size - 1, line_bytes, granule, *offsets]
    state[offsets[0] : offsets[0] + size] = EMPTY  # table keys
    state[offsets[6] : offsets[6] + 2 * cap] = EMPTY  # prev and next links
    return state


@njit(inline="always", _nrt=False)
def _home(key, mask):
    x = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
    return np.int64(x >> np.uint64(33)) & mask


@njit(inline="always", _nrt=False)
def popcount(x):
    x = np.uint64(x)
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@njit(inline="always", _nrt=False)
def _unlink(st, s):
    prev, nxt = st[H_PREV], st[H_NEXT]
    p, n = st[prev + s], st[nxt + s]
    if p != EMPTY:
        st[nxt + p] = n
    else:
        st[H_HEAD] = n
    if n != EMPTY:
        st[prev + n] = p
    else:
        st[H_TAIL] = p


@njit(inline="always", _nrt=False)
def _push_front(st, s):
    prev, nxt = st[H_PREV], st[H_NEXT]
    st[prev + s] = EMPTY
    st[nxt + s] = st[H_HEAD]
    if st[H_HEAD] != EMPTY:
        st[prev + st[H_HEAD]] = s
    st[H_HEAD] = s
    if st[H_TAIL] == EMPTY:
        st[H_TAIL] = s


@njit(_nrt=False)
def _table_delete(st, key):
    mask, tkey, tslot = st[H_MASK], st[H_TKEY], st[H_TSLOT]
    i = _home(key, mask)
    while st[tkey + i] != key:
        i = (i + 1) & mask
    j = i
    while True:
        j = (j + 1) & mask
        if st[tkey + j] == EMPTY:
            break
        k = _home(st[tkey + j], mask)
        # keep entry j where it is if its home lies cyclically in (i, j]
        if (i < j and i < k <= j) or (j < i and (k > i or k <= j)):
            continue
        st[tkey + i] = st[tkey + j]
        st[tslot + i] = st[tslot + j]
        i = j
    st[tkey + i] = EMPTY


@njit(_nrt=False)
def _granule_slot(st, key, tensor, wb_table, wb_col):
    """Slot of granule ``key``, made most recent; inserted (evicting the LRU one) if absent.
    Returns (slot, bytes written back by the eviction)."""
    mask, tkey, tslot = st[H_MASK], st[H_TKEY], st[H_TSLOT]
    i = _home(key, mask)
    while st[tkey + i] != EMPTY:
        if st[tkey + i] == key:
            s = st[tslot + i]
            if st[H_HEAD] != s:
                _unlink(st, s)
                _push_front(st, s)
            return s, 0
        i = (i + 1) & mask
    wb = 0
    if st[H_COUNT] < st[H_CAP]:
        s = st[H_COUNT]
        st[H_COUNT] += 1
    else:  # evict the least recently used granule, writing back its dirty lines
        s = st[H_TAIL]
        wb = popcount(st[st[H_DIRTY] + s]) * st[H_LINE]
        wb_table[st[st[H_OWNER] + s], wb_col] += wb
        _unlink(st, s)
        _table_delete(st, st[st[H_GKEY] + s])
        i = _home(key, mask)
        while st[tkey + i] != EMPTY:
            i = (i + 1) & mask
    st[tkey + i] = key
    st[tslot + i] = s
    st[st[H_GKEY] + s] = key
    st[st[H_PRESENT] + s] = 0
    st[st[H_DIRTY] + s] = 0
    st[st[H_OWNER] + s] = tensor
    _push_front(st, s)
    return s, wb


@njit(_nrt=False)
def access(st, op_is_read, op_writes, tensor, start, end, wb_table, wb_col):
    """One contiguous byte range [start, end) of ``tensor`` through the L2.

    ``op_is_read``: the bytes must be present (LOAD, and REDUCE's read-modify-write);
    ``op_writes``: the lines become dirty (STORE, REDUCE). Writes allocate without fetching.
    Bytes written back by evictions are added to ``wb_table[owner tensor, wb_col]``.
    Returns (missed bytes read from HBM, bytes written back by evictions, newly dirtied bytes).
    """
    miss = 0
    wb = 0
    dirtied = 0
    if end <= start:  # an empty range touches no line
        return miss, wb, dirtied
    line, gran = st[H_LINE], st[H_GRANULE]
    present, dirty = st[H_PRESENT], st[H_DIRTY]
    for g in range(start // gran, (end - 1) // gran + 1):
        gs = g * gran
        lo, hi = max(start, gs), min(end, gs + gran)
        b0, b1 = (lo - gs) // line, (hi - 1 - gs) // line
        nbits = b1 - b0 + 1
        req = (
            np.uint64(0xFFFFFFFFFFFFFFFF)
            if nbits == 64
            else ((np.uint64(1) << np.uint64(nbits)) - np.uint64(1)) << np.uint64(b0)
        )
        s, w = _granule_slot(st, (tensor << 44) | g, tensor, wb_table, wb_col)
        wb += w
        have = np.uint64(st[present + s])
        if op_is_read:
            missing = req & ~have
            if missing == req:
                miss += hi - lo
            elif missing != np.uint64(0):
                for b in range(b0, b1 + 1):
                    if (missing >> np.uint64(b)) & np.uint64(1):
                        ls = gs + b * line
                        miss += min(hi, ls + line) - max(lo, ls)
        st[present + s] = np.int64(have | req)
        if op_writes:
            was = np.uint64(st[dirty + s])
            dirtied += popcount(req & ~was) * line
            st[dirty + s] = np.int64(was | req)
    return miss, wb, dirtied


@njit(_nrt=False)
def dirty_bytes(st):
    """Bytes in dirty lines still held by the cache."""
    total = 0
    for s in range(st[H_COUNT]):
        total += popcount(st[st[H_DIRTY] + s])
    return total * st[H_LINE]
