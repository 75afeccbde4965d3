"""The command line: parse_args, dry_run, the merge mode and main (which runs the modes)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from benchmarks import impl_measure as package
from benchmarks.impl_measure.config import (
    DEFAULT_L2_BYTES,
    GROUP_WEIGHT,
    HEAD_DIMS,
    HEADS32_MAX_N,
    IMPLS,
    QUICK_SEQ_LENS,
    State,
    configs,
    save,
)
from benchmarks.impl_measure.provenance import provenance
from benchmarks.impl_measure.resources import main_resources, merge_resources
from benchmarks.impl_measure.sass import main_sass
from benchmarks.impl_measure.timing import main_time


def main_merge(args) -> None:
    out = Path(args.out)
    doc = json.loads((out / "impl_measure.json").read_text())
    res = json.loads(Path(args.resources_json).read_text())
    st = State(args)
    st.doc = doc
    hits = merge_resources(doc["rows"], res.get("functions", []))
    doc.setdefault("merged", []).append(
        {"resources_json": Path(args.resources_json).name, "kernels_matched": hits}
    )
    save(st)
    print(f"merged resource usage into {hits} torch_flash kernel launches")


# ---------------------------------------------------------------------------------------------


def dry_run(args) -> None:
    cfgs = configs(args)
    if "time" in args.mode:
        for c in cfgs:
            print(c.label())
        counts = {i: sum(c.impl == i for c in cfgs) for i in args.impls}
        print(f"{len(cfgs)} configs: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        print(
            f"budget {args.budget_s:.0f} s shared by weight "
            + ", ".join(f"{i} {GROUP_WEIGHT[i]:g}" for i in args.impls)
        )
    if "resources" in args.mode:
        print(
            "resources: cuobjdump -lelf / -xelf / -res-usage on libtorch_cuda.so "
            f"(each under {args.cuobjdump_timeout:.0f} s), impl_resources.json"
        )
    if "sass" in args.mode:
        print(f"sass ({', '.join(args.sass_parts)}): sass/*.sass.gz and sass/sass_index.json")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        prog="impl_measure.py",  # as when this was one script: the same --help
        description=package.__doc__.splitlines()[0],
        epilog="See the module docstring (python -c 'import benchmarks.impl_measure as m; "
        "help(m)') for the modes and outputs.",
    )
    ap.add_argument(
        "--mode", nargs="+", default=["time"], choices=("time", "resources", "sass", "merge")
    )
    ap.add_argument("--out", help="output folder (required unless --dry-run)")
    ap.add_argument("--dry-run", action="store_true", help="print the configs and their count")
    ap.add_argument(
        "--quick",
        action="store_true",
        help=f"N in {QUICK_SEQ_LENS} only (d {HEAD_DIMS}, causal and not)",
    )
    ap.add_argument(
        "--heads32", action="store_true", help=f"also H=32 for N <= {HEADS32_MAX_N} (not for flex)"
    )
    ap.add_argument("--impls", nargs="+", choices=IMPLS, default=list(IMPLS))
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument(
        "--sleep-cycles",
        type=int,
        default=2_000_000,
        help="GPU cycles of torch.cuda._sleep before each timed call (0: none)",
    )
    ap.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="seconds for the time mode (default 420, 270 with --quick)",
    )
    ap.add_argument("--no-profile", action="store_true", help="skip the torch.profiler call")
    ap.add_argument(
        "--flex-dynamic",
        action="store_true",
        help="torch.compile(flex_attention, dynamic=True): one compile per (d, "
        "causal, pass) instead of one per shape",
    )
    ap.add_argument(
        "--sass-parts", nargs="+", choices=("triton", "torch"), default=["triton", "torch"]
    )
    ap.add_argument(
        "--resources-method",
        choices=("auto", "extract", "lib"),
        default="auto",
        help="extract: the sm_XX ELFs holding flash kernels; lib: "
        "--dump-resource-usage on the whole library; auto: extract, else lib",
    )
    ap.add_argument(
        "--cuobjdump-timeout", type=float, default=300.0, help="seconds for each cuobjdump call"
    )
    ap.add_argument(
        "--cuobjdump-budget-s",
        type=float,
        default=420.0,
        help="seconds for all cuobjdump calls of the run together",
    )
    ap.add_argument(
        "--triton-cache-dir",
        help="TRITON_CACHE_DIR for the run (default: a fresh temporary folder, so "
        "the sass mode finds exactly the run's kernels)",
    )
    ap.add_argument("--resources-json", help="merge mode: an impl_resources.json")
    args = ap.parse_args(argv)
    args.impls = [i for i in IMPLS if i in args.impls]
    args.mode = [m for m in ("time", "resources", "sass", "merge") if m in args.mode]
    if args.budget_s is None:
        args.budget_s = 270.0 if args.quick else 420.0
    if not args.dry_run and not args.out:
        ap.error("--out is required (or --dry-run)")
    if "merge" in args.mode and not args.resources_json:
        ap.error("--mode merge needs --resources-json")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.dry_run:
        dry_run(args)
        return
    if args.mode == ["merge"]:
        main_merge(args)
        return
    # before torch/triton are imported: the run's Triton kernels land in a folder of its own
    if args.triton_cache_dir:
        os.environ["TRITON_CACHE_DIR"] = args.triton_cache_dir
    else:
        os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="flashio_triton_"))
    st = State(args)
    st.out.mkdir(parents=True, exist_ok=True)
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device visible to torch")
    st.doc["provenance"] = provenance()
    st.l2 = st.doc["provenance"]["l2_bytes"] or DEFAULT_L2_BYTES
    st.doc["provenance"]["triton_cache_dir"] = Path(os.environ["TRITON_CACHE_DIR"]).name
    print(
        f"{st.doc['provenance']['gpu']}, torch {torch.__version__}, triton "
        f"{st.doc['provenance'].get('triton')}, modes {' '.join(args.mode)}",
        flush=True,
    )
    save(st)
    if "time" in args.mode:
        main_time(st)
    if "resources" in args.mode:
        main_resources(st)
    if "sass" in args.mode:
        main_sass(st)
    if getattr(st, "xelf_dir", None):
        shutil.rmtree(st.xelf_dir, ignore_errors=True)
    save(st)
    print(f"done in {time.monotonic() - st.start:.1f} s", flush=True)
