"""What the L2 delivers to all SMs at once when k of them read the same lines, at the same
moment or one after another, against lines no other SM reads.

The spec's L2 rate (`h200-measured`, 13.87 TB/s) is the best of probe.py's chunked reads, whose
CTAs read eight streams, each line by 66 CTAs at once (4 an SM); ld.global.cg reads of distinct
lines reach 6.9-7.0 TB/s (probe.json), and 132 CTAs copying tiles of their own out of the L2
by cp.async 5.9-6.6 TB/s (tile_copy.json). Nsight Compute saw the Triton forward's SMs receive
more bytes from the crossbar than the L2's slices served (data/impl/triton_scaling_ncu.csv:
7.8 against 6.4 TB/s for its 64x64 tiles at d = 128). This probe separates the cases: every
CTA (256 threads, ``per_sm`` of them on each SM, held there by their shared memory) copies a
32 KiB chunk with 16-byte ``cp.async.cg``, waits, meets the others at a barrier and goes on,
``ITERS`` times. The SMs are grouped by %smid, k to a group; a group's SMs read one stream of
k chunks (the CTAs of one SM read streams of their own, by their order of arrival on it):
``at_once``, every SM of a group reads chunk ``it mod k`` at iteration ``it`` (the same lines
together); ``staggered``, SM m of a group reads chunk ``(it + m) mod k`` (the same lines, never
together); ``same_sm`` (k = 1), the CTAs of one SM read one stream together, as two of each
SM's four CTAs of the chunked probe may have. Every case reads at most 132 x ``per_sm`` x 32
KiB of the L2 (16.5 MiB), brought in by a launch before the timed ones. With ``--ncu`` it
launches each case twice and times nothing, for Nsight Compute to read the L2's slices'
bytes and the SMs' (data/gpu/runs/l2_share_run.sh).

    python data/gpu/probe/l2_share.py --out DIR [--ncu]

Writes DIR/l2_share.json: provenance and per case (per_sm, k, mode) the event-timed
milliseconds of its launches (``benchmarks.gpu_timing.time_events``: median, min, max) and the
bytes they deliver to the SMs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.gpu_measure import provenance
from benchmarks.gpu_timing import time_events, timed

CHUNK = 32 << 10
THREADS = 256
ITERS = 64
SMS = 132
SRC = r"""
typedef unsigned int u32;

extern "C" __global__ void __launch_bounds__(256)
    l2_share(const char* __restrict__ src, u32 k, u32 per_sm, u32 staggered, u32 same_sm,
             u32* arrivals, u32* placed) {
    extern __shared__ __align__(128) char buf[];
    __shared__ u32 slot;
    u32 sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    if (threadIdx.x == 0) {
        // each launch puts per_sm CTAs on every SM: the count of arrivals, modulo per_sm, is
        // this CTA's place on its SM
        slot = atomicAdd(&arrivals[sm], 1u) % per_sm;
        placed[blockIdx.x] = sm;
    }
    __syncthreads();
    const u32 group = sm / k, member = sm % k;
    const char* stream = src + (u64_t)(group * per_sm + (same_sm ? 0u : slot)) * k * CHUNK;
    const u32 s = (u32)__cvta_generic_to_shared(buf);
    u32 acc = 0;
    for (u32 it = 0; it < ITERS; ++it) {
        const char* q = stream + (u64_t)((it + (staggered ? member : 0u)) % k) * CHUNK;
        for (u32 off = 16u * threadIdx.x; off < CHUNK; off += 16u * blockDim.x)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;"
                         ::"r"(s + off), "l"(q + off) : "memory");
        asm volatile("cp.async.commit_group;" ::: "memory");
        asm volatile("cp.async.wait_group 0;" ::: "memory");
        __syncthreads();
        acc += (u32)buf[(16u * threadIdx.x) % CHUNK];
        __syncthreads();
    }
    if (acc == 0xFFFFFFFFu) placed[0] = acc;  // keeps the reads
}
"""
SRC = (
    SRC.replace("u64_t", "unsigned long long")
    .replace("CHUNK", str(CHUNK))
    .replace("ITERS", str(ITERS))
)
PER_SM = (1, 2, 4)
SHARED_BY = (1, 2, 4, 11, 33, 66, 132)  # SMs to a group (divisors of 132)
MODES = ("at_once", "staggered", "same_sm")
REPS = 15


def cases() -> list[tuple[int, int, str]]:
    """(per_sm, k, mode): with one SM to a group only its own CTAs can share lines
    (``same_sm``, with two or more of them); with more, the SMs share them at once or in turn."""
    out = []
    for p in PER_SM:
        for k in SHARED_BY:
            modes = MODES[:2] if k > 1 else ("at_once", "same_sm") if p > 1 else ("at_once",)
            out += [(p, k, m) for m in modes]
    return out


def run(ncu: bool) -> dict:
    import cupy
    import numpy as np

    kern = cupy.RawKernel(SRC, "l2_share")
    kern.max_dynamic_shared_size_bytes = 200 << 10
    src = cupy.ones((SMS * max(PER_SM) * CHUNK) // 4, cupy.uint32).view(cupy.uint8)
    arrivals = cupy.zeros(1024, cupy.uint32)
    rows = []
    for per_sm, k, mode in cases():
        ctas = SMS * per_sm
        # shared memory that lets per_sm CTAs on an SM and no more (228 KiB an SM, 1 KiB of it
        # reserved a CTA)
        smem = (228 << 10) // per_sm - (2 << 10) if per_sm > 1 else 200 << 10
        placed = cupy.zeros(ctas, cupy.uint32)
        args = (src, np.uint32(k), np.uint32(per_sm), np.uint32(mode == "staggered"),
                np.uint32(mode == "same_sm"), arrivals, placed)  # fmt: skip

        def launch(kern=kern, ctas=ctas, args=args, smem=smem):
            kern((ctas,), (THREADS,), args, shared_mem=smem)

        if ncu:
            launch()  # brings the case's lines into the L2
            launch()
            cupy.cuda.runtime.deviceSynchronize()
            continue
        # the warm-up launches bring the case's lines into the L2
        t = time_events(lambda i, ev, launch=launch: timed(ev, launch), 1, REPS)
        per = np.bincount(placed.get(), minlength=SMS)
        nbytes = ctas * ITERS * CHUNK
        rows.append({
            "per_sm": per_sm, "k": k, "mode": mode, "ctas": ctas, "chunk_bytes": CHUNK,
            "iters": ITERS, **{x: t[x] for x in ("median_ms", "min_ms", "max_ms", "reps")},
            "delivered_bytes": nbytes, "tb_per_s": nbytes / (t["median_ms"] * 1e-3) / 1e12,
            "ctas_per_sm_seen": [int(per.min()), int(per.max())],
        })  # fmt: skip
        r = rows[-1]
        print(f"{per_sm}/SM, {k:3d} SMs a stream, {mode:9s}: {r['tb_per_s']:.2f} TB/s "
              f"(median of {REPS}; CTAs an SM {r['ctas_per_sm_seen']})", flush=True)  # fmt: skip
    return {"chunk_bytes": CHUNK, "threads": THREADS, "iters": ITERS, "rows": rows}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--ncu", action="store_true", help="launch each case twice, time nothing")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"provenance": provenance(), **run(args.ncu)}
    if not args.ncu:
        (out / "l2_share.json").write_text(json.dumps(doc))


if __name__ == "__main__":
    main()
