"""The H200 on fewer SMs: this project's kernels and a copy, run inside CUDA green contexts.

A green context owns a subset of the SMs and shares the whole L2 and HBM with the rest of the
GPU, so timing a kernel in green contexts of n SMs measures how its time scales with the SM count
alone: the measurement behind ``h200.replace(sm_count=n)`` (docs/gpus.md).

For each n in --sms (132 = the whole GPU, the primary context) it

- creates a green context of n SMs with cuda-bindings (cuDevSmResourceSplitByCount,
  cuGreenCtxCreate) and reads back the SMs it got (cuCtxGetDevResource), then checks that count
  independently: a kernel of many CTAs records %smid and the distinct values are counted;
- times a device-to-device copy (bytes read + written) on a stream of that context, and
  cp.async reads into shared memory (probe.py's "chunked" kernel: 32 or 64 KiB in flight per
  CTA, 2 to 6 CTAs per SM, from an L2-resident 16 MiB buffer and from HBM): what one SM's path
  to the memory system carries when enough bytes are in flight;
- times the flash2 forward and backward of kernels/gpu.py, two tilings each, d = 64 and 128,
  with benchmarks.gpu_measure's method (CUDA events, warm-up, median, rotating inputs).

    python data/gpu/probe/sm_scaling.py --out DIR [--sms 8 16 32 64 96 132] [--reps 10]
        [--group G] [--configs I ...] [--seq-len N]

--group G takes the G-th of the groups of n SMs the driver splits the GPU into (0: the first,
as every run before; another group is another set of SMs, to tell a kernel's scaling from
where its SMs sit); --configs runs only those entries of CONFIGS (0-based); --seq-len runs
them at sequence length N instead of their own (so that a wave of CTAs covers a different
share of a head).

Writes DIR/sm_scaling.json (provenance, per-n SM counts, copy bandwidth, kernel times).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe import events_ms, module

from benchmarks.gpu_measure import (
    _random_inputs,
    _timed,
    n_sets_for,
    provenance,
    time_events,
)
from flashio import kernels
from flashio.kernels import gpu

SMS = (8, 16, 32, 64, 96, 132)
# (schedule, head_dim, seq_len, (block_q, block_kv, warps)); batch 1, 16 heads, bf16
CONFIGS = (
    ("flash2", 64, 2048, (128, 128, 8)),
    ("flash2", 64, 8192, (128, 128, 8)),
    ("flash2", 64, 8192, (64, 64, 4)),
    ("flash2", 128, 2048, (128, 64, 8)),
    ("flash2", 128, 8192, (128, 64, 8)),
    ("flash2", 128, 8192, (128, 128, 8)),
    ("flash2_bwd", 64, 8192, (64, 64, 4)),
    ("flash2_bwd", 64, 8192, (64, 128, 8)),
    ("flash2_bwd", 128, 8192, (64, 64, 4)),
    ("flash2_bwd", 128, 8192, (64, 128, 8)),
)
SMID_SRC = r"""
extern "C" __global__ void smid(unsigned int *out) {
    unsigned int id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    if (threadIdx.x == 0) out[blockIdx.x] = id;
    // keep the CTA resident a while so that later CTAs spread over every SM of the context
    long long t0 = clock64();
    while (clock64() - t0 < 20000) {}
}
"""


def _ok(result):
    """cuda-bindings return (CUresult, values...): raise on an error, return the values."""
    from cuda.bindings import driver as cu

    err, *rest = result
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA driver error {err}")
    return rest[0] if len(rest) == 1 else rest


class GreenContext:
    """n SMs of device 0 and a stream on them; n >= the device's SM count means the whole GPU
    (the primary context, CuPy's own stream)."""

    def __init__(self, n: int, group: int = 0):
        import cupy
        from cuda.bindings import driver as cu

        _ok(cu.cuInit(0))
        dev = _ok(cu.cuDeviceGet(0))
        sm_type = cu.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM
        whole = _ok(cu.cuDeviceGetDevResource(dev, sm_type))
        self.requested, self.device_sms = n, whole.sm.smCount
        if n >= whole.sm.smCount:
            self.gctx, self.stream = None, cupy.cuda.Stream(non_blocking=True)
            self.sms = whole.sm.smCount
            return
        groups, count, _ = _ok(cu.cuDevSmResourceSplitByCount(group + 1, whole, 0, n))
        if count <= group:
            raise ValueError(f"the GPU splits into {count} groups of {n} SMs, not {group + 1}")
        desc = _ok(cu.cuDevResourceGenerateDesc([groups[group]], 1))
        flags = cu.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM
        self.gctx = _ok(cu.cuGreenCtxCreate(desc, dev, flags))
        ctx = _ok(cu.cuCtxFromGreenCtx(self.gctx))
        self.sms = _ok(cu.cuCtxGetDevResource(ctx, sm_type)).sm.smCount
        nonblocking = cu.CUstream_flags.CU_STREAM_NON_BLOCKING
        handle = _ok(cu.cuGreenCtxStreamCreate(self.gctx, nonblocking, 0))
        self.stream = cupy.cuda.ExternalStream(int(handle))
        self._handle = handle

    def close(self):
        from cuda.bindings import driver as cu

        if self.gctx is not None:
            self.stream.synchronize()
            _ok(cu.cuStreamDestroy(self._handle))
            _ok(cu.cuGreenCtxDestroy(self.gctx))


def distinct_sms(ctx: GreenContext) -> list[int]:
    """The SMs (``%smid``) that CTAs of a launch on ``ctx``'s stream actually ran on."""
    import cupy

    kern = cupy.RawKernel(SMID_SRC, "smid")
    ctas = 64 * ctx.device_sms
    out = cupy.zeros(ctas, cupy.uint32)
    with ctx.stream:
        kern((ctas,), (32,), (out,))
    ctx.stream.synchronize()
    return [int(i) for i in cupy.unique(out).get()]


def copy_bandwidth(ctx: GreenContext, reps: int) -> dict:
    import cupy

    n = 1 << 30
    with ctx.stream:
        src, dst = cupy.random.random(n // 4, dtype=cupy.float32), cupy.empty(n // 4, cupy.float32)
        t = time_events(lambda i, ev: _timed(ev, lambda: cupy.copyto(dst, src)), 1, reps)
    return {"copy_bytes": 2 * n, "median_ms": t["median_ms"],
            "bytes_per_s": 2 * n / (t["median_ms"] * 1e-3)}  # fmt: skip


def chunked_reads(ctx: GreenContext, reps: int) -> list[dict]:
    """cp.async reads of CHUNK bytes per CTA, waited for, repeated (probe.py's kernel), on
    ``ctx``'s SMs: bytes per second against bytes in flight per SM."""
    import cupy

    rows = []
    with ctx.stream:
        big = cupy.ones((2 << 30) // 4, cupy.uint32)
        sink = cupy.zeros(4, cupy.int32)
        for chunk in (32768, 65536):
            fn = module(ILP=1, OP=0, CHUNK=chunk).get_function("chunked")
            fn.max_dynamic_shared_size_bytes = chunk
            for ctas_per_sm in (4, 6) if chunk == 32768 else (2, 3):  # fit in 227 KiB
                for region, label in ((big.nbytes, "hbm"), (16 << 20, "l2")):
                    g = ctx.sms * ctas_per_sm
                    iters = max(8, (256 << 20) // (g * chunk)) if label == "hbm" else 64
                    args = (big, np.int64(region), np.int32(iters), sink)
                    med, _ = events_ms(fn, g, 256, args, chunk, reps=reps)
                    nbytes = g * iters * chunk
                    rows.append(dict(chunk_bytes=chunk, ctas_per_sm=ctas_per_sm, source=label,
                                     bytes=nbytes, median_ms=med,
                                     bytes_per_s=nbytes / (med * 1e-3)))  # fmt: skip
    return rows


def compiled(name, d, n, tiles, l2):
    """``name``'s schedule (B = 1, H = 16, bf16), compiled, and inputs rotated past the L2
    (on CuPy's current stream: the backward's inputs are made by a forward)."""
    shape = kernels.AttentionShape(1, 16, n, d, "bf16")
    sched = kernels.schedule(name, shape, *tiles)
    c = gpu.compile_schedule(sched)
    dims = (shape.batch, shape.heads, shape.seq_len, shape.head_dim)
    n_in = 4 if name.endswith("_bwd") else 3
    n_sets = n_sets_for(math.prod(dims) * 2 * n_in, l2)
    return sched, c, [c.alloc(*_random_inputs(dims, n_in, shape.dtype)) for _ in range(n_sets)]


def time_kernel(ctx, name, d, n, tiles, reps, l2):
    import cupy

    with ctx.stream:
        sched, c, sets = compiled(name, d, n, tiles, l2)
        n_sets = len(sets)
        t = time_events(
            lambda i, ev: c.launch(sets[i], events=ev), n_sets, reps, n_events=len(c.launches) + 1
        )
    cupy.get_default_memory_pool().free_all_blocks()
    t.update(schedule=name, kernels=[ln.function for ln in c.launches], **sched.shape.to_dict(),
             block_q=sched.block_q, block_kv=sched.block_kv, warps=sched.warps,
             rotate_buffers=n_sets)  # fmt: skip
    return t


def new_doc(**fields) -> dict:
    """A probe's output: provenance (with the repo-relative command, the device's output folder
    written ``$OUT``: benchmarks._common.command_line), no contexts yet, and ``fields``."""
    return {"provenance": provenance(), "contexts": [], **fields}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--sms", type=int, nargs="+", default=list(SMS))
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--group", type=int, default=0, help="which group of n SMs (default 0)")
    ap.add_argument("--configs", type=int, nargs="+", help="entries of CONFIGS (default all)")
    ap.add_argument("--seq-len", type=int, help="run the configurations at this N instead")
    args = ap.parse_args(argv)
    configs = CONFIGS if args.configs is None else [CONFIGS[i] for i in args.configs]
    if args.seq_len:
        configs = [(name, d, args.seq_len, tiles) for name, d, _, tiles in configs]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = new_doc(errors=[])
    l2 = doc["provenance"]["l2_bytes"]
    start = time.monotonic()
    for n in args.sms:
        ctx = GreenContext(n, args.group)
        row = {"requested_sms": n, "context_sms": ctx.sms, "green_context": ctx.gctx is not None}
        row["group"] = args.group
        row["smids"] = distinct_sms(ctx)
        row["distinct_smids"] = len(row["smids"])
        row["copy"] = copy_bandwidth(ctx, args.reps)
        row["chunked"] = chunked_reads(ctx, args.reps)
        best = max(r["bytes_per_s"] for r in row["chunked"])
        row["kernels"] = []
        copy = row["copy"]["bytes_per_s"]
        print(
            f"n={n}: context {ctx.sms} SMs, {row['distinct_smids']} distinct %smid, copy "
            f"{copy / 1e12:.2f} TB/s, cp.async reads up to {best / 1e12:.2f} TB/s "
            f"({best / ctx.sms / 1e9:.1f} GB/s per SM)",
            flush=True,
        )
        for name, d, seq, tiles in configs:
            try:
                t = time_kernel(ctx, name, d, seq, tiles, args.reps, l2)
            except Exception as e:  # keep going; record what failed
                doc["errors"].append(
                    f"n={n} {name} d={d} N={seq} {tiles}: {type(e).__name__}: {e}"
                )
                continue
            row["kernels"].append(t)
            print(f"  {name:10s} d={d:3d} N={seq:5d} {tiles} {t['median_ms']:9.3f} ms", flush=True)
        ctx.close()
        doc["contexts"].append(row)
        doc["wall_s"] = time.monotonic() - start
        (out / "sm_scaling.json").write_text(json.dumps(doc, indent=1, default=str))


if __name__ == "__main__":
    main()
