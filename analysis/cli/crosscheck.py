"""The ``flashio crosscheck`` verb: simulator predictions next to GPU measurements.

``add_crosscheck_command(subparsers)`` registers the verb on the ``flashio`` parser;
``main(argv)`` runs it alone (``python -m flashio.analysis.cli.crosscheck``). ``--update-doc``
renders docs/validation.md's block and its plot with ``analysis.validation.doc``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from flashio import kernels
from flashio.analysis.cli import options as cli_options
from flashio.analysis.paths import ROOT, docs_dir
from flashio.analysis.validation import calibrate, families, sm_scaling
from flashio.analysis.validation import crosscheck as cc
from flashio.analysis.validation import doc as validation_doc
from flashio.analysis.validation.calibration import load_calibration
from flashio.analysis.validation.doc import DOC, plot, text_table, update_doc
from flashio.simulator import FileError, FlashioError, UsageError

__all__ = ["add_crosscheck_command", "cmd_crosscheck", "main"]


DESCRIPTION = """\
Simulate every measured configuration from the same schedule (block sizes, warps, shape) on
the model of the H200 in analysis/validation/calibration.toml (h200-measured, the issue model,
the launch harness; nothing fitted to an attention kernel's timing) and set the prediction next
to the measurement: time against CUDA-event timings (gpu_measure.json: warm GPU, inputs rotated so
they start outside the L2; the launch harness is modelled), global bytes and HBM bytes
against Nsight Compute (ncu.csv: caches flushed before each kernel, so each kernel is
simulated alone on an empty L2). Errors are predicted / measured - 1; the summary gives MAPE
and the largest error per metric.

FILES default to data/gpu/gpu_measure.json and data/gpu/ncu.csv (with ncu_launches.json beside
it). Your own kernel: give an `ncu --csv --print-units base` report with the metrics
  l1tex__m_xbar2l1tex_read_bytes.sum, l1tex__m_l1tex2xbar_write_bytes.sum,
  dram__bytes_read.sum, dram__bytes_write.sum (and gpu__time_duration.sum)
and --schedule with the shape and tiling it ran: each profiled launch is matched to the
schedule's kernel of the same name, or --kernel, or by position."""

EPILOG = """\
examples:
  flashio crosscheck --jobs 2                  the committed measurements (minutes)
  flashio crosscheck --json data/gpu/ncu.csv   Nsight Compute rows only, as JSON
  flashio crosscheck my_ncu.csv --schedule flash2 --batch 1 --heads 16 --seq-len 4096 \\
      --head-dim 64 --dtype bf16 --block-q 128 --block-kv 128 --warps 8
  flashio crosscheck --by-implementation       flashio, flash-attn2, triton and cuDNN kernels
                                               against the issue model, nothing fitted (a minute)
  flashio crosscheck --sm-scaling              the H200 on 8..132 SMs vs h200 with sm_count=n
  flashio crosscheck --sm-scaling --update-doc regenerate docs/hypothetical-gpus.md's block
  flashio crosscheck --update-doc --jobs 2     regenerate docs/validation.md's tables and plot
  flashio crosscheck --fit                     rewrite calibration.toml's harness"""


def add_crosscheck_command(subparsers) -> argparse.ArgumentParser:
    """Register ``crosscheck`` on the ``flashio`` subparsers; returns its parser."""
    p = subparsers.add_parser(
        "crosscheck",
        help="simulator predictions against GPU measurements, with error figures",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("files", nargs="*", metavar="FILES", help="measurement files (see above)")
    p.add_argument("--json", action="store_true", help="print {rows, summary} as JSON")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    p.add_argument(
        "--calibration",
        default=None,
        metavar="TOML",
        help="calibration file (default analysis/validation/calibration.toml)",
    )
    p.add_argument("--plot", default=None, metavar="PNG", help="also draw predicted vs measured")
    p.add_argument(
        "--update-doc",
        action="store_true",
        help=f"rewrite the generated block of {DOC.relative_to(ROOT)} and its plot",
    )
    p.add_argument(
        "--fit",
        action="store_true",
        help="first recompute the calibration file's launch harness (host-side launch costs "
        "from data/gpu/probe/harness.json)",
    )
    p.add_argument(
        "--sm-scaling",
        action="store_true",
        help="instead: this project's kernels timed on n of the H200's SMs (CUDA green "
        "contexts; FILES: sm_scaling.json runs, their median taken, default the three full "
        "runs in data/gpu/probe/) against h200-measured with sm_count=n; scaling t(n)/t(132), "
        "absolute times and the runs' spread",
    )
    p.add_argument(
        "--by-implementation",
        action="store_true",
        help="instead: every measured kernel of this project, PyTorch's flash-attn 2 and a "
        "Triton FA2 against the issue model on h200-measured (nothing fitted), per family; "
        "with --update-doc, regenerate docs/validation.md's 'By implementation' block",
    )
    u = p.add_argument_group("your own kernel (with an ncu CSV in FILES)")
    u.add_argument(
        "--schedule", choices=kernels.SCHEDULES, default=None, metavar="SCHEDULE",
        help="the schedule your kernel runs, with the shape and tiling below: one of "
        + ", ".join(kernels.SCHEDULES),
    )  # fmt: skip
    cli_options.add_shape(p)
    cli_options.add_tiling(p)
    u.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=INT",
        help="schedule option, e.g. softmax_passes=2 (repeatable; default: the schedule's)",
    )
    u.add_argument("--kernel", default=None, help="compare every profiled launch with this kernel")
    cli_options.add_impl(
        u,
        "how your kernel executes the schedule (its tiles where you give none); its time is "
        "the issue model's for that implementation: its compiled loop where the census holds "
        "it, a written program for a forward, else the pipe rates",
    )
    p.set_defaults(func=cmd_crosscheck)
    return p


def _configs(a) -> list:
    if a.schedule is not None:
        if not a.files:
            raise UsageError("--schedule needs the ncu CSV of your kernel in FILES")
        opts = []
        for item in a.option:
            key, _, value = item.partition("=")
            if not value.strip().lstrip("-").isdigit():
                raise UsageError(f"--option {item!r}: expected KEY=INT, e.g. softmax_passes=2")
            opts.append((key.strip(), int(value)))
        shape = cli_options.shape_of(a)
        sched = kernels.schedule(
            a.schedule, shape, a.block_q, a.block_kv, a.warps, impl=a.impl, **dict(opts)
        )
        cfg = cc.Config(
            a.schedule, shape, sched.block_q, sched.block_kv, sched.warps, tuple(sorted(opts)),
            impl=a.impl,
        )  # fmt: skip
        out = []
        for f in a.files:
            out += _parsed(Path(f), lambda p: cc.ncu_rows_for(p.read_text(), cfg, a.kernel))
        return out
    files = [Path(f) for f in a.files] or [
        cc.DATA_DIR / "gpu_measure.json",
        cc.DATA_DIR / "ncu.csv",
    ]
    out = []
    for f in files:
        if not f.is_file():
            raise FileError(f"{f}: no such measurement file")
        head = _parsed(f, lambda p: p.read_text()[:4096])
        if f.suffix == ".json" or head.startswith("impl,"):
            out += _parsed(f, cc.read_timings)
        elif '"ID"' in head or "==PROF==" in head:
            out += _parsed(f, cc.read_ncu)
        else:
            raise FileError(
                f"{f}: neither gpu_measure output (.json, or .csv starting 'impl,') "
                "nor an Nsight Compute CSV (ncu --csv)"
            )
    return out


def _parsed(path: Path, read):
    """``read(path)``, with any error a malformed or unreadable file causes as a FileError."""
    try:
        return read(path)
    except FlashioError as err:  # e.g. a shape in the file that AttentionShape rejects
        raise FileError(f"{path}: {err}") from None
    # what json, csv and the readers raise on a file that is not what they expect
    except (OSError, ValueError, KeyError, TypeError, IndexError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else repr(err)
        raise FileError(f"{path}: not a measurement file flashio can read: {why}") from None


def cmd_sm_scaling(a) -> int:
    """``flashio crosscheck --sm-scaling``: measured and predicted scaling with the SM count."""
    if a.fit or a.schedule:
        raise UsageError("--sm-scaling takes FILES (sm_scaling.json runs), no --fit")
    if a.update_doc and a.files:
        raise UsageError("--update-doc renders the committed measurements: give no FILES")
    paths = [Path(f) for f in a.files] or list(sm_scaling.PROBES)
    for path in paths:
        if not path.is_file():
            raise FileError(f"{path}: no such measurement file")
    rows = sm_scaling.scaling_report(paths)
    if a.update_doc:
        sm_scaling.update_doc(rows)
    if a.plot:
        sm_scaling.plot(rows, Path(a.plot))
    if a.json:
        out = {"rows": [{**dataclasses.asdict(r), "ratio_error": r.ratio_error,
                         "time_error": r.time_error} for r in rows],
               "summary": sm_scaling.summary(rows)}  # fmt: skip
        print(json.dumps(out, indent=1))
    else:
        print(sm_scaling.text_table(rows))
    return 0


def cmd_by_implementation(a) -> int:
    """``flashio crosscheck --by-implementation``: the issue model per implementation family."""
    if a.files or a.fit or a.schedule:
        raise UsageError("--by-implementation uses the committed measurements: no FILES, --fit")
    rep = families.report(jobs=a.jobs)
    if a.update_doc:
        validation_doc.replace_block(DOC, *families.MARKERS, families.block(rep))
    print(json.dumps(rep, indent=1) if a.json else families.markdown(rep))
    return 0


def cmd_crosscheck(a) -> int:
    """Handler of ``flashio crosscheck`` (argparse namespace in, exit status out)."""
    if a.update_doc:
        docs_dir()  # a clear error where flashio runs from a wheel, before minutes of work
    if a.sm_scaling:
        return cmd_sm_scaling(a)
    if a.by_implementation:
        return cmd_by_implementation(a)
    if a.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {a.jobs}")
    if a.update_doc and (a.files or a.schedule):
        raise UsageError("--update-doc renders the committed measurements: give no FILES")
    if a.fit:
        log = lambda m: print(m, file=sys.stderr)  # noqa: E731
        calibrate.fit_calibration(a.calibration, log=log)
    cal = load_calibration(a.calibration)
    configs = _configs(a)

    def progress(done, total):
        if a.json:
            return
        if sys.stderr.isatty():
            print(f"\r{done}/{total} configurations", end="", file=sys.stderr, flush=True)
        elif done == total or done * 10 // total != (done - 1) * 10 // total:
            print(f"{done}/{total} configurations", file=sys.stderr, flush=True)

    report = cc.crosscheck(configs, cal, jobs=a.jobs, progress=progress, baseline=a.update_doc)
    if not a.json and sys.stderr.isatty():
        print(file=sys.stderr)
    if a.update_doc:
        update_doc(report, cal)
    if a.plot:
        plot(report, Path(a.plot))
    if a.json:
        print(json.dumps(report.to_json(), indent=1, default=str))
    else:
        print(text_table(report))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run ``crosscheck`` alone: ``python -m flashio.analysis.cli.crosscheck [options]``."""
    parser = argparse.ArgumentParser(prog="flashio")
    add_crosscheck_command(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["crosscheck", *(sys.argv[1:] if argv is None else argv)])
    try:
        return args.func(args)
    except FlashioError as exc:
        print(f"flashio crosscheck: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
