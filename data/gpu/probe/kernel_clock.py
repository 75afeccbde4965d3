"""The SM clock and the board power while tensor-core kernels of different kinds run.

sm_clock.py read the clock of this project's mma.sync kernels (Nsight Compute: 1.73-1.80 GHz,
the 1.778 GHz of h200-measured). Does a kernel that keeps the tensor cores busier (wgmma:
this project's Hopper forward, cuDNN's) run at a lower clock? For each kernel of KERNELS
(B = 1, H = 16, N = 16384, bf16):

- ``--sustain``: launched back to back for about --seconds; each launch CUDA-event-timed, the
  board power sampled through NVML (nvmlDeviceGetPowerUsage, every 5 ms) meanwhile. NVML's SM
  clock reads the 1980 MHz the driver asks for whatever the SMs run at (sm_clock.py), so the
  clock is read by Nsight Compute instead:
- ``--once``: each kernel launched --launches times, for Nsight Compute (sm__cycles_elapsed
  per second, and the issue and stall metrics of data/gpu/runs/ncu_metrics.sh).

    python data/gpu/probe/kernel_clock.py --sustain --out DIR [--set d64]
    ncu --clock-control none --csv --metrics ... python data/gpu/probe/kernel_clock.py --once

Writes DIR/kernel_clock.json: per kernel the launch times (ms, in order), their median over
the last half, and the power samples (W) with their median over the same span.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sm_clock import Clock
from sm_scaling import new_doc

from benchmarks.hopper_measure import torch_runners
from flashio import kernels
from flashio.kernels import gpu, hopper

SHAPE = dict(batch=1, heads=16, seq_len=16384, dtype="bf16")
# (label, head_dim, how): "flashio" (block_q, block_kv, warps) of the mma.sync forward,
# "hopper" (block_q, block_kv, softmax overlap) of kernels/cuda/hopper_fwd.cu, "torch" backend
KERNELS = (
    ("flashio 128x64 w8", 128, ("flashio", (128, 64, 8))),
    ("flashio 128x128 w8", 64, ("flashio", (128, 128, 8))),
    ("hopper 128x176 both", 128, ("hopper", (128, 176, "both"))),
    ("hopper 128x176 pingpong", 128, ("hopper", (128, 176, "pingpong"))),
    ("hopper 128x128 both", 128, ("hopper", (128, 128, "both"))),
    ("hopper 128x128 none", 128, ("hopper", (128, 128, "none"))),
    ("hopper 128x128 none", 64, ("hopper", (128, 128, "none"))),
    ("sdpa-flash", 128, ("torch", "sdpa-flash")),
    ("sdpa-cudnn", 128, ("torch", "sdpa-cudnn")),
)
# --set d64: the Hopper forward's d = 64 builds whose ranking by predicted time fails
# (docs/validation.md, "By implementation": the model picks 128x176 with both overlaps, the
# GPU runs it 7-13% slower than its best), and this project's mma.sync forward beside them
KERNELS_D64 = (
    ("hopper 128x176 both", 64, ("hopper", (128, 176, "both"))),
    ("hopper 128x128 both", 64, ("hopper", (128, 128, "both"))),
    ("hopper 128x128 none", 64, ("hopper", (128, 128, "none"))),
    ("hopper 192x128 none", 64, ("hopper", (192, 128, "none"))),
    ("hopper 192x128 intra-warpgroup", 64, ("hopper", (192, 128, "intra-warpgroup"))),
    ("flashio 128x128 w8", 64, ("flashio", (128, 128, 8))),
)
SETS = {"all": KERNELS, "d64": KERNELS_D64}


class Power(Clock):
    """The board power through NVML (sm_clock.py's handle on the driver's library)."""

    def watts(self) -> float:
        mw = ctypes.c_uint()
        self.lib.nvmlDeviceGetPowerUsage(self.handle, ctypes.byref(mw))
        return mw.value / 1e3


@contextmanager
def sampled(power: Power):
    """(monotonic time, watts) every 5 ms while the block runs, in a list it yields."""
    watts, done = [], threading.Event()

    def sample():
        while not done.is_set():
            watts.append((time.monotonic(), power.watts()))
            time.sleep(0.005)

    th = threading.Thread(target=sample)
    th.start()
    try:
        yield watts
    finally:
        done.set()
        th.join()


def runner(d: int, how):
    """A zero-argument launch of the kernel on fresh N(0, 1) inputs."""
    import cupy
    import torch

    sh = kernels.AttentionShape(head_dim=d, **SHAPE)
    dims = (sh.batch, sh.heads, sh.seq_len, d)
    tq = [torch.randn(dims, dtype=torch.bfloat16, device="cuda") for _ in range(3)]
    kind, what = how
    if kind == "torch":
        return torch_runners(*tq, False, sh.seq_len)[what]
    if kind == "flashio":
        sched = kernels.schedule("flash2", sh, *what)
    else:
        bq, bkv, overlap = what
        impl = hopper.description(bq, overlap, 2, False)
        sched = kernels.Schedule("flash2", sh, bq, bkv, 4 * (bq // 64 + 1), impl=impl)
    comp = gpu.compile_schedule(sched)
    bits = [cupy.asarray(t.view(torch.int16).cpu().numpy().view(np.uint16)) for t in tq]
    return functools.partial(comp.launch, comp.alloc(*bits))


def sustain(run, seconds: float, power: Power) -> dict:
    """Back-to-back launches for about ``seconds``, each timed, power sampled meanwhile."""
    import torch

    run()
    torch.cuda.synchronize()
    with sampled(power) as watts:
        t0, events = time.monotonic(), []
        while time.monotonic() - t0 < seconds:
            batch = [(torch.cuda.Event(enable_timing=True),
                      torch.cuda.Event(enable_timing=True)) for _ in range(20)]  # fmt: skip
            for a, b in batch:
                a.record()
                run()
                b.record()
            batch[-1][1].synchronize()
            events += batch
        t1 = time.monotonic()
    ms = [a.elapsed_time(b) for a, b in events]
    half = ms[len(ms) // 2 :]
    late = [w for t, w in watts if t >= t0 + (t1 - t0) / 2]
    return {
        "launch_ms": ms,
        "median_ms_last_half": float(np.median(half)),
        "watts": [w for _, w in watts],
        "median_watts_last_half": float(np.median(late)),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="folder for kernel_clock.json (--sustain)")
    ap.add_argument("--sustain", action="store_true")
    ap.add_argument("--once", action="store_true")
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--launches", type=int, default=3)
    ap.add_argument(
        "--set", choices=sorted(SETS), default="all",
        help="which kernels (all, the default: kernel_clock.json; d64: KERNELS_D64, "
        "kernel_clock_d64.json)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    chosen = SETS[args.set]
    if args.once:
        import torch

        for _, d, how in chosen:
            run = runner(d, how)
            for _ in range(args.launches):
                run()
            torch.cuda.synchronize()
        return
    if not (args.sustain and args.out):
        ap.error("give --sustain --out DIR, or --once")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    power = Power()
    doc = new_doc(shape=SHAPE, kernels=[], idle_watts=power.watts())
    for label, d, how in chosen:
        row = {"label": label, "head_dim": d, **sustain(runner(d, how), args.seconds, power)}
        doc["kernels"].append(row)
        print(f"{label:26s} d={d:3d}: {row['median_ms_last_half']:8.3f} ms "
              f"({len(row['launch_ms'])} launches, first {row['launch_ms'][0]:.3f} ms), "
              f"{row['median_watts_last_half']:6.1f} W", flush=True)  # fmt: skip
        time.sleep(1.0)  # let the board settle between kernels
    name = "kernel_clock.json" if args.set == "all" else f"kernel_clock_{args.set}.json"
    (out / name).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
