"""Where the H200's block scheduler puts a grid's CTAs.

CTAs of w warps, exactly c of them resident per SM (dynamic shared memory admits no more),
each doing the same work (FFMA chains; in the launches with loads also one dependent 16-byte
load a thread and iteration from an L2-resident buffer), on green contexts of n SMs
(sm_scaling.py's GreenContext). Thread 0 of each CTA records its %smid, a start and an end
ticket (atomicAdd on global counters: the order CTAs began and ended), %globaltimer at its
start and end and the clock64 cycles between. From that: which SMs the first wave and the
grid's last, partial wave land on (one CTA an SM, or packed c to an SM), and how long the
last CTAs take.

    python data/gpu/probe/cta_dispatch.py --out DIR [--sms 132 96 64]
    python data/gpu/probe/cta_dispatch.py --out DIR --many   # many short CTAs an SM
    python data/gpu/probe/cta_dispatch.py --summary FILE    # the gaps, from a record
    python data/gpu/probe/cta_dispatch.py --sass FILE   # no GPU: the kernel's SASS listing

Writes DIR/cta_dispatch.json.gz (provenance; per launch the per-CTA records as columns).
``--many``: short CTAs (1-10 us) at 4 to 16 resident an SM on the whole GPU, as elementwise
and softmax kernels launch them (MANY_LAUNCHES), into DIR/cta_dispatch_many.json.gz: whether
an SM's slot still idles for the turnaround measured at 1-3 CTAs an SM (384 ns, docs/model.md)
when many other CTAs share the SM. ``--summary`` prints, per launch, the median gap from the
last end before a CTA's start on its SM to that start, over every CTA after the first wave.
``--sass`` compiles the kernel with NVRTC as CuPy compiles a RawKernel (its options for
sm_90, benchmarks/nvrtc.py) and writes cuobjdump's listing, gzipped: the loops the warp
replay runs to compare its scheduling with the H200's (tests/test_cta_drift.py).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sm_scaling import GreenContext

from benchmarks.gpu_measure import provenance

SRC = r"""
extern "C" __global__ void work(const float4* __restrict__ buf, unsigned int span,
                                unsigned long long* rec, unsigned int* tickets,
                                int iters, int loads) {
    extern __shared__ float pad[];
    __shared__ unsigned long long t0, c0;
    __shared__ unsigned int s0;
    if (threadIdx.x == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        c0 = clock64();
        s0 = atomicAdd(&tickets[0], 1u);
    }
    __syncthreads();
    float a0 = threadIdx.x, a1 = a0 + 1, a2 = a0 + 2, a3 = a0 + 3;
    float a4 = a0 + 4, a5 = a0 + 5, a6 = a0 + 6, a7 = a0 + 7;
    const float b = 0.999f;
    float c = 0.001f;
    unsigned int at = (blockIdx.x * 7919u + threadIdx.x) % span;
    for (int i = 0; i < iters; ++i) {
        if (loads) {  // one dependent load a thread and iteration: the chains wait for it
            float4 v = buf[at];
            c = v.x * 1e-9f + 0.001f;
            at = (at + blockDim.x * 13u) % span;
        }
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            a0 = fmaf(a0, b, c); a1 = fmaf(a1, b, c); a2 = fmaf(a2, b, c); a3 = fmaf(a3, b, c);
            a4 = fmaf(a4, b, c); a5 = fmaf(a5, b, c); a6 = fmaf(a6, b, c); a7 = fmaf(a7, b, c);
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long t1, c1 = clock64();
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
        unsigned int id, e = atomicAdd(&tickets[1], 1u);
        asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
        unsigned long long* r = rec + 6ull * blockIdx.x;
        r[0] = id; r[1] = s0; r[2] = e; r[3] = t0; r[4] = t1; r[5] = c1 - c0;
    }
    float s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
    if (s == 12345.0f) { pad[0] = s; tickets[2] = (unsigned int)pad[threadIdx.x & 7]; }
}
"""
# --many's spinning CTAs: each warp waits until its SM's clock has run ``cycles`` past the
# CTA's start, using no pipe, so that an SM's CTAs finish in proportion to how many it holds
SPIN_SRC = r"""
extern "C" __global__ void spin(unsigned long long* rec, unsigned int* tickets, int cycles) {
    __shared__ unsigned long long t0, c0;
    __shared__ unsigned int s0;
    if (threadIdx.x == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        c0 = clock64();
        s0 = atomicAdd(&tickets[0], 1u);
    }
    __syncthreads();
    while ((long long)(clock64() - c0) < cycles) { __nanosleep(32); }
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long t1, c1 = clock64();
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
        unsigned int id, e = atomicAdd(&tickets[1], 1u);
        asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
        unsigned long long* r = rec + 6ull * blockIdx.x;
        r[0] = id; r[1] = s0; r[2] = e; r[3] = t0; r[4] = t1; r[5] = c1 - c0;
    }
}
"""
# (CTAs per SM, warps, cycles): spinning CTAs of 1 and 4 us at 4 to 16 an SM
SPIN_LAUNCHES = ((4, 4, 2000), (8, 4, 2000), (16, 4, 2000), (16, 4, 8000), (8, 8, 2000),
                 (2, 4, 2000), (1, 4, 2000))  # fmt: skip
# (CTAs per SM, warps, loads, iterations): the flash2 forward 64x64 w4's residency (3) and
# 128x128 w8's (2), one CTA an SM, with and without loads
LAUNCHES = ((3, 4, 0, 200), (3, 4, 1, 40), (2, 8, 0, 150), (2, 8, 1, 30), (1, 8, 0, 200))
GRID = 2048
REPS = 3
# --many: (CTAs per SM, warps, loads, iterations), short CTAs of 4 or 8 warps at 4 to 16 an SM
MANY_LAUNCHES = ((4, 4, 0, 10), (8, 4, 0, 10), (16, 4, 0, 4), (16, 4, 0, 20), (16, 4, 1, 2),
                 (8, 8, 0, 10))  # fmt: skip
MANY_GRID = 16384


def _fitting_smem(per_sm: int, c: int) -> int:
    """Dynamic shared memory a CTA asks so that c of them fit an SM and c + 1 do not (each
    with the 1 KiB the runtime reserves a CTA)."""
    return int(per_sm / (c + 0.5)) - 1024


def dispatch(ctx: GreenContext, per_sm: int, launches=LAUNCHES, grid: int = GRID) -> list[dict]:
    import cupy

    # --many: at most 32 registers a thread, so that 16 CTAs of 4 warps (2,048 threads) fit
    # the register file and shared memory alone limits how many share an SM
    many = launches is not LAUNCHES
    kern = cupy.RawKernel(SRC, "work", options=("--maxrregcount=32",) if many else ())
    kern.max_dynamic_shared_size_bytes = per_sm // 2 + 1024  # the most a launch below asks
    span = (8 << 20) // 16  # an 8 MiB buffer of float4: L2-resident
    rows = []
    with ctx.stream:
        buf = cupy.ones(span * 4, cupy.float32)
        rec = cupy.zeros(6 * grid, cupy.uint64)
        tickets = cupy.zeros(4, cupy.uint32)
        for c, w, loads, iters in launches:
            # c fit an SM, c + 1 do not
            smem = _fitting_smem(per_sm, c) if many else per_sm // (c + 1) + 1024
            args = (buf, cupy.uint32(span), rec, tickets, cupy.int32(iters), cupy.int32(loads))
            for rep in range(REPS + 1):  # the first launch warms up and is not kept
                tickets[:] = 0
                kern((grid,), (32 * w,), args, shared_mem=smem)
                ctx.stream.synchronize()
                if rep == 0:
                    continue
                r = rec.get().reshape(grid, 6).astype("int64")
                t0 = int(r[:, 3].min())
                rows.append({
                    "sms": ctx.sms, "ctas_per_sm": c, "warps": w, "loads": loads,
                    "iters": iters, "rep": rep, "registers": kern.num_regs,
                    "smem_bytes": smem, "smid": r[:, 0].tolist(),
                    "start_ticket": r[:, 1].tolist(), "end_ticket": r[:, 2].tolist(),
                    "start_ns": (r[:, 3] - t0).tolist(), "end_ns": (r[:, 4] - t0).tolist(),
                    "cycles": r[:, 5].tolist(),
                })  # fmt: skip
                span_us = (r[:, 4].max() - t0) / 1e3
                print(f"n={ctx.sms} c={c} w={w} loads={loads} rep {rep}: {span_us:.1f} us",
                      flush=True)  # fmt: skip
    return rows


def gaps(row: dict) -> dict:
    """One launch's turnaround: per CTA after the first wave, the gap from the last end of a
    CTA on its SM before its start to that start (ns); their median and 10th and 90th
    percentiles, and the median CTA's span. And over the middle of the launch (20-60% of its
    span), where every slot cycles through a CTA of span L and an idle gap g: the CTAs
    resident on an SM on average (c L / (L + g)) and the starts an SM makes per microsecond
    (c / (L + g)), with the gap each implies."""
    import numpy as np

    from flashio.analysis.validation.calibrate import slot_gaps_ns

    sm, start, end = (np.asarray(row[k], np.int64) for k in ("smid", "start_ns", "end_ns"))
    c, last = row["ctas_per_sm"], float(end.max())
    ts = np.linspace(0.2 * last, 0.6 * last, 200)
    sms = np.unique(sm)
    resident = np.mean([
        np.mean([((start[sm == s] <= t) & (end[sm == s] > t)).sum() for t in ts]) for s in sms
    ])  # fmt: skip
    mid = (start > 0.2 * last) & (start < 0.6 * last)
    rate = mid.sum() / len(sms) / (0.4 * last)  # starts per ns per SM
    span = float(np.median(end[mid] - start[mid]))
    g = slot_gaps_ns(row)
    return {
        "ctas_per_sm": row["ctas_per_sm"], "warps": row["warps"], "loads": row["loads"],
        "iters": row["iters"], "rep": row["rep"], "later_ctas": len(g),
        "gap_p10_ns": float(np.percentile(g, 10)), "gap_median_ns": float(np.median(g)),
        "gap_p90_ns": float(np.percentile(g, 90)),
        "cta_median_ns": float(np.median(end - start)),
        "registers": row.get("registers"), "mid_cta_ns": span,
        "mid_resident": float(resident), "mid_starts_per_us": float(rate * 1e3),
        "gap_from_resident_ns": span * (c / resident - 1),
        "gap_from_starts_ns": c / rate - span,
    }  # fmt: skip


def spin(per_sm: int) -> list[dict]:
    """SPIN_LAUNCHES on the whole GPU: per launch the per-CTA records, as ``dispatch``."""
    import cupy

    kern = cupy.RawKernel(SPIN_SRC, "spin")
    kern.max_dynamic_shared_size_bytes = max(_fitting_smem(per_sm, c) for c, *_ in SPIN_LAUNCHES)
    rows = []
    rec = cupy.zeros(6 * MANY_GRID, cupy.uint64)
    tickets = cupy.zeros(4, cupy.uint32)
    for c, w, cycles in SPIN_LAUNCHES:
        smem = _fitting_smem(per_sm, c)
        for rep in range(REPS + 1):  # the first launch warms up and is not kept
            tickets[:] = 0
            kern((MANY_GRID,), (32 * w,), (rec, tickets, cupy.int32(cycles)), shared_mem=smem)
            cupy.cuda.runtime.deviceSynchronize()
            if rep == 0:
                continue
            r = rec.get().reshape(MANY_GRID, 6).astype("int64")
            t0 = int(r[:, 3].min())
            rows.append({
                "sms": 132, "ctas_per_sm": c, "warps": w, "loads": -1, "iters": cycles,
                "rep": rep, "registers": kern.num_regs, "smem_bytes": smem, "spin": True,
                "smid": r[:, 0].tolist(), "start_ticket": r[:, 1].tolist(),
                "end_ticket": r[:, 2].tolist(), "start_ns": (r[:, 3] - t0).tolist(),
                "end_ns": (r[:, 4] - t0).tolist(), "cycles": r[:, 5].tolist(),
            })  # fmt: skip
    return rows


def write_sass(path: Path) -> None:
    """cuobjdump's listing of the kernel as CuPy compiles it for sm_90, gzipped to ``path``."""
    import subprocess

    from benchmarks import sass_census
    from benchmarks.nvrtc import compile_cubin
    from flashio.kernels.gpu import CUPY_NVRTC_OPTIONS

    cubin, _ = compile_cubin(SRC, (*CUPY_NVRTC_OPTIONS, "-arch=sm_90"))
    cub = path.with_suffix(".cubin")
    cub.write_bytes(cubin)
    try:
        dump = [sass_census._tool("cuobjdump"), "--dump-sass", str(cub)]
        text = subprocess.run(dump, capture_output=True, text=True, check=True).stdout
    finally:
        cub.unlink()
    with gzip.open(path, "wt") as f:
        f.write(text)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--sms", type=int, nargs="+", default=[132, 96, 64])
    ap.add_argument("--sass", type=Path, help="write the kernel's SASS listing here (no GPU)")
    ap.add_argument("--many", action="store_true", help="MANY_LAUNCHES on the whole GPU")
    ap.add_argument("--summary", type=Path, help="print each launch's gaps from this record")
    args = ap.parse_args(argv)
    if args.sass:
        write_sass(args.sass)
        return
    if args.summary:
        with gzip.open(args.summary, "rt") as f:
            for row in json.load(f)["launches"]:
                print(json.dumps(gaps(row)))
        return
    if not args.out:
        ap.error("--out DIR (measure) or --sass FILE")
    import cupy

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prov = provenance()
    per_sm = cupy.cuda.Device(0).attributes["MaxSharedMemoryPerMultiprocessor"]
    if args.many:
        doc = {"provenance": prov, "grid": MANY_GRID, "launches": []}
        ctx = GreenContext(10**6)  # the whole GPU
        doc["launches"] = dispatch(ctx, per_sm, MANY_LAUNCHES, MANY_GRID) + spin(per_sm)
        for row in doc["launches"]:
            print(json.dumps(gaps(row)), flush=True)
        name = "cta_dispatch_many.json.gz"
    else:
        doc = {"provenance": prov, "grid": GRID, "launches": []}
        for n in args.sms:
            ctx = GreenContext(n)
            doc["launches"] += dispatch(ctx, per_sm)
            ctx.close()
        name = "cta_dispatch.json.gz"
    with gzip.open(out / name, "wt") as f:
        json.dump(doc, f)


if __name__ == "__main__":
    main()
