"""Staged loads (``ModelOptions.staged_loads``; docs/model.md, "Model options"): a forward that
keeps one buffer per K/V tile loads as FlashAttention-2's loop does, the engine against its
oracle, and which implementations load so.

Tolerances: engine and oracle as in tests/test_simulator_oracle.py (bytes exactly, times to
1e-9). The hand-worked latency check compares steps of a lone CTA whose loads take 40 us
against its arithmetic of about a microsecond a step: the loads' share of a step is exact,
the arithmetic's and the prologue's bounded by 25% of a latency.
"""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashio import kernels, simulator
from flashio.kernels import AttentionShape
from flashio.simulator import ModelOptions, issue
from flashio.simulator._state import PREFETCH_AT_PRODUCT, PREFETCH_STAGED, PREFETCH_STEP
from flashio.simulator.simulate import prefetches
from tests._sim_common import gpu_specs
from tests.oracle_sim import simulate_oracle
from tests.test_simulator_oracle import assert_agrees

STAGED = ModelOptions(issue_model=True, prefetch_kernels=("flash2_fwd",), staged_loads=True)


def _agrees_with_oracle(sched, gpu, options, window):
    """Engine and oracle on ``sched``, windows of ``window`` events (None: the default)."""
    kw = {} if window is None else {"window_events": window}
    try:
        want = simulate_oracle(sched.trace(), gpu, options)
    except simulator.CapacityError:
        with pytest.raises(simulator.CapacityError):
            simulator.simulate(sched, gpu, options=options, **kw)
        return
    assert_agrees(simulator.simulate(sched, gpu, options=options, **kw), want)


@settings(max_examples=30, deadline=None)
@given(
    tiles=st.sampled_from([(64, 64, 4), (128, 64, 8), (64, 32, 4)]),
    d=st.sampled_from([64, 128]),
    seq_len=st.sampled_from([256, 512, 768]),
    heads=st.integers(1, 3),
    causal=st.booleans(),
    gpu=gpu_specs(),
    drift=st.booleans(),
    streamed=st.booleans(),
    window=st.sampled_from([None, 300]),
)
def test_staged_loads_agree_with_the_oracle(
    tiles, d, seq_len, heads, causal, gpu, drift, streamed, window
):
    """Both engines, with CTA drift and streamed requests or without, and windows of CTAs so
    small that a CTA's staged load crosses from one window into the next."""
    sched = kernels.schedule(
        "flash2", AttentionShape(1, heads, seq_len, d, "bf16", causal), *tiles
    )
    options = dataclasses.replace(STAGED, cta_drift=drift, streamed_requests=streamed)
    _agrees_with_oracle(sched, gpu, options, window)


def _kernel_s(options, steps: int, latency_cycles: int) -> float:
    """One 64x64, 4-warp forward CTA (d = 64: one Q block against ``steps`` K/V blocks) alone
    on an H200 whose L2 and HBM answer ``latency_cycles`` after a request: its kernel time."""
    gpu = simulator.load_gpu("h200-measured")
    gpu = gpu.replace(
        sm_count=1, l2_latency_cycles=latency_cycles, hbm_latency_cycles=latency_cycles
    )
    shape = AttentionShape(1, 1, 64, 64, "bf16", kv_seq_len=64 * steps)
    sched = kernels.schedule("flash2", shape, 64, 64, 4)
    assert sched.kernels[0].ctas == 1
    return simulator.simulate(sched, gpu, options=options).time_s


def test_a_latency_bound_step_waits_for_two_loads_not_one():
    """Loads far slower than a step's arithmetic: the whole-step prefetch exposes one latency
    a step (K and V of step j + 1 both issued as step j begins), the staged loop two (V_j
    issued once K_j has landed, K_{j+1} at P V_j). Four more steps cost four or eight
    latencies, give or take a step's arithmetic (about 1 us against 40)."""
    lat = 72_000  # cycles: about 40 us at the H200's clock
    lat_s = simulator.load_gpu("h200-measured").cycles_to_s(lat)
    for staged, per_step in ((False, 1), (True, 2)):
        options = dataclasses.replace(STAGED, staged_loads=staged)
        extra = _kernel_s(options, 8, lat) - _kernel_s(options, 4, lat)
        assert extra / 4 == pytest.approx(per_step * lat_s, abs=0.25 * lat_s)


@settings(max_examples=20, deadline=None)
@given(
    d=st.sampled_from([64, 128]),
    seq_len=st.sampled_from([256, 512, 768]),
    heads=st.integers(1, 3),
    causal=st.booleans(),
    gpu=gpu_specs(),
    drift=st.booleans(),
    streamed=st.booleans(),
    window=st.sampled_from([None, 300]),
)
def test_loads_at_the_last_product_agree_with_the_oracle(
    d, seq_len, heads, causal, gpu, drift, streamed, window
):
    """Triton's 2-stage forward (128x64, 8 warps), whose loads the engine issues at each
    step's last product: both engines, as above."""
    shape = AttentionShape(1, heads, seq_len, d, "bf16", causal)
    sched = kernels.schedule("flash2", shape, 128, 64, 8, impl="triton")
    options = dataclasses.replace(STAGED, cta_drift=drift, streamed_requests=streamed)
    comp = issue.lookup(sched.meta.params, "flash2_fwd", 8)
    assert prefetches(sched.kernels[0], options, comp, sched.meta.params) == PREFETCH_AT_PRODUCT
    _agrees_with_oracle(sched, gpu, options, window)


def test_which_implementations_load_staged():
    """flash-attn 2 and this project's kernels keep one buffer per K/V tile (stages 1): staged;
    FlashAttention-3's TMA pipeline and Triton's three stages load a whole step ahead; Triton's
    2-stage forward, whose loop waits for its copies first but commits them behind its P V
    wgmma, loads at each step's last product, staged loads or not."""
    shape = AttentionShape(1, 16, 1024, 128, "bf16")
    cases = (
        (None, (128, 64, 4), PREFETCH_STAGED, PREFETCH_STEP),
        ("flash-attn2", None, PREFETCH_STAGED, PREFETCH_STEP),
        ("fa3", None, PREFETCH_STEP, PREFETCH_STEP),
        ("triton", (128, 128, 8), PREFETCH_STEP, PREFETCH_STEP),
        ("triton", (128, 64, 8), PREFETCH_AT_PRODUCT, PREFETCH_AT_PRODUCT),
    )
    off = dataclasses.replace(STAGED, staged_loads=False)
    for impl, tiles, want, want_off in cases:
        sched = kernels.schedule("flash2", shape, *(tiles or ()), impl=impl)
        params = sched.meta.params
        comp = issue.lookup(params, "flash2_fwd", sched.warps)
        assert prefetches(sched.kernels[0], STAGED, comp, params) == want, impl
        assert prefetches(sched.kernels[0], off, comp, params) == want_off, impl
    # the same loop without the asynchronous product before its copies waits for them where
    # the trace has them
    comp = issue.lookup(sched.meta.params, "flash2_fwd", 8)
    sync = dataclasses.replace(comp, copies_behind_product=False)
    assert prefetches(sched.kernels[0], STAGED, sync, sched.meta.params) == 0
