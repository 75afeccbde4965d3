"""simulate(): replay a trace (or a schedule's lazily made events) on a GPU spec."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from flashio.simulator import _state as E
from flashio.simulator._engine import run_window, run_window_plain, start_cta
from flashio.simulator._l2 import LINES_PER_GRANULE, SLOT_BITS, dirty_bytes, new_l2
from flashio.simulator._streams import CAPACITY, new_streams
from flashio.simulator._windows import Windows
from flashio.simulator.errors import FlashioError, GPUSpecError
from flashio.simulator.gpu import GPUSpec
from flashio.simulator.issue import (
    DEFAULT_IMPL,
    Compiled,
    StepCost,
    lookup,
    spills_fit_l1,
    step_costs,
    synthetic_step_costs,
    synthetic_sync_step_costs,
    written_registers,
)
from flashio.simulator.occupancy import CapacityError, occupancy
from flashio.simulator.result import KernelResult, SimResult, TensorTraffic
from flashio.simulator.specfiles import load_gpu
from flashio.simulator.trace import Op, Space, TraceSource

__all__ = ["VALIDATED", "ModelOptions", "simulate"]

WINDOW_EVENTS = 1_000_000  # events held per window of CTAs (bounds memory for long traces)
LOCAL_NAME = "local (register spills)"  # the pseudo-tensor of spill traffic
MAX_SMS = 1 << 16  # largest sm_count simulated (per-SM state is allocated up front)


@dataclass(frozen=True, slots=True)
class ModelOptions:
    """Switches of the time model beyond docs/model.md's defaults (all off by default).

    Attributes
    ----------
    shared_issue : bool
        One arithmetic server per SM instead of four pipes: MMA, ELEMENTWISE, EXP and SHARED
        work of all CTAs on an SM queue at one server, each at its own rate (docs/model.md,
        "Model options"). For kernels whose warps wait on their own instructions most of the
        time, so that the pipes do not work concurrently.
    prefetch_kernels : tuple of str
        Kernels whose CTAs issue the LOADs that open outer-loop step s+1 when they begin step
        s's arithmetic (``cp.async`` double buffering).
    issue_model : bool
        Price each kernel's main-loop step by replaying its instructions (simulator.issue,
        docs/model.md "Issue model") where the instruction census has the kernel's compiled
        variant, or where a program can be written for it (a forward: ``simulator.synth``,
        ``simulator.synth_sync``); other kernels keep the pipe rates.
    written_programs : bool
        With ``issue_model``: price a forward by its written program even where the census
        holds its compiled code, the program and its register line written without that
        tiling's code, occupancy from the line. A check of the written programs on
        kernels that were measured: what a tiling never compiled would be predicted as.
    streamed_requests : bool
        A request reaches the L2 and HBM as a stream of bytes over the time its SM's memory
        path takes to send it, and they serve bytes first come, first served, instead of whole
        requests: SMs that send at once finish together (docs/model.md, "Streamed requests").
    cta_drift : bool
        With ``issue_model``: an SM serves its oldest CTA's work first, and each resident CTA
        steps at its pace by age (``simulator.warp_replay.rank_paces``, the warp replay with
        the oldest CTA's warps issued first), so CTAs launched together drift apart, as the
        H200's do, instead of sharing the SM evenly (docs/model.md, "CTA drift": the rule
        splits an SM among CTAs of equal work as the H200 does; part of ``VALIDATED``).
    pending_fills : bool
        A read that finds a line in the L2 whose fill from HBM has not landed yet waits for it
        instead of hitting at the L2's latency (the L2 merges requests for a line in flight):
        CTAs that read the same new tile at the same moment all wait for the HBM
        (docs/model.md, "L2"). Not with ``streamed_requests``.
    staged_loads : bool
        With ``prefetch_kernels``: a kernel whose implementation keeps one buffer per streamed
        tile (``Implementation.stages`` 1, FlashAttention-2's forward) loads as its loop
        does: a step's last matrix product (P V) issues the next step's first tile (K), and
        the step issues its last tile (V) once the others have landed, for its last product
        only (docs/model.md, "Model options"). Without it such a kernel loads a step ahead.
    """

    shared_issue: bool = False
    prefetch_kernels: tuple[str, ...] = ()
    issue_model: bool = False
    written_programs: bool = False
    streamed_requests: bool = False
    cta_drift: bool = False
    staged_loads: bool = False
    pending_fills: bool = False

    def __post_init__(self):
        names = self.prefetch_kernels
        if isinstance(names, str) or not all(isinstance(k, str) for k in names):
            raise FlashioError(
                "ModelOptions.prefetch_kernels must be a tuple of kernel names, e.g. "
                f"('flash2_fwd',), got {names!r}"
            )
        object.__setattr__(self, "prefetch_kernels", tuple(names))
        if self.pending_fills and self.streamed_requests:
            raise FlashioError(
                "ModelOptions: pending_fills needs whole requests (a streamed request's landing "
                "is known only later); set streamed_requests=False"
            )


DEFAULT_OPTIONS = ModelOptions()
# the model the validation measures against the GPU (docs/validation.md): each kernel's main
# loop replayed where its code is known, the forwards copying ahead as their loops do, an SM's
# CTAs drifting apart by age, reads of a line in flight waiting for its fill
# (analysis/validation/calibration.toml's [model] adds shared issue for the kernels it prices
# at the pipe rates)
VALIDATED = ModelOptions(
    issue_model=True,
    prefetch_kernels=("flash2_fwd",),
    cta_drift=True,
    staged_loads=True,
    pending_fills=True,
)


@dataclass(frozen=True, slots=True)
class ArithmeticCost:
    """How a kernel's arithmetic events are charged (docs/model.md, "Arithmetic events" and
    "Issue model"): an event of work w at pipe rate R occupies its SM's pipe for
    ``w / R * occupy`` and takes its CTA at least ``w / R * duration``; a SYNC costs ``sync_s``.
    ``step`` is the issue model's replayed step, when it priced the kernel. With CTA drift,
    ``paces[n - 1][r]`` takes the place of ``duration`` for the CTA with ``r`` older ones among
    the ``n`` computing on its SM, and the SM's queue serves them oldest first, a clock per age
    (docs/model.md, "CTA drift")."""

    occupy: float
    duration: float
    sync_s: float
    step: StepCost | None = None
    paces: tuple[tuple[float, ...], ...] = ()


def _pipe_rates(gpu: GPUSpec, dtype: str) -> dict[int, float]:
    """Per-SM rate of each arithmetic op at the SM clock, whatever the SM count."""
    fp32 = gpu.fp64_flops_per_cycle_per_sm if dtype == "fp64" else gpu.fp32_flops_per_cycle_per_sm
    return {
        int(Op.MMA): gpu.mma_flops_per_cycle_per_sm(dtype) * gpu.clock_hz,
        int(Op.ELEMENTWISE): fp32 * gpu.clock_hz,
        int(Op.EXP): gpu.sfu_ops_per_cycle_per_sm * gpu.clock_hz,
        int(Op.SHARED): gpu.smem_bandwidth_bytes_per_cycle_per_sm * gpu.clock_hz,
    }


def _ideal_step_s(events, rates: dict[int, float]) -> float:
    """Seconds the arithmetic of one main-loop step takes at the pipe rates, one op after the
    other: the median over the CTA's steps (the CTA's whole arithmetic if it has no steps)."""
    work = np.where(events["op"] == int(Op.SHARED), events["bytes"], events["flops"])
    secs = np.zeros(len(events))
    for op, rate in rates.items():
        sel = events["op"] == op
        secs[sel] = work[sel] / rate
    arith = np.isin(events["op"], list(rates))
    steps = events["step"][arith]
    if (steps >= 0).any():
        per_step = np.bincount(steps[steps >= 0], weights=secs[arith][steps >= 0])
        return float(np.median(per_step[per_step > 0]))
    return float(secs[arith].sum())


def compiled_kernels(meta, options: ModelOptions) -> list[Compiled | None]:
    """Per kernel of ``meta``, its census entry when the issue model is on (else None)."""
    if not options.issue_model:
        return [None] * len(meta.kernels)
    held_out = SYNTHESIZED if options.written_programs else ()
    return [
        None if k.name in held_out else lookup(meta.params, k.name, k.warps) for k in meta.kernels
    ]


def launched(kinfo, params: dict):
    """``kinfo`` with the registers per thread its implementation launches it with, where the
    trace's params hold them (``launch_registers``: warp roles with register budgets)."""
    regs = params.get("launch_registers", {}).get(kinfo.name)
    return kinfo if regs is None else dataclasses.replace(kinfo, regs_per_thread=int(regs))


def as_written(kinfo, params: dict, gpu: GPUSpec, options: ModelOptions, comp):
    """``kinfo`` with the registers of its written mma.sync program (the compiler's count
    where the register table has the tiling, else the register line of
    ``simulator.synth_sync``; at most the GPU's per-thread limit: spills are not written)
    where one prices it (``_synthetic_step``); else ``kinfo``."""
    if comp is not None or not options.issue_model or kinfo.name not in SYNTHESIZED:
        return kinfo
    if "warp_roles" in params:
        return kinfo
    try:
        tiling = (int(params["block_q"]), int(params["block_kv"]), int(params["head_dim"]))
    except KeyError:
        return kinfo
    impl = str(params.get("impl", DEFAULT_IMPL))
    regs = written_registers(impl, *tiling, kinfo.warps, options.written_programs)
    if regs is None:
        return kinfo
    return dataclasses.replace(kinfo, regs_per_thread=regs.launched(gpu.regs_per_thread_max))


def launch_resources(meta, gpu: GPUSpec, options: ModelOptions):
    """Per kernel of ``meta`` on ``gpu``: its census entry (or None), its launch description
    with the registers it runs with, and its occupancy. Registers come from the compiler's
    count where the census has the kernel, from the register line of a written mma.sync
    program, or from a warp-specialized implementation's register budgets (the trace's
    launch_registers)."""
    shared_buffers = tuple(t for t in meta.tensors if t.space != Space.GLOBAL)
    comps = compiled_kernels(meta, options)
    kinfos = [
        as_compiled(as_written(launched(k, meta.params), meta.params, gpu, options, c), c)
        for k, c in zip(meta.kernels, comps, strict=True)
    ]
    return comps, kinfos, [occupancy(k, gpu, shared_buffers) for k in kinfos]


def as_compiled(kinfo, comp: Compiled | None):
    """``kinfo`` with the compiled kernel's registers (and shared memory, if known)."""
    if comp is None:
        return kinfo
    smem = kinfo.smem_bytes if comp.smem_bytes is None else max(kinfo.smem_bytes, comp.smem_bytes)
    return dataclasses.replace(kinfo, regs_per_thread=comp.registers, smem_bytes=smem)


def arithmetic_cost(
    source, k: int, kinfo, occ, gpu: GPUSpec, options: ModelOptions, comp: Compiled | None
) -> ArithmeticCost:
    """The ArithmeticCost of kernel ``k`` of ``source`` on ``gpu`` under ``options``;
    ``comp``: its census entry (``compiled_kernels``), which the issue model replays."""
    # a CTA with fewer warps than sub-partitions cannot use the whole pipe
    frac = min(1.0, kinfo.warps / gpu.sm_sub_partitions)
    base = ArithmeticCost(1.0, 1.0 / frac, gpu.cycles_to_s(gpu.smem_latency_cycles))
    params = source.meta.params
    synthesized = options.issue_model and kinfo.name in SYNTHESIZED
    if comp is None and not synthesized:  # the pipe rates price it
        return base
    mid = kinfo.ctas // 2
    events = source.cta_events(k, mid, mid + 1)
    steps = len(np.unique(events["step"][events["step"] >= 0]))
    ctas = occ.ctas_per_sm
    drift = options.cta_drift and ctas > 1 and steps >= STEPS_PER_AGE * ctas
    if comp is not None:
        hit = spill_reloads_hit(kinfo, occ, gpu, comp)
        # the census holds the computing warps' loop: producer warps only issue copies (in
        # the kernels the warp roles describe: those launched with their register budgets)
        specialized = kinfo.name in params.get("launch_registers", {})
        producers = int(params.get("warp_roles", {}).get("producer_warps", 0)) * specialized
        warps = kinfo.warps - producers
        traced = kinfo.name in TRACED_LOADS
        step = step_costs(gpu, comp.key, warps, ctas, comp.impl, hit, comp.streams, traced, drift)
    else:
        step = _synthetic_step(kinfo, occ, gpu, params, options.written_programs, drift)
    dtype = str(source.meta.params.get("dtype", "fp16"))
    ideal = _ideal_step_s(events, _pipe_rates(gpu, dtype))
    if step is None or ideal <= 0:
        return base
    # the replayed step holds its barriers: SYNC events cost nothing more
    if not step.paces_s:
        return ArithmeticCost(step.occupancy_s / ideal, step.duration_s / ideal, 0.0, step)
    paces = tuple(tuple(p / ideal for p in row) for row in step.paces_s)
    # the SM's time per step with every CTA resident, at the paces' rate
    occupy = 1.0 / sum(1.0 / p for p in paces[-1])
    return ArithmeticCost(occupy, paces[0][0], 0.0, step, paces)


# CTA drift charges a step at the pace of the age its CTA has as the step begins; a CTA changes
# age as older ones end (up to ctas_per_sm - 1 times), so the paces apply where it runs this
# many steps per age at least; a shorter CTA, or one alone on its SM, shares it as without drift
STEPS_PER_AGE = 4
# kernels whose warp program simulator.synth writes when the census lacks them
SYNTHESIZED = ("flash2_fwd",)
# kernels whose loop's global loads are rows the trace loads at each step (flash2_bwd's L_i and
# D_i: kernels/flash2_bwd.py), which the engine waits for before the step's arithmetic
TRACED_LOADS = ("flash2_bwd",)


def holds_reductions(comp: Compiled | None, shared_issue: bool) -> bool:
    """Whether a kernel's REDUCEs hold its SM while they leave (docs/model.md, "Reductions"):
    its compiled loop sends them after all its tensor-core work (``Compiled.sends_last``), and
    its arithmetic queues at one server per SM (the issue model's)."""
    return comp is not None and comp.sends_last and shared_issue


def _synthetic_step(
    kinfo, occ, gpu: GPUSpec, params: dict, hold_out: bool = False, drift: bool = False
) -> StepCost | None:  # fmt: skip
    """The issue model's step of a forward outside the census, from a written program: a
    wgmma forward's from its implementation's description (``simulator.synth``), an mma.sync
    forward's from its implementation's compiled tilings (``simulator.synth_sync``); None
    where the trace lacks the tiling or there is nothing to write it from. ``hold_out``:
    the mma.sync program is written without this tiling's own compiled code; ``drift``: with
    the paces by age."""
    try:
        block_kv, head_dim = int(params["block_kv"]), int(params["head_dim"])
        elem = {"fp16": 2, "bf16": 2}[str(params["dtype"])]
    except KeyError:
        return None
    roles = params.get("warp_roles")
    if roles is None:  # an mma.sync forward (a wgmma one always carries its warp roles)
        impl = str(params.get("impl", DEFAULT_IMPL))
        return synthetic_sync_step_costs(
            gpu, impl, int(params["block_q"]), block_kv, head_dim, kinfo.warps,
            occ.ctas_per_sm, hold_out, drift,
        )  # fmt: skip
    consumers = kinfo.warps - int(roles["producer_warps"])
    return synthetic_step_costs(
        gpu, block_kv, head_dim, elem, str(roles["softmax_overlap"]), consumers,
        occ.ctas_per_sm, drift,
    )  # fmt: skip


def prefetches(kinfo, options: ModelOptions, comp: Compiled | None, params=None) -> int:
    """How the engine issues the kernel's next-step loads (``_state.C_PREFETCH``): a step
    early (``PREFETCH_STEP``) for a kernel ``options.prefetch_kernels`` names or whose tiles
    a producer warp copies in with two buffers or more (``params["bulk_copies"]``: it issues
    the next stage's copies while the consumers compute), unless its
    compiled loop waits for its copies before any tensor-core work issued after them
    (``Compiled.copies_overlap`` False): then at the step's last product
    (``PREFETCH_AT_PRODUCT``) where it commits them behind that asynchronous product
    (``Compiled.copies_behind_product``: Triton's 2-stage forward), else 0 (where the trace
    has them); staged (``PREFETCH_STAGED``) with ``options.staged_loads`` where the trace's
    implementation keeps one buffer per tile (``params["copy_stages"]`` 1; absent: this
    project's kernels, which do)."""
    params = params or {}
    produced = kinfo.name in params.get("bulk_copies", {}) and params.get("copy_stages", 1) > 1
    named = kinfo.name in options.prefetch_kernels or produced
    if not named:
        return 0
    if comp is not None and comp.copies_overlap is False:
        return E.PREFETCH_AT_PRODUCT if comp.copies_behind_product else 0
    if options.staged_loads and int(params.get("copy_stages", 1)) == 1:
        return E.PREFETCH_STAGED
    return E.PREFETCH_STEP


def spill_reloads_hit(kinfo, occ, gpu: GPUSpec, comp: Compiled | None) -> bool:
    """Whether a kernel's spill reloads hit L1: its resident CTAs' local memory fits the L1
    their shared memory leaves (``simulator.issue.spills_fit_l1``). Without the census the
    local memory is the registers beyond the per-thread limit."""
    smem = occ.ctas_per_sm * (kinfo.smem_bytes + gpu.smem_reserved_per_cta_bytes)
    threads = kinfo.warps * gpu.warp_size
    if comp is None:
        frame = occ.spilled_regs_per_thread * 4 * threads * occ.ctas_per_sm
        return frame <= gpu.l1_free_bytes(smem)
    return spills_fit_l1(comp, occ.ctas_per_sm, threads, smem, gpu)


def turnaround(meta, kinfo, gpu: GPUSpec) -> float:
    """Seconds a slot of ``kinfo``'s grid idles between one CTA and the next: the block
    scheduler's ``cta_turnaround_s``, or 0 for a kernel a persistent grid runs (its CTAs take
    their tiles one after another with no new launch: ``params["persistent_kernels"]``)."""
    if kinfo.name in meta.params.get("persistent_kernels", ()):
        return 0.0
    return gpu.cta_turnaround_s


def static_tiles(meta, kinfo) -> bool:
    """Whether a persistent grid with a static tile scheduler runs ``kinfo``: the slot that
    ran CTA c takes CTA c + slots, whenever the others end (``params["static_tile_kernels"]``;
    FA3's StaticPersistentTileScheduler). Else the next CTA in order goes to the first slot
    free, as the block scheduler or a dynamic tile scheduler hands them out."""
    return kinfo.name in meta.params.get("static_tile_kernels", ())


def bulk_tensors(meta, kernel: str) -> np.ndarray:
    """1 for each tensor of ``meta`` (and the spill pseudo-tensor after them) that kernel
    ``kernel`` moves by bulk copies (``params["bulk_copies"]``), else 0."""
    names = set(meta.params.get("bulk_copies", {}).get(kernel, ()))
    return np.array([int(t.name in names) for t in meta.tensors] + [0], np.int64)


class Spills(NamedTuple):
    """Register-spill bytes of one CTA through the L2: stored once, at its first step
    (``first_store``), and stored and loaded back at every step."""

    first_store: int
    store: int
    load: int


def spill_bytes(kinfo, occ, gpu: GPUSpec, comp: Compiled | None) -> Spills:
    """Register-spill bytes a CTA sends to the L2 and loads back from it (docs/model.md,
    "Register spills"). Where the census has the compiled loop: its local stores per step (L1
    writes local memory through to the L2), the code's static spill stores outside the loop
    once per thread, and no loads where they hit L1 (the warp replay prices them; else the
    loop's local loads at every step: ``spill_reloads_hit``). Without the census, every
    register beyond the per-thread limit, stored at every step and reloaded unless it stays in
    L1."""
    hit = spill_reloads_hit(kinfo, occ, gpu, comp)
    if comp is not None:
        threads = kinfo.warps * gpu.warp_size
        outside = max(0, comp.static_spill_store_bytes - comp.spill_store_bytes // gpu.warp_size)
        load = 0 if hit else comp.spill_load_bytes * kinfo.warps
        return Spills(outside * threads, comp.spill_store_bytes * kinfo.warps, load)
    b = occ.spilled_regs_per_thread * 4 * kinfo.warps * gpu.warp_size
    return Spills(0, b, 0 if hit else b)


def _config(
    gpu: GPUSpec,
    dtype: str,
    cost: ArithmeticCost,
    shared_issue: bool = False,
    prefetch: int = 0,
    hold_reductions: bool = False,
    streamed_requests: bool = False,
    pending_fills: bool = False,
    turnaround_s: float = 0.0,
    static: bool = False,
) -> np.ndarray:
    # with CTA drift, the paces by age follow the fixed entries: row n - 1 at N_CFG + n(n-1)/2
    paces = [p for row in cost.paces for p in row]
    cfg = np.zeros(E.N_CFG + len(paces))
    cfg[E.N_CFG :] = paces
    cfg[E.C_PACED] = len(cost.paces)
    cfg[E.C_L2_BW] = gpu.l2_bandwidth_bytes_per_s
    cfg[E.C_HBM_BW] = gpu.effective_hbm_bandwidth_bytes_per_s
    cfg[E.C_SM_MEM_BW] = gpu.sm_memory_bandwidth_bytes_per_s
    cfg[E.C_SM_RED_BW] = gpu.sm_reduce_bandwidth_bytes_per_s
    cfg[E.C_RED_HOLD] = float(hold_reductions)
    cfg[E.C_L2_LAT] = gpu.cycles_to_s(gpu.l2_latency_cycles)
    cfg[E.C_HBM_LAT] = gpu.cycles_to_s(gpu.hbm_latency_cycles)
    bulk = gpu.request_costs(bulk=True)
    cfg[E.C_BULK_BW] = bulk.load_bytes_per_s
    cfg[E.C_BULK_L2_LAT] = bulk.l2_latency_s
    cfg[E.C_BULK_HBM_LAT] = bulk.hbm_latency_s
    cfg[E.C_BULK_ST_BW] = bulk.store_bytes_per_s
    cfg[E.C_BULK_ST_LAT] = bulk.store_latency_s
    cfg[E.C_CTA_GAP] = turnaround_s
    cfg[E.C_STATIC] = float(static)
    rates = _pipe_rates(gpu, dtype)
    cfg[E.C_TENSOR] = rates[int(Op.MMA)]
    cfg[E.C_FP32] = rates[int(Op.ELEMENTWISE)]
    cfg[E.C_SFU] = rates[int(Op.EXP)]
    cfg[E.C_SMEM] = rates[int(Op.SHARED)]
    cfg[E.C_OCCUPY] = cost.occupy
    cfg[E.C_DURATION] = cost.duration
    cfg[E.C_SYNC] = cost.sync_s
    cfg[E.C_SHARED_ISSUE] = float(shared_issue)
    cfg[E.C_PREFETCH] = float(prefetch)
    cfg[E.C_STREAMS] = float(streamed_requests)
    cfg[E.C_FILLS] = float(pending_fills)
    if cost.step is not None:
        cfg[E.C_CTA_LEAD] = cost.step.lead_s
        cfg[E.C_CTA_TAIL] = cost.step.tail_s
    return cfg


def simulate(
    source: TraceSource,
    gpu: GPUSpec | str | os.PathLike,
    *,
    window_events: int = WINDOW_EVENTS,
    progress: Callable[[int, int, int], None] | None = None,
    timeline: bool = False,
    options: ModelOptions = DEFAULT_OPTIONS,
    mode: str = "exact",
) -> SimResult:
    """Replay ``source`` on ``gpu``: bytes through L2 and HBM, time, occupancy.

    Parameters
    ----------
    source : simulator.Trace or kernels.Schedule
        Anything with ``meta`` and ``cta_events(kernel, start, stop)``. A schedule is consumed
        in windows of CTAs, so memory stays bounded by ``window_events`` plus the events of the
        CTAs resident at a time.
    gpu : GPUSpec, or a built-in name / TOML path for ``simulator.load_gpu``
    window_events : int
        Events to load per window of CTAs (a Trace, already in memory, is replayed whole). The
        next window is made in a background thread while the engine replays the current one.
    progress : callable, optional
        Called as ``progress(kernel, ctas_done, ctas_total)`` after each window.
    timeline : bool
        Also record when and on which SM every CTA ran (``SimResult.timeline``: one
        ``(ctas, 3)`` array per kernel of start seconds, end seconds and SM index), and the
        memory system as each CTA ends (``SimResult.memory_timeline``: end seconds, HBM bytes
        moved so far, bytes held by the L2 and dirty among them), for ``perfetto.write``.
    options : ModelOptions
        Switches of the time model (shared arithmetic issue, prefetching kernels, the issue
        model); the default is docs/model.md's model without them.
    mode : {"exact", "sampled"}
        "sampled": replay a prefix of the largest kernel's grid exactly and extend its
        steady state over the rest, global bytes and FLOPs counted exactly
        (``simulator.sampled``; ``SimResult.sampling`` says how much was replayed and
        estimates the error). A grid of few waves is replayed whole.

    Returns
    -------
    SimResult

    Raises
    ------
    CapacityError
        If a kernel's shared-memory tiles (or threads) exceed what one CTA may have.
    GPUSpecError
        If ``gpu`` names no spec, its L2 is smaller than one granule of the L2 model or larger
        than the model holds, or it has more SMs than ``MAX_SMS``.

    Notes
    -----
    The model is described in docs/model.md. With ``gpu.l2_bytes == 0`` every global access is
    an HBM access: ``hbm_*_bytes == global_*_bytes`` (the FlashAttention paper's IO model).
    """
    if mode not in ("exact", "sampled"):
        raise FlashioError(f"simulate: mode must be 'exact' or 'sampled', got {mode!r}")
    if mode == "sampled":
        if timeline:
            raise FlashioError("simulate: a sampled replay has no timeline; use mode='exact'")
        from flashio.simulator.sampled import simulate_sampled

        return simulate_sampled(source, gpu, options)
    return replay(source, gpu, window_events, progress, timeline, options)


@dataclass
class Probe:
    """What ``simulator.sampled`` watches in one kernel of a replay (``replay``'s
    ``probes``): the memory system at the dispatch of the CTAs ``marks`` (ascending), into
    ``snaps`` (``_state.Kernel``'s checkpoint columns, one row a mark); every window of the
    kernel's events, handed to ``window(events, offsets, c0, c1)`` as the engine receives it
    (``Windows.current``); the engine's busy seconds at the end of the replay; and, where
    ``at_end`` is given, the L2 after the kernel, handed to it before the next kernel runs."""

    marks: np.ndarray
    window: Callable[[np.ndarray, np.ndarray, int, int], None]
    snaps: np.ndarray | None = None
    busy: np.ndarray | None = None  # the busy seconds at the end of the replay
    # called with the L2's state (``_l2.new_l2``) at the kernel's end, which it may change
    at_end: Callable[[tuple], None] | None = None


def replay(
    source: TraceSource,
    gpu: GPUSpec | str | os.PathLike,
    window_events: int = WINDOW_EVENTS,
    progress: Callable[[int, int, int], None] | None = None,
    timeline: bool = False,
    options: ModelOptions = DEFAULT_OPTIONS,
    probes: dict[int, Probe] | None = None,
) -> SimResult:
    """The exact replay of ``simulate``, with ``probes[k]`` (a ``Probe``) on kernel k."""
    if not isinstance(gpu, GPUSpec):
        gpu = load_gpu(gpu)
    meta = source.meta
    dtype = str(meta.params.get("dtype", "fp16"))
    # one more row than the trace has tensors: local memory, where register spills go
    local = len(meta.tensors)
    space = np.array([int(t.space) for t in meta.tensors] + [int(Space.GLOBAL)], np.int64)
    n_tensors = local + 1
    comps, kinfos, occs = launch_resources(meta, gpu, options)  # raises before any work

    l2_on = gpu.l2_bytes > 0
    granule = LINES_PER_GRANULE * gpu.l2_line_bytes
    if 0 < gpu.l2_bytes < granule:
        raise GPUSpecError(
            f"{gpu.name}: l2_bytes={gpu.l2_bytes} is smaller than one L2 granule "
            f"({LINES_PER_GRANULE} lines = {granule} B); use 0 for no L2, or at least {granule}"
        )
    if gpu.l2_bytes // granule >= 1 << SLOT_BITS:
        raise GPUSpecError(
            f"{gpu.name}: l2_bytes={gpu.l2_bytes:,} is more than the L2 model holds "
            f"(2**{SLOT_BITS} granules of {granule} B); use less than {granule << SLOT_BITS:,}",
            key="l2_bytes",
        )
    if gpu.sm_count > MAX_SMS:  # the engine keeps state per SM
        raise GPUSpecError(
            f"{gpu.name}: sm_count={gpu.sm_count:,} is more than the simulator models "
            f"({MAX_SMS:,}); today's GPUs have up to a few hundred",
            key="sm_count",
        )
    l2 = new_l2(gpu.l2_bytes if l2_on else 0, gpu.l2_line_bytes)
    srv = np.zeros(2)  # L2 and HBM servers: time each is next free
    tstat = np.zeros((n_tensors, 4), np.int64)
    busy = np.zeros(7)
    cnt = np.zeros(E.N_CNT, np.int64)
    sv = new_streams(used=options.streamed_requests)
    t_now = 0.0
    kernel_results = []
    spans = []
    for k, (kinfo, occ, comp) in enumerate(zip(kinfos, occs, comps, strict=True)):
        before = tstat.sum(axis=0)
        cnt[E.K_PEAK_SMEM] = cnt[E.K_PEAK_REGS] = 0
        start = t_now + gpu.kernel_launch_s
        srv[:] = np.maximum(srv, start)
        cost = arithmetic_cost(source, k, kinfo, occ, gpu, options, comp)
        shared = options.shared_issue or cost.step is not None  # the replay priced all pipes
        cfg = _config(
            gpu, dtype, cost, shared, prefetches(kinfo, options, comp, source.meta.params),
            holds_reductions(comp, shared), options.streamed_requests, options.pending_fills,
            turnaround(meta, kinfo, gpu), static_tiles(meta, kinfo),
        )  # fmt: skip
        bulk = bulk_tensors(meta, kinfo.name)
        mem = E.Memory(l2_on, l2, srv, sv, local, space, bulk, tstat, busy, cnt)
        probe = (probes or {}).get(k)
        end_s, span = _replay_kernel(
            source, k, kinfo, occ, gpu, cfg, start, mem, window_events, timeline, progress,
            spill_bytes(kinfo, occ, gpu, comp), probe,
        )  # fmt: skip
        if progress:
            progress(k, kinfo.ctas, kinfo.ctas)
        if cnt[E.K_SERVER_FULL]:
            raise FlashioError(
                f"kernel {kinfo.name!r}: more than {CAPACITY // 2:,} memory requests streaming at "
                "once into the L2 or HBM; replay it with ModelOptions(streamed_requests=False)"
            )
        if cnt[E.K_BAD_SMEM]:
            raise CapacityError(
                f"kernel {kinfo.name!r}: the trace's live shared memory reached "
                f"{cnt[E.K_PEAK_SMEM]:,} B per CTA, above the {kinfo.smem_bytes:,} B it declares"
            )
        moved = tstat.sum(axis=0) - before
        kernel_results.append(
            KernelResult(
                name=kinfo.name,
                ctas=kinfo.ctas,
                waves=math.ceil(kinfo.ctas / (occ.ctas_per_sm * gpu.sm_count)),
                occupancy=occ,
                start_s=t_now,
                time_s=end_s - t_now,
                smem_peak_bytes=int(cnt[E.K_PEAK_SMEM]),
                reg_tile_peak_bytes=int(cnt[E.K_PEAK_REGS]),
                global_read_bytes=int(moved[E.T_GLOBAL_READ]),
                global_write_bytes=int(moved[E.T_GLOBAL_WRITE]),
                hbm_read_bytes=int(moved[E.T_HBM_READ]),
                hbm_write_bytes=int(moved[E.T_HBM_WRITE]),
                census_key=cost.step.key if cost.step is not None else "",
            )
        )
        t_now = end_s
        spans.append(span)
        if l2_on and probe is not None and probe.at_end is not None:
            probe.at_end(l2)
    res = _result(meta, gpu, tstat, busy, cnt, kernel_results, t_now, l2 if l2_on else None)
    for probe in (probes or {}).values():
        probe.busy = busy.copy()
    if timeline:
        object.__setattr__(res, "timeline", tuple(s[:, :3] for s in spans))
        object.__setattr__(res, "memory_timeline", tuple(s[:, [1, 3, 4, 5]] for s in spans))
    return res


def _replay_kernel(
    source, k, kinfo, occ, gpu, cfg, start, mem, window_events, timeline, progress, spills, probe
):
    """Replay kernel ``k`` from ``start``: returns its end time and (with ``timeline``) the
    start, end and SM of each CTA. Updates ``mem``, the shared engine state (L2, servers,
    counters), and ``probe`` (a Probe of this kernel, or None)."""
    slots = min(kinfo.ctas, occ.ctas_per_sm * gpu.sm_count)
    units = np.full((gpu.sm_count, E.N_UNITS + int(cfg[E.C_PACED])), start)
    si = np.zeros((slots, E.N_SLOT_INT), np.int64)  # slot s runs on SM s % sm_count
    sf = np.zeros((slots, E.N_SLOT_FLOAT))
    span = np.zeros((kinfo.ctas if timeline else 0, 6))  # _engine._sample_memory: columns 3-5
    # the heap of SMs with CTAs: key (time, slot) of each SM's earliest CTA, and the SM
    busy_sms = min(slots, gpu.sm_count)
    lead = cfg[E.C_CTA_LEAD]  # the first wave's CTAs issue their first events after it
    ht, hs = np.full(busy_sms, start + lead), np.arange(busy_sms, dtype=np.int64)
    hm, hn = np.arange(busy_sms, dtype=np.int64), np.array([busy_sms], np.int64)
    reg = np.zeros(E.N_REG, np.int64)
    reg[E.R_NEXT], reg[E.R_PENDING] = slots, -1  # the first wave takes CTAs 0..slots-1
    kernel_end = np.array([start])
    # sized by an average CTA: a causal grid's first CTA is its shortest, and sized by it one
    # window would hold the whole trace. At least one wave (the first window starts it), and
    # no more: memory a process writes first is dear (400 MB took 0.97 s here); two waves
    # made FA2 at N = 128k 1.3 s slower, one process each (docs/model.md, "Speed")
    width = max(slots, window_events // max(1, round(cta_events_mean(source, k))))
    static = cfg[E.C_STATIC] > 0
    marks = probe.marks if probe else np.zeros(0, np.int64)
    if marks.size and marks[0] < slots:
        raise ValueError(f"checkpoints start after the first wave ({slots} CTAs), got {marks}")
    if marks.size and static:  # checkpoints are taken as CTAs are dispatched in order
        raise ValueError(f"kernel {kinfo.name!r}: no checkpoints with a static tile scheduler")
    windows = Windows(source, k, kinfo.ctas, width, slots, in_order=not static)
    snaps = np.zeros((len(marks), E.SNAP_HBM + 2 * mem.tstat.shape[0]))
    kern = E.Kernel(
        kinfo.ctas, gpu.sm_count, *spills, kinfo.smem_bytes, kernel_end, span, marks, snaps
    )
    state, heap = E.Slots(si, sf, units, reg), E.Heap(ht, hs, hm, hn)
    # a kernel without spills, prefetches, streamed requests and CTA drift runs on the engine
    # compiled without their code (docs/model.md, "Speed")
    uses = cfg[E.C_PREFETCH] > 0 or cfg[E.C_STREAMS] > 0 or cfg[E.C_PACED] > 0 or any(spills)
    run = run_window if uses else run_window_plain
    try:
        ev, cta_off, c0, c1 = windows.current
        if probe:
            probe.window(ev, cta_off, c0, c1)
        for s in range(slots):  # the first wave, in CTA order; equal times form a valid heap
            start_cta(s, s, start, si, sf, cta_off, c0, lead)
        while run(ev, cta_off, c0, c1, kern, cfg, mem, state, heap):
            if progress:
                progress(k, c1, kinfo.ctas)
            # next window; resident CTAs keep their remaining events, copied to the front
            live = np.flatnonzero(si[:, E.S_CTA] >= 0)
            parts = [ev[si[s, E.S_PTR] : si[s, E.S_END]] for s in live]
            if static:  # from the earliest CTA a slot takes next, to past the one waited for
                after = si[live, E.S_CTA] + slots
                w0 = int(after[after < kinfo.ctas].min())
                w1 = min(kinfo.ctas, max(w0 + width, int(reg[E.R_NEXT]) + 1))
                starts = windows.seek(w0, w1, parts)
            else:
                starts = windows.advance(parts)
            for s, pos in zip(live, starts, strict=True):
                # prefetched events still ahead move with the CTA's other events
                shift = pos - si[s, E.S_PTR]
                if si[s, E.S_PF_HI] > si[s, E.S_PTR]:
                    si[s, E.S_PF_LO] += shift
                    si[s, E.S_PF_HI] += shift
                else:
                    si[s, E.S_PF_LO] = si[s, E.S_PF_HI] = -1
                if si[s, E.S_LATE] >= si[s, E.S_PTR]:
                    si[s, E.S_LATE] += shift
                si[s, E.S_END] += shift
                si[s, E.S_PTR] = pos
            ev, cta_off, c0, c1 = windows.current
            if probe:
                probe.window(ev, cta_off, c0, c1)
    finally:
        windows.close()
    if probe:
        probe.snaps = snaps
    return float(kernel_end[0]), span


def cta_events_mean(source: TraceSource, k: int) -> float:
    """Events of one of kernel ``k``'s CTAs, on average over five spread over its grid."""
    ctas = source.meta.kernels[k].ctas
    probes = sorted({0, ctas // 4, ctas // 2, (3 * ctas) // 4, ctas - 1})
    return float(np.mean([len(source.cta_events(k, c, c + 1)) for c in probes]))


def busy_fractions(breakdown: dict[str, float], total_s: float) -> dict[str, float]:
    """``SimResult.utilization``: each resource's busy seconds (``breakdown``) over the run."""
    span = max(total_s, 1e-30)
    return {k[: -len("_busy_s")]: v / span for k, v in breakdown.items() if "busy" in k}


def breakdown_of(busy: np.ndarray, gpu: GPUSpec, kernels: int) -> dict[str, float]:
    """``SimResult.breakdown`` from the engine's busy seconds (per-SM ones summed over SMs)."""
    sms = gpu.sm_count
    return {
        "launch_s": gpu.kernel_launch_s * kernels,
        "l2_busy_s": float(busy[E.B_L2]),
        "hbm_busy_s": float(busy[E.B_HBM]),
        "sm_memory_busy_s": float(busy[E.B_SM_MEM]) / sms,
        "tensor_busy_s": float(busy[E.B_TENSOR]) / sms,
        "fp32_busy_s": float(busy[E.B_FP32]) / sms,
        "sfu_busy_s": float(busy[E.B_SFU]) / sms,
        "smem_busy_s": float(busy[E.B_SMEM]) / sms,
    }


def _result(meta, gpu, tstat, busy, cnt, kernel_results, total_s, l2) -> SimResult:
    total = tstat.sum(axis=0)
    breakdown = breakdown_of(busy, gpu, len(kernel_results))
    utilization = busy_fractions(breakdown, total_s)
    return SimResult(
        schedule=meta.schedule,
        gpu=gpu.name,
        global_read_bytes=int(total[E.T_GLOBAL_READ]),
        global_write_bytes=int(total[E.T_GLOBAL_WRITE]),
        hbm_read_bytes=int(total[E.T_HBM_READ]),
        hbm_write_bytes=int(total[E.T_HBM_WRITE]),
        l2_dirty_bytes_at_end=int(dirty_bytes(l2)) if l2 is not None else 0,
        tensors=tuple(
            TensorTraffic(name, *(int(x) for x in tstat[i]))
            for i, name in enumerate([t.name for t in meta.tensors] + [LOCAL_NAME])
            if (i == len(meta.tensors) and tstat[i].any())
            or (i < len(meta.tensors) and meta.tensors[i].space == Space.GLOBAL)
        ),
        kernels=tuple(kernel_results),
        sram_peak_bytes=max(kr.smem_peak_bytes for kr in kernel_results),
        mma_flops=int(cnt[E.K_MMA_FLOPS]),
        elementwise_flops=int(cnt[E.K_EW_FLOPS]),
        exps=int(cnt[E.K_EXPS]),
        shared_exchange_bytes=int(cnt[E.K_SHARED_BYTES]),
        time_s=total_s,
        cycles=gpu.s_to_cycles(total_s),
        breakdown=breakdown,
        utilization=utilization,
    )
