"""Matmul FLOPs, arithmetic intensity and the roofline of each schedule; the recompute ratios.

FLOPs are counted as in the papers: 2 per multiply-add of a matrix product, matmuls only (the
FlashAttention papers' 4 N^2 d forward per head). Softmax and other elementwise work is not in
these counts (the simulator counts it separately as ``elementwise_flops`` and ``exps``).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from flashio import kernels, simulator
from flashio.analysis.closed_form.io import block_sums, io_counts_of
from flashio.kernels.registry import spec

__all__ = [
    "RecomputeRatios",
    "Roofline",
    "algorithmic_flops",
    "matmul_flops",
    "recompute_ratios",
    "ridge_point",
    "roofline",
]


def matmul_flops(sched: kernels.Schedule) -> int:
    """Matmul FLOPs the schedule performs (what its MMA events add up to).

    Notes
    -----
    Each schedule's module says how many products it does per computed score
    (``kernels.registry``). Standard attention computes every tile, whatever the mask: 2
    (forward) or 4 (backward)
    products of 2 N N_kv d FLOPs per head. The flash schedules skip the tiles the mask hides
    (``kernels.mask``) and compute the others whole: 2 or 5 products of 2 d * area, with area
    the sum of r_i c_j over visited tiles (``analysis.closed_form.io.block_sums``; N N_kv
    without a mask).
    """
    sh, kind = sched.shape, spec(sched.name)
    if kind.every_tile:
        area = sh.seq_len * sh.n_kv
    else:
        area = block_sums(sh, sched.block_q, sched.block_kv).area
    return kind.matmul_products * 2 * sh.head_dim * area * sh.batch * sh.heads


def algorithmic_flops(
    shape: kernels.AttentionShape, *, backward: bool = False, recompute: bool = True
) -> int:
    """FLOPs of the attention math, per unmasked query-key pair (block granularity ignored).

    Forward 4 d per pair (S = QK^T, O = PV); backward 8 d per pair (dV, dP, dQ, dK), plus 2 d
    to recompute S when ``recompute`` (FlashAttention: 10 d, 2.5x the forward). Pairs are N^2,
    N(N+1)/2 when causal, and for any mask what ``kernels.mask.pair_count`` counts. So per
    head: forward 4 N^2 d, backward 8 N^2 d (standard) or 10 N^2 d (flash).
    """
    d = shape.head_dim
    pairs = shape.forward_flops() // (4 * d * shape.batch * shape.heads)
    per_pair = (10 if recompute else 8) if backward else 4
    return per_pair * d * pairs * shape.batch * shape.heads


@dataclass(frozen=True, slots=True)
class RecomputeRatios:
    """The cost of FlashAttention's recomputation of S in the backward pass, exactly.

    All FLOP figures are in units of N^2 d per head (the same for causal shapes, where every
    term is scaled by the same pair count).
    """

    forward: Fraction  # 4
    backward_standard: Fraction  # 8: dV, dP, dQ, dK
    backward_flash: Fraction  # 10: S recomputed, then the four
    recompute: Fraction  # 2: S = QK^T
    of_forward: Fraction  # recompute / forward = 1/2
    of_standard_backward: Fraction  # flash backward / standard backward - 1 = 1/4
    of_standard_training: Fraction  # (4 + 10) / (4 + 8) - 1 = 1/6
    share_of_flash_training: Fraction  # recompute / (4 + 10) = 1/7
    full_forward_recompute: Fraction  # if a whole forward were recomputed: (4+8+4)/(4+8) - 1


def recompute_ratios() -> RecomputeRatios:
    """Exact ratios behind the seed's "recompute adds about a third of the training FLOPs".

    Notes
    -----
    FlashAttention's backward recomputes S = QK^T (2 N^2 d) from Q, K and the forward's m, l
    (or logsumexp), not the whole forward: O = PV is not needed. Against standard attention
    that adds 1/4 to the backward and 1/6 to training (forward + backward); it is 1/2 of a
    forward. Exactly 1/3 is what recomputing a *whole* forward (4 N^2 d, as activation
    checkpointing does, and as seed 000's "FLOPs_recompute = FLOPs_forward" says) would add to
    standard training: (4 + 8 + 4) / (4 + 8) = 4/3. docs/io.md says which reading holds.
    """
    f, bs, bf = Fraction(4), Fraction(8), Fraction(10)
    r = bf - bs
    return RecomputeRatios(
        forward=f,
        backward_standard=bs,
        backward_flash=bf,
        recompute=r,
        of_forward=r / f,
        of_standard_backward=bf / bs - 1,
        of_standard_training=(f + bf) / (f + bs) - 1,
        share_of_flash_training=r / (f + bf),
        full_forward_recompute=(f + bs + f) / (f + bs) - 1,
    )


def ridge_point(gpu: simulator.GPUSpec, dtype: str) -> float:
    """FLOP per byte at which a kernel turns from memory- to compute-bound on ``gpu``.

    Tensor-core (or FP32, for fp32 inputs) matmul rate over the achievable HBM bandwidth
    (datasheet times ``hbm_efficiency``).
    """
    return gpu.mma_flops_per_s(dtype) / gpu.effective_hbm_bandwidth_bytes_per_s


@dataclass(frozen=True, slots=True)
class Roofline:
    """One schedule on the roofline of one GPU (global traffic as if every access hit HBM)."""

    schedule: str
    gpu: str
    flops: int  # matmul FLOPs
    global_bytes: int  # closed-form reads + writes
    intensity: float  # FLOP / byte
    ridge: float  # FLOP / byte
    bound: str  # "memory" if intensity < ridge, else "compute"
    attainable_flops_per_s: float  # min(peak, intensity * bandwidth)
    time_lower_s: float  # max(flops / peak, bytes / bandwidth)

    def to_dict(self) -> dict:
        return {f: getattr(self, f) for f in self.__slots__}


def roofline(sched: kernels.Schedule, gpu: simulator.GPUSpec) -> Roofline:
    """Arithmetic intensity (matmul FLOPs / closed-form global bytes) against the GPU's ridge.

    Notes
    -----
    The classic roofline (Williams, Waterman & Patterson 2009) with the matmul pipe as the
    compute roof and HBM as the memory roof; it ignores the L2 (a lower bound on time when no
    access hits in L2) and everything the simulator models beyond the two roofs.
    """
    flops = matmul_flops(sched)
    nbytes = io_counts_of(sched).total_bytes
    peak = gpu.mma_flops_per_s(sched.shape.dtype)
    bw = gpu.effective_hbm_bandwidth_bytes_per_s
    intensity = flops / nbytes
    ridge = peak / bw
    return Roofline(
        schedule=sched.name,
        gpu=gpu.name,
        flops=flops,
        global_bytes=nbytes,
        intensity=intensity,
        ridge=ridge,
        bound="memory" if intensity < ridge else "compute",
        attainable_flops_per_s=min(peak, intensity * bw),
        time_lower_s=max(flops / peak, nbytes / bw),
    )


def roofline_table(gpu_name: str = "h200", block: int = 128) -> str:
    """Markdown table: the six schedules at B=1, H=16, N=4096, d=64, fp16, Br = Bc = ``block``,
    on the roofline of ``gpu_name`` (global traffic from the closed forms)."""
    gpu = simulator.load_gpu(gpu_name)
    shape = kernels.AttentionShape(1, 16, 4096, 64, "fp16")
    lines = [
        "| schedule | matmul GFLOP | global MB | FLOP/B | ridge FLOP/B | bound | time >= (us) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in kernels.SCHEDULES:
        r = roofline(kernels.schedule(name, shape, block, block), gpu)
        lines.append(
            f"| {name} | {r.flops / 1e9:.1f} | {r.global_bytes / 1e6:.1f} | {r.intensity:.1f} "
            f"| {r.ridge:.1f} | {r.bound} | {r.time_lower_s * 1e6:.1f} |"
        )
    return "\n".join(lines)


if (
    __name__ == "__main__"
):  # python -m flashio.analysis.closed_form.flops: the roofline table of docs/io.md
    print(roofline_table())
