"""FlashAttention-1 forward (Algorithm 1) and backward (Algorithm 4): hand-derived traffic,
split-K exchange, FLOPs, and the seeds' demos reproduced."""

import numpy as np
import pytest

from flashio import kernels
from flashio.kernels import flash1, flash1_bwd
from flashio.kernels._record import Recorder
from flashio.simulator.trace import Op, Space
from tests._util import random_inputs

# the ragged case of the hand derivations: N=10 rows in Q blocks of 4 and K/V blocks of 3
N, D, BR, BC = 10, 16, 4, 3
TR, TC = 3, 4  # ceil(10/4), ceil(10/3)
EB, ACC = 2, 4  # fp16 elements, fp32 accumulators


def _shape(causal=False, dtype="fp16"):
    return kernels.AttentionShape(2, 2, N, D, dtype, causal=causal, kv_heads=1)


def _count(trace, op):
    return int(np.count_nonzero(trace.events["op"] == op))


def _flops(trace, op):
    return int(trace.events["flops"][trace.events["op"] == op].sum())


def test_forward_global_bytes_by_tensor():
    """Outer loop over K/V: K, V read once per CTA (one per (b, h)); Q, O_acc, l, m read once per
    outer step; O_acc, l, m written at line 2 and after every step, except that the last step
    writes the final O (input dtype) instead of O_acc."""
    sched = kernels.schedule("flash1", _shape(), block_q=BR, block_kv=BC, warps=4)
    assert (sched.t_q, sched.t_kv) == (TR, TC)
    trace = sched.trace()
    bh = 2 * 2  # CTAs: batch * heads (each query head's CTA reads its kv head's K and V)
    assert trace.bytes_by(Op.LOAD) == {
        "Q": bh * TC * N * D * EB,
        "K": bh * N * D * EB,
        "V": bh * N * D * EB,
        "O_acc": bh * TC * N * D * ACC,
        "l": bh * TC * N * ACC,
        "m": bh * TC * N * ACC,
    }
    assert trace.bytes_by(Op.STORE) == {
        "O": bh * N * D * EB,
        "O_acc": bh * (1 + (TC - 1)) * N * D * ACC,  # line 2, then every step but the last
        "l": bh * (1 + TC) * N * ACC,
        "m": bh * (1 + TC) * N * ACC,
    }
    assert trace.bytes_by(Op.REDUCE) == {}


def test_forward_causal_global_bytes():
    """Causal: K block j (first key 3j) meets the Q blocks from 3j // 4 on, i.e. 10, 10, 6 and
    2 query rows for j = 0..3; each Q block's last visit writes O, the others O_acc."""
    sched = kernels.schedule("flash1", _shape(causal=True), block_q=BR, block_kv=BC)
    trace = sched.trace()
    bh, rows = 4, 10 + 10 + 6 + 2
    loads, stores = trace.bytes_by(Op.LOAD), trace.bytes_by(Op.STORE)
    assert loads["Q"] == bh * rows * D * EB
    assert loads["O_acc"] == bh * rows * D * ACC
    assert loads["K"] == loads["V"] == bh * N * D * EB
    assert stores["O"] == bh * N * D * EB
    assert stores["O_acc"] == bh * (N + rows - N) * D * ACC
    assert stores["l"] == stores["m"] == bh * (N + rows) * ACC


def test_backward_global_bytes_by_tensor():
    """One CTA per (b, kv head): K, V read and dK, dV written once per kv head; per query head,
    Q, O, dO, l, m and dQ_acc read once per outer step, dQ_acc written at line 5 and per step,
    then read once more and converted to dQ."""
    sched = kernels.schedule("flash1_bwd", _shape(), block_q=BR, block_kv=BC)
    trace = sched.trace()
    bh, bkv = 2 * 2, 2 * 1
    assert trace.bytes_by(Op.LOAD) == {
        "Q": bh * TC * N * D * EB,
        "K": bkv * N * D * EB,
        "V": bkv * N * D * EB,
        "O": bh * TC * N * D * EB,
        "dO": bh * TC * N * D * EB,
        "l": bh * TC * N * ACC,
        "m": bh * TC * N * ACC,
        "dQ_acc": bh * (TC + 1) * N * D * ACC,
    }
    assert trace.bytes_by(Op.STORE) == {
        "dQ_acc": bh * (1 + TC) * N * D * ACC,
        "dQ": bh * N * D * EB,
        "dK": bkv * N * D * EB,
        "dV": bkv * N * D * EB,
    }


def test_backward_fp32_work():
    """Per (i, j): P from the ledger (per score and per row), D_i recomputed (2 r d), dS."""
    sched = kernels.schedule("flash1_bwd", _shape(), block_q=BR, block_kv=BC)
    trace, bh = sched.trace(), 4
    per_head = (flash1_bwd.EW_P_PER_SCORE + flash1_bwd.EW_DS_PER_SCORE) * N * N + TC * N * (
        flash1_bwd.EW_P_PER_ROW + flash1_bwd.EW_D_PER_ELEM * D
    )
    assert _flops(trace, Op.ELEMENTWISE) == bh * per_head
    assert _flops(trace, Op.EXP) == bh * N * N


@pytest.mark.parametrize("warps", [1, 2, 4, 8])
def test_split_k_exchange(warps):
    """Split-K: after every (i, j) step the warps exchange partial O, row max and row sum through
    shared memory (2 * warps * r * (d + 2) * acc bytes) and synchronise; one warp does not."""
    sched = kernels.schedule("flash1", _shape(), block_q=BR, block_kv=BC, warps=warps)
    trace = sched.trace()
    ev, bh = trace.events, 4
    shared = ev[ev["op"] == Op.SHARED]
    names = [t.name for t in trace.meta.tensors]
    base_smem = (BR + 2 * BC) * D * EB
    if warps == 1:
        assert shared.size == 0 and _count(trace, Op.SYNC) == 0
        assert "split_k" not in names
        assert sched.kernels[0].smem_bytes == base_smem
    else:
        assert int(shared["bytes"].sum()) == bh * TC * 2 * warps * N * (D + 2) * ACC
        assert _count(trace, Op.SYNC) == shared.size == bh * TC * TR
        assert set(shared["tensor"]) == {names.index("split_k")}
        assert sched.kernels[0].smem_bytes == base_smem + warps * BR * (D + 2) * ACC
    # the CTA's peak of live shared memory is what the launch asks for
    cta0 = trace.cta_events(0, 0, 1)
    spaces = np.array([t.space for t in trace.meta.tensors])
    sm = cta0[(cta0["op"] == Op.ALLOC) & (spaces[cta0["tensor"]] == Space.SHARED)]
    assert int(sm["bytes"].sum()) == sched.kernels[0].smem_bytes
    # FP32 work: the module's per-score, per-row and per-output counts plus the warps' adds
    ew = (
        flash1.EW_PER_SCORE * N * N
        + TC * N * (flash1.EW_PER_ROW + flash1.EW_PER_OUT * D)
        + (warps - 1) * TC * N * (D + 2)
    )
    assert _flops(trace, Op.ELEMENTWISE) == bh * ew
    assert _flops(trace, Op.EXP) == bh * (N * N + 2 * TC * N)


@pytest.mark.parametrize("causal", [False, True])
def test_mma_flops_forward_4n2d_backward_2_5x(causal):
    """Forward: two matmuls, 4 N^2 d per head. Backward: five (S, dV, dP, dQ, dK) = 2.5x."""
    shape = kernels.AttentionShape(2, 4, 40, 32, "fp16", causal=causal, kv_heads=2)
    fwd = _flops(kernels.schedule("flash1", shape, 8, 16).trace(), Op.MMA)
    bwd = _flops(kernels.schedule("flash1_bwd", shape, 8, 16).trace(), Op.MMA)
    if not causal:
        assert fwd == 4 * 40**2 * 32 * 2 * 4 == shape.forward_flops()
    else:
        assert fwd > shape.forward_flops()  # diagonal blocks compute their masked half too
    assert 2 * bwd == 5 * fwd


def test_forward_leaves_final_statistics_in_hbm():
    """l and m in HBM after the last outer step are the dense row sums and row maxima."""
    shape = kernels.AttentionShape(1, 2, 23, 16, "fp64", causal=True)
    sched = kernels.schedule("flash1", shape, block_q=5, block_kv=4)
    q, k, v = random_inputs(shape, seed=7)
    o, l_hbm, m_hbm = flash1.execute(sched, q, k, v, None, Recorder())
    o_ref, m_ref, l_ref, _ = kernels.attention_forward(q, k, v, causal=True)
    np.testing.assert_allclose(o, o_ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(m_hbm, m_ref, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(l_hbm, l_ref, rtol=1e-12)


def test_seed_000_demo():
    """Seed 000's demo: n=8, d=4, B=2 with its closed-form inputs. Flash equals the dense
    result (max abs diff < 1e-9) and moves no element of S or P through global memory."""
    n, d, b = 8, 4, 2
    q = np.array([[(i + 1) * 0.5 + t for t in range(d)] for i in range(n)])[None, None]
    k = np.array([[(i + 1) * 0.3 - t for t in range(d)] for i in range(n)])[None, None]
    v = np.array([[(i + 1) * 0.2 + t * 0.1 for t in range(d)] for i in range(n)])[None, None]
    shape = kernels.AttentionShape(1, 1, n, d, "fp64")
    o, trace = kernels.execute(kernels.schedule("flash1", shape, b, b), q, k, v)
    o_std = kernels.attention_forward(q, k, v)[0]
    assert np.abs(o - o_std).max() < 1e-9
    glob = {t.name for t in trace.meta.tensors if t.space == Space.GLOBAL}
    assert glob == {"Q", "K", "V", "O", "O_acc", "l", "m"}
    moved = set(trace.bytes_by(Op.LOAD)) | set(trace.bytes_by(Op.STORE))
    assert moved == glob  # S and P never reach global memory: 0 elements


def test_seed_001_demo():
    """Seed 001's demo: N=6, d=8, block=2, rng seed 0, Q, K, V, dO ~ N(0, 1). The blocked backward
    that recomputes P from the forward's m/l ledger matches the dense backward to 1e-9."""
    rng = np.random.default_rng(0)
    n, d = 6, 8
    q, k, v, do = (rng.normal(size=(n, d))[None, None] for _ in range(4))
    shape = kernels.AttentionShape(1, 1, n, d, "fp64")
    sched = kernels.schedule("flash1_bwd", shape, block_q=2, block_kv=2)
    grads, trace = kernels.execute(sched, q, k, v, do)
    ref = kernels.attention_backward(q, k, v, do)
    for name, got, want in zip(("dQ", "dK", "dV"), grads, ref, strict=True):
        assert np.allclose(got, want, atol=1e-9), name
    glob = {t.name for t in trace.meta.tensors if t.space == Space.GLOBAL}
    assert not glob & {"S", "P", "dS", "dP"}
