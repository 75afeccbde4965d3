"""The L2 model: a fully associative LRU cache with write-back, in jitted array code.

Lines are tracked in granules of 64 lines (one 64-bit mask per granule), so that a tile of a few
KiB costs one or two look-ups rather than dozens. A granule is the unit of replacement (the least
recently used granule is evicted whole); presence and dirtiness are kept per line, so a line is
fetched from HBM once and written back only if it was written. Capacity is
``l2_bytes // granule_bytes`` granules (docs/model.md).

The state (``new_l2``) is a tuple of int64 arrays laid out for the CPU's caches, since the cost of
a look-up is the cache lines it touches:

- ``scalars``: counters (see the column names below);
- ``table``: a hash table of (granule key, slot) pairs, open addressing with linear probing and
  backward-shift deletion;
- ``slots``: one 64-byte row per slot: granule key, present mask, dirty mask, owner tensor, the
  time of its last use and, for fills in flight (``ModelOptions(pending_fills=True)``), the mask
  of lines whose fill lands at the row's fill time, the lines the current request misses, and
  that time (a float, read through ``fills``, a float view of the same rows);
- ``queue``: (use time, slot) in order of use. Its first entry whose time is still its slot's is
  the least recently used granule, so a hit writes its own row and appends to the queue instead
  of rewiring a linked list (exact LRU). The queue is compacted when it fills.

The jitted functions here and in the engine are compiled with ``HOT``: ``_nrt=False`` (they
allocate nothing, and without reference counting a call that passes arrays costs a few cycles
instead of atomic increments and decrements) and numba's ``error_model="numpy"`` (a division
does not check its divisor for zero to raise Python's error: the engine divides only by the
spec's rates, validated positive; the same figures, 15-17% faster, docs/model.md "Speed").
"""

from __future__ import annotations

import numpy as np
from numba import njit

HOT = {"_nrt": False, "error_model": "numpy"}  # the hot loop's compile options (see above)
LINES_SHIFT = 6
LINES_PER_GRANULE = 1 << LINES_SHIFT
EMPTY = -1
# scalars: slots in use, capacity, table mask, log2 of the line bytes, use clock, queue state
COUNT, CAP, MASK, LINE_SHIFT, CLOCK, Q_HEAD, Q_TAIL, Q_CAP = range(8)
# columns of a slot's row; FILL_AT is a float (the state's ``fills`` view of the rows)
KEY, PRESENT, DIRTY, OWNER, USED, FILLING, PENDING, FILL_AT = range(8)
ROW = 8  # int64 per row: 64 bytes, one cache line
# a queue entry is use time << SLOT_BITS | slot: up to 16M granules (128 GiB of L2) and 2**39
# (5.5e11) granule uses per run, over 500x those of FA2 at N = 128k
SLOT_BITS = 24
QUEUE_PER_SLOT = 4  # queue room per slot; compaction leaves at most one entry per slot


def _aligned(rows: int, cols: int, fill: int) -> np.ndarray:
    """A (rows, cols) int64 array starting on a 64-byte boundary."""
    raw = np.full(rows * cols + 8, fill, np.int64)
    skip = (-raw.ctypes.data % 64) // 8
    return raw[skip : skip + rows * cols].reshape(rows, cols)


def new_l2(l2_bytes: int, line_bytes: int):
    """Empty cache state for an L2 of ``l2_bytes`` with ``line_bytes`` lines (a power of two):
    (scalars, table, slots, queue, fills), ``fills`` the slots' rows seen as floats."""
    if line_bytes <= 0 or line_bytes & (line_bytes - 1):
        raise ValueError(f"L2 lines must be a power of two bytes, got {line_bytes}")
    cap = max(1, l2_bytes // (line_bytes * LINES_PER_GRANULE))
    if cap >= 1 << SLOT_BITS:
        raise ValueError(f"an L2 of {l2_bytes} B has more than 2**{SLOT_BITS} granules")
    size = 1 << (2 * cap).bit_length()  # hash table at most half full
    qcap = QUEUE_PER_SLOT * cap
    scalars = np.array([0, cap, size - 1, line_bytes.bit_length() - 1, 0, 0, 0, qcap], np.int64)
    table = _aligned(size, 2, EMPTY)
    slots = _aligned(cap, ROW, 0)
    return scalars, table, slots, np.zeros(qcap, np.int64), slots.view(np.float64)


@njit(inline="always", **HOT)
def _home(key, mask):
    # groups of 4 neighbouring granules of a tensor are scattered, and within a group they are
    # neighbours: a tile's granules share one cache line of the table (5% faster FA2 replay)
    x = np.uint64(key >> 2) * np.uint64(0x9E3779B97F4A7C15)
    return ((np.int64(x >> np.uint64(33)) << 2) | (key & 3)) & mask


@njit(inline="always", **HOT)
def popcount(x):
    x = np.uint64(x)
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return np.int64((x * np.uint64(0x0101010101010101)) >> np.uint64(56))


@njit(**HOT)
def _compact(sc, slots, queue):
    """Drop the queue's stale entries (slots used again since), keeping the others' order."""
    low = (1 << SLOT_BITS) - 1
    k = 0
    for i in range(sc[Q_HEAD], sc[Q_TAIL]):
        e = queue[i]
        if slots[e & low, USED] == e >> SLOT_BITS:
            queue[k] = e
            k += 1
    sc[Q_HEAD] = 0
    sc[Q_TAIL] = k


@njit(inline="always", **HOT)
def _use(sc, slots, queue, s):
    """Make slot s the most recently used."""
    clock = sc[CLOCK] + 1
    sc[CLOCK] = clock
    slots[s, USED] = clock
    if sc[Q_TAIL] == sc[Q_CAP]:
        _compact(sc, slots, queue)
    queue[sc[Q_TAIL]] = (clock << SLOT_BITS) | s
    sc[Q_TAIL] += 1


@njit(**HOT)
def _least_recent(sc, slots, queue):
    """Remove and return the least recently used slot (the cache is full)."""
    low = (1 << SLOT_BITS) - 1
    i = sc[Q_HEAD]
    while True:
        e = queue[i]
        i += 1
        s = e & low
        if slots[s, USED] == e >> SLOT_BITS:
            sc[Q_HEAD] = i
            return s


@njit(**HOT)
def _table_delete(table, mask, key):
    i = _home(key, mask)
    while table[i, 0] != key:
        i = (i + 1) & mask
    j = i
    while True:
        j = (j + 1) & mask
        if table[j, 0] == EMPTY:
            break
        k = _home(table[j, 0], mask)
        # keep entry j where it is if its home lies cyclically in (i, j]
        if (i < j and i < k <= j) or (j < i and (k > i or k <= j)):
            continue
        table[i, 0] = table[j, 0]
        table[i, 1] = table[j, 1]
        i = j
    table[i, 0] = EMPTY


@njit(inline="always", **HOT)
def _granule_slot(st, key, tensor, wb_table, wb_col):
    """Slot of granule ``key``, made most recent; inserted (evicting the LRU one) if absent.
    Returns (slot, bytes written back by the eviction)."""
    sc, table, slots, queue, _ = st
    mask = np.uint64(sc[MASK])
    i = np.uint64(_home(key, sc[MASK]))  # unsigned: an index that needs no wraparound
    while table[i, 0] != EMPTY:
        if table[i, 0] == key:
            s = np.uint64(table[i, 1])
            if slots[s, USED] != sc[CLOCK]:  # unless it is the most recent already
                _use(sc, slots, queue, s)
            return s, 0
        i = (i + np.uint64(1)) & mask
    wb = 0
    if sc[COUNT] < sc[CAP]:
        s = np.uint64(sc[COUNT])
        sc[COUNT] += 1
    else:  # evict the least recently used granule, writing back its dirty lines
        s = np.uint64(_least_recent(sc, slots, queue))
        wb = popcount(slots[s, DIRTY]) << sc[LINE_SHIFT]
        wb_table[slots[s, OWNER], wb_col] += wb
        _table_delete(table, sc[MASK], slots[s, KEY])
        i = np.uint64(_home(key, sc[MASK]))
        while table[i, 0] != EMPTY:
            i = (i + np.uint64(1)) & mask
    table[i, 0] = key
    table[i, 1] = s
    slots[s, KEY] = key
    slots[s, PRESENT] = 0
    slots[s, DIRTY] = 0
    slots[s, OWNER] = tensor
    slots[s, FILLING] = 0
    slots[s, PENDING] = 0
    _use(sc, slots, queue, s)
    return s, wb


@njit(inline="always", **HOT)
def access(
    st, op_is_read, op_writes, tensor, offset, rows, row_bytes, stride, wb_table, wb_col, fills
):  # fmt: skip
    """``rows`` byte ranges [offset + r * stride, + row_bytes) of ``tensor`` through the L2, in
    order.

    ``op_is_read``: the bytes must be present (LOAD, and REDUCE's read-modify-write);
    ``op_writes``: the lines become dirty (STORE, REDUCE). Writes allocate without fetching.
    Bytes written back by evictions are added to ``wb_table[owner tensor, wb_col]``.
    ``fills``: track fills in flight: a read that finds a line whose fill has not landed waits
    for it, and the lines a read misses are marked for ``fill_landing`` (docs/model.md, "L2").
    Inlined where it is called with ``fills`` a constant, so that without fills the replay
    runs none of their code.
    Returns (missed bytes read from HBM, bytes written back by evictions, newly dirtied bytes,
    the latest landing of a fill the hit lines wait for, -inf for none).
    """
    miss = 0
    wb = 0
    dirtied = 0
    wait = -np.inf
    slots, at = st[2], st[4]
    ls = st[0][LINE_SHIFT]  # lines and granules are powers of two: shifts, not divisions
    gshift = ls + LINES_SHIFT
    line = np.int64(1) << ls
    for r in range(rows if row_bytes > 0 else 0):  # an empty range touches no line
        start = offset + r * stride
        end = start + row_bytes
        for g in range(start >> gshift, ((end - 1) >> gshift) + 1):
            gs = g << gshift
            lo, hi = max(start, gs), min(end, gs + (line << LINES_SHIFT))
            b0, b1 = (lo - gs) >> ls, (hi - 1 - gs) >> ls
            nbits = b1 - b0 + 1
            req = (
                np.uint64(0xFFFFFFFFFFFFFFFF)
                if nbits == 64
                else ((np.uint64(1) << np.uint64(nbits)) - np.uint64(1)) << np.uint64(b0)
            )
            s, w = _granule_slot(st, (tensor << 44) | g, tensor, wb_table, wb_col)
            wb += w
            have = np.uint64(slots[s, PRESENT])
            if op_is_read:
                missing = req & ~have
                if missing == req:
                    miss += hi - lo
                elif missing != np.uint64(0):
                    for b in range(b0, b1 + 1):
                        if (missing >> np.uint64(b)) & np.uint64(1):
                            lstart = gs + (b << ls)
                            miss += min(hi, lstart + line) - max(lo, lstart)
                if fills:
                    if req & have & np.uint64(slots[s, FILLING]) != np.uint64(0):
                        wait = max(wait, at[s, FILL_AT])
                    slots[s, PENDING] = np.int64(np.uint64(slots[s, PENDING]) | missing)
            elif fills:  # written lines need no fill
                slots[s, FILLING] = np.int64(np.uint64(slots[s, FILLING]) & ~req)
            slots[s, PRESENT] = np.int64(have | req)
            if op_writes:
                was = np.uint64(slots[s, DIRTY])
                dirtied += popcount(req & ~was) << ls
                slots[s, DIRTY] = np.int64(was | req)
    return miss, wb, dirtied, wait


@njit(inline="always", **HOT)
def _find(st, key):
    """Slot of granule ``key``, or -1 where the cache does not hold it (LRU order unchanged)."""
    sc, table = st[0], st[1]
    mask = sc[MASK]
    i = _home(key, mask)
    while table[i, 0] != EMPTY:
        if table[i, 0] == key:
            return table[i, 1]
        i = (i + 1) & mask
    return -1


@njit(**HOT)
def fill_landing(st, tensor, offset, rows, row_bytes, stride, t, landing):
    """After a read issued at ``t`` that missed: its missed lines (marked by ``access``) land
    at ``landing``. A granule's earlier fills that landed by ``t`` are forgotten; ones still in
    flight merge with this one (the granule keeps one landing, the latest)."""
    slots, at = st[2], st[4]
    gshift = st[0][LINE_SHIFT] + LINES_SHIFT
    for r in range(rows if row_bytes > 0 else 0):
        start = offset + r * stride
        for g in range(start >> gshift, ((start + row_bytes - 1) >> gshift) + 1):
            s = _find(st, (tensor << 44) | g)
            if s < 0 or slots[s, PENDING] == 0:  # evicted meanwhile, or nothing missed
                continue
            keep = np.uint64(slots[s, FILLING]) if at[s, FILL_AT] > t else np.uint64(0)
            slots[s, FILLING] = np.int64(keep | np.uint64(slots[s, PENDING]))
            slots[s, PENDING] = 0
            at[s, FILL_AT] = max(at[s, FILL_AT], landing) if keep else landing


@njit(**HOT)
def shift_granules(st, shift):
    """Move every granule of tensor ``t`` the cache holds ``shift[t]`` granules on (its
    lines, dirtiness and place in the LRU order kept), and rebuild the hash table: the
    lines a sampled kernel's prefix left become those of the grid's last periods
    (``simulator.sampled``). Each tensor's granules move together, so no two meet; moved
    past the tensor's end, a granule is never asked for again and leaves as the LRU one."""
    sc, table, slots = st[0], st[1], st[2]
    mask = sc[MASK]
    for i in range(table.shape[0]):
        table[i, 0] = EMPTY
    for s in range(sc[COUNT]):
        key = slots[s, KEY]
        key += shift[key >> 44]
        slots[s, KEY] = key
        i = _home(key, mask)
        while table[i, 0] != EMPTY:
            i = (i + 1) & mask
        table[i, 0] = key
        table[i, 1] = s


@njit(**HOT)
def held_bytes(st):
    """Bytes in the lines the cache holds, and in those of them that are dirty."""
    sc, slots = st[0], st[2]
    present = dirty = 0
    for s in range(sc[COUNT]):
        present += popcount(slots[s, PRESENT])
        dirty += popcount(slots[s, DIRTY])
    return present << sc[LINE_SHIFT], dirty << sc[LINE_SHIFT]


@njit(**HOT)
def dirty_bytes(st):
    """Bytes in dirty lines still held by the cache."""
    sc, slots = st[0], st[2]
    total = 0
    for s in range(sc[COUNT]):
        total += popcount(slots[s, DIRTY])
    return total << sc[LINE_SHIFT]
