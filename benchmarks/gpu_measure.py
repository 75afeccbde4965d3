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
import itertools
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks._common import tool_versions
from flashio import kernels
from flashio.kernels import gpu

SMS = 132  # H200 multiprocessors; (batch, heads) pairs below and above one CTA per SM at N=512
BATCH_HEADS = ((1, 8), (4, 16))
SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384)
# (head_dim, block_q, block_kv, warps) per schedule
FWD_TILES = {64: ((128, 128, 8), (64, 64, 4)), 128: ((128, 64, 8), (128, 128, 8))}
BWD_TILES = {64: ((64, 64, 4),), 128: ((64, 64, 4),)}
STD_TILES = {64: ((128, 128, 8),), 128: ((128, 64, 8),)}
STD_MAX_S_BYTES = 8 << 30  # standard attention only where S (and P) fit in 8 GiB each
NCU_METRICS = (
    "l1tex__m_xbar2l1tex_read_bytes.sum,l1tex__m_l1tex2xbar_write_bytes.sum,dram__bytes_read.sum,"
    "dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum"
)


def command_line() -> str:
    """This process's command, its script named relative to the repository when it lies
    inside it, so that committed data hold no machine paths."""
    root, script = Path(__file__).resolve().parents[1], Path(sys.argv[0]).resolve()
    rel = script.relative_to(root) if script.is_relative_to(root) else script
    return " ".join([str(rel), *sys.argv[1:]])


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


def time_events(run, n_sets: int, reps: int, n_events: int = 2, warmup: int = 3):
    """Median/min/max milliseconds of ``run(set_index, events)`` over ``reps`` calls; with more
    than two events also the median of each consecutive interval (per-kernel times)."""
    import cupy

    for i in range(warmup):
        run(i % n_sets, None)
    cupy.cuda.get_current_stream().synchronize()
    samples = []
    for i in range(reps):
        ev = [cupy.cuda.Event() for _ in range(n_events)]
        run(i % n_sets, ev)
        ev[-1].synchronize()
        samples.append([cupy.cuda.get_elapsed_time(a, b) for a, b in itertools.pairwise(ev)])
    s = np.array(samples)
    total = s.sum(axis=1)
    return {
        "median_ms": float(np.median(total)),
        "min_ms": float(total.min()),
        "max_ms": float(total.max()),
        "reps": reps,
        "parts_median_ms": [float(x) for x in np.median(s, axis=0)],
    }


def n_sets_for(set_bytes: int, l2_bytes: int) -> int:
    return max(3, min(64, math.ceil(3 * l2_bytes / max(set_bytes, 1))))


def ceilings(reps: int) -> dict:
    """Copy bandwidth (bytes read + written) and bf16 GEMM rate on random data."""
    import cupy

    n = 1 << 30  # 1 GiB per buffer
    src, dst = cupy.random.random(n // 4, dtype=cupy.float32), cupy.empty(n // 4, cupy.float32)
    t = time_events(lambda i, ev: _timed(ev, lambda: cupy.copyto(dst, src)), 1, reps)
    out = {"copy_bytes": 2 * n, "copy_median_ms": t["median_ms"]}
    out["copy_bytes_per_s"] = 2 * n / (t["median_ms"] * 1e-3)
    try:
        import torch

        m = 8192
        a, b = (torch.randn(m, m, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        t = time_events(lambda i, ev: _timed(ev, lambda: a @ b), 1, reps)
        out.update(gemm_m=m, gemm_median_ms=t["median_ms"])
        out["gemm_bf16_flops_per_s"] = 2 * m**3 / (t["median_ms"] * 1e-3)
    except ImportError:
        pass
    return out


def _timed(ev, fn):
    if ev is not None:
        ev[0].record()
    fn()
    if ev is not None:
        ev[-1].record()


def parse_ptxas(log: str) -> dict:
    """Registers, stack and spill bytes per entry function from a ptxas -v log."""
    out, fn = {}, None
    for line in log.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            fn = m.group(1)
        elif fn and (
            m := re.search(
                r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                line,
            )
        ):
            out.setdefault(fn, {}).update(
                stack_bytes=int(m[1]), spill_store_bytes=int(m[2]), spill_load_bytes=int(m[3])
            )
        elif fn and (m := re.search(r"Used (\d+) registers", line)):
            out.setdefault(fn, {})["registers"] = int(m[1])
    return out


def ptxas_report(sched) -> dict:
    """Registers, spills and stack per function, from ptxas -v run two ways with the runner's
    source and defines: by NVRTC (the compiler CuPy uses; the build that ran) and by nvcc
    (the two front ends were seen to allocate registers differently)."""
    opts = [*gpu.compile_options(gpu.defines(sched)), "--gpu-architecture=sm_90"]
    rep = {"nvrtc_options": opts}
    try:
        from cupy_backends.cuda.libs import nvrtc

        prog = nvrtc.createProgram(gpu.source(sched), "kernel.cu", (), ())
        try:
            nvrtc.compileProgram(prog, [*opts, "--ptxas-options=-v"])
            rep["nvrtc"] = parse_ptxas(nvrtc.getProgramLog(prog))
        finally:
            nvrtc.destroyProgram(prog)
    except Exception as e:  # the report is auxiliary: keep measuring
        rep["nvrtc_error"] = f"{type(e).__name__}: {e}"
    src = gpu.CUDA_DIR / gpu._SOURCES[sched.name]
    defs = [f"-D{k}={v}" for k, v in gpu.defines(sched)]
    cmd = ["nvcc", "-arch=sm_90", "-cubin", "-o", "/dev/null", "-Xptxas", "-v",
           f"-I{gpu.CUDA_DIR}", *defs, str(src)]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True)
    rep.update(nvcc_command=" ".join(cmd), nvcc_returncode=p.returncode,
               nvcc=parse_ptxas(p.stderr))  # fmt: skip
    return rep


def grid():
    """(schedule name, shape, tiles) in measurement order: small N first."""
    for n in SEQ_LENS:
        for d in (64, 128):
            for b, h in BATCH_HEADS:
                shape = kernels.AttentionShape(b, h, n, d, "bf16")
                for t in FWD_TILES[d]:
                    yield "flash2", shape, t
                yield "torch_fwd", shape, None
                for t in BWD_TILES[d]:
                    yield "flash2_bwd", shape, t
                yield "torch_bwd", shape, None
                if b * h * n * n * 2 <= STD_MAX_S_BYTES:
                    for t in STD_TILES[d]:
                        yield "standard", shape, t
    for n in (4096, 16384):  # causal and fp16 at the shapes the forward target is set on
        for shape in (
            kernels.AttentionShape(4, 16, n, 128, "bf16", causal=True),
            kernels.AttentionShape(4, 16, n, 128, "fp16"),
        ):
            yield "flash2", shape, FWD_TILES[128][0]
            yield "torch_fwd", shape, None


# Tilings of this project's kernels never timed before, for held-out checks of the model: the
# spill rule (simulator.issue.spills_fit_l1) predicts the reloads of the first five miss L1
# and those of the last two hit it; bf16, B x H = 1 x 16 and 4 x 16, N = 4096.
HELDOUT_TILES = (
    ("flash2", 128, (128, 128, 4)),
    ("flash2_bwd", 64, (128, 128, 4)),
    ("flash2_bwd", 128, (64, 128, 4)),
    ("flash2_bwd", 128, (128, 128, 8)),
    ("flash2_bwd", 128, (128, 128, 4)),
    ("flash2", 64, (128, 128, 4)),
    ("flash2", 128, (128, 64, 4)),
)


def heldout_grid():
    """(schedule name, shape, tiles) of HELDOUT_TILES."""
    for name, d, tiles in HELDOUT_TILES:
        for b, h in ((1, 16), (4, 16)):
            yield name, kernels.AttentionShape(b, h, 4096, d, "bf16"), tiles


# Forward tilings whose machine code the instruction census has never held, head dims 96 and
# 256 among them: the model prices them by written programs (simulator.synth_sync), and its
# predictions are committed before they run (benchmarks/unseen_predict.py,
# data/gpu/unseen/predicted.json).
UNSEEN_TILES = tuple(
    [(64, t) for t in ((128, 96, 8), (64, 96, 4), (96, 64, 6), (192, 64, 12), (128, 48, 8),
                       (64, 48, 4))]
    + [(128, t) for t in ((128, 96, 8), (64, 48, 4), (96, 64, 6), (128, 48, 8))]
    + [(96, t) for t in ((128, 64, 8), (64, 64, 4), (128, 32, 8))]
    + [(256, t) for t in ((64, 32, 4), (128, 32, 8))]
)  # fmt: skip
UNSEEN_SHAPES = ((4, 16, 4096), (1, 16, 16384))  # batch, heads, seq_len; bf16


def unseen_grid():
    """(schedule name, shape, tiles) of UNSEEN_TILES."""
    for d, tiles in UNSEEN_TILES:
        for b, h, n in UNSEEN_SHAPES:
            yield "flash2", kernels.AttentionShape(b, h, n, d, "bf16"), tiles


# The forward's tilings the instruction census holds (data/sass/flashio.json.gz; a test checks
# the list against it), at shapes none of them was timed at: the candidates `flashio tiling
# --search` prices by their compiled loops. The model's ranking is committed before they run
# (benchmarks/unseen_predict.py --grid search, data/gpu/search/predicted.json).
SEARCH_TILES = (
    (128, 128, 4), (128, 128, 8), (128, 64, 4), (128, 64, 8), (128, 32, 4), (128, 32, 8),
    (64, 128, 4), (64, 64, 4), (64, 32, 4),
)  # fmt: skip
SEARCH_SHAPES = ((1, 16, 16384, False), (1, 16, 16384, True), (2, 16, 2048, False))  # bf16


def search_grid():
    """(schedule name, shape, tiles) of SEARCH_TILES at head dims 64 and 128."""
    for d in (64, 128):
        for b, h, n, causal in SEARCH_SHAPES:
            for tiles in SEARCH_TILES:
                yield "flash2", kernels.AttentionShape(b, h, n, d, "bf16", causal=causal), tiles


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
                _timed(ev, lambda: torch.autograd.grad(s[3], s[:3], s[4], retain_graph=True))
            else:
                _timed(ev, lambda: F.scaled_dot_product_attention(*s, is_causal=shape.causal))

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
