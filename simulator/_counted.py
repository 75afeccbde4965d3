"""The work of replayed CTAs, counted from their events as the engine counts it (global bytes
per tensor, register spill traffic, arithmetic), for ``simulator.sampled``: counted work is
never extended from a prefix's steady state."""

from __future__ import annotations

import numpy as np
from numba import njit

from flashio.simulator.trace import Op

LOAD, STORE, REDUCE, MMA, EW, EXP, SHARED = (int(o) for o in list(Op)[:7])
# counted work (count_work's ``work``): mma FLOPs, elementwise FLOPs, exponentials, shared bytes
N_WORK = 4


@njit(cache=True, nogil=True)
def count_work(ev, spills, tensor_bytes, work):
    """Adds the counted work of ``ev`` (whole CTAs, in order) as the engine counts it: global
    bytes read and written per tensor (``tensor_bytes[t, 0/1]``, the last row local memory,
    where register spills go: ``spills`` = first, per-step store and per-step load bytes, as
    ``_engine.run_window`` sends them at each new step) and the arithmetic of ``work``."""
    first, store, load = spills[0], spills[1], spills[2]
    local = tensor_bytes.shape[0] - 1
    cta, step = -1, -1
    for i in range(ev.shape[0]):
        e = ev[i]
        if e.cta != cta:
            cta, step = e.cta, -1
        if first + store > 0 or load > 0:
            if e.step >= 0 and e.step != step:
                tensor_bytes[local, 1] += store + (first if step == -1 else 0)
                tensor_bytes[local, 0] += load
                step = e.step
        op = np.int64(e.op)
        if op == LOAD:
            tensor_bytes[e.tensor, 0] += e.bytes
        elif op == STORE or op == REDUCE:
            tensor_bytes[e.tensor, 1] += e.bytes
        elif op == MMA:
            work[0] += e.flops
        elif op == EW:
            work[1] += e.flops
        elif op == EXP:
            work[2] += e.flops
        elif op == SHARED:
            work[3] += e.bytes


class Counter:
    """Counts the work of the replayed CTAs ``[c0, c1)`` of each range as their windows pass
    (a ``Probe.window``)."""

    def __init__(self, ranges: list[tuple[int, int]], tensors: int, spills):
        self.ranges = ranges
        self.spills = np.array(spills, np.int64)
        self.tensor_bytes = [np.zeros((tensors + 1, 2), np.int64) for _ in ranges]
        self.work = [np.zeros(N_WORK, np.int64) for _ in ranges]

    def __call__(self, ev, off, c0, c1):
        for (a, b), tb, wk in zip(self.ranges, self.tensor_bytes, self.work, strict=True):
            lo, hi = max(a, c0), min(b, c1)
            if lo < hi:
                count_work(ev[off[lo - c0] : off[hi - c0]], self.spills, tb, wk)
