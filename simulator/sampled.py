"""Sampled replay: a prefix of a kernel's grid replayed exactly, the rest extended.

A kernel of many waves settles into a steady state, and its grid repeats itself with a period:
the CTAs of one batch and K/V head, which read the same K and V. ``simulate_sampled`` replays
one prefix of the schedule's largest kernel (its other kernels whole, the L2 and servers
carried from kernel to kernel as in a full run), with the memory system checkpointed as marked
CTAs are dispatched (``simulate.Probe``), after ``SAMPLED_WAVES`` waves:

- Alike CTAs (equal event counts) run in waves. Every wave boundary is a checkpoint; what a
  wave adds depends on where in its period it starts (a head's first wave reads its K and V, a
  second may find them in the L2) or, where the prefix cannot show every start, on how many
  periods its CTAs come from (a wave of two heads reads both heads' K and V): each class's
  mean over the steady waves. The prefix ends where the grid does in its last wave, whose
  stand-in is then the prefix's last, and where it can, after a whole wave of the kind the
  grid's last whole wave is of (what the partial wave adds depends on the wave before it);
  the grid's other waves are added by class.
- Unlike CTAs (causal and windowed grids visit different numbers of blocks) are extended by
  whole periods: the prefix ends where the grid does in its period, and a period adds what it
  added between two checkpoints a period apart, its time the mean over the prefix's periods.

Counted work (global bytes per tensor, FLOPs, exponentials, shared-memory bytes, spill
traffic) is not extended: the events of the prefix's last period are counted, and the grid is
that period repeated. A grid whose CTAs do not repeat with the period, or too short to gain,
is replayed whole, as is one a static tile scheduler runs (its slots keep their own CTAs) or
one in FA3's longest-first order.

What is extended is the prefix's steady state: a state reached only late is outside what it
sees. Where the L2 is not full at the prefix's last checkpoint but would fill after it, and the
dirty lines it would keep at the end are too uncertain (over ``L2_FILL_TOLERANCE`` of the HBM
bytes), the kernel is replayed again with checkpoints from after the L2 has filled, or whole.
Where the grid's footprint says so before any replay, and the second prefix would save too
little, the kernel is replayed whole at once. A kernel whose steady waves' time drifts one way
(a line through them, beyond their classes, rising or falling by more than twice their
scatter about it) by more than ``DRIFT_TOLERANCE`` of the time over the waves left is
replayed whole too: its state at the prefix's end is not the grid's; so is one whose waves'
inner spread (from a wave's first dispatch to its middle CTA's: how far its SMs are out of
step) still grows, by more than that share at its slope to the grid's last wave
(``_wave_classes.spread_trend``). Where the L2 has settled over the checkpoints, a drift of
the waves' HBM bytes is extrapolated into the HBM error estimate. The L2 contents the
sampled kernel leaves to the next are those after its prefix, the lines of the grid's first
periods, moved on to its last periods' places where the L2 holds the prefix's lines alone
(``_l2_move.period_shift``); elsewhere what the kernels after it read, up to the L2's size,
is added to the HBM error estimate, as is the range of the L2's dirty bytes over a period
where the prefix ends elsewhere in its period than the grid does.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from flashio.simulator import _state as E
from flashio.simulator._counted import Counter
from flashio.simulator._extension import checkpoints, extend, extension, middles, own_reads
from flashio.simulator._l2 import LINES_PER_GRANULE
from flashio.simulator._l2_move import (
    ToLastPeriods,
    later_reads_unmoved,
    period_shift,
    tensors_touched,
)
from flashio.simulator._prefix import Plan, first_ctas, grid_kind, grid_period, plan_prefix
from flashio.simulator.gpu import GPUSpec
from flashio.simulator.result import SimResult
from flashio.simulator.simulate import (
    DEFAULT_OPTIONS,
    Probe,
    cta_events_mean,
    launch_resources,
    replay,
    spill_bytes,
    static_tiles,
)
from flashio.simulator.specfiles import load_gpu
from flashio.simulator.trace import Op, Space, TraceSource

__all__ = ["Sampling", "simulate_sampled"]

SAMPLED_WAVES = 2  # waves of the sampled kernel replayed before its first checkpoint
L2_FULL = 0.98  # of its bytes held, an L2 is full (the model's holds whole 8 KiB granules)
# a prefix whose L2 fills later is extended if the dirty lines that leaves unsure are at most
# this share of the HBM bytes (the sampled replay's aim: within 1%)
L2_FILL_TOLERANCE = 0.01
# a kernel whose steady waves drift one way by more than this share of the time, extrapolated
# over the waves not replayed (``_wave_classes.time_trend``), is replayed whole: half the 1%
# aim, as a straight line through a few waves underestimates a drift that grows (FA2 at
# N = 32k on an H200 with half its HBM bandwidth and a quarter of its L2: 0.9% extrapolated
# from four waves, 2.3% in fact, with the replay of its loop before the run-11 FFMA rates)
DRIFT_TOLERANCE = 0.005
# a prefix is replayed where it saves half the events (1 / SAVING of an exact replay's) or,
# of alike CTAs in a grid of at least LONG_GRID waves and LONG_GRID / 2 periods, a fifth
# (LONG_SAVING): on 44 and 110 SMs, FA2 at N = 32k first shows every kind of wave and ends as
# the grid does 74% and 62% of the way in (one wave of a kind every 32 or 64 waves; grids of
# 47 and 19 waves, 16 heads), and was replayed whole (docs/model.md, "Over a sweep's
# hypothetical GPUs"). A shorter grid's long prefix leaves too little for its estimates (FA2
# at N = 1k, 16 heads on 6 SMs, 11 waves: 0.11% short in time against 0.07%; at N = 4k, 2
# heads on 4 SMs, 16 waves: 5.3% long in HBM bytes against 0.01%), and unlike CTAs are
# extended by whole periods with nothing that checks the kinds of what the rest adds (FA2
# causal at N = 2k, 4 heads on 4 SMs, 3 of its 4 periods: 0.80% short against 0.01%)
SAVING = 2.0
LONG_SAVING = 1.25
LONG_GRID = 16


@dataclass(frozen=True, slots=True)
class Sampling:
    """How a sampled result was made: per kernel the CTAs replayed and those of its grid
    (equal where it was replayed whole), relative error estimates of the time and the HBM
    bytes (0 where every kernel was replayed whole), and the waves of the grid of a kind the
    prefix never replayed, whose own error is not in the estimates (``unseen_waves``)."""

    replayed_ctas: tuple[int, ...]
    total_ctas: tuple[int, ...]
    time_error: float  # estimated relative error of time_s
    hbm_error: float  # and of the HBM bytes
    # whole waves extended whose kind, by the heads they touch and the earlier waves that
    # touched the first (``_wave_classes.by_visits``), none of the prefix's steady waves is of:
    # what they add is taken from a coarser class (FA2 at N = 64k on an H200: one wave, which
    # reads 11.8 MB more K and V than its class, 0.34% of the grid's HBM bytes)
    unseen_waves: int = 0

    @property
    def replayed_fraction(self) -> float:
        return sum(self.replayed_ctas) / max(1, sum(self.total_ctas))

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["replayed_fraction"] = self.replayed_fraction
        return d


def simulate_sampled(
    source: TraceSource, gpu: GPUSpec | str, options=None, waves: int = SAMPLED_WAVES,
    saving: float | None = None,
) -> SimResult:  # fmt: skip
    """``simulator.simulate(source, gpu, options=options, mode="sampled")``: see the module
    docstring. The kernel of the most events is sampled where the replay then has less than 1 /
    ``saving`` of the events of an exact one (None: ``LONG_SAVING`` for alike CTAs in a grid
    of ``LONG_GRID`` waves and half as many periods or more, else ``SAVING``). The result
    carries ``sampling`` (``Sampling``)."""
    if waves < 1:
        raise ValueError(f"a sampled replay replays at least 1 wave first, got {waves}")
    gpu = gpu if isinstance(gpu, GPUSpec) else load_gpu(gpu)
    options = options or DEFAULT_OPTIONS
    meta = source.meta
    full = tuple(k.ctas for k in meta.kernels)
    comps, kinfos, occs = launch_resources(meta, gpu, options)
    per_cta = [cta_events_mean(source, k) for k in range(len(full))]
    exact_cost = sum(f * e for f, e in zip(full, per_cta, strict=True))
    # the kernel of the most events (a schedule's others are shorter, and the L2 a prefix of one
    # leaves would give the next kernel's prefix the hits of the grid's first heads: standard
    # attention's S, the backward's dO)
    k = max(range(len(full)), key=lambda i: full[i] * per_cta[i])
    slot = occs[k].ctas_per_sm * gpu.sm_count
    spills = spill_bytes(kinfos[k], occs[k], gpu, comps[k])
    period = grid_period(meta, k)
    alike, periodic = grid_kind(source, k, full[k], period)
    # a static tile scheduler's slots keep their own CTAs, and FA3's longest-first order
    # (flash2's longest_first) repeats over sections of heads, not heads: no wave is a prefix's
    periodic = periodic and not static_tiles(meta, kinfos[k])
    periodic = periodic and not meta.params.get("longest_first")
    if saving is None:
        long = full[k] >= LONG_GRID * slot and full[k] >= LONG_GRID // 2 * period
        saving = LONG_SAVING if alike and long else SAVING
    limit = _longest_prefix(full[k], per_cta[k], exact_cost, saving)
    fill = _late_fill(source, k, slot, waves, alike, gpu.l2_bytes, limit) if periodic else None
    # where the first prefix would be replayed again, and the second would be too long to
    # gain, the grid is replayed whole at once (a wrong guess costs time, never accuracy)
    if fill is not None and _too_long(
        plan_prefix(meta, k, slot, math.ceil(fill / slot) + 1, alike, limit), limit
    ):
        periodic = False
    own = own_reads(source, k, period, full[k]) if alike and periodic else None
    for _ in range(2 if periodic else 0):  # a second prefix where the L2 fills after the first
        plan = plan_prefix(meta, k, slot, waves, alike, limit)
        if _too_long(plan, limit):
            break
        n = plan.replayed
        # the prefix's last period is counted, and as much of it as the grid has past its
        # whole periods after the prefix
        a, left = n - plan.period, (full[k] - n) % plan.period
        counter = Counter([(a, n), (a, a + left)], len(meta.tensors), spills)
        marks = np.array(sorted({*plan.marks, *middles(plan)}), np.int64)
        granule = gpu.l2_line_bytes * LINES_PER_GRANULE
        shift, prefix_bytes, grid_bytes = period_shift(source, plan, full[k], granule)
        mover = ToLastPeriods(shift if grid_bytes >= gpu.l2_bytes else None)
        probe = Probe(marks, counter, at_end=mover)
        prefix = first_ctas(source, [n if i == k else f for i, f in enumerate(full)])
        res = replay(prefix, gpu, options=options, probes={k: probe})
        snaps, spread = checkpoints(probe, plan)
        ext = extension(snaps, counter, plan, full[k], gpu.l2_bytes, spread, own)
        full_l2 = L2_FULL * gpu.l2_bytes
        # where the L2 fills only after the prefix, its steady state is not the grid's (the
        # lines the grid's traffic evicts, the dirty ones it keeps at the end): how much the
        # dirty lines it would keep change, against the grid's HBM bytes
        filling = ext.held[0] < full_l2 <= ext.held[1]
        moved = res.hbm_read_bytes + res.hbm_write_bytes + ext.hbm.sum()
        unsure = res.l2_dirty_bytes_at_end * (ext.grows - 1)
        if not filling or unsure <= L2_FILL_TOLERANCE * moved:
            # what the kernels after it find is the grid's only where the lines moved and the
            # prefix's own fill the L2 (else the earlier kernels' may be there too)
            later_unsure = (not mover.moved or prefix_bytes < gpu.l2_bytes
                            or later_reads_unmoved(source, k, shift))  # fmt: skip
            out, time_err, hbm_err = extend(res, k, ext, probe.busy, meta, gpu, later_unsure)
            if abs(ext.trend) + abs(ext.spreading) <= DRIFT_TOLERANCE * out.time_s:
                replayed = tuple(kr.ctas for kr in res.kernels)
                return _with(out, Sampling(replayed, full, time_err, hbm_err, ext.unseen_waves))
            break  # the waves drift or fall out of step: extended, the grid would miss
        # again, checkpoints from a wave after the L2 has filled, at the rate it filled
        # between the checkpoints
        marks = plan.marks
        rate = (snaps[-1, E.SNAP_HELD] - snaps[0, E.SNAP_HELD]) / max(1, marks[-1] - marks[0])
        fill = marks[-1] + (full_l2 - snaps[-1, E.SNAP_HELD]) / max(rate, 1e-30)
        waves = math.ceil(fill / slot) + 1
    res = replay(source, gpu, options=options)
    return _with(res, Sampling(full, full, 0.0, 0.0))


def _longest_prefix(ctas: int, cta_events: float, exact_cost: float, saving: float) -> int:
    """The most CTAs a prefix of the sampled kernel (of ``ctas`` CTAs of ``cta_events`` events
    each) may have for the replay to have less than 1 / ``saving`` of the events of an exact
    one (``exact_cost``, every kernel's)."""
    others = exact_cost - ctas * cta_events
    return math.ceil((exact_cost / saving - others) / cta_events) - 1


def _too_long(plan: Plan | None, limit: int) -> bool:
    """Whether there is no prefix, or one of more than ``limit`` CTAs (``_longest_prefix``)."""
    return plan is None or plan.replayed > limit


def _late_fill(source, k: int, slot: int, waves: int, alike: bool, l2_bytes: int, limit: int):
    """The CTA of kernel ``k`` at which its L2 fills, where the grid's footprint says before
    any replay that the first prefix would be replayed again (its L2 still filling at its last
    checkpoint, and the written share of what the rest adds to it over ``L2_FILL_TOLERANCE``
    of the bytes moved); else None. An L2 that evicts nothing holds each granule the CTAs
    touched: the footprint of the tensors the kernel reads and writes, spread evenly over the
    grid (its periods touch slices of equal size)."""
    meta = source.meta
    plan = plan_prefix(meta, k, slot, waves, alike, limit)
    full = meta.kernels[k].ctas
    if plan is None:
        return None
    period = grid_period(meta, k)
    ev = source.cta_events(k, 0, 1)
    ev = np.concatenate([ev, source.cta_events(k, period - 1, period)])
    touched, written = tensors_touched(ev), tensors_touched(ev, [Op.STORE, Op.REDUCE])
    size = {
        t: meta.tensors[t].size_bytes for t in touched if meta.tensors[t].space == Space.GLOBAL
    }
    footprint = sum(size.values())
    if not footprint:
        return None
    per_cta = footprint / full
    fill = L2_FULL * l2_bytes / per_cta
    if not plan.marks[-1] < fill < full:
        return None
    share = sum(size.get(t, 0) for t in written) / footprint
    later = min(l2_bytes, footprint) - plan.marks[-1] * per_cta  # what the rest adds
    return fill if share * later > L2_FILL_TOLERANCE * footprint else None


def _with(res: SimResult, sampling: Sampling) -> SimResult:
    object.__setattr__(res, "sampling", sampling)
    return res
