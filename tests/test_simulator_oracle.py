"""The fast simulator against its plain-Python oracle (tests/oracle_sim.py), its invariants, and
figures worked out by hand.

Tolerances. Bytes, FLOP counts and peaks must agree exactly. Times are compared to a relative
1e-9: the oracle applies docs/model.md's formulas (max(t, free) + w / R, ...) to the same
events in the same order, so the two are normally bit-identical; an algebraically equal rewrite
(w / (R * f) as w / R / f, busy seconds summed per SM before the mean) costs a few ulps per
operation, and over the at most ~1e4 operations of these traces that stays below 1e4 * 2**-53
~ 1e-12. One cycle of any latency (~5e-10 s) on runs of ~1e-6..1e-4 s is >= 5e-6 relative, so
1e-9 still catches every modelling difference.
"""

import importlib

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from flashio import simulator
from flashio.analysis.strategies import tilings, variant_shapes
from flashio.simulator import EVENT_DTYPE, KernelInfo, Op, Space, TensorInfo, Trace, TraceMeta
from tests._sim_common import (
    FLOAT_FIELDS,
    H200,
    INT_FIELDS,
    KERNEL_INT_FIELDS,
    REL,
    _names,
    attention_schedules,
    gpu_specs,
    random_traces,
)
from tests.oracle_sim import simulate_oracle

# --------------------------------------------------------------------- oracle agreement


def assert_agrees(r: simulator.SimResult, o: dict) -> None:
    """Bytes and counts exactly, times to REL (module docstring)."""
    for f in INT_FIELDS:
        assert getattr(r, f) == o[f], f
    for f in FLOAT_FIELDS:
        assert getattr(r, f) == pytest.approx(o[f], rel=REL), f
    got = {
        t.name: (t.global_read_bytes, t.global_write_bytes, t.hbm_read_bytes, t.hbm_write_bytes)
        for t in r.tensors
    }
    assert got == o["tensors"]
    assert len(r.kernels) == len(o["kernels"])
    for kr, ko in zip(r.kernels, o["kernels"], strict=True):
        for f in KERNEL_INT_FIELDS:
            assert getattr(kr, f) == ko[f], (kr.name, f)
        for f in ("start_s", "time_s"):
            assert getattr(kr, f) == pytest.approx(ko[f], rel=REL), (kr.name, f)
    for part in ("breakdown", "utilization"):
        assert getattr(r, part).keys() == o[part].keys()
        for key, value in o[part].items():
            assert getattr(r, part)[key] == pytest.approx(value, rel=REL, abs=1e-300), key


def _check_against_oracle(
    trace: Trace, gpu: simulator.GPUSpec, options: simulator.ModelOptions | None = None
) -> None:
    options = options or simulator.ModelOptions()
    try:
        want = simulate_oracle(trace, gpu, options)
    except simulator.CapacityError:
        with pytest.raises(simulator.CapacityError):
            simulator.simulate(trace, gpu, options=options)
        return
    assert_agrees(simulator.simulate(trace, gpu, options=options), want)


@pytest.mark.parametrize("name", _names())
@given(data=st.data())
def test_schedules_agree_with_oracle(name, data):
    sched = data.draw(attention_schedules(name))
    trace = sched.trace()
    assume(len(trace) <= 6000)
    _check_against_oracle(trace, data.draw(gpu_specs()))


@pytest.mark.parametrize("name", ("flash1", "flash2_bwd", "standard"))
@given(data=st.data())
def test_masked_schedules_agree_with_oracle(name, data):
    """Windows, packed documents, a K/V length of its own: CTAs of unequal length, skipped
    blocks and empty Q blocks, through both engines."""
    shape = data.draw(variant_shapes(max_seq_len=32, head_dims=(16,)))
    trace = data.draw(tilings(shape=shape, names=(name,))).trace()
    assume(len(trace) <= 6000)
    _check_against_oracle(trace, data.draw(gpu_specs()))


@given(trace=random_traces(), gpu=gpu_specs())
def test_random_traces_agree_with_oracle(trace, gpu):
    _check_against_oracle(trace, gpu)


@given(trace=random_traces(), gpu=gpu_specs())
def test_the_plain_engine_is_the_full_one_with_its_options_off(trace, gpu):
    """A replay without spills, prefetches, streamed requests or CTA drift runs on the engine
    compiled without their code (``_engine.run_window_plain``): the full engine, given the
    same kernels, returns the same figures to the bit."""
    sim = importlib.import_module("flashio.simulator.simulate")
    plain = simulator.simulate(trace, gpu)
    calls = []

    def full(*args):
        calls.append(args[2])  # the window's first CTA
        return sim.run_window(*args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sim, "run_window_plain", full)
        other = simulator.simulate(trace, gpu)
    assert calls  # the plain engine was the one chosen
    assert plain.time_s == other.time_s and plain.hbm_bytes == other.hbm_bytes
    for a, b in zip(plain.kernels, other.kernels, strict=True):
        assert a == b
    assert plain.breakdown == other.breakdown


SHARED = simulator.ModelOptions(streamed_requests=True)


@given(trace=random_traces(), gpu=gpu_specs(), prefetch=st.booleans())
def test_streamed_requests_agree_with_oracle(trace, gpu, prefetch):
    """The L2 and HBM shared among the requests in flight: the engine keeps sorted tags and
    decides when a departure is final from its heap of SMs, the oracle yields until its CTA is
    the earliest of all; prefetched loads and spills land as the CTA's other loads do."""
    names = tuple(k.name for k in trace.meta.kernels) if prefetch else ()
    _check_against_oracle(
        trace, gpu, simulator.ModelOptions(streamed_requests=True, prefetch_kernels=names)
    )


@pytest.mark.parametrize("name", ("flash2", "flash2_bwd", "standard"))
@given(data=st.data())
def test_streamed_requests_agree_with_oracle_on_schedules(name, data):
    sched = data.draw(attention_schedules(name))
    trace = sched.trace()
    assume(len(trace) <= 6000)
    _check_against_oracle(trace, data.draw(gpu_specs()), SHARED)


def _one_cta_trace(events, tensors, warps=1, smem_bytes=0):
    ev = np.zeros(len(events), EVENT_DTYPE)
    for i, (op, t, off, rows, rb, stride, nb, fl) in enumerate(events):
        ev[i] = (0, 0, -1, op, t, -1, -1, off, rows, rb, stride, nb, fl)
    kinfo = KernelInfo("k", 1, warps, smem_bytes, 32)
    return Trace(ev, TraceMeta("hand", {"dtype": "fp16"}, (kinfo,), tensors))


def test_timing_worked_by_hand():
    """LOAD -> MMA -> STORE on one SM without L2, each step of docs/model.md written out."""
    gpu = H200.replace(sm_count=1, l2_bytes=0)
    tensors = (TensorInfo("X", Space.GLOBAL, (4096,), 1),)
    w = 3_000_000
    trace = _one_cta_trace(
        [
            (Op.LOAD, 0, 0, 1, 1000, 1000, 1000, 0),
            (Op.MMA, 0, 0, 0, 0, 0, 0, w),
            (Op.STORE, 0, 0, 1, 500, 500, 500, 0),
        ],
        tensors,
        warps=2,
    )
    hbm_rate = 4.8e12 * 0.896
    hbm_lat = 560 / 1.98e9
    mma_rate = 989e12 / 132  # one SM's tensor pipe: the datasheet's chip rate over 132 SMs
    port_rate = 71.7 * 1.98e9  # the SM's path to memory, sm_memory_bytes_per_cycle_per_sm
    start = 4e-6  # one launch
    # the load misses to HBM; it also passes the SM's path, in parallel
    ready = start + max(1000 / port_rate, 1000 / hbm_rate + hbm_lat)
    t = ready + w / (mma_rate * 0.5)  # 2 warps of 4 sub-partitions: half the tensor pipe
    store_port = max(t, start + 1000 / port_rate) + 500 / port_rate
    store_hbm = max(t, start + 1000 / hbm_rate) + 500 / hbm_rate + hbm_lat
    store_done = max(store_port, store_hbm)
    r = simulator.simulate(trace, gpu)
    assert r.time_s == pytest.approx(store_done, rel=1e-12)
    assert r.breakdown["tensor_busy_s"] == pytest.approx(w / mma_rate, rel=1e-12)
    assert r.breakdown["hbm_busy_s"] == pytest.approx(1500 / hbm_rate, rel=1e-12)
    assert r.breakdown["sm_memory_busy_s"] == pytest.approx(1500 / port_rate, rel=1e-12)
    assert (r.hbm_read_bytes, r.hbm_write_bytes) == (1000, 500)
    assert_agrees(r, simulate_oracle(trace, gpu))


def test_l2_worked_by_hand():
    """One 8 KiB granule of 64 lines of 128 B: write-back on eviction, partial-line misses."""
    gpu = H200.replace(l2_bytes=8192, l2_line_bytes=128)
    tensors = (
        TensorInfo("A", Space.GLOBAL, (16384,), 1),
        TensorInfo("B", Space.GLOBAL, (16384,), 1),
    )
    trace = _one_cta_trace(
        [
            (Op.STORE, 0, 0, 1, 8192, 8192, 8192, 0),  # A granule 0: all 64 lines dirty
            (Op.LOAD, 0, 100, 1, 200, 200, 200, 0),  # hit
            (Op.LOAD, 1, 0, 1, 200, 200, 200, 0),  # evicts A (8192 B back), misses 200 B
            (Op.LOAD, 1, 64, 1, 192, 192, 192, 0),  # lines 0, 1 present: hit
            # lines 62, 63 miss 64 + 128 B; granule 1 evicts B's granule 0 (2 dirty lines);
            # line 64 misses 108 B and stays dirty to the end
            (Op.REDUCE, 1, 8000, 1, 300, 300, 300, 0),
        ],
        tensors,
    )
    r = simulator.simulate(trace, gpu)
    assert (r.global_read_bytes, r.global_write_bytes) == (592, 8492)
    assert (r.hbm_read_bytes, r.hbm_write_bytes, r.l2_dirty_bytes_at_end) == (500, 8448, 128)
    assert r.tensor("A") == simulator.TensorTraffic("A", 200, 8192, 0, 8192)
    assert r.tensor("B") == simulator.TensorTraffic("B", 392, 300, 500, 256)
    assert_agrees(r, simulate_oracle(trace, gpu))


def test_an_empty_region_touches_no_line():
    """docs/model.md: an access walks the granules the range [start, end) overlaps; an empty
    range overlaps none. No schedule emits one (rows >= 1, row_bytes >= 1)."""
    gpu = H200.replace(l2_bytes=8192)
    tensors = (TensorInfo("A", Space.GLOBAL, (1024,), 1),)
    trace = _one_cta_trace([(Op.STORE, 0, 300, 1, 0, 0, 0, 0)], tensors)
    assert simulate_oracle(trace, gpu)["l2_dirty_bytes_at_end"] == 0
    assert simulator.simulate(trace, gpu).l2_dirty_bytes_at_end == 0  # the engine says 128


def test_live_shared_memory_above_declared_is_rejected():
    tensors = (TensorInfo("X", Space.GLOBAL, (64,), 1), TensorInfo("T", Space.SHARED, (96,), 1))
    trace = _one_cta_trace(
        [(Op.ALLOC, 1, 0, 1, 0, 0, 96, 0), (Op.FREE, 1, 0, 1, 0, 0, 96, 0)], tensors, smem_bytes=64
    )
    for run in (simulator.simulate, simulate_oracle):
        with pytest.raises(simulator.CapacityError):
            run(trace, H200)
