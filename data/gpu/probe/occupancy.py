"""This project's mma.sync kernels at fewer resident CTAs per SM than their registers allow.

Nsight Compute has flash-attn 2's forward and this project's backward at d = 128 (two CTAs of
four warps per SM: one warp per sub-partition each) taking per CTA-step about what the warp
replay gives one CTA alone on its SM, while the replay of two resident CTAs overlaps them 1.45x
better (docs/validation.md). This probe measures the overlap itself: each kernel launched as
kernels/gpu.py launches it, then with its dynamic shared memory padded so that only k CTAs fit
on an SM (k = 1, 2, ... up to what its registers allow), the code and the grid unchanged. The
time at k = 1 is one CTA per SM, alone; the ratio T(1) / T(k) is how much k resident CTAs gain.

    python data/gpu/probe/occupancy.py --out DIR [--reps 10]

Writes DIR/occupancy.json (provenance, per kernel and k: the padded shared memory, the CTAs per
SM the driver reports, and the kernel's median time).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchmarks.gpu_measure import _random_inputs, n_sets_for, time_events
from flashio import kernels
from flashio.kernels import gpu

SMEM_PER_SM = 228 * 1024  # the H200's shared memory per SM; 1 KiB of it is reserved per CTA
# (schedule, head dim, (block_q, block_kv, warps)): four-warp tilings whose registers allow two
# or more CTAs per SM, forward and backward, d = 64 and 128; B x H = 1 x 16, N = 4096, bf16
CONFIGS = (
    ("flash2_bwd", 128, (64, 64, 4)),
    ("flash2_bwd", 64, (64, 64, 4)),
    ("flash2", 128, (64, 64, 4)),
    ("flash2", 64, (64, 64, 4)),
    ("flash2", 128, (128, 64, 4)),
)


def padded(ln, k: int):
    """``ln`` with the dynamic shared memory at which at most k CTAs fit on an SM."""
    return dataclasses.replace(ln, smem_bytes=max(ln.smem_bytes, SMEM_PER_SM // k - 1024 - 16))


def resident(fn, warps: int, smem_bytes: int) -> int:
    """CTAs of ``fn`` (a CuPy kernel) per SM at ``smem_bytes`` of dynamic shared memory, as
    the driver's occupancy calculator says."""
    import cupy

    ptr = fn.kernel.ptr  # a RawKernel's CUfunction
    try:
        return cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(
            ptr, 32 * warps, smem_bytes
        )
    except AttributeError:  # a CuPy without the call: cuda-bindings' driver API
        from cuda.bindings import driver

        err, n = driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            driver.CUfunction(ptr), 32 * warps, smem_bytes
        )
        assert err == driver.CUresult.CUDA_SUCCESS, err
        return n


def run(out: Path, reps: int) -> dict:
    import cupy
    from isa import provenance

    l2 = cupy.cuda.runtime.getDeviceProperties(0)["l2CacheSize"]
    rows = []
    for name, d, tiles in CONFIGS:
        shape = kernels.AttentionShape(1, 16, 4096, d, "bf16")
        sched = kernels.schedule(name, shape, *tiles)
        c = gpu.compile_schedule(sched)
        kernel = "flash2_bwd" if name == "flash2_bwd" else "flash2_fwd"
        main = next(i for i, ln in enumerate(c.launches) if ln.function == kernel)
        fn = c.function(kernel)
        smem = c.launches[main].smem_bytes  # above 48 KiB only once opted in
        fn.max_dynamic_shared_size_bytes = max(fn.max_dynamic_shared_size_bytes, smem)
        native = resident(fn, tiles[2], smem)
        dims = (shape.batch, shape.heads, shape.seq_len, shape.head_dim)
        n_in = 4 if name.endswith("_bwd") else 3
        n_sets = n_sets_for(math.prod(dims) * 2 * n_in, l2)
        sets = [c.alloc(*_random_inputs(dims, n_in, shape.dtype)) for _ in range(n_sets)]
        for k in range(1, native + 1):
            lns = list(c.launches)
            lns[main] = padded(lns[main], k) if k < native else lns[main]
            ck = dataclasses.replace(c, launches=tuple(lns))
            smem = ck.launches[main].smem_bytes
            fn.max_dynamic_shared_size_bytes = max(fn.max_dynamic_shared_size_bytes, smem)
            got = resident(fn, tiles[2], smem)
            t = time_events(
                lambda i, ev, ck=ck, sets=sets: ck.launch(sets[i], events=ev), n_sets, reps,
                n_events=len(ck.launches) + 1,
            )  # fmt: skip
            ms = t["parts_median_ms"][main]
            row = {"schedule": name, "head_dim": d, "tiles": list(tiles), "k": k,
                   "ctas_per_sm": got, "native_ctas_per_sm": native, "smem_bytes": smem,
                   "kernel": ck.launches[main].function, "ctas": ck.launches[main].grid,
                   "median_ms": ms}  # fmt: skip
            rows.append(row)
            print(row, flush=True)
        cupy.get_default_memory_pool().free_all_blocks()
    doc = {"provenance": provenance(), "rows": rows, "reps": reps}
    out.mkdir(parents=True, exist_ok=True)
    (out / "occupancy.json").write_text(json.dumps(doc, indent=1))
    return doc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="write OUT/occupancy.json")
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args(argv)
    run(a.out, a.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
