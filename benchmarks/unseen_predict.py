"""Predict this project's forward at tilings the instruction census never held, before they run.

For each configuration of ``benchmarks.gpu_measure``'s unseen grid (``UNSEEN_TILES`` x
``UNSEEN_SHAPES``) it writes the cross-check model's time (analysis.validation.families: the
measured H200, the issue model, the launch harness), which prices these tilings by written
programs (simulator.synth_sync), and the registers per thread the program's register line
gives. With NVRTC installed (``pip install nvidia-cuda-nvrtc==13.0.*``: no GPU needed) it adds
what the compiler makes of each tiling (registers, stack, spills), the build that will run.
Run it, commit the file, then time the kernels on the GPU (data/gpu/runs/unseen_run.sh) and
compare (``flashio crosscheck --by-implementation`` reads the timings):

    python -m benchmarks.unseen_predict            # writes data/gpu/unseen/predicted.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
from pathlib import Path

from benchmarks import nvrtc
from benchmarks.gpu_measure import parse_ptxas, unseen_grid
from flashio import kernels
from flashio.analysis.validation import families
from flashio.kernels.gpu import defines, nvrtc_options, source
from flashio.simulator import issue

OUT = Path("data/gpu/unseen/predicted.json")


def compiled_registers(sched) -> dict | None:
    """NVRTC's ptxas report of the forward kernel at ``sched``'s tiling (None: no NVRTC)."""
    if not nvrtc.available():
        return None
    options = (*nvrtc_options(defines(sched)), "--ptxas-options=-v")
    _, log = nvrtc.compile_cubin(source(sched), options)
    return parse_ptxas(log).get("flash2_fwd")


def predictions() -> list[dict]:
    rows, compiled = [], {}
    for name, shape, (bq, bkv, w) in unseen_grid():
        sched = kernels.schedule(name, shape, bq, bkv, w)
        d = shape.head_dim
        if issue.lookup(sched.meta.params, "flash2_fwd", w) is not None:
            raise SystemExit(f"{name} d={d} {bq}x{bkv} w{w} is in the census: not unseen")
        m = families.Measured("flashio", name, shape, bq, bkv, w, 0.0, True)
        if (d, bq, bkv, w) not in compiled:
            compiled[d, bq, bkv, w] = compiled_registers(sched)
        rows.append(
            {
                "schedule": name,
                "shape": shape.to_dict(),
                "tiles": [bq, bkv, w],
                "predicted_ms": families.predict(m) * 1e3,
                "register_line": issue.written_registers("flashio", bq, bkv, d, w),
                "nvrtc_ptxas": compiled[d, bq, bkv, w],
            }
        )
        print(f"d={d:3d} {bq}x{bkv} w{w:<2d} {shape.batch}x{shape.heads} N={shape.seq_len:5d}: "
              f"{rows[-1]['predicted_ms']:8.3f} ms, line {rows[-1]['register_line']} registers, "
              f"compiled {compiled[d, bq, bkv, w]}", flush=True)  # fmt: skip
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT, help=f"output file (default {OUT})")
    args = ap.parse_args(argv)
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True)
    doc = {
        "note": (
            "the cross-check model's predictions (analysis.validation.families, written "
            "programs for tilings outside the census) for benchmarks.gpu_measure's "
            "UNSEEN_TILES, made and committed before they were timed"
        ),
        "command": "python -m benchmarks.unseen_predict",
        "date": datetime.date.today().isoformat(),
        "git_head": head.stdout.strip(),
        "nvrtc": list(nvrtc.version()) if nvrtc.available() else None,
        "rows": predictions(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
