"""The ``flashio sweep`` verb: a grid of GPUs (real or scaled), schedules, shapes and tiles,
run here or on a Dask cluster, resumable, written to CSV and Parquet with a plot."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import asdict
from pathlib import Path

from flashio import kernels, simulator
from flashio.analysis.cli import options as opts
from flashio.analysis.present.progress import Progress


@contextlib.contextmanager
def _dask_client(a):
    """A Dask client for --workers N (a local cluster) or --scheduler ADDRESS, else None."""
    if a.workers is None and a.scheduler is None:
        yield None
        return
    if a.workers is not None and a.scheduler is not None:
        raise simulator.UsageError("give --workers (a local cluster) or --scheduler, not both")
    if a.workers is not None and a.workers < 1:
        raise simulator.UsageError(f"--workers must be at least 1, got {a.workers}")
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise simulator.UsageError(
            "--workers and --scheduler need Dask: pip install 'flashio[sweep]'"
        ) from None
    if a.scheduler is not None:
        with Client(a.scheduler, timeout="10s") as client:
            yield client
        return
    with LocalCluster(n_workers=a.workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:  # fmt: skip
        yield client


def _normalise(a) -> None:
    """Defaults that depend on other options, and the list options flattened and checked."""
    a.gpu = a.gpu or [opts.DEFAULT_GPU]
    a.schedule = a.schedule or ["standard", "flash2"]
    try:
        for name in ("seq_len", "head_dim", "block"):
            setattr(a, name, opts.positive(getattr(a, name), "--" + name.replace("_", "-")))
        for name in ("sram_scale", "hbm_scale", "sm_scale", "l2_scale"):
            setattr(a, name, opts.flatten(getattr(a, name)))
    except argparse.ArgumentTypeError as exc:
        raise simulator.UsageError(str(exc)) from None


def cmd_sweep(a) -> int:
    _normalise(a)
    from flashio.analysis.explore import sweep
    from flashio.analysis.explore import sweep_files as files
    from flashio.analysis.present import plots

    if Path(a.out).is_dir():
        raise simulator.FileError(f"--out {a.out}: is a folder; give the path of a CSV file")
    gpus = [
        g
        for name in a.gpu
        for g in sweep.gpu_variants(
            simulator.load_gpu(name), a.sram_scale, a.hbm_scale, a.sm_scale, a.l2_scale
        )
    ]
    shapes = [opts.shape_of(a, seq_len=n, head_dim=d) for n in a.seq_len for d in a.head_dim]
    blocks = [(b, b) for b in a.block] if a.block else [(None, None)]
    out = Path(a.out)
    partial = out.with_name(out.name + ".partial")  # each point as it finishes, for --resume
    old = {}
    if a.resume:
        old = {files.row_key(asdict(r)): r for f in (out, partial) for r in files.read_rows(f)}
        if partial.exists():  # an earlier flashio's columns: appended rows need this one's
            files.write_csv(files.read_rows(partial), partial)
    elif partial.exists():
        partial.unlink()  # a fresh sweep: an interrupted one's points are not reused
    mode = "sampled" if a.sampled else "exact"
    points = sweep.sweep_points(gpus, a.schedule, shapes, blocks, [a.warps], mode, a.compiled)
    with Progress(quiet=a.json) as bar, _dask_client(a) as client:
        new = sweep.run_sweep(
            gpus, a.schedule, shapes, blocks, [a.warps],
            progress=lambda done, total, label: bar("points", label, done, total),
            client=client, skip=frozenset(old), on_row=lambda r: files.append_csv(r, partial),
            mode=mode, compiled=a.compiled,
        )  # fmt: skip
    by_key = old | {files.row_key(asdict(r)): r for r in new}
    grid = [p.key() for p in points]
    # the grid's rows in its order, then any kept row of an earlier, wider sweep
    rows = [by_key[k] for k in grid] + [r for k, r in old.items() if k not in set(grid)]
    pictures = []  # drawn before the CSV is written, so that a failed plot leaves no CSV
    scaled = [
        x
        for x, scales in (
            ("smem_per_cta_bytes", a.sram_scale),
            ("hbm_bandwidth_bytes_per_s", a.hbm_scale),
            ("sm_count", a.sm_scale),
            ("l2_bytes", a.l2_scale),
        )
        if len(scales) > 1
    ]
    if len(scaled) > 1:  # several resources: time against each, one at a time
        bases = [simulator.load_gpu(name) for name in a.gpu]
        pictures.append(plots.resource_scaling(rows, bases, out.with_suffix(".png")))
    elif len(gpus) > 1 and scaled:
        pictures.append(
            plots.gpu_sweep(rows, scaled[0], out.with_suffix(".png"), "hypothetical GPUs")
        )
    else:
        series = {}
        for r in rows:
            if not r.error:
                series.setdefault(f"{r.schedule} on {r.gpu}", []).append(
                    (r.seq_len, r.global_bytes)
                )
        if series and len({r.seq_len for r in rows}) > 1:
            pictures.append(
                plots.traffic_vs_n(series, "global traffic vs N", out.with_suffix(".png"))
            )
    files.write_csv(rows, out)
    parquet = out.with_suffix(".parquet")
    try:
        files.write_parquet(rows, parquet)
    except simulator.UsageError as exc:  # no pyarrow: the CSV stands alone
        parquet = None
        if not a.json:
            print(f"note: {exc}", file=sys.stderr)
    partial.unlink(missing_ok=True)
    front = sweep.pareto_front(rows) if len(gpus) > 1 else {}
    if a.json:
        print(
            json.dumps(
                {
                    "csv": str(out),
                    "parquet": str(parquet) if parquet else None,
                    "resumed": len(old),
                    "plots": [str(p) for p in pictures],
                    "pareto": [
                        {"workload": list(k), "gpus": [r.gpu for r in pts]}
                        for k, pts in front.items()
                    ],
                    "rows": [asdict(r) for r in rows],
                },
                indent=2,
            )
        )
    else:
        failed = sum(1 for r in rows if r.error)
        kept = f", {len(old)} kept from the earlier run" if old else ""
        also = f" and {parquet}" if parquet else ""
        print(f"{len(rows)} points ({failed} do not fit{kept}) written to {out}{also}")
        for p in pictures:
            print(f"plot: {p}")
        for (name, _, _, n, d, *_), pts in front.items():
            gpus_text = ", ".join(f"{r.gpu} {r.time_s * 1e3:.3f} ms" for r in pts)
            print(f"Pareto front, {name} N={n} d={d} ({len(pts)} GPUs): {gpus_text}")
    return 0


def add_sweep_command(sub) -> None:
    """Register ``sweep`` on the ``flashio`` subparsers."""
    p = sub.add_parser(
        "sweep",
        help="a grid of GPUs, shapes and tiles to CSV plus a plot",
        description="Simulate every combination of GPUs (real, or scaled with --sram-scale, "
        "--hbm-scale, --sm-scale and --l2-scale into hypothetical ones), schedules, sequence "
        "lengths, head dims and square block sizes; write one CSV row per point (points that do "
        "not fit say why), the same rows as Parquet where pyarrow is installed, and a plot "
        "beside the CSV: time against the scaled resource (each one, when several are scaled), "
        "or traffic against N. As flashio simulate does, each point's kernels are priced by "
        "their compiled loops wherever the issue model can (the model validated on the H200, "
        "and on fewer of its SMs: docs/hypothetical-gpus.md), the others at the pipe rates; "
        "the rows say which (pricing, compiled_kernels).",
    )
    opts.add_gpu(p, repeatable=True)
    p.add_argument(
        "--schedule",
        action="append",
        choices=kernels.SCHEDULES,
        metavar="SCHEDULE",
        help="repeatable (default: standard and flash2)",
    )
    opts.add_shape(p, lists=True)
    opts.add_pricing(p, compiled=True)
    t = p.add_argument_group("tiling")
    t.add_argument(
        "--block", type=opts.listed(int), nargs="+", metavar="B",
        help="square block sizes Br = Bc (default: B = M/(4d) on each GPU)",
    )  # fmt: skip
    t.add_argument(
        "--warps", type=int, default=None,
        help=f"warps per CTA (default {kernels.schedules.DEFAULT_WARPS})",
    )  # fmt: skip
    g = p.add_argument_group("hypothetical GPUs: each scale makes a GPU from every --gpu")
    g.add_argument(
        "--sram-scale", type=opts.listed(float), nargs="+", default=[(1.0,)], metavar="X",
        help="scale shared memory per SM and per CTA, e.g. 0.5 1 2 (default 1)",
    )  # fmt: skip
    g.add_argument(
        "--hbm-scale", type=opts.listed(float), nargs="+", default=[(1.0,)], metavar="X",
        help="scale HBM bandwidth, e.g. 1 2 4 (default 1)",
    )  # fmt: skip
    g.add_argument(
        "--sm-scale", type=opts.listed(float), nargs="+", default=[(1.0,)], metavar="X",
        help="scale the SM count (each SM keeps its resources; L2 and HBM stay the chip's), "
        "e.g. 0.0606 0.25 0.5 1 for 8, 33, 66 and 132 SMs of an h200 (default 1)",
    )  # fmt: skip
    g.add_argument(
        "--l2-scale", type=opts.listed(float), nargs="+", default=[(1.0,)], metavar="X",
        help="scale the L2's capacity, e.g. 0.25 1 4 (default 1)",
    )  # fmt: skip
    p.add_argument(
        "--out", default="flashio-out/sweep.csv",
        help="CSV path, the plot beside it (default flashio-out/sweep.csv)",
    )  # fmt: skip
    r = p.add_argument_group("running it")
    r.add_argument("--workers", type=int, metavar="N",
                   help="run the points on a local Dask cluster of N worker processes "
                   "(pip install 'flashio[sweep]'; default: one after another, here)")  # fmt: skip
    r.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="run the points on an existing Dask cluster, e.g. tcp://host:8786",
    )
    r.add_argument("--sampled", action="store_true",
                   help="replay a prefix of each point's grid and extend its steady state "
                   "over the rest (simulate's mode='sampled', docs/model.md 'Speed': time and "
                   "HBM bytes within 1% at long contexts, global bytes exact); the rows say "
                   "which mode made them")  # fmt: skip
    r.add_argument("--resume", action="store_true",
                   help="keep the points already in --out (or saved by an interrupted run) and "
                   "simulate only the others")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print JSON instead of a summary")
    p.set_defaults(func=cmd_sweep)
