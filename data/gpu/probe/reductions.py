"""What the backward's dQ reductions cost: this project's flash2_bwd with dQ's partial sums sent
elsewhere, timed on n SMs of the H200 (CUDA green contexts, as sm_scaling.py).

kernels/cuda/flash2_bwd.cu adds each step's partial dQ_i into the fp32 accumulator with
``red.global.add.v2.f32``; every CTA of a head adds into the same rows, and the CTAs of a wave
walk the Q blocks together. Its probe-only define DQ_TARGET sends the same values

- 0: into the shared rows (the kernel as it runs; the default build, byte-identical);
- 1: by the same reductions into a tile of the CTA's own (no other CTA adds to its addresses);
- 2: by plain stores into that tile (bytes to the L2 without the read-modify-write);
- 3: nowhere (summed into a register; the dQ products and their scaling remain).

So 0 against 1 is what CTAs contending for the same addresses cost, 1 against 2 what an atomic
costs over a store, and 2 against 3 what sending the bytes costs at all; each at n SMs, where n
sets how many CTAs of one head run at once. For each n in --sms, each configuration of CONFIGS
and each target it times the main kernel (CUDA events around each of the schedule's launches,
median of --reps after warm-up, inputs rotated past the L2, as benchmarks/gpu_measure.py), and
records the registers and local memory of every build.

    python data/gpu/probe/reductions.py --out DIR [--sms 8 16 32 64 96 132] [--reps 10]

Writes DIR/reductions.json (provenance, per n the SMs the context got, per configuration and
target the median milliseconds of each launch).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sm_scaling import GreenContext, compiled, distinct_sms, new_doc

from benchmarks.gpu_measure import time_events
from flashio.kernels import gpu

SMS = (8, 16, 32, 64, 96, 132)
TARGETS = {0: "shared red", 1: "private red", 2: "private store", 3: "none"}
# (head_dim, seq_len, (block_q, block_kv, warps)); batch 1, 16 heads, bf16: sm_scaling's four
CONFIGS = ((64, 8192, (64, 64, 4)), (64, 8192, (64, 128, 8)), (128, 8192, (64, 64, 4)),
           (128, 8192, (64, 128, 8)))  # fmt: skip


def variant(base: gpu.CompiledSchedule, target: int) -> gpu.CompiledSchedule:
    """``base`` (a compiled flash2_bwd) rebuilt with DQ_TARGET = ``target``."""
    if target == 0:
        return base
    defs = (*gpu.defines(base.sched), ("DQ_TARGET", target))
    module = gpu._module(gpu.source(base.sched), gpu.compile_options(defs))
    return gpu.CompiledSchedule(base.sched, module, base.launches, base.forward)


def resources(c: gpu.CompiledSchedule) -> dict:
    f = c.function("flash2_bwd")
    return {"registers": f.num_regs, "local_bytes": f.local_size_bytes}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--sms", type=int, nargs="+", default=list(SMS))
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = new_doc(targets=TARGETS, builds={})
    l2 = doc["provenance"]["l2_bytes"]
    start = time.monotonic()
    for n in args.sms:
        ctx = GreenContext(n)
        row = {"requested_sms": n, "context_sms": ctx.sms, "smids": distinct_sms(ctx)}
        row["kernels"] = []
        print(f"n={n}: context {ctx.sms} SMs, {len(row['smids'])} distinct %smid", flush=True)
        for d, seq, tiles in CONFIGS:
            with ctx.stream:
                _, base, sets = compiled("flash2_bwd", d, seq, tiles, l2)
                for target in TARGETS:
                    c = variant(base, target)
                    label = f"d={d} N={seq} {tiles[0]}x{tiles[1]} w{tiles[2]}"
                    doc["builds"].setdefault(f"{label} target={target}", resources(c))
                    t = time_events(
                        lambda i, ev, c=c, sets=sets: c.launch(sets[i], events=ev),
                        len(sets), args.reps, n_events=len(c.launches) + 1,
                    )  # fmt: skip
                    main_ms = t["parts_median_ms"][1]  # pre, main, post
                    row["kernels"].append(dict(t, config=label, target=target, main_ms=main_ms))
                    print(f"  {label:24s} {TARGETS[target]:14s} {main_ms:9.3f} ms", flush=True)
            del sets
        ctx.close()
        doc["contexts"].append(row)
        doc["wall_s"] = time.monotonic() - start
        (out / "reductions.json").write_text(json.dumps(doc, indent=1, default=str))


if __name__ == "__main__":
    main()
