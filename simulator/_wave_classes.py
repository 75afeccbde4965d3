"""What a wave of alike CTAs adds, by class, for ``simulator.sampled``: waves are classed by
where in its period each starts or by how many periods its CTAs come from, and a class's
increment is its mean over the steady waves of a prefix."""

from __future__ import annotations

import math

import numpy as np


def periods_touched(waves: np.ndarray, slot: int, period: int, ctas: int) -> np.ndarray:
    """How many periods the CTAs of each wave (``slot`` CTAs from ``wave * slot``, of a grid
    of ``ctas``) belong to."""
    first = waves * slot
    last = np.minimum(first + slot, ctas) - 1
    return last // period - first // period + 1


def heads_begun(waves: np.ndarray, slot: int, period: int, ctas: int) -> np.ndarray:
    """How many periods begin among the CTAs of each wave: the heads whose K and V it is the
    first to read. With ``periods_touched``, a wave's class where the prefix cannot show every
    start (``by_start_and_span``)."""
    first = waves * slot
    last = np.minimum(first + slot, ctas) - 1
    return last // period - (first - 1) // period


def by_start_and_span(waves: np.ndarray, slot: int, period: int, ctas: int) -> np.ndarray:
    """One class per (periods a wave touches, periods it begins): a wave within one head reads
    that head's K and V from the L2 if an earlier wave began it, from HBM if it begins it."""
    touched = periods_touched(waves, slot, period, ctas)
    return touched * (slot + 2) + heads_begun(waves, slot, period, ctas)


def earlier_visits(waves: np.ndarray, slot: int, period: int) -> np.ndarray:
    """How many earlier waves touched the period each wave starts in."""
    return waves - (waves * slot // period) * period // slot


def by_start(waves: np.ndarray, slot: int, period: int, ctas: int) -> np.ndarray:
    """One class per CTA of its period at which a wave starts, the finest class."""
    return waves * slot % period


def by_visits(waves: np.ndarray, slot: int, period: int, ctas: int) -> np.ndarray:
    """One class per (periods a wave touches, earlier waves that touched the first of them),
    finer than ``by_start_and_span``. Where the waves' starts move through the periods, a
    head's CTAs fall into three waves or into two: the second wave of a head spread over two
    spans two heads and begins one, as the third of a head spread over three does, but finds
    less of its first head's K and V in the L2 (FA2 at N = 64k on an H200: 33.4 MB of K
    against 27.4-27.6 MB). ``simulator.sampled`` counts the waves of kinds its prefix lacks
    (``Sampling.unseen_waves``)."""
    earlier = earlier_visits(waves, slot, period)
    return periods_touched(waves, slot, period, ctas) * (period // slot + 2) + earlier


def kinds(classify, n: int, full: int, slot: int, period: int, first: int):
    """(seen, need) under ``classify`` (one of the ``by_*`` above) for a prefix of ``n`` of a
    grid's ``full`` CTAs: the classes of the prefix's steady waves (from wave ``first`` to
    before its last, partial one), and those its extension needs: the grid's waves from the
    prefix's last on, then the prefix's last (which stands for the grid's)."""
    last = math.ceil(n / slot) - 1
    seen = classify(np.arange(first, last), slot, period, n)
    grid = classify(np.arange(last, math.ceil(full / slot)), slot, period, full)
    return seen, np.append(grid, classify(np.array([last]), slot, period, n))


def by_class(steps: np.ndarray, seen: np.ndarray, need: np.ndarray, weight) -> np.ndarray:
    """The sum, over waves of classes ``need`` times ``weight``, of what a wave of its class
    adds: the mean of the ``steps`` of that class (classes ``seen``); a class not seen, from
    the straight line through the means of those seen (their mean if only one was)."""
    classes = np.unique(seen)
    means = np.array([steps[seen == c].mean(axis=0) for c in classes])
    if len(classes) > 1:
        slope, icpt = np.polyfit(classes.astype(float), means, 1)
    else:
        slope, icpt = np.zeros_like(means[0]), means[0]
    total = np.zeros(steps.shape[1])
    for c, w in zip(need, weight, strict=True):
        hit = np.flatnonzero(classes == c)
        total += w * (means[hit[0]] if hit.size else icpt + c * slope)
    return total


def class_error(steps: np.ndarray, seen: np.ndarray, need: np.ndarray, weight) -> np.ndarray:
    """An error estimate of ``by_class``: each class mean's standard error (a class seen
    once: the largest relative one of the others; a class not seen, or no spread to go by:
    its whole value) times the waves that need it."""
    classes = np.unique(seen)
    means = np.array([steps[seen == c].mean(axis=0) for c in classes])
    rel = [  # a column whose mean is 0 has no relative error to lend
        _relative(steps[seen == c].std(axis=0, ddof=1) / np.sqrt((seen == c).sum()), m)
        for c, m in zip(classes, means, strict=True)
        if (seen == c).sum() > 1
    ]
    worst = np.max(rel, axis=0) if rel else np.ones(steps.shape[1])
    err = np.zeros(steps.shape[1])
    for c in np.unique(need):
        waves = abs(np.asarray(weight)[need == c].sum())
        hit = np.flatnonzero(classes == c)
        if not hit.size:
            err += waves * np.abs(by_class(steps, seen, np.array([c]), [1.0]))
            continue
        n_c = (seen == c).sum()
        se = steps[seen == c].std(axis=0, ddof=1) / np.sqrt(n_c) if n_c > 1 else None
        err += waves * (se if se is not None else worst * np.abs(means[hit[0]]))
    return err


def _relative(err: np.ndarray, mean: np.ndarray) -> np.ndarray:
    return np.divide(err, np.abs(mean), out=np.zeros_like(err), where=mean != 0)


def _drift_slope(values: np.ndarray, seen: np.ndarray, waves: np.ndarray) -> float:
    """The least-squares slope of each steady wave's value less its class mean against the
    wave's index, where the line rises (or falls) over the waves by more than twice the
    largest residual about it (a drift, not scatter: a rise that levels off in the last wave
    still counts); else 0."""
    if len(waves) < 3:
        return 0.0
    resid = values.astype(float).copy()
    for c in np.unique(seen):
        resid[seen == c] -= values[seen == c].mean()
    x = waves.astype(float) - waves.mean()
    slope = float((x * resid).sum() / (x * x).sum())
    scatter = np.abs(resid - slope * x).max()
    if abs(slope) * float(x.max() - x.min()) <= 2 * scatter:
        return 0.0
    return slope


def time_trend(steps: np.ndarray, seen: np.ndarray, waves: np.ndarray, need: np.ndarray) -> float:
    """What a steady, one-way change of the waves' time would add over the waves ``need``
    (wave indices) beyond their class means, or 0 (``_drift_slope``). A grid that drifts (the
    L2 holding less of what the CTAs on the SMs share as the grid goes on) is not in its
    steady state at the prefix's end. The same of the waves' HBM bytes, where the L2 has
    settled (``simulator.sampled``), goes to the HBM error estimate."""
    return _drift_slope(steps, seen, waves) * float((need - waves.mean()).sum())


def spread_trend(spread: np.ndarray, seen: np.ndarray, waves: np.ndarray, last: int) -> float:
    """How much the waves' inner spread (``spread``: seconds from a wave's first dispatch to
    its middle one's, per steady wave ``waves``) would grow by wave ``last`` at a steady,
    one-way rate (``_drift_slope``), or 0. Waves that dispatch in step have none; SMs falling
    out of step spread them, up to half a wave. A spread still growing at the prefix's end is
    a state the prefix has not reached: the grid's end (its last CTAs, the L2 lines its SMs
    still share) is not the prefix's."""
    return _drift_slope(spread, seen, waves) * float(last - waves[-1])


def footprint(ev: np.ndarray) -> tuple[tuple[int, int], ...]:
    """The byte ranges ``ev``'s regions cover (each ``rows`` rows of ``row_bytes`` bytes,
    ``row_stride_bytes`` apart), merged and in order."""
    rows = ev["rows"].astype(np.int64)
    total = int(rows.sum())
    if not total:
        return ()
    # each row's index within its region, without a loop over the regions (a CTA's K or V:
    # tens of thousands of rows)
    index = np.arange(total) - np.repeat(np.cumsum(rows) - rows, rows)
    starts = np.repeat(ev["offset_bytes"].astype(np.int64), rows) + index * np.repeat(
        ev["row_stride_bytes"].astype(np.int64), rows
    )
    ends = starts + np.repeat(ev["row_bytes"].astype(np.int64), rows)
    order = np.argsort(starts, kind="stable")
    starts, reach = starts[order], np.maximum.accumulate(ends[order])
    # a range begins at a row that starts past every earlier row's end; it ends at the
    # furthest end reached before the next one begins
    begins = np.flatnonzero(np.r_[True, starts[1:] > reach[:-1]])
    stops = reach[np.r_[begins[1:] - 1, len(starts) - 1]]
    return tuple(zip(starts[begins].tolist(), stops.tolist(), strict=True))


def first_reads(waves: np.ndarray, slot: int, period: int, ctas: int, per_cta, per_period):
    """The bytes of each tensor the waves ``waves`` are the first to read, one row a wave:
    each CTA its own (``per_cta``: a query tile), and each period begun its shared ones
    (``per_period``: a head's K and V), whichever wave reads them the L2 cannot have held."""
    first = waves * slot
    count = np.minimum(first + slot, ctas) - first
    begun = heads_begun(waves, slot, period, ctas)
    return np.outer(count, per_cta) + np.outer(begun, per_period)
