"""Standard attention (FA paper, Algorithms 0 and 3): traffic derived by hand from the loop order,
the seeds' 4 N^2 count, the softmax's shared memory and passes, options, FLOPs."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashio import kernels
from flashio.kernels import standard
from flashio.kernels._record import Recorder
from flashio.simulator.trace import Op, Space
from tests._accuracy import bound_ratios, rule_applies, rule_ratios
from tests._util import random_inputs

# A small ragged case: N=10 rows in Q blocks of 4 (4, 4, 2) and K/V blocks of 3 (3, 3, 3, 1).
B, H, KV, N, D, BR, BC = 2, 2, 1, 10, 16, 4, 3
EB = 2  # fp16
TR, TC = math.ceil(N / BR), math.ceil(N / BC)


def _small(name, passes, causal=False):
    shape = kernels.AttentionShape(B, H, N, D, "fp16", causal=causal, kv_heads=KV)
    return kernels.schedule(name, shape, block_q=BR, block_kv=BC, softmax_passes=passes)


@pytest.mark.parametrize("passes", [1, 2])
def test_forward_bytes_derived_by_hand(passes):
    trace = _small("standard", passes).trace()
    heads = B * H  # every tensor below is per query head; K/V heads are re-read by each
    loads = {
        "Q": heads * TC * N * D * EB,  # qk: CTA (i, j) loads Q_i, so each Q row Tc times
        "K": heads * TR * N * D * EB,  # qk: CTA (i, j) loads K_j, so each K row Tr times
        "S": heads * passes * N * N * EB,  # softmax: every chunk once per pass
        "P": heads * N * N * EB,  # pv: CTA i streams P_i0 .. P_i(Tc-1) once
        "V": heads * TR * N * D * EB,  # pv: CTA i streams every V_j
    }
    stores = {
        "S": heads * N * N * EB,  # qk: each tile of S once
        "P": heads * N * N * EB,  # softmax: each chunk of P once
        "O": heads * N * D * EB,  # pv: O_i once per CTA
    }
    assert trace.bytes_by(Op.LOAD) == loads
    assert trace.bytes_by(Op.STORE) == stores


@pytest.mark.parametrize("passes", [1, 2])
def test_backward_bytes_derived_by_hand(passes):
    trace = _small("standard_bwd", passes).trace()
    heads, kv_heads = B * H, B * KV
    nn, nd = N * N * EB, N * D * EB  # bytes of one head of an N x N and an N x d tensor
    loads = {
        "P": heads * (1 + passes) * nn,  # dv: every tile once; ds: every chunk once per pass
        "dO": heads * (TC + TC) * nd,  # dv: each (kv head, j) CTA streams dO of its g, i; dp
        "V": heads * TR * nd,  # dp: CTA (i, j) loads V_j
        "dP": heads * passes * nn,  # ds
        "dS": heads * (1 + 1) * nn,  # dq and dk: every tile once each
        "K": heads * TR * nd,  # dq: CTA i streams every K_j
        "Q": heads * TC * nd,  # dk: CTA j streams every Q_i of its group
    }
    stores = {
        "dP": heads * nn,
        "dS": heads * nn,
        "dQ": heads * nd,
        "dK": kv_heads * nd,  # summed over the group's query heads inside one CTA
        "dV": kv_heads * nd,
    }
    assert trace.bytes_by(Op.LOAD) == loads
    assert trace.bytes_by(Op.STORE) == stores


@pytest.mark.parametrize(
    ("n", "bq", "bkv", "causal"), [(8, 2, 2, False), (37, 8, 16, True), (64, 64, 5, False)]
)
def test_seed_demo_count_of_s_and_p_traffic(n, bq, bkv, causal):
    """Seed 000's standard_attention returns ``4 * n * n``: S/P elements moved per head, S written
    and read once, P written and read once. True with one softmax pass; two read S twice."""
    shape = kernels.AttentionShape(2, 3, n, 16, "fp16", causal=causal)
    for passes, expected in ((1, 4 * n * n), (2, 5 * n * n)):
        sched = kernels.schedule(
            "standard", shape, block_q=bq, block_kv=bkv, softmax_passes=passes
        )
        trace = sched.trace()
        loads, stores = trace.bytes_by(Op.LOAD), trace.bytes_by(Op.STORE)
        moved = loads["S"] + stores["S"] + loads["P"] + stores["P"]
        assert moved // shape.elem_bytes == expected * shape.batch * shape.heads


def _peak_shared(trace, kernel):
    """Peak live SHARED bytes of any CTA of one kernel, from its ALLOC/FREE events."""
    ev = trace.events[trace.events["kernel"] == kernel]
    shared = [i for i, t in enumerate(trace.meta.tensors) if t.space == Space.SHARED]
    mem = ev[np.isin(ev["tensor"], shared) & np.isin(ev["op"], [Op.ALLOC, Op.FREE])]
    live = peak = 0
    for e in mem:
        live += e["bytes"] if e["op"] == Op.ALLOC else -e["bytes"]
        peak = max(peak, live)
    assert live == 0, "every ALLOC is freed"
    return peak


@pytest.mark.parametrize("name", ["standard", "standard_bwd"])
@pytest.mark.parametrize("passes", [1, 2])
def test_kernel_smem_is_the_traced_peak(name, passes):
    sched = _small(name, passes, causal=True)
    trace = sched.trace()
    for k, info in enumerate(sched.kernels):
        assert info.smem_bytes == _peak_shared(trace, k), info.name


def test_softmax_smem_grows_with_n_and_default_switches_above_48_kib():
    rows, eb = 4, 2  # default softmax_rows = warps = 4; fp16
    for n in (64, 128, 1024):
        shape = kernels.AttentionShape(1, 1, n, 64, "fp16")
        sched = kernels.schedule("standard", shape, warps=rows)
        assert dict(sched.options) == {"softmax_passes": 1, "softmax_rows": rows}
        assert sched.kernels[1].name == "softmax"
        assert sched.kernels[1].smem_bytes == rows * n * eb
    # the largest N whose resident row block fits CUDA's 48 KiB of static shared memory
    n_max = 48 * 1024 // (rows * eb)
    for name, buffers in (("standard", 1), ("standard_bwd", 2)):  # ds keeps P and dP resident
        fits = kernels.AttentionShape(1, 1, n_max // buffers, 64, "fp16")
        over = kernels.AttentionShape(1, 1, n_max // buffers + 1, 64, "fp16")
        k = 1 if name == "standard" else 2
        s_fits = kernels.schedule(name, fits, block_q=64, block_kv=64, warps=rows)
        s_over = kernels.schedule(name, over, block_q=64, block_kv=64, warps=rows)
        assert s_fits.option("softmax_passes") == 1
        assert s_fits.kernels[k].smem_bytes == 48 * 1024
        assert s_over.option("softmax_passes") == 2
        assert s_over.kernels[k].smem_bytes == buffers * rows * 64 * eb  # one chunk of Bc
        # forcing one pass above the limit is allowed: the smem is reported, not clipped
        forced = kernels.schedule(
            name, over, block_q=64, block_kv=64, warps=rows, softmax_passes=1
        )
        assert forced.kernels[k].smem_bytes == buffers * rows * over.seq_len * eb


def test_softmax_rows_default_to_warps_clipped_to_seq_len():
    shape = kernels.AttentionShape(1, 1, 3, 16, "fp16")
    assert kernels.schedule("standard", shape, warps=2).option("softmax_rows") == 2
    assert kernels.schedule("standard", shape, warps=8).option("softmax_rows") == 3
    sched = kernels.schedule("standard_bwd", shape, warps=1, softmax_rows=3)
    assert sched.option("softmax_rows") == 3
    assert sched.kernels[2].ctas == 1  # one CTA holds all 3 rows


@pytest.mark.parametrize("name", ["standard", "standard_bwd"])
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"softmax_pass": 1}, "no option 'softmax_pass'"),
        ({"softmax_passes": 0}, "softmax_passes must be 1"),
        ({"softmax_passes": 3}, "softmax_passes must be 1"),
        ({"softmax_passes": True}, "must be an integer"),
        ({"softmax_rows": 0}, "softmax_rows must be >= 1"),
        ({"softmax_rows": -2}, "softmax_rows must be >= 1"),
        ({"softmax_rows": 2.0}, "must be an integer"),
    ],
)
def test_bad_options_are_rejected(name, options, message):
    shape = kernels.AttentionShape(1, 1, N, D, "fp16")
    with pytest.raises(ValueError, match=message):
        kernels.schedule(name, shape, **options)
    if "softmax_pass" in options:  # also when the Schedule is built directly
        with pytest.raises(ValueError, match=message):
            kernels.Schedule(name, shape, 2, 2, 4, (("softmax_pass", 1),))


def _mma_flops(trace):
    ev = trace.events
    return int(ev["flops"][ev["op"] == Op.MMA].sum())


@pytest.mark.parametrize("causal", [False, True])
def test_backward_flops_are_twice_the_forward(causal):
    shape = kernels.AttentionShape(2, 4, 23, 32, "bf16", causal=causal, kv_heads=2)
    fwd = _mma_flops(kernels.schedule("standard", shape, block_q=8, block_kv=5).trace())
    bwd = _mma_flops(kernels.schedule("standard_bwd", shape, block_q=8, block_kv=5).trace())
    n, d = shape.seq_len, shape.head_dim
    # every GEMM computes all N x N scores, causal or not (no block skipping)
    assert fwd == 4 * n * n * d * shape.batch * shape.heads
    assert bwd == 2 * fwd
    if not causal:
        assert fwd == shape.forward_flops()


def _written_once(trace, name):
    """Every byte of global tensor ``name`` is stored exactly once (checks offsets and strides)."""
    t = trace.meta.tensor_index(name)
    count = np.zeros(trace.meta.tensors[t].size_bytes, np.int64)
    for e in trace.events[(trace.events["op"] == Op.STORE) & (trace.events["tensor"] == t)]:
        for row in range(e["rows"]):
            start = e["offset_bytes"] + row * e["row_stride_bytes"]
            count[start : start + e["row_bytes"]] += 1
    return np.all(count == 1)


@pytest.mark.parametrize("passes", [1, 2])
def test_outputs_and_intermediates_are_written_exactly_once(passes):
    fwd, bwd = _small("standard", passes).trace(), _small("standard_bwd", passes).trace()
    for name in ("S", "P", "O"):
        assert _written_once(fwd, name), name
    for name in ("dP", "dS", "dQ", "dK", "dV"):
        assert _written_once(bwd, name), name


def test_causal_p_is_zero_above_the_diagonal_and_matches_the_reference():
    shape = kernels.AttentionShape(1, 2, 13, 16, "fp64", causal=True)
    q, k, v = random_inputs(shape, seed=5)
    for passes in (1, 2):
        sched = kernels.schedule("standard", shape, block_q=4, block_kv=3, softmax_passes=passes)
        _, p, s = standard.execute(sched, q, k, v, None, Recorder())
        above = np.triu(np.ones((13, 13), bool), k=1)
        assert np.all(p[..., above] == 0) and np.all(s[..., above] != 0)  # S is not masked
        ref_p = kernels.attention_forward(q, k, v, causal=True)[3]
        assert np.abs(p - ref_p).max() < 1e-14


@st.composite
def _cases(draw, name):
    """Like tests/test_schedules.py's small cases, with both softmax passes and any row block."""
    heads, kv = draw(st.sampled_from([(1, 1), (2, 1), (4, 2)]))
    n = draw(st.integers(2, 30))
    shape = kernels.AttentionShape(
        draw(st.integers(1, 2)), heads, n, 16, "fp64", causal=draw(st.booleans()), kv_heads=kv
    )
    return kernels.schedule(
        name,
        shape,
        block_q=draw(st.integers(1, n)),
        block_kv=draw(st.integers(1, n)),
        warps=draw(st.sampled_from([1, 2, 4])),
        softmax_passes=draw(st.sampled_from([1, 2])),
        softmax_rows=draw(st.integers(1, n)),
    )


@pytest.mark.parametrize("name", ["standard", "standard_bwd"])
@given(data=st.data())
def test_both_passes_exact_in_fp64_and_traced_event_for_event(name, data):
    sched = data.draw(_cases(name))
    sh, bwd = sched.shape, name.endswith("_bwd")
    arrays = random_inputs(sh, seed=data.draw(st.integers(0, 2**16)), backward=bwd)
    result, executed = kernels.execute(sched, *arrays)
    fast = sched.trace()
    assert executed.meta == fast.meta
    assert np.array_equal(executed.events, fast.events)
    if bwd:
        refs = kernels.attention_backward(*arrays, causal=sh.causal)
    else:
        refs = (kernels.attention_forward(*arrays, causal=sh.causal)[0],)
    for got, ref in zip(result if bwd else (result,), refs, strict=True):
        assert np.abs(got - ref).max() / np.abs(ref).max() < 1e-12


def test_seq_len_one_backward_gives_exact_zero_dq_dk():
    """N=1: P = 1, so dS = P (dP - rowsum(P dP)) = 0 exactly and dQ = dK = 0; dV = dO."""
    shape = kernels.AttentionShape(2, 2, 1, 16, "fp64", kv_heads=1)
    q, k, v, do = random_inputs(shape, seed=2, backward=True)
    for passes in (1, 2):
        sched = kernels.schedule("standard_bwd", shape, softmax_passes=passes)
        (dq, dk, dv), _ = kernels.execute(sched, q, k, v, do)
        ref = kernels.attention_backward(q, k, v, do)
        assert np.all(dq == 0) and np.all(dk == 0)
        assert np.abs(ref[0]).max() < 1e-14 and np.abs(ref[1]).max() < 1e-14  # rounding noise
        assert np.array_equal(dv, do.sum(axis=1, keepdims=True))


@pytest.mark.parametrize("name", ["standard", "standard_bwd"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_two_passes_obey_the_low_precision_rule(name, dtype):
    """Within the rounding bound and the flash-attention rule (tests/_accuracy.py), as in
    tests/test_schedules.py, with two passes."""
    shape = kernels.AttentionShape(2, 2, 50, 32, dtype, causal=True)
    sched = kernels.schedule(name, shape, block_q=13, block_kv=7, warps=2, softmax_passes=2)
    arrays = random_inputs(shape, seed=4, backward=name.endswith("_bwd"))
    got, _ = kernels.execute(sched, *arrays)
    assert rule_applies(sched)
    assert max(bound_ratios(sched, arrays, got)) <= 1
    assert max(rule_ratios(sched, arrays, got)) <= 1
