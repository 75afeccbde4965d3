"""Copies through HBM by loads of 1 to 16 bytes a thread: what narrow requests cost.

PyTorch's masked_fill and its warp softmax load 1- and 2-byte elements a thread (32- and
64-byte requests a warp) and reach 0.9-1.0 TB/s of reads where its 16-byte-a-thread scale
kernel reaches 2.2 (data/impl/eager/eager_ncu.csv.gz). The model serves bytes, whatever
the request's size (docs/model.md, "The SM's memory path"); this measures the rate per
request width, to model it from the GPU rather than from those kernels.

Each CTA of 128 threads copies 128 x U elements of W bytes (W = 1, 2, 4, 8, 16; U = 1, 4, 8
elements a thread, element t + k 128 as PyTorch's elementwise_kernel<128, U> lays them out):
it loads all U, then stores them. 1 GiB copied (source and destination each far larger than
the L2), timed by CUDA events (median of REPS launches after a warm-up); the copy is checked.

    python data/gpu/probe/narrow_loads.py --out DIR    # on the GPU: DIR/narrow_loads.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

BYTES = 1 << 30
REPS = 10
WIDTHS = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "uint2", 16: "uint4"}
UNROLLS = (1, 4, 8)
THREADS = 128

KERNEL = r"""
template <typename T, int U>
__global__ void copy_narrow(const T* __restrict__ src, T* __restrict__ dst) {
    long base = (long)blockIdx.x * blockDim.x * U + threadIdx.x;
    T v[U];
#pragma unroll
    for (int k = 0; k < U; ++k) v[k] = src[base + k * blockDim.x];
#pragma unroll
    for (int k = 0; k < U; ++k) dst[base + k * blockDim.x] = v[k];
}
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    import cupy

    from benchmarks.gpu_measure import provenance

    names = [f"copy_narrow<{t}, {u}>" for t in WIDTHS.values() for u in UNROLLS]
    mod = cupy.RawModule(code=KERNEL, name_expressions=names, options=("-std=c++17",))
    src = cupy.arange(BYTES, dtype=cupy.uint8)  # byte i holds i mod 256
    dst = cupy.zeros(BYTES, cupy.uint8)
    rows = []
    for width, ctype in WIDTHS.items():
        for unroll in UNROLLS:
            fn = mod.get_function(f"copy_narrow<{ctype}, {unroll}>")
            ctas = BYTES // width // (THREADS * unroll)
            times = []
            for rep in range(REPS + 1):
                start, stop = cupy.cuda.Event(), cupy.cuda.Event()
                start.record()
                fn((ctas,), (THREADS,), (src, dst))
                stop.record()
                stop.synchronize()
                if rep:  # the first launch warms up
                    times.append(cupy.cuda.get_elapsed_time(start, stop))
            ok = bool((dst == src).all())
            dst.fill(0)
            ms = statistics.median(times)
            moved = 2 * BYTES  # read and written
            rows.append({"width_bytes": width, "unroll": unroll, "ctas": ctas,
                         "threads": THREADS, "request_bytes": 32 * width, "median_ms": ms,
                         "min_ms": min(times), "max_ms": max(times), "bytes_moved": moved,
                         "bytes_per_s": moved / (ms * 1e-3), "copy_correct": ok})  # fmt: skip
            print(f"W {width:2d} B, U {unroll}: {ms * 1e3:9.1f} us "
                  f"{moved / (ms * 1e-3) / 1e12:6.3f} TB/s ok={ok}", flush=True)  # fmt: skip
    doc = {
        "provenance": provenance(),
        "settings": {"bytes": BYTES, "reps": REPS, "threads": THREADS},
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "narrow_loads.json").write_text(json.dumps(doc, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
