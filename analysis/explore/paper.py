"""The FlashAttention paper's Figure 2 (left) workload, simulated next to the paper's figures.

    python -m flashio.analysis.explore.paper    # prints the table docs/paper-figure2.md discusses

Workload (Dao et al. 2022, Fig. 2 left): GPT-2 medium attention, N = 1024, d = 64, 16 heads,
batch 64, fp16, forward + backward, on an A100 40GB. FlashAttention's blocks follow the paper's
Algorithm 1 with M = 192 KB of SRAM in fp16 (98,304 elements): Bc = ceil(M/4d) = 384,
Br = min(ceil(M/4d), d) = 64.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from flashio import kernels, simulator

__all__ = ["PAPER", "Figure2Row", "figure2"]

SHAPE = kernels.AttentionShape(batch=64, heads=16, seq_len=1024, head_dim=64, dtype="fp16")
PAPER_BLOCK_Q, PAPER_BLOCK_KV = 64, 384
# The paper's figures: HBM reads + writes in GB, runtime in ms (fwd + bwd), Fig. 2 left.
PAPER = {"standard": (40.3, 41.7), "flashattention": (4.4, 7.3)}
# FA1 splits K/V over warps and reduces partial outputs through shared memory (split-K); with
# Br=64, Bc=384 and d=64 the exchange buffer for 4 warps (4 x 64 x 66 x 4 B = 67.6 KB) on top of
# the 104 KB of Q, K, V tiles exceeds the A100's 163 KB per CTA, so the simulated FA1 uses 2.
FLASH1_WARPS = 2


@dataclass(frozen=True, slots=True)
class Figure2Row:
    method: str
    schedules: tuple[str, str]
    global_gb: float  # fwd + bwd, SM-side bytes (the paper's "HBM R/W" ignores L2)
    hbm_gb: float  # fwd + bwd, after the L2 model
    time_ms: float  # fwd + bwd, simulated
    paper_gb: float
    paper_ms: float


def figure2(gpu: simulator.GPUSpec | None = None) -> list[Figure2Row]:
    """Simulate standard attention and FlashAttention (v1, and v2 for reference) fwd + bwd."""
    gpu = gpu or simulator.load_gpu("a100-40gb")
    plans = [
        ("standard", ("standard", "standard_bwd"), {}, PAPER["standard"]),
        ("flashattention (v1)", ("flash1", "flash1_bwd"), {"warps": FLASH1_WARPS},
         PAPER["flashattention"]),
        ("flashattention-2", ("flash2", "flash2_bwd"), {}, (float("nan"), float("nan"))),
    ]  # fmt: skip
    rows = []
    for method, names, extra, (paper_gb, paper_ms) in plans:
        total = [0, 0, 0.0]
        for name in names:
            sched = kernels.schedule(name, SHAPE, PAPER_BLOCK_Q, PAPER_BLOCK_KV, **extra)
            res = simulator.simulate(sched, gpu)
            total[0] += res.global_bytes
            total[1] += res.hbm_bytes
            total[2] += res.time_s
        rows.append(Figure2Row(method, names, total[0] / 1e9, total[1] / 1e9, total[2] * 1e3,
                               paper_gb, paper_ms))  # fmt: skip
    return rows


def table(gpu: simulator.GPUSpec | None = None) -> str:
    """The rows of :func:`figure2` as text columns."""
    lines = [f"{'method':<22}{'global GB':>10}{'HBM GB':>9}{'time ms':>9}{'paper GB':>10}"
             f"{'paper ms':>10}"]  # fmt: skip
    for r in figure2(gpu):
        lines.append(f"{r.method:<22}{r.global_gb:>10.2f}{r.hbm_gb:>9.2f}{r.time_ms:>9.2f}"
                     f"{r.paper_gb:>10.1f}{r.paper_ms:>10.1f}")  # fmt: skip
    return "\n".join(lines)


def markdown() -> str:
    """docs/paper-figure2.md's generated block: :func:`table` on the a100-40gb, fenced."""
    return f"```\n{table()}\n```"


def main() -> None:
    gpu = simulator.load_gpu(sys.argv[1] if len(sys.argv) > 1 else "a100-40gb")
    print(f"FlashAttention paper Fig. 2 (left) workload on {gpu.name}: B=64, H=16, N=1024, d=64,")
    print(f"fp16, forward + backward; flash blocks Br={PAPER_BLOCK_Q}, Bc={PAPER_BLOCK_KV}\n")
    print(table(gpu))


if __name__ == "__main__":
    main()
