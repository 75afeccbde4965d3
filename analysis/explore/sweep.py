"""Grids of simulations: GPUs (real or scaled) x schedules x shapes x tiles, as CSV rows."""

from __future__ import annotations

import csv
import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from flashio import kernels, simulator
from flashio.analysis.explore.comparison import result_figures

__all__ = ["SweepRow", "gpu_variants", "run_sweep", "write_csv"]


@dataclass(frozen=True, slots=True)
class SweepRow:
    """One simulated point of a sweep (figures are 0 and ``error`` says why when it cannot run)."""

    gpu: str
    schedule: str
    batch: int
    heads: int
    seq_len: int
    head_dim: int
    dtype: str
    causal: bool
    block_q: int
    block_kv: int
    warps: int
    sm_count: int
    smem_per_cta_bytes: int
    hbm_bandwidth_bytes_per_s: float
    mma_flops: int
    global_bytes: int
    hbm_bytes: int
    time_s: float
    bound: str
    ctas_per_sm: int
    occupancy_limiter: str
    error: str


def gpu_variants(
    gpu: simulator.GPUSpec,
    sram_scales: Iterable[float] = (1.0,),
    hbm_scales: Iterable[float] = (1.0,),
    sm_scales: Iterable[float] = (1.0,),
) -> list[simulator.GPUSpec]:
    """Hypothetical GPUs: shared memory (per SM and per CTA), HBM bandwidth and the SM count
    scaled.

    The SM count is rounded to the nearest whole SM (at least one); each SM keeps its own
    resources and the L2 and HBM stay the chip's, as on a GPU partitioned by CUDA green
    contexts (docs/gpus.md, "What scales with what"). A variant is named e.g.
    ``h200-sram2x-hbm0.5x-sms66``; the unscaled spec keeps its name.
    """
    out = []
    for s, h, m in itertools.product(sram_scales, hbm_scales, sm_scales):
        if not all(0 < x < math.inf for x in (s, h, m)):
            raise simulator.UsageError(
                f"scales must be positive, finite numbers, got sram {s}, hbm {h}, sms {m}"
            )
        sms = max(1, round(gpu.sm_count * m))
        if s == 1 and h == 1 and sms == gpu.sm_count:
            out.append(gpu)
            continue
        name = (
            gpu.name
            + (f"-sram{s:g}x" if s != 1 else "")
            + (f"-hbm{h:g}x" if h != 1 else "")
            + (f"-sms{sms}" if sms != gpu.sm_count else "")
        )
        out.append(
            gpu.replace(
                name=name,
                sm_count=sms,
                smem_per_sm_bytes=int(gpu.smem_per_sm_bytes * s),
                smem_per_cta_bytes=int(gpu.smem_per_cta_bytes * s),
                hbm_bandwidth_bytes_per_s=gpu.hbm_bandwidth_bytes_per_s * h,
            )
        )
    return out


def run_sweep(
    gpus: list[simulator.GPUSpec],
    names: list[str],
    shapes: list[kernels.AttentionShape],
    blocks: list[tuple[int | None, int | None]],
    warps: list[int | None] = (None,),
    progress: Callable[[int, int, str], None] | None = None,
) -> list[SweepRow]:
    """Simulate every combination; blocks larger than a shape's sequence are clipped to it, and
    a block of None is the seed's rule B = M/(4d) on that GPU (``kernels.default_block`` of
    its shared memory per CTA), so a hypothetical GPU with more SRAM gets larger blocks.

    ``progress(done, total, label)`` is called before each point.
    """
    grid = list(itertools.product(gpus, names, shapes, blocks, warps))
    rows = []
    for done, (gpu, name, shape, (bq, bkv), w) in enumerate(grid):
        n = shape.seq_len
        rule = kernels.default_block(shape, gpu.smem_per_cta_bytes)  # B = M/(4d) on this GPU
        bq = min(bq, n) if bq else rule
        bkv = min(bkv, n) if bkv else rule
        if progress:
            progress(done, len(grid), f"{name} N={n} d={shape.head_dim} on {gpu.name}")
        sched = kernels.schedule(name, shape, block_q=bq, block_kv=bkv, warps=w)
        base = dict(
            gpu=gpu.name,
            schedule=name,
            batch=shape.batch,
            heads=shape.heads,
            seq_len=n,
            head_dim=shape.head_dim,
            dtype=shape.dtype,
            causal=shape.causal,
            block_q=sched.block_q,
            block_kv=sched.block_kv,
            warps=sched.warps,
            sm_count=gpu.sm_count,
            smem_per_cta_bytes=gpu.smem_per_cta_bytes,
            hbm_bandwidth_bytes_per_s=gpu.hbm_bandwidth_bytes_per_s,
        )
        try:
            res, error = simulator.simulate(sched, gpu), ""
        except simulator.CapacityError as exc:
            res, error = None, str(exc)
        rows.append(SweepRow(**base, **result_figures(res), error=error))
    if progress:
        progress(len(grid), len(grid), "done")
    return rows


def write_csv(rows: list[SweepRow], path: Path) -> None:
    fields = list(SweepRow.__dataclass_fields__)
    with simulator.atomic_write(path, newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow(asdict(r))
