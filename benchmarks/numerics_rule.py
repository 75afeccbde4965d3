"""How close each schedule comes to the flash-attention error rule, on many tiny shapes.

    python -m benchmarks.numerics_rule [SEEDS]

For N = 4..8, d = 16, blocks 4x2, causal and not, prints per dtype the largest
err / (2 * reference error + rounding-step floor) over all schedules and seeds (the rule
holds when this is <= 1). docs/numerics.md quotes its output.
"""

from __future__ import annotations

import sys

import numpy as np

import kernels
from tests._util import random_inputs
from tests.test_schedules import _outputs, _quantum, _reference

NAMES = ("standard", "flash1", "flash2", "standard_bwd", "flash1_bwd", "flash2_bwd")


def main() -> None:
    seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    worst: dict[str, tuple] = {}
    for seed in range(seeds):
        for name in NAMES:
            for dtype in ("fp16", "bf16", "fp32"):
                shape = kernels.AttentionShape(
                    1, 1, 4 + seed % 5, 16, dtype, causal=bool(seed % 2)
                )
                sched = kernels.schedule(name, shape, block_q=4, block_kv=2)
                arrays = random_inputs(shape, seed=seed, backward=name.endswith("_bwd"))
                exact = _reference(sched, [a.astype(np.float64) for a in arrays])
                same = _reference(sched, arrays, dtype=dtype)
                got, _ = kernels.execute(sched, *arrays)
                for g, e, p in zip(_outputs(got), exact, same, strict=True):
                    ref_err = np.abs(p.astype(np.float64) - e).max()
                    err = np.abs(g.astype(np.float64) - e).max()
                    ratio = err / (2 * ref_err + _quantum(e, dtype))
                    if ratio > worst.get(dtype, (0.0,))[0]:
                        worst[dtype] = (ratio, name, seed, shape.seq_len)
    print(f"{seeds} seeds x {len(NAMES)} schedules, N = 4..8, d = 16, blocks 4x2")
    for dtype, (ratio, name, seed, n) in sorted(worst.items()):
        print(f"{dtype}: worst ratio {ratio:.2f} ({name}, seed {seed}, N={n})")


if __name__ == "__main__":
    main()
