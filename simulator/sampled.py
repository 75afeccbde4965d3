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
is replayed whole.

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
(``_period_shift``); elsewhere what the kernels after it read, up to the L2's size, is added
to the HBM error estimate, as is the range of the L2's dirty bytes over a period where the
prefix ends elsewhere in its period than the grid does.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from flashio.simulator import _state as E
from flashio.simulator._counted import Counter
from flashio.simulator._l2 import LINES_PER_GRANULE, shift_granules
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
from flashio.simulator.gpu import GPUSpec
from flashio.simulator.result import SimResult, TensorTraffic
from flashio.simulator.simulate import (
    DEFAULT_OPTIONS,
    LOCAL_NAME,
    Probe,
    breakdown_of,
    busy_fractions,
    cta_events_mean,
    launch_resources,
    replay,
    spill_bytes,
)
from flashio.simulator.specfiles import load_gpu
from flashio.simulator.trace import MEMORY_OPS, Op, Space, Trace, TraceSource

__all__ = ["Sampling", "simulate_sampled"]

SAMPLED_WAVES = 2  # waves of the sampled kernel replayed before its first checkpoint
STEADY_WAVES = 4  # waves between the checkpoints of alike CTAs, at least
L2_FULL = 0.98  # of its bytes held, an L2 is full (the model's holds whole 8 KiB granules)
# an L2 whose held bytes change by at most this share of it between a prefix's first and last
# checkpoints has settled: a rise of the waves' HBM bytes then is a drift, not its filling
L2_SETTLED = 0.01
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
# a prefix of unlike CTAs holds a chain of at least this many periods past its first waves,
# whose mean times a period: a causal grid's periods take different times as its SMs' phases
# change, in cycles of periods (FA2's causal backward at N = 1k, 16 heads on 8 SMs, a wave a
# period: 18.6 and 2.9 us in turn), and chains of three or fewer stood for them 16-20% long
# (against estimates of 66-100%); of 60 causal grids the property tests draw, a chain of one
# missed its estimate at 7 (up to 4.2% in time against 0), of two or three at none, and of
# four none was more than 0.7% off in time or 3% in HBM bytes (27 then replayed whole)
CHAIN_PERIODS = 4


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


def _first_ctas(source: TraceSource, ctas: list[int]) -> TraceSource:
    """``source`` with only the first ``ctas[k]`` CTAs of each kernel k (dispatched first): the
    same events under a meta of fewer CTAs (the engine asks for no others). A ``Trace`` stays
    one, so that it is replayed from memory as a whole trace is."""
    kernels = tuple(
        dataclasses.replace(k, ctas=n) for k, n in zip(source.meta.kernels, ctas, strict=True)
    )
    meta = dataclasses.replace(source.meta, kernels=kernels)
    if isinstance(source, Trace):
        return source.with_meta(meta)
    return _Prefix(source, meta)


class _Prefix:
    """A lazy source under another meta; its ``cta_events`` is the source's own (so that one
    that writes into buffers, ``out=``, still does)."""

    def __init__(self, source: TraceSource, meta):
        self.meta = meta
        self.cta_events = source.cta_events


def _signature(source: TraceSource, k: int, c: int) -> tuple[int, int, int]:
    """What CTA ``c`` of kernel ``k`` does: its events, bytes and FLOPs."""
    ev = source.cta_events(k, c, c + 1)
    return len(ev), int(ev["bytes"].sum()), int(ev["flops"].sum())


def _period(meta, k: int) -> int:
    """CTAs after which kernel ``k``'s grid repeats itself: those of one (batch, K/V head),
    whose CTAs read the same K and V (a query head's, or a GQA group's)."""
    p = meta.params
    groups = int(p.get("batch", 1)) * int(p.get("kv_heads") or p.get("heads", 1))
    ctas = meta.kernels[k].ctas
    return ctas // groups if groups and ctas % groups == 0 else ctas


def _grid(source: TraceSource, k: int, full: int, period: int) -> tuple[bool, bool]:
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
class _Plan:
    kernel: int
    replayed: int  # CTAs of the prefix
    marks: tuple[int, ...]  # CTAs at whose dispatch the memory system is checkpointed
    slot: int  # CTAs a wave
    period: int
    alike: bool


def _plan(meta, k: int, slot: int, waves: int, alike: bool, limit: int | None = None):
    """Kernel ``k``'s prefix and checkpoints (``alike``: whether its CTAs are), or None where
    it is to be replayed whole; a prefix of alike CTAs is chosen among those of at most
    ``limit`` CTAs (``_longest_prefix``; None: the grid's) where one shows every kind of wave
    (``_showing_every_kind``)."""
    full, period = meta.kernels[k].ctas, _period(meta, k)
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
        replayed = _showing_every_kind(replayed, full, slot, period, waves, limit)
    if replayed >= full:
        return None
    if alike:  # every wave boundary from the `waves`-th to the prefix's last one
        marks = tuple(range(waves * slot, replayed, slot))
    else:  # a chain of periods from the `waves`-th wave on, ending with two periods a wave
        # apart, the later ending with the prefix's last dispatch
        a = replayed - 1 - slot - period
        chain = tuple(range(a - period, waves * slot - 1, -period))[::-1]
        marks = (*chain, a, a + slot, a + period, a + slot + period)
    return _Plan(k, replayed, marks, slot, period, alike)


def _showing_every_kind(
    replayed: int, full: int, slot: int, period: int, waves: int, limit: int
) -> int:
    """``replayed``, or a prefix up to a cycle of waves and periods longer whose steady waves
    (those between its checkpoints, from the ``waves``-th) include every kind the grid's
    remaining waves are of (``by_start_and_span``: a head's first wave reads its K and V from
    HBM, a later one from the L2) and that ends as the grid does (``_ends_alike``): of those
    of at most ``limit`` CTAs (``_longest_prefix``) and twice the first, the one that leaves
    the fewest of the grid's waves of a kind by their visits it lacks (``by_visits``), then
    the shortest; where none is that short, the first longer one (the grid is then replayed
    whole); where none ends as the grid does, the first that shows every kind. On 55 SMs
    with a 30 MiB L2, FA2 at N = 32k first shows a wave within one head after another such
    wave (3.6 MB of HBM reads, against 15.3 MB after a wave that began the head) in its
    eighth wave."""
    cycle = math.lcm(slot, period) // slot
    every = beyond = best = shortest = None
    for n in range(replayed, min(full, replayed + (cycle + 1) * slot), slot):
        seen, need = kinds(by_start_and_span, n, full, slot, period, waves)
        if not np.isin(need, seen).all():
            continue
        every = every or n
        if not _ends_alike(n, full, slot, period):
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


def _ends_alike(n: int, full: int, slot: int, period: int) -> bool:
    """Whether a prefix of ``n`` CTAs ends as the grid does: its last, partial wave (which
    stands for the grid's) and the whole wave before it of the grid's last two waves' kinds
    (``by_start_and_span``). What a partial wave adds after its checkpoint depends on the wave
    before it: FA2 at N = 64k on an H200 writes back a two-head wave's output lines there
    (14.1 MB of HBM traffic), where a one-head wave's stay dirty in the L2 (0.5 MB)."""
    last, end = math.ceil(n / slot) - 1, math.ceil(full / slot) - 1
    mine = by_start_and_span(np.array([last - 1, last]), slot, period, n)
    grids = by_start_and_span(np.array([end - 1, end]), slot, period, full)
    return bool((mine == grids).all())


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
    period = _period(meta, k)
    alike, periodic = _grid(source, k, full[k], period)
    if saving is None:
        long = full[k] >= LONG_GRID * slot and full[k] >= LONG_GRID // 2 * period
        saving = LONG_SAVING if alike and long else SAVING
    limit = _longest_prefix(full[k], per_cta[k], exact_cost, saving)
    fill = _late_fill(source, k, slot, waves, alike, gpu.l2_bytes, limit) if periodic else None
    # where the first prefix would be replayed again, and the second would be too long to
    # gain, the grid is replayed whole at once (a wrong guess costs time, never accuracy)
    if fill is not None and _too_long(
        _plan(meta, k, slot, math.ceil(fill / slot) + 1, alike, limit), limit
    ):
        periodic = False
    own = _own_reads(source, k, period, full[k]) if alike and periodic else None
    for _ in range(2 if periodic else 0):  # a second prefix where the L2 fills after the first
        plan = _plan(meta, k, slot, waves, alike, limit)
        if _too_long(plan, limit):
            break
        n = plan.replayed
        # the prefix's last period is counted, and as much of it as the grid has past its
        # whole periods after the prefix
        a, left = n - plan.period, (full[k] - n) % plan.period
        counter = Counter([(a, n), (a, a + left)], len(meta.tensors), spills)
        marks = np.array(sorted({*plan.marks, *_middles(plan)}), np.int64)
        granule = gpu.l2_line_bytes * LINES_PER_GRANULE
        shift, prefix_bytes, grid_bytes = _period_shift(source, plan, full[k], granule)
        mover = _ToLastPeriods(shift if grid_bytes >= gpu.l2_bytes else None)
        probe = Probe(marks, counter, at_end=mover)
        prefix = _first_ctas(source, [n if i == k else f for i, f in enumerate(full)])
        res = replay(prefix, gpu, options=options, probes={k: probe})
        snaps, spread = _split(probe, plan)
        ext = _extension(snaps, counter, plan, full[k], gpu.l2_bytes, spread, own)
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
                            or _later_reads_unmoved(source, k, shift))  # fmt: skip
            out = _extend(res, k, ext, probe.busy, meta, gpu, later_unsure)
            if abs(ext.trend) + abs(ext.spreading) <= DRIFT_TOLERANCE * out.time_s:
                return out
            break  # the waves drift or fall out of step: extended, the grid would miss
        # again, checkpoints from a wave after the L2 has filled, at the rate it filled
        # between the checkpoints
        marks = plan.marks
        rate = (snaps[-1, E.SNAP_HELD] - snaps[0, E.SNAP_HELD]) / max(1, marks[-1] - marks[0])
        fill = marks[-1] + (full_l2 - snaps[-1, E.SNAP_HELD]) / max(rate, 1e-30)
        waves = math.ceil(fill / slot) + 1
    res = replay(source, gpu, options=options)
    return _with(res, Sampling(full, full, 0.0, 0.0))


def _tensors(ev: np.ndarray, ops=MEMORY_OPS) -> set[int]:
    """The engine's tensor rows that the events ``ev`` of ops ``ops`` touch (not the local
    memory's, -1)."""
    return set(ev["tensor"][np.isin(ev["op"], ops) & (ev["tensor"] >= 0)].tolist())


def _period_shift(
    source, plan: _Plan, full: int, granule: int
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
    for t in sorted(_tensors(first)):
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


class _ToLastPeriods:
    """The sampled kernel's ``Probe.at_end``: the L2's lines move on by ``shift``
    (``_period_shift``), as the grid's last periods would have left them; None leaves them
    as they are. ``moved`` says whether it did."""

    def __init__(self, shift: np.ndarray | None):
        self.shift, self.moved = shift, False

    def __call__(self, l2) -> None:
        if self.shift is not None and self.shift.any():
            shift_granules(l2, self.shift)
            self.moved = True


def _later_reads_unmoved(source, k: int, shift: np.ndarray) -> bool:
    """Whether a kernel after kernel ``k`` reads a tensor that kernel ``k`` or one before it
    touched and whose lines ``_period_shift`` did not move (read from its first CTA): the L2
    then holds them as the prefix left them, not as the grid would."""
    firsts = [source.cta_events(i, 0, 1) for i in range(len(source.meta.kernels))]
    before = set().union(*(_tensors(ev) for ev in firsts[: k + 1]))
    read = set().union(*(_tensors(ev, [Op.LOAD]) for ev in firsts[k + 1 :]))
    return any(shift[t] == 0 for t in read & before)


def _longest_prefix(ctas: int, cta_events: float, exact_cost: float, saving: float) -> int:
    """The most CTAs a prefix of the sampled kernel (of ``ctas`` CTAs of ``cta_events`` events
    each) may have for the replay to have less than 1 / ``saving`` of the events of an exact
    one (``exact_cost``, every kernel's)."""
    others = exact_cost - ctas * cta_events
    return math.ceil((exact_cost / saving - others) / cta_events) - 1


def _too_long(plan: _Plan | None, limit: int) -> bool:
    """Whether there is no prefix, or one of more than ``limit`` CTAs (``_longest_prefix``)."""
    return plan is None or plan.replayed > limit


def _own_reads(source, k: int, period: int, ctas: int) -> tuple[np.ndarray, np.ndarray]:
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


def _late_fill(source, k: int, slot: int, waves: int, alike: bool, l2_bytes: int, limit: int):
    """The CTA of kernel ``k`` at which its L2 fills, where the grid's footprint says before
    any replay that the first prefix would be replayed again (its L2 still filling at its last
    checkpoint, and the written share of what the rest adds to it over ``L2_FILL_TOLERANCE``
    of the bytes moved); else None. An L2 that evicts nothing holds each granule the CTAs
    touched: the footprint of the tensors the kernel reads and writes, spread evenly over the
    grid (its periods touch slices of equal size)."""
    meta = source.meta
    plan = _plan(meta, k, slot, waves, alike, limit)
    full = meta.kernels[k].ctas
    if plan is None:
        return None
    period = _period(meta, k)
    ev = source.cta_events(k, 0, 1)
    ev = np.concatenate([ev, source.cta_events(k, period - 1, period)])
    touched, written = _tensors(ev), _tensors(ev, [Op.STORE, Op.REDUCE])
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


@dataclass(frozen=True)
class _Extension:
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
    # (``_dirty_unsure``), an HBM error the classes do not see
    dirty_unsure: float = 0.0

    @property
    def grows(self) -> float:
        """How many times the bytes the L2 holds grow from the last checkpoint to the end."""
        return self.held[1] / self.held[0] if self.held[0] else 1.0


def _middles(plan: _Plan) -> tuple[int, ...]:
    """The CTAs halfway through each checkpointed wave of alike CTAs, in the prefix: when
    they are dispatched tells how far the SMs have fallen out of step."""
    if not plan.alike:
        return ()
    half = plan.slot // 2
    return tuple(m + half for m in plan.marks if m + half < plan.replayed)


def _split(probe: Probe, plan: _Plan) -> tuple[np.ndarray, np.ndarray]:
    """The probe's checkpoints at ``plan.marks``, and each checkpointed wave's inner
    spread: seconds from its first dispatch to its middle one's (``_middles``)."""
    row = {int(m): i for i, m in enumerate(probe.marks)}
    snaps = probe.snaps[[row[m] for m in plan.marks]]
    t = probe.snaps[:, E.SNAP_T]
    spread = np.array([t[row[m + plan.slot // 2]] - t[row[m]] for m in plan.marks
                       if m + plan.slot // 2 in row])  # fmt: skip
    return snaps, spread


def _extension(
    snaps, counter: Counter, plan: _Plan, full: int, l2_bytes: int, spread_in: np.ndarray,
    own=None,
) -> _Extension:  # fmt: skip
    """Kernel ``plan.kernel``'s extension from its checkpoints, counted work, the
    checkpointed waves' inner spreads (``_split``) and, for alike CTAs, the bytes of each
    tensor a CTA and a period read alone (``_own_reads``)."""
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
        dirty_unsure = _dirty_unsure(snaps, plan, full)
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
    return _Extension(
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


def _dirty_unsure(snaps, plan: _Plan, full: int) -> float:
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


def _extend(
    res: SimResult, k: int, x: _Extension, busy, meta, gpu, later_unsure: bool
) -> SimResult:
    """The full result from the replay of the prefix ``res`` (``busy``: the engine's busy
    seconds at its end) and the extension ``x`` of its sampled kernel ``k``
    (``later_unsure``: whether the kernels after it read lines ``_period_shift`` did not
    move, ``_later_reads_unmoved``)."""
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
    replayed = tuple(kr.ctas for kr in res.kernels)
    time_err = x.time_err / max(t_now, 1e-30)
    return _with(out, Sampling(replayed, full, time_err, hbm_err / total_hbm, x.unseen_waves))


_TENSOR_FIELDS = ("global_read_bytes", "global_write_bytes", "hbm_read_bytes", "hbm_write_bytes")
