"""How long a CTA waits for a tile it copies with cp.async, the way the attention kernels' loops
do: every thread issues its 16-byte copies of the tile (``cp.async.cg.shared.global``), commits
them, waits for them all (``cp.async.wait_group 0``) and meets the others at a barrier.

The replay prices such a copy as the L2's pointer-chase latency plus the tile's bytes through
the SM's memory path (docs/model.md, "Memory events"); data/gpu/probe/burst.py timed a lone
CTA's 16 KiB copy through registers at about twice that. This probe times the loops' own copy:
tiles of 8-64 KiB by 128 and 256 threads (4 and 8 warps), one CTA alone and one on each of the
132 SMs at once, out of the L2 (a region copied by an earlier launch) and out of HBM (a region
no launch read). Each CTA copies ``ROUNDS`` tiles one after another into the same buffer,
thread 0 reading clock64 before the first and after each, so the first round (cold: nothing in
flight before it) and the later ones (as a loop's steps follow each other) are apart.

    python data/gpu/probe/tile_copy.py --out DIR

Writes DIR/tile_copy.json: provenance and, per launch, per CTA its %smid and the cycles of
each round.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.gpu_measure import provenance

ROUNDS = 8
SRC = r"""
typedef unsigned int u32;
typedef unsigned long long u64;

extern "C" __global__ void __launch_bounds__(256, 1)
    tile_copy(const char* __restrict__ src, u64 cta_stride, u64 round_stride, u32 bytes,
              u64* rec) {
    extern __shared__ __align__(128) char buf[];
    const u32 s = (u32)__cvta_generic_to_shared(buf);
    const char* p = src + blockIdx.x * cta_stride;
    u64* r = rec + (2 + ROUNDS) * (u64)blockIdx.x;
    u64 c = clock64();
    for (int round = 0; round < ROUNDS; ++round) {
        const char* q = p + round * round_stride;
        for (u32 off = 16u * threadIdx.x; off < bytes; off += 16u * blockDim.x)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
                         ::"r"(s + off), "l"(q + off) : "memory");
        asm volatile("cp.async.commit_group;" ::: "memory");
        asm volatile("cp.async.wait_group 0;" ::: "memory");
        __syncthreads();
        if (threadIdx.x == 0) {
            const u64 now = clock64();
            r[2 + round] = now - c;
            c = now;
        }
    }
    if (threadIdx.x == 0) {
        u32 id;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
        r[0] = id;
        r[1] = bytes;
    }
}
""".replace("ROUNDS", str(ROUNDS))
# (tile bytes, threads, CTAs): K or V tiles of 64 and 128 rows at d = 64 and 128 (8-32 KiB)
# and a larger one, by 4 and 8 warps, on one SM alone and on all 132
TILES = (8 << 10, 16 << 10, 32 << 10, 64 << 10)
CASES = [(b, t, n) for b in TILES for t in (128, 256) for n in (1, 132)]
BIG = 4 << 30  # bytes of the buffer fresh regions come from (more than 60 L2s)
REPS = 3


def run() -> dict:
    import cupy
    import numpy as np

    kern = cupy.RawKernel(SRC, "tile_copy")
    kern.max_dynamic_shared_size_bytes = max(b for b, _, _ in CASES)
    src = cupy.ones(BIG // 4, cupy.uint32).view(cupy.uint8)
    rec = cupy.zeros((2 + ROUNDS) * 132, cupy.uint64)
    rows, at = [], 0
    for where in ("hbm", "l2"):
        for nbytes, threads, ctas in CASES:
            # out of HBM every CTA's every round reads a region of its own; out of the L2 each
            # CTA reads its one region every round, brought in by a launch that is not kept
            round_stride = nbytes if where == "hbm" else 0
            cta_stride = nbytes * (ROUNDS if where == "hbm" else 1)
            region = ctas * cta_stride
            for rep in range(REPS + 1):
                if where == "hbm":
                    if at + region > BIG:
                        at = 0  # wrapped after far more than the L2 holds
                    base, at = at, at + region
                else:
                    base = 0
                kern(
                    (ctas,), (threads,),
                    (src[base:], np.uint64(cta_stride), np.uint64(round_stride),
                     np.uint32(nbytes), rec),
                    shared_mem=nbytes,
                )  # fmt: skip
                cupy.cuda.runtime.deviceSynchronize()
                if rep == 0:
                    continue  # warms the launch up; out of the L2 it brings the regions in
                r = rec.get()[: (2 + ROUNDS) * ctas].reshape(ctas, 2 + ROUNDS).astype("int64")
                rows.append({
                    "where": where, "bytes": nbytes, "threads": threads, "ctas": ctas,
                    "rep": rep, "smid": r[:, 0].tolist(), "cycles": r[:, 2:].tolist(),
                })  # fmt: skip
            c = np.array(rows[-1]["cycles"])
            print(f"{where} {nbytes >> 10:2d} KiB by {threads:3d} threads x {ctas:3d}: first "
                  f"round median {int(np.median(c[:, 0]))}, later rounds median "
                  f"{int(np.median(c[:, 1:]))} cycles", flush=True)  # fmt: skip
    return {"cases": CASES, "rounds": ROUNDS, "reps": REPS, "rows": rows}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"provenance": provenance(), **run()}
    (out / "tile_copy.json").write_text(json.dumps(doc))


if __name__ == "__main__":
    main()
