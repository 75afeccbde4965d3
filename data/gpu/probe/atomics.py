"""Same-address fp32 reductions at the L2: what many CTAs adding into one tile cost.

flash2_bwd accumulates dQ with ``red.global.add.v2.f32`` (kernels/cuda/flash2_bwd.cu): every
CTA of a (batch, head), one per key block, adds a Q block's 64 x d fp32 partial dQ into the
same rows. When those CTAs run together and walk the Q blocks in the same order, each of them
adds into the same 16 KiB (d = 64) at about the same time. probe.py measured the reductions'
throughput into a 16 MB buffer spread over the L2; this measures them into one shared tile.

G CTAs of 256 threads (G <= SMs, one per SM) each add (1, 1) to every 8-byte word of a 16 KiB
tile, ROUNDS times: into one tile all share ("shared"), or into a tile of their own
("private"), time by CUDA events (median of REPS launches after a warm-up). With G = 1 both
are the same; "shared" over "private" at G is the cost of G CTAs contending for the same
sectors. The sum is checked against G x ROUNDS (shared) or ROUNDS (private) per word. Then one CTA
(one SM) of T = 64 .. 1024 threads into a tile of its own: how the reductions one SM sends
grow with the warps issuing them ("one_sm" rows).

    python data/gpu/probe/atomics.py --out DIR    # on the GPU: DIR/atomics.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

TILE_FLOATS = 64 * 64  # a 64 x 64 fp32 dQ block (d = 64): 16 KiB
ROUNDS = 64
REPS = 15
CTAS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 132)

KERNEL = r"""
extern "C" __global__ void red_tile(float* base, int shared, int rounds) {
    float* tile = base + (shared ? 0 : (long)blockIdx.x * TILE);
    for (int k = 0; k < rounds; ++k)
        for (int i = 2 * threadIdx.x; i < TILE; i += 2 * blockDim.x)
            asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(tile + i), "f"(1.f),
                         "f"(1.f) : "memory");
}
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    import cupy
    import numpy as np

    from benchmarks.gpu_measure import provenance

    mod = cupy.RawModule(code=KERNEL, options=(f"-DTILE={TILE_FLOATS}",))
    fn = mod.get_function("red_tile")
    sms = cupy.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    buf = cupy.zeros(max(CTAS) * TILE_FLOATS, cupy.float32)
    rows = []
    for g in (c for c in CTAS if c <= sms):
        for shared in (1, 0):
            times = []
            for rep in range(REPS + 1):
                buf.fill(0)
                start, stop = cupy.cuda.Event(), cupy.cuda.Event()
                start.record()
                fn((g,), (256,), (buf, np.int32(shared), np.int32(ROUNDS)))
                stop.record()
                stop.synchronize()
                if rep:  # the first launch warms up
                    times.append(cupy.cuda.get_elapsed_time(start, stop))
            tiles = buf[: (1 if shared else g) * TILE_FLOATS]
            want = ROUNDS * (g if shared else 1)
            ok = bool((tiles == want).all())
            ms = statistics.median(times)
            nbytes = g * ROUNDS * TILE_FLOATS * 4
            rows.append({"ctas": g, "shared": bool(shared), "median_ms": ms,
                         "min_ms": min(times), "max_ms": max(times), "bytes": nbytes,
                         "bytes_per_s": nbytes / (ms * 1e-3), "sums_correct": ok})  # fmt: skip
            print(f"ctas {g:4d} {'shared ' if shared else 'private'} {ms * 1e3:9.1f} us "
                  f"{nbytes / (ms * 1e-3) / 1e12:6.3f} TB/s ok={ok}", flush=True)  # fmt: skip
    for threads in (64, 128, 256, 512, 1024):  # one SM: rate against warps in flight
        times = []
        for rep in range(REPS + 1):
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            fn((1,), (threads,), (buf, np.int32(0), np.int32(ROUNDS)))
            stop.record()
            stop.synchronize()
            if rep:
                times.append(cupy.cuda.get_elapsed_time(start, stop))
        ms, nbytes = statistics.median(times), ROUNDS * TILE_FLOATS * 4
        rows.append({"ctas": 1, "threads": threads, "one_sm": True, "shared": False,
                     "median_ms": ms, "min_ms": min(times), "max_ms": max(times),
                     "bytes": nbytes, "bytes_per_s": nbytes / (ms * 1e-3)})  # fmt: skip
        print(f"one SM, {threads:4d} threads {ms * 1e3:9.1f} us "
              f"{nbytes / (ms * 1e-3) / 1e9:7.1f} GB/s", flush=True)  # fmt: skip
    doc = {
        "provenance": provenance(),
        "settings": {
            "tile_floats": TILE_FLOATS,
            "rounds": ROUNDS,
            "reps": REPS,
            "threads": 256,
        },
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "atomics.json").write_text(json.dumps(doc, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
