"""Closed-form IO counts (analysis.io) against the trace and the simulator, byte for byte.

The closed forms are derived by hand from each schedule's loop order (docs/io.md); the tracer
walks the same loops event by event. Two independent counts of the same thing: they must agree
exactly, per tensor, for reads (LOAD) and writes (STORE + REDUCE). No tolerance.
"""

import itertools
import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import kernels
import simulator
from analysis.io import block_sums, io_counts, io_counts_of
from analysis.strategies import attention_shapes, tilings
from simulator import Op, Space
from simulator.simulate import LOCAL_NAME

NO_L2 = simulator.load_gpu("h200").replace(l2_bytes=0, sm_count=4)


def _schedules(name):
    """Shapes of every kind (ragged N, causal, GQA, all dtypes) and a tiling of schedule name."""
    return attention_shapes(max_seq_len=48, head_dims=(8, 16, 32)).flatmap(
        lambda shape: tilings(shape=shape, names=(name,))
    )


def _trace_traffic(sched):
    tr = sched.trace()
    loads, stores, reduces = (tr.bytes_by(op) for op in (Op.LOAD, Op.STORE, Op.REDUCE))
    names = [t.name for t in sched.tensors if t.space == Space.GLOBAL]
    return {n: (loads.get(n, 0), stores.get(n, 0) + reduces.get(n, 0)) for n in names}


@pytest.mark.parametrize("name", kernels.SCHEDULES)
@given(data=st.data())
def test_closed_form_equals_trace_per_tensor(name, data):
    sched = data.draw(_schedules(name))
    counts = io_counts_of(sched)
    traffic = _trace_traffic(sched)
    assert [t.name for t in counts.tensors] == list(traffic)
    for t in counts.tensors:
        assert (t.read_bytes, t.write_bytes) == traffic[t.name], t.name
    assert counts.read_bytes == sum(r for r, _ in traffic.values())
    assert counts.write_bytes == sum(w for _, w in traffic.values())


@pytest.mark.parametrize("name", kernels.SCHEDULES)
@given(data=st.data())
def test_closed_form_equals_simulator_without_l2(name, data):
    """The schedule's own tensors, byte for byte. Register spills, which the simulator adds as
    a separate local-memory pseudo-tensor when a kernel needs more registers than the GPU has,
    are not part of the algorithm's IO and are compared separately (test_spills_are_separate)."""
    sched = data.draw(_schedules(name))
    counts = io_counts_of(sched)
    res = simulator.simulate(sched, NO_L2)
    own = [t for t in res.tensors if t.name != LOCAL_NAME]
    spill = [t for t in res.tensors if t.name == LOCAL_NAME]
    spill_read = sum(t.global_read_bytes for t in spill)
    spill_write = sum(t.global_write_bytes for t in spill)
    assert (res.global_read_bytes - spill_read, res.global_write_bytes - spill_write) == (
        counts.read_bytes,
        counts.write_bytes,
    )
    # without an L2 every global byte is an HBM byte (the FlashAttention paper's model)
    assert (res.hbm_read_bytes, res.hbm_write_bytes) == (
        res.global_read_bytes,
        res.global_write_bytes,
    )
    assert [t.name for t in own] == [t.name for t in counts.tensors]
    for got, want in zip(own, counts.tensors, strict=True):
        assert (got.global_read_bytes, got.global_write_bytes) == (
            want.read_bytes,
            want.write_bytes,
        ), want.name
        assert (got.hbm_read_bytes, got.hbm_write_bytes) == (want.read_bytes, want.write_bytes)


def test_spills_are_separate():
    """A tiling that needs more registers than the GPU allows moves its spilled registers
    (store and reload once per outer-loop step) on top of the closed form."""
    shape = kernels.AttentionShape(1, 2, 512, 64, "fp16")
    sched = kernels.schedule("flash2", shape, 256, 256, warps=4)
    res = simulator.simulate(sched, NO_L2)
    occ = res.kernels[0].occupancy
    assert occ.spilled_regs_per_thread > 0
    local = res.tensor(LOCAL_NAME)
    per_step = occ.spilled_regs_per_thread * 4 * 4 * 32
    steps = sched.kernels[0].ctas * sched.t_kv  # every CTA walks every K/V block once
    assert local.global_write_bytes == local.global_read_bytes == steps * per_step
    counts = io_counts_of(sched)
    assert res.global_read_bytes == counts.read_bytes + local.global_read_bytes


@pytest.mark.parametrize("passes", [1, 2])
def test_standard_softmax_passes_and_rows(passes):
    """Passes change only how often S (forward) and P, dP (backward) are read; rows nothing."""
    shape = kernels.AttentionShape(2, 4, 37, 16, "bf16", causal=True, kv_heads=2)
    for name in ("standard", "standard_bwd"):
        base = None
        for rows in (1, 3, 37):
            sched = kernels.schedule(name, shape, 5, 7, softmax_passes=passes, softmax_rows=rows)
            counts = io_counts_of(sched)
            traffic = _trace_traffic(sched)
            assert {t.name: (t.read_bytes, t.write_bytes) for t in counts.tensors} == traffic
            base = base or counts
            assert counts.total_bytes == base.total_bytes
    nn = 2 * 4 * 37 * 37 * 2  # B*H*N^2 elements of 2 bytes
    assert io_counts("standard", shape, 5, 7, softmax_passes=passes).tensor("S").read_bytes == (
        passes * nn
    )


@given(
    n=st.integers(1, 60),
    tq=st.integers(1, 60),
    tkv=st.integers(1, 60),
    causal=st.booleans(),
)
@example(n=10, tq=3, tkv=4, causal=True)
def test_block_sums_by_enumerating_pairs(n, tq, tkv, causal):
    """The sums over visited (i, j) pairs, by brute force over every pair and every score."""
    br, bc = math.ceil(n / min(tq, n)), math.ceil(n / min(tkv, n))
    rv = cv = area = 0
    for i, j in itertools.product(range(math.ceil(n / br)), range(math.ceil(n / bc))):
        rows = range(i * br, min(n, (i + 1) * br))
        cols = range(j * bc, min(n, (j + 1) * bc))
        if causal and not any(c <= r for r in rows for c in cols):
            continue  # every score of the tile is masked: the schedules skip it
        rv, cv, area = rv + len(rows), cv + len(cols), area + len(rows) * len(cols)
    got = block_sums(n, br, bc, causal)
    assert (got.row_visits, got.col_visits, got.area) == (rv, cv, area)
    if not causal:
        assert (rv, cv, area) == (math.ceil(n / bc) * n, math.ceil(n / br) * n, n * n)
    else:
        assert area >= n * (n + 1) // 2


def test_readme_figure_flash2_reads():
    """README: FA2 at N=4096, d=64, 16 heads, Br=128 reads Q once and K, V 32 times."""
    shape = kernels.AttentionShape(1, 16, 4096, 64, "fp16")
    counts = io_counts("flash2", shape, 128, 128)
    qkv = 16 * 4096 * 64 * 2
    assert counts.read_bytes == qkv + 32 * 2 * qkv == 545_259_520


def test_paper_loop_orders():
    """DESIGN.md facts: FA1 reads K, V once and Q Tc times; FA2 reads Q once, K and V Tr times;
    standard writes and reads S and P: 4 N^2 elements per head with one pass (the seed's demo)."""
    shape = kernels.AttentionShape(1, 1, 1000, 64, "fp16")
    nd = 1000 * 64
    f1 = io_counts("flash1", shape, 100, 250)  # Tr = 10, Tc = 4
    assert f1.tensor("K").read_elements == nd and f1.tensor("Q").read_elements == 4 * nd
    f2 = io_counts("flash2", shape, 100, 250)
    assert f2.tensor("Q").read_elements == nd and f2.tensor("K").read_elements == 10 * nd
    std = io_counts("standard", shape, 100, 250, softmax_passes=1)
    sp = [std.tensor(t) for t in ("S", "P")]
    assert sum(t.read_elements + t.write_elements for t in sp) == 4 * 1000 * 1000


def test_gqa_kv_side_counts():
    """Backward K/V-side tensors travel per kv head, Q-side per query head."""
    shape = kernels.AttentionShape(1, 8, 64, 16, "fp32", kv_heads=2)
    for name in ("flash1_bwd", "flash2_bwd", "standard_bwd"):
        c = io_counts(name, shape, 16, 16)
        assert c.tensor("dK").write_elements == 2 * 64 * 16
        assert c.tensor("dQ").write_elements == 8 * 64 * 16


def test_io_counts_validates_like_schedule():
    shape = kernels.AttentionShape(1, 1, 16, 16)
    with pytest.raises(ValueError, match="unknown schedule"):
        io_counts("flash3", shape, 4, 4)
    # a block larger than N is one partial block: the bytes of a block of N rows
    assert io_counts("flash2", shape, 32, 4).tensors == io_counts("flash2", shape, 16, 4).tensors
    with pytest.raises(ValueError, match="no option"):
        io_counts("flash2", shape, 4, 4, softmax_passes=1)
    c = io_counts("flash2", shape, 4, 4)
    with pytest.raises(KeyError, match="no tensor"):
        c.tensor("S")
    d = c.to_dict()
    assert d["read_bytes"] == c.read_bytes and set(d["tensors"]) == {"Q", "K", "V", "O", "L"}


@given(
    shape=attention_shapes(max_seq_len=200, head_dims=(8, 64, 128), causal=False, gqa=False),
    data=st.data(),
)
def test_totals_without_mask(shape, data):
    """docs/io.md's table of totals per (batch, head), without a mask and with g = 1."""
    n, d, eb, acc = shape.seq_len, shape.head_dim, shape.elem_bytes, shape.acc_bytes
    br, bc = data.draw(st.integers(1, n)), data.draw(st.integers(1, n))
    p = data.draw(st.sampled_from([1, 2]))
    tr, tc, nd, bh = math.ceil(n / br), math.ceil(n / bc), n * d, shape.batch * shape.heads
    table = {
        "standard": eb * ((tc + 2 * tr + 1) * nd + (3 + p) * n * n),
        "standard_bwd": eb * ((3 * tc + 2 * tr + 3) * nd + (5 + 2 * p) * n * n),
        "flash1": eb * (tc + 3) * nd + acc * (2 * tc * nd + 4 * tc * n + 2 * n),
        "flash1_bwd": eb * (3 * tc + 5) * nd + acc * (2 * (tc + 1) * nd + 2 * tc * n),
        "flash2": eb * (2 + 2 * tr) * nd + acc * n,
        "flash2_bwd": eb * (2 * tc + 7) * nd + acc * (n * (2 * tc + 1) + (tc + 2) * nd),
    }
    for name, per_head in table.items():
        opts = {"softmax_passes": p} if name.startswith("standard") else {}
        assert io_counts(name, shape, br, bc, **opts).total_bytes == bh * per_head, name
