"""The L2 the kernels after a sampled kernel find (``simulator.sampled``): its lines, left by
the replayed prefix, moved on to where the grid's last periods would have left them."""

from __future__ import annotations

import numpy as np

from flashio.simulator._l2 import shift_granules
from flashio.simulator._prefix import Plan
from flashio.simulator._wave_classes import footprint
from flashio.simulator.trace import MEMORY_OPS, Op, Space


def tensors_touched(ev: np.ndarray, ops=MEMORY_OPS) -> set[int]:
    """The engine's tensor rows that the events ``ev`` of ops ``ops`` touch (not the local
    memory's, -1)."""
    return set(ev["tensor"][np.isin(ev["op"], ops) & (ev["tensor"] >= 0)].tolist())


def period_shift(
    source, plan: Plan, full: int, granule: int
) -> tuple[np.ndarray, int, int]:  # fmt: skip
    """Granules each tensor's lines in the L2 move on after the sampled kernel's prefix, so
    that the kernels after it find those of the grid's last periods, as after the whole grid
    (``_l2.shift_granules``): the prefix's last period becomes the grid's, for each global
    tensor the kernel touches whose periods own equal slices of whole granules (a head's Q,
    K, V, O: the slice that the first CTA of each of the first two periods keeps to); 0
    for the others, and the local memory's row. And the bytes of those slices of the
    prefix's whole periods and of the grid's. An L2 of at most the grid's bytes holds only
    its last periods' lines after the whole grid (it is LRU), for which the moved lines then
    stand; a larger one holds every period's (FA2's backward at N = 1k, 8 heads on 4 SMs with
    16 MiB: moved after a prefix, its dQ conversion read 40% more from HBM than after the
    grid). An L2 of more than the prefix's bytes may still hold what the kernels before it
    left beside the moved lines."""
    meta, k, period = source.meta, plan.kernel, plan.period
    shift = np.zeros(len(meta.tensors) + 1, np.int64)
    periods = full // period
    moved = (full - 1) // period - (plan.replayed - 1) // period
    if full % period or periods < 2 or not moved:
        return shift, 0, 0
    own = grid = 0
    first, second = source.cta_events(k, 0, 1), source.cta_events(k, period, period + 1)
    for t in sorted(tensors_touched(first)):
        tensor = meta.tensors[t]
        if tensor.space != Space.GLOBAL or tensor.size_bytes % periods:
            continue
        size = tensor.size_bytes // periods
        if size % granule:
            continue
        slices = [footprint(ev[ev["tensor"] == t]) for ev in (first, second)]
        if all(i * size <= a and b <= (i + 1) * size for i, r in enumerate(slices) for a, b in r):
            shift[t] = moved * size // granule
            own += size * (plan.replayed // period)
            grid += size * periods
    return shift, own, grid


class ToLastPeriods:
    """The sampled kernel's ``Probe.at_end``: the L2's lines move on by ``shift``
    (``period_shift``), as the grid's last periods would have left them; None leaves them
    as they are. ``moved`` says whether it did."""

    def __init__(self, shift: np.ndarray | None):
        self.shift, self.moved = shift, False

    def __call__(self, l2) -> None:
        if self.shift is not None and self.shift.any():
            shift_granules(l2, self.shift)
            self.moved = True


def later_reads_unmoved(source, k: int, shift: np.ndarray) -> bool:
    """Whether a kernel after kernel ``k`` reads a tensor that kernel ``k`` or one before it
    touched and whose lines ``period_shift`` did not move (read from its first CTA): the L2
    then holds them as the prefix left them, not as the grid would."""
    firsts = [source.cta_events(i, 0, 1) for i in range(len(source.meta.kernels))]
    before = set().union(*(tensors_touched(ev) for ev in firsts[: k + 1]))
    read = set().union(*(tensors_touched(ev, [Op.LOAD]) for ev in firsts[k + 1 :]))
    return any(shift[t] == 0 for t in read & before)
