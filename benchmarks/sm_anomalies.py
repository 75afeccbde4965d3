"""How often, and by how much, more SMs make a schedule slower in the model.

    python -m benchmarks.sm_anomalies [DRAWS]

Draws DRAWS random small schedules and GPUs of 1-12 SMs (L2 on or off), adds 1-8 SMs and prints
every draw that ran slower, then repeats with an idealized memory system (no L2, HBM and SM
memory paths far above demand). The shared L2 and HBM serve requests first come, first served,
so more SMs change which requests wait; docs/hypothetical-gpus.md quotes the output.
"""

from __future__ import annotations

import sys

import numpy as np

from flashio import kernels, simulator


def _draw(rng, h200):
    name = kernels.SCHEDULES[rng.integers(len(kernels.SCHEDULES))]
    shape = kernels.AttentionShape(
        int(rng.integers(1, 3)), int(rng.choice([2, 4])), int(rng.choice([64, 96, 128])),
        int(rng.choice([16, 32])), "fp16", causal=bool(rng.integers(2)),
    )  # fmt: skip
    block = int(rng.choice([16, 32]))
    sched = kernels.schedule(name, shape, block, block, int(rng.choice([2, 4])))
    l2 = h200.l2_bytes if rng.integers(2) else 0
    gpu = h200.replace(sm_count=int(rng.integers(1, 13)), l2_bytes=l2)
    return sched, gpu, int(rng.integers(1, 9))


def main() -> None:
    draws = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    h200 = simulator.load_gpu("h200")
    for ideal in (False, True):
        rng = np.random.default_rng(5)
        slower = []
        for _ in range(draws):
            sched, gpu, extra = _draw(rng, h200)
            if ideal:
                gpu = gpu.replace(l2_bytes=0, hbm_bandwidth_bytes_per_s=1e18,
                                  sm_memory_bytes_per_cycle_per_sm=1e9)  # fmt: skip
            t0 = simulator.simulate(sched, gpu).time_s
            t1 = simulator.simulate(sched, gpu.replace(sm_count=gpu.sm_count + extra)).time_s
            if t1 > t0:
                slower.append(t1 / t0 - 1)
                l2 = "L2" if gpu.l2_bytes else "no L2"
                print(f"  {sched.name} {gpu.sm_count} -> {gpu.sm_count + extra} SMs, {l2}: "
                      f"+{100 * (t1 / t0 - 1):.3f}%")  # fmt: skip
        what = "idealized memory" if ideal else "h200 memory system"
        worst = f", worst +{100 * max(slower):.2f}%" if slower else ""
        print(f"{what}: {len(slower)} of {draws} draws slower with more SMs{worst}")


if __name__ == "__main__":
    main()
