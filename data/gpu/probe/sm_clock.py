"""The SM clock and the L2's latency while this project's attention kernels run.

A spy kernel (one thread on each SM of a green context of --spy-sms SMs) reads %globaltimer
(nanoseconds) and clock64 (its SM's cycles) every --gap-us, for about --seconds, and each time
times 64 dependent L2 hits (a pointer chase, ld.global.cg, over a ring of 64 lines). It runs
alone (the idle chip) and then beside each kernel of CLOCKED, launched back to back on a
green context of --work-sms other SMs (sm_scaling.py's GreenContext): the clock of SMs that
do not run the kernel, and the L2's latency under the kernel's traffic. The clock of the SMs
that do run it is Nsight Compute's (sm__cycles_elapsed over the kernel's duration), on
`--once`, which launches each kernel once inside a green context of --once-sms SMs
(data/gpu/runs/sm_clock_run.sh). NVML's SM clock is sampled beside the spy; it reads the
1980 MHz the driver asks for throughout, whatever the SMs run at.

    python data/gpu/probe/sm_clock.py --out DIR
    python data/gpu/probe/sm_clock.py --once [--once-sms N]   # each kernel once, for ncu

Writes DIR/sm_clock.json: per run the spy's clock (GHz per interval) and L2 hit latency (ns),
the middle half's medians, and NVML's clock.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sm_scaling import GreenContext, compiled, distinct_sms

from benchmarks.gpu_measure import provenance

# kernels whose clock is sampled: (schedule, head_dim, seq_len, tiles), B=1, H=16, bf16
CLOCKED = (
    ("flash2", 64, 2048, (128, 128, 8)),
    ("flash2", 64, 8192, (64, 64, 4)),
    ("flash2", 128, 8192, (128, 64, 8)),
    ("flash2_bwd", 64, 8192, (64, 128, 8)),
)
NVML_CLOCK_SM = 1


class Clock:
    """The SM clock read through NVML (libnvidia-ml, the driver's library)."""

    def __init__(self):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        if self.lib.nvmlInit_v2() != 0:
            raise RuntimeError("nvmlInit failed")
        self.handle = ctypes.c_void_p()
        if self.lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self.handle)) != 0:
            raise RuntimeError("nvmlDeviceGetHandleByIndex failed")

    def mhz(self) -> int:
        out = ctypes.c_uint()
        self.lib.nvmlDeviceGetClockInfo(self.handle, NVML_CLOCK_SM, ctypes.byref(out))
        return int(out.value)


def _sample(clock: Clock, samples: list, done: threading.Event) -> None:
    while not done.is_set():
        samples.append(clock.mhz())
        time.sleep(0.005)


SPY = r"""
extern "C" __global__ void spy(unsigned long long* out, int samples, unsigned long long gap,
                               const unsigned int* __restrict__ chase, int hops) {
    if (threadIdx.x != 0) return;
    unsigned long long* o = out + 3ull * samples * blockIdx.x;
    unsigned long long t, t1, last = 0;
    unsigned int at = blockIdx.x * 32u;
    for (int i = 0; i < samples;) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - last >= gap) {
            o[3 * i] = t;
            o[3 * i + 1] = clock64();
            for (int h = 0; h < hops; ++h) at = __ldcg(chase + at);  // dependent L2 hits
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
            o[3 * i + 2] = t1 - t;
            last = t;
            ++i;
        }
    }
    if (at == 0xffffffffu) out[0] = at;  // keeps the chase
}
"""
CHASE_BYTES = 64 * 128  # a ring of 64 lines, all touched at every sample: it stays in L2
HOPS = 64


def spy_run(spy_ctx, spy_sms: int, samples: int, gap_ns: int, clock: Clock, busy=None) -> dict:
    """The spy's clock, alone or while ``busy()`` keeps the other SMs working."""
    import cupy

    kern = cupy.RawKernel(SPY, "spy")
    out = cupy.zeros(3 * samples * spy_sms, cupy.uint64)
    lines = CHASE_BYTES // 128
    order = np.random.default_rng(0).permutation(lines)
    ring = np.zeros(CHASE_BYTES // 4, np.uint32)  # each line's first word: the next line's
    ring[order * 32] = np.roll(order, -1) * 32
    chase = cupy.asarray(ring)
    nvml, done = [], threading.Event()
    th = threading.Thread(target=_sample, args=(clock, nvml, done))
    th.start()
    with spy_ctx.stream:
        args = (out, np.int32(samples), np.uint64(gap_ns), chase, np.int32(HOPS))
        kern((spy_sms,), (32,), args)
    if busy is not None:
        busy()  # enqueued (blocking when the launch queue is full) while the spy runs
    spy_ctx.stream.synchronize()
    done.set()
    th.join()
    r = out.get().reshape(spy_sms, samples, 3).astype(np.float64)
    ghz = np.diff(r[:, :, 1], axis=1) / np.diff(r[:, :, 0], axis=1)
    mid = ghz[:, samples // 4 : 3 * samples // 4]
    hop = r[:, samples // 4 : 3 * samples // 4, 2] / HOPS
    nv = sorted(nvml[len(nvml) // 4 : 3 * len(nvml) // 4]) or [0]
    return {"spy_ghz_median": float(np.median(mid)), "spy_ghz_min": float(mid.min()),
            "spy_ghz_max": float(mid.max()), "spy_ghz_per_sm": np.median(mid, axis=1).tolist(),
            "l2_hit_ns_median": float(np.median(hop)), "l2_hit_ns_per_sm":
            np.median(hop, axis=1).tolist(), "nvml_mhz_median": nv[len(nv) // 2],
            "nvml_samples": len(nvml)}  # fmt: skip


def main(argv=None) -> None:

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--spy-sms", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=0.5)
    ap.add_argument("--gap-us", type=float, default=250.0)
    ap.add_argument(
        "--work-sms",
        type=int,
        nargs="+",
        default=[112],
        help="SMs the kernels run on (at most 14 x --spy-sms)",
    )
    ap.add_argument("--spy-group", type=int, default=14, help="which group of --spy-sms SMs")
    ap.add_argument("--once", action="store_true", help="each kernel once (for ncu) and exit")
    ap.add_argument("--once-sms", type=int, help="--once on a green context of this many SMs")
    args = ap.parse_args(argv)
    prov = provenance()
    if args.once:  # on a green context of --once-sms SMs (default: the whole GPU)
        ctx = GreenContext(args.once_sms or 10**6)
        with ctx.stream:
            for name, d, n, tiles in CLOCKED:
                _, c, sets = compiled(name, d, n, tiles, prov["l2_bytes"])
                c.launch(sets[0])
                ctx.stream.synchronize()
        ctx.close()
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # the H200 splits into 15 groups of 8 SMs: the kernels take the first, the spy by default
    # the last (another group puts it beside the kernels' SMs, in their GPCs)
    spy_ctx = GreenContext(args.spy_sms, group=args.spy_group)
    spy_ids = distinct_sms(spy_ctx)
    samples = int(args.seconds * 1e6 / args.gap_us)
    gap_ns = int(args.gap_us * 1e3)
    clock = Clock()
    doc = {"provenance": prov, "spy_smids": spy_ids, "runs": []}
    row = {"kernel": None} | spy_run(spy_ctx, spy_ctx.sms, samples, gap_ns, clock)
    doc["runs"].append(row)
    print(f"idle: spy {row['spy_ghz_median']:.3f} GHz, L2 hit {row['l2_hit_ns_median']:.0f} ns, "
          f"NVML {row['nvml_mhz_median']} MHz")  # fmt: skip
    for work_sms in args.work_sms:
        work = GreenContext(work_sms)
        work_ids = distinct_sms(work)
        if set(spy_ids) & set(work_ids):
            raise SystemExit(f"the spy's SMs {spy_ids} overlap the kernels' {work_ids}")
        doc["runs"] += beside(work, spy_ctx, samples, gap_ns, clock, prov["l2_bytes"], args)
        work.close()
        (out / "sm_clock.json").write_text(json.dumps(doc, indent=1))
    spy_ctx.close()


def beside(work, spy_ctx, samples, gap_ns, clock, l2, args) -> list[dict]:
    """The spy's clock beside each kernel of CLOCKED running on ``work``'s SMs."""
    import cupy

    rows = []
    for name, d, n, tiles in CLOCKED:
        with work.stream:
            _, c, sets = compiled(name, d, n, tiles, l2)
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            c.launch(sets[0])
            start.record()
            c.launch(sets[1 % len(sets)])
            stop.record()
            stop.synchronize()
            once = cupy.cuda.get_elapsed_time(start, stop) * 1e-3
        launches = max(4, int(1.5 * args.seconds / once))  # outlasts the spy

        def busy(c=c, sets=sets, launches=launches):
            with work.stream:
                for i in range(launches):
                    c.launch(sets[i % len(sets)])

        row = {
            "kernel": [name, d, n, list(tiles)],
            "work_sms": work.sms,
            "kernel_s": once,
            "launches": launches,
        }
        row |= spy_run(spy_ctx, spy_ctx.sms, samples, gap_ns, clock, busy)
        work.stream.synchronize()
        rows.append(row)
        cupy.get_default_memory_pool().free_all_blocks()
        print(
            f"{name} d={d} N={n} {tiles} on {work.sms} SMs ({once * 1e3:.3f} ms): spy "
            f"{row['spy_ghz_median']:.3f} GHz ({row['spy_ghz_min']:.3f}-"
            f"{row['spy_ghz_max']:.3f}), L2 hit {row['l2_hit_ns_median']:.0f} ns, "
            f"NVML {row['nvml_mhz_median']} MHz",
            flush=True,
        )
    return rows


if __name__ == "__main__":
    main()
