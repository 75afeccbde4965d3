"""Orders, lower bounds, regimes (analysis.closed_form.bounds) and FLOPs, roofline
(analysis.closed_form.flops).

Hand figures are worked out in the comments; properties over drawn shapes compare the closed
forms with the trace and the simulator. Integers and Fractions compare exactly; the only float
comparisons are of one formula evaluated two ways (relative 1e-12, a few roundings of doubles).
"""

import math
import pathlib
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashio import kernels, simulator
from flashio.analysis.closed_form import bounds, flops
from flashio.analysis.closed_form.io import io_counts
from flashio.analysis.strategies import attention_shapes, tilings
from flashio.simulator import Op

H200 = simulator.load_gpu("h200")
DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs" / "io.md"


def _schedules(name):
    return attention_shapes(max_seq_len=40, head_dims=(8, 16, 32)).flatmap(
        lambda shape: tilings(shape=shape, names=(name,))
    )


# ---------------------------------------------------------------------------- on-chip footprint


@pytest.mark.parametrize("name", kernels.SCHEDULES)
@given(data=st.data())
def test_on_chip_bytes_equals_replayed_peak(name, data):
    """The closed-form footprint is the largest per-CTA live bytes the simulator replays."""
    sched = data.draw(_schedules(name))
    gpu = H200.replace(l2_bytes=0, sm_count=2)
    try:
        res = simulator.simulate(sched, gpu)
    except simulator.CapacityError:
        return  # the footprint formula is checked on the schedules that run
    peak = max(k.smem_peak_bytes + k.reg_tile_peak_bytes for k in res.kernels)
    assert bounds.on_chip_bytes(sched) == peak


# ---------------------------------------------------------------------------- orders and bounds


def test_orders_by_hand():
    shape = kernels.AttentionShape(2, 3, 1024, 64)
    assert bounds.standard_order(shape) == 6 * (1024 * 64 + 1024**2)
    m = 116_224  # H200: 232,448 B per CTA / 2 B
    assert bounds.sram_elements(H200, "fp16") == m
    assert bounds.sram_elements(H200, "fp32", per="sm") == 233_472 // 4
    assert bounds.flash_order(shape, m) == pytest.approx(6 * 1024**2 * 64**2 / m, rel=1e-12)
    # large cache (M >= d^2) and small cache agree at M = d^2: N^2 per head
    at = bounds.lower_bound_order(shape, 64 * 64)
    assert at == pytest.approx(6 * 1024**2, rel=1e-12)
    small = bounds.lower_bound_order(shape, 1024)  # M < d^2: N^2 d / sqrt(M) = N^2 * 2
    assert small == pytest.approx(6 * 1024**2 * 64 / 32, rel=1e-12)
    # small cache: the true order is below FlashAttention's N^2 d^2 / M
    assert small < bounds.flash_order(shape, 1024)
    with pytest.raises(ValueError, match="per must be"):
        bounds.sram_elements(H200, "fp16", per="gpu")


def test_compulsory_bytes_by_hand():
    shape = kernels.AttentionShape(1, 8, 100, 16, "fp32", kv_heads=2)
    q, kv = 8 * 100 * 16, 2 * 100 * 16
    assert bounds.compulsory_bytes(shape) == 4 * (q + 2 * kv + q)
    assert bounds.compulsory_bytes(shape, backward=True) == 4 * (2 * q + 2 * kv + q + 2 * kv)


def test_io_regime_h200():
    """M = 116,224 fp16 elements per CTA: d = 64 is large-cache; linear in N up to N = 1,816."""
    lin = bounds.io_regime(H200, kernels.AttentionShape(1, 1, 1816, 64))
    assert (lin.m_elements, lin.large_cache, lin.linear_in_n) == (116_224, True, True)
    assert (lin.block, lin.kv_passes) == (454, 4)  # floor(116224 / 256) = 454; ceil(1816/454)
    quad = bounds.io_regime(H200, kernels.AttentionShape(1, 1, 1817, 64))
    assert not quad.linear_in_n and quad.kv_passes == 5
    small = bounds.io_regime(H200, kernels.AttentionShape(1, 1, 64, 512, "fp32"))
    assert not small.large_cache  # 58,112 < 512^2
    exact = dict(lin.exact_bytes)
    assert exact["flash2"] == io_counts("flash2", lin.shape, 454, 454).total_bytes
    ratios = dict(lin.ratio_to_order)
    order = 1816**2 * 64**2 / 116_224
    assert ratios["flash2"] == pytest.approx(exact["flash2"] / 2 / order, rel=1e-12)
    assert all(r >= 1 for _, r in lin.ratio_to_compulsory)


def test_standard_crossover_examples():
    """FA1 as modelled keeps O_acc in fp32 in HBM: at d = 128 it needs Bc >= 164 to move no
    more than standard attention; the common Bc = 128 moves more (closed form, no trace)."""
    shape = kernels.AttentionShape(1, 1, 4096, 128, "fp16")
    std = io_counts("standard", shape, 4096, 4096).total_bytes
    assert io_counts("flash1", shape, 128, 128).total_bytes > std
    b = bounds.standard_crossover("flash1", shape)
    # per head: flash1 = Tc (N d eb + 2 N d acc + 4 N acc) + 3 N d eb + 2 N acc = 5,308,416 Tc
    # + 3,178,496; standard's floor 4 N^2 eb + 4 N d eb = 138,412,032: Tc <= 25, Bc >= 164
    assert b == math.ceil(4096 / 25) == 164
    assert io_counts("flash1", shape, 128, b).total_bytes <= std
    assert io_counts("flash1", shape, 128, b - 1).total_bytes > std
    # flash2 needs a much smaller block_q: (Tr - 1) 2 d eb + acc <= 4 N eb
    b2 = bounds.standard_crossover("flash2", shape)
    assert b2 == math.ceil(4096 / ((4 * 4096 * 2 - 4) // (2 * 128 * 2) + 1))
    with pytest.raises(ValueError, match="without a mask"):
        bounds.standard_crossover("flash2", kernels.AttentionShape(1, 1, 8, 8, causal=True))
    with pytest.raises(ValueError, match="flash"):
        bounds.standard_crossover("standard", shape)


# ---------------------------------------------------------------------------- FLOPs


@pytest.mark.parametrize("name", kernels.SCHEDULES)
@given(data=st.data())
def test_matmul_flops_equal_trace_and_simulator(name, data):
    sched = data.draw(_schedules(name))
    ev = sched.trace().events
    assert flops.matmul_flops(sched) == int(ev["flops"][ev["op"] == Op.MMA].sum())
    res = simulator.simulate(sched, H200.replace(l2_bytes=0, sm_count=2))
    assert flops.matmul_flops(sched) == res.mma_flops
    shape = sched.shape
    algo = flops.algorithmic_flops(
        shape, backward=name.endswith("_bwd"), recompute=name.startswith("flash")
    )
    if not shape.causal:
        assert flops.matmul_flops(sched) == algo
    else:  # whole tiles across the diagonal (flash) or every tile (standard): never fewer
        assert flops.matmul_flops(sched) >= algo


def test_algorithmic_flops_by_hand():
    shape = kernels.AttentionShape(2, 3, 100, 64)
    assert flops.algorithmic_flops(shape) == shape.forward_flops() == 4 * 100**2 * 64 * 6
    assert flops.algorithmic_flops(shape, backward=True, recompute=False) == 2 * (
        shape.forward_flops()
    )
    assert 2 * flops.algorithmic_flops(shape, backward=True) == 5 * shape.forward_flops()
    causal = kernels.AttentionShape(2, 3, 100, 64, causal=True)
    assert flops.algorithmic_flops(causal) == causal.forward_flops() == 4 * 5050 * 64 * 6


def test_recompute_ratios_exact():
    """Seed 001 says recompute adds "about a third" of the training FLOPs. Exactly: 1/6 of
    training, 1/4 of the backward, 1/2 of a forward; 1/3 only for a whole-forward recompute."""
    r = flops.recompute_ratios()
    assert (r.forward, r.backward_standard, r.backward_flash, r.recompute) == (4, 8, 10, 2)
    assert r.of_forward == Fraction(1, 2)
    assert r.of_standard_backward == Fraction(1, 4)
    assert r.of_standard_training == Fraction(1, 6)
    assert r.share_of_flash_training == Fraction(1, 7)
    assert r.full_forward_recompute == Fraction(1, 3)
    shape = kernels.AttentionShape(1, 2, 77, 32, causal=True)
    fwd = flops.algorithmic_flops(shape)
    std = fwd + flops.algorithmic_flops(shape, backward=True, recompute=False)
    fa = fwd + flops.algorithmic_flops(shape, backward=True)
    assert Fraction(fa, std) - 1 == r.of_standard_training


def test_ridge_point_and_roofline():
    # 989 TFLOP/s over 4.8 TB/s * 0.896 = 4.3008 TB/s
    assert flops.ridge_point(H200, "fp16") == pytest.approx(989e12 / 4.3008e12, rel=1e-12)
    shape = kernels.AttentionShape(1, 16, 4096, 64)
    sched = kernels.schedule("flash2", shape, 128, 128)
    r = flops.roofline(sched, H200)
    assert r.flops == 4 * 4096**2 * 64 * 16 and r.global_bytes == 553_910_272
    assert r.intensity == pytest.approx(r.flops / r.global_bytes, rel=1e-12)
    assert r.bound == "memory"  # ~124 FLOP/B < ~230 without L2 reuse
    assert r.time_lower_s == pytest.approx(r.global_bytes / 4.3008e12, rel=1e-12)
    fast = H200.replace(hbm_bandwidth_bytes_per_s=4.8e14)  # 100x HBM: ridge ~2.3 FLOP/B
    r2 = flops.roofline(sched, fast)
    assert r2.bound == "compute" and r2.attainable_flops_per_s == 989e12
    assert r2.to_dict()["schedule"] == "flash2"
