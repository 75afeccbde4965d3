"""Speed of simulate(): wall time, events per second and peak memory, with the L2 model on.

    python -m benchmarks.bench_simulate          # FA2 N = 4k..128k, causal 64k, standard 16k
    python -m benchmarks.bench_simulate --quick  # FA2 N = 4k, 16k, causal 64k, standard 16k

FlashAttention-2 forward on h200 (B=1, H=32, d=128, 128x64 tiles, fp16), its causal form at
N = 64k and standard attention at N = 16k, each in its own process (peak RSS is its own),
replayed exactly and sampled (``mode="sampled"``: the sampled run's seconds, and its time and
HBM bytes against the exact run's, with its own error estimates); then the jitted engine against
the pure-Python oracle (tests/oracle_sim.py) on one small trace, side by side in one process.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from benchmarks._common import peak_rss_bytes, run_isolated
from flashio import kernels, simulator

FLASH2_NS = (4096, 16384, 65536, 131072)
STANDARD_N = 16384
CAUSAL_N = 65536


def _schedule(name: str, n: int, causal: bool = False):
    shape = kernels.AttentionShape(
        batch=1, heads=32, seq_len=n, head_dim=128, dtype="fp16", causal=causal
    )
    return kernels.schedule(name, shape, block_q=128, block_kv=64, warps=4)


def measure(name: str, n: int, causal: bool = False) -> dict:
    gpu = simulator.load_gpu("h200")
    # compile (or load from numba's cache) outside the timing; few SMs, so that the small
    # warm-up run also takes the windowed path
    simulator.simulate(_schedule(name, 256), gpu.replace(sm_count=4), window_events=1000)
    sched = _schedule(name, n, causal)
    events = sched.n_events()
    t0, c0 = time.perf_counter(), time.process_time()
    res = simulator.simulate(sched, gpu)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    t0 = time.perf_counter()
    sampled = simulator.simulate(sched, gpu, mode="sampled")
    sampled_s = time.perf_counter() - t0
    return {
        "sampled_seconds": sampled_s,
        "sampled_time_error": sampled.time_s / res.time_s - 1,
        "sampled_hbm_error": sampled.hbm_bytes / res.hbm_bytes - 1,
        "sampled_estimates": [sampled.sampling.time_error, sampled.sampling.hbm_error],
        "sampled_replayed": sampled.sampling.replayed_fraction,
        "schedule": name,
        "seq_len": n,
        "events": events,
        "seconds": seconds,
        "cpu_seconds": cpu,  # both threads: the engine and the window maker
        "events_per_s": events / seconds,
        "peak_rss_bytes": peak_rss_bytes(),
        "simulated_time_s": res.time_s,
        "hbm_bytes": res.hbm_bytes,
    }


def oracle_speedup() -> dict:
    sys.path.insert(0, ".")
    from tests.oracle_sim import simulate_oracle

    gpu = simulator.load_gpu("h200").replace(sm_count=8, l2_bytes=64 * 8192)
    shape = kernels.AttentionShape(batch=1, heads=4, seq_len=512, head_dim=64, dtype="fp16")
    trace = kernels.schedule("flash2", shape, block_q=64, block_kv=64).trace()
    simulator.simulate(trace, gpu)
    t0 = time.perf_counter()
    simulator.simulate(trace, gpu)
    fast = time.perf_counter() - t0
    t0 = time.perf_counter()
    simulate_oracle(trace, gpu)
    slow = time.perf_counter() - t0
    return {"events": len(trace), "jit_s": fast, "oracle_s": slow, "speedup": slow / fast}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.bench_simulate", description=__doc__.split("\n\n", 1)[0],
        epilog=__doc__.split("\n\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    p.add_argument("--quick", action="store_true", help="FA2 at N = 4k and 16k only")
    p.add_argument(
        "--one",
        nargs=2,
        metavar=("SCHEDULE", "N"),
        help="one case in this process, printed as JSON (what each child runs)",
    )
    p.add_argument("--causal", action="store_true", help="with --one: the causal form")
    a = p.parse_args(argv)
    if a.one:
        print(json.dumps(measure(a.one[0], int(a.one[1]), causal=a.causal)))
        return
    ns = FLASH2_NS[:2] if a.quick else FLASH2_NS
    print(
        "simulate() on h200, L2 model on, B=1, H=32, d=128, 128x64 tiles, fp16; one process each"
    )
    print(
        f"{'schedule':>13} {'N':>7} {'events':>13} {'seconds':>8} {'M ev/s':>7} "
        f"{'CPU s':>7} {'M ev/CPU s':>10} {'RSS MiB':>8}  {'sampled s':>9} {'replayed':>8} "
        f"{'time err':>9} {'HBM err':>8} {'estimates':>15}"
    )
    runs = [("flash2", n, False) for n in ns] + [("flash2", CAUSAL_N, True)]
    runs += [("standard", STANDARD_N, False)]
    for name, n, causal in runs:
        r = run_isolated(
            "benchmarks.bench_simulate", "--one", name, str(n), *(["--causal"] if causal else [])
        )
        label = f"{name} causal" if causal else name
        print(
            f"{label:>13} {n:>7} {r['events']:>13,} {r['seconds']:>8.2f} "
            f"{r['events_per_s'] / 1e6:>7.2f} {r['cpu_seconds']:>7.2f} "
            f"{r['events'] / r['cpu_seconds'] / 1e6:>10.2f} {r['peak_rss_bytes'] / 2**20:>8.0f}"
            f"  {r['sampled_seconds']:>9.2f} {r['sampled_replayed']:>8.1%} "
            f"{r['sampled_time_error']:>+9.2%} "
            f"{r['sampled_hbm_error']:>+8.2%} "
            f"{r['sampled_estimates'][0]:>7.2%}/{r['sampled_estimates'][1]:.2%}"
        )
    o = oracle_speedup()
    print(
        f"\njitted engine vs pure-Python oracle on one {o['events']:,}-event trace: "
        f"{o['jit_s'] * 1e3:.1f} ms vs {o['oracle_s']:.2f} s, {o['speedup']:.0f}x"
    )


if __name__ == "__main__":
    main()
