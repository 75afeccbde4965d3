"""Tile search: simulate every (block_q, block_kv, warps) and rank by time and by HBM traffic.

The seed's warning "bigger is not always faster" (块过大会挤占寄存器、降低并行度) is shown by the
numbers each result carries: CTAs per SM and what limits them, resident warps, the grid size
against the SMs, and register spills. Where B = M/(4d) lands is marked on the ranking.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from flashio import kernels, simulator
from flashio.analysis.closed_form.tiling import tiling_rule
from flashio.analysis.explore.search_reading import bound_only, search_notes, why_slower
from flashio.kernels.registry import spec
from flashio.simulator import Space, TilingError, issue

__all__ = [
    "COMPILED",
    "EVENTS_PER_S",
    "PIPE_RATES_BOUND",
    "SearchPlan",
    "TileResult",
    "compiled_tiling",
    "issue_priced",
    "plan_search",
    "search_notes",
    "search_tiles",
]

# Replay speed used only to estimate a search's wall time (not a model constant). Measured by
# timing search_tiles over the CLI's default grid (blocks 16..256, warps 2, 4, 8; 81 tilings, numba
# cache warm) on the 2-core development machine: flash2 1x16x2048 d=64, 18.8 M events in 2.4 s,
# and 1x16x4096 d=128, 73.2 M events in 9.6 s (7.6-7.8 M events/s); flash1 1x16x2048, 9.5 M/s;
# standard 1x16x1024, 4.3 M/s. With the other core busy, flash2 dropped to 5.5 M/s.
EVENTS_PER_S = 8e6

# The time model of a compiled search: each kernel priced by its compiled main loop, the model
# the validation measures (simulator.VALIDATED; analysis/validation/calibration.toml, [model]).
COMPILED = simulator.VALIDATED
# ``priced_by`` of a rule's block that a compiled search keeps although the issue model prices
# no kernel at it: simulated at the pipe rates, a lower bound ranked after every priced tiling
PIPE_RATES_BOUND = "pipe rates (no kernel)"


def issue_priced(sched) -> str:
    """How the issue model prices ``sched``'s main loops: "compiled" (the census holds them),
    "written" (a forward whose program ``simulator.synth_sync`` or ``simulator.synth``
    writes), or "" (neither: the pipe rates would)."""
    if compiled_tiling(sched):
        return "compiled"
    params, fwd = sched.meta.params, [k for k in sched.meta.kernels if k.name == "flash2_fwd"]
    if len(fwd) != len(sched.meta.kernels) or not fwd:
        return ""
    if "warp_roles" in params:
        return "written"
    impl, w = str(params.get("impl", "flashio")), fwd[0].warps
    bq, bkv, d = (int(params[k]) for k in ("block_q", "block_kv", "head_dim"))
    return "written" if issue.written_registers(impl, bq, bkv, d, w) is not None else ""


def compiled_tiling(sched) -> bool:
    """Whether the instruction census holds every kernel of ``sched`` that has a main loop of
    tensor-core steps (the others, e.g. the backward's pre and post kernels, have none)."""
    table = issue.census(sched.meta.params.get("impl", "flashio"))
    looped = [k for k in sched.meta.kernels if any(key.startswith(k.name + " ") for key in table)]
    return bool(looped) and all(
        issue.lookup(sched.meta.params, k.name, k.warps) is not None for k in looped
    )


@dataclass(frozen=True, slots=True)
class TileResult:
    """One (block_q, block_kv, warps) of a search: simulated figures, or why it cannot run.

    ``kernel`` is the kernel whose figures are shown: the one that takes the most time (when
    simulated) or needs the most shared memory (when not). ``rank_time`` and ``rank_hbm`` are
    1 for the best and 0 for a tiling that does not fit. ``slowdown`` is time over the best
    time. ``rule`` names the forms of B = M/(4d) that chose these blocks ("seed", "paper").
    ``why`` says where it is worse than the fastest tiling.
    """

    block_q: int
    block_kv: int
    warps: int
    rule: str
    error: str
    events: int
    kernel: str
    smem_bytes: int
    regs_per_thread: int
    spilled_regs_per_thread: int
    ctas: int
    ctas_per_sm: int = 0
    limiter: str = ""
    waves: int = 0
    resident_warps_per_sm: float = 0.0
    time_s: float = 0.0
    global_bytes: int = 0
    hbm_bytes: int = 0
    bound: str = ""
    rank_time: int = 0
    rank_hbm: int = 0
    slowdown: float = 0.0
    why: str = ""
    # how a compiled search priced the main loop: "compiled", "written", "written, would
    # spill" (its spills not written: a lower bound), PIPE_RATES_BOUND (a rule's block no
    # kernel prices); empty in a search at the pipe rates
    priced_by: str = ""

    @property
    def feasible(self) -> bool:
        return not self.error

    def to_dict(self) -> dict:
        d = {f: getattr(self, f) for f in self.__dataclass_fields__}
        d["feasible"] = self.feasible
        return d


@dataclass(frozen=True, slots=True)
class SearchPlan:
    """Candidates of a search before anything is simulated, with their event counts and how
    the issue model would price each (``issue_priced``: "compiled", "written" or "")."""

    candidates: tuple[TileResult, ...]  # feasible ones not yet simulated (time_s == 0)
    priced: tuple[str, ...]  # per candidate; "" for one that does not fit

    @property
    def compiled(self) -> bool:
        """What ``search_tiles(compiled=None)`` does: price by the issue model where it prices
        at least one candidate, else at the pipe rates."""
        return any(self.priced)

    def simulated(self, compiled: bool | None = None) -> list[TileResult]:
        """The candidates a search with ``compiled`` simulates: with the issue model, those it
        prices and the rule's blocks (at the pipe rates where it prices them not)."""
        compiled = self.compiled if compiled is None else compiled
        return [
            c
            for c, p in zip(self.candidates, self.priced, strict=True)
            if c.feasible and (p or c.rule or not compiled)
        ]

    @property
    def events(self) -> int:
        """Events of the candidates the default search simulates."""
        return sum(c.events for c in self.simulated())

    @property
    def estimated_s(self) -> float:
        """Rough replay time of the default search at EVENTS_PER_S."""
        return self.events / EVENTS_PER_S


def _check_sizes(name: str, values) -> tuple[int, ...]:
    values = tuple(values)
    if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
        raise TilingError(
            f"{name} must be a non-empty sequence of positive integers, got {values}"
        )
    return tuple(sorted(set(values)))


def _rule_blocks(name, shape, gpu, sram_bytes) -> dict[tuple[int, int], list[str]]:
    """(block_q, block_kv) chosen by each form of the rule, clipped to seq_len and kv_seq_len."""
    try:
        rule = tiling_rule(gpu, shape.head_dim, shape.dtype, sram_bytes, schedule=name)
    except ValueError:  # M < 4d: the rule chooses nothing
        return {}
    out: dict[tuple[int, int], list[str]] = {}
    n, nk = shape.seq_len, shape.n_kv
    for f in rule.forms:
        out.setdefault((min(f.block_q, n), min(f.block_kv, nk)), []).append(f.name)
    # what flashio simulate picks when no block is given: the seed's rule on this GPU's M, or
    # the schedule's own tiles (flash_decode: flash-attn's split-KV tiles)
    mod = spec(name).module
    if hasattr(mod, "default_blocks"):
        default = mod.default_blocks(shape)
    else:
        default = (kernels.default_block(shape, sram_bytes or gpu.smem_per_cta_bytes),) * 2
    out.setdefault(default, []).append("default")
    return out


def _candidate(name, shape, gpu, bq, bkv, w, rule) -> tuple[TileResult, str]:
    sched = kernels.schedule(name, shape, bq, bkv, w)
    infos = sched.kernels
    on_chip = tuple(t for t in sched.tensors if t.space != Space.GLOBAL)
    big = max(infos, key=lambda k: k.smem_bytes)
    base = TileResult(
        block_q=bq,
        block_kv=bkv,
        warps=w,
        rule=rule,
        error="",
        events=0,
        kernel=big.name,
        smem_bytes=big.smem_bytes,
        regs_per_thread=big.regs_per_thread,
        spilled_regs_per_thread=max(0, big.regs_per_thread - gpu.regs_per_thread_max),
        ctas=big.ctas,
    )
    try:
        for k in infos:
            simulator.occupancy(k, gpu, on_chip)
    except simulator.CapacityError as exc:
        return replace(base, error=str(exc)), ""
    return replace(base, events=sched.n_events()), issue_priced(sched)


def plan_search(
    name: str,
    shape: kernels.AttentionShape,
    gpu: simulator.GPUSpec,
    block_sizes=(16, 32, 64, 128, 256),
    warps=(2, 4, 8),
    *,
    include_rule: bool = True,
    sram_bytes: int | None = None,
) -> SearchPlan:
    """The candidates ``search_tiles`` would simulate, their event counts and capacity errors.

    Block sizes above ``shape.seq_len`` are kept: one partial block, as a predicated kernel
    runs it (same bytes as a block of ``seq_len`` rows, the whole block's on-chip buffers). The
    rule's blocks (both forms, clipped to ``seq_len``) and ``kernels.default_block`` of the
    GPU's M (the CLI's default block) are added at every warp count when ``include_rule``.
    Nothing is simulated: use ``.estimated_s`` to size a search before running it.
    """
    sizes = _check_sizes("block_sizes", block_sizes)
    ws = _check_sizes("warps", warps)
    rule = _rule_blocks(name, shape, gpu, sram_bytes) if include_rule else {}
    pairs = {(bq, bkv): [] for bq in sizes for bkv in sizes}
    for pair, forms in rule.items():
        pairs.setdefault(pair, []).extend(forms)
    out = [
        _candidate(name, shape, gpu, bq, bkv, w, ", ".join(pairs[bq, bkv]))
        for (bq, bkv) in sorted(pairs)
        for w in ws
    ]
    return SearchPlan(tuple(c for c, _ in out), tuple(p for _, p in out))


def search_tiles(
    name: str,
    shape: kernels.AttentionShape,
    gpu: simulator.GPUSpec | str,
    block_sizes=(16, 32, 64, 128, 256),
    warps=(2, 4, 8),
    progress: Callable[[int, int, TileResult], None] | None = None,
    *,
    include_rule: bool = True,
    sram_bytes: int | None = None,
    plan: SearchPlan | None = None,
    compiled: bool | None = None,
) -> list[TileResult]:
    """Simulate and rank the feasible (block_q, block_kv, warps) of schedule ``name`` on ``gpu``,
    by default each priced by its kernel's main loop where the issue model prices the schedule.

    Parameters
    ----------
    name : str
        A schedule of ``kernels.SCHEDULES``.
    shape : kernels.AttentionShape
    gpu : simulator.GPUSpec, or a built-in name / TOML path
    block_sizes : sequence of int
        Candidate Br and Bc (every pair is tried); sizes above ``seq_len`` are kept: one
        partial block.
    warps : sequence of int
        Candidate warps per CTA.
    progress : callable, optional
        ``progress(done, total, result)`` after each candidate the search simulates or finds
        does not fit.
    include_rule : bool
        Also try the blocks of B = M/(4d) (``analysis.tiling_rule``, both forms, clipped to
        ``seq_len``) and mark them in ``TileResult.rule``.
    sram_bytes : int, optional
        M in bytes for the rule (default ``gpu.smem_per_cta_bytes``).
    plan : SearchPlan, optional
        The result of ``plan_search`` with the same arguments, to avoid planning twice.
    compiled : bool, optional
        True: price each tiling by its kernel's main loop (``COMPILED``, the issue model
        validated against the H200): the compiled loop where the instruction census holds
        it, else a forward's written program (``issue_priced``; ``TileResult.priced_by`` says
        which): the time of the kernels. Tilings neither can price (a backward the census
        lacks) are left out, but for the rule's blocks: those are simulated at the pipe rates
        (``PIPE_RATES_BOUND``) and ranked after every priced tiling, as lower bounds. False:
        every tiling at the pipe rates, one model whether or not a kernel exists for it. None
        (default): True where the issue model prices at least one candidate
        (``SearchPlan.compiled``), else False.

    Returns
    -------
    list of TileResult
        Feasible tilings first, fastest first (``rank_time``; ``rank_hbm`` ranks by HBM bytes,
        then global bytes, then time), then the infeasible ones with the CapacityError message.

    Notes
    -----
    Cost: the replay runs at roughly ``EVENTS_PER_S``; ``plan_search(...).estimated_s`` tells
    the time before running. Register spills are simulated as local-memory traffic, stored and
    reloaded once per outer-loop step (docs/model.md): a first-order model of their cost.
    """
    if not isinstance(gpu, simulator.GPUSpec):
        gpu = simulator.load_gpu(gpu)
    if plan is None:
        plan = plan_search(
            name, shape, gpu, block_sizes, warps, include_rule=include_rule, sram_bytes=sram_bytes
        )
    compiled = plan.compiled if compiled is None else compiled
    # progress counts what the search reports: the tilings it simulates and those that do not fit
    total = len(plan.simulated(compiled)) + sum(not c.feasible for c in plan.candidates)
    done, ran = 0, []
    for c, priced in zip(plan.candidates, plan.priced, strict=True):
        sched = (
            kernels.schedule(name, shape, c.block_q, c.block_kv, c.warps) if c.feasible else None
        )
        priced = priced if compiled else ""
        if compiled and c.feasible and not priced:
            if not c.rule:
                continue  # neither compiled nor writable: left out of the ranking
            priced = PIPE_RATES_BOUND  # the rule's blocks stay, at the pipe rates
        if sched is not None:
            opts = {"options": COMPILED} if compiled and priced != PIPE_RATES_BOUND else {}
            res = simulator.simulate(sched, gpu, **opts)
            main = max(res.kernels, key=lambda k: k.time_s)
            occ = main.occupancy
            # a compiled kernel's spills are the compiler's (ptxas's spill-store bytes), not an
            # estimate of registers beyond the limit
            comp = issue.lookup(sched.meta.params, main.name, c.warps) if compiled else None
            spilled = comp.static_spill_store_bytes // 4 if comp else occ.spilled_regs_per_thread
            if issue.would_spill(main.census_key):  # a written program: spills not written
                priced += ", " + issue.WOULD_SPILL
                p = sched.meta.params
                regs = issue.written_registers(
                    str(p.get("impl", "flashio")), c.block_q, c.block_kv, shape.head_dim, c.warps
                )
                spilled = regs.spilled(gpu.regs_per_thread_max)
            slots = min(main.ctas, occ.ctas_per_sm * gpu.sm_count)
            c = replace(
                c,
                kernel=main.name,
                ctas=main.ctas,
                ctas_per_sm=occ.ctas_per_sm,
                limiter=occ.limiter,
                waves=main.waves,
                resident_warps_per_sm=slots * c.warps / gpu.sm_count,
                regs_per_thread=occ.regs_per_thread + spilled,
                spilled_regs_per_thread=spilled,
                smem_bytes=next(k.smem_bytes for k in sched.kernels if k.name == main.name),
                time_s=res.time_s,
                global_bytes=res.global_bytes,
                hbm_bytes=res.hbm_bytes,
                bound=res.bound,
                priced_by=priced,
            )
        ran.append(c)
        done += 1
        if progress:
            progress(done, total, c)
    ok = [r for r in ran if r.feasible]
    # a written program whose registers would spill gives a lower bound, not a time: last
    by_time = sorted(
        ok,
        key=lambda r: (bound_only(r), r.time_s, r.hbm_bytes, r.block_q, r.block_kv, r.warps),
    )
    by_hbm = sorted(ok, key=lambda r: (r.hbm_bytes, r.global_bytes, r.time_s, r.block_q))
    hbm_rank = {id(r): i for i, r in enumerate(by_hbm, 1)}
    best = by_time[0] if by_time else None
    ranked = [
        replace(
            r,
            rank_time=i,
            rank_hbm=hbm_rank[id(r)],
            slowdown=r.time_s / best.time_s,
            why=why_slower(r, best, gpu.sm_count, shape.n_kv),
        )
        for i, r in enumerate(by_time, 1)
    ]
    bad = sorted(
        (r for r in ran if not r.feasible), key=lambda r: (r.block_q, r.block_kv, r.warps)
    )
    return ranked + bad
