"""The ``flashio`` command: thin subcommands over the library."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import asdict
from pathlib import Path

from flashio import kernels, simulator
from flashio.analysis.cli import options as opts
from flashio.analysis.cli.crosscheck import add_crosscheck_command
from flashio.analysis.cli.docs import add_docs_command
from flashio.analysis.cli.tiling import add_tiling_command
from flashio.analysis.explore import comparison as cmp
from flashio.analysis.explore.search import COMPILED
from flashio.analysis.present import report

EPILOG = """examples:
  flashio demo                                   the main job on the default GPU (h200)
  flashio gpus                                   built-in GPU specs
  flashio tiling --gpu h200 --head-dim 64        B = M/(4d) in both forms, capacity; --search
  flashio crosscheck                             predictions vs the committed H200 measurements
  flashio simulate flash2 --seq-len 8192 --head-dim 128 --block-q 128 --block-kv 64
  flashio simulate flash2 --head-dim 128 --block-q 128 --block-kv 64 --warps 8 --compiled
  flashio simulate flash2 --head-dim 128 --seq-len 16384 --dtype bf16 --impl fa3 --compiled
  flashio simulate standard --gpu my_gpu.toml --json
  flashio compare --seq-len 1024 --batch 64 --backward --gpu a100-40gb
Every command takes --json for machine-readable output.

exit status: 0 on success; 2 on bad input (arguments, shapes, tilings, GPU spec files, other
files), with "flashio COMMAND: error: ..." on stderr saying what to change; 1 with a Python
traceback on anything else, which is a bug in flashio: please report it. Files are written
whole or not at all: a command that fails leaves no half-written output."""


def _shape_args(p: argparse.ArgumentParser) -> None:
    opts.add_shape(p)
    opts.add_tiling(p)
    p.add_argument(
        "--compiled",
        action="store_true",
        help="price each kernel the instruction census holds at this tiling (this project's "
        "CUDA kernels, and other implementations' where measured) by its compiled main loop, "
        "and a wgmma forward outside it by a program written from its description: the issue "
        "model, validated against the H200 (docs/validation.md); the others keep the pipe "
        "rates (default: the pipe rates)",
    )


def _common(p: argparse.ArgumentParser) -> None:
    opts.add_gpu(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _blocks(a, shape, gpu) -> tuple[int | None, int | None]:
    """--block-q and --block-kv, each defaulting to the other and then to the seed's rule on
    the chosen GPU (with --impl, to the implementation's own tiling)."""
    if getattr(a, "impl", None) is not None:
        return a.block_q, a.block_kv
    given = [b for b in (a.block_q, a.block_kv) if b is not None]
    bq = a.block_q if a.block_q is not None else given[0] if given else None
    bq = opts.default_block(shape, gpu) if bq is None else bq
    return bq, a.block_kv if a.block_kv is not None else bq


def _shape(a) -> kernels.AttentionShape:
    return kernels.AttentionShape(
        a.batch, a.heads, a.seq_len, a.head_dim, a.dtype, causal=a.causal, kv_heads=a.kv_heads
    )


def _gpu(a) -> simulator.GPUSpec:
    return simulator.load_gpu(a.gpu)


def _options(a) -> dict:
    """simulate()'s keyword for --compiled (none without it: the default model)."""
    return {"options": COMPILED} if getattr(a, "compiled", False) else {}


def _progress(enabled: bool):
    def show(kernel, done, total):
        if enabled:
            print(f"\r  kernel {kernel}: {done}/{total} CTAs", end="", file=sys.stderr, flush=True)
            if done == total:
                print(file=sys.stderr)

    return show


def cmd_gpus(a) -> int:
    specs = [simulator.load_gpu(n) for n in simulator.builtin_gpus()]
    if a.json:
        derived = [*sorted(simulator.gpu.DERIVED), "sm_memory_bandwidth_bytes_per_s"]
        out = [{**s.to_dict(), "derived": {k: getattr(s, k) for k in derived}} for s in specs]
        print(json.dumps(out, indent=2))
    else:
        print(report.gpu_table(specs))
    return 0


def cmd_simulate(a) -> int:
    gpu, shape = _gpu(a), _shape(a)
    sched = kernels.schedule(a.schedule, shape, *_blocks(a, shape, gpu), a.warps, impl=a.impl)
    show = _progress(not a.json and sys.stderr.isatty())
    timeline = a.perfetto is not None
    if timeline:  # refuse a timeline too large to record before simulating it
        from flashio.simulator import perfetto

        perfetto.check_size(sum(k.ctas for k in sched.kernels))
    res = simulator.simulate(sched, gpu, progress=show, timeline=timeline, **_options(a))
    if a.save_trace:  # after the simulation, so that a tiling that does not fit writes nothing
        sched.trace().save(a.save_trace)
    if timeline:
        perfetto.write(res, sched, a.perfetto)
    if a.json:
        print(
            json.dumps(
                {
                    "schedule": a.schedule,
                    "shape": sched.shape.to_dict(),
                    "block_q": sched.block_q,
                    "block_kv": sched.block_kv,
                    "warps": sched.warps,
                    "impl": sched.implementation.name,
                    "result": res.to_dict(),
                },
                indent=2,
            )
        )
    else:
        print(report.result_text(sched, res, gpu))
    return 0


def cmd_compare(a) -> int:
    gpu, shape = _gpu(a), _shape(a)
    names = cmp.FORWARD + (cmp.BACKWARD if a.backward else ())
    say = (lambda n: print(f"  simulating {n} ...", file=sys.stderr)) if not a.json else None
    rows = cmp.compare(
        shape, gpu, names, *_blocks(a, shape, gpu), a.warps, progress=say, **_options(a)
    )
    if a.json:
        print(
            json.dumps(
                {"gpu": gpu.name, "shape": shape.to_dict(), "rows": [r.to_dict() for r in rows]},
                indent=2,
            )
        )
    else:
        print(report.comparison_table(rows, shape, gpu))
    return 0


def _bar(done: int, total: int, label: str) -> None:
    """Progress on stderr: a redrawn bar on a terminal, a line per tenth otherwise."""
    if sys.stderr.isatty():
        fill = 30 * done // max(total, 1)
        print(
            f"\r[{'#' * fill}{'.' * (30 - fill)}] {done}/{total} {label:<48}",
            end="\n" if done == total else "",
            file=sys.stderr,
            flush=True,
        )
    elif total and (done == total or done * 10 // total != (done - 1) * 10 // total):
        print(f"  {done}/{total} {label}", file=sys.stderr, flush=True)


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


def cmd_sweep(a) -> int:
    from flashio.analysis.explore import sweep
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
    shapes = [
        kernels.AttentionShape(
            a.batch, a.heads, n, d, a.dtype, causal=a.causal, kv_heads=a.kv_heads
        )
        for n in a.seq_len
        for d in a.head_dim
    ]
    blocks = [(b, b) for b in a.block] if a.block else [(None, None)]
    out = Path(a.out)
    partial = out.with_name(out.name + ".partial")  # each point as it finishes, for --resume
    old = {}
    if a.resume:
        old = {sweep.row_key(asdict(r)): r for f in (out, partial) for r in sweep.read_rows(f)}
    elif partial.exists():
        partial.unlink()  # a fresh sweep: an interrupted one's points are not reused
    points = sweep.sweep_points(gpus, a.schedule, shapes, blocks, [a.warps])
    with _dask_client(a) as client:
        new = sweep.run_sweep(
            gpus, a.schedule, shapes, blocks, [a.warps], progress=None if a.json else _bar,
            client=client, skip=frozenset(old), on_row=lambda r: sweep.append_csv(r, partial),
        )  # fmt: skip
    by_key = old | {sweep.row_key(asdict(r)): r for r in new}
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
    sweep.write_csv(rows, out)
    parquet = out.with_suffix(".parquet")
    try:
        sweep.write_parquet(rows, parquet)
    except simulator.UsageError as exc:  # no pyarrow: the CSV stands alone
        parquet = None
        if not a.json:
            print(f"note: {exc}", file=sys.stderr)
    partial.unlink(missing_ok=True)
    if a.json:
        print(
            json.dumps(
                {
                    "csv": str(out),
                    "parquet": str(parquet) if parquet else None,
                    "resumed": len(old),
                    "plots": [str(p) for p in pictures],
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
    return 0


def cmd_demo(a) -> int:
    from flashio.analysis.explore.demo import run_demo

    return run_demo(_gpu(a), Path(a.out), as_json=a.json)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flashio",
        description="GPU memory-hierarchy simulator and IO-complexity analyzer for attention "
        "kernels: how many bytes standard attention and FlashAttention move through L2 and HBM, "
        "and how long they take, on real or hypothetical GPUs.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"flashio {opts.version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser(
        "demo",
        help="the main job: standard vs FlashAttention-1 vs -2 on a GPU",
        description="Simulate standard attention, FlashAttention-1 and -2 (forward "
        "and backward) for a GPT-style shape on the GPU, print the comparison, and "
        "write JSON and plots into a folder.",
    )
    _common(p)
    p.add_argument(
        "--out", default="flashio-out", help="folder for JSON and plots (default flashio-out)"
    )
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser(
        "gpus",
        help="list the built-in GPU specs",
        description="Table of the built-in GPU specs; write your own TOML file "
        "(docs/gpus.md) and pass it as --gpu PATH.",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_gpus)

    p = sub.add_parser(
        "simulate",
        help="simulate one schedule on one GPU",
        description="Replay one schedule's trace on a GPU: global (SM-side) and "
        "HBM bytes per tensor, occupancy, time and what bounds it.",
    )
    p.add_argument(
        "schedule",
        choices=kernels.SCHEDULES,
        metavar="SCHEDULE",
        help="one of: " + ", ".join(kernels.SCHEDULES),
    )
    _shape_args(p)
    _common(p)
    p.add_argument(
        "--impl",
        default=None,
        choices=sorted(kernels.IMPLEMENTATIONS),
        metavar="NAME",
        help="the implementation that runs the schedule: "
        + ", ".join(sorted(kernels.IMPLEMENTATIONS))
        + " (docs/implementations.md); block sizes and warps not given are its own for the "
        "shape. With --compiled its kernels are priced by their compiled code where the census "
        "has it, by a written program for a wgmma forward (fa3), else by the pipe rates "
        "(default: this project's kernels)",
    )
    p.add_argument("--save-trace", metavar="FILE.npz", help="also write the trace to this file")
    p.add_argument(
        "--perfetto", metavar="FILE.json",
        help="also write the timeline as trace-event JSON for ui.perfetto.dev or "
        "chrome://tracing: a track per SM and CTA slot, a slice per CTA, counters of resident "
        "CTAs and traffic (simulator.perfetto)",
    )  # fmt: skip
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser(
        "compare",
        help="standard vs flash1 vs flash2 side by side",
        description="FLOPs, global GB, HBM GB and time of standard attention, "
        "FlashAttention-1 and -2 on one shape (the FlashAttention paper's Fig. 2, "
        "left).",
    )
    _shape_args(p)
    _common(p)
    p.add_argument("--backward", action="store_true", help="include the backward passes")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser(
        "sweep",
        help="a grid of GPUs, shapes and tiles to CSV plus a plot",
        description="Simulate every combination of GPUs (real, or scaled with --sram-scale, "
        "--hbm-scale and --sm-scale into hypothetical ones), schedules, sequence lengths, head "
        "dims and square block sizes; write one CSV row per point (points that do not fit say "
        "why) and a plot beside the CSV, against the first scaled property.",
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
    r.add_argument("--resume", action="store_true",
                   help="keep the points already in --out (or saved by an interrupted run) and "
                   "simulate only the others")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print JSON instead of a summary")
    p.set_defaults(func=cmd_sweep)

    add_tiling_command(sub)
    add_crosscheck_command(sub)
    add_docs_command(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "sweep":
        args.gpu = args.gpu or [opts.DEFAULT_GPU]
        args.schedule = args.schedule or ["standard", "flash2"]
        try:
            for name in ("seq_len", "head_dim", "block"):
                flag = "--" + name.replace("_", "-")
                setattr(args, name, opts.positive(getattr(args, name), flag))
            for name in ("sram_scale", "hbm_scale", "sm_scale", "l2_scale"):
                setattr(args, name, opts.flatten(getattr(args, name)))
        except argparse.ArgumentTypeError as exc:
            print(f"flashio sweep: error: {exc}", file=sys.stderr)
            return 2
    try:
        return args.func(args)
    except simulator.FlashioError as exc:  # bad input; anything else is a bug: a traceback
        print(f"flashio {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into head & co.: stop quietly
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
