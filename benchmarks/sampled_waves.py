"""What each wave of an exact replay adds: the figures behind docs/model.md's "Where the HBM
estimate falls short".

    python -m benchmarks.sampled_waves            # FA2 forward, N = 64k, as bench_simulate
    python -m benchmarks.sampled_waves --seq-len 16384

The FA2 forward of ``bench_simulate`` (h200, B=1, H=32, d=128, 128x64 tiles, fp16) replayed
exactly with the memory system checkpointed at every wave boundary (``simulate.Probe``, as the
sampled replay checkpoints its prefix); one line a wave: where in its head it starts, its
class by the heads it spans and begins (``by_start_and_span``), how many earlier waves touched
the head it starts in, its time, the HBM bytes each global tensor read and wrote,
and the L2's dirty bytes at its end. Last, the grid's whole waves after the sampled replay's
prefix against the means of their classes over the prefix's steady waves: the HBM reads of
the waves of kinds the prefix has (drift within a class) and of those of kinds it never has
(``by_visits``), which no class mean stands for.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from benchmarks.bench_simulate import _schedule
from flashio.simulator import _state as E
from flashio.simulator import load_gpu
from flashio.simulator._wave_classes import (
    by_start_and_span,
    by_visits,
    earlier_visits,
    periods_touched,
)
from flashio.simulator.sampled import SAMPLED_WAVES, _first_ctas, _period, _plan
from flashio.simulator.simulate import DEFAULT_OPTIONS, Probe, launch_resources, replay
from flashio.simulator.trace import Space


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
    _against_the_prefix(sched, gpu, snaps, slot, period)
    last = snaps[-1]
    rest = sum(t.hbm_read_bytes + t.hbm_write_bytes for t in res.tensors)
    rest -= last[E.SNAP_HBM :].sum()
    print(
        f"after the last checkpoint (the last, partial wave): {rest / 1e6:.2f} MB of HBM; "
        f"dirty at the end {res.l2_dirty_bytes_at_end / 1e6:.2f} MB; HBM {res.hbm_bytes:,} B"
    )
    return 0


def _against_the_prefix(sched, gpu, snaps, slot: int, period: int) -> None:
    """The HBM reads of the whole waves after the sampled prefix, less their class means
    (``by_start_and_span``) over its steady waves: summed for the waves whose ``by_visits``
    kind the prefix has, and for those whose kind it lacks. The waves before the prefix's
    last are the same in both runs (later CTAs do not change what earlier ones do). Then what
    the prefix's last, partial wave adds after its last checkpoint, which the sampled replay
    takes for the grid's."""
    meta, ctas = sched.meta, sched.meta.kernels[0].ctas
    plan = _plan(meta, 0, slot, SAMPLED_WAVES, alike=True)
    if plan is None:
        print("the sampled replay replays this grid whole")
        return
    # HBM reads: the writes of the grid the sampled replay takes from its dirty lines instead
    hbm = np.diff(snaps[:, E.SNAP_HBM :: 2].sum(axis=1))  # index i: wave i + 1
    first, last = plan.marks[0] // slot, math.ceil(plan.replayed / slot) - 1
    steady, after = np.arange(first, last), np.arange(last, len(hbm) + 1)
    kind = by_start_and_span(np.arange(1, len(hbm) + 1), slot, period, ctas)
    means = {c: hbm[steady - 1][kind[steady - 1] == c].mean() for c in set(kind[steady - 1])}
    known = np.isin(by_visits(after, slot, period, ctas), by_visits(steady, slot, period, ctas))
    off = np.array([hbm[w - 1] - means.get(kind[w - 1], np.nan) for w in after])
    print(f"waves {after[0]}-{after[-1]} against the class means of the prefix's waves "
          f"{first}-{last - 1}, HBM reads: of kinds it has {np.nansum(off[known]) / 1e6:+.1f} MB "
          f"({known.sum()} waves), of kinds it lacks {np.nansum(off[~known]) / 1e6:+.1f} MB "
          f"({(~known).sum()} waves)")  # fmt: skip
    mine = Probe(np.array(plan.marks, np.int64), lambda *_: None)
    res = replay(_first_ctas(sched, [plan.replayed]), gpu, probes={0: mine})
    after = res.hbm_bytes - mine.snaps[-1, E.SNAP_HBM :].sum()
    print(f"the prefix's last, partial wave (its {plan.replayed - plan.marks[-1]} CTAs): "
          f"{after / 1e6:.2f} MB of HBM after its last checkpoint")  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
