"""Reads of a line whose fill from HBM is still in flight (ModelOptions.pending_fills).

CTAs that read the same new tile at the same moment all wait for the HBM: the first misses
and the L2 merges the others' requests into its fill, so none of them gets the tile at an L2
hit's latency (docs/model.md, "L2"). Without the option the later readers hit at once.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashio import simulator
from flashio.simulator import (
    EVENT_DTYPE,
    KernelInfo,
    ModelOptions,
    Op,
    Space,
    TensorInfo,
    Trace,
    TraceMeta,
)
from flashio.simulator.errors import FlashioError
from tests._sim_common import gpu_specs, random_traces
from tests.oracle_sim import simulate_oracle
from tests.test_simulator_oracle import assert_agrees

TILE = 8192  # one granule of 128-byte lines


def _same_tile(ctas: int, second_tile_at: int | None = None) -> Trace:
    """``ctas`` CTAs, one an SM, each loading bytes [0, TILE) of X and multiplying; with
    ``second_tile_at``, then loading [TILE, 2 TILE) after an MMA of that many FLOPs."""
    rows = []
    for c in range(ctas):
        rows.append((0, c, 0, Op.LOAD, 0, -1, -1, 0, 1, TILE, TILE, TILE, 0))
        rows.append((0, c, 0, Op.MMA, -1, -1, -1, 0, 0, 0, 0, 0, 10**6))
        if second_tile_at is not None:
            rows.append((0, c, 1, Op.MMA, -1, -1, -1, 0, 0, 0, 0, 0, second_tile_at))
            rows.append((0, c, 1, Op.LOAD, 0, -1, -1, TILE, 1, TILE, TILE, TILE, 0))
            rows.append((0, c, 1, Op.MMA, -1, -1, -1, 0, 0, 0, 0, 0, 10**6))
    meta = TraceMeta(
        "hand",
        {"dtype": "fp16"},
        (KernelInfo("k", ctas, 4, 0, 32),),
        (TensorInfo("X", Space.GLOBAL, (4 * TILE,), 1),),
    )
    return Trace(np.array(rows, dtype=EVENT_DTYPE), meta)


def _ends(trace: Trace, gpu, fills: bool) -> np.ndarray:
    res = simulator.simulate(trace, gpu, timeline=True, options=ModelOptions(pending_fills=fills))
    return res.timeline[0][:, 1]


def test_ctas_reading_one_new_tile_together_all_wait_for_the_hbm():
    gpu = simulator.load_gpu("h200").replace(sm_count=4)
    trace = _same_tile(4)
    hit, merged = _ends(trace, gpu, False), _ends(trace, gpu, True)
    # without the option the three later readers hit at the L2's latency, before the first
    assert (hit[1:] < hit[0]).all()
    # with it they wait for the first one's fill, landing with its data: no one is earlier
    # (each still passes its own SM's path and the L2 server, so some end a little later)
    assert (merged >= merged[0] - 1e-15).all()
    gap = gpu.cycles_to_s(gpu.hbm_latency_cycles - gpu.l2_latency_cycles)
    assert (merged[1:] - hit[1:] >= 0.5 * gap).all()
    # the bytes are the same: one miss, three hits
    for fills in (False, True):
        res = simulator.simulate(trace, gpu, options=ModelOptions(pending_fills=fills))
        assert res.hbm_read_bytes == TILE
        assert res.global_read_bytes == 4 * TILE


def test_a_fill_that_has_landed_is_a_plain_hit():
    """A CTA that reads the tile long after it was fetched hits at the L2's latency, as
    without the option: only fills still in flight are waited for."""
    gpu = simulator.load_gpu("h200").replace(sm_count=2)
    rows = [
        (0, 0, 0, Op.LOAD, 0, -1, -1, 0, 1, TILE, TILE, TILE, 0),
        (0, 0, 0, Op.MMA, -1, -1, -1, 0, 0, 0, 0, 0, 10**6),
        # CTA 1 computes first (10 us at h200's rates), then reads the same tile
        (0, 1, 0, Op.MMA, -1, -1, -1, 0, 0, 0, 0, 0, 10**10),
        (0, 1, 1, Op.LOAD, 0, -1, -1, 0, 1, TILE, TILE, TILE, 0),
        (0, 1, 1, Op.MMA, -1, -1, -1, 0, 0, 0, 0, 0, 10**6),
    ]
    meta = TraceMeta(
        "hand",
        {"dtype": "fp16"},
        (KernelInfo("k", 2, 4, 0, 32),),
        (TensorInfo("X", Space.GLOBAL, (TILE,), 1),),
    )
    trace = Trace(np.array(rows, dtype=EVENT_DTYPE), meta)
    np.testing.assert_array_equal(_ends(trace, gpu, False), _ends(trace, gpu, True))


def test_pending_fills_agree_with_the_oracle_on_hand_traces():
    gpu = simulator.load_gpu("h200").replace(sm_count=4)
    for trace in (_same_tile(4), _same_tile(3, second_tile_at=10**5)):
        opts = ModelOptions(pending_fills=True)
        assert_agrees(
            simulator.simulate(trace, gpu, options=opts), simulate_oracle(trace, gpu, opts)
        )


@settings(max_examples=40, deadline=None)
@given(trace=random_traces(), gpu=gpu_specs(), prefetch=st.booleans())
def test_pending_fills_agree_with_the_oracle_on_random_traces(trace, gpu, prefetch):
    names = tuple(k.name for k in trace.meta.kernels) if prefetch else ()
    opts = ModelOptions(pending_fills=True, prefetch_kernels=names)
    try:
        want = simulate_oracle(trace, gpu, opts)
    except simulator.CapacityError:
        return
    assert_agrees(simulator.simulate(trace, gpu, options=opts), want)


def test_pending_fills_need_whole_requests():
    with pytest.raises(FlashioError, match="pending_fills needs whole requests"):
        ModelOptions(pending_fills=True, streamed_requests=True)
