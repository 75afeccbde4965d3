"""Hypothetical GPUs behave like real ones: per-SM resources stay per SM when the SM count
changes (docs/gpus.md, "What scales with what"), and the model agrees with the H200 run on
fewer SMs (docs/hypothetical-gpus.md)."""

import gzip
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashio import kernels, simulator
from flashio.analysis.validation import other_gpu, sm_scaling
from flashio.analysis.validation.gpu_data import parse_ncu_csv
from tests._sim_common import H200, _names

NAMES = _names()


@st.composite
def scaling_cases(draw, name, causal=None):
    """A schedule with a few waves of CTAs and a GPU of a few SMs, L2 on or off."""
    n = draw(st.sampled_from([64, 96, 128]))
    shape = kernels.AttentionShape(
        draw(st.integers(1, 2)), draw(st.sampled_from([2, 4])), n, draw(st.sampled_from([16, 32])),
        "fp16", causal=draw(st.booleans()) if causal is None else causal,
    )  # fmt: skip
    block = draw(st.sampled_from([16, 32]))
    sched = kernels.schedule(name, shape, block, block, warps=draw(st.sampled_from([2, 4])))
    gpu = H200.replace(
        sm_count=draw(st.integers(1, 12)),
        l2_bytes=0 if draw(st.booleans()) else H200.l2_bytes,
        name="h200-few",
    )
    return sched, gpu


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_more_sms_never_make_a_schedule_slower(name, data):
    """Identical CTAs (no causal mask) and a memory system every SM can use at once without
    waiting (no L2, HBM and the SMs' memory paths far above what the schedule asks): adding SMs
    never slows a schedule. Otherwise it can, a little, as list scheduling can (Graham 1969):
    CTAs of unequal length (causal) land on SMs in another grouping, and the shared L2 and HBM
    serve requests first come, first served in another order (benchmarks/sm_anomalies.py
    measures how often and how much; docs/hypothetical-gpus.md)."""
    sched, gpu = data.draw(scaling_cases(name, causal=False))
    gpu = gpu.replace(
        l2_bytes=0, hbm_bandwidth_bytes_per_s=1e18, sm_memory_bytes_per_cycle_per_sm=1e9
    )
    more = gpu.replace(sm_count=gpu.sm_count + data.draw(st.integers(1, 8)))
    assert simulator.simulate(sched, more).time_s <= simulator.simulate(sched, gpu).time_s


@pytest.mark.parametrize("name", ["flash2", "flash2_bwd", "flash1"])
@given(sms=st.integers(1, 8), waves=st.integers(2, 4), d=st.sampled_from([32, 64]))
def test_compute_bound_time_falls_in_proportion_to_sms(name, sms, waves, d):
    """Whole waves of identical CTAs (one per head at N = 128 with 128-row blocks), little
    traffic: doubling the SMs halves the time, give or take what does not scale with the SMs:
    the launch gaps and memory latencies of each kernel, and queueing at the shared L2 and HBM
    servers, which is at most their busy time."""
    gpu = H200.replace(sm_count=sms, name="h200-few")
    shape = kernels.AttentionShape(1, 1, 128, d, "bf16")
    per_sm = simulator.simulate(kernels.schedule(name, shape, 128, 128, 4), gpu).occupancy
    heads = waves * 2 * sms * per_sm.ctas_per_sm
    sched = kernels.schedule(name, kernels.AttentionShape(1, heads, 128, d, "bf16"), 128, 128, 4)
    one, two = (simulator.simulate(sched, gpu.replace(sm_count=k * sms)) for k in (1, 2))
    assert two.utilization["hbm"] < 0.5 and two.utilization["l2"] < 0.5
    latency = gpu.cycles_to_s(gpu.hbm_latency_cycles + gpu.l2_latency_cycles)
    fixed = len(one.kernels) * (gpu.kernel_launch_s + latency)
    shared = two.breakdown["l2_busy_s"] + two.breakdown["hbm_busy_s"]
    assert one.time_s / 2 - fixed <= two.time_s <= one.time_s / 2 + shared + fixed


# Fields an fp16 schedule never reads: other dtypes' rates, and the HBM's capacity.
UNUSED_BY_FP16 = {
    "tensor_bf16_flops_per_cycle_per_sm": 1.0,
    "tensor_tf32_flops_per_cycle_per_sm": 1.0,
    "tensor_fp64_flops_per_cycle_per_sm": 1.0,
    "fp64_flops_per_cycle_per_sm": 1.0,
    "hbm_bytes": 1 << 30,
}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("field", sorted(UNUSED_BY_FP16))
@given(data=st.data())
def test_a_field_a_schedule_does_not_use_never_changes_its_result(name, field, data):
    sched, gpu = data.draw(scaling_cases(name))
    other = gpu.replace(**{field: UNUSED_BY_FP16[field]})
    assert simulator.simulate(sched, other).to_dict() == simulator.simulate(sched, gpu).to_dict()


def test_shared_memory_bandwidth_is_unused_without_shared_exchange():
    """flash2 splits Q over warps and exchanges nothing through shared memory (FA2 Sec. 3.3),
    so the shared-memory bandwidth cannot change its result; flash1's split-K exchange can."""
    shape = kernels.AttentionShape(1, 4, 256, 64, "fp16")
    gpu = H200.replace(sm_count=4)
    slow = gpu.replace(smem_bandwidth_bytes_per_cycle_per_sm=1)
    fa2 = kernels.schedule("flash2", shape, 64, 64, 4)
    assert simulator.simulate(fa2, slow).to_dict() == simulator.simulate(fa2, gpu).to_dict()
    fa1 = kernels.schedule("flash1", shape, 64, 64, 4)
    assert simulator.simulate(fa1, slow).time_s > simulator.simulate(fa1, gpu).time_s


def test_replace_sm_count_keeps_each_sm_as_it_is():
    few = H200.replace(sm_count=8)
    fields = ("tensor_bf16_flops_per_cycle_per_sm", "sfu_ops_per_cycle_per_sm", "regs_per_sm",
              "smem_per_sm_bytes", "sm_memory_bytes_per_cycle_per_sm")  # fmt: skip
    for per_sm in fields:
        assert getattr(few, per_sm) == getattr(H200, per_sm)
    assert few.tensor_bf16_flops_per_s == pytest.approx(H200.tensor_bf16_flops_per_s * 8 / 132)
    assert few.l2_bandwidth_bytes_per_s == H200.l2_bandwidth_bytes_per_s  # the chip's L2
    assert few.hbm_bandwidth_bytes_per_s == H200.hbm_bandwidth_bytes_per_s


# ---------------------------------------------------- the H200 on n SMs (green contexts)
def _probe(name: str = "sm_scaling_run2.json"):
    return json.loads((sm_scaling.PROBE.parent / name).read_text())


def test_every_green_context_ran_on_the_sms_it_asked_for():
    """The SM count read back through cuCtxGetDevResource, and the distinct %smid values a
    launch of many CTAs saw, both equal the request (132: the whole GPU)."""
    for ctx in _probe()["contexts"]:
        assert ctx["context_sms"] == ctx["requested_sms"] == ctx["distinct_smids"]


def test_spec_memory_path_is_the_most_one_sm_was_seen_to_move():
    """h200's sm_memory_bytes_per_cycle_per_sm is the best per-SM rate of the probes: cp.async
    reads on 8 SMs of a green context ('chunked'); the copy, with fewer bytes in flight per SM,
    moves less, and so does every context's best read on more SMs, where the L2 or HBM binds."""
    run1 = _probe("sm_scaling.json")  # the run the spec's figure comes from
    per_sm = {
        c["context_sms"]: max(r["bytes_per_s"] for r in c["chunked"]) / c["context_sms"]
        for c in run1["contexts"]
    }
    best = per_sm[8] / H200.clock_hz
    assert H200.sm_memory_bytes_per_cycle_per_sm == pytest.approx(best, abs=0.05)
    assert max(per_sm.values()) == per_sm[8]
    ctx = next(c for c in run1["contexts"] if c["context_sms"] == 8)
    assert ctx["copy"]["bytes_per_s"] / 8 / H200.clock_hz < best


@pytest.fixture(scope="module")
def scaling_rows():
    return sm_scaling.scaling_report()


# What the committed data achieve (docs/hypothetical-gpus.md), rounded up a little: largest
# 10.1%, median 1.4%; the target of 5% at every n is met by 49 of the 50 rows (48 before CTA
# drift, 45 before FFMA took one cycle and the interference rates were refitted so:
# docs/model.md).
SCALING_MAX_ERROR, SCALING_MEDIAN_ERROR, SCALING_WITHIN_5 = 0.11, 0.015, 49


def test_predicted_scaling_follows_the_measured_curve(scaling_rows):
    s = sm_scaling.summary(scaling_rows)
    assert s["rows"] == 50
    assert s["ratio_max_error"] <= SCALING_MAX_ERROR
    assert s["ratio_median_error"] <= SCALING_MEDIAN_ERROR
    assert s["ratio_within_5pct"] >= SCALING_WITHIN_5


HEADS = sm_scaling.PROBE.parents[1] / "h100" / "sm_heads"


def test_the_one_scaling_miss_is_a_wave_of_exactly_one_head():
    """On an H100 (data/gpu/h100/sm_heads: 32, 64 and 132 SMs, one run) the d = 64 backward's
    64x128, 8-warp build takes 2.28x its 132-SM time on 64 SMs at N = 8192, where each wave of
    64 CTAs is one head, as on the H200; at N = 6144 and 10240, where waves straddle heads,
    1.91x and 1.95x. The model (the H200 model with the H100's memory: other_gpu.twin) follows
    those within 5% at every n, both tilings, and misses only the aligned point."""
    twin = other_gpu.twin()
    for n, aligned in ((6144, False), (8192, True), (10240, False)):
        rows = sm_scaling.scaling_report(HEADS / f"n{n}.json", twin.gpu, twin.harness)
        assert {r.sms for r in rows} == {32, 64, 132}
        for r in rows:
            miss = aligned and r.sms == 64 and "64x128" in r.label
            if miss:
                assert r.measured_ratio > 2.2 and r.ratio_error < -0.05, r
            else:
                assert abs(r.ratio_error) <= 0.05, r


TENSOR_KERNELS = ("flash2_fwd", "flash2_bwd")


def _tensor_clocks(n: int) -> list[float]:
    """Nsight Compute's SM clock of each tensor-core launch in a green context of n SMs."""
    path = sm_scaling.PROBE.parent / f"sm_clock_ncu_{n}.csv"
    launches = parse_ncu_csv(path.read_text())
    return [
        ln["metrics"]["sm__cycles_elapsed.avg.per_second"]
        for ln in launches
        if ln["kernel"] in TENSOR_KERNELS
    ]


def test_tensor_core_sms_keep_one_clock_at_every_sm_count():
    """replace(sm_count=n) keeps clock_hz, and so does the H200 for the SMs that run this
    project's kernels (docs/hypothetical-gpus.md, "The clock, the L2's latency and the last
    wave"): the median clock of the same launches on 8, 32, 64 and 132 SMs differs by under
    1% (the idle SMs' clock, by contrast, steps by 9% between 32 and 64), and lies within 2%
    of h200-measured's (a median of an earlier Nsight run, 1.757-1.798 GHz)."""
    spec = simulator.load_gpu("h200-measured").clock_hz
    medians = {}
    for n in (8, 32, 64, 132):
        clocks = _tensor_clocks(n)
        assert len(clocks) == 7  # the four kernels and the backward's three forward launches
        medians[n] = float(np.median(clocks))
    assert max(medians.values()) / min(medians.values()) - 1 < 0.01
    assert all(abs(m / spec - 1) < 0.02 for m in medians.values())


def test_first_waves_fill_every_sm_as_the_model_places_them():
    """The model puts slot s on SM s mod n, so the first c x n CTAs of a grid (c resident per
    SM) put exactly c on every SM. The H200 does the same in every launch of
    data/gpu/probe/cta_dispatch.py (green contexts of 64, 96 and 132 SMs, c = 1, 2, 3)."""
    doc = json.loads(
        gzip.decompress((sm_scaling.PROBE.parent / "cta_dispatch.json.gz").read_bytes())
    )
    assert len(doc["launches"]) == 45
    for launch in doc["launches"]:
        n, c = launch["sms"], launch["ctas_per_sm"]
        first = np.array(launch["smid"][: c * n])
        counts = np.bincount(first)
        assert (counts[counts > 0] == c).all() and (counts > 0).sum() == n


def test_the_forwards_last_wave_spreads_over_the_sms_on_the_gpu():
    """data/gpu/probe/cta_placement.py recorded this project's 64x64, 4-warp forward (3 CTAs
    an SM): every CTA ran, at most 3 at once on an SM, the last partial wave one CTA an SM
    where it could (68 of 2048 on 132 SMs, 32 on 96, 128 on 64: two each), and the three
    CTAs of one SM's first wave ended apart by over 10 us in the median (docs/hypothetical-
    gpus.md, "Where the CTAs go": what the model's lockstep CTAs do not do)."""
    doc = json.loads(
        gzip.decompress((sm_scaling.PROBE.parent / "cta_placement.json.gz").read_bytes())
    )
    seen = set()
    for ctx in doc["contexts"]:
        n = ctx["context_sms"]
        k = next(k for k in ctx["kernels"] if k["config"] == "d=64 N=8192 (64, 64, 4)")
        assert k["ctas_per_sm"] == 3 and len(k["launches"]) == 3
        for launch in k["launches"]:
            sm, start, end = (np.array(launch[x]) for x in ("sm", "start_ns", "end_ns"))
            assert len(sm) == 2048 and (end > start).all() and sm.max() < 132
            order = np.argsort(start, kind="stable")
            tail = len(sm) % (3 * n)
            last = sm[order[len(sm) - tail :]]
            assert len(np.unique(last)) == min(tail, n)
            first = order[: 3 * n]
            apart = [np.ptp(end[first][sm[first] == s]) for s in np.unique(sm[first])]
            assert np.median(apart) > 10_000
            seen.add(n)
    assert seen == {64, 96, 132}
