"""What each wave of an exact replay adds: the figures behind docs/model.md's "Where the HBM
estimate falls short".

    python -m benchmarks.sampled_waves            # FA2 forward, N = 64k, as bench_simulate
    python -m benchmarks.sampled_waves --seq-len 16384

The FA2 forward of ``bench_simulate`` (h200, B=1, H=32, d=128, 128x64 tiles, fp16) replayed
exactly with the memory system checkpointed at every wave boundary (``simulate.Probe``, as the
sampled replay checkpoints its prefix); one line a wave: where in its head it starts, its
class by the heads it spans and begins (``by_start_and_span``), how many earlier waves touched
the head it starts in, its time, the HBM bytes each global tensor read and wrote,
and the L2's dirty bytes at its end.
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.bench_simulate import _schedule
from flashio.simulator import _state as E
from flashio.simulator import load_gpu
from flashio.simulator._wave_classes import by_start_and_span, periods_touched
from flashio.simulator.sampled import _period
from flashio.simulator.simulate import DEFAULT_OPTIONS, Probe, launch_resources, replay
from flashio.simulator.trace import Space


def earlier_visits(waves: np.ndarray, slot: int, period: int) -> np.ndarray:
    """How many earlier waves touched the head each wave starts in."""
    return waves - (waves * slot // period) * period // slot


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seq-len", type=int, default=65536)
    args = ap.parse_args(argv)
    gpu = load_gpu("h200")
    sched = _schedule("flash2", args.seq_len)
    meta = sched.meta
    _, _, occs = launch_resources(meta, gpu, DEFAULT_OPTIONS)
    slot, period, ctas = occs[0].ctas_per_sm * gpu.sm_count, _period(meta, 0), meta.kernels[0].ctas
    probe = Probe(np.arange(slot, ctas, slot, dtype=np.int64), lambda *_: None)
    res = replay(sched, gpu, probes={0: probe})
    snaps = probe.snaps
    waves = np.arange(1, len(snaps))  # the wave between checkpoints i - 1 and i
    kinds = by_start_and_span(waves, slot, period, ctas)
    touched = periods_touched(waves, slot, period, ctas)
    visits = earlier_visits(waves, slot, period)
    shown = [i for i, t in enumerate(meta.tensors) if t.space == Space.GLOBAL]
    names = [meta.tensors[i].name for i in shown]
    print(f"{meta.kernels[0].name}: {ctas} CTAs, waves of {slot}, heads of {period}; "
          f"HBM MB read/written per tensor ({', '.join(names)})")  # fmt: skip
    for i, w in enumerate(waves):
        step = snaps[i + 1] - snaps[i]
        hbm = step[E.SNAP_HBM :].reshape(-1, 2)[shown] / 1e6
        moved = " ".join(f"{r:6.2f}/{wr:5.2f}" for r, wr in hbm)
        print(f"wave {w:4d} start {w * slot % period:5d} heads {touched[i]} kind {kinds[i]:5d} "
              f"earlier {visits[i]:2d} {step[E.SNAP_T] * 1e6:8.1f} us {moved} "
              f"dirty {snaps[i + 1, E.SNAP_DIRTY] / 1e6:6.2f} MB")  # fmt: skip
    last = snaps[-1]
    rest = sum(t.hbm_read_bytes + t.hbm_write_bytes for t in res.tensors)
    rest -= last[E.SNAP_HBM :].sum()
    print(
        f"after the last checkpoint (the last, partial wave): {rest / 1e6:.2f} MB of HBM; "
        f"dirty at the end {res.l2_dirty_bytes_at_end / 1e6:.2f} MB; HBM {res.hbm_bytes:,} B"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
