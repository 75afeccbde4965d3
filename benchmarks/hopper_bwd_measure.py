"""Time the Hopper backward (kernels/cuda/hopper_bwd.cu) beside PyTorch's attention backward.

One run on an sm_90 GPU: this project's Hopper backward (its three kernels: D = rowsum(dO * O)
with dQ_acc zeroed, hopper_bwd, dQ rounded) at the builds of ``kernels.hopper.BWD_TILES`` (and
``--stages`` Q and dO buffers), and on the same inputs, in the same process, the backward of
PyTorch SDPA's flash backend (flash-attn 2) and of its cuDNN backend: ``torch.autograd.grad`` of
a retained forward, so that only the backward's kernels run. Each is CUDA-event-timed over
``--reps`` back-to-back calls, ``--sets`` times; the median set is reported with TFLOP/s counted
as 10 N^2 d B H (five products of 2 N^2 d each; halved when causal), FlashAttention's papers'
convention. Every Hopper gradient is also compared with SDPA flash's (largest absolute
difference of dQ, dK, dV), a check that the timed kernel computes the gradients. Writes
hopper_bwd_measure.json and .csv (with provenance) to --out.

    python -m benchmarks.hopper_bwd_measure --out data/gpu/hopper --stages 2,3
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import time
from pathlib import Path

import numpy as np

from benchmarks.hopper_measure import (
    add_run_args,
    cupy_events,
    new_doc,
    save,
    table,
    time_events,
    torch_events,
)
from flashio import kernels
from flashio.kernels import gpu, hopper

TORCH_BACKENDS = ("sdpa-flash", "sdpa-cudnn")


def flops(sh) -> float:
    f = 10.0 * sh.batch * sh.heads * sh.seq_len**2 * sh.head_dim
    return f / 2 if sh.causal else f


def torch_backward(q, k, v, do, causal: bool, backend):
    """A zero-argument callable running the backward of one SDPA forward with ``backend``."""
    import torch
    from torch.nn.attention import sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    with sdpa_kernel(backend):
        out = sdpa(q, k, v, is_causal=causal)
    return lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)


def measure_shape(sh, args, rows: list, errors: list) -> None:
    import cupy
    import torch
    from torch.nn.attention import SDPBackend

    rng = np.random.default_rng(0)
    dims = (sh.batch, sh.heads, sh.seq_len, sh.head_dim)
    arrays = [rng.standard_normal(dims) for _ in range(4)]
    tq = [torch.tensor(a, dtype=torch.bfloat16, device="cuda") for a in arrays]
    for t in tq[:3]:
        t.requires_grad_(True)
    bits = [cupy.asarray(t.detach().view(torch.int16).cpu().numpy().view(np.uint16)) for t in tq]
    base = {"seq_len": sh.seq_len, "head_dim": sh.head_dim, "causal": sh.causal,
            "batch": sh.batch, "heads": sh.heads, "dtype": sh.dtype}  # fmt: skip
    backends = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION}
    ref = None
    for name in args.backends.split(","):
        try:
            run = torch_backward(*tq, sh.causal, backends[name])
            grads = run()
            if name == "sdpa-flash":
                ref = [g.float().cpu().numpy() for g in grads]
            ts = time_events(run, torch_events, lambda e: e.synchronize(), args.reps, args.sets)
            rows.append({**base, "kernel": name, "times_s": ts})
        except Exception as e:  # a backend that does not run the shape is recorded, not fatal
            errors.append(f"{name} {base}: {type(e).__name__}: {e}"[:500])
    for (d, bq, bkv), stages in itertools.product(hopper.BWD_TILES, args.stages):
        if d != sh.head_dim:
            continue
        label = f"hopper bwd {bq}x{bkv} {stages} stages"
        impl = hopper.bwd_description(bkv, stages)
        sched = kernels.Schedule("flash2_bwd", sh, bq, bkv, 4 * (bkv // 64 + 1), impl=impl)
        try:
            comp = gpu.compile_schedule(sched)
            bufs = comp.alloc(*bits)
            comp.launch(bufs)
            cupy.cuda.get_current_stream().synchronize()
            got = comp.outputs(bufs)
            diffs = None
            if ref is not None:
                diffs = [float(np.nanmax(np.abs(g - r))) for g, r in zip(got, ref, strict=True)]
            unwritten = int(sum(np.isnan(g).sum() for g in got))
            run = functools.partial(comp.launch, bufs)
            ts = time_events(run, cupy_events, lambda e: e.synchronize(), args.reps, args.sets)
            rows.append({**base, "kernel": label, "block_q": bq, "block_kv": bkv,
                         "stages": stages, "times_s": ts,
                         "max_abs_diff_vs_sdpa_flash": diffs, "unwritten": unwritten})  # fmt: skip
        except Exception as e:
            errors.append(f"{label} {base}: {type(e).__name__}: {e}"[:2000])


def run_once(sh) -> int:
    """One call of the preset backward of ``sh`` (its three kernels) on N(0, 1) inputs."""
    import cupy

    sched = kernels.schedule("flash2_bwd", sh, impl="flashio-hopper")
    rng = np.random.default_rng(0)
    dims = (sh.batch, sh.heads, sh.seq_len, sh.head_dim)
    comp = gpu.compile_schedule(sched)
    bufs = comp.alloc(*(rng.standard_normal(dims, np.float32) for _ in range(4)))
    comp.launch(bufs)
    cupy.cuda.get_current_stream().synchronize()
    print(f"{sched.name} {sched.block_q}x{sched.block_kv} w{sched.warps}: {sh}")
    return 0


CSV_KEYS = ("kernel", "head_dim", "causal", "seq_len", "median_s", "tflops", "block_q",
            "block_kv", "stages", "max_abs_diff_vs_sdpa_flash", "unwritten")  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_args(ap, "1024,4096,8192,16384", TORCH_BACKENDS, "preset backward")
    ap.add_argument(
        "--stages",
        type=lambda v: tuple(map(int, v.split(","))),
        default=(hopper.BWD_STAGES,),
        help="Q and dO buffers of the Hopper builds, e.g. 2,3 (one build each)",
    )
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
    doc = new_doc(args, Path(hopper.__file__), Path(__file__), gpu.CUDA_DIR / "hopper_bwd.cu")
    start = time.monotonic()
    for d in map(int, args.head_dims.split(",")):
        for causal in (False, True):
            for n in map(int, args.seq_lens.split(",")):
                sh = kernels.AttentionShape(1, args.heads, n, d, "bf16", causal=causal)
                measure_shape(sh, args, doc["rows"], doc["errors"])
                doc["wall_s"] = round(time.monotonic() - start, 1)
                save(doc, args.out, "hopper_bwd_measure", flops, CSV_KEYS)
                here = [r for r in doc["rows"] if (r["seq_len"], r["head_dim"]) == (n, d)]
                cells = ", ".join(f"{r['kernel']} {r['tflops']:.0f}" for r in here
                                  if r["causal"] == causal)  # fmt: skip
                print(f"d={d} N={n}{' causal' if causal else ''} TFLOP/s: {cells}", flush=True)
    for e in doc["errors"]:
        print("error:", e)
    return 1 if doc["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
