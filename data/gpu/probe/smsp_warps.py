"""How an SM deals the warps of its resident CTAs out to its four sub-partitions (SMSPs).

Each warp of a kernel issues the same stream of independent FFMAs (8 chains, enough to issue
one instruction a cycle), so a sub-partition's time is proportional to the warps it holds and
the kernel's time to the busiest one's. CTAs of w warps, exactly c of them resident per SM
(dynamic shared memory admits no more), one wave on every SM. If the SM deals warp slots out
CTA after CTA (slot s to sub-partition s mod 4), the busiest sub-partition holds
ceil(c w / 4) warps; if each CTA's warp i goes to sub-partition i mod 4, it holds
c ceil(w / 4). For c = 2 the two differ at w = 2 (1 against 2 warps) and w = 6 (3 against 4),
and agree at w = 4 and 8 (2 and 4).

    python data/gpu/probe/smsp_warps.py --out DIR

Writes DIR/smsp_warps.json: per (w, c) the median kernel time of 10 launches, and the time per
warp on the busiest sub-partition under each rule.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.gpu_measure import provenance, time_events

SRC = r"""
extern "C" __global__ void spin(float* out, int iters) {
    extern __shared__ float pad[];
    float a0 = threadIdx.x, a1 = a0 + 1, a2 = a0 + 2, a3 = a0 + 3;
    float a4 = a0 + 4, a5 = a0 + 5, a6 = a0 + 6, a7 = a0 + 7;
    const float b = 0.999f, c = 0.001f;
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            a0 = fmaf(a0, b, c); a1 = fmaf(a1, b, c); a2 = fmaf(a2, b, c); a3 = fmaf(a3, b, c);
            a4 = fmaf(a4, b, c); a5 = fmaf(a5, b, c); a6 = fmaf(a6, b, c); a7 = fmaf(a7, b, c);
        }
    }
    float s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
    if (s == 12345.0f) { pad[0] = s; out[blockIdx.x] = pad[threadIdx.x & 7]; }
}
"""
WARPS = (2, 4, 6, 8)
RESIDENT = (1, 2)  # CTAs per SM, enforced by dynamic shared memory
ITERS = 4096


def main(argv=None) -> None:
    import cupy

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"provenance": provenance(), "rows": []}
    dev = cupy.cuda.Device(0)
    sms = dev.attributes["MultiProcessorCount"]
    per_sm = dev.attributes["MaxSharedMemoryPerMultiprocessor"]
    kern = cupy.RawKernel(SRC, "spin")
    kern.max_dynamic_shared_size_bytes = dev.attributes["MaxSharedMemoryPerBlockOptin"]
    res = cupy.zeros(8 * sms, cupy.float32)
    for c in RESIDENT:
        smem = per_sm // (c + 1) + 1024  # c fit an SM, c + 1 do not
        for w in WARPS:

            def launch(i, ev, w=w, smem=smem, c=c):
                if ev:
                    ev[0].record()
                kern((c * sms,), (32 * w,), (res, cupy.int32(ITERS)), shared_mem=smem)
                if ev:
                    ev[1].record()

            t = time_events(launch, 1, 10)
            row = {
                "warps": w,
                "ctas_per_sm": c,
                "smem_bytes": smem,
                "median_ms": t["median_ms"],
                "busiest_if_dealt_in_turn": -(-c * w // 4),
                "busiest_if_by_warp_id": c * -(-w // 4),
            }
            doc["rows"].append(row)
            print(
                f"w={w} c={c}: {t['median_ms']:.4f} ms (busiest SMSP: "
                f"{row['busiest_if_dealt_in_turn']} warps if dealt in turn, "
                f"{row['busiest_if_by_warp_id']} by warp id)",
                flush=True,
            )
            (out / "smsp_warps.json").write_text(json.dumps(doc, indent=1, default=str))


if __name__ == "__main__":
    main()
