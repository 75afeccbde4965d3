"""Trace-generation speed: FlashAttention-2 forward events per second and peak memory.

    python -m benchmarks.bench_trace            # N = 4k, 16k, 64k, 128k (B=1, H=32, d=128)

Each N runs in its own process (so its peak RSS is its own); events are generated in windows of
CTAs, as the simulator consumes them, so memory stays bounded however long the sequence.
"""

from __future__ import annotations

import argparse
import json
import time

from benchmarks._common import peak_rss_bytes, run_isolated
from flashio import kernels

SEQ_LENS = (4096, 16384, 65536, 131072)
WINDOW_CTAS = 256


def measure(n: int) -> dict:
    shape = kernels.AttentionShape(batch=1, heads=32, seq_len=n, head_dim=128, dtype="fp16")
    sched = kernels.schedule("flash2", shape, block_q=128, block_kv=64, warps=4)
    sched.cta_events(0, 0, 1)  # compile outside the timing
    ctas = sched.kernels[0].ctas
    events = 0
    t0 = time.perf_counter()
    for c0 in range(0, ctas, WINDOW_CTAS):
        events += len(sched.cta_events(0, c0, min(ctas, c0 + WINDOW_CTAS)))
    seconds = time.perf_counter() - t0
    return {
        "seq_len": n,
        "events": events,
        "seconds": seconds,
        "events_per_s": events / seconds,
        "peak_rss_bytes": peak_rss_bytes(),
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_trace", description=__doc__.split("\n\n", 1)[0],
        epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    p.add_argument(
        "n",
        nargs="?",
        type=int,
        help="one N in this process, printed as JSON "
        "(what each child runs); without it every N, each in its own process",
    )
    a = p.parse_args(argv)
    if a.n is not None:  # child: one measurement
        print(json.dumps(measure(a.n)))
        return
    print("FlashAttention-2 forward trace generation, B=1, H=32, d=128, 128x64 tiles, fp16,")
    print(f"windows of {WINDOW_CTAS} CTAs, one process per N")
    print(f"{'N':>8} {'events':>14} {'seconds':>9} {'M events/s':>11} {'peak RSS MiB':>13}")
    for n in SEQ_LENS:
        r = run_isolated("benchmarks.bench_trace", str(n))
        print(
            f"{n:>8} {r['events']:>14,} {r['seconds']:>9.2f} {r['events_per_s'] / 1e6:>11.1f} "
            f"{r['peak_rss_bytes'] / 2**20:>13.0f}"
        )


if __name__ == "__main__":
    main()
