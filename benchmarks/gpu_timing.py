"""Timing on the GPU by CUDA events, shared by the measurement scripts and the probes: the
median of repeated launches over rotated input sets (so the L2 holds none of them), and the
GPU's copy bandwidth and bf16 GEMM rate beside them."""

from __future__ import annotations

import itertools
import math

import numpy as np

__all__ = ["ceilings", "n_sets_for", "time_events", "timed"]


def time_events(run, n_sets: int, reps: int, n_events: int = 2, warmup: int = 3):
    """Median/min/max milliseconds of ``run(set_index, events)`` over ``reps`` calls; with more
    than two events also the median of each consecutive interval (per-kernel times)."""
    import cupy

    for i in range(warmup):
        run(i % n_sets, None)
    cupy.cuda.get_current_stream().synchronize()
    samples = []
    for i in range(reps):
        ev = [cupy.cuda.Event() for _ in range(n_events)]
        run(i % n_sets, ev)
        ev[-1].synchronize()
        samples.append([cupy.cuda.get_elapsed_time(a, b) for a, b in itertools.pairwise(ev)])
    s = np.array(samples)
    total = s.sum(axis=1)
    return {
        "median_ms": float(np.median(total)),
        "min_ms": float(total.min()),
        "max_ms": float(total.max()),
        "reps": reps,
        "parts_median_ms": [float(x) for x in np.median(s, axis=0)],
    }


def n_sets_for(set_bytes: int, l2_bytes: int) -> int:
    return max(3, min(64, math.ceil(3 * l2_bytes / max(set_bytes, 1))))


def ceilings(reps: int) -> dict:
    """Copy bandwidth (bytes read + written) and bf16 GEMM rate on random data."""
    import cupy

    n = 1 << 30  # 1 GiB per buffer
    src, dst = cupy.random.random(n // 4, dtype=cupy.float32), cupy.empty(n // 4, cupy.float32)
    t = time_events(lambda i, ev: timed(ev, lambda: cupy.copyto(dst, src)), 1, reps)
    out = {"copy_bytes": 2 * n, "copy_median_ms": t["median_ms"]}
    out["copy_bytes_per_s"] = 2 * n / (t["median_ms"] * 1e-3)
    try:
        import torch

        m = 8192
        a, b = (torch.randn(m, m, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        t = time_events(lambda i, ev: timed(ev, lambda: a @ b), 1, reps)
        out.update(gemm_m=m, gemm_median_ms=t["median_ms"])
        out["gemm_bf16_flops_per_s"] = 2 * m**3 / (t["median_ms"] * 1e-3)
    except ImportError:
        pass
    return out


def timed(ev, fn):
    """Call ``fn``, recording ``ev``'s first and last events around it (none when ``ev`` is
    None: a warm-up call)."""
    if ev is not None:
        ev[0].record()
    fn()
    if ev is not None:
        ev[-1].record()
