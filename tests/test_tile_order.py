"""FlashAttention-3's causal tile order (flash2's ``longest_first`` option, set by the ``fa3``
preset's causal rows): its DynamicPersistentTileScheduler hands out the tiles of sections of
(batch, head) pairs whose K and V fit 32 MiB, the last Q block of each pair first
(Dao-AILab/flash-attention hopper/tile_scheduler.hpp). The trace's CTAs follow that order;
what each tile does is unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashio import kernels, simulator
from flashio.kernels.flash2 import section_pairs, tile_of


def _fa3_block_coord(tile_idx, num_blocks, num_hb, swizzle):
    """DynamicPersistentTileScheduler::get_block_coord, written out as the C++ does it:
    (b * heads + h, m_block)."""
    bidhb, l2_mod = divmod(tile_idx, swizzle * num_blocks)
    num_hb_quotient, num_hb_remainder = num_hb // swizzle, num_hb % swizzle
    if bidhb < num_hb_quotient:
        block, bidhb_residual = divmod(l2_mod, swizzle)
    else:
        block, bidhb_residual = divmod(l2_mod, num_hb_remainder or 1)
    return bidhb * swizzle + bidhb_residual, num_blocks - 1 - block


@given(t_q=st.integers(1, 12), pairs=st.integers(1, 20), section=st.sampled_from([1, 2, 4, 8, 16]))
def test_the_order_is_fa3s_and_a_permutation_of_the_grid(t_q, pairs, section):
    """Every tile once, each where FA3's scheduler puts it, sections of fewer pairs than
    ``section`` at the end included; section 0 is the grid's order."""
    n = t_q * pairs
    got = [tile_of(c, t_q, pairs, section) for c in range(n)]
    assert got == [_fa3_block_coord(c, t_q, pairs, section) for c in range(n)]
    assert sorted(got) == [(bh, i) for bh in range(pairs) for i in range(t_q)]
    assert [tile_of(c, t_q, pairs, 0) for c in range(n)] == [divmod(c, t_q) for c in range(n)]


def test_a_section_holds_the_heads_whose_k_and_v_fit_32_mib():
    """hopper/tile_scheduler.hpp: size_one_kv_head = seqlen_k * headdim * element_size * 2;
    swizzle = the power of two at or below 32 MiB / that (at least 1), times the query heads
    a K/V head serves."""
    assert section_pairs(16384, 128, 2, 1) == 4  # 8 MiB a head
    assert section_pairs(16384, 64, 2, 1) == 8  # 4 MiB
    assert section_pairs(12288, 64, 2, 1) == 8  # 3 MiB: 10 fit, rounded down
    assert section_pairs(131072, 128, 2, 1) == 1  # 64 MiB: one head all the same
    assert section_pairs(16384, 128, 2, 4) == 16  # GQA: 4 query heads a K/V head


def _fa3_causal(n=2048, heads=6, batch=1, kv_heads=None):
    shape = kernels.AttentionShape(batch, heads, n, 64, "bf16", causal=True, kv_heads=kv_heads)
    return kernels.schedule("flash2", shape, impl="fa3")


def test_fa3s_causal_preset_runs_the_longest_tiles_first_and_moves_the_same_bytes():
    sched = _fa3_causal()
    assert dict(sched.options)["longest_first"] == 1
    plain = kernels.schedule("flash2", sched.shape, sched.block_q, sched.block_kv, sched.warps)
    a, b = simulator.Trace.from_source(sched), simulator.Trace.from_source(plain)
    for op in (simulator.Op.LOAD, simulator.Op.STORE):
        assert a.bytes_by(op) == b.bytes_by(op)
    t_q, pairs = sched.t_q, 6
    section = section_pairs(2048, 64, 2, 1)
    assert section == 64  # 512 KiB a head: the six heads in one section
    for c in range(sched.kernels[0].ctas):  # CTA c of one is the tile's CTA of the other
        bh, i = tile_of(c, t_q, pairs, section)
        mine = a.cta_events(0, c, c + 1)
        theirs = b.cta_events(0, bh * t_q + i, bh * t_q + i + 1)
        fields = ["op", "tensor", "offset_bytes", "bytes", "flops"]
        assert np.array_equal(mine[fields], theirs[fields])
    first = a.cta_events(0, 0, pairs)
    assert set(first["block_row"][first["tensor"] == 0]) == {t_q - 1}  # Q's last block, each head
    non_causal = kernels.schedule(
        "flash2", kernels.AttentionShape(1, 6, 2048, 64, "bf16"), impl="fa3"
    )
    assert "longest_first" not in dict(non_causal.options)


def test_the_executor_runs_the_tiles_in_the_tracers_order_to_the_same_numbers():
    """The numeric executor records the tiles in the order the jitted tracer writes them (the
    same events), and each tile computes as in the grid's order (the same O)."""
    sched = _fa3_causal(n=300, heads=3, batch=2, kv_heads=1)
    plain = kernels.schedule("flash2", sched.shape, sched.block_q, sched.block_kv, sched.warps)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, h, 300, 64)).astype(np.float32) for h in (3, 1, 1))
    out, executed = kernels.execute(sched, q, k, v)
    ref_out, _ = kernels.execute(plain, q, k, v)
    assert np.array_equal(out, ref_out)
    assert np.array_equal(executed.events, simulator.Trace.from_source(sched).events)


def test_the_first_ctas_dispatched_are_the_longest():
    """On 4 SMs the first wave takes the four longest tiles, and here the grid ends earlier
    than in the grid's order, whose last tiles are its last head's longest (longest first is
    no guarantee of that in general: it bounds the makespan by 4/3 of the best one)."""
    sched = _fa3_causal(n=4096, heads=4)
    gpu = simulator.load_gpu("h200").replace(sm_count=4)
    res = simulator.simulate(sched, gpu, timeline=True)
    spans = res.timeline[0]
    first = np.argsort(spans[:, 0], kind="stable")[:4]
    ev = simulator.Trace.from_source(sched)
    lengths = np.array([len(ev.cta_events(0, c, c + 1)) for c in range(sched.kernels[0].ctas)])
    assert set(lengths[first]) == {lengths.max()}
    plain = kernels.schedule("flash2", sched.shape, sched.block_q, sched.block_kv, sched.warps,
                             impl=sched.impl, longest_first=0)  # fmt: skip
    assert res.time_s <= simulator.simulate(plain, gpu).time_s * (1 + 1e-9)
    with pytest.raises(ValueError):
        kernels.schedule("flash2", sched.shape, impl="fa3", longest_first=2)


def test_sampled_replays_the_longest_first_order_whole():
    """Its grid repeats over sections of heads, not over heads: the sampled replay is the
    exact one."""
    sched = _fa3_causal(n=4096, heads=8)
    gpu = simulator.load_gpu("h200").replace(sm_count=8)
    res = simulator.simulate(sched, gpu, mode="sampled")
    assert res.sampling.replayed_ctas == res.sampling.total_ctas
    assert res.time_s == simulator.simulate(sched, gpu).time_s
