"""The issue model: what a kernel's main-loop step costs an SM, from its instructions.

A trace says how much work a CTA's step does (FLOPs, exps, bytes); it does not say how many
instructions the kernel spends on it, how they depend on each other, or how well the warps
resident on an SM hide each other's latencies. For kernels whose machine code is known, the
instruction census (``benchmarks/sass_census.py``, data/sass/) holds each main loop's warp
program, and ``simulator.warp_replay`` replays it on one SM sub-partition with the GPU's
instruction timing (``simulator.hopper_isa.issue_model``). ``step_costs`` turns the replay into
the two numbers the event engine charges per step (docs/model.md, "Issue model"):

- **occupancy**: the SM time one CTA's step takes from the SM when ``ctas`` CTAs share it
  (``together / ctas`` cycles);
- **duration**: the time one CTA needs for its step, however idle the SM (``alone`` cycles).

Both are spread over the step's arithmetic events in proportion to the work they carry at the
spec's pipe rates, so the engine's per-event booking sums to the replayed step. With CTA drift
(``ModelOptions.cta_drift``) a third: each resident CTA's step by age, oldest first, for 1 ..
``ctas`` CTAs (``warp_replay.rank_paces``).
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import json
from dataclasses import dataclass
from pathlib import Path

from flashio.simulator.gpu import GPUSpec
from flashio.simulator.hopper_isa import HOPPER_ISA, issue_model
from flashio.simulator.sass import CLASS_ID, NO_BARRIER, WarpProgram
from flashio.simulator.synth import flash_forward_program
from flashio.simulator.synth_sync import (
    instruction_mix,
    sync_forward_program,
    work_terms,
    xor_swizzle_ways,
)
from flashio.simulator.warp_replay import (
    IssueModel,
    StepTime,
    first_turn,
    once,
    rank_paces,
    replay,
)

__all__ = [
    "CENSUS_DIR",
    "HOPPER_ISA",
    "Compiled",
    "StepCost",
    "WrittenRegisters",
    "census",
    "compiled",
    "eager_key",
    "hopper_key",
    "issue_model",
    "lookup",
    "program_key",
    "register_table",
    "register_table_path",
    "spills_fit_l1",
    "step_costs",
    "sync_mix",
    "synthetic_step_costs",
    "synthetic_sync_step_costs",
    "would_spill",
    "written_registers",
]

CENSUS_DIR = Path(__file__).resolve().parent.parent / "data" / "sass"
# what a written program's step key says when its register line exceeds the limit: its spills
# are not written, so its time is a lower bound (``would_spill``)
WOULD_SPILL = "would spill"
DEFAULT_IMPL = "flashio"

# kernels compiled per value of schedule options, which their census keys name: standard
# attention's softmax (rows per CTA, passes over S; kernels.gpu.defines)
VARIANT_OPTIONS = {"softmax": ("softmax_rows", "softmax_passes")}


def program_key(
    kernel: str, head_dim: int, block_q: int, block_kv: int, warps: int, dtype: str,
    causal: bool = False, options: tuple = (), masked: bool = False, paged: int = 0,
    sparse: bool = False,
) -> str:  # fmt: skip
    """The census key of a compiled kernel variant. ``causal`` marks the variant of an
    implementation that compiles causal attention separately (flash-attn's ``Is_causal``);
    this project's kernels take it at run time and have one variant. ``options``: the
    (name, value) pairs of ``VARIANT_OPTIONS`` a kernel is compiled for. ``masked``: this
    project's build for masks beyond full and causal (a window, segments or kv_seq_len:
    kernels/cuda/flash2_fwd.cu's MASKED). ``paged``: the page size of flash_decode's build for
    a paged KV cache (PAGED), 0 for none. ``sparse``: the build for a block mask
    (BLOCK_SPARSE, in place of ``masked``)."""
    return (
        f"{kernel} d={head_dim} {block_q}x{block_kv} w={warps} {dtype}"
        + "".join(f" {k}={v}" for k, v in options)
        + (" causal" if causal else "")
        + (" sparse" if sparse else " masked" if masked else "")
        + (f" paged={paged}" if paged else "")
    )


def hopper_key(
    head_dim: int, block_q: int, block_kv: int, warps: int, dtype: str, softmax_overlap: str,
    kernel: str = "flash2_fwd",
) -> str:  # fmt: skip
    """The census key of a build of this project's Hopper kernels (data/sass/flashio-hopper):
    ``program_key`` of the trace's kernel (the forward's, or ``flash2_bwd`` for the backward's
    main kernel) with its softmax overlap, a compile-time switch of hopper_fwd.cu ("none" for
    the backward)."""
    overlap = (("softmax_overlap", softmax_overlap),)
    return program_key(kernel, head_dim, block_q, block_kv, warps, dtype, options=overlap)


MASK_FIELDS = ("window", "segments", "kv_seq_len", "block_mask")  # params beyond causal

# standard attention's kernels as eager PyTorch launches them (``unfused=1``,
# kernels._standard_unfused), each compiled once per dtype and, the row softmax, per row length
EAGER_KERNELS = ("scale", "masked_fill", "row_softmax")


def eager_key(kernel: str, warps: int, params: dict) -> str:
    """The census key of one of PyTorch's eager kernels (``EAGER_KERNELS``): its dtype and,
    for the row softmax, the template argument the row length picks: ``log2`` of the keys a
    warp holds (``softmax_warp_forward``, 4 warps a CTA) or the elements a thread holds
    (``cunn_SoftMaxForwardReg``'s ILP, a CTA a row), each a power of two."""
    dtype = params["dtype"]
    if kernel != "row_softmax":
        return f"{kernel} {dtype}"
    n_kv = int(params.get("kv_seq_len") or params["seq_len"])
    if warps == 4:
        return f"{kernel} warp log2={max(0, n_kv - 1).bit_length()} {dtype}"
    per_thread = -(-n_kv // (32 * warps))
    return f"{kernel} block ilp={1 << max(0, per_thread - 1).bit_length()} {dtype}"


@functools.lru_cache(maxsize=8)
def census(impl: str = DEFAULT_IMPL) -> dict:
    """The committed warp programs of implementation ``impl`` (data/sass/<impl>.json.gz), by
    ``program_key``; each entry holds the program and the compiler's register report. Empty
    when the implementation has no census."""
    p = CENSUS_DIR / f"{impl}.json.gz"
    if not p.exists():
        return {}
    with gzip.open(p, "rt") as f:
        return json.load(f)["programs"]


@functools.lru_cache(maxsize=256)
def _program(key: str, impl: str = DEFAULT_IMPL) -> WarpProgram | None:
    d = census(impl).get(key)
    return WarpProgram.from_json(d) if d else None


@functools.lru_cache(maxsize=256)
def _fixed_cycles(key: str, impl: str, model: IssueModel, warps: int) -> tuple[float, float]:
    """Cycles of census entry ``key``'s prologue and epilogue, one CTA alone. 0 for a part the
    census lacks, and for one holding tensor-core instructions: a step of the loop peeled out
    of it (flash-attn 2's forward runs its first, masked K/V block before its main loop), which
    the trace already counts as a step."""
    d = census(impl).get(key) or {}
    out = []
    for part in ("prologue", "epilogue"):
        prog = WarpProgram.from_json(d[part]) if part in d else None
        peeled = prog is not None and prog.tensor_flops.any()
        out.append(0.0 if prog is None or peeled else once(prog, model, warps))
    return tuple(out)


def compiled(key: str, impl: str = DEFAULT_IMPL) -> dict | None:
    """The compiler's report for census entry ``key``: registers per thread, spill bytes."""
    d = census(impl).get(key)
    return d.get("compiled") if d else None


@dataclass(frozen=True)
class Compiled:
    """A kernel variant the census holds: its key and implementation, the compiler's
    registers per thread, the register-spill bytes one warp stores and loads per step,
    (where its launch is known) the shared memory per CTA, and ptxas's spill-store bytes per
    thread."""

    key: str
    impl: str
    registers: int
    spill_store_bytes: int
    spill_load_bytes: int
    smem_bytes: int | None = None  # shared memory per CTA, where the census knows it
    # ptxas's spill-store bytes per thread: the code's static local stores, loop and outside
    static_spill_store_bytes: int = 0
    local_bytes: int = 0  # local memory (stack frame) per thread
    # the launcher asks for the largest shared-memory carve-out (Triton's does, for kernels of
    # more than 48 KiB: third_party/nvidia/backend/driver.c, loadBinary, PREFER_SHARED)
    carveout_max: bool = False
    # whether the loop's cp.async copies stay in flight across its tensor-core work
    # (``simulator.sass_paths.copies_overlap``); None: no copies, or not decided
    copies_overlap: bool | None = None
    # whether it commits them behind an asynchronous product still in flight
    # (``simulator.sass_paths.copies_behind_product``): they load while that product runs
    copies_behind_product: bool | None = None
    # whether its global loads stream data read once (eager PyTorch's elementwise and
    # softmax kernels read each score once), so they wait for HBM, not for an L2 hit
    streams: bool = False
    # whether the loop sends its global stores and reductions after all its tensor-core work
    # (``sends_last``): nothing of the step runs beside them while they leave
    sends_last: bool = False


def sends_last(prog: WarpProgram | None) -> bool:
    """Whether loop ``prog`` issues no tensor-core instruction after its last global store or
    reduction (a global access that writes no register): its warps cannot issue the next
    step's products before the SM has taken their sends. This project's mma.sync backward adds
    dQ last, after dK's products, and its Hopper backward sends dQ's reductions with dK's
    wgmma in flight and only waits for it after them; flash-attn 2's backward issues dK's
    products after its dQ atomics (docs/model.md, "Reductions")."""
    if prog is None:
        return False
    tensor = {CLASS_ID["hmma"], CLASS_ID["hgmma"]}
    sends = [
        i for i, (c, wb) in enumerate(zip(prog.klass, prog.write_barrier, strict=True))
        if c == CLASS_ID["global"] and wb == NO_BARRIER
    ]  # fmt: skip
    if not sends:
        return False
    return not any(prog.klass[i] in tensor for i in range(sends[-1] + 1, len(prog.klass)))


def lookup(params: dict, kernel: str, warps: int) -> Compiled | None:
    """The census entry of ``kernel`` of a trace with ``params`` (its meta.params: head dim,
    block sizes, dtype, implementation), or None."""
    impl = params.get("impl", DEFAULT_IMPL)
    if kernel in EAGER_KERNELS:
        key = eager_key(kernel, warps, params)
        d = census(impl).get(key)
        if d is None:
            return None
        regs, smem = int(d["compiled"]["registers"]), d["compiled"].get("smem_bytes")
        return Compiled(key, impl, regs, 0, 0, smem, streams=bool(d.get("streams")))
    try:
        options = tuple((k, params[k]) for k in VARIANT_OPTIONS.get(kernel, ()))
        key = program_key(
            kernel, params["head_dim"], params["block_q"], params["block_kv"], warps,
            params["dtype"], options=options,
        )  # fmt: skip
    except KeyError:  # a trace without its tiling: nothing to look up
        return None
    row = params.get("kv_seq_len", params.get("seq_len", 0))  # S's row length
    if options and row % 8:  # the census holds the aligned-rows build
        return None
    table = census(impl)
    roles = params.get("warp_roles")
    if roles is not None:  # a build per softmax overlap (this project's Hopper forward)
        overlap = program_key(
            kernel, params["head_dim"], params["block_q"], params["block_kv"], warps,
            params["dtype"], options=(*options, ("softmax_overlap", roles["softmax_overlap"])),
        )  # fmt: skip
        key = overlap if overlap in table else key
    # a separately compiled causal variant where there is one; this project's masked build
    # where the trace has such a mask (else the unmasked loop prices it: docs/model.md)
    d = table.get(key + " causal") if params.get("causal") else None
    key = key + " causal" if d is not None else key
    if params.get("block_mask") is not None and key + " sparse" in table:
        key += " sparse"  # the block-sparse build
    elif any(params.get(f) is not None for f in MASK_FIELDS) and key + " masked" in table:
        key += " masked"
    paged = params.get("paged_kv")  # flash_decode over a paged cache: its PAGED build
    if paged is not None and f"{key} paged={paged['page_size']}" in table:
        key += f" paged={paged['page_size']}"
    d = d if d is not None else table.get(key)
    if d is None:
        return None
    return Compiled(
        key,
        impl,
        int(d["compiled"]["registers"]),
        int(d.get("spill_store_bytes", 0)),
        int(d.get("spill_load_bytes", 0)),
        d["compiled"].get("smem_bytes"),
        int(d["compiled"].get("spill_store_bytes", 0)),
        int(d["compiled"].get("stack_bytes", d["compiled"].get("local_bytes", 0))),
        d["compiled"].get("carveout") == "max",
        d.get("copies_overlap"),
        d.get("copies_behind_product"),
        sends_last=sends_last(_program(key, impl)),
    )


def spills_fit_l1(comp: Compiled, ctas_per_sm: int, threads_per_cta: int, smem_per_sm: int,
                  gpu: GPUSpec) -> bool:  # fmt: skip
    """Whether the local memory of ``ctas_per_sm`` resident CTAs fits the L1 the shared-memory
    carve-out leaves (``GPUSpec.l1_free_bytes``): the smallest carve-out holding
    ``smem_per_sm`` bytes (the driver's choice), or the largest where the launcher asks for it.
    Where it does not, spill reloads miss L1 (Triton's d = 128, 128x64, 4-warp forward: 40 KiB
    of local memory beside a 228 KiB carve-out, 36% hits; data/impl/triton_ncu.csv)."""
    used = gpu.smem_per_sm_bytes if comp.carveout_max else smem_per_sm
    frame = comp.local_bytes * threads_per_cta * ctas_per_sm
    return frame <= gpu.l1_free_bytes(used)


@dataclass(frozen=True)
class StepCost:
    """What one CTA's main-loop step costs, in seconds, and where it comes from."""

    key: str
    occupancy_s: float  # SM time per step at the kernel's occupancy
    duration_s: float  # one CTA's step, alone on the SM
    replay: StepTime
    # a CTA's code before its first step and after its last (prologue, epilogue), alone
    lead_s: float = 0.0
    tail_s: float = 0.0
    # with CTA drift: each resident CTA's step by age, oldest first, with 1, 2, ... CTAs
    # resident (``warp_replay.rank_paces``); empty without
    paces_s: tuple[tuple[float, ...], ...] = ()


def _paces_s(gpu: GPUSpec, paces, steps: int = 1) -> tuple[tuple[float, ...], ...]:
    return tuple(tuple(gpu.cycles_to_s(p / steps) for p in row) for row in paces)


@functools.lru_cache(maxsize=256)
def _replayed(key: str, impl: str, model: IssueModel, warps: int, ctas: int) -> StepTime | None:
    prog = _program(key, impl)
    return None if prog is None else replay(prog, model, warps, ctas, turns=first_turn(prog))


@functools.lru_cache(maxsize=256)
def _ranked(key: str, impl: str, model: IssueModel, warps: int, ctas: int) -> tuple:
    prog = _program(key, impl)
    return rank_paces(prog, model, warps, ctas, turns=first_turn(prog))


@functools.lru_cache(maxsize=64)
def synthetic_step_costs(
    gpu: GPUSpec, block_kv: int, head_dim: int, elem_bytes: int, overlap: str,
    consumer_warps: int, ctas_per_sm: int, drift: bool = False,
) -> StepCost:  # fmt: skip
    """The replayed step of a wgmma forward whose machine code is unknown: the consumer warps'
    program that ``simulator.synth`` writes from its description (the producer warp's TMA
    issue is left out: a few instructions a step). ``drift``: with the paces by age."""
    prog = flash_forward_program(block_kv, head_dim, elem_bytes, overlap)
    model = issue_model(gpu)
    # the written program has no named barriers: where the description's warpgroups take
    # turns (ping-pong), no start of the model's moves them (IssueModel.warpgroup_start)
    turns = overlap in ("pingpong", "both")
    st = replay(prog, model, consumer_warps, ctas_per_sm, stagger=0.0 if turns else None)
    paces = rank_paces(prog, model, consumer_warps, ctas_per_sm) if drift else ()
    return StepCost(
        key=prog.name,
        occupancy_s=gpu.cycles_to_s(st.together / st.ctas),
        duration_s=gpu.cycles_to_s(st.alone),
        replay=st,
        paces_s=_paces_s(gpu, paces),
    )


@functools.lru_cache(maxsize=64)
def sync_mix(impl: str = DEFAULT_IMPL, kernel: str = "flash2_fwd", exclude: tuple = ()):
    """The instruction mix ``simulator.synth_sync`` reads from ``impl``'s compiled ``kernel``
    (an mma.sync forward), leaving out the tilings (head_dim, block_q, block_kv, warps) in
    ``exclude``; None where its census holds too few spill-free tilings."""
    return instruction_mix(census(impl), impl, kernel, exclude)


def _writable_mix(impl, block_q, block_kv, head_dim, warps, hold_out):
    """The instruction mix a written mma.sync forward of ``impl`` at this tiling takes (None:
    no mix, or rows per warp not a multiple of 16); ``hold_out``: read without the tiling's
    own compiled code. An implementation with too few compiled tilings of its own borrows
    this project's kernel's mix: the same algorithm, compiled by one compiler (docs/model.md)."""
    if block_q % (16 * warps) or block_kv % 16 or head_dim % 16:
        return None
    held = ((head_dim, block_q, block_kv, warps),) if hold_out else ()
    return sync_mix(impl, exclude=held) or sync_mix(DEFAULT_IMPL, exclude=held)


def would_spill(census_key: str) -> bool:
    """Whether a step priced under ``census_key`` is a written program that would spill."""
    return WOULD_SPILL in census_key


def register_table_path(impl: str) -> Path:
    """Where the compiler's register report of ``impl``'s forward at a grid of tilings is kept
    (benchmarks/register_table.py)."""
    return CENSUS_DIR / f"{impl}-registers.json"


@functools.cache
def register_table(impl: str) -> dict[tuple[int, int, int, int], dict]:
    """The compiler's register report of ``impl``'s forward by tiling (head_dim, block_q,
    block_kv, warps): registers, spill and stack bytes per thread; empty where there is none."""
    p = register_table_path(impl)
    if not p.exists():
        return {}
    rows = json.loads(p.read_text())["entries"]
    return {(r["head_dim"], r["block_q"], r["block_kv"], r["warps"]): r for r in rows}


@dataclass(frozen=True, slots=True)
class WrittenRegisters:
    """Registers per thread of a forward priced by its written program: the compiler's count
    and spill stores where the register table has the tiling (``source`` "compiler"), else the
    register line's demand, uncapped (``source`` "register line"; ``spill_store_bytes`` None)."""

    registers: int
    spill_store_bytes: int | None
    source: str

    def launched(self, limit: int) -> int:
        """What the kernel runs with on a GPU of ``limit`` registers a thread."""
        return min(self.registers, limit)

    def spilled(self, limit: int) -> int:
        """Registers it keeps in local memory instead: the compiler's spill stores, 4 bytes a
        register, or the line beyond ``limit`` (spills the written program does not write)."""
        if self.spill_store_bytes is not None:
            return self.spill_store_bytes // 4
        return max(0, self.registers - limit)


def written_registers(
    impl: str, block_q: int, block_kv: int, head_dim: int, warps: int, hold_out: bool = False
) -> WrittenRegisters | None:  # fmt: skip
    """Registers per thread of an mma.sync forward of ``impl`` at a tiling priced by its
    written program: the compiler's where ``impl``'s register table has the tiling
    (``register_table``; not where ``hold_out``, which prices a tiling as one never compiled),
    else the mix's register line (``synth_sync``). None where no program can be written."""
    mix = _writable_mix(impl, block_q, block_kv, head_dim, warps, hold_out)
    if mix is None:
        return None
    compiled = None if hold_out else register_table(impl).get((head_dim, block_q, block_kv, warps))
    if compiled is not None:
        return WrittenRegisters(compiled["registers"], compiled["spill_store_bytes"], "compiler")
    if mix.registers == (0.0, 0.0):
        return None
    demand = mix.register_demand(work_terms(block_q, block_kv, head_dim, warps))
    return WrittenRegisters(demand, None, "register line")


@functools.lru_cache(maxsize=256)
def synthetic_sync_step_costs(
    gpu: GPUSpec, impl: str, block_q: int, block_kv: int, head_dim: int, warps: int,
    ctas_per_sm: int, hold_out: bool = False, drift: bool = False,
) -> StepCost | None:  # fmt: skip
    """The replayed step of an mma.sync forward at a tiling ``impl``'s census lacks: the
    program ``simulator.synth_sync`` writes with the instruction mix of ``impl``'s compiled
    tilings (without this one's where ``hold_out``). None where there is no mix, or the
    tiling cannot be written (rows per warp not a multiple of 16). ``drift``: with the paces
    by age."""
    mix = _writable_mix(impl, block_q, block_kv, head_dim, warps, hold_out)
    if mix is None:
        return None
    model = issue_model(gpu)
    # this project's tile layout is known to the byte (kernels/cuda/mma_tiles.cu); other
    # implementations' swizzles are taken as conflict-free
    ways = xor_swizzle_ways(head_dim) if impl == DEFAULT_IMPL else 1
    prog = sync_forward_program(
        block_q, block_kv, head_dim, warps, mix, HOPPER_ISA["latency"]["hmma"], ldsm_ways=ways
    )
    st = replay(prog, model, warps, ctas_per_sm)
    paces = rank_paces(prog, model, warps, ctas_per_sm) if drift else ()
    regs = written_registers(impl, block_q, block_kv, head_dim, warps, hold_out)
    limit, note = gpu.regs_per_thread_max, ""
    if regs is not None and regs.spilled(limit) > 0:
        need = regs.launched(limit) + regs.spilled(limit)
        note = f", {need} registers: {WOULD_SPILL}, spills not written"
    return StepCost(
        key=prog.name + note,
        occupancy_s=gpu.cycles_to_s(st.together / st.ctas),
        duration_s=gpu.cycles_to_s(st.alone),
        replay=st,
        paces_s=_paces_s(gpu, paces),
    )


def step_costs(
    gpu: GPUSpec, key: str, warps: int, ctas_per_sm: int, impl: str = DEFAULT_IMPL,
    spills_hit: bool = True, streams: bool = False, loads_traced: bool = False,
    drift: bool = False,
) -> StepCost | None:  # fmt: skip
    """The replayed step of census program ``key`` of ``impl`` on ``gpu`` (None: not in the
    census); with ``spills_hit`` False, spill reloads miss L1 and wait the L2's latency; with
    ``streams``, global loads wait the HBM's latency (data read once: Compiled.streams); with
    ``loads_traced``, global loads cost their issue only: they are the step's LOAD events,
    whose latency the engine already waits before the step's arithmetic; with ``drift``, the
    paces by age (``StepCost.paces_s``)."""
    model = issue_model(gpu)
    latency = dict(model.latency)
    if not spills_hit:
        latency["local"] = float(gpu.l2_latency_cycles)
    if streams:
        latency["global"] = float(gpu.hbm_latency_cycles)
    elif loads_traced:
        latency["global"] = 0.0
    if latency != dict(model.latency):
        model = dataclasses.replace(model, latency=latency)
    st = _replayed(key, impl, model, warps, ctas_per_sm)
    if st is None:
        return None
    lead, tail = _fixed_cycles(key, impl, model, warps)
    # a program of several loops' iterations stands for as many of the trace's steps
    steps = int(census(impl)[key].get("loop_steps", 1))
    paces = _ranked(key, impl, model, warps, ctas_per_sm) if drift else ()
    return StepCost(
        key=key,
        occupancy_s=gpu.cycles_to_s(st.together / st.ctas / steps),
        duration_s=gpu.cycles_to_s(st.alone / steps),
        replay=st,
        lead_s=gpu.cycles_to_s(lead),
        tail_s=gpu.cycles_to_s(tail),
        paces_s=_paces_s(gpu, paces, steps),
    )
