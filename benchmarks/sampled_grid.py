"""The sampled replay against the exact one over the hypothetical GPUs of ``bench_sweep``: the
HBM bytes' error at each SM count and L2 size, where it lies outside the replay's own estimate,
and how much of the grid was replayed.

    python -m benchmarks.sampled_grid             # 10 SM counts x 10 L2 sizes, HBM 1x
    python -m benchmarks.sampled_grid --hbm 0.5

FA2 forward (B=1, H=16, N=32768, d=128, fp16, 128x128 tiles) on ``h200`` scaled as
``flashio sweep --sm-scale ... --l2-scale ...`` scales it (``sweep.gpu_variants``), at the pipe
rates, each point replayed sampled and exactly from one ``Trace``. One cell a point:
replayed share / HBM error (sampled less exact, over exact), ``!`` where the error is beyond
the sampled result's ``hbm_error``, ``*`` where it counts waves of kinds its prefix never
replayed (``Sampling.unseen_waves``). The time's largest error is printed last. About three
minutes on one core.
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.bench_sweep import L2_SCALES, SM_SCALES
from flashio import kernels, simulator
from flashio.analysis.explore.sweep import gpu_variants


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hbm", type=float, default=1.0, help="HBM bandwidth scale (default 1)")
    ap.add_argument("--seq-len", type=int, default=32768)
    args = ap.parse_args(argv)
    shape = kernels.AttentionShape(batch=1, heads=16, seq_len=args.seq_len, head_dim=128,
                                   dtype="fp16")  # fmt: skip
    trace = simulator.Trace.from_source(kernels.schedule("flash2", shape, 128, 128))
    base = simulator.load_gpu("h200")
    print(f"FA2 N={args.seq_len} H=16 d=128 128x128 on h200, HBM {args.hbm:g}x: "
          "replayed share / HBM error of the sampled replay")  # fmt: skip
    print("SMs \\ L2 " + " ".join(f"{c:>13g}x" for c in L2_SCALES))
    rows = []
    for sm in SM_SCALES:
        cells = []
        for gpu in gpu_variants(base, hbm_scales=[args.hbm], sm_scales=[sm], l2_scales=L2_SCALES):
            sampled = simulator.simulate(trace, gpu, mode="sampled")
            exact = simulator.simulate(trace, gpu)
            s = sampled.sampling
            err = sampled.hbm_bytes / exact.hbm_bytes - 1
            time_err = sampled.time_s / exact.time_s - 1
            outside = abs(err) > s.hbm_error + 1e-6
            rows.append((s.replayed_fraction, err, time_err, outside, s.unseen_waves > 0))
            mark = ("!" if outside else " ") + ("*" if s.unseen_waves else " ")
            cells.append(f"{s.replayed_fraction:4.2f}/{err:+7.2%}{mark}")
        print(f"{gpu.sm_count:>9d} " + " ".join(cells), flush=True)
    a = np.array(rows, dtype=float)
    err = np.abs(a[:, 1])
    print(
        f"{len(a)} points: mean share replayed {a[:, 0].mean():.3f}; HBM error over 1% at "
        f"{(err > 0.01).sum()}, over 0.2% at {(err > 0.002).sum()}, largest {err.max():.2%}; "
        f"beyond the estimate at {int(a[:, 3].sum())}; with unseen waves {int(a[:, 4].sum())}; "
        f"time error largest {np.abs(a[:, 2]).max():.3%}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
