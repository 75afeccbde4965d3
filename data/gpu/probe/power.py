"""Board power and SM clock against what the SMs do and how many do it: the data a clock model
needs (docs/model.md, "One SM clock for every kernel").

kernel_clock.py found the wgmma attention forwards and flash-attn 2 at the H200's 700 W limit,
their clock 4-13% below what it is while the board is cool, and this project's mma.sync
forwards below the limit. Here the work is one kind at a time: overlap.py's loops (one CTA an
SM, two warpgroups), run for ITERS iterations, each kind on a grid of n CTAs (one per SM, so n
SMs at work) for n in --sms. Per (kind, n) the kernel is launched back to back for about
--seconds; each launch is CUDA-event-timed, each CTA reads %clock64 around its loop (the
kernel's cycles), the board power is read through NVML every 5 ms. The clock while it ran is
the slowest CTA's cycles over the launch's time (the launch's own overhead, a few us, is
under 0.1% of it).

    python data/gpu/probe/power.py --out DIR [--seconds 2] [--sms 33 66 99 132]

Writes DIR/power.json: per (kind, n) the launches' times, cycles and the clock they imply
(median over the last half of the launches) and the power samples with their median over the
last quarter of the run (NVML's reading trails the load by a few hundred ms).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import overlap
from kernel_clock import Power, sampled
from sm_scaling import new_doc

# overlap.py's loops: dense wgmma in both warpgroups, dense mma.sync (operands changing), FFMA,
# MUFU.EX2 and conflict-free 16-byte shared-memory loads alone, and wgmma with MUFU beside it
# (a softmax's exponentials)
KINDS = ("mma_2wg", "hmmad_2wg", "ffma_2wg", "mufu_2wg", "both_mufu", "lds_2wg")
# run 3: the dense wgmma on operands that change from one instruction to the next
FRESH = ("mma_2wg_fresh",)
ITERS = 8192  # about 9 M cycles a launch: 5 ms at 1.8 GHz
# reads of global memory, 16 bytes a thread, four in flight, by 1024 threads a CTA (one CTA an
# SM: the dynamic shared memory it asks for leaves no room for a second): a buffer the L2
# holds (STREAM_BYTES["l2_read"], read STREAM_REPS times) or one it cannot (HBM)
STREAM = r"""
extern "C" __global__ void __launch_bounds__(1024, 1)
    stream(const uint4* __restrict__ src, unsigned long long n, int reps,
           unsigned long long* cyc, uint4* sink, int flag) {
    unsigned long long t0, t1;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t0) :: "memory");
    uint4 acc = make_uint4(0, 0, 0, 0);
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (int r = 0; r < reps; ++r)
        for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i + 3 * step < n;
             i += 4 * step) {
            uint4 v[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) v[u] = __ldcg(src + i + u * step);
#pragma unroll
            for (int u = 0; u < 4; ++u)
                acc.x ^= v[u].x, acc.y ^= v[u].y, acc.z ^= v[u].z, acc.w ^= v[u].w;
        }
    __syncthreads();
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t1) :: "memory");
    if (threadIdx.x == 0) cyc[2 * blockIdx.x] = t0, cyc[2 * blockIdx.x + 1] = t1;
    if (flag) sink[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
"""
STREAM_BYTES = {"l2_read": 24 << 20, "hbm_read": 4 << 30}
STREAM_REPS = {"l2_read": 384, "hbm_read": 2}
STREAM_SMEM = 120 << 10


def loop_launch(fn, sms: int, n: int):
    """overlap.py's kernel ``fn`` on n SMs: (launch, its slowest CTA's cycles)."""
    import cupy

    warps = overlap.THREADS // 32
    cyc = cupy.zeros(2 * sms * warps, cupy.uint64)
    sink = cupy.zeros(sms * overlap.THREADS, cupy.float32)
    args = (cyc, sink, cupy.int32(0), cupy.uint32(1))

    def cycles() -> int:
        c = cyc.get().reshape(sms, warps, 2)[:n].astype("int64")
        return int((c[:, :, 1].max(axis=1) - c[:, :, 0].min(axis=1)).max())

    return (lambda: fn((n,), (overlap.THREADS,), args)), cycles, 0


def stream_launch(fn, kind: str, sms: int, n: int, src):
    """The read stream on n SMs: (launch, its slowest CTA's cycles, bytes a launch)."""
    import cupy
    import numpy as np

    cyc = cupy.zeros(2 * sms, cupy.uint64)
    sink = cupy.zeros(sms * 1024 * 4, cupy.uint32)
    n_vec = STREAM_BYTES[kind] // 16
    args = (src, np.uint64(n_vec), np.int32(STREAM_REPS[kind]), cyc, sink, np.int32(0))

    def cycles() -> int:
        c = cyc.get().reshape(sms, 2)[:n].astype("int64")
        return int((c[:, 1] - c[:, 0]).max())

    # the vectors the loop reads: thread t reads 4 at each i = t + 4 k step with i + 3 step < n
    step = n * 1024
    last = n_vec - 1 - np.arange(step) - 3 * step
    per_thread = np.where(last >= 0, last // (4 * step) + 1, 0)
    bytes_read = STREAM_REPS[kind] * int(per_thread.sum()) * 4 * 16
    return (lambda: fn((n,), (1024,), args, shared_mem=STREAM_SMEM)), cycles, bytes_read


def run_kind(launch, cycles_of, bytes_read: int, seconds: float, power: Power) -> dict:
    import cupy

    launch()
    cupy.cuda.runtime.deviceSynchronize()
    with sampled(power) as watts:
        t0, times, cycles = time.monotonic(), [], []
        while time.monotonic() - t0 < seconds:
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            launch()
            stop.record()
            stop.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
            cycles.append(cycles_of())
        t1 = time.monotonic()
    half = len(times) // 2
    clocks = [c / t for c, t in zip(cycles[half:], times[half:], strict=True)]
    late = [w for t, w in watts if t >= t0 + 0.75 * (t1 - t0)]
    return {
        "bytes_per_s": bytes_read / statistics.median(times[half:]) if bytes_read else None,
        "launch_s": times,
        "cycles": cycles,
        "clock_hz": statistics.median(clocks),
        "watts": [w for _, w in watts],
        "median_watts_last_quarter": statistics.median(late),
    }


def main(argv=None) -> None:
    import cupy

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--sms", type=int, nargs="+", default=[33, 66, 99, 132])
    ap.add_argument("--kinds", nargs="+", help="default: KINDS, then l2_read and hbm_read")
    args = ap.parse_args(argv)
    overlap.ITERS = ITERS
    sms = cupy.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    power = Power()
    time.sleep(2.0)
    doc = new_doc(iters=ITERS, threads=overlap.THREADS, idle_watts=power.watts())
    doc["runs"] = []
    overlap.KERNELS["lds_2wg"] = ((), (0, 1), "lds")
    launches = {}
    for kind, src in overlap.sources(KINDS + FRESH).items():
        fn = cupy.RawModule(code=src, options=overlap.OPTIONS).get_function(kind)
        launches[kind] = functools.partial(loop_launch, fn)
    stream = cupy.RawModule(code=STREAM, options=("-std=c++17",)).get_function("stream")
    stream.max_dynamic_shared_size_bytes = STREAM_SMEM
    for kind, size in STREAM_BYTES.items():
        src = cupy.ones(size // 4, cupy.uint32)
        launches[kind] = functools.partial(stream_launch, stream, kind, src=src)
    for kind in args.kinds or list(launches):
        for n in args.sms:
            n = min(n, sms)
            row = {
                "kind": kind,
                "ctas": n,
                **run_kind(*launches[kind](sms, n), args.seconds, power),
            }
            doc["runs"].append(row)
            bw = f", {row['bytes_per_s'] / 1e12:.2f} TB/s" if row["bytes_per_s"] else ""
            ms = statistics.median(row["launch_s"]) * 1e3
            print(f"{kind:10s} on {n:3d} SMs: {row['clock_hz'] / 1e9:.3f} GHz, "
                  f"{row['median_watts_last_quarter']:6.1f} W, {len(row['launch_s'])} launches "
                  f"of {ms:.2f} ms{bw}", flush=True)  # fmt: skip
            time.sleep(1.0)  # the board cools between runs
    (Path(args.out) / "power.json").write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
