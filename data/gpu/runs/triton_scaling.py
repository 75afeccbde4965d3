"""The Triton FA2 forward (benchmarks/triton_attention.py) at its five tilings over N: how its
time per key block changes with the sequence length. On the H200 its 128x64 tilings at d = 128
take 1.4 us a step (SM time) at N = 1k-4k and 1.0 us from 8k to 16k, where its other tilings
change by 5-8% (data/impl/impl_measure.json); this run reads the cause off Nsight Compute.

    python data/gpu/runs/triton_scaling.py --time OUT.json   # CUDA events, median of REPS
    python data/gpu/runs/triton_scaling.py --ncu             # one launch each, for ncu

B = 1, H = 16, bf16, non-causal, d = 128 at N = 2048..16384 and d = 64 at 4096 and 16384; the
tilings of data/impl/impl_measure.json. Timing as benchmarks/impl_measure does it: a sleep
kernel queued before the start event, inputs rotated among sets that exceed 3x the L2. Under
ncu, one warm-up launch of each configuration and then one launch, printed as a JSON line.
Run under data/gpu/runs/triton_scaling_run.sh.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks import triton_attention as ta

CASES = [(128, n) for n in (2048, 4096, 8192, 16384)] + [(64, n) for n in (4096, 16384)]
REPS = 20
HEADS = 16


def tilings(d: int) -> list[list[int]]:
    meta = json.loads(Path("data/impl/impl_measure.json").read_text())["triton_tilings"]
    return [t["tiling"] for t in meta if t["head_dim"] == d and not t["causal"]]


def inputs(n: int, d: int, sets: int):
    return [
        [torch.randn(1, HEADS, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
        for _ in range(sets)
    ]


def sets_for(n: int, d: int) -> int:
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    per_set = 3 * HEADS * n * d * 2
    return max(1, -(-3 * l2 // per_set))


def time_all(out: Path) -> None:
    rows = []
    for d, n in CASES:
        bufs = inputs(n, d, sets_for(n, d))
        for bm, bn, w, st in tilings(d):
            for i in range(3):
                ta.run(*bufs[i % len(bufs)], False, bm, bn, w, st)
            torch.cuda.synchronize()
            samples = []
            for r in range(REPS):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda._sleep(2_000_000)
                a.record()
                ta.run(*bufs[r % len(bufs)], False, bm, bn, w, st)
                b.record()
                b.synchronize()
                samples.append(a.elapsed_time(b))
            row = {
                "head_dim": d,
                "seq_len": n,
                "tiling": [bm, bn, w, st],
                "median_ms": statistics.median(samples),
                "min_ms": min(samples),
                "max_ms": max(samples),
                "samples_ms": [round(x, 5) for x in samples],
            }
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "samples_ms"}), flush=True)
        del bufs
    prov = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "cuda": torch.version.cuda,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "heads": HEADS,
        "batch": 1,
        "dtype": "bf16",
        "reps": REPS,
        "command": "bash data/gpu/runs/triton_scaling_run.sh",
    }
    out.write_text(json.dumps({"provenance": prov, "rows": rows}, indent=1))


def ncu_launches() -> None:
    for d, n in CASES:
        q, k, v = inputs(n, d, 1)[0]
        for bm, bn, w, st in tilings(d):
            ta.run(q, k, v, False, bm, bn, w, st)  # compile and warm outside the profiled one
            torch.cuda.synchronize()
            ta.run(q, k, v, False, bm, bn, w, st)
            torch.cuda.synchronize()
            print(json.dumps({"tiling": [bm, bn, w, st], "shape": [1, HEADS, n, d]}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time", type=Path, help="write the timings here")
    ap.add_argument("--ncu", action="store_true", help="launch each configuration for ncu")
    a = ap.parse_args()
    if a.time:
        time_all(a.time)
    if a.ncu:
        ncu_launches()


if __name__ == "__main__":
    main()
