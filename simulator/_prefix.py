"""Which CTAs a sampled replay replays (``simulator.sampled``): a kernel's period and whether
its CTAs are alike, and its prefix with the CTAs at whose dispatch the memory system is
checkpointed (``Plan``)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from flashio.simulator._wave_classes import by_start_and_span, by_visits, kinds
from flashio.simulator.trace import Trace, TraceSource

STEADY_WAVES = 4  # waves between the checkpoints of alike CTAs, at least
# a prefix of unlike CTAs holds a chain of at least this many periods past its first waves,
# whose mean times a period: a causal grid's periods take different times as its SMs' phases
# change, in cycles of periods (FA2's causal backward at N = 1k, 16 heads on 8 SMs, a wave a
# period: 18.6 and 2.9 us in turn), and chains of three or fewer stood for them 16-20% long
# (against estimates of 66-100%); of 60 causal grids the property tests draw, a chain of one
# missed its estimate at 7 (up to 4.2% in time against 0), of two or three at none, and of
# four none was more than 0.7% off in time or 3% in HBM bytes (27 then replayed whole)
CHAIN_PERIODS = 4


def first_ctas(source: TraceSource, ctas: list[int]) -> TraceSource:
    """``source`` with only the first ``ctas[k]`` CTAs of each kernel k (dispatched first): the
    same events under a meta of fewer CTAs (the engine asks for no others). A ``Trace`` stays
    one, so that it is replayed from memory as a whole trace is."""
    kernels = tuple(
        dataclasses.replace(k, ctas=n) for k, n in zip(source.meta.kernels, ctas, strict=True)
    )
    meta = dataclasses.replace(source.meta, kernels=kernels)
    if isinstance(source, Trace):
        return source.with_meta(meta)
    return _Lazy(source, meta)


class _Lazy:
    """A lazy source under another meta; its ``cta_events`` is the source's own (so that one
    that writes into buffers, ``out=``, still does)."""

    def __init__(self, source: TraceSource, meta):
        self.meta = meta
        self.cta_events = source.cta_events


def _signature(source: TraceSource, k: int, c: int) -> tuple[int, int, int]:
    """What CTA ``c`` of kernel ``k`` does: its events, bytes and FLOPs."""
    ev = source.cta_events(k, c, c + 1)
    return len(ev), int(ev["bytes"].sum()), int(ev["flops"].sum())


def grid_period(meta, k: int) -> int:
    """CTAs after which kernel ``k``'s grid repeats itself: those of one (batch, K/V head),
    whose CTAs read the same K and V (a query head's, or a GQA group's)."""
    p = meta.params
    groups = int(p.get("batch", 1)) * int(p.get("kv_heads") or p.get("heads", 1))
    ctas = meta.kernels[k].ctas
    return ctas // groups if groups and ctas % groups == 0 else ctas


def grid_kind(source: TraceSource, k: int, full: int, period: int) -> tuple[bool, bool]:
    """(alike, periodic): whether kernel ``k``'s CTAs have equal event counts, and whether
    they repeat with ``period``; each read at a few spread CTAs."""
    probe = sorted({0, period // 2, period - 1})
    seen = {c: _signature(source, k, c) for c in probe}
    periodic = all(
        _signature(source, k, c + shift) == seen[c]
        for c in probe
        for shift in {period, full - period}
        if c + shift < full
    )
    spread = {full // 4, full // 2, (3 * full) // 4, full - 1}
    sizes = {seen[c][0] for c in seen} | {_signature(source, k, c)[0] for c in spread}
    return len(sizes) == 1, periodic


@dataclass(frozen=True)
class Plan:
    kernel: int
    replayed: int  # CTAs of the prefix
    marks: tuple[int, ...]  # CTAs at whose dispatch the memory system is checkpointed
    slot: int  # CTAs a wave
    period: int
    alike: bool


def plan_prefix(meta, k: int, slot: int, waves: int, alike: bool, limit: int | None = None):
    """Kernel ``k``'s prefix and checkpoints (``alike``: whether its CTAs are), or None where
    it is to be replayed whole; a prefix of alike CTAs is chosen among those of at most
    ``limit`` CTAs (``sampled._longest_prefix``; None: the grid's) where one shows every
    kind of wave (``showing_every_kind``)."""
    full, period = meta.kernels[k].ctas, grid_period(meta, k)
    # checkpoints after `waves` waves, over a period and a wave (unlike CTAs: CHAIN_PERIODS
    # periods and a wave; and at least STEADY_WAVES waves), all in the prefix; which ends
    # where the grid does in its last wave (alike CTAs) or in its period (unlike ones): its
    # tail is the grid's
    span = slot + period if alike else slot + CHAIN_PERIODS * period
    least = waves * slot + max(span, STEADY_WAVES * slot) + 1
    unit = slot if alike else period
    replayed = full - ((full - least) // unit) * unit
    if alike:
        limit = full if limit is None else limit
        replayed = showing_every_kind(replayed, full, slot, period, waves, limit)
    if replayed >= full:
        return None
    if alike:  # every wave boundary from the `waves`-th to the prefix's last one
        marks = tuple(range(waves * slot, replayed, slot))
    else:  # a chain of periods from the `waves`-th wave on, ending with two periods a wave
        # apart, the later ending with the prefix's last dispatch
        a = replayed - 1 - slot - period
        chain = tuple(range(a - period, waves * slot - 1, -period))[::-1]
        marks = (*chain, a, a + slot, a + period, a + slot + period)
    return Plan(k, replayed, marks, slot, period, alike)


def showing_every_kind(
    replayed: int, full: int, slot: int, period: int, waves: int, limit: int
) -> int:
    """``replayed``, or a prefix up to a cycle of waves and periods longer whose steady waves
    (those between its checkpoints, from the ``waves``-th) include every kind the grid's
    remaining waves are of (``by_start_and_span``: a head's first wave reads its K and V from
    HBM, a later one from the L2) and that ends as the grid does (``ends_alike``): of those
    of at most ``limit`` CTAs (``sampled._longest_prefix``) and twice the first, the one
    that leaves the fewest of the grid's waves of a kind by their visits it lacks
    (``by_visits``), then the shortest; where none is that short, the first longer one (the
    grid is then replayed whole); where none ends as the grid does, the first that shows
    every kind. On 55 SMs with a 30 MiB L2, FA2 at N = 32k first shows a wave within one
    head after another such wave (3.6 MB of HBM reads, against 15.3 MB after a wave that
    began the head) in its eighth wave."""
    cycle = math.lcm(slot, period) // slot
    every = beyond = best = shortest = None
    for n in range(replayed, min(full, replayed + (cycle + 1) * slot), slot):
        seen, need = kinds(by_start_and_span, n, full, slot, period, waves)
        if not np.isin(need, seen).all():
            continue
        every = every or n
        if not ends_alike(n, full, slot, period):
            continue
        if n > limit:  # too long to gain: the grid is replayed whole
            beyond = n
            break
        shortest = shortest or n
        if n > 2 * shortest:  # what it replays more: at most the first such prefix
            break
        visited, visits = kinds(by_visits, n, full, slot, period, waves)
        key = (int((~np.isin(visits, visited)).sum()), n)
        best = min(best, key) if best else key
    return best[1] if best else beyond or every or replayed


def ends_alike(n: int, full: int, slot: int, period: int) -> bool:
    """Whether a prefix of ``n`` CTAs ends as the grid does: its last, partial wave (which
    stands for the grid's) and the whole wave before it of the grid's last two waves' kinds
    (``by_start_and_span``). What a partial wave adds after its checkpoint depends on the wave
    before it: FA2 at N = 64k on an H200 writes back a two-head wave's output lines there
    (14.1 MB of HBM traffic), where a one-head wave's stay dirty in the L2 (0.5 MB)."""
    last, end = math.ceil(n / slot) - 1, math.ceil(full / slot) - 1
    mine = by_start_and_span(np.array([last - 1, last]), slot, period, n)
    grids = by_start_and_span(np.array([end - 1, end]), slot, period, full)
    return bool((mine == grids).all())
