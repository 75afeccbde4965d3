"""Grids of simulations: GPUs (real or scaled) x schedules x shapes x tiles, as rows
(``sweep_files`` writes and reads them)."""

from __future__ import annotations

import hashlib
import itertools
import math
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from flashio import kernels, simulator
from flashio.analysis.explore.comparison import result_figures
from flashio.analysis.explore.search import COMPILED
from flashio.kernels.registry import spec
from flashio.simulator.simulate import cta_events_mean

__all__ = [
    "PRICING",
    "SweepPoint",
    "SweepRow",
    "gpu_variants",
    "pareto_front",
    "run_sweep",
    "simulate_point",
    "sweep_points",
]


@dataclass(frozen=True, slots=True)
class SweepRow:
    """One simulated point of a sweep (figures are 0 and ``error`` says why when it cannot run)."""

    gpu: str
    schedule: str
    impl: str  # the implementation description the schedule runs with
    batch: int
    heads: int
    seq_len: int
    head_dim: int
    dtype: str
    causal: bool
    mask: str  # kv_seq_len, window and segments when set (``mask_text``), else ""
    block_q: int
    block_kv: int
    warps: int
    options: str  # the schedule's options as built, "key=value;...", e.g. flash_decode's splits
    mode: str  # simulate()'s mode: "exact", or "sampled" (a prefix replayed, the rest extended)
    pricing: str  # "compiled" (the issue model wherever it prices a kernel) or "pipe rates"
    sm_count: int
    smem_per_cta_bytes: int
    hbm_bandwidth_bytes_per_s: float
    l2_bytes: int
    mma_flops: int
    global_bytes: int
    hbm_bytes: int
    time_s: float
    bound: str
    ctas_per_sm: int
    occupancy_limiter: str
    compiled_kernels: str  # the kernels their compiled main loops priced, ";"-separated
    error: str


PRICING = {False: "pipe rates", True: "compiled"}


def gpu_variants(
    gpu: simulator.GPUSpec,
    sram_scales: Iterable[float] = (1.0,),
    hbm_scales: Iterable[float] = (1.0,),
    sm_scales: Iterable[float] = (1.0,),
    l2_scales: Iterable[float] = (1.0,),
) -> list[simulator.GPUSpec]:
    """Hypothetical GPUs: shared memory (per SM and per CTA), HBM bandwidth, the SM count and
    the L2's capacity scaled.

    The SM count is rounded to the nearest whole SM (at least one); each SM keeps its own
    resources and the L2 and HBM stay the chip's, as on a GPU partitioned by CUDA green
    contexts (docs/gpus.md, "What scales with what"). A variant is named e.g.
    ``h200-sram2x-hbm0.5x-sms66-l2x0.5``; the unscaled spec keeps its name.
    """
    out = []
    for s, h, m, c in itertools.product(sram_scales, hbm_scales, sm_scales, l2_scales):
        if not all(0 < x < math.inf for x in (s, h, m, c)):
            raise simulator.UsageError(
                f"scales must be positive, finite numbers, got sram {s}, hbm {h}, sms {m}, l2 {c}"
            )
        sms = max(1, round(gpu.sm_count * m))
        if s == 1 and h == 1 and c == 1 and sms == gpu.sm_count:
            out.append(gpu)
            continue
        name = (
            gpu.name
            + (f"-sram{s:g}x" if s != 1 else "")
            + (f"-hbm{h:g}x" if h != 1 else "")
            + (f"-sms{sms}" if sms != gpu.sm_count else "")
            + (f"-l2x{c:g}" if c != 1 else "")
        )
        smem = int(gpu.smem_per_sm_bytes * s)
        # the unified L1 grows with shared memory: the L1 beside it stays as it was
        l1 = gpu.l1_bytes_per_sm and gpu.l1_bytes_per_sm + smem - gpu.smem_per_sm_bytes
        out.append(
            gpu.replace(
                name=name,
                sm_count=sms,
                smem_per_sm_bytes=smem,
                l1_bytes_per_sm=max(0, l1),
                smem_per_cta_bytes=int(gpu.smem_per_cta_bytes * s),
                hbm_bandwidth_bytes_per_s=gpu.hbm_bandwidth_bytes_per_s * h,
                l2_bytes=int(gpu.l2_bytes * c),
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One point of a sweep, its blocks resolved: what a worker simulates."""

    gpu: simulator.GPUSpec
    schedule: str
    shape: kernels.AttentionShape
    block_q: int
    block_kv: int
    warps: int | None
    options: tuple[tuple[str, int], ...] = ()  # given to kernels.schedule (flash_decode: SMs)
    mode: str = "exact"  # simulate()'s mode
    compiled: bool = False  # priced by the issue model (search.COMPILED), else the pipe rates

    def key(self) -> tuple:
        """What identifies the point's row in an output (:func:`row_key`)."""
        s = self.shape
        return (self.gpu.name, self.schedule, s.batch, s.heads, s.seq_len, s.head_dim,
                s.dtype, s.causal, mask_text(s), self.block_q, self.block_kv,
                self.warps, self.mode, PRICING[self.compiled])  # fmt: skip


RESOURCES = ("sm_count", "smem_per_cta_bytes", "hbm_bandwidth_bytes_per_s", "l2_bytes")


def pareto_front(rows: list[SweepRow]) -> dict[tuple, list[SweepRow]]:
    """Per workload (schedule, shape and mask; each GPU with its own tiling), the swept GPUs no
    other GPU beats with no more of any resource (SMs, shared memory per CTA, HBM bandwidth,
    L2) and no more time, fastest first: the GPUs worth building for that workload. Points
    that do not fit are left out."""
    groups: dict[tuple, list[SweepRow]] = {}
    for r in rows:
        if not r.error:
            key = (r.schedule, r.batch, r.heads, r.seq_len, r.head_dim, r.dtype, r.causal,
                   r.mask)  # fmt: skip
            groups.setdefault(key, []).append(r)

    def beats(a: SweepRow, b: SweepRow) -> bool:
        le = all(getattr(a, f) <= getattr(b, f) for f in RESOURCES) and a.time_s <= b.time_s
        lt = any(getattr(a, f) < getattr(b, f) for f in RESOURCES) or a.time_s < b.time_s
        return le and lt

    return {
        key: sorted((r for r in pts if not any(beats(o, r) for o in pts)), key=lambda r: r.time_s)
        for key, pts in groups.items()
    }


def mask_text(shape: kernels.AttentionShape) -> str:
    """The shape's mask beyond causal, as a sweep row records it: ``kv_seq_len=N;window=W;
    segments=L1,L2;block_mask=BQxBK,DENSITY,DIGEST;paged_kv=PAGE,POOL,DIGEST`` (the parts that
    are set; a digest, of the kept blocks or the block table, tells masks of one density or
    caches of one page size apart), or "" for none."""
    parts = []
    if shape.kv_seq_len is not None:
        parts.append(f"kv_seq_len={shape.kv_seq_len}")
    if shape.window is not None:
        w = shape.window
        parts.append(f"window={w}" if isinstance(w, int) else f"window={w[0]},{w[1]}")
    if shape.segments is not None:
        parts.append("segments=" + ",".join(map(str, shape.segments)))
    bm = shape.block_mask
    if bm is not None:
        digest = hashlib.sha1(bm.bits).hexdigest()[:12]
        parts.append(f"block_mask={bm.block_q}x{bm.block_kv},{bm.density:.4f},{digest}")
    pk = shape.paged_kv
    if pk is not None:
        digest = hashlib.sha1(pk.ids).hexdigest()[:12]
        parts.append(f"paged_kv={pk.page_size},{pk.num_pages},{digest}")
    return ";".join(parts)


def sweep_points(
    gpus, names, shapes, blocks, warps=(None,), mode="exact", compiled=False
) -> list[SweepPoint]:
    """Every combination; blocks larger than a shape's sequence are clipped to it, and a block
    of None is the seed's rule B = M/(4d) on that GPU (``kernels.default_block`` of its shared
    memory per CTA), so a hypothetical GPU with more SRAM gets larger blocks. ``mode``:
    simulate()'s, for every point; ``compiled``: priced by the issue model."""
    out = []
    for gpu, name, shape, (bq, bkv), w in itertools.product(gpus, names, shapes, blocks, warps):
        n, nk = shape.seq_len, shape.n_kv
        rule = kernels.default_block(shape, gpu.smem_per_cta_bytes)  # B = M/(4d) on this GPU
        kind, opts = spec(name), ()
        if kind.own_tiles:  # its own tiles (flash_decode: flash-attn's) for a block of None
            rule = None
        if kind.needs_sm_count:  # flash_decode's split heuristic on this GPU
            opts = (("sm_count", gpu.sm_count),)
        sched = kernels.schedule(name, shape, block_q=min(bq, n) if bq else rule,
                                 block_kv=min(bkv, nk) if bkv else rule, warps=w,
                                 **dict(opts))  # fmt: skip
        tiles = (sched.block_q, sched.block_kv, sched.warps)
        out.append(SweepPoint(gpu, name, shape, *tiles, opts, mode, compiled))
    return out


# schedules' events held in memory between points (per process, each Dask worker's too)
TRACE_MEMORY_BYTES = 1 << 30


class _Events:
    """Events of the schedules earlier points replayed. A sweep's points share schedules (a
    tiling on many GPUs), and making the events is a fifth to two fifths of a replay's CPU time:
    the second point of a schedule keeps them in memory (a ``Trace``; the schedules used
    longest ago give way within ``TRACE_MEMORY_BYTES``), and its later points replay from
    there. The rows are the same: a trace replays as its schedule does."""

    def __init__(self, budget: int = TRACE_MEMORY_BYTES):
        self.budget = budget
        self.seen: dict[tuple, int] = {}
        self.traces: OrderedDict[tuple, tuple[simulator.Trace, float]] = OrderedDict()

    def source(self, key: tuple, sched):
        if key in self.traces:
            self.traces.move_to_end(key)
            return self.traces[key][0]
        self.seen[key] = self.seen.get(key, 0) + 1
        size = _trace_bytes(sched) if self.seen[key] == 2 else math.inf
        if size > self.budget:
            return sched
        while sum(b for _, b in self.traces.values()) + size > self.budget:
            self.traces.popitem(last=False)
        self.traces[key] = (simulator.Trace.from_source(sched), size)
        return self.traces[key][0]


def _trace_bytes(sched) -> float:
    """A schedule's trace in memory, estimated from a few CTAs of each kernel."""
    events = sum(k.ctas * cta_events_mean(sched, i) for i, k in enumerate(sched.meta.kernels))
    return events * simulator.EVENT_DTYPE.itemsize


_EVENTS = _Events()


def simulate_point(p: SweepPoint) -> SweepRow:
    """The row of one point (a plain function of its argument, so that a Dask worker runs it)."""
    sched = kernels.schedule(p.schedule, p.shape, block_q=p.block_q, block_kv=p.block_kv,
                             warps=p.warps, **dict(p.options))  # fmt: skip
    built = (p.schedule, p.shape, p.block_q, p.block_kv, p.warps, p.options)
    s, gpu = p.shape, p.gpu
    base = dict(gpu=gpu.name, schedule=p.schedule, impl=sched.implementation.name,
                batch=s.batch, heads=s.heads, seq_len=s.seq_len, head_dim=s.head_dim,
                dtype=s.dtype, causal=s.causal, mask=mask_text(s), block_q=sched.block_q,
                block_kv=sched.block_kv, warps=sched.warps,
                options=";".join(f"{k}={v}" for k, v in sched.options), mode=p.mode,
                pricing=PRICING[p.compiled], sm_count=gpu.sm_count,
                smem_per_cta_bytes=gpu.smem_per_cta_bytes,
                hbm_bandwidth_bytes_per_s=gpu.hbm_bandwidth_bytes_per_s,
                l2_bytes=gpu.l2_bytes)  # fmt: skip
    options = COMPILED if p.compiled else simulator.ModelOptions()
    try:
        res = simulator.simulate(_EVENTS.source(built, sched), gpu, options=options, mode=p.mode)
        error = ""
    except simulator.CapacityError as exc:
        res, error = None, str(exc)
    priced = ";".join(k.name for k in res.kernels if k.census_key) if res else ""
    return SweepRow(**base, **result_figures(res), compiled_kernels=priced, error=error)


def run_sweep(
    gpus: list[simulator.GPUSpec],
    names: list[str],
    shapes: list[kernels.AttentionShape],
    blocks: list[tuple[int | None, int | None]],
    warps: list[int | None] = (None,),
    progress: Callable[[int, int, str], None] | None = None,
    client=None,
    skip: frozenset = frozenset(),
    on_row: Callable[[SweepRow], None] | None = None,
    mode: str = "exact",
    compiled: bool = False,
) -> list[SweepRow]:
    """Simulate every point of :func:`sweep_points` whose key is not in ``skip`` (the rows a
    resumed sweep already has), in grid order.

    ``client``: a ``dask.distributed.Client`` to run the points on its workers (None: here,
    one after another); the rows are the same either way. ``progress(done, total, label)`` is
    called as points finish, ``on_row(row)`` with each row as it arrives (to save it);
    ``mode``: simulate()'s ("sampled": long contexts in a fraction of the time, docs/model.md);
    ``compiled``: price each kernel the issue model can by its compiled main loop (``COMPILED``,
    the model docs/validation.md and docs/hypothetical-gpus.md check on the H200), the others
    at the pipe rates; False: every kernel at the pipe rates.
    """
    points = sweep_points(gpus, names, shapes, blocks, warps, mode, compiled)
    points = [p for p in points if p.key() not in skip]
    rows: list[SweepRow | None] = [None] * len(points)

    def label(p):
        return f"{p.schedule} N={p.shape.seq_len} d={p.shape.head_dim} on {p.gpu.name}"

    if client is None:
        for done, p in enumerate(points):
            if progress:
                progress(done, len(points), label(p))
            rows[done] = simulate_point(p)
            if on_row:
                on_row(rows[done])
    else:
        from dask.distributed import as_completed

        futures = client.map(simulate_point, points, pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        for done, f in enumerate(as_completed(futures)):
            i = index[f.key]
            rows[i] = f.result()
            if on_row:
                on_row(rows[i])
            if progress:
                progress(done + 1, len(points), label(points[i]))
    if progress:
        progress(len(points), len(points), "done")
    return rows
