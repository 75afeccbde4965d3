"""Where this project's forward puts its CTAs, and when each runs: the last, partial wave.

cta_dispatch.py timed CTAs of synthetic work; this records the flash2 forward itself
(kernels/cuda/flash2_fwd.cu built with its probe-only RECORD_CTAS: thread 0 of each CTA writes
its %smid and %globaltimer at its start and end; the default build's cubin is unchanged). For
each configuration of CONFIGS (B = 1, H = 16, bf16) on the whole GPU and on green contexts of
--sms SMs it times the plain kernel (CUDA events, median of --reps, as sm_scaling.py) and
records --launches launches of the recording build, and prints how many SMs the grid's last,
partial wave ran on and how far apart the CTAs of one SM ended.

    python data/gpu/probe/cta_placement.py --out DIR [--sms 64 132] [--reps 10] [--launches 3]

Writes DIR/cta_placement.json.gz (provenance; per context and configuration the plain
kernel's time and, per recorded launch, each CTA's SM, start and end in ns from the launch's
first start).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sm_scaling import GreenContext, compiled, new_doc, time_kernel

from flashio.kernels import gpu

# (head_dim, seq_len, (block_q, block_kv, warps)): the forward configurations of sm_scaling.py
# with a partial last wave on 132 SMs (3 and 1 CTAs an SM)
CONFIGS = ((64, 8192, (64, 64, 4)), (64, 8192, (128, 128, 8)))


def recording(base: gpu.CompiledSchedule):
    """The forward's function built with RECORD_CTAS, and its launch."""
    defs = (*gpu.defines(base.sched), ("RECORD_CTAS", 1))
    module = gpu._module(gpu.source(base.sched), gpu.compile_options(defs))
    (ln,) = base.launches
    fn = module.get_function(ln.function)
    if ln.smem_bytes > gpu.STATIC_SMEM_BYTES:
        fn.max_dynamic_shared_size_bytes = ln.smem_bytes
    return fn, ln


def record(base, bufs, launches: int) -> list[dict]:
    import cupy

    fn, ln = recording(base)
    sh = base.sched.shape
    log = cupy.zeros(3 * ln.grid, cupy.uint64)
    args = (
        *(bufs[x] for x in ("q", "k", "v", "o", "lse")),
        np.int32(sh.heads), np.int32(sh.n_kv_heads), np.int32(sh.seq_len),
        np.float32(sh.scale), np.int32(sh.causal), log,
    )  # fmt: skip
    out = []
    for i in range(launches + 1):  # the first is a warm-up
        log.fill(0)
        fn((ln.grid,), (ln.block,), args, shared_mem=ln.smem_bytes)
        cupy.cuda.get_current_stream().synchronize()
        if i == 0:
            continue
        a = log.get().reshape(-1, 3).astype(np.int64)
        t0 = a[:, 1].min()
        out.append({"sm": a[:, 0].tolist(), "start_ns": (a[:, 1] - t0).tolist(),
                    "end_ns": (a[:, 2] - t0).tolist()})  # fmt: skip
    return out


def resident(sched, base) -> int:
    """CTAs an SM holds of the plain build: the driver's figure, else the model's (the
    census's registers)."""
    import cupy

    ln = base.launches[0]
    try:
        fn = base.function(ln.function)
        return int(
            cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.ptr, ln.block,
                                                                      ln.smem_bytes)
        )  # fmt: skip
    except (AttributeError, TypeError, cupy.cuda.driver.CUDADriverError):
        from flashio import simulator
        from flashio.simulator.simulate import ModelOptions, launch_resources

        gpu_spec = simulator.load_gpu("h200")
        _, _, occs = launch_resources(sched.meta, gpu_spec, ModelOptions(issue_model=True))
        return occs[0].ctas_per_sm


def summary(rec: dict, sms: int, ctas_per_sm: int) -> str:
    """The launch's span, the SMs its last partial wave ran on, and the spread of the ends of
    one SM's first wave of CTAs."""
    sm, start, end = (np.array(rec[k]) for k in ("sm", "start_ns", "end_ns"))
    slots = sms * ctas_per_sm
    tail = len(sm) % slots
    order = np.argsort(start, kind="stable")
    last = order[len(sm) - tail :] if tail else order[:0]
    first = order[:slots]
    spreads = [np.ptp(end[first][sm[first] == s]) for s in np.unique(sm[first])]
    return (
        f"span {end.max() / 1e3:8.1f} us, last wave {tail} CTAs on {len(np.unique(sm[last]))} "
        f"SMs, first wave's CTAs of one SM end {np.median(spreads) / 1e3:.2f} us apart "
        f"(median; max {max(spreads) / 1e3:.2f})"
    )


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--sms", type=int, nargs="+", default=[64, 132])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--launches", type=int, default=3)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = new_doc()
    l2 = doc["provenance"]["l2_bytes"]
    start = time.monotonic()
    for n in args.sms:
        ctx = GreenContext(n)
        row = {"requested_sms": n, "context_sms": ctx.sms, "kernels": []}
        for d, seq, tiles in CONFIGS:
            plain = time_kernel(ctx, "flash2", d, seq, tiles, args.reps, l2)
            with ctx.stream:
                sched, base, sets = compiled("flash2", d, seq, tiles, l2)
                recs = record(base, sets[0], args.launches)
            ctas_per_sm = resident(sched, base)
            row["kernels"].append({"config": f"d={d} N={seq} {tiles}", "plain": plain,
                                   "launches": recs, "ctas_per_sm": ctas_per_sm})  # fmt: skip
            print(f"n={ctx.sms} d={d} N={seq} {tiles}: plain {plain['median_ms']:.3f} ms, "
                  f"{ctas_per_sm} CTAs an SM", flush=True)  # fmt: skip
            for r in recs:
                print("   ", summary(r, ctx.sms, ctas_per_sm), flush=True)
            del sets
        ctx.close()
        doc["contexts"].append(row)
        doc["wall_s"] = time.monotonic() - start
        with gzip.open(out / "cta_placement.json.gz", "wt") as f:
            json.dump(doc, f)


if __name__ == "__main__":
    main()
