"""Sampled replay: the first waves of a kernel replayed exactly, the rest extrapolated.

A kernel of many waves of alike CTAs settles into a steady state: each further wave takes the
same time, and the grid repeats itself with a period (the CTAs of one batch and K/V head read
the same K and V, so the L2's hits and misses repeat head after head). ``simulate_sampled``
replays the schedule's largest such kernel three times, each run an exact replay of its first
CTAs (the schedule's other kernels whole, the L2 and servers carried from kernel to kernel as
in a full run): its first ``waves`` waves of CTAs; one wave more; one period more. The time
per wave comes from the first two runs, the bytes and counts per period from the first and
the last, and both are extended over the CTAs not replayed. Each increment read the other way
(time per period, HBM bytes per wave) gives a second extrapolation; how far the two disagree
is the error estimate. A schedule whose largest kernel is short, or whose CTAs differ (causal
or windowed masks: CTAs visit different numbers of blocks), is replayed whole.

What is extrapolated is the prefix's steady state: traffic that changes only late (a working
set that outgrows the L2 after many periods) is outside what the estimate sees, and waves that
straddle two periods in a pattern the prefix does not show move the HBM bytes by a few percent.
The L2 contents a kernel leaves to the next are those after its replayed prefix.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from flashio.simulator.gpu import GPUSpec
from flashio.simulator.result import SimResult, TensorTraffic
from flashio.simulator.simulate import (
    DEFAULT_OPTIONS,
    busy_fractions,
    launch_resources,
    simulate,
)
from flashio.simulator.specfiles import load_gpu
from flashio.simulator.trace import TraceSource

__all__ = ["Sampling", "simulate_sampled"]

SAMPLED_WAVES = 4  # waves of the sampled kernel replayed before its increments are read


@dataclass(frozen=True, slots=True)
class Sampling:
    """How a sampled result was made: per kernel the CTAs of its longest replayed prefix and of
    its grid (equal where it was replayed whole), and relative error estimates of the time and
    the HBM bytes (0 where every kernel was replayed whole)."""

    replayed_ctas: tuple[int, ...]
    total_ctas: tuple[int, ...]
    time_error: float  # estimated relative error of time_s
    hbm_error: float  # and of the HBM bytes

    @property
    def replayed_fraction(self) -> float:
        return sum(self.replayed_ctas) / max(1, sum(self.total_ctas))

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["replayed_fraction"] = self.replayed_fraction
        return d


class _FirstCTAs:
    """``source`` with only the first ``ctas[k]`` CTAs of each kernel k (dispatched first)."""

    def __init__(self, source: TraceSource, ctas: list[int]):
        self._source = source
        kernels = tuple(
            dataclasses.replace(k, ctas=n) for k, n in zip(source.meta.kernels, ctas, strict=True)
        )
        self.meta = dataclasses.replace(source.meta, kernels=kernels)

    def cta_events(self, kernel: int, start: int, stop: int) -> np.ndarray:
        return self._source.cta_events(kernel, start, stop)


def _uniform(source: TraceSource, k: int, ctas: int) -> bool:
    """Whether kernel ``k``'s CTAs look alike: equal event counts at five spread indices."""
    probe = sorted({0, ctas // 4, ctas // 2, (3 * ctas) // 4, ctas - 1})
    sizes = {len(source.cta_events(k, c, c + 1)) for c in probe}
    return len(sizes) == 1


def _period(meta, k: int) -> int:
    """CTAs after which kernel ``k``'s grid repeats itself: those of one (batch, K/V head),
    whose CTAs read the same K and V (a query head's, or a GQA group's)."""
    p = meta.params
    groups = int(p.get("batch", 1)) * int(p.get("kv_heads") or p.get("heads", 1))
    ctas = meta.kernels[k].ctas
    return ctas // groups if groups and ctas % groups == 0 else ctas


def simulate_sampled(
    source: TraceSource, gpu: GPUSpec | str, options=None, waves: int = SAMPLED_WAVES,
    saving: float = 2.0,
) -> SimResult:  # fmt: skip
    """``simulator.simulate(source, gpu, options=options, mode="sampled")``: see the module
    docstring. The kernel is sampled where its three runs replay less than 1 / ``saving`` of
    the events of an exact replay. The result carries ``sampling`` (``Sampling``)."""
    if waves < 2:
        raise ValueError(f"a sampled replay replays at least 2 waves first, got {waves}")
    gpu = gpu if isinstance(gpu, GPUSpec) else load_gpu(gpu)
    options = options or DEFAULT_OPTIONS
    meta = source.meta
    _, _, occs = launch_resources(meta, gpu, options)
    slots = [o.ctas_per_sm * gpu.sm_count for o in occs]
    full = [k.ctas for k in meta.kernels]
    # the kernel of the most events (a schedule's others are its short pre- and
    # post-processing kernels), so that each increment is one kernel's
    events = [len(source.cta_events(i, 0, 1)) for i in range(len(full))]
    exact_cost = sum(f * e for f, e in zip(full, events, strict=True))
    k = max(range(len(full)), key=lambda i: full[i] * events[i])
    period = _period(meta, k)
    start = waves * slots[k]  # the first `waves` waves; then a wave more, and a period more
    others = exact_cost - full[k] * events[k]
    cost = 3 * others + (3 * start + slots[k] + period) * events[k]
    worth = saving * cost < exact_cost and start + max(slots[k], period) < full[k]
    plan = (k, start, period) if worth and _uniform(source, k, full[k]) else None
    if plan is None:
        res = simulate(source, gpu, options=options)
        return _with(res, Sampling(tuple(full), tuple(full), 0.0, 0.0))
    k, start, period = plan
    runs = []
    for n in (start, start + slots[k], start + period):
        ctas = [n if i == k else f for i, f in enumerate(full)]
        runs.append(simulate(_FirstCTAs(source, ctas), gpu, options=options))
    return _extrapolate(runs, full, k, start, slots[k], period)


def _with(res: SimResult, sampling: Sampling) -> SimResult:
    object.__setattr__(res, "sampling", sampling)
    return res


def _extrapolate(runs, full, k, start, slot, period) -> SimResult:
    """The full result from the runs of ``start``, ``start + slot`` (one more wave) and
    ``start + period`` (one more period) CTAs of kernel ``k``: time per wave from the first
    two, bytes and counts per period from the first and the last."""
    base, wave, more = runs
    left = full[k] - start  # CTAs not replayed
    per_wave = wave.kernels[k].time_s - base.kernels[k].time_s
    per_period = more.kernels[k].time_s - base.kernels[k].time_s
    left_waves = math.ceil(full[k] / slot) - start // slot
    added = per_wave * left_waves
    # the same time read per period (fractional waves): how far the two disagree
    err = abs(per_period * left / period - added)
    periods = left / period

    def grow(x_more, x_base):  # the base run's value and a period's increment per period left
        value = x_base + (x_more - x_base) * periods
        return round(value) if isinstance(x_base, int) else value

    counts = {f: grow(getattr(more, f), getattr(base, f)) for f in _COUNT_FIELDS}
    # written lines reach HBM only as the L2 evicts them: what a period writes is its growth in
    # HBM writes plus dirty lines; the full run ends with the L2 as dirty as the longest prefix
    written = [r.hbm_write_bytes + r.l2_dirty_bytes_at_end for r in (base, more)]
    hbm_write = max(0, grow(written[1], written[0]) - more.l2_dirty_bytes_at_end)
    counts["hbm_write_bytes"] = hbm_write
    tensors = [
        TensorTraffic(tb.name, *(grow(getattr(tm, f), getattr(tb, f)) for f in _TENSOR_FIELDS))
        for tb, tm in zip(base.tensors, more.tensors, strict=True)
    ]
    grown = sum(t.hbm_write_bytes for t in tensors)  # shared out as the increments share it
    tensors = tuple(
        dataclasses.replace(t, hbm_write_bytes=round(t.hbm_write_bytes * hbm_write / grown))
        if grown
        else t
        for t in tensors
    )
    kernels, t_now = [], 0.0
    for i, (kb, km) in enumerate(zip(base.kernels, more.kernels, strict=True)):
        if i != k:
            kernels.append(dataclasses.replace(kb, start_s=t_now))
            t_now += kb.time_s
            continue
        others = sum(o.hbm_write_bytes for j, o in enumerate(base.kernels) if j != k)
        kernels.append(
            dataclasses.replace(
                kb,
                ctas=full[k],
                waves=math.ceil(full[k] / slot),
                start_s=t_now,
                time_s=kb.time_s + added,
                **{f: grow(getattr(km, f), getattr(kb, f)) for f in _TENSOR_FIELDS[:3]},
                hbm_write_bytes=max(0, hbm_write - others),
            )
        )
        t_now += kernels[-1].time_s
    # busy seconds grow with the work: per period, as the bytes do
    breakdown = {
        key: v if key == "launch_s" else grow(more.breakdown[key], v)
        for key, v in base.breakdown.items()
    }
    span = max(t_now, 1e-30)
    utilization = busy_fractions(breakdown, t_now)
    hbm = [r.hbm_read_bytes + r.hbm_write_bytes for r in runs]
    hbm_err = abs((hbm[1] - hbm[0]) * left / slot - (hbm[2] - hbm[0]) * periods)
    res = dataclasses.replace(
        more,
        kernels=tuple(kernels),
        tensors=tensors,
        time_s=t_now,
        cycles=base.cycles * t_now / max(base.time_s, 1e-30),
        breakdown=breakdown,
        utilization=utilization,
        **counts,
    )
    longest = start + max(slot, period)  # of the three runs
    replayed = tuple(longest if i == k else f for i, f in enumerate(full))
    total_hbm = max(1, res.hbm_read_bytes + res.hbm_write_bytes)
    return _with(res, Sampling(replayed, tuple(full), err / span, hbm_err / total_hbm))


_TENSOR_FIELDS = ("global_read_bytes", "global_write_bytes", "hbm_read_bytes", "hbm_write_bytes")
_COUNT_FIELDS = (
    "global_read_bytes",
    "global_write_bytes",
    "hbm_read_bytes",
    "hbm_write_bytes",
    "mma_flops",
    "elementwise_flops",
    "exps",
    "shared_exchange_bytes",
)
