"""Measure the CUDA kernels of kernels/gpu.py (and PyTorch's flash attention) on a GPU.

Modes
-----
time (default)
    A grid of shapes; for each, the flash2 forward (two tilings), flash2 backward, standard
    attention (where S and P fit) and PyTorch's ``scaled_dot_product_attention`` with the flash
    backend (forward and backward). Timing by CUDA events: warm-up, then the median of
    ``--reps`` launches, inputs rotated among buffer sets whose total exceeds 3x the L2. Also the
    GPU's copy bandwidth and bf16 GEMM rate, the compiler's register/spill report per kernel
    variant (nvcc -Xptxas -v, and the attributes of the NVRTC build that ran) and provenance.
    Results are rewritten to ``--out`` after every measurement, so a timeout keeps what ran.
ncu
    One launch of each kernel variant of a small subset, to run under Nsight Compute.
small
    Each kernel once on small ragged, causal, grouped-query shapes, to run under
    compute-sanitizer (memcheck, racecheck, synccheck, initcheck).

Tables for people: ``python -m benchmarks.gpu_report data/gpu`` (no GPU needed).

    python -m benchmarks.gpu_measure --out DIR [--budget-s 300]
    ncu --clock-control none --csv ... python -m benchmarks.gpu_measure --mode ncu --out DIR
"""

from __future__ import annotations

import argparse
import csv
import datetime
import hashlib
import json
import math
import time
from pathlib import Path

import numpy as np

from benchmarks._common import command_line, tool_versions
from benchmarks.gpu_timing import ceilings, n_sets_for, time_events, timed
from benchmarks.measure_grids import (  # noqa: F401 (re-exported: tests and probes read them)
    BATCH_HEADS,
    BWD_TILES,
    FWD_TILES,
    HELDOUT_TILES,
    SEARCH_SHAPES,
    SEARCH_TILES,
    SEQ_LENS,
    SMS,
    STD_MAX_S_BYTES,
    STD_TILES,
    UNSEEN_SHAPES,
    UNSEEN_TILES,
    grid,
    heldout_grid,
    search_grid,
    unseen_grid,
)
from benchmarks.ptxas import parse_ptxas, ptxas_report  # noqa: F401 (re-exported)
from flashio import kernels
from flashio.kernels import gpu

_timed = timed  # the name the committed probe scripts import
NCU_METRICS = (
    "l1tex__m_xbar2l1tex_read_bytes.sum,l1tex__m_l1tex2xbar_write_bytes.sum,dram__bytes_read.sum,"
    "dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum"
)


def provenance() -> dict:
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    info = {
        "gpu": props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
        "sm_count": props["multiProcessorCount"],
        "l2_bytes": props["l2CacheSize"],
        "smem_optin_bytes": props["sharedMemPerBlockOptin"],
        "cuda_driver_version": cupy.cuda.runtime.driverGetVersion(),
        "cuda_runtime_version": cupy.cuda.runtime.runtimeGetVersion(),
        "nvrtc_version": list(cupy.cuda.nvrtc.getVersion()),
        "cupy": cupy.__version__,
        "command": command_line(),
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cuda_sources_sha256": {
            p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(gpu.CUDA_DIR.glob("*.cu"))
        },
        "python_sources_sha256": {
            p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in (Path(gpu.__file__), Path(__file__))
        },
    }
    info |= tool_versions({"nvcc": ["nvcc", "--version"]})
    try:
        import torch

        info["torch"] = torch.__version__
    except ImportError:
        info["torch"] = None
    return info


def measure_ours(name, shape, tiles, reps, l2, variants):
    sched = kernels.schedule(name, shape, *tiles)
    c = gpu.compile_schedule(sched)
    key = json.dumps(gpu.defines(sched)) + name
    if key not in variants:
        attrs = {}
        for ln in c.launches:
            fn = c.function(ln.function)
            attrs[ln.function] = {"num_regs": fn.num_regs, "local_size_bytes": fn.local_size_bytes}
        variants[key] = {
            "schedule": name,
            "defines": dict(gpu.defines(sched)),
            "nvrtc_attributes": attrs,
            "ptxas": ptxas_report(sched),
        }
    dims = (shape.batch, shape.heads, shape.seq_len, shape.head_dim)
    n_in = 4 if name.endswith("_bwd") else 3
    n_sets = n_sets_for(math.prod(dims) * 2 * n_in, l2)
    sets = [c.alloc(*_random_inputs(dims, n_in, shape.dtype)) for _ in range(n_sets)]
    t = time_events(
        lambda i, ev: c.launch(sets[i], events=ev), n_sets, reps, n_events=len(c.launches) + 1
    )
    t["kernels"] = [ln.function for ln in c.launches]
    t.update(
        block_q=sched.block_q,
        block_kv=sched.block_kv,
        warps=sched.warps,
        options=dict(sched.options),
        rotate_buffers=n_sets,
        smem_bytes=[ln.smem_bytes for ln in c.launches],
        ctas=[ln.grid for ln in c.launches],
    )
    return t


def _random_inputs(dims, count, dtype):
    """Fresh N(0, 1) device arrays (never zeros: they hide unwritten outputs and run faster)."""
    import cupy

    x = [cupy.random.standard_normal(dims, dtype=cupy.float32) for _ in range(count)]
    return [a.astype(cupy.float16) if dtype == "fp16" else a for a in x]


def measure_torch(name, shape, reps, l2):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dt = torch.bfloat16 if shape.dtype == "bf16" else torch.float16
    dims = (shape.batch, shape.heads, shape.seq_len, shape.head_dim)
    n_sets = n_sets_for(4 * math.prod(dims) * 2, l2)
    bwd = name == "torch_bwd"
    sets = []
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        for _ in range(n_sets):
            q, k, v = (
                torch.randn(dims, device="cuda", dtype=dt, requires_grad=bwd) for _ in range(3)
            )
            if bwd:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=shape.causal)
                sets.append((q, k, v, o, torch.randn_like(o)))
            else:
                sets.append((q, k, v))

        def run(i, ev):
            s = sets[i]
            if bwd:
                timed(ev, lambda: torch.autograd.grad(s[3], s[:3], s[4], retain_graph=True))
            else:
                timed(ev, lambda: F.scaled_dot_product_attention(*s, is_causal=shape.causal))

        t = time_events(run, n_sets, reps)
    t["rotate_buffers"] = n_sets
    return t


def main_time(args) -> None:
    import cupy

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    doc = {"provenance": provenance(), "ceilings": {}, "results": [], "variants": {}, "errors": []}
    l2 = doc["provenance"]["l2_bytes"]
    doc["ceilings"] = ceilings(args.reps)
    save(out, doc)
    grids = {
        "validation": grid,
        "heldout": heldout_grid,
        "unseen": unseen_grid,
        "search": search_grid,
    }
    for name, shape, tiles in grids[args.grid]():
        if time.monotonic() - start > args.budget_s:
            doc["errors"].append(f"budget of {args.budget_s} s spent; later configs not run")
            break
        row = {"impl": name, **shape.to_dict()}
        try:
            if name.startswith("torch"):
                row.update(measure_torch(name, shape, args.reps, l2))
            else:
                row.update(measure_ours(name, shape, tiles, args.reps, l2, doc["variants"]))
        except Exception as e:  # keep going: record what failed and why
            doc["errors"].append(f"{name} {shape.to_dict()} {tiles}: {type(e).__name__}: {e}")
            cupy.get_default_memory_pool().free_all_blocks()
            save(out, doc)
            continue
        flops = shape.forward_flops() * (2.5 if name.endswith("bwd") else 1)
        row.update(flops=flops, tflops=flops / (row["median_ms"] * 1e-3) / 1e12)
        doc["results"].append(row)
        cupy.get_default_memory_pool().free_all_blocks()
        print(
            f"{name:11s} N={shape.seq_len:5d} d={shape.head_dim} bh={shape.batch * shape.heads:3d}"
            f" {tiles} {row['median_ms']:8.3f} ms {row['tflops']:6.1f} TFLOP/s",
            flush=True,
        )
        save(out, doc)
    doc["wall_s"] = time.monotonic() - start
    save(out, doc)


def save(out: Path, doc: dict) -> None:
    (out / "gpu_measure.json").write_text(json.dumps(doc, indent=1, default=str))
    cols = [
        "impl",
        "batch",
        "heads",
        "seq_len",
        "head_dim",
        "dtype",
        "causal",
        "block_q",
        "block_kv",
        "warps",
        "median_ms",
        "min_ms",
        "max_ms",
        "reps",
        "rotate_buffers",
        "flops",
        "tflops",
        "parts_median_ms",
    ]
    with open(out / "gpu_measure.csv", "w", newline="") as f:
        w = csv.DictWriter(f, cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(doc["results"])


NCU_CONFIGS = [  # (name, batch, heads, seq_len, head_dim, tiles): the DESIGN.md validation shape
    ("flash2", 1, 16, 4096, 64, (128, 128, 8)),
    ("flash2", 1, 16, 4096, 64, (64, 64, 4)),
    ("flash2", 1, 16, 4096, 128, (128, 64, 8)),
    ("flash2_bwd", 1, 16, 4096, 64, (64, 64, 4)),
    ("standard", 1, 16, 4096, 64, (128, 128, 8)),
    ("standard", 1, 16, 4096, 128, (128, 64, 8)),
    ("flash2_causal", 1, 16, 4096, 64, (128, 128, 8)),
    ("standard", 1, 16, 2048, 64, (64, 64, 4)),  # 4 rows x 2048 x 2 B resident: one pass
]
# kernels whose compiled loops spill (data/sass/flashio.json.gz): where their local-memory
# traffic goes (L1, or out to the L2), read from the bytes that leave and enter the SMs
NCU_SPILL_CONFIGS = [
    ("flash2", 1, 16, 4096, 128, (128, 128, 8)),  # reloads 9,088 B per warp and step
    ("flash2", 1, 16, 4096, 128, (128, 64, 4)),  # reloads 10,240 B
    ("flash2_bwd", 1, 16, 4096, 128, (64, 64, 4)),  # stores 2,176 B, reloads 4,224 B
    ("flash2_bwd", 1, 16, 4096, 64, (64, 128, 4)),  # stores 4,992 B, reloads 6,016 B
]
NCU_SETS = {
    "validation": NCU_CONFIGS,
    "spills": NCU_SPILL_CONFIGS,
    "heldout": [(name, 1, 16, 4096, d, tiles) for name, d, tiles in HELDOUT_TILES],
}


def main_ncu(args) -> None:
    """One launch of each kernel of the chosen set (the backward's forward pass runs first)."""
    import cupy

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    order = []
    for label, b, h, n, d, tiles in NCU_SETS[args.ncu_set]:
        name, causal = label.removesuffix("_causal"), label.endswith("_causal")
        shape = kernels.AttentionShape(b, h, n, d, "bf16", causal=causal)
        sched = kernels.schedule(name, shape, *tiles)
        c = gpu.compile_schedule(sched)
        bufs = c.alloc(*_random_inputs((b, h, n, d), 4 if name.endswith("_bwd") else 3, "bf16"))
        if c.forward is not None:
            order.append({"schedule": "flash2", "kernel": "flash2_fwd", "for": name})
        c.launch(bufs)
        cupy.cuda.get_current_stream().synchronize()
        for ln in c.launches:
            order.append(
                {
                    "schedule": name,
                    "kernel": ln.function,
                    "shape": [b, h, n, d],
                    "causal": causal,
                    "tiles": tiles,
                    "options": dict(sched.options),
                    "ctas": ln.grid,
                    "smem_bytes": ln.smem_bytes,
                }
            )
    (out / "ncu_launches.json").write_text(
        json.dumps(
            {"metrics": NCU_METRICS, "launches": order, "command": command_line()}, indent=1
        )
    )


SMALL_CONFIGS = [  # (name, shape, tiles, options): ragged, causal, grouped-query, both dtypes
    ("flash2", (1, 4, 197, 64, "fp16", True, 2), (64, 64, 4), {}),
    ("flash2", (1, 2, 197, 128, "bf16", False, None), (128, 64, 8), {}),
    ("flash2_bwd", (1, 4, 197, 64, "bf16", True, 2), (64, 64, 4), {}),
    ("flash2_bwd", (1, 2, 197, 128, "fp16", False, None), (64, 64, 4), {}),
    ("standard", (1, 2, 197, 64, "fp16", True, None), (64, 64, 4), {"softmax_passes": 1}),
    ("standard", (1, 2, 200, 128, "bf16", True, 2), (128, 64, 8), {"softmax_passes": 2}),
]


def main_small(args) -> None:
    """Each kernel once on small shapes, for compute-sanitizer; fails if an output is NaN."""
    import cupy

    for name, sh, tiles, opts in SMALL_CONFIGS:
        shape = kernels.AttentionShape(*sh[:5], causal=sh[5], kv_heads=sh[6])
        sched = kernels.schedule(name, shape, *tiles, **opts)
        dims = (shape.batch, shape.heads, shape.seq_len, shape.head_dim)
        kdims = (shape.batch, shape.n_kv_heads, shape.seq_len, shape.head_dim)
        x = _random_inputs(dims, 1, shape.dtype) + _random_inputs(kdims, 2, shape.dtype)
        if name.endswith("_bwd"):
            x += _random_inputs(dims, 1, shape.dtype)
        outs = gpu.run_schedule(sched, *x)
        bad = [i for i, o in enumerate(outs) if not np.all(np.isfinite(o))]
        print(f"{name} {sh} {tiles} {opts}: {'NaN in outputs ' + str(bad) if bad else 'ok'}")
        if bad:
            raise SystemExit(1)
    cupy.cuda.get_current_stream().synchronize()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("time", "ncu", "small"), default="time")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=300.0)
    ap.add_argument(
        "--grid",
        choices=("validation", "heldout", "unseen", "search"),
        default="validation",
        help="--mode time: the validation grid, HELDOUT_TILES, UNSEEN_TILES or SEARCH_TILES "
        "(default: validation)",
    )
    ap.add_argument(
        "--ncu-set",
        choices=sorted(NCU_SETS),
        default="validation",
        help="--mode ncu: the kernels to launch (default: validation)",
    )
    args = ap.parse_args(argv)
    modes = {"time": main_time, "ncu": main_ncu, "small": main_small}
    modes[args.mode](args)


if __name__ == "__main__":
    main()
