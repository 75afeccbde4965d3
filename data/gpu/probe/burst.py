"""How the H200 serves many SMs asking for a tile at once: first come, first served, or
shared?

The replay's L2 and HBM are servers that take whole requests in order (simulator/_engine.py):
when every SM asks for a 64 KiB tile at the same moment, the first SM's tile arrives after
1/132 of the burst and the last one's at its end. A memory system that interleaves the SMs'
lines instead finishes every tile near the end. The Hopper forward's CTAs, which start
together and load their first tiles together, cost 3.4-4.8 thousand cycles more a CTA on the
GPU than in the replay (hopper_cycles.py --cta-cost, --skeleton); this is the question under
that.

One CTA an SM (its dynamic shared memory admits no second), on n SMs; thread 0 of each CTA
reads %globaltimer and clock64, copies ``bytes`` of global memory into shared memory (``tma``:
one ``cp.async.bulk`` of 16 KiB after another, all in flight at once, waited on an mbarrier;
``ldg``: its 256 threads each loading 16 B at a time, 8 in flight, into registers then shared
memory) and reads the two clocks again once all of it has arrived. Each launch reads a region
of a 4 GiB buffer no earlier launch read (from HBM), or the same 8 MiB region every time
(from L2, after a first launch that is not kept). Per CTA: its start (ns from the launch's
first), its %smid, and the cycles its copy took.

    python data/gpu/probe/burst.py --out DIR [--stores | --shared]

Writes DIR/burst.json (provenance; per case the per-CTA records as columns). ``--stores``:
instead each CTA copies shared memory out to global memory by bulk copies (the Hopper
forward's output tile), waiting until the copy has read it or until it is written:
DIR/burst_stores.json. ``--shared``: every CTA copies the same tile (SHARED_CASES), a region
no earlier launch read or the same L2-resident one: whether CTAs that ask for a line whose
fill is in flight wait for it (docs/model.md, "L2": pending fills): DIR/burst_shared.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.gpu_measure import provenance

SRC = r"""
typedef unsigned int u32;
typedef unsigned long long u64;
#define CHUNK 16384u

extern "C" __global__ void __launch_bounds__(256, 1)
    burst(const uint4* __restrict__ src, u64 stride_vec, u32 bytes, int tma, u64* rec,
          uint4* dst, int store) {
    extern __shared__ __align__(128) uint4 buf[];
    __shared__ __align__(8) u64 bar;
    const u32 b = (u32)__cvta_generic_to_shared(&bar);
    const u32 s = (u32)__cvta_generic_to_shared(buf);
    const uint4* p = src + blockIdx.x * stride_vec;
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    u64 g0 = 0, c0 = 0;
    if (threadIdx.x == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g0));
        c0 = clock64();
    }
    if (store) {  // shared memory out to global by bulk copies; 1: until read, 2: until written
        if (threadIdx.x == 0) {
            for (u32 off = 0; off < bytes; off += CHUNK)
                asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                             ::"l"((char*)(dst + blockIdx.x * stride_vec) + off), "r"(s + off),
                             "r"(CHUNK) : "memory");
            asm volatile("cp.async.bulk.commit_group;" ::: "memory");
            if (store == 1)
                asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
            else
                asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
        }
    } else if (tma) {
        if (threadIdx.x == 0) {
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                         ::"r"(b), "r"(bytes) : "memory");
            const u32 chunk = bytes < CHUNK ? bytes : CHUNK;  // tiles under 16 KiB: one copy
            for (u32 off = 0; off < bytes; off += chunk)
                asm volatile(
                    "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                    " [%0], [%1], %2, [%3];"
                    ::"r"(s + off), "l"((const char*)p + off), "r"(chunk), "r"(b) : "memory");
            asm volatile(
                "{\n.reg .pred P;\nW: mbarrier.try_wait.parity.shared::cta.b64 P, [%0], 0;\n"
                "@!P bra W;\n}\n" ::"r"(b) : "memory");
        }
    } else {
        const u32 n = bytes / 16u;
        for (u32 i = threadIdx.x; i < n; i += 8u * blockDim.x) {
            uint4 v[8];
#pragma unroll
            for (int u = 0; u < 8; ++u)
                if (i + u * blockDim.x < n) v[u] = __ldcg(p + i + u * blockDim.x);
#pragma unroll
            for (int u = 0; u < 8; ++u)
                if (i + u * blockDim.x < n) buf[i + u * blockDim.x] = v[u];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        const u64 c1 = clock64();
        u64 g1;
        u32 id;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g1));
        asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
        u64* r = rec + 4ull * blockIdx.x;
        r[0] = id; r[1] = g0; r[2] = g1; r[3] = c1 - c0;
    }
}
"""
# (bytes a CTA, CTAs): a Q tile (16 KiB at d = 64), Q with K and V (48 KiB at d = 64, 96 at
# d = 128) and most of the shared memory, on one SM alone and on all 132
CASES = [(b, n) for b in (16 << 10, 48 << 10, 96 << 10, 192 << 10) for n in (1, 132)]
# --stores: a CTA's output tile (16, 32 or 64 KiB: O at d = 64 or 128, 128 or 256 rows) out to
# a region of HBM no earlier launch wrote, waited until the copy has read it (as the Hopper
# forward's epilogue waits) or until it is written
STORE_CASES = [(b, n) for b in (16 << 10, 32 << 10, 64 << 10) for n in (1, 132)]
# --shared: a backward's Q block (8 KiB at d = 64) and a 16 KiB tile, read by n CTAs at once
SHARED_CASES = [(b, n) for b in (8 << 10, 16 << 10) for n in (1, 8, 32, 64, 132)]
BIG = 4 << 30  # bytes of the buffer fresh regions come from (more than 60 L2s)
L2_REGION = 8 << 20
REPS = 5


def run(stores: bool = False, shared: bool = False) -> dict:
    import cupy
    import numpy as np

    kern = cupy.RawKernel(SRC, "burst")
    kern.max_dynamic_shared_size_bytes = max(b for b, _ in CASES)
    src = cupy.ones(BIG // 4, cupy.uint32).view(cupy.uint8)  # passed as a pointer at base
    rec = cupy.zeros(4 * 132, cupy.uint64)
    if stores:
        return {"store_cases": STORE_CASES, "reps": REPS, "rows": _stores(kern, src, rec)}
    rows, at = [], 0
    for where in ("hbm", "l2"):
        for tma in (1, 0):
            for nbytes, ctas in SHARED_CASES if shared else CASES:
                stride = 0 if shared else nbytes // 16  # one tile, or the CTAs' side by side
                region = nbytes if shared else ctas * nbytes
                for rep in range(REPS + 1):
                    if where == "hbm":
                        if at + region > BIG:
                            at = 0  # wrapped after far more than the L2 holds
                        base, at = at, at + region
                    else:
                        base = 0
                    kern(
                        (ctas,), (256,),
                        (src[base:], np.uint64(stride), np.uint32(nbytes),
                         np.int32(tma), rec, src, np.int32(0)),
                        shared_mem=nbytes,
                    )  # fmt: skip
                    cupy.cuda.runtime.deviceSynchronize()
                    if where == "l2" and rep == 0:
                        continue  # the first launch brings the region into the L2
                    r = rec.get()[: 4 * ctas].reshape(ctas, 4).astype("int64")
                    g0 = int(r[:, 1].min())
                    rows.append({
                        "where": where, "copy": "tma" if tma else "ldg", "bytes": nbytes,
                        "ctas": ctas, "rep": rep, "smid": r[:, 0].tolist(),
                        "start_ns": (r[:, 1] - g0).tolist(), "end_ns": (r[:, 2] - g0).tolist(),
                        "cycles": r[:, 3].tolist(),
                    })  # fmt: skip
                c = np.array(rows[-1]["cycles"])
                print(f"{where} {'tma' if tma else 'ldg'} {nbytes >> 10:4d} KiB x {ctas:3d}: "
                      f"cycles min {c.min()} median {int(np.median(c))} max {c.max()}",
                      flush=True)  # fmt: skip
    return {"shared": shared, "cases": SHARED_CASES if shared else CASES, "reps": REPS,
            "rows": rows}  # fmt: skip


def _stores(kern, buf, rec) -> list[dict]:
    """STORE_CASES, each waited both ways: per CTA its %smid, start, end and cycles."""
    import cupy
    import numpy as np

    rows, at = [], 0
    for wait in (1, 2):
        for nbytes, ctas in STORE_CASES:
            for rep in range(REPS + 1):
                if at + ctas * nbytes > BIG:
                    at = 0
                base, at = at, at + ctas * nbytes
                kern(
                    (ctas,), (256,),
                    (buf, np.uint64(nbytes // 16), np.uint32(nbytes), np.int32(0), rec,
                     buf[base:], np.int32(wait)),
                    shared_mem=nbytes,
                )  # fmt: skip
                cupy.cuda.runtime.deviceSynchronize()
                if rep == 0:
                    continue  # the first launch warms up
                r = rec.get()[: 4 * ctas].reshape(ctas, 4).astype("int64")
                g0 = int(r[:, 1].min())
                rows.append({
                    "wait": "read" if wait == 1 else "written", "bytes": nbytes, "ctas": ctas,
                    "rep": rep, "smid": r[:, 0].tolist(), "start_ns": (r[:, 1] - g0).tolist(),
                    "end_ns": (r[:, 2] - g0).tolist(), "cycles": r[:, 3].tolist(),
                })  # fmt: skip
            c, until = np.array(rows[-1]["cycles"]), rows[-1]["wait"]
            print(f"store until {until} {nbytes >> 10:3d} KiB x {ctas:3d}: cycles min {c.min()} "
                  f"median {int(np.median(c))} max {c.max()}", flush=True)  # fmt: skip
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    kind = ap.add_mutually_exclusive_group()
    kind.add_argument("--stores", action="store_true", help="STORE_CASES: DIR/burst_stores.json")
    kind.add_argument("--shared", action="store_true",
                      help="SHARED_CASES, one tile for all: DIR/burst_shared.json")  # fmt: skip
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prov = provenance()
    doc = {"provenance": prov, **run(args.stores, args.shared)}
    name = "burst_stores.json" if args.stores else "burst.json"
    name = "burst_shared.json" if args.shared else name
    (out / name).write_text(json.dumps(doc))


if __name__ == "__main__":
    main()
