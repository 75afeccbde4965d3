"""The IO property suite, built on the public strategies (analysis.strategies).

1. Replay equals the closed form (no L2), and global traffic does not depend on the L2 at all.
2. Exact traffic never goes below the lower bounds that are proved with their constants: the
   compulsory traffic (constant 1) and each schedule's c * W d^2 / M with M its own on-chip
   footprint (docs/io.md, "Lower bounds"). Saha & Ye's Omega(N^2 d^2 / M) has no published
   constant, so no constant of theirs is asserted.
3. Monotonicity in the block sizes, exactly where the closed forms imply it, and examples where
   it fails outside.
4. Flash against standard: FA2 never moves more than standard attention with the same blocks;
   against standard at its best, each flash schedule wins iff its block reaches
   ``standard_crossover``, and loses below it.
5. The linear regime M >= N d of the seeds' "O(N^2) to O(N)".
6. The code in docs/property-testing.md runs.
"""

import math
import pathlib
import re
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashio import kernels, simulator
from flashio.analysis.closed_form import bounds
from flashio.analysis.closed_form.io import io_counts, io_counts_of
from flashio.analysis.strategies import attention_shapes, gpu_specs, tilings
from flashio.simulator import Op
from tests._util import register_limits

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs" / "property-testing.md"
SMALL = {"max_seq_len": 40, "head_dims": (8, 16, 32)}


def _bytes(name, shape, bq, bkv, **opts) -> int:
    return io_counts(name, shape, bq, bkv, **opts).total_bytes


# ------------------------------------------------------------------- 1. replay == closed form


@given(data=st.data())
def test_replay_equals_closed_form_without_l2(data):
    """Register spills included: the register limit is drawn so that many tilings spill, and
    blocks up to 64 rows, so N < block (one partial block) is drawn too."""
    gpu = data.draw(gpu_specs(l2=False, max_sm_count=4), label="gpu")
    shape = data.draw(attention_shapes(**SMALL), label="shape")
    sched = data.draw(tilings(shape=shape, gpu=gpu, max_block=64), label="schedule")
    gpu = gpu.replace(regs_per_thread_max=data.draw(register_limits(sched), label="registers"))
    res = simulator.simulate(sched, gpu)
    counts = io_counts_of(sched, gpu)
    assert (res.hbm_read_bytes, res.hbm_write_bytes) == (counts.read_bytes, counts.write_bytes)
    assert [t.name for t in res.tensors] == [t.name for t in counts.tensors]
    for got, want in zip(res.tensors, counts.tensors, strict=True):
        assert (got.hbm_read_bytes, got.hbm_write_bytes) == (want.read_bytes, want.write_bytes)


@given(data=st.data())
def test_global_traffic_does_not_depend_on_l2(data):
    gpu = data.draw(gpu_specs(l2=True, max_sm_count=4), label="gpu")
    shape = data.draw(attention_shapes(**SMALL), label="shape")
    sched = data.draw(tilings(shape=shape, gpu=gpu), label="schedule")
    res = simulator.simulate(sched, gpu)
    counts = io_counts_of(sched, gpu)  # spills too, should the drawn tiling spill
    assert (res.global_read_bytes, res.global_write_bytes) == (
        counts.read_bytes,
        counts.write_bytes,
    )
    # an L2 only removes misses; but an atomic add (REDUCE) is done at L2 and reads its line
    # from HBM when absent, so reduced bytes may add HBM reads (docs/model.md, "L2")
    reduced = sched.trace().bytes_by(Op.REDUCE)
    assert res.hbm_read_bytes <= res.global_read_bytes + sum(reduced.values())
    for t in res.tensors:
        assert t.hbm_read_bytes <= t.global_read_bytes + reduced.get(t.name, 0), t.name


# ------------------------------------------------------------------- 2. lower bounds


@given(data=st.data())
def test_exact_bytes_never_below_the_proved_bounds(data):
    shape = data.draw(attention_shapes(**SMALL), label="shape")
    sched = data.draw(tilings(shape=shape), label="schedule")
    gpu = simulator.load_gpu("h200").replace(l2_bytes=0, sm_count=2, smem_per_sm_bytes=2**30)
    gpu = gpu.replace(smem_per_cta_bytes=2**30 - 1024)  # room for every drawn tiling
    res = simulator.simulate(sched, gpu)
    exact = res.global_read_bytes + res.global_write_bytes
    # M: what the schedule actually holds on chip per CTA, replayed from ALLOC/FREE
    m_bytes = max(k.smem_peak_bytes + k.reg_tile_peak_bytes for k in res.kernels)
    assert m_bytes == bounds.on_chip_bytes(sched)
    eb, d = shape.elem_bytes, shape.head_dim
    c = bounds.SCHEDULE_CONSTANTS[sched.name]
    bound = c * shape.batch * shape.heads * bounds.work(shape) * d * d * Fraction(eb * eb, m_bytes)
    assert exact >= bound == bounds.schedule_lower_bound_bytes(sched)
    # compulsory, constant 1, tensor by tensor: every input read and every output written once
    counts = io_counts_of(sched)
    backward = sched.name.endswith("_bwd")
    sizes = {t.name: t.size_bytes for t in sched.tensors}
    for name in ("Q", "K", "V", "dO") if backward else ("Q", "K", "V"):
        assert counts.tensor(name).read_bytes >= sizes[name]
    for name in ("dQ", "dK", "dV") if backward else ("O",):
        assert counts.tensor(name).write_bytes >= sizes[name]
    assert exact >= bounds.compulsory_bytes(shape, backward=backward)


# ------------------------------------------------------------------- 3. monotonicity

ALL_SHAPES = attention_shapes(max_seq_len=64, head_dims=(8, 64, 128))


@st.composite
def block_pairs(draw, n):
    """Two block sizes b1 <= b2 in 1..n."""
    b1 = draw(st.integers(1, n))
    return b1, draw(st.integers(b1, n))


@pytest.mark.parametrize(
    ("name", "axis"),
    [
        ("standard", "q"),
        ("standard", "kv"),
        ("standard_bwd", "q"),
        ("standard_bwd", "kv"),
        ("flash1", "kv"),
        ("flash1_bwd", "kv"),
        ("flash2_bwd", "kv"),
    ],
)
@given(data=st.data())
def test_traffic_non_increasing_in_block(name, axis, data):
    """Standard: (Tc + 2 Tr) or (3 Tc + 2 Tr) passes, each non-increasing in its block. FA1 and
    the backward flash schedules: the Q side travels rv = sum_j (N - rounddown(j Bc, Br)) rows;
    each term and the number of terms shrink as Bc grows, mask or not."""
    shape = data.draw(ALL_SHAPES)
    n = shape.seq_len
    b1, b2 = data.draw(block_pairs(n))
    other = data.draw(st.integers(1, n))
    pair = ((b1, other), (b2, other)) if axis == "q" else ((other, b1), (other, b2))
    assert _bytes(name, shape, *pair[1]) <= _bytes(name, shape, *pair[0])


@pytest.mark.parametrize("name", ["flash1", "flash1_bwd", "flash2", "flash2_bwd"])
@given(data=st.data())
def test_non_causal_flash_depends_on_one_block_only(name, data):
    """Without a mask FA2 forward traffic is a function of Tr, the others of Tc."""
    shape = data.draw(attention_shapes(max_seq_len=64, causal=False))
    n = shape.seq_len
    a, b, c = (data.draw(st.integers(1, n)) for _ in range(3))
    if name == "flash2":
        assert _bytes(name, shape, a, b) == _bytes(name, shape, a, c)
        b1, b2 = sorted((b, c))
        assert _bytes(name, shape, b2, a) <= _bytes(name, shape, b1, a)
    else:
        assert _bytes(name, shape, b, a) == _bytes(name, shape, c, a)


@given(data=st.data())
def test_causal_flash2_non_increasing_when_block_q_multiplies(data):
    """Causal FA2 streams sum_i min(N, roundup(e_i, Bc)) K/V rows: merging Q blocks (Br' a
    multiple of Br) keeps a subset of the block ends, so traffic does not grow."""
    shape = data.draw(attention_shapes(max_seq_len=64, causal=True))
    n = shape.seq_len
    b1 = data.draw(st.integers(1, n))
    b2 = b1 * data.draw(st.integers(1, max(1, n // b1)))
    bkv = data.draw(st.integers(1, n))
    assert _bytes("flash2", shape, b2, bkv) <= _bytes("flash2", shape, b1, bkv)


def test_monotonicity_fails_outside_where_it_is_proved():
    causal = kernels.AttentionShape(1, 1, 10, 16, causal=True)
    # FA2, causal: Br 5 -> 6 with Bc = 1 streams 5 + 10 -> 6 + 10 K/V rows
    assert _bytes("flash2", causal, 6, 1) > _bytes("flash2", causal, 5, 1)
    # FA2, causal: Bc 3 -> 4 with Br = 5 rounds the end of Q block 0 up from 6 to 8 keys
    assert _bytes("flash2", causal, 5, 4) > _bytes("flash2", causal, 5, 3)
    # FA1, causal: Br 5 -> 6 with Bc = 5: key block 1 (k0 = 5) now meets Q rows from 0, not 5
    assert _bytes("flash1", causal, 6, 5) > _bytes("flash1", causal, 5, 5)


def _rule_block(m_elements: int, shape, power_of_two: bool) -> int:
    b = max(1, m_elements // (4 * shape.head_dim))
    if power_of_two:
        b = 1 << (b.bit_length() - 1)
    return min(b, shape.seq_len)


@pytest.mark.parametrize("name", kernels.SCHEDULES)
@given(data=st.data())
def test_traffic_does_not_grow_with_sram_under_the_rule(name, data):
    """B = floor(M / (4d)) for both blocks: more SRAM never costs traffic, except for causal FA2
    (block ends need not nest); rounding B down to a power of two makes them nest. flash_decode
    runs as one split: the split count is a choice that buys parallelism with traffic (its
    heuristic follows the block count), and with one split it is FA2's forward."""
    shape = data.draw(ALL_SHAPES)
    d = shape.head_dim
    m1 = data.draw(st.integers(4 * d, 4 * d * shape.seq_len + 4 * d))
    m2 = m1 + data.draw(st.integers(0, 4 * d * shape.seq_len))
    pow2 = name in ("flash2", "flash_decode") and shape.causal
    opts = {"num_splits": 1} if name == "flash_decode" else {}
    b1, b2 = (_rule_block(m, shape, pow2) for m in (m1, m2))
    assert _bytes(name, shape, b2, b2, **opts) <= _bytes(name, shape, b1, b1, **opts)


def test_plain_rule_can_grow_causal_flash2_traffic():
    shape = kernels.AttentionShape(1, 1, 10, 16, causal=True)
    m_small, m_large = 20 * 16, 24 * 16  # B = 5 -> 6
    b1, b2 = (_rule_block(m, shape, False) for m in (m_small, m_large))
    assert (b1, b2) == (5, 6)
    assert _bytes("flash2", shape, b2, b2) > _bytes("flash2", shape, b1, b1)


# ------------------------------------------------------------------- 4. flash vs standard


@given(data=st.data())
def test_flash2_never_moves_more_than_standard_with_the_same_blocks(data):
    """Per (b, h), with p softmax passes: standard - flash2 >= (3 + p) N^2 eb - acc N
    + (Tc - 1) N d eb + 2 (Tr N - cv) d eb > 0, since acc <= 2 eb and cv <= Tr N."""
    shape = data.draw(ALL_SHAPES)
    n = shape.seq_len
    bq, bkv = data.draw(st.integers(1, n)), data.draw(st.integers(1, n))
    passes = data.draw(st.sampled_from([1, 2]))
    assert _bytes("flash2", shape, bq, bkv) <= _bytes(
        "standard", shape, bq, bkv, softmax_passes=passes
    )


@pytest.mark.parametrize("name", ["flash1", "flash2", "flash1_bwd", "flash2_bwd"])
@given(data=st.data())
def test_flash_beats_best_standard_iff_block_reaches_crossover(name, data):
    shape = data.draw(attention_shapes(max_seq_len=48, head_dims=(8, 64, 128), causal=False))
    passes = data.draw(st.sampled_from([1, 2]))
    n = shape.seq_len
    std = "standard_bwd" if name.endswith("_bwd") else "standard"
    best = _bytes(std, shape, n, n, softmax_passes=passes)
    cross = bounds.standard_crossover(name, shape, softmax_passes=passes)
    for block in range(1, n + 1):  # both sides of the threshold, every block
        bq, bkv = (block, n) if name == "flash2" else (n, block)
        wins = _bytes(name, shape, bq, bkv) <= best
        assert wins == (cross is not None and block >= cross), block


# ------------------------------------------------------------------- 5. the linear regime


@given(shape=ALL_SHAPES, m_per_nd=st.fractions(Fraction(1, 64), 4))
def test_flash2_linear_in_n_iff_kv_fits(shape, m_per_nd):
    """M >= N d: the rule's B >= floor(N/4), so Tr <= 7 and FA2 moves at most (2 + 2*7) N d
    elements per head plus its logsumexp: O(N d). 4d <= M < N d: B = floor(M/(4d)) < N/4, so
    Tr > 4 and K, V are streamed N / B >= 4 N d / M times: Theta(N^2 d^2 / M). (M < 4d leaves
    the rule no block; B = 1 then.)"""
    n, d = shape.seq_len, shape.head_dim
    m = max(4 * d, math.floor(m_per_nd * n * d))
    regime = bounds.io_regime(simulator.load_gpu("h200"), shape, m_elements=m)
    exact = dict(regime.exact_bytes)["flash2"]
    bh = shape.batch * shape.heads
    if regime.linear_in_n:
        assert regime.kv_passes <= 7
        assert exact <= bh * (16 * n * d * shape.elem_bytes + n * shape.acc_bytes)
    else:
        assert regime.kv_passes > 4
        assert regime.kv_passes >= 4 * n * d / m


# ------------------------------------------------------------------- 6. the docs run


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def test_property_testing_doc_examples_run():
    blocks = _python_blocks(DOCS.read_text())
    assert len(blocks) >= 3
    namespace: dict = {"__name__": "docs_property_testing"}
    for block in blocks:
        exec(compile(block, str(DOCS), "exec"), namespace)
    tests = [v for k, v in namespace.items() if k.startswith("test_") and callable(v)]
    assert tests, "the doc defines test functions; each must run"
    for test in tests:
        test()
