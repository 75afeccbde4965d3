"""One SM's bulk copy while the other SMs stream: how long a TMA copy takes under load.

The replay prices a bulk copy (TMA) at the line one SM copying alone gives (burst.py,
``bulk_load_*``: 589 cycles + bytes / 97.4 B a cycle from the L2, 1,099 + bytes / 97.4 from
HBM). In the Hopper forward's later rounds a CTA's Q tile takes 0.9-2.2 us on the GPU, about
twice a lone copy (hopper_rounds.py), while every other SM copies its K and V tiles. This
measures the copy's time against the load beside it.

One launch of 1 + n CTAs, one an SM (their dynamic shared memory admits no second). CTA 0 is
the probe: thread 0 waits WARM_NS on the global timer (the others' streams reach their
rate), then makes COPIES copies of ``bytes`` into shared memory one after another, each by
``cp.async.bulk`` chunks of 16 KiB on one mbarrier and waited on it, from a region no earlier
copy read (``hbm``) or the same region every time (``l2``: the first copy brings it in), and
records each copy's start and end on the global timer and its cycles. CTAs 1..n stream
16-byte loads (``ld.global.cg``, 8 in flight a thread, 256 threads) until the probe is done:
from a window of their own that the L2 holds (``l2``: 128 KiB each) or from fresh HBM
(``hbm``: windows of 16 MiB, each launch reading on from where the last stopped), and record
the bytes they read and for how long.

    python data/gpu/probe/loaded_copy.py --out DIR        # DIR/loaded_copy.json
    python data/gpu/probe/loaded_copy.py --summary FILE   # per case: copy time, background

Per case (bytes, where the probe copies from, the background's kind and CTAs) REPS launches
after one that is not kept.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

SRC = r"""
typedef unsigned int u32;
typedef unsigned long long u64;
#define CHUNK 16384u

__device__ __forceinline__ u64 now_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

extern "C" __global__ void __launch_bounds__(256, 1)
    loaded(const uint4* __restrict__ src, u64 copy_stride_vec, u32 bytes, int copies,
           u64 warm_ns, const uint4* __restrict__ bg, u64 bg_window_vec, u64 bg_offset_vec,
           u32* flag, u64* rec, u64* bg_rec, uint4* sink) {
    extern __shared__ __align__(128) uint4 buf[];
    __shared__ __align__(8) u64 bar;
    __shared__ int stop;
    if (blockIdx.x == 0) {  // the probe
        if (threadIdx.x != 0) return;
        const u32 b = (u32)__cvta_generic_to_shared(&bar);
        const u32 s = (u32)__cvta_generic_to_shared(buf);
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(b) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        const u64 t_start = now_ns();
        while (now_ns() - t_start < warm_ns) { __nanosleep(100); }
        const u32 chunk = bytes < CHUNK ? bytes : CHUNK;
        for (int k = 0; k < copies; ++k) {
            const char* p = (const char*)(src + (u64)k * copy_stride_vec);
            const u64 g0 = now_ns(), c0 = clock64();
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                         ::"r"(b), "r"(bytes) : "memory");
            for (u32 off = 0; off < bytes; off += chunk)
                asm volatile(
                    "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                    " [%0], [%1], %2, [%3];"
                    ::"r"(s + off), "l"(p + off), "r"(chunk), "r"(b) : "memory");
            asm volatile(
                "{\n.reg .pred P;\nW: mbarrier.try_wait.parity.shared::cta.b64 P, [%0], %1;\n"
                "@!P bra W;\n}\n" ::"r"(b), "r"((u32)(k & 1)) : "memory");
            const u64 c1 = clock64(), g1 = now_ns();
            u64* r = rec + 3ull * k;
            r[0] = g0; r[1] = g1; r[2] = c1 - c0;
        }
        atomicExch(flag, 1u);
        return;
    }
    // the background: 16-byte loads, 8 in flight a thread, until the probe is done
    const uint4* w = bg + (u64)(blockIdx.x - 1) * bg_window_vec;
    const u64 mask = bg_window_vec - 1;  // windows are powers of two
    const u64 g0 = now_ns();
    u64 i = bg_offset_vec + threadIdx.x, rounds = 0;
    uint4 acc = make_uint4(0, 0, 0, 0);
    if (threadIdx.x == 0) stop = 0;
    __syncthreads();
    while (true) {
        uint4 v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) v[u] = __ldcg(w + ((i + u * 256u) & mask));
#pragma unroll
        for (int u = 0; u < 8; ++u) { acc.x ^= v[u].x; acc.y ^= v[u].y; }
        i += 8u * 256u;
        ++rounds;
        if (threadIdx.x == 0) stop = atomicAdd(flag, 0u);
        __syncthreads();
        if (stop) break;
        __syncthreads();
    }
    if (acc.x == 0x12345678u && acc.y == 0x9abcdef0u) sink[threadIdx.x] = acc;
    if (threadIdx.x == 0) {
        u64* r = bg_rec + 3ull * (blockIdx.x - 1);
        r[0] = g0; r[1] = now_ns(); r[2] = rounds * 8ull * 256ull * 16ull;
    }
}
"""
COPIES = 8
WARM_NS = 10_000
REPS = 3
SMEM = 120 << 10  # over half an SM's shared memory: one CTA an SM
BIG = 4 << 30  # the buffer (more than 60 L2s)
L2_WINDOW = 128 << 10  # a background CTA's L2-resident window
HBM_WINDOW = 16 << 20  # a background CTA's HBM window (a power of two, as L2_WINDOW)
HBM_STEP = 2 << 20  # how far each launch's background reads start past the last one's
# where the regions lie in the buffer: the probe's fresh copies in its first GiB (86 MB in
# all), the background's L2 windows after it (131 x 128 KiB), its HBM windows after those
# (131 x 16 MiB)
L2_BASE = 1 << 30
HBM_BASE = L2_BASE + (64 << 20)
# (bytes a copy, where the probe copies from, background kind, background CTAs): a Q tile at
# d = 64 and Q with K and V at d = 128, alone and beside 33, 66 and 131 streaming SMs
CASES = [(nbytes, where, "none", 0) for nbytes in (16 << 10, 96 << 10) for where in ("hbm", "l2")]
CASES += [
    (nbytes, where, kind, n)
    for nbytes in (16 << 10, 96 << 10)
    for where in ("hbm", "l2")
    for kind in ("l2", "hbm")
    for n in (33, 66, 131)
]


def run() -> list[dict]:
    import cupy
    import numpy as np

    kern = cupy.RawKernel(SRC, "loaded")
    kern.max_dynamic_shared_size_bytes = SMEM
    buf = cupy.ones(BIG // 4, cupy.uint32).view(cupy.uint8)
    flag = cupy.zeros(1, cupy.uint32)
    rec = cupy.zeros(3 * COPIES, cupy.uint64)
    bg_rec = cupy.zeros(3 * 131, cupy.uint64)
    sink = cupy.zeros(256 * 4, cupy.uint32)
    rows, at, launch = [], 0, 0
    for nbytes, where, kind, n in CASES:
        window = L2_WINDOW if kind == "l2" else HBM_WINDOW
        for rep in range(REPS + 1):
            stride = nbytes // 16 if where == "hbm" else 0
            span = nbytes * COPIES if where == "hbm" else nbytes
            if at + span > L2_BASE:
                at = 0
            base, at = at, at + span
            bg_base = L2_BASE if kind == "l2" else HBM_BASE
            offset = (launch * HBM_STEP) % window // 16 if kind == "hbm" else 0
            launch += 1
            flag[:] = 0
            kern(
                (1 + n,), (256,),
                (buf[base:], np.uint64(stride), np.uint32(nbytes), np.int32(COPIES),
                 np.uint64(WARM_NS), buf[bg_base:], np.uint64(window // 16),
                 np.uint64(offset), flag, rec, bg_rec, sink),
                shared_mem=SMEM,
            )  # fmt: skip
            cupy.cuda.runtime.deviceSynchronize()
            if rep == 0:
                continue  # warms up (and brings the L2 windows in)
            r = rec.get().reshape(COPIES, 3).astype("int64")
            b = bg_rec.get()[: 3 * n].reshape(n, 3).astype("int64")
            rows.append({
                "bytes": nbytes, "where": where, "background": kind, "bg_ctas": n, "rep": rep,
                "copy_ns": (r[:, 1] - r[:, 0]).tolist(), "copy_cycles": r[:, 2].tolist(),
                "copy_start_ns": (r[:, 0] - r[0, 0]).tolist(),
                "bg_bytes": b[:, 2].tolist(), "bg_ns": (b[:, 1] - b[:, 0]).tolist(),
            })  # fmt: skip
        print(json.dumps(summary_row(rows[-REPS:])), flush=True)
    return rows


def summary_row(reps: list[dict]) -> dict:
    """One case over its launches: the copies' median time in cycles and ns (the l2 probe's
    first copy of each launch, which brings its region in, left out), and the background's
    read rate (its bytes over its CTAs' median time, TB/s)."""
    import numpy as np

    first = 1 if reps[0]["where"] == "l2" else 0
    cycles = np.concatenate([r["copy_cycles"][first:] for r in reps])
    ns = np.concatenate([r["copy_ns"][first:] for r in reps])
    rate = [sum(r["bg_bytes"]) / np.median(r["bg_ns"]) / 1e3 for r in reps if r["bg_ctas"]]
    return {
        "bytes": reps[0]["bytes"], "where": reps[0]["where"], "background": reps[0]["background"],
        "bg_ctas": reps[0]["bg_ctas"], "copies": len(cycles),
        "cycles_median": float(np.median(cycles)), "cycles_p10": float(np.percentile(cycles, 10)),
        "cycles_p90": float(np.percentile(cycles, 90)), "ns_median": float(np.median(ns)),
        "bg_tb_per_s": float(np.median(rate)) if rate else 0.0,
    }  # fmt: skip


def summary(doc: dict) -> list[dict]:
    """Every case of a record, as ``summary_row``."""
    cases: dict[tuple, list[dict]] = {}
    for r in doc["rows"]:
        cases.setdefault((r["bytes"], r["where"], r["background"], r["bg_ctas"]), []).append(r)
    return [summary_row(reps) for reps in cases.values()]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="run on the GPU; write OUT/loaded_copy.json")
    ap.add_argument("--summary", type=Path, help="print each case of this record")
    args = ap.parse_args(argv)
    if args.summary:
        for row in summary(json.loads(args.summary.read_text())):
            print(json.dumps(row))
        return
    if not args.out:
        ap.error("--out DIR (measure) or --summary FILE")
    from benchmarks.gpu_measure import provenance

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"provenance": provenance(), "copies": COPIES, "warm_ns": WARM_NS, "reps": REPS}
    doc["rows"] = run()
    (out / "loaded_copy.json").write_text(json.dumps(doc))


if __name__ == "__main__":
    main()
