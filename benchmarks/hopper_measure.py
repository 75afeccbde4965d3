"""Time the Hopper forward (kernels/cuda/hopper_fwd.cu) beside PyTorch's attention kernels.

One run on an sm_90 GPU: this project's Hopper forward at several builds (tilings and softmax
overlaps, ``VARIANTS``), and, on the same inputs and in the same process, PyTorch SDPA's flash
backend (flash-attn 2), its cuDNN backend and torch ``flex_attention`` (Triton). Each kernel is
CUDA-event-timed over ``--reps`` back-to-back launches, ``--sets`` times; the median set is
reported with TFLOP/s counted as 4 N^2 d B H, halved when causal (FlashAttention's papers'
convention; ``AttentionShape.forward_flops`` counts N (N + 1) / 2 causal pairs, 0.05% more at
N = 1k). Every Hopper output is also
compared with SDPA's (largest absolute difference of O), a check that the timed kernel computes
attention. Writes hopper_measure.json and .csv (with provenance) to --out.

    python -m benchmarks.hopper_measure --out data/gpu/hopper
"""

from __future__ import annotations

import argparse
import csv
import functools
import hashlib
import json
import statistics
import time
import warnings
from pathlib import Path
from typing import NamedTuple

import numpy as np

from benchmarks.gpu_measure import provenance
from flashio import kernels
from flashio.analysis.validation.family_rows import PRESET_LABEL
from flashio.kernels import gpu, hopper


class Build(NamedTuple):
    """One build of the forward timed at every shape of its head dims."""

    label: str
    dims: tuple[int, ...]
    block_q: int
    block_kv: int
    overlap: str
    stages: int = 2  # K and V buffers; three or four fit at d = 64 only (hopper.smem_bytes)
    persistent: bool = False  # a CTA per SM taking every grid-th tile


VARIANTS = [
    Build("hopper 128x176 both", (64, 128), 128, 176, "both"),
    Build("hopper 128x176 both persistent", (128,), 128, 176, "both", persistent=True),
    Build("hopper 128x176 pingpong", (128,), 128, 176, "pingpong"),
    Build("hopper 128x128 both", (64, 128), 128, 128, "both"),
    Build("hopper 128x128", (64, 128), 128, 128, "none"),
    Build("hopper 128x128 persistent", (64,), 128, 128, "none", persistent=True),
    Build("hopper 128x128 s3", (64,), 128, 128, "none", 3),
    Build("hopper 128x128 s4", (64,), 128, 128, "none", 4),
    Build("hopper 192x128", (64,), 192, 128, "none"),
    Build("hopper 192x128 persistent", (64,), 192, 128, "none", persistent=True),
    Build("hopper 192x128 s3", (64,), 192, 128, "none", 3),
    Build("hopper 192x128 intra", (64,), 192, 128, "intra-warpgroup"),
]
# PRESET_LABEL: the build kernels.schedule(..., impl="flashio-hopper") picks for the shape,
# timed as its own row (what a user of the preset gets at each N; the cross-check skips it)
TORCH_BACKENDS = ("sdpa-flash", "sdpa-cudnn", "flex")


def flops(sh) -> float:
    f = 4.0 * sh.batch * sh.heads * sh.seq_len**2 * sh.head_dim
    return f / 2 if sh.causal else f


def time_events(fn, events, sync, reps: int, sets: int) -> list[float]:
    """Seconds per launch of ``fn`` in each of ``sets`` sets of ``reps`` launches."""
    for _ in range(3):
        fn()
    out = []
    for _ in range(sets):
        start, stop = events()
        start.record()
        for _ in range(reps):
            fn()
        stop.record()
        sync(stop)
        out.append(start_stop_seconds(start, stop) / reps)
    return out


def start_stop_seconds(start, stop) -> float:
    import cupy

    if isinstance(start, cupy.cuda.Event):
        return cupy.cuda.get_elapsed_time(start, stop) / 1e3
    return start.elapsed_time(stop) / 1e3


def cupy_events():
    import cupy

    return cupy.cuda.Event(), cupy.cuda.Event()


def torch_events():
    import torch

    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def torch_runners(q, k, v, causal: bool, n: int):
    """name -> zero-argument callable for each PyTorch backend that runs the shape."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    def with_backend(backend):
        def run():
            with sdpa_kernel(backend):
                return sdpa(q, k, v, is_causal=causal)

        return run

    # a fresh compile per shape: past dynamo's recompile limit flex_attention would fall back
    # to its unfused eager path (a warning, made an error here, so that it is never timed)
    torch._dynamo.reset()
    warnings.filterwarnings("error", message="flex_attention called without torch.compile")
    flex = torch.compile(flex_attention, dynamic=False)
    mask = None
    if causal:
        mask = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, n, n, device="cuda")
    return {
        "sdpa-flash": with_backend(SDPBackend.FLASH_ATTENTION),
        "sdpa-cudnn": with_backend(SDPBackend.CUDNN_ATTENTION),
        "flex": lambda: flex(q, k, v, block_mask=mask),
    }


def measure_shape(sh, args, rows: list, errors: list) -> None:
    import cupy
    import torch

    rng = np.random.default_rng(0)
    qkv = [rng.standard_normal((sh.batch, sh.heads, sh.seq_len, sh.head_dim)) for _ in range(3)]
    tq = [torch.tensor(a, dtype=torch.bfloat16, device="cuda") for a in qkv]
    bits = [cupy.asarray(t.view(torch.int16).cpu().numpy().view(np.uint16)) for t in tq]
    base = {"seq_len": sh.seq_len, "head_dim": sh.head_dim, "causal": sh.causal,
            "batch": sh.batch, "heads": sh.heads, "dtype": sh.dtype}  # fmt: skip
    ref = None
    runners = torch_runners(*tq, sh.causal, sh.seq_len)
    for name in args.backends.split(","):
        try:
            run = runners[name]
            out = run()
            if name == "sdpa-flash":
                ref = out.float().cpu().numpy()
            ts = time_events(run, torch_events, lambda e: e.synchronize(), args.reps, args.sets)
            rows.append({**base, "kernel": name, "times_s": ts})
        except Exception as e:  # a backend that does not run the shape is recorded, not fatal
            errors.append(f"{name} {base}: {type(e).__name__}: {e}"[:500])
    preset = kernels.schedule("flash2", sh, impl="flashio-hopper")
    pi = preset.impl.specialize("flash2", sh)
    builds = [v for v in VARIANTS if sh.head_dim in v.dims]
    builds.append(Build(PRESET_LABEL, (sh.head_dim,), preset.block_q, preset.block_kv,
                        pi.softmax_overlap, pi.stages, pi.persistent))  # fmt: skip
    for label, _, bq, bkv, overlap, stages, persistent in builds:
        impl = hopper.description(bq, overlap, stages, persistent)
        sched = kernels.Schedule("flash2", sh, bq, bkv, 4 * (bq // 64 + 1), impl=impl)
        try:
            comp = gpu.compile_schedule(sched)
            bufs = comp.alloc(*bits)
            comp.launch(bufs)
            cupy.cuda.get_current_stream().synchronize()
            o = comp.outputs(bufs)[0]
            diff = float(np.nanmax(np.abs(o - ref))) if ref is not None else None
            unwritten = int(np.isnan(o).sum())
            run = functools.partial(comp.launch, bufs)
            ts = time_events(run, cupy_events, lambda e: e.synchronize(), args.reps, args.sets)
            rows.append({**base, "kernel": label, "block_q": bq, "block_kv": bkv,
                         "softmax_overlap": overlap, "stages": stages,
                         "persistent": persistent, "times_s": ts,
                         "max_abs_diff_vs_sdpa_flash": diff, "unwritten": unwritten})  # fmt: skip
        except Exception as e:
            errors.append(f"{label} {base}: {type(e).__name__}: {e}"[:2000])


def table(doc: dict) -> str:
    """Markdown: TFLOP/s per kernel (rows) and shape (columns), one table per head dim."""
    rows = doc["rows"]
    tf = {(r["kernel"], r["head_dim"], r["causal"], r["seq_len"]): r["tflops"] for r in rows}
    out = []
    for d in sorted({r["head_dim"] for r in rows}):
        shapes = sorted({(c, n) for k, dd, c, n in tf if dd == d})
        head = [f"{'causal ' if c else ''}{n // 1024}k" for c, n in shapes]
        out += [f"d = {d}, TFLOP/s:", "", "| kernel | " + " | ".join(head) + " |"]
        out.append("|---" * (len(shapes) + 1) + "|")
        for k in dict.fromkeys(r["kernel"] for r in rows if r["head_dim"] == d):
            cells = [f"{tf[(k, d, *sh)]:.0f}" if (k, d, *sh) in tf else "" for sh in shapes]
            out.append(f"| {k} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def run_once(sh) -> int:
    """One launch of the preset build of ``sh`` on fresh N(0, 1) inputs."""
    import cupy

    sched = kernels.schedule("flash2", sh, impl="flashio-hopper")
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, sh.heads, sh.seq_len, sh.head_dim), np.float32)
               for _ in range(3))  # fmt: skip
    comp = gpu.compile_schedule(sched)
    bufs = comp.alloc(q, k, v)
    comp.launch(bufs)
    cupy.cuda.get_current_stream().synchronize()
    print(f"{sched.name} {sched.block_q}x{sched.block_kv} w{sched.warps}: {sh}")
    return 0


CSV_KEYS = ("kernel", "head_dim", "causal", "seq_len", "median_s", "tflops", "block_q",
            "block_kv", "softmax_overlap", "stages", "persistent", "max_abs_diff_vs_sdpa_flash",
            "unwritten")  # fmt: skip


def save(doc: dict, out: Path, stem="hopper_measure", count=flops, keys=CSV_KEYS) -> None:
    """``stem``.json and .csv in ``out``, each written whole (a temporary, then renamed), with
    each row's median seconds and TFLOP/s (``count``: the FLOPs of a shape)."""
    for r in doc["rows"]:
        sh = kernels.AttentionShape(1, r["heads"], r["seq_len"], r["head_dim"], "bf16",
                                    causal=r["causal"])  # fmt: skip
        r["median_s"] = statistics.median(r["times_s"])
        r["tflops"] = count(sh) / r["median_s"] / 1e12
    tmp = out / f"{stem}.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    tmp.replace(out / f"{stem}.json")
    with open(out / f"{stem}.csv.tmp", "w", newline="") as f:
        w = csv.DictWriter(f, keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(doc["rows"])
    (out / f"{stem}.csv.tmp").replace(out / f"{stem}.csv")


def add_run_args(ap, seq_lens: str, backends: tuple[str, ...], kernel: str) -> None:
    """The options this script and benchmarks/hopper_bwd_measure.py share: where to write,
    --table, --once (``kernel``: what it runs), the shapes, PyTorch's kernels, the timing."""
    ap.add_argument("--out", type=Path, help="folder for the JSON and CSV")
    ap.add_argument(
        "--table",
        type=Path,
        metavar="JSON",
        help="print a run's TFLOP/s as a markdown table instead of measuring",
    )
    ap.add_argument(
        "--once",
        metavar="D,N,CAUSAL",
        help=f"run the {kernel} once at head dim D, N keys, causal 0/1 (for Nsight Compute)",
    )
    ap.add_argument("--seq-lens", default=seq_lens)
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument(
        "--backends",
        default=",".join(backends),
        help="PyTorch kernels beside (sdpa-flash first: the reference)",
    )
    ap.add_argument("--reps", type=int, default=10, help="launches per timed set")
    ap.add_argument("--sets", type=int, default=5, help="timed sets (the median is reported)")


def new_doc(args, *sources: Path) -> dict:
    """A run's document: provenance (with the SHA-256 of ``sources`` beside the runner's),
    settings, no rows or errors yet."""
    doc = {"provenance": provenance(), "settings": vars(args) | {"out": None}, "rows": [],
           "errors": []}  # fmt: skip
    doc["provenance"]["python_sources_sha256"].update(
        {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sources}
    )
    return doc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_args(ap, "1024,2048,4096,8192,16384", TORCH_BACKENDS, "preset build")
    args = ap.parse_args(argv)
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return 0
    if args.once:
        d, n, causal = map(int, args.once.split(","))
        return run_once(kernels.AttentionShape(1, args.heads, n, d, "bf16", causal=bool(causal)))
    if args.out is None:
        ap.error("give --out DIR (or --table JSON or --once D,N,CAUSAL)")
    args.out.mkdir(parents=True, exist_ok=True)
    doc = new_doc(args, Path(hopper.__file__), Path(__file__))
    start = time.monotonic()
    for d in map(int, args.head_dims.split(",")):
        for causal in (False, True):
            for n in map(int, args.seq_lens.split(",")):
                sh = kernels.AttentionShape(1, args.heads, n, d, "bf16", causal=causal)
                measure_shape(sh, args, doc["rows"], doc["errors"])
                doc["wall_s"] = round(time.monotonic() - start, 1)
                save(doc, args.out)  # after every shape: a run cut short keeps what it timed
                print(f"d={d} causal={causal} N={n}: {doc['wall_s']:.0f} s", flush=True)
    for r in doc["rows"]:
        print(f"{r['kernel']:26s} d={r['head_dim']:3d} causal={int(r['causal'])} "
              f"N={r['seq_len']:6d} {r['median_s'] * 1e3:8.3f} ms {r['tflops']:6.1f} TFLOP/s "
              f"diff={r.get('max_abs_diff_vs_sdpa_flash')}")  # fmt: skip
    for e in doc["errors"]:
        print("ERROR", e)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
