"""A persistent grid's static tile scheduler (``Implementation.tile_scheduler = "static"``): the
slot that ran CTA c takes CTA c + slots, whatever the other slots do (docs/model.md, "Kernels,
CTAs and occupancy"). The engine against the oracle is in test_simulator_oracle (random traces
draw static kernels); here its rule in closed form, its windows, and what it does to causal
grids."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from flashio import kernels, simulator
from flashio.kernels import hopper
from flashio.kernels.implementation import ImplementationError, implementation
from flashio.simulator import EVENT_DTYPE, KernelInfo, Op, Space, TensorInfo, Trace, TraceMeta

# FFMA work of six CTAs: long and short by turns, so the two orders part
WORK = (4, 1, 4, 1, 4, 1)


def _alternating(static: bool):
    """Six CTAs of one FFMA event each (WORK millions of operations) on two SMs of one slot
    each, run by a persistent grid; when each CTA starts and ends, and on which SM."""
    ev = np.zeros(len(WORK), EVENT_DTYPE)
    for c, w in enumerate(WORK):  # (kernel, cta, step, op, tensor, ..., flops)
        ev[c] = (0, c, -1, Op.ELEMENTWISE, 0, -1, -1, 0, 1, 0, 0, 0, w * 10**6)
    params = {
        "dtype": "fp32",
        "persistent_kernels": ["k"],
        "static_tile_kernels": ["k"] if static else [],
    }
    tensors = (TensorInfo("acc", Space.REGISTERS, (32,), 4),)
    meta = TraceMeta("six", params, (KernelInfo("k", len(WORK), 4, 0, 32),), tensors)
    gpu = simulator.load_gpu("h200").replace(sm_count=2, max_ctas_per_sm=1)
    res = simulator.simulate(Trace(ev, meta), gpu, timeline=True)
    return res.timeline[0]


def test_a_static_scheduler_gives_each_slot_every_slots_th_cta():
    """Two slots: slot 0 runs CTAs 0, 2, 4 (4 + 4 + 4 units) and slot 1 CTAs 1, 3, 5 (1 + 1 +
    1), back to back, so the grid takes 12 units; handed out in order to the first slot free,
    the same CTAs take 9 (0 | 1, 2 | 3 | 4, 5: 4 + 1 + 4 on one slot)."""
    spans = _alternating(static=True)
    unit = spans[1, 1] - spans[1, 0]  # CTA 1: one unit, alone on its SM
    assert np.all(spans[0::2, 2] == spans[0, 2]) and np.all(spans[1::2, 2] == spans[1, 2])
    for c in range(2, len(WORK)):  # each starts as its slot's last one ends
        assert spans[c, 0] == pytest.approx(spans[c - 2, 1], rel=1e-12)
    assert spans[:, 1].max() - spans[0, 0] == pytest.approx(12 * unit, rel=1e-9)
    dynamic = _alternating(static=False)
    assert dynamic[:, 1].max() - dynamic[0, 0] == pytest.approx(9 * unit, rel=1e-9)


def _persistent_causal(n: int = 2048):
    impl = hopper.description(128, "none", persistent=True)
    shape = kernels.AttentionShape(1, 4, n, 64, "bf16", causal=True)
    return kernels.schedule("flash2", shape, 128, 128, 12, impl=impl)


def test_a_static_grid_replays_the_same_in_windows_as_whole():
    """A schedule's CTAs are replayed in windows; with a static scheduler each window runs from
    the earliest CTA a slot takes next (they need not follow the last window's), so a replay
    in windows of a few CTAs is the replay of the whole trace, to the last bit."""
    sched = _persistent_causal()
    gpu = simulator.load_gpu("h200").replace(sm_count=12)
    whole = simulator.simulate(simulator.Trace.from_source(sched), gpu)
    windowed = simulator.simulate(sched, gpu, window_events=2_000)
    assert windowed.time_s == whole.time_s
    assert windowed.hbm_read_bytes == whole.hbm_read_bytes
    assert windowed.global_read_bytes == whole.global_read_bytes


def test_a_static_grid_runs_a_causal_grid_as_long_as_its_busiest_slot():
    """Causal tiles of one head cost 1, 2, ..., Tr key blocks; on G slots the static scheduler
    gives slot p the tiles p, p + G, ..., so the grid lasts as long as the slot whose tiles
    sum to the most blocks, which a grid handing tiles to the first slot free evens out. On 12
    SMs (4 heads of 16 tiles: 64 tiles, 544 blocks, 45.3 a slot) the busiest static slot
    takes tiles 3, 15, 27, ..., 63: 4 + 16 + 12 + 8 + 4 + 16 = 60 blocks, 1.32 times the mean;
    the replay's ratio of the two orders lies between 1 and that (a tile's fixed costs, its Q
    load and its store, are not in proportion to its blocks; 5% over it for the memory
    system's share, which is not either)."""
    sched = _persistent_causal()
    gpu = simulator.load_gpu("h200").replace(sm_count=12)
    tiles, g = sched.kernels[0].ctas, 12
    blocks = [t % 16 + 1 for t in range(tiles)]  # tile (head, i) visits i + 1 key blocks
    busiest = max(sum(blocks[p::g]) for p in range(g))
    assert (tiles, sum(blocks), busiest) == (64, 544, 60)
    static = simulator.simulate(sched, gpu).kernels[0].time_s
    dyn_impl = dataclasses.replace(sched.impl, tile_scheduler="dynamic")
    dyn_sched = kernels.schedule("flash2", sched.shape, 128, 128, 12, impl=dyn_impl)
    dynamic = simulator.simulate(dyn_sched, gpu).kernels[0].time_s
    assert static > dynamic
    even = sum(blocks) / g
    # per-tile fixed costs (Q load, store) shrink the ratio below the blocks' ratio
    assert 1 < static / dynamic <= busiest / even * 1.05


def test_sampled_replays_a_static_grid_whole():
    """A prefix's waves are not the grid's when every slot keeps its own tiles: the sampled
    replay of a static grid is the exact one."""
    sched = _persistent_causal(4096)
    gpu = simulator.load_gpu("h200").replace(sm_count=8)
    res = simulator.simulate(sched, gpu, mode="sampled")
    assert res.sampling.replayed_ctas == res.sampling.total_ctas
    assert res.time_s == simulator.simulate(sched, gpu).time_s


def test_static_needs_a_persistent_grid():
    with pytest.raises(ImplementationError, match="needs persistent=True"):
        dataclasses.replace(implementation("flashio"), tile_scheduler="static")
    with pytest.raises(ImplementationError, match="tile_scheduler must be one of"):
        dataclasses.replace(implementation("fa3"), tile_scheduler="lpt")


def test_fa3_is_static_without_a_mask_and_dynamic_with_one():
    """flash-attention's hopper/flash_fwd_launch_template.h: StaticPersistentTileScheduler
    for non-causal attention, DynamicPersistentTileScheduler for causal; the backward is not
    persistent."""
    fa3 = implementation("fa3")
    for d in (64, 96, 128, 192, 256):
        for causal in (False, True):
            shape = kernels.AttentionShape(1, 16, 4096, d, "bf16", causal=causal)
            params = kernels.schedule("flash2", shape, impl="fa3").meta.params
            assert fa3.specialize("flash2", shape).tile_scheduler == (
                "dynamic" if causal else "static"
            )
            assert bool(params.get("static_tile_kernels")) is (not causal)
            bwd = kernels.schedule("flash2_bwd", shape, impl="fa3").meta.params
            assert "static_tile_kernels" not in bwd
