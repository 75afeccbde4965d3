"""Memory requests of the replay engine, jitted: an SM's LOAD, STORE or REDUCE through its memory
path, the L2 model and the L2 and HBM servers, whole requests first come, first served or, with
C_STREAMS, streamed (``_streams``); and when a CTA's streamed requests land (docs/model.md,
"Time", "Streamed requests")."""

from __future__ import annotations

import numpy as np
from numba import njit

from flashio.simulator._l2 import HOT, access, fill_landing
from flashio.simulator._state import (
    B_HBM,
    B_L2,
    B_SM_MEM,
    C_BULK_BW,
    C_BULK_HBM_LAT,
    C_BULK_L2_LAT,
    C_BULK_ST_BW,
    C_BULK_ST_LAT,
    C_FILLS,
    C_HBM_BW,
    C_HBM_LAT,
    C_L2_BW,
    C_L2_LAT,
    C_SM_MEM_BW,
    C_SM_RED_BW,
    C_STREAMS,
    K_DIRTIED,
    K_SERVER_FULL,
    LOAD,
    REDUCE,
    STORE,
    T_GLOBAL_READ,
    T_GLOBAL_WRITE,
    T_HBM_READ,
    T_HBM_WRITE,
)
from flashio.simulator._streams import FULL, advance, arrive, later, through


@njit(inline="always", **HOT)
def request(mem, cfg, port, op, tensor, offset, rows, row_bytes, stride, nbytes, t):
    """One LOAD/STORE/REDUCE issued at ``t`` by an SM whose memory path is the server ``port``
    (a one-element view): counts its bytes, runs it through the L2 and the bandwidth servers of
    ``mem`` (a Memory), and returns when it completes: (time, L2 request, HBM request). With
    streamed requests the time is the SM path's alone and the two requests (ids, -1 for none)
    say when the rest lands (``landed``)."""
    shared = cfg[C_STREAMS] > 0
    r_l2 = r_hbm = -1
    l2_on, l2, srv, tstat, busy, cnt = mem.l2_on, mem.l2, mem.srv, mem.tstat, mem.busy, mem.cnt
    # the SM's own path to the memory system, in parallel with the chip's servers; it sends
    # reductions at their own rate, and bulk copies (TMA) at theirs, with their latencies
    l2_lat, hbm_lat = cfg[C_L2_LAT], cfg[C_HBM_LAT]
    bulk = mem.bulk[tensor] != 0
    bulk_load = op == LOAD and bulk
    if op == REDUCE:
        path = nbytes / cfg[C_SM_RED_BW]
    elif not bulk:
        path = nbytes / cfg[C_SM_MEM_BW]
    elif op == LOAD:
        path, l2_lat, hbm_lat = nbytes / cfg[C_BULK_BW], cfg[C_BULK_L2_LAT], cfg[C_BULK_HBM_LAT]
    else:  # a store's written-back lines leave at HBM's plain latency
        path, l2_lat = nbytes / cfg[C_BULK_ST_BW], cfg[C_BULK_ST_LAT]
    p0 = max(port[0], t)  # the bytes leave the SM from p0 to port[0]
    port[0] = p0 + path
    busy[B_SM_MEM] += path
    if op == LOAD:
        tstat[tensor, T_GLOBAL_READ] += nbytes
    else:
        tstat[tensor, T_GLOBAL_WRITE] += nbytes
    miss = 0
    wb = 0
    fills = cfg[C_FILLS] > 0
    wait = -np.inf  # when the fills in flight that its hit lines wait for land
    if l2_on:
        is_read, writes = op != STORE, op != LOAD
        if rows == 1 or row_bytes == stride:  # one contiguous range
            rows, row_bytes = 1, nbytes
        if fills:
            miss, wb, dd, wait = access(
                l2, is_read, writes, tensor, offset, rows, row_bytes, stride, tstat, T_HBM_WRITE,
                True,
            )  # fmt: skip
        else:
            miss, wb, dd, wait = access(
                l2, is_read, writes, tensor, offset, rows, row_bytes, stride, tstat, T_HBM_WRITE,
                False,
            )  # fmt: skip
        cnt[K_DIRTIED] += dd
        tstat[tensor, T_HBM_READ] += miss
        busy[B_L2] += nbytes / cfg[C_L2_BW]
        if shared:
            r_l2 = _arrive(mem, 0, t, p0, port[0], nbytes, cfg[C_L2_BW])
            done = port[0] + l2_lat
        else:
            srv[0] = max(srv[0], t) + nbytes / cfg[C_L2_BW]
            done = max(srv[0], port[0]) + l2_lat
    else:  # no L2: every global access is an HBM access (the FA paper's model)
        if op == LOAD:
            miss = nbytes
            tstat[tensor, T_HBM_READ] += nbytes
        else:
            wb = nbytes
            tstat[tensor, T_HBM_WRITE] += nbytes
        done = port[0]
    if bulk_load and miss > 0:  # a bulk copy streams in at the SM's rate after HBM's latency
        done = max(done, port[0] + hbm_lat)
    if miss + wb > 0:  # the HBM request goes out at the CTA's time t
        busy[B_HBM] += (miss + wb) / cfg[C_HBM_BW]
        if shared:
            r_hbm = _arrive(mem, 1, t, p0, port[0], miss + wb, cfg[C_HBM_BW])
        else:
            srv[1] = max(srv[1], t) + (miss + wb) / cfg[C_HBM_BW]
            done = max(done, srv[1] + hbm_lat)
            if fills and miss > 0:  # its missed lines land in the L2 as the HBM delivers them
                fill_landing(l2, tensor, offset, rows, row_bytes, stride, t, srv[1] + hbm_lat)
    return max(done, wait), r_l2, r_hbm


@njit(inline="always", **HOT)
def _arrive(mem, k, t, start, end, w, rate):
    """A request of w bytes issued at t streaming into server k (0: L2, 1: HBM) from ``start``
    to ``end``; its id, -1 where the server had no room (counted: simulate raises)."""
    r = arrive(mem.sv, k, t, start, end, w, rate)
    if r == FULL:
        mem.cnt[K_SERVER_FULL] += 1
        return -1
    return r


@njit(inline="always", **HOT)
def track(mem, si, s, col, r_l2, r_hbm):
    """Slot s waits for streamed requests r_l2 and r_hbm too, in the pair of columns at
    ``col`` (nothing to hold where requests are not streamed: both -1)."""
    if r_l2 >= 0 or r_hbm >= 0:
        si[s, col] = later(mem.sv, 0, si[s, col], r_l2)
        si[s, col + 1] = later(mem.sv, 1, si[s, col + 1], r_hbm)


@njit(**HOT)
def landed(mem, cfg, si, s, col):
    """When the requests slot s holds at ``col`` land (their last bytes' departure plus the
    server's plain latency, bulk copies' too), if both departures are known; else the last of
    their streams' ends, before which some request may still start (docs/model.md, "Streamed
    requests"). Returns (done, known, last stream end)."""
    done, known, end = -np.inf, True, -np.inf
    for k in range(2):
        r = si[s, col + k]
        if r >= 0:
            tk, kk = through(mem.sv, k, r)
            lat = cfg[C_L2_LAT] if k == 0 else cfg[C_HBM_LAT]
            done = max(done, tk + lat)
            known = known and kk
            end = max(end, tk if not kk else -np.inf)
    return done, known, end


@njit(**HOT)
def settle(mem, cfg, si, s, col, end):
    """Bring both servers to ``end`` (no request can start before it any more): the requests
    slot s holds at ``col`` are then known; returns when they land."""
    advance(mem.sv, 0, end, cfg[C_L2_BW])
    advance(mem.sv, 1, end, cfg[C_HBM_BW])
    return landed(mem, cfg, si, s, col)[0]
