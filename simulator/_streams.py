"""The L2 and HBM as servers of byte streams, first come, first served, jitted.

An SM moves a request's bytes through its own memory path, so they reach the chip's servers as a
stream: from when the path starts the request until it is through, at the path's rate. A server
of rate R serves the bytes of all streams in the order they arrive (a fluid queue): with arrival
rate L (the streams flowing in) its backlog Q grows at L - R, or drains at R - L down to zero.
The last byte of a stream ending at time e leaves at e + Q(e) / R, which is when the request is
through the server. Many SMs streaming at once fill the queue together and their requests leave
together (data/gpu/probe/burst.json); a stream alone leaves as it arrives. Q(e) depends on the
streams that start before e, so it is final once no request can start before e: the engine asks
(``through``) only then, and until then a request is known to leave no earlier than e
(docs/model.md, "Streamed requests").

The state of the servers (index k: 0 the L2, 1 the HBM) is ``Streams``:

- ``st[k]``: the backlog Q in bytes, the time T at which it holds, the arrival rate L then;
- ``ix[k]``: the number of pending stream events, the streams flowing, the next request id;
- ``et``, ``ek``, ``ex``, ``eid``: the pending events as a binary heap on their time: a stream's
  start (kind START) or end (END), x its rate, and the request's id (a stream always has a
  length: the spec's rates are positive and finite);
- ``rend``, ``rleft``, ``rid``: per request id (modulo ``RING``): its stream's end, when its last
  byte leaves (-1 until known), and the id itself, to tell a reused entry from its own.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

from flashio.simulator._l2 import HOT

Q, T, L = range(3)  # float state of a server
N_EVENTS, FLOWING, NEXT_ID = range(3)  # integer state of a server
START, END = range(2)  # event kinds
CAPACITY = 1 << 16  # pending events of one server (two a stream in flight)
RING = 1 << 16  # request ids remembered: an id this many requests old left long ago
FULL = -2  # ``arrive``'s answer when CAPACITY events are pending already

Streams = namedtuple("Streams", "st ix et ek ex eid rend rleft rid")


def new_streams(n: int = 2, used: bool = True) -> Streams:
    """``n`` idle servers (``used`` false: placeholders of one entry, for an engine whose
    servers take whole requests)."""
    cap, ring = (CAPACITY, RING) if used else (1, 1)
    return Streams(
        np.zeros((n, 3)),
        np.zeros((n, 3), np.int64),
        np.zeros((n, cap)),
        np.zeros((n, cap), np.int64),
        np.zeros((n, cap)),
        np.zeros((n, cap), np.int64),
        np.zeros((n, ring)),
        np.full((n, ring), -1.0),
        np.full((n, ring), -1, np.int64),
    )


@njit(inline="always", **HOT)
def _flow(sv, k, x, rate):
    """Server k's backlog from its time T to x at its arrival rate."""
    st = sv.st
    dt = x - st[k, T]
    if dt > 0:
        st[k, Q] = max(0.0, st[k, Q] + (st[k, L] - rate) * dt)
        st[k, T] = x


@njit(**HOT)
def _push(sv, k, t, kind, x, rid):
    et, ek, ex, eid = sv.et, sv.ek, sv.ex, sv.eid
    i = sv.ix[k, N_EVENTS]
    sv.ix[k, N_EVENTS] = i + 1
    while i > 0:  # sift up
        p = (i - 1) >> 1
        if et[k, p] <= t:
            break
        et[k, i], ek[k, i], ex[k, i], eid[k, i] = et[k, p], ek[k, p], ex[k, p], eid[k, p]
        i = p
    et[k, i], ek[k, i], ex[k, i], eid[k, i] = t, kind, x, rid


@njit(**HOT)
def _pop(sv, k):
    """Remove the earliest event of server k (the caller read it at index 0)."""
    et, ek, ex, eid = sv.et, sv.ek, sv.ex, sv.eid
    n = sv.ix[k, N_EVENTS] - 1
    sv.ix[k, N_EVENTS] = n
    t, kind, x, rid = et[k, n], ek[k, n], ex[k, n], eid[k, n]
    i = 0
    while True:  # sift the last event down from the root
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and et[k, c + 1] < et[k, c]:
            c += 1
        if et[k, c] >= t:
            break
        et[k, i], ek[k, i], ex[k, i], eid[k, i] = et[k, c], ek[k, c], ex[k, c], eid[k, c]
        i = c
    et[k, i], ek[k, i], ex[k, i], eid[k, i] = t, kind, x, rid


@njit(**HOT)
def advance(sv, k, x, rate):
    """Bring server k to time x: the stream events up to x, in order of time. Only for an x
    before which no request can start any more."""
    st, ix = sv.st, sv.ix
    while ix[k, N_EVENTS] > 0 and sv.et[k, 0] <= x:
        te, kind, amount, rid = sv.et[k, 0], sv.ek[k, 0], sv.ex[k, 0], sv.eid[k, 0]
        _pop(sv, k)
        _flow(sv, k, te, rate)
        if kind == START:
            st[k, L] += amount
            ix[k, FLOWING] += 1
        else:
            ix[k, FLOWING] -= 1
            # no stream flowing: exactly none arriving (no rounding left over)
            st[k, L] = st[k, L] - amount if ix[k, FLOWING] > 0 else 0.0
            if sv.rid[k, rid % RING] == rid:  # else its entry was reused: left long ago
                sv.rleft[k, rid % RING] = te + st[k, Q] / rate
    _flow(sv, k, x, rate)


@njit(**HOT)
def arrive(sv, k, t, start, end, w, rate):
    """A request of ``w`` bytes issued at time t streams into server k from ``start`` to
    ``end`` (t <= start < end); returns its id (FULL: no room)."""
    if sv.ix[k, N_EVENTS] + 2 > sv.et.shape[1]:
        return FULL
    advance(sv, k, t, rate)
    rid = sv.ix[k, NEXT_ID]
    sv.ix[k, NEXT_ID] = rid + 1
    slot = rid % RING
    sv.rend[k, slot] = end
    sv.rleft[k, slot] = -1.0
    sv.rid[k, slot] = rid
    flow = w / (end - start)
    _push(sv, k, start, START, flow, rid)
    _push(sv, k, end, END, flow, rid)
    return rid


@njit(inline="always", **HOT)
def through(sv, k, rid):
    """When request ``rid``'s last byte leaves server k: (time, known). Not known yet: (its
    stream's end, False), no later than which it cannot leave. An id older than ``RING``
    requests left long ago: (-inf, True)."""
    slot = rid % RING
    if sv.rid[k, slot] != rid:
        return -np.inf, True
    if sv.rleft[k, slot] >= 0:
        return sv.rleft[k, slot], True
    return sv.rend[k, slot], False


@njit(inline="always", **HOT)
def later(sv, k, a, b):
    """Of requests a and b of server k (-1: none), the one whose stream ends last (in FCFS
    order its last byte leaves last)."""
    if a < 0 or sv.rid[k, a % RING] != a:  # none, or left long ago
        return b
    if b < 0 or sv.rid[k, b % RING] != b:
        return a
    return a if sv.rend[k, a % RING] >= sv.rend[k, b % RING] else b
