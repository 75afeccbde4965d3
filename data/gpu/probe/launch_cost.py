"""Timed launches against back-to-back ones: what the resident-CTA table's milliseconds hold
besides the kernel.

occupancy.json timed this project's 64x64, 4-warp forward (d = 64, B x H = 1 x 16, N = 4096,
bf16) with one CTA per SM at 0.560 ms; Nsight Compute's serialized run of the same launch
(lone_cta_ncu.csv.gz) took 0.514 ms, 913 k SM cycles at 1.79 GHz. The gap is 35-50 us for
every forward (one to three CTAs an SM, d = 64 and 128) and 5-13 us for the backward: about
constant, as a cost of each timed launch would be, and not in proportion, as a lower clock
would be. occupancy.py times each launch alone (CUDA events around it, the stream synchronized
after each), over input sets rotated so that the L2 holds none of them.

This probe times the same kernels (lone_cta.py's launches: the forward at d = 64 with 1 .. 3
CTAs an SM, the backward at d = 64 with 1 and 2) both ways, in one process: each launch
alone, as occupancy.py does, and ``BURST`` launches back to back between two events (over
the same rotated inputs), whose mean has no idle GPU before it. Equal times: the gap is the
profiler's; the burst as fast as Nsight Compute's run: a cost of launching from idle.

    python data/gpu/probe/launch_cost.py --out DIR      # on the GPU: DIR/launch_cost.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lone_cta import launches

from benchmarks.gpu_measure import _random_inputs
from benchmarks.gpu_timing import n_sets_for, time_events

BURST = 20  # launches between the events of one burst
REPS = 15  # timed launches alone, and bursts


def measure(reps: int = REPS) -> list[dict]:
    import cupy

    l2 = cupy.cuda.runtime.getDeviceProperties(0)["l2CacheSize"]
    rows = []
    for ck, row in launches():
        if row["head_dim"] != 64:
            continue
        sh = ck.sched.shape
        n_in = 4 if row["schedule"] == "flash2_bwd" else 3
        dims = (sh.batch, sh.heads, sh.seq_len, sh.head_dim)
        n_sets = n_sets_for(math.prod(dims) * 2 * n_in, l2)
        sets = [ck.alloc(*_random_inputs(dims, n_in, sh.dtype)) for _ in range(n_sets)]
        main = next(i for i, ln in enumerate(ck.launches) if ln.function == row["kernel"])
        alone = time_events(
            lambda i, ev, ck=ck, sets=sets: ck.launch(sets[i], events=ev), n_sets, reps,
            n_events=len(ck.launches) + 1,
        )  # fmt: skip

        def burst(i, ev, ck=ck, sets=sets):
            if ev is not None:
                ev[0].record()
            for j in range(BURST if ev is not None else 1):
                ck.launch(sets[(i + j) % len(sets)])
            if ev is not None:
                ev[1].record()

        back = time_events(burst, n_sets, reps)
        out = {
            **row,
            "launches": len(ck.launches),
            "alone_main_ms": alone["parts_median_ms"][main],
            "alone_ms": alone["median_ms"],
            "burst_ms": back["median_ms"] / BURST,
            "burst_min_ms": back["min_ms"] / BURST,
        }
        rows.append(out)
        print(out, flush=True)
        del sets
        cupy.get_default_memory_pool().free_all_blocks()
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="directory for launch_cost.json")
    ap.add_argument("--reps", type=int, default=REPS)
    args = ap.parse_args(argv)
    from isa import provenance

    doc = {"provenance": provenance(), "burst": BURST, "reps": args.reps,
           "rows": measure(args.reps)}  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "launch_cost.json").write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
