"""Partial tiles: a block larger than the sequence (a decoding step, N = 1, still runs 128-row
tiles), N < block, and ragged N, for every schedule.

Each case executes exactly (fp64 against the dense reference), its executor's trace is the fast
tracer's, the trace is valid (analysis.dag.trace_check), and the closed form equals the replay on a
GPU without L2, register spills included. A partial tile moves its real rows only, as a
predicated kernel does, and keeps the on-chip buffers of the whole block (docs/io.md).
"""

import json

import numpy as np
import pytest

from flashio import kernels, simulator
from flashio.analysis.cli.main import main
from flashio.analysis.closed_form.io import io_counts, io_counts_of
from flashio.analysis.dag import validate_trace
from flashio.kernels import flash_decode
from flashio.simulator import Op
from tests._util import random_inputs

# no L2 (global bytes are HBM bytes), shared memory for every tile drawn here
NO_L2 = simulator.load_gpu("h200").replace(
    l2_bytes=0, sm_count=4, smem_per_sm_bytes=2**22 + 1024, smem_per_cta_bytes=2**22
)

# (seq_len, block_q, block_kv): N = 1 with 128-row blocks; N < block; ragged N; mixed
CASES = [
    (1, 128, 128),
    (5, 64, 128),
    (37, 128, 64),
    (37, 16, 12),
    (37, 128, 12),
    (37, 5, 128),
]
SHAPES = [  # (heads, kv_heads, causal)
    (2, 2, False),
    (4, 2, True),
]


def _shape(n, heads, kv_heads, causal, dtype="fp64"):
    return kernels.AttentionShape(2, heads, n, 16, dtype, causal=causal, kv_heads=kv_heads)


def _reference(sched, arrays):
    causal = sched.shape.causal
    if sched.name.endswith("_bwd"):
        return kernels.attention_backward(*arrays, causal=causal)
    return (kernels.attention_forward(*arrays, causal=causal)[0],)


@pytest.mark.parametrize("name", kernels.SCHEDULES)
@pytest.mark.parametrize(("n", "bq", "bkv"), CASES)
@pytest.mark.parametrize(("heads", "kv_heads", "causal"), SHAPES)
def test_partial_tiles_execute_trace_and_count_exactly(name, n, bq, bkv, heads, kv_heads, causal):
    shape = _shape(n, heads, kv_heads, causal)
    sched = kernels.schedule(name, shape, bq, bkv, warps=4)
    arrays = random_inputs(shape, seed=n + bq, backward=name.endswith("_bwd"))
    result, executed = kernels.execute(sched, *arrays)
    got = result if isinstance(result, tuple) else (result,)
    for g, ref in zip(got, _reference(sched, arrays), strict=True):
        # relative to the output's magnitude, or to 1 where it cancels to ~0 (dQ, dK at N = 1)
        err = np.abs(g - ref).max() / max(np.abs(ref).max(), 1.0)
        assert err < 1e-12, f"relative error {err:.3e}"
    fast = sched.trace()
    assert executed.meta == fast.meta and len(executed) == len(fast) == sched.n_events()
    assert np.array_equal(executed.events, fast.events)
    assert validate_trace(fast, NO_L2) == []
    res = simulator.simulate(sched, NO_L2)
    counts = io_counts_of(sched, NO_L2)
    assert (res.global_read_bytes, res.global_write_bytes) == (
        counts.read_bytes,
        counts.write_bytes,
    )
    assert [(t.name, t.global_read_bytes, t.global_write_bytes) for t in res.tensors] == [
        (t.name, t.read_bytes, t.write_bytes) for t in counts.tensors
    ]


@pytest.mark.parametrize("name", kernels.SCHEDULES)
@pytest.mark.parametrize("causal", [False, True])
def test_a_block_larger_than_n_moves_the_bytes_of_a_block_of_n(name, causal):
    """Predicated rows move nothing: the algorithm's traffic of one 128-row tile over N rows is
    that of an N-row tile, tensor by tensor; shared memory and registers stay the whole tile's."""
    opts = {"softmax_rows": 4, "softmax_passes": 2} if name.startswith("standard") else {}
    if name == "flash_decode":  # the same kernels at N and at 256 (no combine)
        opts = {"num_splits": 1}
    for n in (1, 7, 100):
        shape = _shape(n, 4, 2, causal, dtype="fp16")
        big = kernels.schedule(name, shape, 128, 128, warps=4, **opts)
        rows = flash_decode.units(shape)[1] if name == "flash_decode" else n  # a Q tile's rows
        exact = kernels.schedule(name, shape, rows, n, warps=4, **opts)
        assert io_counts_of(big).tensors == io_counts_of(exact).tensors
        assert big.trace().bytes_by(Op.LOAD) == exact.trace().bytes_by(Op.LOAD)
        # on chip, every tile keeps its block size (two softmax passes: Bc-wide chunks)
        wide = kernels.schedule(name, _shape(256, 4, 2, causal, "fp16"), 128, 128, 4, **opts)
        assert [k.smem_bytes for k in big.kernels] == [k.smem_bytes for k in wide.kernels]
        regs = [k.regs_per_thread for k in big.kernels]
        assert regs == [k.regs_per_thread for k in wide.kernels]


def test_partial_tile_events_carry_real_rows_and_full_buffers():
    """flash2 at N = 1, 128 x 128: every memory event is one row; the buffers are 128 rows."""
    shape = _shape(1, 1, 1, False, dtype="fp16")
    sched = kernels.schedule("flash2", shape, 128, 128, warps=4)
    ev = sched.trace().events
    mem = ev[np.isin(ev["op"], [int(Op.LOAD), int(Op.STORE)])]
    names = [t.name for t in sched.tensors]
    # per CTA (batch 2): Q, K, V, O of one row of d = 16 fp16 values, and one fp32 of L
    assert set(mem["rows"].tolist()) == {1}
    assert mem["bytes"].tolist() == 2 * [32, 32, 32, 32, 4]
    q_tile = ev[(ev["op"] == int(Op.ALLOC)) & (ev["tensor"] == names.index("Q_i"))]
    assert q_tile["bytes"].tolist() == 2 * [128 * 16 * 2]  # the whole 128-row tile


@pytest.mark.parametrize("name", ["standard", "standard_bwd"])
def test_softmax_rows_above_n(name):
    """The softmax row block may be larger than N too: one CTA, N real rows."""
    shape = _shape(3, 2, 2, True)
    sched = kernels.schedule(name, shape, 128, 128, warps=4, softmax_rows=8)
    softmax = sched.kernels[1 if name == "standard" else 2]
    assert sched.option("softmax_rows") == 8 and softmax.ctas == 2 * 2  # one per (b, h)
    arrays = random_inputs(shape, seed=5, backward=name.endswith("_bwd"))
    result, executed = kernels.execute(sched, *arrays)
    got = result if isinstance(result, tuple) else (result,)
    for g, ref in zip(got, _reference(sched, arrays), strict=True):
        assert np.abs(g - ref).max() / max(np.abs(ref).max(), 1.0) < 1e-12
    assert np.array_equal(executed.events, sched.trace().events)
    passes = sched.option("softmax_passes")
    exact = kernels.schedule(name, shape, 3, 3, 4, softmax_rows=3, softmax_passes=passes)
    assert io_counts_of(sched).tensors == io_counts_of(exact).tensors


def test_closed_form_with_a_gpu_names_it():
    shape = _shape(1, 2, 2, False)
    counts = io_counts("flash2", shape, 128, 128, warps=1, gpu="h200")
    assert counts.gpu == "h200" and counts.warps == 1
    assert counts.spill_write_bytes > 0  # fp64 128 x 128 tiles over 32 threads spill
    assert io_counts("flash2", shape, 128, 128, warps=1).spill_write_bytes == 0


def test_cli_simulates_a_decoding_step_with_128_row_tiles(capsys):
    argv = ["simulate", "flash2", "--seq-len", "1", "--block-q", "128", "--block-kv", "128"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["block_q"] == 128 and out["block_kv"] == 128 and out["shape"]["seq_len"] == 1
    assert out["result"]["global_read_bytes"] > 0


@pytest.mark.parametrize(("name", "warps"), [("flash2", 8), ("flash2_bwd", 4), ("standard", 8)])
def test_cuda_launcher_takes_n_below_the_block(name, warps):
    """kernels.gpu accepts N = 1 with 128-row tiles (the .cu kernels take N at run time and
    predicate rows past it): no tiling error, one CTA per schedule CTA, the whole tiles'
    shared memory; the standard softmax is compiled for rows of S that are not 16-byte
    aligned (N % 8 != 0). Running them needs a GPU (tests/test_gpu_kernels.py)."""
    from flashio.kernels import gpu

    opts = {"softmax_rows": 8, "softmax_passes": 2} if name == "standard" else {}
    one, long = (
        kernels.schedule(
            name, kernels.AttentionShape(2, 4, n, 64, "bf16"), 128, 128, warps, **opts
        )
        for n in (1, 1000)
    )
    assert gpu.tiling_errors(one) == []
    assert [ln.grid for ln in gpu.launches(one)] == [k.ctas for k in one.kernels]
    # the same compiled kernels, but for the standard softmax's copies of unaligned rows of S
    aligned = {"ROWS_ALIGNED": 0} if name == "standard" else {}
    assert {**dict(gpu.defines(long)), **aligned} == dict(gpu.defines(one))
    assert [ln.smem_bytes for ln in gpu.launches(one)] == [
        ln.smem_bytes for ln in gpu.launches(long)
    ]


def test_masked_builds_run_flash2_forward_and_backward():
    """A window, segments or its own K/V length build flash2's forward and backward with
    MASKED (kernels/cuda/flash2_fwd.cu, flash2_bwd.cu); the backward's main kernel asks for
    each Q row's key interval (two int32) beside its dS^T tile, and its gradients of K and V
    have the K/V length. Standard attention's kernels run no such mask."""
    from flashio.kernels import gpu

    shape = kernels.AttentionShape(1, 4, 300, 64, "bf16", causal=True, kv_seq_len=700, window=50)
    fwd, bwd = (kernels.schedule(n, shape, 64, 64, 4) for n in ("flash2", "flash2_bwd"))
    plain = kernels.schedule("flash2_bwd", kernels.AttentionShape(1, 4, 300, 64, "bf16"),
                             64, 64, 4)  # fmt: skip
    for s in (fwd, bwd):
        assert gpu.tiling_errors(s) == [] and dict(gpu.defines(s))["MASKED"] == 1
    assert "MASKED" not in dict(gpu.defines(plain))

    def extra(sched):  # shared memory the launches ask for beyond the schedule's
        return [ln.smem_bytes - k.smem_bytes
                for ln, k in zip(gpu.launches(sched), sched.kernels, strict=True)]  # fmt: skip

    assert extra(bwd) == [0, 64 * 64 * 2 + 8 * 64, 0]
    assert extra(plain) == [0, 64 * 64 * 2, 0]
    assert [ln.grid for ln in gpu.launches(bwd)] == [k.ctas for k in bwd.kernels]
    assert bwd.kernels[1].ctas == 4 * -(-700 // 64)  # one CTA per K/V block of 700 keys
    std = kernels.schedule("standard", shape, 64, 64, 4)
    assert any("MASKED" in e for e in gpu.tiling_errors(std))
