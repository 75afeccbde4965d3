"""Closed-form IO counts (analysis.closed_form.io) against the trace and the simulator, byte for
byte.

The closed forms are derived by hand from each schedule's loop order (docs/io.md); the tracer
walks the same loops event by event. Two independent counts of the same thing: they must agree
exactly, per tensor, for reads (LOAD) and writes (STORE + REDUCE). No tolerance.
"""

import itertools
import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from flashio import kernels, simulator
from flashio.analysis.closed_form.io import block_sums, io_counts, io_counts_of
from flashio.analysis.strategies import attention_shapes, tilings
from flashio.simulator.simulate import LOCAL_NAME
from tests._util import register_limits, trace_traffic

NO_L2 = simulator.load_gpu("h200").replace(l2_bytes=0, sm_count=4)


def _schedules(name, max_block=None):
    """Shapes of every kind (ragged N, causal, GQA, all dtypes) and a tiling of schedule name;
    with ``max_block``, blocks up to that many rows (N < block: one partial block)."""
    return attention_shapes(max_seq_len=48, head_dims=(8, 16, 32)).flatmap(
        lambda shape: tilings(shape=shape, names=(name,), max_block=max_block)
    )


@pytest.mark.parametrize("name", kernels.SCHEDULES)
@given(data=st.data())
def test_closed_form_equals_trace_per_tensor(name, data):
    sched = data.draw(_schedules(name))
    counts = io_counts_of(sched)
    traffic = trace_traffic(sched)
    assert [t.name for t in counts.tensors] == list(traffic)
    for t in counts.tensors:
        assert (t.read_bytes, t.write_bytes) == traffic[t.name], t.name
    assert counts.read_bytes == sum(r for r, _ in traffic.values())
    assert counts.write_bytes == sum(w for _, w in traffic.values())


@pytest.mark.parametrize("name", kernels.SCHEDULES)
@given(data=st.data())
def test_closed_form_equals_simulator_without_l2(name, data):
    """Every tensor byte for byte, register spills included: with a lowered register limit
    many drawn tilings spill, and the closed form's local-memory row equals the replay's, with
    no L1, a small one and one that holds every frame (reloads miss, some hit, all hit).
    Blocks up to 64 rows, so N < block (one partial block) is drawn too."""
    sched = data.draw(_schedules(name, max_block=64))
    gpu = NO_L2.replace(  # room in shared memory for every drawn tiling
        regs_per_thread_max=data.draw(register_limits(sched)),
        smem_per_sm_bytes=2**22 + 1024,
        smem_per_cta_bytes=2**22,
        l1_bytes_per_sm=data.draw(st.sampled_from([0, 2**22 + 2**15, 2**23])),
    )
    counts = io_counts_of(sched, gpu)
    res = simulator.simulate(sched, gpu)
    assert (res.global_read_bytes, res.global_write_bytes) == (
        counts.read_bytes,
        counts.write_bytes,
    )
    # spill traffic needs a spilling kernel (one without outer-loop steps moves none)
    spilled = any(k.occupancy.spilled_regs_per_thread for k in res.kernels)
    assert spilled or counts.spill_read_bytes == counts.spill_write_bytes == 0
    # without an L2 every global byte is an HBM byte (the FlashAttention paper's model)
    assert (res.hbm_read_bytes, res.hbm_write_bytes) == (
        res.global_read_bytes,
        res.global_write_bytes,
    )
    assert [t.name for t in res.tensors] == [t.name for t in counts.tensors]
    for got, want in zip(res.tensors, counts.tensors, strict=True):
        assert (got.global_read_bytes, got.global_write_bytes) == (
            want.read_bytes,
            want.write_bytes,
        ), want.name
        assert (got.hbm_read_bytes, got.hbm_write_bytes) == (want.read_bytes, want.write_bytes)
    # without a gpu: the algorithm's tensors only
    plain = io_counts_of(sched)
    assert plain.tensors == tuple(t for t in counts.tensors if t.name != LOCAL_NAME)
    assert plain.spill_read_bytes == plain.spill_write_bytes == 0 and plain.gpu is None


@pytest.mark.parametrize(
    ("name", "n", "d", "bq", "bkv", "dtype"),
    [  # the disagreements, now equal (H200, no L2, 4 warps)
        ("flash2_bwd", 2179, 128, 64, 128, "fp16"),
        ("flash1_bwd", 1292, 16, 128, 128, "fp32"),
    ],
)
def test_spills_are_their_own_term(name, n, d, bq, bkv, dtype):
    """A tiling that needs more registers than the GPU allows stores and reloads its spilled
    registers once per outer-loop step; the closed form counts exactly that, as its own row."""
    gpu = simulator.load_gpu("h200").replace(l2_bytes=0)
    sched = kernels.schedule(name, kernels.AttentionShape(1, 2, n, d, dtype), bq, bkv, 4)
    res = simulator.simulate(sched, gpu)
    counts = io_counts(name, sched.shape, bq, bkv, warps=4, gpu="h200")
    assert counts.gpu == "h200" and counts.tensors == io_counts_of(sched, gpu).tensors
    local = res.tensor(LOCAL_NAME)
    assert (counts.spill_read_bytes, counts.spill_write_bytes) == (
        local.global_read_bytes,
        local.global_write_bytes,
    )
    assert (counts.read_bytes, counts.write_bytes) == (
        res.global_read_bytes,
        res.global_write_bytes,
    )
    assert counts.read_bytes == io_counts_of(sched).read_bytes + counts.spill_read_bytes
    # by hand: steps of the spilling kernel x spilled registers x 4 B x 128 threads
    main = next(k for k in res.kernels if k.occupancy.spilled_regs_per_thread)
    per_step = main.occupancy.spilled_regs_per_thread * 4 * 4 * 32
    steps = 2 * sched.t_kv * (sched.t_q if name == "flash2_bwd" else 1)
    assert counts.spill_write_bytes == steps * per_step
    d = counts.to_dict()
    assert d["spill_read_bytes"] == counts.spill_read_bytes and d["gpu"] == "h200"


@pytest.mark.parametrize("name", ["flash1", "flash2", "flash2_bwd", "standard"])
@given(data=st.data())
def test_a_larger_l1_never_reads_more(name, data):
    """Spill stores leave the SM whatever the L1; reloads only where the frames miss it. So
    with more L1 the closed form's writes stay and its reads never grow, and they never fall
    below the spill-free schedule's."""
    sched = data.draw(_schedules(name, max_block=64))
    gpu = NO_L2.replace(regs_per_thread_max=data.draw(register_limits(sched)))
    small, large = sorted(data.draw(st.integers(0, 2**19)) for _ in range(2))
    less, more = (io_counts_of(sched, gpu.replace(l1_bytes_per_sm=b)) for b in (small, large))
    assert more.write_bytes == less.write_bytes
    assert io_counts_of(sched).read_bytes <= more.read_bytes <= less.read_bytes


def test_spill_reloads_stay_in_l1_where_the_frame_fits():
    """flash2_bwd at d = 128, 64x128, 8 warps spills 9 registers a thread: 9 KiB per CTA (one
    per SM), inside the 156 KiB of L1 the 100 KiB carve-out leaves beside its 97.5 KiB of
    shared memory. Its reloads stay on the SM: the replay and the closed form read what the
    spill-free schedule reads and write the spills. On a spec that gives no L1 they reload."""
    sched = kernels.schedule("flash2_bwd", kernels.AttentionShape(1, 2, 2048, 128, "bf16"),
                             64, 128, 8)  # fmt: skip
    gpu = simulator.load_gpu("h200").replace(l2_bytes=0)
    main = sched.kernels[1]
    assert gpu.l1_free_bytes(main.smem_bytes + 1024) == (256 - 100) * 1024
    plain = io_counts_of(sched)
    for l1, reloads in ((gpu.l1_bytes_per_sm, False), (0, True)):
        spec = gpu.replace(l1_bytes_per_sm=l1)
        res, counts = simulator.simulate(sched, spec), io_counts_of(sched, spec)
        occ = res.kernels[1].occupancy
        assert (occ.spilled_regs_per_thread, occ.ctas_per_sm) == (9, 1)
        local = res.tensor(LOCAL_NAME)
        steps = 2 * sched.t_kv * sched.t_q
        assert local.global_write_bytes == counts.spill_write_bytes == steps * 9 * 4 * 256
        assert local.global_read_bytes == counts.spill_read_bytes
        assert counts.spill_read_bytes == (counts.spill_write_bytes if reloads else 0)
        assert res.global_read_bytes == counts.read_bytes
        assert counts.read_bytes == plain.read_bytes + counts.spill_read_bytes


def test_flash2_spill_steps_are_visited_pairs():
    """FA2's CTAs spill once per visited K/V block; causal skips the blocks above the
    diagonal, and so do its spills."""
    shape = kernels.AttentionShape(1, 2, 512, 64, "fp16", causal=True)
    sched = kernels.schedule("flash2", shape, 256, 256, warps=4)
    res = simulator.simulate(sched, NO_L2)
    occ = res.kernels[0].occupancy
    assert occ.spilled_regs_per_thread > 0
    pairs = block_sums(shape, 256, 256).pairs
    assert pairs == 3  # (0, 0), (1, 0), (1, 1)
    per_step = occ.spilled_regs_per_thread * 4 * 4 * 32
    assert res.tensor(LOCAL_NAME).global_write_bytes == 2 * pairs * per_step
    assert io_counts_of(sched, NO_L2).spill_write_bytes == 2 * pairs * per_step


@pytest.mark.parametrize("passes", [1, 2])
def test_standard_softmax_passes_and_rows(passes):
    """Passes change only how often S (forward) and P, dP (backward) are read; rows nothing."""
    shape = kernels.AttentionShape(2, 4, 37, 16, "bf16", causal=True, kv_heads=2)
    for name in ("standard", "standard_bwd"):
        base = None
        for rows in (1, 3, 37):
            sched = kernels.schedule(name, shape, 5, 7, softmax_passes=passes, softmax_rows=rows)
            counts = io_counts_of(sched)
            traffic = trace_traffic(sched)
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
    got = block_sums(kernels.AttentionShape(1, 1, n, 8, causal=causal), br, bc)
    assert (got.row_visits, got.col_visits, got.area) == (rv, cv, area)
    assert got.pairs == sum(
        1
        for i, j in itertools.product(range(math.ceil(n / br)), range(math.ceil(n / bc)))
        if not causal or j * bc <= min(n, (i + 1) * br) - 1
    )
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
