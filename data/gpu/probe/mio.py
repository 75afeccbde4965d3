"""The shared-memory instruction queue (MIO) of an H200 SM sub-partition, and spill reloads.

Two constants of the warp replay (simulator/warp_replay.py) that isa.py does not measure:

mio_queue
    how many shared-memory instructions one SMSP accepts before the shared-memory port has
    taken them. One warp issues K independent instructions (ldmatrix x4, ld.shared.v4) between
    two reads of %clock64 and does not use their results until after the second read, so the
    timed region is the issue of K instructions. While the queue has room each issues in a
    cycle or two; once it is full each waits for the port to take one. The knee of t(K),
    found by a two-segment least-squares fit, is the queue depth, and the slope after it the
    port's time per instruction. Run with 1 warp (one SMSP busy) and 4 warps (one per SMSP).
ldl_latency
    cycles from a local-memory load that hits L1 to a dependent one: a pointer chase through a
    per-thread array the compiler must keep in local memory (dynamic indices), after one pass
    that brings it into L1.

Every timed instruction's result feeds a global store guarded by a runtime flag (never set),
so the compiler keeps them. The machine code of each kernel is checked with cuobjdump where
found (the count of the target opcode between the clock reads, and no wait on its scoreboards
there). GPU clocks are never changed; nvidia-smi is read before and after.

    python data/gpu/probe/mio.py --out DIR        # on the GPU: DIR/mio.json
    python data/gpu/probe/mio.py --sass DIR       # anywhere with NVRTC: the kernels' SASS
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

KS = tuple(range(1, 41))  # instructions issued in the timed region
WARPS = (1, 4)
LAUNCHES = 5
REPS = 8  # timed regions per launch (the first warms the instruction cache; the last is kept)
CHASE = 64  # dependent local loads per chase
OPS = {
    # name: (PTX of one instruction i into 4 registers from byte offset OFF, SASS opcode)
    "ldsm_x4": (
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];",
        "LDSM.16.M88.4",
    ),
    "lds128": ("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];", "LDS.128"),
}

KERNEL = r"""
extern "C" __global__ void NAME(
        unsigned long long* cyc, unsigned* sink, int flag) {
    __shared__ __align__(128) unsigned buf[K * 128 + 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int i = threadIdx.x; i < K * 128 + 32; i += blockDim.x) buf[i] = i * 2654435761u;
    __syncthreads();
    // each lane's 16-byte row: instruction i reads rows i*512 .. i*512+511 (conflict-free)
    const unsigned base = (unsigned)__cvta_generic_to_shared(buf) + lane * 16;
    unsigned acc = 0;
    unsigned long long dt = 0;
    #pragma unroll 1
    for (int rep = 0; rep < REPS; ++rep) {
        unsigned r[4 * K];
        unsigned long long t0, t1;
        asm volatile("mov.u64 %0, %%clock64;" : "=l"(t0) :: "memory");
        #pragma unroll
        for (int i = 0; i < K; ++i)
            asm volatile("PTX"
                : "=r"(r[4 * i]), "=r"(r[4 * i + 1]), "=r"(r[4 * i + 2]), "=r"(r[4 * i + 3])
                : "r"(base + i * 512) : "memory");
        asm volatile("mov.u64 %0, %%clock64;" : "=l"(t1) :: "memory");
        #pragma unroll
        for (int i = 0; i < 4 * K; ++i) acc += r[i];
        dt = t1 - t0;
        __syncthreads();
    }
    if (lane == 0) cyc[blockIdx.x * 4 + warp] = dt;
    if (flag) sink[threadIdx.x] = acc;
}
"""

CHASE_KERNEL = r"""
extern "C" __global__ void ldl_chase(unsigned long long* cyc, unsigned* sink, int flag,
                                     int start) {
    unsigned loc[64];
    #pragma unroll 1
    for (int i = 0; i < 64; ++i) loc[i] = (i * 37 + 11 + start) & 63;  // one cycle of 64
    unsigned j = start & 63;
    #pragma unroll 1
    for (int i = 0; i < 64; ++i) j = loc[j];  // warm: the array is in L1
    unsigned long long t0, t1;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t0) :: "memory");
    #pragma unroll
    for (int i = 0; i < CHASE; ++i) j = loc[j];
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t1) :: "memory");
    if (threadIdx.x == 0) cyc[0] = t1 - t0;
    if (flag) sink[threadIdx.x] = j;
}
"""


def sources() -> dict[str, str]:
    """Kernel name -> CUDA source: one kernel per (op, K), and the local-memory chase."""
    out = {}
    for op, (ptx, _) in OPS.items():
        for k in KS:
            name = f"{op}_k{k}"
            out[name] = (
                KERNEL.replace("NAME", name).replace("PTX", ptx)
                .replace("REPS", str(REPS)).replace("K", str(k))
            )  # fmt: skip
    out["ldl_chase"] = CHASE_KERNEL.replace("CHASE", str(CHASE))
    return out


OPTIONS = ("-std=c++17", "-arch=sm_90")


def disassemble(cubins: dict[str, bytes]) -> dict:
    """Kernel name -> its instructions (``simulator.sass``), by cuobjdump; empty where
    cuobjdump is not found."""
    from benchmarks.sass_census import _tool
    from flashio.simulator import sass

    try:
        cuobjdump = _tool("cuobjdump")
    except SystemExit:
        return {}
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, cubin in cubins.items():
            path = Path(tmp, "k.cubin")
            path.write_bytes(cubin)
            text = subprocess.run(
                [cuobjdump, "-sass", str(path)], capture_output=True, text=True, check=True
            ).stdout
            out[name] = next(iter(sass.parse(text).values()))
    return out


def check_sass(cubins: dict[str, bytes]) -> dict:
    """Per kernel: target opcodes between the two clock reads, and whether any instruction
    there waits on a scoreboard (it must not: the region times issue only)."""
    out = {}
    for name, code in disassemble(cubins).items():
        clocks = [i for i, c in enumerate(code) if "SR_CLOCKLO" in c.operands]
        if len(clocks) < 2:
            out[name] = {"error": f"{len(clocks)} clock reads in the machine code"}
            continue
        region = code[clocks[0] + 1 : clocks[-1] + 1]
        target = OPS[name.split("_k")[0]][1] if name != "ldl_chase" else "LDL"
        others = [c for c in region if not c.opcode.startswith(target)]
        out[name] = {
            # the fixed stall counts of the other instructions (the chase's address
            # arithmetic), which the chase's cycles include
            "other_stall_cycles": sum(max(1, c.stall) for c in others[:-1]),
            "targets": sum(c.opcode.startswith(target) for c in region),
            # the chase waits on each load by design; the issue regions must not wait
            "waits_in_region": sum(
                bool(c.wait_mask) for c in region if not c.opcode.startswith(target)
            ) if name != "ldl_chase" else None,
        }  # fmt: skip
    return out


def build() -> dict[str, bytes]:
    from benchmarks import nvrtc

    return {name: nvrtc.compile_cubin(src, OPTIONS)[0] for name, src in sources().items()}


def knee(ks, ts) -> dict:
    """Two-segment least squares fit of t(K): the K where the slope changes."""
    import numpy as np

    ks, ts = np.asarray(ks, float), np.asarray(ts, float)
    best = None
    for j in range(2, len(ks) - 2):
        sse = 0.0
        fits = []
        for sel in (slice(0, j + 1), slice(j, None)):
            a, b = np.polyfit(ks[sel], ts[sel], 1)
            sse += float(((a * ks[sel] + b - ts[sel]) ** 2).sum())
            fits.append((float(a), float(b)))
        if best is None or sse < best[0]:
            best = (sse, int(ks[j]), fits)
    _, k, ((a1, _), (a2, _)) = best
    return {"knee_k": k, "slope_before": a1, "slope_after": a2}


def summarize(doc: dict, sass_info: dict) -> dict:
    """The replay's constants from a run (mio.json) and the kernels' machine code
    (mio_sass.json, same NVRTC version):

    - ``issue_bound_k``: the largest K at which every warp of the 4-warp runs issued at its
      1-warp pace (t(K) of the 1-warp run), ``mio_queue`` = round(3/4 of it): with four SMSPs
      issuing one instruction every 4 cycles each into a port that takes one every 4 cycles,
      3/4 of what each has issued is still queued when the first must wait;
    - ``ldl_latency_cycles``: the chase's cycles less its address instructions' stall counts,
      per load."""
    out = {}
    for op in OPS:
        one = {r["k"]: min(min(c) for c in r["cycles"]) for r in doc["rows"]
               if r["op"] == op and r["warps"] == 1}  # fmt: skip
        bound = 0
        for r in sorted((r for r in doc["rows"] if r["op"] == op and r["warps"] == 4),
                        key=lambda r: r["k"]):  # fmt: skip
            if max(max(c) for c in r["cycles"]) > one[r["k"]]:
                break
            bound = r["k"]
        out[op] = {"issue_bound_k": bound, "mio_queue": round(0.75 * bound)}
    chase = sass_info["ldl_chase"]
    cycles = statistics.median(doc["chase_cycles"]) - chase["other_stall_cycles"]
    out["ldl_latency_cycles"] = cycles / chase["targets"]
    return out


def run(out_dir: Path) -> dict:
    import cupy
    from isa import nvidia_smi, provenance

    prov = provenance()
    cubins = build()
    census = check_sass(cubins)
    cyc = cupy.zeros(4 * 132, cupy.uint64)
    sink = cupy.zeros(128, cupy.uint32)
    rows, results = [], {}
    for op in OPS:
        for warps in WARPS:
            med = []
            for k in KS:
                name = f"{op}_k{k}"
                fn = cupy.RawModule(code=sources()[name], options=OPTIONS).get_function(name)
                vals = []
                for _ in range(LAUNCHES):
                    fn((1,), (32 * warps,), (cyc, sink, cupy.int32(0)))
                    vals.append([int(x) for x in cyc[:warps].get()])
                flat = [v for launch in vals for v in launch]
                rows.append({"op": op, "warps": warps, "k": k, "cycles": vals})
                med.append(statistics.median(flat))
            results[f"{op} w{warps}"] = {"median_cycles": med, **knee(KS, med)}
            print(op, warps, results[f"{op} w{warps}"], flush=True)
    fn = cupy.RawModule(code=sources()["ldl_chase"], options=OPTIONS).get_function("ldl_chase")
    chase = []
    for _ in range(LAUNCHES):
        fn((1,), (32,), (cyc, sink, cupy.int32(0), cupy.int32(5)))
        chase.append(int(cyc[0].get()))
    n_ldl = census.get("ldl_chase", {}).get("targets") or CHASE
    results["ldl_latency_cycles"] = statistics.median(chase) / n_ldl
    print("ldl latency", results["ldl_latency_cycles"], flush=True)
    prov["nvidia_smi_after"] = nvidia_smi()
    doc = {
        "provenance": prov,
        "config": {"ks": KS, "warps": WARPS, "launches": LAUNCHES, "reps": REPS,
                   "chase": CHASE, "options": OPTIONS},
        "sass": census,
        "rows": rows,
        "chase_cycles": chase,
        "results": results,
    }  # fmt: skip
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "mio.json").write_text(json.dumps(doc, indent=1))
    return doc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--out", type=Path, help="run on the GPU; write OUT/mio.json")
    g.add_argument("--sass", type=Path, help="compile only; write SASS/mio_sass.json")
    args = ap.parse_args(argv)
    if args.sass:
        census = check_sass(build())
        args.sass.mkdir(parents=True, exist_ok=True)
        (args.sass / "mio_sass.json").write_text(json.dumps(census, indent=1))
        bad = {k: v for k, v in census.items() if v.get("waits_in_region") or "error" in v}
        print(f"{len(census)} kernels; {len(bad)} with waits or errors: {sorted(bad)[:8]}")
        return 0
    run(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
