"""MUFU.EX2's latency on an H200, alone and with the SM's other sub-partitions at work.

isa.py measured a dependent chain of ``ex2.approx.ftz.f32`` at 17 cycles an instruction with one
warp on one SM; overlap.py's ``mufu_c1_1wg`` (the same chain, one warp on each sub-partition of
every SM) at 23. This probe runs one chain, 64 dependent MUFU.EX2 an iteration, under both
conditions and between them: W warps per CTA (1, 2 and 4: one per sub-partition, filled in
turn) on 1 SM or on every SM, after 200 launches that bring the clock up. Variants: a second
chain puts an FFMA before each exponential (the softmax's ``exp2(x * scale - max)``); the
chain's first values as isa.py's; the loop's trip count from a kernel argument, so that its
counter lives in a uniform register as isa.py's does. Last, isa.py's own latency kernel is
launched here the way isa.py launches it.

Timed with %clock64 (and %globaltimer, for the clock) around the loop, per warp; results feed
a global store guarded by a runtime flag (never set). The machine code is checked: 64
MUFU.EX2 in the timed loop.

    python data/gpu/probe/mufu_latency.py --out DIR     # on the GPU: DIR/mufu_latency.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

ITERS = 64
CHAIN = 64  # dependent exponentials an iteration
LAUNCHES = 5
WARMUP = 200  # launches before the timed ones
WARPS = (1, 2, 4)
OPTIONS = ("-std=c++17", "-arch=sm_90a")
STEPS = {
    "ex2": 'asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(x) : "f"(-x));',
    "ffma_ex2": (
        'asm volatile("{ .reg .f32 t; fma.rn.f32 t, %0, %1, %2; ex2.approx.ftz.f32 %0, t; }" '
        ': "+f"(x) : "f"(-0.9999f), "f"(0.001f));'
    ),
}

KERNEL = r"""
__device__ __forceinline__ unsigned hash(unsigned x) {
    x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
    return x;
}
extern "C" __global__ void NAME(unsigned long long* cyc, float* sink, int flag, int iters) {
    float x = INIT;
    const int warp = threadIdx.x >> 5;
    unsigned long long t0, t1, g0, g1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g0) :: "memory");
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t0) :: "memory");
#pragma unroll 1
    for (int it = 0; it < LOOP; ++it) {
#pragma unroll
        for (int s = 0; s < CHAIN; ++s) STEP
    }
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t1) :: "memory");
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g1) :: "memory");
    if ((threadIdx.x & 31) == 0) {
        const int w = blockIdx.x * blockDim.x / 32 + warp;
        cyc[4 * w] = t0;
        cyc[4 * w + 1] = t1;
        cyc[4 * w + 2] = g0;
        cyc[4 * w + 3] = g1;
    }
    if (flag) sink[blockIdx.x * blockDim.x + threadIdx.x] = x;
}
"""


# the chain's first value in each lane: isa.py's (0.25 to 0.75) or one from 0 to 1; the chain
# converges to the same fixed point (x = 2^-x) from either
INITS = {
    "": "(float)(threadIdx.x & 255) * (1.f / 256.f)",
    "_isa_init": "0.25f + (float)(hash(threadIdx.x) & 255u) * (1.f / 512.f)",
}
# the loop's trip count: a constant (a register counter, IADD3 and ISETP) or the kernel's
# argument, as isa.py's (a uniform-register counter, UIADD3)
LOOPS = {"": "ITERS", "_runtime_iters": "iters"}


def sources() -> dict[str, str]:
    return {
        f"chain_{name}{tag}{ltag}": KERNEL.replace("NAME", f"chain_{name}{tag}{ltag}")
        .replace("STEP", step).replace("LOOP", loop).replace("ITERS", str(ITERS))
        .replace("CHAIN", str(CHAIN)).replace("INIT", init)
        for name, step in STEPS.items() for tag, init in INITS.items()
        for ltag, loop in LOOPS.items() if not (tag and ltag)
    }  # fmt: skip


def isa_kernel():
    """isa.py's own latency kernel of MUFU.EX2 (64 in its chain), for a launch here beside
    this probe's: the two measured 17 and 23 cycles for the same machine code."""
    import isa

    probe = next(p for p in isa.probes() if p.name == "mufu_ex2")
    return isa.module_source(probe), "mufu_ex2_lat_hi", probe


def check_sass(cubins: dict[str, bytes]) -> dict:
    from mio import disassemble

    out = {}
    for name, code in disassemble(cubins).items():
        clocks = [i for i, c in enumerate(code) if "SR_CLOCKLO" in c.operands]
        region = code[clocks[0] + 1 : clocks[-1] + 1]
        out[name] = {
            "mufu_ex2": sum(c.opcode.startswith("MUFU.EX2") for c in region),
            "ffma": sum(c.opcode.startswith("FFMA") for c in region),
            "instructions": len(region),
        }
        if out[name]["mufu_ex2"] != CHAIN:
            raise SystemExit(f"{name}: {out[name]} in the timed region, not {CHAIN} MUFU.EX2")
    return out


def isa_options():
    import isa

    return [o for o in isa.NVRTC_OPTIONS if "ptxas-options" not in o]


def run(out_dir: Path) -> dict:
    import cupy
    from isa import nvidia_smi, provenance

    from benchmarks import nvrtc

    prov = provenance()
    srcs = sources()
    sass = check_sass({k: nvrtc.compile_cubin(s, OPTIONS)[0] for k, s in srcs.items()})
    sms = cupy.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    cyc = cupy.zeros(4 * sms * max(WARPS), cupy.uint64)
    sink = cupy.zeros(sms * 32 * max(WARPS), cupy.float32)
    rows = []
    for name, src in srcs.items():
        fn = cupy.RawModule(code=src, options=OPTIONS).get_function(name)
        for _ in range(WARMUP):  # the clock up from idle, as isa.py's warm-up does
            fn((sms,), (128,), (cyc, sink, cupy.int32(0), cupy.int32(ITERS)))
        for grid in (1, sms):
            for warps in WARPS:
                per_launch, clocks = [], []
                for _ in range(LAUNCHES):
                    fn((grid,), (32 * warps,), (cyc, sink, cupy.int32(0), cupy.int32(ITERS)))
                    c = cyc.get()[: 4 * grid * warps].reshape(grid * warps, 4).astype("int64")
                    per_launch.append(((c[:, 1] - c[:, 0]) / (ITERS * CHAIN)).tolist())
                    clocks.append(float(((c[:, 1] - c[:, 0]) / (c[:, 3] - c[:, 2])).mean() * 1e9))
                flat = [v for launch in per_launch[1:] for v in launch]  # the first warms up
                row = {"kernel": name, "grid": grid, "warps_per_cta": warps,
                       "cycles_per_step": per_launch, "clock_hz": clocks,
                       "median_cycles_per_step": statistics.median(flat)}  # fmt: skip
                rows.append(row)
                print(
                    name,
                    grid,
                    warps,
                    round(row["median_cycles_per_step"], 2),
                    f"{statistics.median(clocks[1:]) / 1e9:.3f} GHz",
                    flush=True,
                )
    # isa.py's kernel: 16 repetitions of 64 iterations, each timed (its per-iteration cycles)
    src, name, probe = isa_kernel()
    fn = cupy.RawModule(code=src, options=tuple(isa_options())).get_function(name)
    rec = cupy.zeros(8 * sms, cupy.int64)
    icyc = cupy.zeros(probe.lat_reps, cupy.int64)
    out = cupy.zeros(sms * 1024, cupy.uint32)
    per = []  # one warp, as isa.py launches it
    for _ in range(LAUNCHES):
        args = (rec, icyc, out, out, cupy.int64(0), cupy.int32(probe.lat_iters),
                cupy.int32(probe.lat_reps), cupy.uint32(1), cupy.float32(1), cupy.float32(1),
                cupy.uint32(1), cupy.uint32(1), cupy.int32(0))  # fmt: skip
        fn((1,), (32,), args)
        per.extend((icyc.get() / probe.lat_iters / CHAIN).tolist())
    row = {"kernel": f"isa {name}", "grid": 1, "warps_per_cta": 1, "cycles_per_step": per,
           "median_cycles_per_step": statistics.median(per)}  # fmt: skip
    rows.append(row)
    print(row["kernel"], 1, round(row["median_cycles_per_step"], 2), flush=True)
    prov["nvidia_smi_after"] = nvidia_smi()
    config = {"iters": ITERS, "chain": CHAIN, "launches": LAUNCHES, "options": OPTIONS}
    doc = {"provenance": prov, "config": config, "sass": sass, "rows": rows}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "mufu_latency.json").write_text(json.dumps(doc, indent=1))
    return doc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="write OUT/mufu_latency.json")
    run(ap.parse_args(argv).out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
