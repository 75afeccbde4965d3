"""The instruction timing of a Hopper SM sub-partition: ``HOPPER_ISA``, the H200's as this
project's microbenchmarks measured it (each constant with its source), and ``issue_model``,
which combines it with a GPU spec's per-SM rates into the ``warp_replay.IssueModel`` the issue
model replays kernels with (docs/model.md, "Issue model")."""

from __future__ import annotations

from flashio.simulator.gpu import GPUSpec
from flashio.simulator.warp_replay import IssueModel

__all__ = ["HOPPER_ISA", "issue_model"]

# Instruction timing of Hopper SMs beyond the spec's per-SM rates, in cycles of the SM clock:
# the summary of data/gpu/probe/isa.py's run on the H200 (isa.json; tests/test_issue_model.py
# checks this table against it). Latencies are dependent-chain slopes of one warp; "interval"
# ratios are reciprocal throughputs per sub-partition at saturation, relative to the pipes'
# nominal rates where the spec holds those.
HOPPER_ISA = {
    # mma.sync.m16n8k16: 2728 FLOP/cycle/SM (6.007 cycles per HMMA per SMSP), while wgmma
    # reaches 4087 (wgmma_n64..n256): mma.sync runs at 2728 / 4087 of the tensor rate
    "mma_sync_fraction": 2728.0 / 4087.0,
    # integer, logic, compare, min/max, F2FP packing and IMAD: 2.0 cycles per warp instruction
    "alu_ops_per_cycle_per_sm": 4 * 32 / 2.0,
    "latency": {
        "mufu": 17.0,
        "ldsm": 29.0,
        "lds": 32.0,
        "shfl": 24.0,
        "other": 24.0,  # S2R, LDC, ...: not measured; assumed SHFL's MIO round trip
        # wgmma issue-to-wait 71, 106, 186 cycles at N = 64, 128, 256, of which the
        # tensor pipe's 32, 64, 128: a tail of 39-58 cycles; N = 128's is used
        "hgmma": 106.0 - 64.0,
        # mma.sync m16n8k16 dependent chain (hmma_bf16; fp16 23.9 too): fixed latency, which
        # compiled code covers by stall counts and a written program waits out
        "hmma": 23.9,
    },
    # when a variable-latency instruction's source registers may be overwritten: MUFU.EX2's
    # read barrier released 14 cycles after issue (runs 12-15, data/gpu/probe/README.md:
    # 15.0, 14.0, 14.0 from three softmax mixes; run 15's ex2_war kernels, timed after the
    # prediction, within 4%); the other classes' not measured, assumed the ALU latency
    "read_latency": 4.0,
    "read_latency_of": {"mufu": 14.0},
    # each variable-latency result a cycle early or late (IssueModel.latency_jitter): the
    # least perturbation a replay in whole cycles can make, an assumption (docs/model.md,
    # "Ties and phase locking", gives the steps at 0 to 3 cycles)
    "latency_jitter": 1.0,
    # a CTA's wgmma warpgroups that nothing makes take turns run evenly apart, not in step: the
    # Hopper forward's d = 64 builds without overlap, stamped, put one warpgroup's S 0.47-0.48
    # of a step after the other's on the GPU (data/gpu/probe/hopper_phase.py); the replay
    # keeps the phase it starts them in (docs/model.md, "Warpgroups started apart")
    "warpgroup_start": "spread",
    # bar.sync with W warps per CTA arriving together: 20, 28, 36 cycles per barrier at
    # W = 4, 8, 12; less the replay's own issue of W / 4 barriers per SMSP, 12 + 1.75 W
    "bar_cycles_base": 12.0,
    "bar_cycles_per_warp": 1.75,
    # data/gpu/probe/mio.py (mio.json): one warp issues LDSM.x4 / LDS.128 every 4 cycles
    # (512 B at the port's 128 B/cycle); four warps, one per SMSP, keep that pace through
    # 13-14 instructions before the shared port holds them back: 10 queued per SMSP
    "mio_queue": 10,
    # a register-spill reload that hits L1 (mio.json's local-memory pointer chase)
    "ldl_latency": 29.1,
    # the fraction of its rate a class keeps while the SMSP's tensor pipe runs wgmma (hgmma)
    # or mma.sync (hmma): data/gpu/probe/overlap.py --fit (overlap_fit.fit_all: overlap.json,
    # run 5, and runs 7-9 for the kernels run 5 lacks, on the CTA's time; run 11 on the FFMA
    # warpgroup's own span), each rate the one with which the warp replay reproduces a
    # measured mix of tensor work and that class in other warps ("t/c") or in the same warp
    # ("t/c/own", where the two differ); 0: the class waits until the tensor pipe is done.
    # Classes not measured keep their rate (an assumption)
    "tensor_overlap": {
        "hgmma/mufu": 0.695,
        # FFMA in one to three chains beside another warp's wgmma (run 11's split_ffma_c1-c3,
        # the FFMA warpgroup's span): the rate belongs to the sub-partition's FMA pipe, which
        # its warps share (run 16's two-warp mixes, not fitted on, within 3.4%)
        "hgmma/fma": 0.218,
        # FFMA beside its own warp's wgmma (intra_ffma, run 7: ptxas interleaving the FFMAs
        # with the wgmma issue, as in intra-warpgroup overlap); MUFU and FMNMX keep their
        # "hgmma" rates there (intra_mufu, intra_fmnmx replay within 1%)
        "hgmma/fma/own": 0.203,
        "hgmma/alu": 0.413,
        "hgmma/imad": 0.474,
        "hmma/mufu": 0.759,
        # FFMA does not run beside another warp's mma.sync (hsplit_ffma takes the sum of its
        # parts alone): rate 0, it waits for the HMMA (overlap.EXCLUSIVE); beside its own
        # warp's it keeps more than half its rate (hsame_ffma)
        "hmma/fma": 0.0,
        "hmma/fma/own": 0.571,
        "hmma/alu": 0.739,
        "hmma/imad": 0.624,
        # its own warp's mma.sync reading A and B from the register file (no reuse mark):
        # FFMA keeps less (hsamed_ffma); other classes keep "hmma"'s rates (an assumption)
        "hmma_fresh/fma/own": 0.125,
    },
}


def issue_model(gpu: GPUSpec, isa: dict = HOPPER_ISA) -> IssueModel:
    """The per-SMSP instruction timing of ``gpu``: pipe intervals from its per-SM rates (so a
    hypothetical GPU's rates carry over), latencies from ``isa``."""
    sp = gpu.sm_sub_partitions
    ws = gpu.warp_size
    wgmma = gpu.tensor_bf16_flops_per_cycle_per_sm
    mma_sync = wgmma * isa["mma_sync_fraction"]
    hmma_flops = 2 * 16 * 8 * 16  # one m16n8k16
    alu = ws / (isa["alu_ops_per_cycle_per_sm"] / sp)
    interval = {
        "hmma": hmma_flops / (mma_sync / sp),
        "mufu": ws / (gpu.sfu_ops_per_cycle_per_sm / sp),
        "fma": ws / (gpu.fp32_flops_per_cycle_per_sm / 2 / sp),
        "imad": alu,
        "alu": alu,
        "other": alu,
    }
    # a global load inside a main loop reads data every CTA shares (the backward's L and D):
    # an L2 hit, the spec's measured L2 latency; a spill reload hits L1 (docs/model.md,
    # "Register spills")
    latency = {
        **isa["latency"],
        "global": float(gpu.l2_latency_cycles),
        "local": isa["ldl_latency"],
    }
    return IssueModel(
        interval=interval,
        tensor_flops_per_cycle={"hmma": mma_sync / sp, "hgmma": wgmma / sp},
        latency=latency,
        read_latency=isa["read_latency"],
        read_latency_of=isa["read_latency_of"],
        latency_jitter=isa["latency_jitter"],
        smem_bytes_per_cycle_per_sm=gpu.smem_bandwidth_bytes_per_cycle_per_sm,
        bar_latency=isa["bar_cycles_base"],
        bar_latency_per_warp=isa["bar_cycles_per_warp"],
        sub_partitions=sp,
        mio_queue=isa["mio_queue"],
        tensor_overlap=isa["tensor_overlap"],
        warpgroup_start=isa["warpgroup_start"],
        source="simulator.hopper_isa.HOPPER_ISA and the spec's per-SM rates",
    )
