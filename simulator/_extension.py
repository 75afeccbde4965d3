"""What the CTAs of a sampled kernel that were not replayed add (``simulator.sampled``): from
the prefix's checkpoints, by class of wave (alike CTAs) or by whole periods (unlike ones), with
the error estimates; and the full result from the prefix's and that extension."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from flashio.simulator import _state as E
from flashio.simulator._counted import Counter
from flashio.simulator._prefix import Plan
from flashio.simulator._wave_classes import (
    by_class,
    by_start,
    by_start_and_span,
    by_visits,
    class_error,
    first_reads,
    footprint,
    kinds,
    periods_touched,
    spread_trend,
    time_trend,
)
from flashio.simulator.result import SimResult, TensorTraffic
from flashio.simulator.simulate import LOCAL_NAME, Probe, breakdown_of, busy_fractions
from flashio.simulator.trace import Op, Space

# an L2 whose held bytes change by at most this share of it between a prefix's first and last
# checkpoints has settled: a rise of the waves' HBM bytes then is a drift, not its filling
L2_SETTLED = 0.01


def own_reads(source, k: int, period: int, ctas: int) -> tuple[np.ndarray, np.ndarray]:
    """Per tensor of kernel ``k``, the bytes of it each CTA reads and no other does (a query
    tile: ``per_cta``), and those the CTAs of a period share and no other period reads (a
    head's K and V: ``per_period``), from the reads of its first two CTAs and of the first of
    its second period; 0 for a tensor it writes (its reads may find what it wrote) or reads
    otherwise."""
    meta = source.meta
    per_cta, per_period = np.zeros(len(meta.tensors)), np.zeros(len(meta.tensors))
    if period < 2 or ctas <= period:
        return per_cta, per_period
    evs = [source.cta_events(k, c, c + 1) for c in (0, 1, period)]
    for t, tensor in enumerate(meta.tensors):
        mine = [ev[ev["tensor"] == t] for ev in evs]
        if tensor.space != Space.GLOBAL or any((m["op"] != Op.LOAD).any() for m in mine):
            continue
        first, second, other = (footprint(m) for m in mine)
        size = sum(b - a for a, b in first)
        if first == second and not _overlap(first, other):
            per_period[t] = size
        elif not _overlap(first, second) and not _overlap(first, other):
            per_cta[t] = size
    return per_cta, per_period


def _overlap(a, b) -> bool:
    """Whether two ``footprint`` range lists share a byte."""
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i][0] < b[j][1] and b[j][0] < a[i][1]:
            return True
        i, j = (i + 1, j) if a[i][1] <= b[j][1] else (i, j + 1)
    return False


@dataclass(frozen=True)
class Extension:
    """What the CTAs of one kernel that were not replayed add: seconds, and their estimated
    error; per engine tensor row HBM bytes read and written (``hbm``) and counted global
    bytes (``counted``); growth of the L2's dirty bytes; busy seconds; counted arithmetic; the
    HBM error estimate in bytes; and the bytes the L2 holds at the prefix's last checkpoint
    and at the end of the grid (estimated); the grid's waves."""

    time: float
    time_err: float
    trend: float  # what a drift of the steady waves' time would add (``time_trend``)
    spreading: float  # how much the waves' inner spread would grow (``spread_trend``)
    hbm: np.ndarray
    counted: np.ndarray
    dirtied: float
    busy: np.ndarray
    work: np.ndarray
    hbm_err: float
    held: tuple[float, float]
    waves: int  # of the whole grid
    unseen_waves: int = 0  # ``Sampling.unseen_waves``
    # bytes by which the L2's dirty lines at the grid's end may differ from the prefix's end's
    # (``dirty_range``), an HBM error the classes do not see
    dirty_unsure: float = 0.0

    @property
    def grows(self) -> float:
        """How many times the bytes the L2 holds grow from the last checkpoint to the end."""
        return self.held[1] / self.held[0] if self.held[0] else 1.0


def middles(plan: Plan) -> tuple[int, ...]:
    """The CTAs halfway through each checkpointed wave of alike CTAs, in the prefix: when
    they are dispatched tells how far the SMs have fallen out of step."""
    if not plan.alike:
        return ()
    half = plan.slot // 2
    return tuple(m + half for m in plan.marks if m + half < plan.replayed)


def checkpoints(probe: Probe, plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    """The probe's checkpoints at ``plan.marks``, and each checkpointed wave's inner
    spread: seconds from its first dispatch to its middle one's (``middles``)."""
    row = {int(m): i for i, m in enumerate(probe.marks)}
    snaps = probe.snaps[[row[m] for m in plan.marks]]
    t = probe.snaps[:, E.SNAP_T]
    spread = np.array([t[row[m + plan.slot // 2]] - t[row[m]] for m in plan.marks
                       if m + plan.slot // 2 in row])  # fmt: skip
    return snaps, spread


def extension(
    snaps, counter: Counter, plan: Plan, full: int, l2_bytes: int, spread_in: np.ndarray,
    own=None,
) -> Extension:  # fmt: skip
    """Kernel ``plan.kernel``'s extension from its checkpoints, counted work, the
    checkpointed waves' inner spreads (``checkpoints``) and, for alike CTAs, the bytes of each
    tensor a CTA and a period read alone (``own_reads``)."""
    n, slot, period = plan.replayed, plan.slot, plan.period
    periods = (full - n) // period  # whole periods not replayed
    if plan.alike:
        # alike CTAs run in waves, and what a wave adds depends on where in its period it
        # starts (the first wave of a head reads its K and V, a second may find them in the
        # L2) or, where the prefix cannot show each start, on how many periods its CTAs come
        # from (a wave of two heads reads two heads' K and V): each class's mean over the
        # prefix's steady waves. The grid's waves from the prefix's last on are added, and
        # the prefix's last, partial wave (as large as the grid's last) taken back as one of
        # its class: what is left of it is the partial wave's own share.
        steps = np.diff(snaps, axis=0)
        first = plan.marks[0] // slot
        steady = np.arange(len(steps)) + first
        last = math.ceil(n / slot) - 1
        grid_waves = np.arange(last, math.ceil(full / slot))
        # the bytes a wave is the first to read come from HBM whatever the L2 holds: classes
        # hold the rest of each wave's HBM reads, and each wave needed adds its own (the
        # grid's last, partial wave may begin fewer heads than the prefix's: on 121 SMs at
        # N = 32k one head's K and V, 3.2% of the HBM bytes)
        reads = E.SNAP_HBM + 2 * np.arange(len(own[0]))
        steps[:, reads] -= first_reads(steady, slot, period, n, *own)
        own_need = np.vstack([first_reads(grid_waves, slot, period, full, *own),
                              first_reads(np.array([last]), slot, period, n, *own)])  # fmt: skip
        seen, need = kinds(by_start, n, full, slot, period, first)
        visited, visits = kinds(by_visits, n, full, slot, period, first)
        unseen = fine = np.zeros(len(need), bool)
        # where in its period a wave starts: too many kinds where the prefix lacks some, or
        # shows each once (no class's scatter to go by, the estimate would be the whole value)
        if not np.isin(need, seen).all() or len(np.unique(seen)) == len(seen):
            # the heads a wave spans and begins; where the prefix lacks some of those classes,
            # the heads it spans, with the waves of the classes it lacks guessed (their whole
            # value in the error estimate: a head's first wave may read its K and V from HBM,
            # a later one from the L2); and the HBM reads of a wave whose kind by its visits
            # (``fine``) the prefix shows, by that kind
            fine = np.isin(visits, visited)
            seen, need = kinds(by_start_and_span, n, full, slot, period, first)
            unseen = ~np.isin(need, seen)
            if unseen.any():
                seen, need = kinds(periods_touched, n, full, slot, period, first)
        weight = np.append(np.ones(len(need) - 1), -1.0)
        unit = by_class(steps, seen, need, weight)
        spread = class_error(steps, seen, need, weight)
        if fine.any():  # HBM reads by the kind by visits; time and writes by the coarser kind
            mixed = (by_class(steps, seen, need[~fine], weight[~fine])
                     + by_class(steps, visited, visits[fine], weight[fine]))  # fmt: skip
            mixed_err = (class_error(steps, seen, need[~fine], weight[~fine])
                         + class_error(steps, visited, visits[fine], weight[fine]))  # fmt: skip
            unit[reads], spread[reads] = mixed[reads], mixed_err[reads]
        unit[reads] += weight @ own_need
        for c in np.unique(need[unseen]):  # net of the tail's, which stands for the grid's
            net = weight[unseen][need[unseen] == c].sum()
            spread += np.abs(by_class(steps, seen, np.array([c]), [net]))
        trend = time_trend(steps[:, E.SNAP_T], seen, steady, grid_waves)
        # the waves whose middles the prefix dispatched: one class (how far the SMs are out of
        # step does not depend on where in its period a wave starts)
        spread_waves = np.array(plan.marks[: len(spread_in)]) // slot
        spread_seen = np.zeros(len(spread_in), np.int64)
        spreading = spread_trend(spread_in, spread_seen, spread_waves, grid_waves[-1])
        # the HBM bytes rise while the L2 still fills (settling); with it holding as much at
        # the last checkpoint as at the first, a rise is a drift the error estimate carries
        held = snaps[:, E.SNAP_HELD]
        settled = abs(held[-1] - held[0]) <= L2_SETTLED * l2_bytes
        hbm_steps = steps[:, E.SNAP_HBM :].sum(axis=1)
        hbm_trend = time_trend(hbm_steps, seen, steady, grid_waves) if settled else 0.0
        # the grid's whole waves (its last stands in the prefix, as does the prefix's last)
        unseen_waves = int((~np.isin(visits[:-2], visited)).sum())
        dirty_unsure = dirty_range(snaps, plan, full)
    else:
        # CTAs that differ: what a period adds, between checkpoints a period apart (the
        # later of two pairs a wave apart, whose disagreement is the error estimate); its
        # time, the mean over the chain of the prefix's periods, with the mean's standard
        # error in the estimate too. A causal grid's periods take different times as its SMs'
        # phases change: FA2 causal at N = 2k, 16 heads on 8 SMs with 4 MiB takes 10.2-11.1 us
        # a period, and its last period alone stood for the 7 left: 1.15% short against an
        # estimate of 0.08% (0.59% against 1.45% now). The HBM bytes keep the last period's:
        # the chain's first periods may still fill the L2
        unit = (snaps[-1] - snaps[-3]) * periods
        spread = np.abs(snaps[-1] - snaps[-3] - (snaps[-2] - snaps[-4])) * periods
        # and the HBM bytes of the period before (the chain's last): the two pairs may share
        # a phase of the SMs the grid's periods do not (FA2 causal at N = 2k, 16 heads,
        # d = 128 on 4 SMs with 8 MiB: one K and one V tile a period too few in both, 0.98%
        # short against an estimate of 0)
        before = np.abs(snaps[-2] - 2 * snaps[-4] + snaps[-5]) * periods
        spread[E.SNAP_HBM :] += before[E.SNAP_HBM :]
        chain = snaps[[*range(len(snaps) - 3), -2], E.SNAP_T]
        times = np.diff(chain)
        unit[E.SNAP_T] = times.mean() * periods
        if len(times) > 1:
            spread[E.SNAP_T] += times.std(ddof=1) / math.sqrt(len(times)) * periods
        trend = spreading = hbm_trend = dirty_unsure = 0.0  # the prefix ends as a period
        unseen_waves = 0
    last_held = snaps[-1, E.SNAP_HELD]
    return Extension(
        time=unit[E.SNAP_T],
        time_err=spread[E.SNAP_T] + abs(trend) + abs(spreading),
        trend=trend,
        spreading=spreading,
        hbm=unit[E.SNAP_HBM :].reshape(-1, 2),
        counted=periods * counter.tensor_bytes[0] + counter.tensor_bytes[1],
        dirtied=unit[E.SNAP_DIRTY],
        busy=unit[E.SNAP_BUSY : E.SNAP_HELD],
        work=periods * counter.work[0] + counter.work[1],
        hbm_err=float(spread[E.SNAP_HBM :].sum()) + abs(hbm_trend),
        held=(last_held, min(l2_bytes, last_held + unit[E.SNAP_HELD])),
        waves=math.ceil(full / slot),
        unseen_waves=unseen_waves,
        dirty_unsure=dirty_unsure,
    )


def dirty_range(snaps, plan: Plan, full: int) -> float:
    """How far the L2's dirty bytes at the grid's end may be from those at the prefix's end,
    which stand for them: 0 where the prefix ends where the grid does in its period, else
    their range over the prefix's last period of checkpoints. The dirty lines rise and fall
    with where in its period a wave is: FA2 at N = 4k, 4 heads on 4 SMs with a 4 MiB L2
    keeps each head's output lines dirty until the next head's K and V evict them (0.16 to
    0.94 MiB over a period), and a prefix of a head and a half ended with 0.64 MiB dirty
    where the grid ends with 1.02 MiB: its HBM writes 12% long, 2.5% of the HBM bytes."""
    if (full - plan.replayed) % plan.period == 0:
        return 0.0
    recent = np.asarray(plan.marks) >= plan.marks[-1] - plan.period
    dirty = snaps[recent, E.SNAP_DIRTY]
    return float(dirty.max() - dirty.min())


def extend(
    res: SimResult, k: int, x: Extension, busy, meta, gpu, later_unsure: bool
) -> tuple[SimResult, float, float]:
    """The full result from the replay of the prefix ``res`` (``busy``: the engine's busy
    seconds at its end) and the extension ``x`` of its sampled kernel ``k``
    (``later_unsure``: whether the kernels after it read lines ``period_shift`` did not
    move, ``later_reads_unmoved``), with the relative error estimates of its time and HBM
    bytes."""
    full = tuple(kr.ctas for kr in meta.kernels)
    # written lines reach HBM only as the L2 evicts them: what the grid adds dirties its HBM
    # writes plus the growth of the dirty lines, and the grid ends with the prefix's dirty
    # share of an L2 that holds what it grew to (where the sampled kernel is the last)
    dirty_end = res.l2_dirty_bytes_at_end * (x.grows if k == len(full) - 1 else 1.0)
    rows = {t.name: i for i, t in enumerate(meta.tensors)}  # the engine's tensor rows
    rows[LOCAL_NAME] = len(meta.tensors)
    # the dirtied lines shared out as the tensors' writes are
    wrote = {t.name: t.global_write_bytes for t in res.tensors}
    settle = (res.l2_dirty_bytes_at_end + x.dirtied - dirty_end) / max(1, sum(wrote.values()))
    tensors = []
    for t in res.tensors:
        i = rows[t.name]
        written = t.hbm_write_bytes + x.hbm[i, 1] + settle * wrote[t.name]
        tensors.append(
            TensorTraffic(
                t.name,
                t.global_read_bytes + int(x.counted[i, 0]),
                t.global_write_bytes + int(x.counted[i, 1]),
                t.hbm_read_bytes + round(x.hbm[i, 0]),
                max(0, round(written)),
            )
        )
    sums = {f: sum(getattr(t, f) for t in tensors) for f in _TENSOR_FIELDS}
    kernels = list(res.kernels)
    kernels[k] = dataclasses.replace(
        kernels[k],
        ctas=full[k],
        waves=x.waves,
        time_s=kernels[k].time_s + x.time,
        global_read_bytes=kernels[k].global_read_bytes + int(x.counted[:, 0].sum()),
        global_write_bytes=kernels[k].global_write_bytes + int(x.counted[:, 1].sum()),
        hbm_read_bytes=kernels[k].hbm_read_bytes + round(x.hbm[:, 0].sum()),
        hbm_write_bytes=kernels[k].hbm_write_bytes + round(x.hbm[:, 1].sum()),
    )
    # what the tensors' HBM writes settle beyond the kernels' increments: the last kernel's
    kernels[-1] = dataclasses.replace(
        kernels[-1],
        hbm_write_bytes=max(0, sums["hbm_write_bytes"] - sum(kr.hbm_write_bytes for kr in kernels)
                            + kernels[-1].hbm_write_bytes),
    )  # fmt: skip
    t_now = 0.0
    for i, kr in enumerate(kernels):
        kernels[i] = dataclasses.replace(kr, start_s=t_now)
        t_now += kr.time_s
    breakdown = breakdown_of(busy + x.busy, gpu, len(kernels))
    total_hbm = max(1, sums["hbm_read_bytes"] + sums["hbm_write_bytes"])
    # and an L2 still filling at the checkpoints: its dirty share at the end is a guess; and
    # where the kernels after it read lines the prefix left that were not moved to the
    # grid's last periods, they may read up to the L2's size more or less from HBM
    later = sum(kr.global_read_bytes for kr in res.kernels[k + 1 :]) if later_unsure else 0
    hbm_err = (x.hbm_err + abs(dirty_end - res.l2_dirty_bytes_at_end) + x.dirty_unsure
               + min(gpu.l2_bytes, later))  # fmt: skip
    out = dataclasses.replace(
        res,
        kernels=tuple(kernels),
        tensors=tuple(tensors),
        **sums,
        l2_dirty_bytes_at_end=round(dirty_end),
        mma_flops=res.mma_flops + int(x.work[0]),
        elementwise_flops=res.elementwise_flops + int(x.work[1]),
        exps=res.exps + int(x.work[2]),
        shared_exchange_bytes=res.shared_exchange_bytes + int(x.work[3]),
        time_s=t_now,
        cycles=gpu.s_to_cycles(t_now),
        breakdown=breakdown,
        utilization=busy_fractions(breakdown, t_now),
    )
    return out, x.time_err / max(t_now, 1e-30), hbm_err / total_hbm


_TENSOR_FIELDS = ("global_read_bytes", "global_write_bytes", "hbm_read_bytes", "hbm_write_bytes")
