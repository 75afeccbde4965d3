"""How an SM sub-partition's warp scheduler shares its issue among the CTAs resident on it.

cta_dispatch.py found CTAs of equal FFMA work sharing an SM evenly when each CTA has one warp
on each sub-partition (three 4-warp CTAs end within 0.03 us of each other in 41 us), but
running apart when each has two (two 8-warp CTAs end 10 us apart in 39), and this project's
64x64, 4-warp forward ends an SM's three CTAs 12-21 us apart in 186, oldest first
(cta_placement.py). The warp replay's scheduler (``simulator.warp_replay``: the warp that
issued last goes on, else the one waiting longest; ``age_first``: the oldest CTA's first) runs
the FFMA CTAs one after another, so it says nothing reliable about how the H200 splits issue
among CTAs, which is what ``ModelOptions.cta_drift`` would need (docs/model.md, "CTA drift").

Here every warp records its progress: one wave of CTAs (exactly c resident on each SM, the
grid c x SMs, all starting together), each warp running ``iters`` iterations of one kind of
work and lane 0 writing clock64 every ``iters / CHECKPOINTS`` iterations. From the
checkpoints, per SM, each warp's iterations per cycle while all the SM's warps still run, by
its CTA's age on the SM (launch order) and its sub-partition (warp slot mod 4). Kinds of work:

- ``ffma8``: eight independent FFMA chains a thread (issue-bound, cta_dispatch.py's);
- ``ffma1``: one dependent FFMA chain (latency-bound: one FFMA per latency);
- ``mufu``: one dependent ex2.approx chain (variable latency, the scoreboard);
- ``hmma``: four independent mma.sync.m16n8k16 accumulators (tensor-pipe-bound);
- ``mix``: per iteration two dependent mma.sync, 32 FFMA in 8 chains and 4 ex2 (about the
  forward's mix of matrix products and softmax).

    python data/gpu/probe/sched_share.py --out DIR          # on the GPU: DIR/sched_share.json.gz
    python data/gpu/probe/sched_share.py --summary FILE     # anywhere: shares by age, per case
    python data/gpu/probe/sched_share.py --sass FILE        # anywhere with NVRTC: each kind's SASS
    python data/gpu/probe/sched_share.py --replay FILE      # the warp replay beside the H200

The summary needs no GPU: it reads the JSON a run wrote. ``--sass`` compiles the kernel once
per kind of work, ``work`` a constant so that only its loop is left, as CuPy would for sm_90
(benchmarks/nvrtc.py) and writes cuobjdump's listings, gzipped (sched_share.sass.gz);
``--replay`` replays each listing's loop with ``simulator.warp_replay`` for every case the
JSON holds, with the oldest CTA's ready warps first (``age_first``, CTA drift's rule) and with
the warp waiting longest first, and prints the shares and finish gaps beside the H200's.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

CHECKPOINTS = 16
WORKS = ("ffma8", "ffma1", "mufu", "hmma", "mix")
# (CTAs per SM, warps a CTA): the forward's residencies (64x64 w4: 3; 128x128 w8: 2), the
# cases cta_dispatch.py timed, and one and two warps a CTA on each sub-partition at two CTAs
CONFIGS = ((3, 4), (2, 8), (2, 4), (4, 4), (1, 8))
# iterations per work kind: ffma8's as cta_dispatch.py's (41 us a CTA there at three 4-warp
# CTAs an SM); the others sized from their instructions' latencies to the same order (not
# timed)
ITERS = {"ffma8": 200, "ffma1": 200, "mufu": 400, "hmma": 2000, "mix": 800}
REPS = 3

SRC = r"""
// one mma.sync.m16n8k16 (f16 in, f32 accumulate) into the four floats d[0..3]
#define MMA(d) asm volatile(                                                       \
    "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "       \
    "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"                            \
    : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                              \
    : "r"(x0), "r"(x1), "r"(x0), "r"(x1), "r"(x0), "r"(x1))

extern "C" __global__ void share(unsigned long long* rec, int iters, int work, int every,
                                 int ckpts) {
    extern __shared__ float pad[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nwarps = blockDim.x >> 5;
    unsigned long long* r = rec + (unsigned long long)(blockIdx.x * nwarps + warp) * (4 + ckpts);
    unsigned int id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    if (lane == 0) { r[0] = id; r[1] = blockIdx.x; r[2] = warp; r[3] = clock64(); }
    float a0 = threadIdx.x, a1 = a0 + 1, a2 = a0 + 2, a3 = a0 + 3;
    float a4 = a0 + 4, a5 = a0 + 5, a6 = a0 + 6, a7 = a0 + 7;
    const float b = 0.999f, c = 0.001f;
    float acc[4][4] = {};
    unsigned int x0 = 0x3c003c00u + lane, x1 = 0x3c003c00u ^ lane;  // half2 operands
    int k = 0;
    for (int i = 0; i < iters; ++i) {
        if (work == 0) {
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                a0 = fmaf(a0, b, c); a1 = fmaf(a1, b, c); a2 = fmaf(a2, b, c); a3 = fmaf(a3, b, c);
                a4 = fmaf(a4, b, c); a5 = fmaf(a5, b, c); a6 = fmaf(a6, b, c); a7 = fmaf(a7, b, c);
            }
        } else if (work == 1) {
#pragma unroll
            for (int j = 0; j < 128; ++j) a0 = fmaf(a0, b, c);
        } else if (work == 2) {
#pragma unroll
            for (int j = 0; j < 32; ++j) {
                asm volatile("ex2.approx.f32 %0, %0;" : "+f"(a0));
                a0 = a0 * 1e-3f;
            }
        } else if (work == 3) {
            MMA(acc[0]); MMA(acc[1]); MMA(acc[2]); MMA(acc[3]);
        } else {
            MMA(acc[0]); MMA(acc[0]);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                a0 = fmaf(a0, b, c); a1 = fmaf(a1, b, c); a2 = fmaf(a2, b, c);
                a3 = fmaf(a3, b, c); a4 = fmaf(a4, b, c); a5 = fmaf(a5, b, c);
                a6 = fmaf(a6, b, c); a7 = fmaf(a7, b, c);
                asm volatile("ex2.approx.f32 %0, %0;" : "+f"(a1));
            }
        }
        if ((i + 1) % every == 0 && k < ckpts) {
            if (lane == 0) r[4 + k] = clock64();
            ++k;
        }
    }
    float s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
    for (int m = 0; m < 4; ++m) s += acc[m][0] + acc[m][1] + acc[m][2] + acc[m][3];
    if (s == 12345.0f) { pad[0] = s; rec[0] = (unsigned long long)pad[lane & 7]; }
}
"""


def measure(sms: int, per_sm: int) -> list[dict]:
    """One wave of each configuration and work kind, ``REPS`` launches each (after one that
    warms up): each warp's SM, CTA, warp and clock64 at its start and checkpoints."""
    import cupy

    kern = cupy.RawKernel(SRC, "share")
    kern.max_dynamic_shared_size_bytes = per_sm // 2 + 1024  # the most a launch below asks
    runs = []
    for ctas, warps in CONFIGS:
        grid = ctas * sms
        rec = cupy.zeros(grid * warps * (4 + CHECKPOINTS), cupy.uint64)
        smem = per_sm // (ctas + 1) + 1024  # c fit an SM, c + 1 do not
        for w, work in enumerate(WORKS):
            iters = ITERS[work]
            args = (rec, cupy.int32(iters), cupy.int32(w), cupy.int32(iters // CHECKPOINTS),
                    cupy.int32(CHECKPOINTS))  # fmt: skip
            for rep in range(REPS + 1):
                rec[:] = 0
                kern((grid,), (32 * warps,), args, shared_mem=smem)
                cupy.cuda.Device().synchronize()
                if rep == 0:
                    continue
                r = rec.get().reshape(grid * warps, 4 + CHECKPOINTS).astype(np.int64)
                runs.append({"ctas_per_sm": ctas, "warps": warps, "work": work,
                             "iters": iters, "rep": rep, "records": r.tolist()})  # fmt: skip
                span = (r[:, -1] - r[:, 3]).max() / 1e3
                print(f"c={ctas} w={warps} {work} rep {rep}: {span:.1f} k cycles", flush=True)
    return runs


def shares(run: dict) -> dict:
    """Per CTA age on an SM (0: launched first), the median over SMs of its warps' iterations
    per cycle while every warp of the SM still runs, as a share of the SM's: 1 / c each where
    the scheduler splits issue evenly among CTAs. Also the median gap between an SM's first and
    last CTA to finish, as a fraction of the last's time."""
    r = np.array(run["records"], np.int64)
    c, per = run["ctas_per_sm"], run["iters"] // CHECKPOINTS
    out: dict[int, list[float]] = {a: [] for a in range(c)}
    gaps = []
    for sm in np.unique(r[:, 0]):
        mine = r[r[:, 0] == sm]
        ctas = sorted(np.unique(mine[:, 1]), key=lambda b: mine[mine[:, 1] == b, 3].min())
        if len(ctas) != c:
            continue
        start, end = mine[:, 3].max(), mine[:, -1].min()  # all of the SM's warps run
        rates = []
        for b in ctas:
            done = 0.0
            for w in mine[mine[:, 1] == b]:
                # iterations done by t, between checkpoints linearly: from 0 at its start
                ts = w[3:].astype(float)
                its = per * np.arange(len(ts), dtype=float)
                done += np.interp(end, ts, its) - np.interp(start, ts, its)
            rates.append(done / max(end - start, 1))
        total = sum(rates)
        for age, rate in enumerate(rates):
            out[age].append(rate / total if total else np.nan)
        finish = [mine[mine[:, 1] == b, -1].max() - mine[:, 3].min() for b in ctas]
        gaps.append((max(finish) - min(finish)) / max(finish))
    return {"share_by_age": [float(np.nanmedian(out[a])) for a in range(c)],
            "finish_gap": float(np.median(gaps)) if gaps else float("nan")}  # fmt: skip


def summary(path: Path) -> str:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    lines = [f"{'CTAs x warps':>12} {'work':>6}  share of the SM's issue by age (oldest first)"
             "   finish gap"]  # fmt: skip
    for run in doc["runs"]:
        if run["rep"] != 1:
            continue
        s = shares(run)
        ages = " ".join(f"{x:.3f}" for x in s["share_by_age"])
        lines.append(f"{run['ctas_per_sm']:>5} x {run['warps']:<4} {run['work']:>6}  {ages:<40}"
                     f" {s['finish_gap']:.1%}")  # fmt: skip
    return "\n".join(lines)


def _source(work: int) -> str:
    """The kernel with ``work`` a constant: only that kind's loop is compiled."""
    src = SRC.replace("int iters, int work,", "int iters, int work_arg,")
    return src.replace(
        "    extern __shared__ float pad[];",
        f"    extern __shared__ float pad[];\n    const int work = {work};",
        1,
    )


def write_sass(path: Path) -> None:
    """cuobjdump's listing of each kind's build, one ``// work: KIND`` header before each."""
    import subprocess
    import tempfile

    from benchmarks import sass_census
    from benchmarks.nvrtc import compile_cubin
    from flashio.kernels.gpu import CUPY_NVRTC_OPTIONS

    parts = []
    with tempfile.TemporaryDirectory() as tmp:
        cub = Path(tmp) / "share.cubin"
        for w, work in enumerate(WORKS):
            cub.write_bytes(compile_cubin(_source(w), (*CUPY_NVRTC_OPTIONS, "-arch=sm_90"))[0])
            dump = [sass_census._tool("cuobjdump"), "--dump-sass", str(cub)]
            text = subprocess.run(dump, capture_output=True, text=True, check=True).stdout
            parts.append(f"// work: {work}\n{text}")
    with gzip.open(path, "wt") as f:
        f.write("".join(parts))


MARKER = {"ffma8": "FFMA", "ffma1": "FFMA", "mufu": "MUFU", "hmma": "HMMA", "mix": "HMMA"}


def programs(path: Path) -> dict:
    """Per kind of work, its loop (the first loop holding its marker instruction) as a
    ``WarpProgram`` and the kernel's iterations that loop body covers (the compiler unrolls)."""
    from flashio.simulator import sass, sass_paths
    from flashio.simulator.sass import WarpProgram

    text = gzip.decompress(path.read_bytes()).decode()
    out = {}
    for part in text.split("// work: ")[1:]:
        work, listing = part.split("\n", 1)
        code = sass.parse(listing)["share"]
        lo, hi = sass_paths.loops(code, MARKER[work])[0]
        prog = WarpProgram.from_instructions(work, sass_paths.straight_path(code, lo, hi))
        counts = prog.counts()
        per_iter = {"ffma8": ("fma", 128), "ffma1": ("fma", 128), "mufu": ("mufu", 32),
                    "hmma": ("hmma", 4), "mix": ("hmma", 2)}[work]  # fmt: skip
        out[work] = (prog, max(1, counts.get(per_iter[0], 0) // per_iter[1]))
    return out


def replayed(prog, unrolled: int, ctas: int, warps: int, iters: int, age_first: bool) -> dict:
    """:func:`shares` of the warp replay: ``ctas`` CTAs of ``warps`` warps on one SM (each
    sub-partition its warps), ``iters`` iterations."""
    from flashio import simulator
    from flashio.simulator import issue
    from flashio.simulator.warp_replay import execute_roles, smsp_warps

    model = issue.issue_model(simulator.load_gpu("h200-measured"))
    cta_of = smsp_warps(warps, ctas, 4)
    steps = max(1, iters // unrolled)
    _, _, ends = execute_roles([prog], model, warps, ctas, steps, cta_of, None, 0, True, age_first)
    until = ends[:, -1].min()  # while every warp of the sub-partition runs
    done = np.array([(ends[cta_of == c] <= until).sum() for c in range(ctas)], float)
    finish = np.array([ends[cta_of == c, -1].max() for c in range(ctas)])
    return {
        "share_by_age": list(done / done.sum()),
        "finish_gap": float(np.ptp(finish) / finish.max()),
    }


def replay_table(path: Path, sass_path: Path) -> str:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    progs = programs(sass_path)
    lines = [f"{'CTAs x warps':>12} {'work':>6}  finish gap: H200, replay oldest first, replay "
             "longest waiting;  shares by age: H200 / oldest first"]  # fmt: skip
    for run in doc["runs"]:
        if run["rep"] != 1 or run["ctas_per_sm"] == 1:
            continue
        gpu = shares(run)
        prog, unrolled = progs[run["work"]]
        args = (prog, unrolled, run["ctas_per_sm"], run["warps"], run["iters"])
        age, fair = replayed(*args, age_first=True), replayed(*args, age_first=False)
        share = " ".join(f"{x:.2f}" for x in gpu["share_by_age"])
        share_age = " ".join(f"{x:.2f}" for x in age["share_by_age"])
        lines.append(f"{run['ctas_per_sm']:>5} x {run['warps']:<4} {run['work']:>6}  "
                     f"{gpu['finish_gap']:6.1%} {age['finish_gap']:6.1%} {fair['finish_gap']:6.1%}"
                     f";  {share} / {share_age}")  # fmt: skip
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="directory for sched_share.json.gz (runs on the GPU)")
    ap.add_argument("--summary", type=Path, help="a sched_share.json.gz to summarize")
    ap.add_argument("--sass", type=Path, help="write each kind's SASS here (needs NVRTC)")
    ap.add_argument("--replay", type=Path, help="a sched_share.json.gz to set the replay beside")
    args = ap.parse_args(argv)
    if args.summary:
        print(summary(args.summary))
        return
    if args.sass:
        write_sass(args.sass)
        return
    if args.replay:
        print(replay_table(args.replay, args.replay.with_name("sched_share.sass.gz")))
        return
    if not args.out:
        ap.error("--out DIR (measure), --summary FILE, --sass FILE or --replay FILE")
    import cupy

    from benchmarks.gpu_measure import provenance

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = cupy.cuda.Device(0)
    sms = dev.attributes["MultiProcessorCount"]
    per_sm = dev.attributes["MaxSharedMemoryPerMultiprocessor"]
    doc = {"provenance": provenance(), "sms": sms, "checkpoints": CHECKPOINTS,
           "runs": measure(sms, per_sm)}  # fmt: skip
    with gzip.open(out / "sched_share.json.gz", "wt") as f:
        json.dump(doc, f)
    print(summary(out / "sched_share.json.gz"))


if __name__ == "__main__":
    main()
