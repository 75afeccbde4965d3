"""The ``flashio`` command: thin subcommands over the library."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from flashio import kernels, simulator
from flashio.analysis.cli import options as opts
from flashio.analysis.cli.crosscheck import add_crosscheck_command
from flashio.analysis.cli.docs import add_docs_command
from flashio.analysis.cli.sweep import add_sweep_command
from flashio.analysis.cli.tiling import add_tiling_command
from flashio.analysis.explore import comparison as cmp
from flashio.analysis.explore.search import COMPILED
from flashio.analysis.present import report
from flashio.kernels.registry import spec

EPILOG = """examples:
  flashio demo                                   the main job on the default GPU (h200)
  flashio gpus                                   built-in GPU specs
  flashio tiling --gpu h200 --head-dim 64        B = M/(4d) in both forms, capacity; --search
  flashio crosscheck                             predictions vs the committed H200 measurements
  flashio simulate flash2 --seq-len 8192 --head-dim 128 --block-q 128 --block-kv 64
  flashio simulate flash2 --head-dim 128 --block-q 128 --block-kv 64 --warps 8 --pipe-rates
  flashio simulate flash2 --head-dim 128 --seq-len 16384 --dtype bf16 --impl fa3
  flashio simulate standard --gpu my_gpu.toml --json
  flashio compare --seq-len 1024 --batch 64 --backward --gpu a100-40gb
Every command takes --json for machine-readable output.

exit status: 0 on success; 2 on bad input (arguments, shapes, tilings, GPU spec files, other
files), with "flashio COMMAND: error: ..." on stderr saying what to change; 1 with a Python
traceback on anything else, which is a bug in flashio: please report it. Files are written
whole or not at all: a command that fails leaves no half-written output."""


def _shape_args(p: argparse.ArgumentParser, compiled: bool) -> None:
    """Shape and tiling options, and the pricing pair (``compiled``: the default)."""
    opts.add_shape(p)
    opts.add_tiling(p)
    opts.add_pricing(p, compiled)


def _common(p: argparse.ArgumentParser) -> None:
    opts.add_gpu(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _blocks(a, shape, gpu) -> tuple[int | None, int | None]:
    """--block-q and --block-kv, each defaulting to the other and then to the seed's rule on
    the chosen GPU (with --impl, to the implementation's own tiling; for flash_decode, to
    flash-attn's split-KV tiles)."""
    name = getattr(a, "schedule", None)
    if getattr(a, "impl", None) is not None or (name and spec(name).own_tiles):
        return a.block_q, a.block_kv
    given = [b for b in (a.block_q, a.block_kv) if b is not None]
    bq = a.block_q if a.block_q is not None else given[0] if given else None
    bq = opts.default_block(shape, gpu) if bq is None else bq
    return bq, a.block_kv if a.block_kv is not None else bq


def _shape(a) -> kernels.AttentionShape:
    return opts.shape_of(a)


def _gpu(a) -> simulator.GPUSpec:
    return simulator.load_gpu(a.gpu)


def _options(a) -> dict:
    """simulate()'s keyword for --compiled (none for --pipe-rates: the library's default)."""
    return {"options": COMPILED} if a.compiled else {}


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
    extra = {}
    if spec(a.schedule).needs_sm_count:  # flash-attn's split heuristic sees this GPU's SMs
        extra = {"num_splits": a.num_splits, "sm_count": gpu.sm_count}
    elif a.num_splits is not None:
        raise simulator.UsageError("--num-splits is an option of the flash_decode schedule")
    blocks = _blocks(a, shape, gpu)
    sched = kernels.schedule(a.schedule, shape, *blocks, a.warps, impl=a.impl, **extra)
    show = _progress(not a.json and sys.stderr.isatty())
    timeline = a.perfetto is not None
    if timeline:  # refuse a timeline too large to record before simulating it
        from flashio.simulator import perfetto

        perfetto.check_size(sum(k.ctas for k in sched.kernels))
    if a.sampled and timeline:
        raise simulator.UsageError("--sampled has no timeline: drop --perfetto or --sampled")
    mode = "sampled" if a.sampled else "exact"
    progress = None if a.sampled else show  # the sampled runs are short
    res = simulator.simulate(
        sched, gpu, progress=progress, timeline=timeline, mode=mode, **_options(a)
    )
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
                    "options": dict(sched.options),
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
    _shape_args(p, compiled=True)
    _common(p)
    opts.add_impl(
        p,
        "the implementation that runs the schedule; block sizes and warps not given are its "
        "own for the shape. Its kernels are priced by their compiled code where the census "
        "has it, by a written program for a forward (mma.sync or wgmma), else by the pipe "
        "rates (--pipe-rates: all by the pipe rates)",
    )
    p.add_argument(
        "--num-splits", type=int, default=None, metavar="S",
        help="flash_decode: split the keys S ways (default: flash-attn's heuristic for this "
        "GPU's SMs; the report says what it chose)",
    )  # fmt: skip
    p.add_argument(
        "--sampled", action="store_true",
        help="replay a prefix of the largest kernel's grid exactly and extend its steady "
        "state over the rest, by waves (or, for a causal grid's unlike CTAs, by heads); global "
        "bytes and FLOPs stay exact (simulator.sampled: for long contexts, 14x faster at "
        "N = 128k; the report gives the replayed share and error estimates; a grid of few "
        "waves is replayed whole). Not with --perfetto",
    )  # fmt: skip
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
        "left), all at the pipe rates by default: one model for the three, as FlashAttention-1 "
        "has no compiled kernel here (--compiled prices the others by their kernels).",
    )
    _shape_args(p, compiled=False)
    _common(p)
    p.add_argument("--backward", action="store_true", help="include the backward passes")
    p.set_defaults(func=cmd_compare)

    add_sweep_command(sub)
    add_tiling_command(sub)
    add_crosscheck_command(sub)
    add_docs_command(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
