"""Microbenchmarks of the H200 for the simulator cross-check (analysis/validation/crosscheck.py).

Each probe measures one hardware rate or latency that the simulator's model uses, with the same
toolchain as the project's kernels (CuPy RawModule, NVRTC) and the same timing method as
benchmarks/gpu_measure.py (CUDA events, median). It is the provenance of
data/gpu/probe/probe.json; docs/validation.md says which model constant each number feeds.

Modes
-----
time (default)
    mma.sync m16n8k16 bf16->fp32 throughput against warps per SM; ex2.approx (MUFU), FFMA, FMNMX
    and FADD throughput; a softmax-like mix (max, fma, ex2, add per element); L2-resident and
    HBM read bandwidth; vector fp32 reductions (red.global.add.v2.f32) into L2; latency-bound
    chunked reads (load a chunk, wait, repeat: bandwidth against chunk size and CTAs per SM);
    pointer-chase latency of an L2 hit and of a DRAM access; CuPy launch overhead as
    gpu_measure.time_events sees it (empty kernel, spin kernels of known length, 1 and 3
    launches). Writes probe.json to --out.
clocks
    The SM clock (nvidia-smi, every 20 ms) while gpu_measure's timing loop runs short and long
    flash kernels; with --once, one launch of each for Nsight Compute's clock counter.
harness
    benchmarks/gpu_measure.py's launch path (CompiledSchedule.launch between CUDA events) on
    shapes too small to keep the GPU busy: the floor of its per-kernel times.
ncu_write
    Streaming writes of W MB (and W MB written, then R MB read) to run under Nsight Compute:
    how many dirty bytes the L2 still holds when a kernel ends.

    python data/gpu/probe/probe.py --out DIR
    ncu --clock-control none --metrics dram__bytes_read.sum,dram__bytes_write.sum,... \
        python data/gpu/probe/probe.py --mode ncu_write --out DIR
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

SRC = r"""
typedef unsigned int u32;
typedef unsigned long long u64;
#ifndef ILP
#define ILP 1
#endif
#ifndef OP
#define OP 0
#endif
#ifndef CHUNK
#define CHUNK 2048
#endif

__device__ __forceinline__ uint4 u4(u32 a, u32 b, u32 c, u32 d) {
    uint4 v;  // (make_uint4 would need a CUDA header under NVRTC)
    v.x = a; v.y = b; v.z = c; v.w = d;
    return v;
}

__device__ __forceinline__ u32 hash(u32 x) {
    x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16; return x;
}
// a bf16x2 word of two values in [-1, 1): exponent 0x3f or below, random mantissa and sign
__device__ __forceinline__ u32 rnd_bf16x2(u32 s) {
    u32 h = hash(s);
    return (h & 0x807f807fU) | 0x3e003e00U;
}

extern "C" __global__ void mma_tp(float* out, long long* cyc, int iters) {
    const u32 s = blockIdx.x * blockDim.x + threadIdx.x;
    u32 a0 = rnd_bf16x2(s), a1 = rnd_bf16x2(s + 1u), a2 = rnd_bf16x2(s + 2u),
        a3 = rnd_bf16x2(s + 3u), b0 = rnd_bf16x2(s + 4u), b1 = rnd_bf16x2(s + 5u);
    float c[ILP][4];
#pragma unroll
    for (int k = 0; k < ILP; ++k) c[k][0] = c[k][1] = c[k][2] = c[k][3] = 0.f;
    __syncthreads();
    long long t0 = clock64();
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int k = 0; k < ILP; ++k)
            asm volatile(
                "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                : "+f"(c[k][0]), "+f"(c[k][1]), "+f"(c[k][2]), "+f"(c[k][3])
                : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
    __syncthreads();
    long long t1 = clock64();
    float acc = 0.f;
#pragma unroll
    for (int k = 0; k < ILP; ++k) acc += c[k][0] + c[k][1] + c[k][2] + c[k][3];
    if (acc == 1.2345e-30f) out[s] = acc;
    if (threadIdx.x == 0) cyc[blockIdx.x] = t1 - t0;
}

// OP 0: ex2.approx (MUFU), 1: fma, 2: max, 3: add, 4: softmax mix (max, fma, ex2, add)
extern "C" __global__ void alu_tp(float* out, long long* cyc, int iters) {
    const u32 s = blockIdx.x * blockDim.x + threadIdx.x;
    float x[ILP], y[ILP];
#pragma unroll
    for (int k = 0; k < ILP; ++k) {
        x[k] = 0.25f + (hash(s * ILP + k) & 255) * (1.f / 512.f);
        y[k] = 0.f;
    }
    __syncthreads();
    long long t0 = clock64();
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int k = 0; k < ILP; ++k) {
#if OP == 0
            asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(x[k]) : "f"(-x[k]));
#elif OP == 1
            asm volatile("fma.rn.f32 %0, %0, 0f3F7FFFFF, 0f3A800000;" : "+f"(x[k]));
#elif OP == 2
            asm volatile("max.f32 %0, %0, %1;" : "+f"(x[k]) : "f"(y[k]));
#elif OP == 3
            asm volatile("add.f32 %0, %0, 0f3A800000;" : "+f"(x[k]));
#else
            float t;
            asm volatile("max.f32 %0, %0, %1;" : "+f"(y[k]) : "f"(x[k]));
            asm volatile("fma.rn.f32 %0, %1, 0f3FB8AA3B, %2;" : "=f"(t) : "f"(x[k]), "f"(-y[k]));
            asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(t) : "f"(t));
            asm volatile("add.f32 %0, %0, %1;" : "+f"(x[k]) : "f"(t));
            x[k] *= 0.5f;
#endif
        }
    }
    __syncthreads();
    long long t1 = clock64();
    float acc = 0.f;
#pragma unroll
    for (int k = 0; k < ILP; ++k) acc += x[k] + y[k];
    if (acc == 1.2345e-30f) out[s] = acc;
    if (threadIdx.x == 0) cyc[blockIdx.x] = t1 - t0;
}

// every thread reads 16-byte words, grid-stride, through L2 only (ld.global.cg)
extern "C" __global__ void read_bw(const uint4* p, long long n16, int reps, uint4* out) {
    uint4 acc = u4(0, 0, 0, 0);
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (int r = 0; r < reps; ++r)
        for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n16;
             i += stride) {
            uint4 v;
            asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];"
                         : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p + i));
            acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
        }
    if (acc.x == 0x9e3779b9U && acc.y == 1U) out[0] = acc;
}

extern "C" __global__ void write_bw(uint4* p, long long n16) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n16; i += stride)
        p[i] = u4((u32)i, 1u, 2u, 3u);
}

// W bytes written, then R bytes of another buffer read, by every thread in turn
extern "C" __global__ void write_then_read(uint4* w, long long w16, const uint4* r,
                                           long long r16, uint4* out) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    for (long long i = t; i < w16; i += stride) w[i] = u4((u32)i, 1u, 2u, 3u);
    uint4 acc = u4(0, 0, 0, 0);
    for (long long i = t; i < r16; i += stride) {
        uint4 v;
        asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(r + i));
        acc.x ^= v.x;
    }
    if (acc.x == 0x9e3779b9U) out[0] = acc;
}

// fp32 vector reductions at L2: every thread adds (1, 1) to 8-byte words, grid-stride
extern "C" __global__ void red_bw(float* p, long long n8, int reps) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (int r = 0; r < reps; ++r)
        for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n8; i += stride)
            asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(p + 2 * i), "f"(1.f),
                         "f"(1.f) : "memory");
}

__device__ __forceinline__ u32 smem_addr(const void* p) {
    return (u32)__cvta_generic_to_shared(p);
}

// latency-bound streaming, as the softmax and bwd kernels: each CTA loads CHUNK bytes with
// 16-byte cp.async into shared memory, waits for them, syncs, and goes on to its next chunk
extern "C" __global__ void chunked(const char* src, long long region, int iters, int* out) {
    extern __shared__ __align__(16) char buf[];
    const long long base = (long long)blockIdx.x * iters * CHUNK;
    int acc = 0;
    for (int it = 0; it < iters; ++it) {
        const long long off = (base + (long long)it * CHUNK) % region;
        for (int c = threadIdx.x * 16; c < CHUNK; c += blockDim.x * 16)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr(buf + c)),
                         "l"(src + off + c) : "memory");
        asm volatile("cp.async.commit_group;\n" ::: "memory");
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
        __syncthreads();
        acc += buf[(threadIdx.x * 16) % CHUNK];
        __syncthreads();
    }
    if (acc == 123456789) out[0] = acc;
}

// one thread follows a chain of indices: cycles per dependent load
extern "C" __global__ void chase(const u32* next, int steps, long long* cyc, u32* out) {
    u32 i = 0;
    for (int s = 0; s < 64; ++s) i = next[i];  // warm the TLB and the first lines
    long long t0 = clock64();
    for (int s = 0; s < steps; ++s) {
        asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(i) : "l"(next + i));
    }
    long long t1 = clock64();
    out[0] = i;
    cyc[0] = t1 - t0;
}

extern "C" __global__ void empty(float* a, float* b, float* c, float* d, float* e, int n,
                                 int m, int k, float s, int f) {}

// thread 0 of every CTA spins until NS nanoseconds of %globaltimer have passed
extern "C" __global__ void spin(long long ns) {
    if (threadIdx.x) return;
    u64 t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while ((long long)(t - t0) < ns);
}
"""

SMS = 132
L2_BYTES = 62_914_560


def module(**defs):
    import cupy

    opts = ("-std=c++17", *(f"-D{k}={v}" for k, v in sorted(defs.items())))
    return cupy.RawModule(code=SRC, options=opts)


def events_ms(kernel, grid, block, args, shared_mem=0, reps=20, warmup=3):
    """Median and min milliseconds of event-timed launches of ``kernel``."""
    import cupy

    def fn():
        kernel((grid,), (block,), args, shared_mem=shared_mem)

    for _ in range(warmup):
        fn()
    cupy.cuda.get_current_stream().synchronize()
    out = []
    for _ in range(reps):
        a, b = cupy.cuda.Event(), cupy.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(cupy.cuda.get_elapsed_time(a, b))
    return statistics.median(out), min(out)


def probe_mma(res):
    import cupy

    out = cupy.zeros(1 << 20, cupy.float32)
    rows = []
    for ilp in (1, 4, 8):
        mod = module(ILP=ilp, OP=0)
        fn = mod.get_function("mma_tp")
        configs = [(1, 1)] if ilp == 1 else []
        configs += [(4, 1), (8, 1), (4, 2), (16, 1), (8, 2), (4, 4), (32, 1)]
        for warps, ctas_per_sm in configs:
            ctas = SMS * ctas_per_sm if (warps, ctas_per_sm) != (1, 1) else 1
            iters = 4096 if ilp > 1 else 8192
            cyc = cupy.zeros(ctas, cupy.int64)
            med, mn = events_ms(fn, ctas, warps * 32, (out, cyc, np.int32(iters)))
            flops = ctas * warps * iters * ilp * 4096
            c = cyc.get()
            rows.append(
                dict(
                    ilp=ilp,
                    warps_per_cta=warps,
                    ctas_per_sm=ctas_per_sm,
                    ctas=ctas,
                    iters=iters,
                    median_ms=med,
                    min_ms=mn,
                    flops=flops,
                    flops_per_s=flops / (med * 1e-3),
                    cta_cycles_median=float(np.median(c)),
                    cta_cycles_max=int(c.max()),
                    flops_per_cycle_per_sm=flops / max(1, min(ctas, SMS)) / float(np.median(c)),
                    clock_hz_implied=float(np.median(c)) / (med * 1e-3),
                )
            )
            print("mma", rows[-1], flush=True)
    res["mma_sync_bf16"] = rows


def probe_alu(res):
    import cupy

    out = cupy.zeros(1 << 20, cupy.float32)
    names = {0: "ex2", 1: "ffma", 2: "fmax", 3: "fadd", 4: "softmax_mix"}
    rows = []
    for op, name in names.items():
        fn = module(ILP=8, OP=op).get_function("alu_tp")
        for warps, ctas_per_sm in ((8, 1), (16, 1), (32, 1)):
            ctas, iters = SMS * ctas_per_sm, 4096
            cyc = cupy.zeros(ctas, cupy.int64)
            med, mn = events_ms(fn, ctas, warps * 32, (out, cyc, np.int32(iters)))
            ops = ctas * warps * 32 * iters * 8  # per element of the mix: one of each op
            c = float(np.median(cyc.get()))
            rows.append(
                dict(
                    op=name,
                    warps_per_sm=warps * ctas_per_sm,
                    median_ms=med,
                    min_ms=mn,
                    thread_ops=ops,
                    ops_per_s=ops / (med * 1e-3),
                    ops_per_cycle_per_sm=ops / SMS / c,
                    clock_hz_implied=c / (med * 1e-3),
                )
            )
            print("alu", rows[-1], flush=True)
    res["alu"] = rows


def probe_memory(res):
    import cupy

    mod = module(ILP=1, OP=0, CHUNK=2048)
    rd, red = mod.get_function("read_bw"), mod.get_function("red_bw")
    wr = mod.get_function("write_bw")
    sink = cupy.zeros(4, cupy.uint32)
    rows = []
    for label, nbytes, reps in (
        ("l2_resident_16MB", 16 << 20, 20),
        ("l2_resident_32MB", 32 << 20, 10),
        ("hbm_4GB", 4 << 30, 1),
    ):
        buf = cupy.ones(nbytes // 4, cupy.uint32)
        n16 = np.int64(nbytes // 16)
        for ctas_per_sm in (4, 8):
            g = SMS * ctas_per_sm
            med, _ = events_ms(rd, g, 256, (buf, n16, np.int32(reps), sink))
            rows.append(
                dict(
                    kind="read",
                    buffer=label,
                    ctas=g,
                    threads=256,
                    bytes=nbytes * reps,
                    median_ms=med,
                    bytes_per_s=nbytes * reps / (med * 1e-3),
                )
            )
            print("mem", rows[-1], flush=True)
        if label == "hbm_4GB":
            med, _ = events_ms(wr, SMS * 8, 256, (buf, n16))
            rows.append(
                dict(
                    kind="write",
                    buffer=label,
                    ctas=SMS * 8,
                    threads=256,
                    bytes=nbytes,
                    median_ms=med,
                    bytes_per_s=nbytes / (med * 1e-3),
                )
            )
            print("mem", rows[-1], flush=True)
        del buf
    acc = cupy.zeros((16 << 20) // 4, cupy.float32)
    n8 = np.int64(acc.size // 2)
    for ctas_per_sm in (4, 8):
        g = SMS * ctas_per_sm
        med, _ = events_ms(red, g, 256, (acc, n8, np.int32(10)))
        rows.append(
            dict(
                kind="red.add.v2.f32",
                buffer="l2_resident_16MB",
                ctas=g,
                threads=256,
                bytes=acc.nbytes * 10,
                median_ms=med,
                bytes_per_s=acc.nbytes * 10 / (med * 1e-3),
            )
        )
        print("mem", rows[-1], flush=True)
    res["bandwidth"] = rows


def probe_chunked(res):
    import cupy

    rows = []
    big = cupy.ones((2 << 30) // 4, cupy.uint32)
    sink = cupy.zeros(4, cupy.int32)
    for chunk in (2048, 8192, 32768):
        fn = module(ILP=1, OP=0, CHUNK=chunk).get_function("chunked")
        if chunk > 48 * 1024:
            fn.max_dynamic_shared_size_bytes = chunk
        for threads in (256,):
            for ctas_per_sm in (1, 2, 4, 8):
                for region, label in ((big.nbytes, "hbm"), (16 << 20, "l2")):
                    g = SMS * ctas_per_sm
                    iters = max(8, (512 << 20) // (g * chunk)) if label == "hbm" else 64
                    args = (big, np.int64(region), np.int32(iters), sink)
                    med, _ = events_ms(fn, g, threads, args, chunk)
                    nbytes = g * iters * chunk
                    rows.append(
                        dict(
                            chunk_bytes=chunk,
                            threads=threads,
                            ctas_per_sm=ctas_per_sm,
                            source=label,
                            bytes=nbytes,
                            median_ms=med,
                            bytes_per_s=nbytes / (med * 1e-3),
                            seconds_per_chunk=med * 1e-3 / iters,
                        )
                    )
                    print("chunked", rows[-1], flush=True)
    res["chunked"] = rows


def probe_latency(res):
    import cupy

    fn = module(ILP=1, OP=0).get_function("chase")
    rows = []
    # (label, buffer bytes, stride bytes): the L2 chain is warmed first; the DRAM chain spans
    # 2112 lines 65,920 B apart (32 per 2 MB page), and 512 MB of other data is read after it is
    # built so that none of its lines is still in the L2
    for label, nbytes, stride in (("l2_hit_1MB", 1 << 20, 4224), ("dram_1GB", 1 << 30, 65920)):
        n, s = nbytes // 4, stride // 4
        steps = 2048
        k = np.arange(steps + 65, dtype=np.int64)
        pos, nxt_pos = (k * s) % n, ((k + 1) * s) % n
        nxt = cupy.zeros(n, cupy.uint32)
        nxt[cupy.asarray(pos)] = cupy.asarray(nxt_pos.astype(np.uint32))
        cyc, out = cupy.zeros(1, cupy.int64), cupy.zeros(1, cupy.uint32)
        if label.startswith("l2"):
            fn((1,), (1,), (nxt, np.int32(steps), cyc, out))
        else:
            flush = cupy.ones((512 << 20) // 4, cupy.float32)
            float(flush.sum())
            del flush
        fn((1,), (1,), (nxt, np.int32(steps), cyc, out))
        cupy.cuda.get_current_stream().synchronize()
        rows.append(
            dict(
                kind=label,
                steps=steps,
                stride_bytes=stride,
                cycles_per_load=int(cyc.get()[0]) / steps,
            )
        )
        print("lat", rows[-1], flush=True)
        del nxt
    res["latency"] = rows


def probe_launch(res):
    """CuPy launch overhead as benchmarks/gpu_measure.time_events sees it."""
    import cupy

    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from benchmarks.gpu_measure import time_events

    mod = module(ILP=1, OP=0)
    empty, spin = mod.get_function("empty"), mod.get_function("spin")
    bufs = [cupy.zeros(1024, cupy.float32) for _ in range(5)]
    rows = []
    eargs = (*bufs, np.int32(1), np.int32(2), np.int32(3), np.float32(1.0), np.int32(0))
    for n_k in (1, 3):

        def run(i, ev, n_k=n_k):
            for k in range(n_k):
                if ev is not None:
                    ev[k].record()
                empty((SMS * 4,), (256,), eargs)
            if ev is not None:
                ev[n_k].record()

        t = time_events(run, 1, 20, n_events=n_k + 1)
        rows.append(dict(kernel="empty", launches=n_k, **t))
        print("launch", rows[-1], flush=True)
    for ns in (2_000, 5_000, 10_000, 20_000, 50_000):
        for n_k in (1, 3):

            def run(i, ev, n_k=n_k, ns=ns):
                for k in range(n_k):
                    if ev is not None:
                        ev[k].record()
                    spin((SMS,), (32,), (np.int64(ns),))
                if ev is not None:
                    ev[n_k].record()

            t = time_events(run, 1, 20, n_events=n_k + 1)
            rows.append(dict(kernel="spin", spin_ns=ns, launches=n_k, **t))
            print("launch", rows[-1], flush=True)
    res["launch"] = rows


def provenance():
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    info = {
        "gpu": props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
        "sm_count": props["multiProcessorCount"],
        "l2_bytes": props["l2CacheSize"],
        "cuda_driver_version": cupy.cuda.runtime.driverGetVersion(),
        "cuda_runtime_version": cupy.cuda.runtime.runtimeGetVersion(),
        "nvrtc_version": list(cupy.cuda.nvrtc.getVersion()),
        "cupy": cupy.__version__,
        "command": " ".join(sys.argv),
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    try:
        info["nvidia_smi"] = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,clocks.max.sm,clocks.sm,power.limit",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError) as e:
        info["nvidia_smi"] = f"unavailable: {e}"
    return info


def main_time(args):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    res = {"provenance": provenance(), "errors": []}
    t0 = time.monotonic()
    for probe in (probe_launch, probe_mma, probe_alu, probe_memory, probe_chunked, probe_latency):
        try:
            probe(res)
        except Exception as e:  # keep going: record what failed
            res["errors"].append(f"{probe.__name__}: {type(e).__name__}: {e}")
            print("ERROR", res["errors"][-1], flush=True)
        res["wall_s"] = time.monotonic() - t0
        (out / "probe.json").write_text(json.dumps(res, indent=1, default=str))


def main_ncu_write(args):
    """One launch per size, each run under ncu (which flushes the L2 before each kernel)."""
    import cupy

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    mod = module(ILP=1, OP=0)
    wr, wtr = mod.get_function("write_bw"), mod.get_function("write_then_read")
    big = cupy.zeros((512 << 20) // 4, cupy.uint32)
    other = cupy.zeros((256 << 20) // 4, cupy.uint32)
    sink = cupy.zeros(4, cupy.uint32)
    order = []
    for mb in (1, 4, 8, 16, 24, 32, 40, 48, 56, 64, 96, 192, 512):
        wr((SMS * 8,), (256,), (big, np.int64((mb << 20) // 16)))
        order.append({"kernel": "write_bw", "write_bytes": mb << 20, "read_bytes": 0})
    for w_mb, r_mb in ((8, 16), (8, 32), (8, 64), (8, 128), (16, 64)):
        wtr(
            (SMS * 8,),
            (256,),
            (big, np.int64((w_mb << 20) // 16), other, np.int64((r_mb << 20) // 16), sink),
        )
        order.append(
            {"kernel": "write_then_read", "write_bytes": w_mb << 20, "read_bytes": r_mb << 20}
        )
    cupy.cuda.get_current_stream().synchronize()
    (out / "ncu_write_launches.json").write_text(
        json.dumps({"launches": order, "command": " ".join(sys.argv)}, indent=1)
    )


HARNESS_VARIANTS = (  # (schedule, head_dim, tiles): every variant benchmarks/gpu_measure.py times
    ("flash2", 64, (128, 128, 8)),
    ("flash2", 64, (64, 64, 4)),
    ("flash2", 128, (128, 64, 8)),
    ("flash2", 128, (128, 128, 8)),
    ("flash2_bwd", 64, (64, 64, 4)),
    ("flash2_bwd", 128, (64, 64, 4)),
    ("standard", 64, (128, 128, 8)),
    ("standard", 128, (128, 64, 8)),
)


def main_harness(args):
    """The launch path of benchmarks/gpu_measure.py on shapes too small to keep the GPU busy
    (one batch, one head, N = 128): what its CUDA-event intervals measure when a kernel takes
    no time, per kernel of each timed variant."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from benchmarks.gpu_measure import _random_inputs, time_events
    from flashio import kernels
    from flashio.kernels import gpu

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, d, tiles in HARNESS_VARIANTS:
        for n in (128, 512):
            shape = kernels.AttentionShape(1, 1, n, d, "bf16")
            sched = kernels.schedule(name, shape, *tiles)
            c = gpu.compile_schedule(sched)
            n_in = 4 if name.endswith("_bwd") else 3
            sets = [c.alloc(*_random_inputs((1, 1, n, d), n_in, "bf16")) for _ in range(3)]
            t = time_events(
                lambda i, ev, c=c, sets=sets: c.launch(sets[i], events=ev),
                3,
                20,
                n_events=len(c.launches) + 1,
            )
            rows.append(
                dict(
                    schedule=name,
                    head_dim=d,
                    tiles=tiles,
                    seq_len=n,
                    batch_heads=1,
                    kernels=[ln.function for ln in c.launches],
                    **t,
                )
            )
            print("harness", rows[-1], flush=True)
    (out / "harness.json").write_text(
        json.dumps(
            {"rows": rows, "command": " ".join(sys.argv), "provenance": provenance()}, indent=1
        )
    )


CLOCK_CONFIGS = (  # (schedule, batch, heads, N, d, tiles): short and long runs of one kernel
    ("flash2", 4, 16, 1024, 64, (128, 128, 8)),
    ("flash2", 4, 16, 4096, 64, (128, 128, 8)),
    ("flash2", 4, 16, 16384, 64, (128, 128, 8)),
    ("flash2", 4, 16, 4096, 128, (128, 64, 8)),
    ("flash2", 4, 16, 16384, 128, (128, 64, 8)),
    ("flash2_bwd", 4, 16, 4096, 64, (64, 64, 4)),
    ("flash2_bwd", 4, 16, 16384, 64, (64, 64, 4)),
)


def main_clocks(args):
    """The SM clock while benchmarks/gpu_measure.py's timing loop runs, for short and long
    kernels: nvidia-smi sampled every 20 ms during the loop (CUDA events as gpu_measure). With
    --once, each configuration is launched once (for Nsight Compute's clock counters)."""
    import cupy

    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from benchmarks.gpu_measure import _random_inputs, time_events
    from flashio import kernels
    from flashio.kernels import gpu

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, b, h, n, d, tiles in CLOCK_CONFIGS:
        shape = kernels.AttentionShape(b, h, n, d, "bf16")
        c = gpu.compile_schedule(kernels.schedule(name, shape, *tiles))
        n_in = 4 if name.endswith("_bwd") else 3
        sets = [c.alloc(*_random_inputs((b, h, n, d), n_in, "bf16")) for _ in range(3)]
        if args.once:
            c.launch(sets[0])
            cupy.cuda.get_current_stream().synchronize()
            continue
        cupy.cuda.get_current_stream().synchronize()
        time.sleep(1.0)  # idle between configurations, as between gpu_measure's
        smi = subprocess.Popen(
            [
                "nvidia-smi",
                "--query-gpu=timestamp,clocks.sm,power.draw",
                "--format=csv,noheader,nounits",
                "-lms",
                "20",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        t0 = time.time()
        t = time_events(
            lambda i, ev, c=c, sets=sets: c.launch(sets[i], events=ev),
            3,
            20,
            n_events=len(c.launches) + 1,
        )
        wall = time.time() - t0
        smi.terminate()
        samples = smi.communicate()[0].strip().splitlines()
        clocks = [float(x.split(",")[1]) for x in samples if x.count(",") == 2]
        rows.append(
            dict(
                schedule=name,
                shape=[b, h, n, d],
                tiles=tiles,
                loop_wall_s=wall,
                clock_mhz_samples=clocks,
                **t,
            )
        )
        print("clocks", name, n, d, tiles, round(t["median_ms"], 3), "ms", clocks, flush=True)
    if not args.once:
        (out / "clocks.json").write_text(
            json.dumps(
                {"rows": rows, "command": " ".join(sys.argv), "provenance": provenance()}, indent=1
            )
        )


def main_sass(args):
    """Instruction counts of the probe kernels' machine code (nvcc -arch=sm_90, cuobjdump):
    checks that each loop runs the instruction it is meant to measure."""
    import re
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        cu = Path(d) / "probe.cu"
        cu.write_text(SRC)
        for defs in (
            "-DILP=8 -DOP=0",
            "-DILP=8 -DOP=1",
            "-DILP=8 -DOP=2",
            "-DILP=8 -DOP=3",
            "-DILP=8 -DOP=4",
        ):
            cub = Path(d) / "p.cubin"
            subprocess.run(
                ["nvcc", "-arch=sm_90", "-cubin", "-o", str(cub), *defs.split(), str(cu)],
                check=True,
            )
            for fn in ("alu_tp", "mma_tp"):
                sass = subprocess.run(
                    ["cuobjdump", "-sass", "-fun", fn, str(cub)], capture_output=True, text=True
                ).stdout
                ops = re.findall(r"\b(MUFU\.EX2|FFMA|FMNMX|FADD|FMUL|HMMA[.\w]*)\b", sass)
                counts = {o: ops.count(o) for o in sorted(set(ops))}
                print(f"sass {defs} {fn}: {counts}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--mode", choices=("time", "ncu_write", "sass", "harness", "clocks"), default="time"
    )
    ap.add_argument("--once", action="store_true", help="clocks: launch each config once")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    modes = {
        "time": main_time,
        "ncu_write": main_ncu_write,
        "sass": main_sass,
        "harness": main_harness,
        "clocks": main_clocks,
    }
    modes[args.mode](args)


if __name__ == "__main__":
    main()
