"""Where a CTA alone on its SM spends its time: this project's kernels for Nsight Compute's
per-instruction warp-state sampling.

occupancy.json has the 64x64, 4-warp forward at d = 64 taking 0.560 ms with one CTA per SM
(its shared memory padded), where the warp replay's step for a CTA alone gives 0.419 ms: a
step of about 1,890 cycles on the H200 against the replay's 1,414. The backward of the same
tiling agrees within 3.4% alone. This probe launches those kernels exactly as occupancy.py
times them (B x H = 1 x 16, N = 4096, bf16; k = 1 .. native CTAs per SM), each twice (the
second launch is the one to read), so that Nsight Compute's SourceCounters section samples
where each instruction's warps wait, alone and beside other CTAs.

    ncu --clock-control none --section SourceCounters ... -k regex:'^flash2_(fwd|bwd)$' \\
        python data/gpu/probe/lone_cta.py --order DIR/lone_cta_launches.json

Writes the launch order (schedule, head dim, tiles, k, CTAs per SM the driver reports) to
--order; data/gpu/runs/lone_cta_run.sh exports the per-instruction samples.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from occupancy import padded, resident

from benchmarks.gpu_measure import _random_inputs
from flashio import kernels
from flashio.kernels import gpu

LAUNCHES = 2  # the first warms the caches and the clock; the second is read
# (schedule, head dim, (block_q, block_kv, warps)): the forward that is 25% too fast alone,
# the d = 128 forward (8% alone), and the backward that is right alone (a control)
CONFIGS = (
    ("flash2", 64, (64, 64, 4)),
    ("flash2", 128, (64, 64, 4)),
    ("flash2_bwd", 64, (64, 64, 4)),
)


def launches():
    """(compiled schedule with its main kernel padded to k CTAs an SM, launch-order row)."""
    for name, d, tiles in CONFIGS:
        shape = kernels.AttentionShape(1, 16, 4096, d, "bf16")
        c = gpu.compile_schedule(kernels.schedule(name, shape, *tiles))
        kernel = "flash2_bwd" if name == "flash2_bwd" else "flash2_fwd"
        main = next(i for i, ln in enumerate(c.launches) if ln.function == kernel)
        fn = c.function(kernel)
        smem = c.launches[main].smem_bytes
        fn.max_dynamic_shared_size_bytes = max(fn.max_dynamic_shared_size_bytes, smem)
        native = resident(fn, tiles[2], smem)
        for k in range(1, native + 1):
            lns = list(c.launches)
            lns[main] = padded(lns[main], k) if k < native else lns[main]
            ck = dataclasses.replace(c, launches=tuple(lns))
            smem_k = ck.launches[main].smem_bytes
            fn.max_dynamic_shared_size_bytes = max(fn.max_dynamic_shared_size_bytes, smem_k)
            row = {"schedule": name, "head_dim": d, "tiles": list(tiles), "k": k,
                   "ctas_per_sm": resident(fn, tiles[2], smem_k), "smem_bytes": smem_k,
                   "kernel": kernel, "ctas": ck.launches[main].grid}  # fmt: skip
            yield ck, row


def main(argv=None) -> None:
    import cupy

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--order", type=Path, required=True, help="where to write the launch order")
    args = ap.parse_args(argv)
    order = []
    for ck, row in launches():
        sh = ck.sched.shape
        n_in = 4 if row["schedule"] == "flash2_bwd" else 3
        dims = (sh.batch, sh.heads, sh.seq_len, sh.head_dim)
        bufs = ck.alloc(*_random_inputs(dims, n_in, sh.dtype))
        for _ in range(LAUNCHES):
            ck.launch(bufs)
        cupy.cuda.runtime.deviceSynchronize()
        del bufs
        cupy.get_default_memory_pool().free_all_blocks()
        order.append({**row, "launches": LAUNCHES, "elements": math.prod(dims)})
        print(row, flush=True)
    args.order.write_text(json.dumps({"launches": order}, indent=1))


if __name__ == "__main__":
    main()
