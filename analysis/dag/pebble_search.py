"""The exact search behind ``analysis.dag.pebbling.min_io``: A* over red-blue pebble
configurations, jitted, with configurations as int64 bitsets (vertex v is bit ``1 << v``).

docs/dag.md states the game and the rules that keep the search exact; ``min_io`` checks its
arguments and turns the path found here into a list of moves.
"""

from __future__ import annotations

import heapq

import numpy as np
from numba import njit, types
from numba.typed import Dict

JIT = {"cache": True}  # as kernels._emit.JIT, without nogil (the search holds typed containers)
_KEY = types.UniTuple(types.int64, 2)  # (red, blue) bitsets: vertex v is bit 1 << v
# parent red, parent blue, kind, vertex, evicted, spilled, symmetry applied (-1: none), raw red
_LINK = types.UniTuple(types.int64, 8)
_COMPUTE, _LOAD = 0, 1
MAX_VERTICES = 62  # bitsets are int64


@njit(**JIT)
def _count(x):
    c = 0
    while x:
        x &= x - 1
        c += 1
    return c


@njit(**JIT)
def _dead(blue, outputs, succ, memo):
    """Vertices a red pebble can no longer help: stored outputs and whatever feeds only them (or
    nothing, when not an output). Depends only on which outputs are blue."""
    key = blue & outputs
    if key in memo:
        return memo[key]
    dead = 0
    for v in range(succ.size - 1, -1, -1):
        if ((outputs >> v) & 1 == 0 or (key >> v) & 1) and succ[v] & dead == succ[v]:
            dead |= 1 << v
    memo[key] = dead
    return dead


@njit(**JIT)
def _h(red, blue, pmask, inputs, outputs):
    """Admissible, consistent lower bound on the I/O still to pay: a store per output not yet
    blue, a load per input a pending output needs through vertices with no pebble (an input
    cannot be recomputed; a blue vertex might be reloaded, so the search stops there)."""
    need = outputs & ~blue
    reach = need
    frontier = need
    while frontier:
        preds = 0
        for v in range(pmask.size):
            if (frontier >> v) & 1:
                preds |= pmask[v]
        preds &= ~(reach | red)
        reach |= preds
        frontier = preds & ~blue
    return _count(need) + _count(reach & inputs)


def _byte_tables(perms: np.ndarray) -> np.ndarray:
    """tables[p, k, x]: the image under symmetry p of byte value x at bits 8k..8k+7, so that a
    bitset is permuted with one lookup per byte."""
    g, n = perms.shape
    tables = np.zeros((g, (n + 7) // 8, 256), np.int64)
    for k in range(tables.shape[1]):
        for bit in range(8):
            v = 8 * k + bit
            if v < n:
                has = (np.arange(256) >> bit) & 1 == 1
                tables[:, k, has] |= np.left_shift(np.int64(1), perms[:, v])[:, None]
    return tables


@njit(**JIT)
def _permute(mask, table):
    out = 0
    for k in range(table.shape[0]):
        out |= table[k, (mask >> (8 * k)) & 255]
    return out


@njit(**JIT)
def _canonical(red, blue, tables):
    """The least (red, blue) among the configuration's images, and which symmetry gave it."""
    best_r, best_b, which = red, blue, -1
    for p in range(tables.shape[0]):
        r = _permute(red, tables[p])
        if r > best_r:
            continue
        b = _permute(blue, tables[p])
        if r < best_r or b < best_b:
            best_r, best_b, which = r, b, p
    return best_r, best_b, which


@njit(**JIT)
def _place(st, red, blue, g, v, kind, evictable, m, pmask, inputs, outputs, succ, memo, tables):
    """Push the configurations reached by putting a red pebble on ``v``, evicting one of
    ``evictable`` when fast memory is full."""
    heap, best, link = st
    b = 1 << v
    cost = 0 if kind == _COMPUTE else 1
    nblue = blue
    if outputs & ~blue & b:  # an output is stored as soon as it is red (it must be, once)
        cost += 1
        nblue = blue | b
    full = _count(red) >= m
    for r in range(-1, pmask.size):
        # evict only when fast memory is full (deleting later is never worse)
        if (r < 0) == full or (r >= 0 and ((red & evictable) >> r) & 1 == 0):
            continue
        for spill in range(2):
            if spill and (r < 0 or (nblue >> r) & 1):
                continue
            evict = 0 if r < 0 else 1 << r
            nb = nblue | evict if spill else nblue
            raw = (red & ~evict | b) & ~_dead(nb, outputs, succ, memo)
            nr, nb, p = _canonical(raw, nb, tables)
            ng = g + cost + spill
            key = (nr, nb)
            if key not in best or ng < best[key]:
                best[key] = ng
                link[key] = (red, blue, kind, v, r, spill, p, raw)
                f = ng + _h(nr, nb, pmask, inputs, outputs)
                heapq.heappush(heap, (f, -ng, -len(best), nr, nb))  # then newest: depth first


@njit(**JIT)
def _search(pmask, inputs, outputs, succ, m, max_states, tables):
    """A* from (no red, inputs blue) to (all outputs blue). Returns (io, expanded, links of
    the optimal path as rows (kind, vertex, evicted, spilled, red and blue before, red after,
    symmetry applied after the move), in the frame of the configuration the move starts from);
    io is -1
    when ``max_states`` configurations were expanded without reaching the goal."""
    memo = Dict.empty(types.int64, types.int64)
    best = Dict.empty(_KEY, types.int64)
    link = Dict.empty(_KEY, _LINK)
    start = (np.int64(0), np.int64(inputs))
    best[start] = 0
    heap = [(np.int64(_h(0, inputs, pmask, inputs, outputs)), np.int64(0), np.int64(0), start[0],
             start[1])]  # fmt: skip
    st = (heap, best, link)
    expanded = 0
    while heap:
        _, neg_g, _, red, blue = heapq.heappop(heap)
        g = -neg_g  # on equal f, the configuration with more I/O paid (nearer the goal) first
        if g > best[(red, blue)]:
            continue
        if blue & outputs == outputs:
            return g, expanded, _path(link, start, (red, blue))
        expanded += 1
        if expanded > max_states:
            break
        full = _count(red) >= m
        dead = _dead(blue, outputs, succ, memo)
        computed = False
        for v in range(pmask.size):
            if ((red | dead | inputs) >> v) & 1 == 0 and pmask[v] & red == pmask[v]:
                # a compute keeps its operands red: it may evict anything else
                _place(st, red, blue, g, v, _COMPUTE, ~pmask[v], m, pmask, inputs, outputs,
                       succ, memo, tables)  # fmt: skip
                computed = True
                if not full:
                    break  # a free compute into a free pebble loses nothing: no other move
        if computed and not full:
            continue
        for v in range(pmask.size):
            if (blue >> v) & 1 and ((red | dead) >> v) & 1 == 0:
                # a load of a vertex that could be computed pays only to evict an operand
                can = (inputs >> v) & 1 == 0 and pmask[v] & red == pmask[v]
                _place(st, red, blue, g, v, _LOAD, pmask[v] if can else -1, m, pmask, inputs,
                       outputs, succ, memo, tables)  # fmt: skip
    return -1, expanded, np.zeros((0, 8), np.int64)


@njit(**JIT)
def _path(link, start, state):
    rows = []
    while state != start:
        pr, pb, kind, v, r, spill, p, raw = link[state]
        rows.append((kind, v, r, spill, pr, pb, raw, p))
        state = (pr, pb)
    out = np.zeros((len(rows), 8), np.int64)
    for i in range(len(rows)):
        for j in range(8):
            out[len(rows) - 1 - i, j] = rows[i][j]
    return out
