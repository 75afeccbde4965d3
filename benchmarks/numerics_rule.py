"""Where the flash-attention error rule applies, and how close the executors come to the rounding
bound, over many random shapes.

    python -m benchmarks.numerics_rule [DRAWS [DTYPE ...]]

For each dtype, schedule and sequence length N (d = 16, and d = 32 from N = 32 on), draws DRAWS
shapes (batch, heads, kv heads, causal) and block sizes from 1 to N, and prints

- the worst err / (2 * same-precision reference error + floor): the rule holds where <= 1;
- the worst max(|computed - exact| / rounding bound): at most 1 by construction of the bound
  (tests/_rounding_bound.py); how far below 1 says how tight the bound is.

docs/numerics.md quotes its output. Run it under several OPENBLAS_CORETYPE values to see the
spread across BLAS kernels.
"""

from __future__ import annotations

import argparse

import numpy as np

from flashio import kernels
from tests._accuracy import bound_ratios, rule_ratios
from tests._util import random_inputs

NAMES = ("standard", "flash1", "flash2", "standard_bwd", "flash1_bwd", "flash2_bwd")
SEQ_LENS = (1, 2, 3, 4, 8, 16, 32, 48)


def _worst(name, dtype, n, d, draws, rng):
    rule = bound = 0.0
    for seed in range(draws):
        heads, kv_heads = ((1, 1), (2, 2), (2, 1), (4, 2))[rng.integers(4)]
        causal = bool(rng.integers(2))
        shape = kernels.AttentionShape(1, heads, n, d, dtype, causal=causal, kv_heads=kv_heads)
        bq, bkv = (int(x) for x in rng.integers(1, n + 1, size=2))
        sched = kernels.schedule(name, shape, block_q=bq, block_kv=bkv, warps=2)
        arrays = random_inputs(shape, seed=seed, backward=name.endswith("_bwd"))
        got, _ = kernels.execute(sched, *arrays)
        bound = max(bound, *bound_ratios(sched, arrays, got))
        if dtype != "fp32":
            rule = max(rule, *rule_ratios(sched, arrays, got))
    return rule, bound


def main(argv=None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.numerics_rule", description=__doc__.split("\n\n", 1)[0],
        epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    p.add_argument("draws", nargs="?", type=int, default=40, help="shapes per cell (40)")
    p.add_argument(
        "dtypes",
        nargs="*",
        default=["fp16", "bf16", "fp32"],
        choices=["fp16", "bf16", "fp32"],
        help="dtypes (all three)",
    )
    a = p.parse_args(argv)
    draws, dtypes = a.draws, a.dtypes
    rng = np.random.default_rng(0)
    print(f"{draws} draws per cell; rule ratio / bound ratio (worst); rule not used in fp32")
    print("dtype  N   d  " + "  ".join(f"{n:>13}" for n in NAMES))
    for dtype in dtypes:
        for n in SEQ_LENS:
            d = 32 if n >= 32 else 16
            cells = [_worst(name, dtype, n, d, draws, rng) for name in NAMES]
            row = "  ".join(f"{r:6.2f}/{b:6.3f}" for r, b in cells)
            print(f"{dtype:5} {n:3} {d:3}  {row}", flush=True)


if __name__ == "__main__":
    main()
