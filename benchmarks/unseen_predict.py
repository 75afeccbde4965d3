"""Predict this project's forward at tilings or shapes never timed, before they run.

For each configuration of a grid of ``benchmarks.gpu_measure`` it writes the cross-check
model's time (analysis.validation.families: the measured H200, the issue model, the launch
harness) and the registers per thread the written program's register line gives:
- ``unseen`` (``UNSEEN_TILES`` x ``UNSEEN_SHAPES``): tilings the instruction census never held,
  priced by written programs (simulator.synth_sync);
- ``search`` (``SEARCH_TILES`` x ``SEARCH_SHAPES``): the census's forward tilings, priced by
  their compiled loops, at shapes none was timed at: the candidates of `flashio tiling
  --search`, whose ranking per shape the file then holds.
With NVRTC installed (``pip install nvidia-cuda-nvrtc==13.0.*``: no GPU needed) it adds what the
compiler makes of each tiling (registers, stack, spills), the build that will run. Run it,
commit the file, then time the kernels on the GPU (data/gpu/runs/unseen_run.sh,
search_run.sh) and compare (``flashio crosscheck --by-implementation`` reads the timings):

    python -m benchmarks.unseen_predict                 # writes data/gpu/unseen/predicted.json
    python -m benchmarks.unseen_predict --grid search   # writes data/gpu/search/predicted.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
from pathlib import Path

from benchmarks import nvrtc
from benchmarks.measure_grids import search_grid, unseen_grid
from benchmarks.ptxas import nvrtc_report
from flashio import kernels
from flashio.analysis.validation import families
from flashio.simulator import issue

GRIDS = {"unseen": unseen_grid, "search": search_grid}


def predictions(grid: str) -> list[dict]:
    rows, compiled = [], {}
    for name, shape, (bq, bkv, w) in GRIDS[grid]():
        sched = kernels.schedule(name, shape, bq, bkv, w)
        d = shape.head_dim
        in_census = issue.lookup(sched.meta.params, "flash2_fwd", w) is not None
        if in_census != (grid == "search"):
            raise SystemExit(f"{name} d={d} {bq}x{bkv} w{w}: in the census {in_census}")
        m = families.Measured("flashio", name, shape, bq, bkv, w, 0.0, True)
        if (d, bq, bkv, w) not in compiled:
            compiled[d, bq, bkv, w] = nvrtc_report(sched)
        rows.append(
            {
                "schedule": name,
                "shape": shape.to_dict(),
                "tiles": [bq, bkv, w],
                "predicted_ms": families.predict(m) * 1e3,
                "register_line": issue.written_registers(
                    "flashio", bq, bkv, d, w, hold_out=True
                ).registers,
                "nvrtc_ptxas": compiled[d, bq, bkv, w],
            }
        )
        print(f"d={d:3d} {bq}x{bkv} w{w:<2d} {shape.batch}x{shape.heads} N={shape.seq_len:5d}"
              f"{' causal' if shape.causal else ''}: "
              f"{rows[-1]['predicted_ms']:8.3f} ms, line {rows[-1]['register_line']} registers, "
              f"compiled {compiled[d, bq, bkv, w]}", flush=True)  # fmt: skip
    return rows


def ranking(rows: list[dict]) -> list[dict]:
    """Per shape, the tilings fastest first as predicted."""
    by: dict[str, list] = {}
    for r in rows:
        by.setdefault(json.dumps(r["shape"], sort_keys=True), []).append(r)
    return [
        {
            "shape": json.loads(k),
            "order": [r["tiles"] for r in sorted(v, key=lambda r: r["predicted_ms"])],
        }
        for k, v in by.items()
    ]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", choices=sorted(GRIDS), default="unseen", help="default unseen")
    ap.add_argument("--out", type=Path, help="output file (default data/gpu/GRID/predicted.json)")
    args = ap.parse_args(argv)
    out = args.out or Path(f"data/gpu/{args.grid}/predicted.json")
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True)
    what = {
        "unseen": "UNSEEN_TILES (written programs: tilings outside the census)",
        "search": "SEARCH_TILES (compiled loops) at SEARCH_SHAPES",
    }[args.grid]
    rows = predictions(args.grid)
    doc = {
        "note": (
            "the cross-check model's predictions (analysis.validation.families) for "
            f"benchmarks.gpu_measure's {what}, made and committed before they were timed"
        ),
        "command": "python -m benchmarks.unseen_predict"
        + (f" --grid {args.grid}" if args.grid != "unseen" else ""),
        "date": datetime.date.today().isoformat(),
        "git_head": head.stdout.strip(),
        "nvrtc": list(nvrtc.version()) if nvrtc.available() else None,
        "rows": rows,
    }
    if args.grid == "search":
        doc["ranking"] = ranking(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
