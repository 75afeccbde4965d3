"""A 1,000-point sweep of hypothetical GPUs at N = 32k, sampled, one after another and on a local
Dask cluster of two workers, side by side: seconds, points per second, and whether the two
Parquet files hold the same rows.

    python -m benchmarks.bench_sweep [--out DIR] [--quick] [--compiled]

FA2 forward (B=1, H=16, N=32768, d=128, fp16, 128x128 tiles) on h200 with 10 SM counts x 10 HBM
bandwidths x 10 L2 sizes (``--quick``: 3 x 3 x 3), priced at the pipe rates, as the figures of
docs/hypothetical-gpus.md were measured (``--compiled``: by the compiled loops, the default of
``flashio sweep``). Each sweep is one ``flashio sweep`` process, timed from the outside
(start-up and writing included); then 27 of the points (3 x 3 x 3) replayed exactly, against
which the sampled rows' largest errors are printed. Needs the
``sweep`` extra (dask, pyarrow).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SM_SCALES = (0.25, 0.33, 0.42, 0.5, 0.58, 0.67, 0.75, 0.83, 0.92, 1.0)
HBM_SCALES = (0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0)
L2_SCALES = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0)


def _sweep(out: Path, scales: tuple[tuple[float, ...], ...], pricing: str, *extra: str) -> float:
    sm, hbm, l2 = ([str(x) for x in s] for s in scales)
    cmd = [
        sys.executable, "-m", "flashio", "sweep", "--gpu", "h200", "--schedule", "flash2",
        "--seq-len", "32768", "--heads", "16", "--head-dim", "128", "--block", "128",
        "--sm-scale", *sm, "--hbm-scale", *hbm, "--l2-scale", *l2, "--out", str(out), pricing,
        *extra,
    ]  # fmt: skip
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="folder for the two sweeps' files (default: a temp)")
    p.add_argument("--quick", action="store_true", help="3 x 3 x 3 points")
    p.add_argument(
        "--compiled", action="store_const", const="--compiled", default="--pipe-rates",
        dest="pricing", help="price by the compiled loops (default: the pipe rates)",
    )  # fmt: skip
    a = p.parse_args()
    import pyarrow.parquet as pq

    few = tuple((s[0], s[4], s[-1]) for s in (SM_SCALES, HBM_SCALES, L2_SCALES))
    scales = few if a.quick else (SM_SCALES, HBM_SCALES, L2_SCALES)
    points = len(scales[0]) * len(scales[1]) * len(scales[2])
    out = a.out or Path(tempfile.mkdtemp(prefix="bench-sweep-"))
    out.mkdir(parents=True, exist_ok=True)
    serial = _sweep(out / "serial.csv", scales, a.pricing, "--sampled")
    dask = _sweep(out / "dask.csv", scales, a.pricing, "--sampled", "--workers", "2")
    exact = _sweep(out / "exact.csv", few, a.pricing)  # 27 of the points, replayed exactly
    tables = {f: pq.read_table(out / f"{f}.parquet").to_pylist() for f in ("serial", "dask")}
    priced = a.pricing.removeprefix("--").replace("-", " ")
    print(f"{points:,} points, flash2 N=32768 H=16 d=128 128x128 on scaled h200s,", end=" ")
    print(f"sampled, {priced}")
    print(f"{'run':>10} {'seconds':>8} {'points/s':>9}")
    for name, s in (("serial", serial), ("workers 2", dask)):
        print(f"{name:>10} {s:>8.1f} {points / s:>9.1f}")
    same = tables["serial"] == tables["dask"]
    print(f"same Parquet rows: {same} ({len(tables['serial']):,} rows); files in {out}")
    sampled = {r["gpu"]: r for r in tables["serial"]}
    errors = {"time_s": [], "hbm_bytes": [], "global_bytes": []}
    for r in pq.read_table(out / "exact.parquet").to_pylist():
        for f, e in errors.items():
            e.append(abs(sampled[r["gpu"]][f] / r[f] - 1))
    print(
        f"27 of the points replayed exactly too ({exact:.1f} s): sampled rows' largest error "
        + ", ".join(f"{f} {max(e):.2%}" for f, e in errors.items())
    )


if __name__ == "__main__":
    main()
