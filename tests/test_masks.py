"""Masks beyond full and causal attention: sliding windows, packed segments, a K/V length of
its own (decoding, chunked prefill), block masks (block-sparse attention), through every
schedule.

Independent computations that must agree:
- the mask's rows (``kernels.mask.key_ranges``) against the definitions, element by element;
- its block view (visited ranges, full blocks) against brute force over every element;
- every schedule's numeric executor against the dense float64 reference with the same mask;
- the executor's own trace against the jitted tracer's, event for event;
- the closed-form IO, FLOPs and bounds against the trace and the simulator.
"""

import dataclasses
import itertools
import re

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from flashio import kernels, simulator
from flashio.analysis.closed_form.bounds import (
    compulsory_bytes,
    schedule_lower_bound_bytes,
    work,
)
from flashio.analysis.closed_form.flops import matmul_flops
from flashio.analysis.closed_form.io import block_sums, io_counts_of
from flashio.analysis.strategies import tilings, variant_shapes
from flashio.kernels import flash2, mask
from flashio.kernels._record import Recorder
from flashio.kernels.block_mask import parse_block_mask
from flashio.simulator import Op
from flashio.simulator.errors import ShapeError
from tests._util import trace_traffic

A = kernels.AttentionShape
NO_L2 = simulator.load_gpu("h200").replace(l2_bytes=0, sm_count=4)


def _dense(shape) -> np.ndarray:
    """Which keys each query sees, from the definitions (docs/io.md, "Masks")."""
    n, nk = shape.seq_len, shape.n_kv
    i = np.arange(n)[:, None]
    j = np.arange(nk)[None, :]
    pos = i + nk - n  # queries aligned to the end of the keys
    ok = np.ones((n, nk), bool)
    if shape.causal:
        ok &= j <= pos
    if shape.window is not None:
        left, right = (shape.window - 1, 0) if shape.causal else shape.window
        ok &= (j >= pos - left) & (j <= pos + right)
    if shape.segments is not None:
        seg = np.repeat(np.arange(len(shape.segments)), shape.segments)
        ok &= seg[:, None] == seg[None, :]
    return ok & _kept(shape)


def _kept(shape) -> np.ndarray:
    """The block mask element by element (all True without one)."""
    bm = shape.block_mask
    if bm is None:
        return np.ones((shape.seq_len, shape.n_kv), bool)
    grid = bm.array
    return grid[np.arange(shape.seq_len) // bm.block_q][:, np.arange(shape.n_kv) // bm.block_kv]


BM = kernels.BlockMask.from_array


SHAPES = [
    A(1, 2, 11, 4, "fp64", causal=True, window=3),
    A(1, 2, 11, 4, "fp64", window=(2, 1)),
    A(1, 2, 11, 4, "fp64", window=(0, 0)),
    A(1, 2, 11, 4, "fp64", causal=True, window=40),  # a window larger than N
    A(1, 2, 11, 4, "fp64", causal=True, segments=(3, 1, 7)),
    A(1, 2, 11, 4, "fp64", segments=(1,) * 11),  # one-token segments
    A(1, 2, 11, 4, "fp64", causal=True, window=2, segments=(5, 6)),
    A(1, 2, 11, 4, "fp64", causal=True, kv_seq_len=5),  # first 6 queries see no key
    A(1, 2, 3, 4, "fp64", causal=True, kv_seq_len=17),  # chunked prefill
    A(1, 4, 1, 4, "fp64", kv_seq_len=17, kv_heads=2),  # decoding, GQA
    A(1, 2, 1, 4, "fp64", causal=True, kv_seq_len=17, window=4),  # decoding, windowed cache
    A(2, 2, 13, 4, "fp64", window=(3, 20), kv_seq_len=9),
    A(1, 2, 11, 4, "fp64", block_mask=BM([[1, 0, 1], [0, 0, 1]], 8, 4)),  # ragged blocks
    A(1, 2, 11, 4, "fp64", causal=True, block_mask=BM([[0, 1], [1, 1], [1, 0]], 4, 8)),
    A(1, 2, 11, 4, "fp64", block_mask=BM([[0]], 20, 20)),  # nothing kept
    A(1, 2, 11, 4, "fp64", causal=True, window=4, block_mask=BM(np.eye(11), 1, 1)),
    A(2, 4, 9, 4, "fp64", kv_heads=2, kv_seq_len=14, block_mask=BM([[1, 0, 1, 1]], 16, 4)),
]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_key_ranges_match_the_definitions(shape):
    kmin, kmax = mask.key_ranges(shape)
    cols = np.arange(shape.n_kv)[None, :]
    envelope = _dense(dataclasses.replace(shape, block_mask=None))
    assert np.array_equal((cols >= kmin[:, None]) & (cols <= kmax[:, None]), envelope)
    assert np.array_equal(mask.allowed(shape, 0, shape.seq_len, 0, shape.n_kv), _dense(shape))
    assert mask.pair_count(shape) == _dense(shape).sum()
    assert shape.forward_flops() == 4 * shape.head_dim * shape.batch * shape.heads * (
        _dense(shape).sum()
    )


@given(
    shape=variant_shapes(max_seq_len=24, max_kv_seq_len=40),
    br=st.integers(1, 9),
    bc=st.integers(1, 9),
)
@settings(max_examples=150)
def test_block_view_by_brute_force(shape, br, bc):
    """Visited ranges both ways and full blocks, against every element of the dense mask: the
    rows' intervals (the envelope, without the block mask) and the tiles the schedules visit
    (the envelope reaches them and a kept mask block overlaps them; full when every element
    of the tile is allowed)."""
    ok, env = _dense(shape), _dense(dataclasses.replace(shape, block_mask=None))
    n, nk = ok.shape
    bm = shape.block_mask
    gq, gk = (bm.block_q, bm.block_kv) if bm is not None else (n, nk)
    kmin, kmax = mask.key_ranges(shape)
    keep, mq, mk = mask.keep_table(shape)
    lo, hi, kv_seen = mask.block_ranges(shape, br, bc)
    states = mask.tile_states(shape, br, bc)
    visited = np.zeros(states.shape, bool)
    for i, j in itertools.product(range(-(-n // br)), range(-(-nk // bc))):
        r0, r1, c0, c1 = i * br, min(n, (i + 1) * br), j * bc, min(nk, (j + 1) * bc)
        tile = env[r0:r1, c0:c1]
        assert (lo[i] <= j < hi[i]) == tile.any()
        qlo, qhi = mask.q_block_range(kmin, kmax, c0, c1, br)
        assert (qlo <= i < qhi) == tile.any()
        assert mask.block_full(kmin, kmax, r0, r1, c0, c1) == tile.all()
        assert tuple(mask.kv_block_range(kmin, kmax, r0, r1, bc)) == (lo[i], hi[i])
        overlap = bm is None or bool(
            bm.array[r0 // gq : (r1 - 1) // gq + 1, c0 // gk : (c1 - 1) // gk + 1].any()
        )
        visited[i, j] = tile.any() and overlap
        assert (states[i, j] > 0) == visited[i, j]
        assert (states[i, j] == mask.FULL) == ok[r0:r1, c0:c1].all()
    for i in range(states.shape[0]):
        r0, r1 = i * br, min(n, (i + 1) * br)
        row = np.nonzero(visited[i])[0]
        want = (row[0], row[-1] + 1) if len(row) else (0, 0)
        got = mask.kv_tiles(kmin, kmax, keep, mq, mk, r0, r1, bc, nk)
        assert tuple(got) == want or (len(row) == 0 and got[0] == got[1])
    for j in range(states.shape[1]):
        c0, c1 = j * bc, min(nk, (j + 1) * bc)
        assert kv_seen[j] == env[:, c0:c1].any()
        col = np.nonzero(visited[:, j])[0]
        want = (col[0], col[-1] + 1) if len(col) else (0, 0)
        got = mask.q_tiles(kmin, kmax, keep, mq, mk, c0, c1, br, n)
        assert tuple(got) == want or (len(col) == 0 and got[0] == got[1])
    tiles = [
        (visited[i, j], ok[i * br : (i + 1) * br, j * bc : (j + 1) * bc])
        for i, j in itertools.product(range(-(-n // br)), range(-(-nk // bc)))
    ]
    bs = block_sums(shape, br, bc)
    assert bs.pairs == visited.sum() and bs.full_pairs == sum(t.all() for _, t in tiles)
    assert bs.area == sum(t.size for v, t in tiles if v)
    q_seen, kv_seen_keys = mask.seen_counts(shape)
    assert q_seen == ok.any(axis=1).sum() and kv_seen_keys == ok.any(axis=0).sum()


def _run(sched, rng):
    sh = sched.shape
    q = rng.standard_normal((sh.batch, sh.heads, sh.seq_len, sh.head_dim))
    k, v = (rng.standard_normal((sh.batch, sh.n_kv_heads, sh.n_kv, sh.head_dim)) for _ in "kv")
    if sched.name.endswith("_bwd"):
        do = rng.standard_normal(q.shape)
        got, trace = sched.execute(q, k, v, do)
        want = kernels.attention_backward(q, k, v, do, mask=sh)
    else:
        got, trace = sched.execute(q, k, v)
        want = (kernels.attention_forward(q, k, v, mask=sh)[0],)
        got = (got,)
    return got, want, trace


@pytest.mark.parametrize("name", kernels.SCHEDULES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_executor_exact_and_trace_is_the_tracers(name, shape):
    """fp64 executors within 1e-12 of the dense float64 reference (rounding of a few hundred
    operations at most); their logged events are the tracer's, event for event."""
    if name == "flash_decode" and shape.block_mask is not None:
        pytest.skip("flash_decode takes no block mask")
    rng = np.random.default_rng(7)
    for br, bc in ((3, 4), (4, 3), (16, 16)):
        sched = kernels.schedule(name, shape, br, bc)
        got, want, trace = _run(sched, rng)
        for g, w in zip(got, want, strict=True):
            scale = max(float(np.abs(w).max()), 1.0)
            assert np.abs(g - w).max() <= 1e-12 * scale
        assert np.array_equal(trace.events, sched.trace().events)


def test_rows_that_see_no_key():
    """kv_seq_len < seq_len, causal: the first queries see no key; O = 0 and L = +inf there,
    no NaN anywhere, and their gradients are zero."""
    shape = A(1, 1, 9, 4, "fp64", causal=True, kv_seq_len=3)
    assert (mask.key_ranges(shape)[1][:6] < 0).all()
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 1, 9, 4))
    k, v = rng.standard_normal((1, 1, 3, 4)), rng.standard_normal((1, 1, 3, 4))
    sched = kernels.schedule("flash2", shape, 4, 2)
    o, lse = flash2.execute(sched, q, k, v, None, Recorder())
    assert np.all(o[0, 0, :6] == 0) and np.all(np.isposinf(lse[0, 0, :6]))
    assert np.isfinite(lse[0, 0, 6:]).all()
    for name in ("flash1_bwd", "flash2_bwd", "standard_bwd"):
        dq, _, _ = kernels.schedule(name, shape, 4, 2).execute(q, k, v, np.ones_like(q))[0]
        assert np.all(dq[0, 0, :6] == 0) and np.isfinite(dq).all()


@pytest.mark.parametrize("name", kernels.SCHEDULES)
@given(data=st.data())
@example(data=None)
def test_closed_forms_equal_trace_and_simulator(name, data):
    """Per tensor, the closed-form reads and writes equal the trace's; the matmul FLOPs its
    MMA events; the simulator without an L2 moves exactly the closed form (spills included);
    the schedule's lower bound holds."""
    if data is None:  # a decoding step over a windowed cache
        sched = kernels.schedule(name, A(1, 4, 1, 16, "fp16", True, 2, 64, 24), 16, 8, 4)
    else:
        shape = data.draw(variant_shapes(max_seq_len=40, head_dims=(8, 16)))
        assume(name != "flash_decode" or shape.block_mask is None)
        sched = data.draw(tilings(shape=shape, names=(name,)))
    counts = io_counts_of(sched)
    assert {t.name: (t.read_bytes, t.write_bytes) for t in counts.tensors} == trace_traffic(sched)
    tr = sched.trace()
    mma = tr.events["flops"][tr.events["op"] == int(Op.MMA)].sum()
    assert matmul_flops(sched) == mma
    res = simulator.simulate(sched, NO_L2)
    assert res.global_read_bytes + res.global_write_bytes == io_counts_of(sched, NO_L2).total_bytes
    assert counts.total_bytes >= schedule_lower_bound_bytes(sched)


@given(shape=variant_shapes(variants=("window",), max_seq_len=40, causal=True), data=st.data())
def test_a_window_never_moves_more_than_full_attention(shape, data):
    """Same tiling, the window removed: every flash schedule moves at least as many bytes."""
    full = kernels.AttentionShape(**{k: v for k, v in shape.to_dict().items() if k != "window"})
    for name in ("flash1", "flash2", "flash1_bwd", "flash2_bwd"):
        sched = data.draw(tilings(shape=shape, names=(name,)))
        wide = kernels.schedule(name, full, sched.block_q, sched.block_kv, sched.warps)
        assert io_counts_of(sched).total_bytes <= io_counts_of(wide).total_bytes


@pytest.mark.parametrize("name", ("flash2", "flash2_bwd", "flash1", "flash1_bwd"))
def test_a_fixed_window_moves_bytes_linear_in_n(name):
    """With the window W fixed and N a multiple of the blocks, each further block of queries
    adds the same bytes: the traffic is affine in N (the first window's blocks aside)."""
    w, b = 256, 64
    sizes = [w * k for k in (4, 5, 6, 7)]
    total = [
        io_counts_of(
            kernels.schedule(name, A(1, 2, n, 64, "fp16", True, window=w), b, b)
        ).total_bytes
        for n in sizes
    ]
    steps = np.diff(total)
    assert (steps == steps[0]).all() and steps[0] > 0


@given(
    cache=st.integers(1, 5000),
    heads=st.sampled_from([(8, 8), (8, 2), (32, 8)]),
    block_kv=st.sampled_from([32, 64, 128, 256]),
)
def test_decoding_reads_at_least_the_kv_cache(cache, heads, block_kv):
    """One query against a cache of N_kv keys: a flash forward reads every key and value of the
    cache at least once, and compulsory_bytes says so."""
    h, kh = heads
    shape = A(2, h, 1, 128, "bf16", kv_heads=kh, kv_seq_len=cache)
    kv_cache = 2 * 2 * kh * cache * 128 * 2
    assert compulsory_bytes(shape) >= kv_cache
    for name in ("flash1", "flash2"):
        sched = kernels.schedule(name, shape, 16, block_kv)
        assert io_counts_of(sched).tensor("K").read_bytes * 2 >= kv_cache


def test_block_sums_without_a_mask_are_the_old_closed_form():
    shape = A(1, 1, 100, 16, kv_seq_len=70)
    bs = block_sums(shape, 32, 16)
    assert (bs.row_visits, bs.col_visits, bs.area, bs.pairs) == (5 * 100, 4 * 70, 7000, 20)
    assert (bs.q_rows, bs.kv_rows, bs.kv_blocks) == (100, 70, 5)
    assert work(shape) == 7000


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"window": 4}, "without causal=True"),
        ({"window": (3, 0), "causal": True}, "a causal window is one int"),
        ({"window": 0, "causal": True}, "positive integer"),
        ({"window": (-1, 2)}, ">= 0"),
        ({"window": "wide"}, "an int"),
        ({"segments": (3, 4)}, "sum to 7, not seq_len=8"),
        ({"segments": ()}, "non-empty"),
        ({"segments": (8,), "kv_seq_len": 9}, "needs kv_seq_len equal"),
        ({"kv_seq_len": 0}, "positive integer"),
    ],
)
def test_bad_variants_are_refused_with_a_reason(fields, message):
    with pytest.raises(ShapeError, match=message):
        A(1, 1, 8, 16, **fields)


def test_to_dict_round_trips_and_omits_unset_variants():
    plain = A(1, 2, 8, 16)
    assert set(plain.to_dict()) == {"batch", "heads", "seq_len", "head_dim", "dtype", "causal",
                                    "kv_heads"}  # fmt: skip
    for shape in SHAPES:
        assert A(**shape.to_dict()) == shape


def test_block_mask_constructors_and_round_trip():
    bm = kernels.BlockMask.random(1000, 0.3, block_q=64, block_kv=128, seed=5)
    assert bm.array.shape == (16, 8) and bm.array.sum() == round(0.3 * 128)
    assert bm == kernels.BlockMask.random(1000, 0.3, block_q=64, block_kv=128, seed=5)
    assert bm != kernels.BlockMask.random(1000, 0.3, block_q=64, block_kv=128, seed=6)
    assert kernels.BlockMask.from_dict(bm.to_dict()) == bm
    shape = A(1, 2, 1000, 8, block_mask=bm)
    assert A(**shape.to_dict()) == shape and "29.7% of 16x8 kept" in shape.describe()
    local = kernels.BlockMask.local(512, 2, global_blocks=1, block_q=128, block_kv=128).array
    assert local.tolist() == [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 1, 1]]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: A(1, 1, 300, 8, block_mask=kernels.BlockMask.random(200, 0.5)), "need 3 x 3"),
        (lambda: kernels.BlockMask.random(100, 1.5), "density must be in [0, 1]"),
        (lambda: kernels.BlockMask.from_array(np.ones(4)), "non-empty 2-D array"),
        (lambda: A(1, 1, 9, 8, block_mask="x"), "must be a kernels.BlockMask"),
        (lambda: kernels.BlockMask.from_dict({"rows": ["1"]}), "needs block_q, block_kv"),
        (lambda: parse_block_mask("random:x", 100), "give random:DENSITY"),
        (lambda: parse_block_mask("local:2", 100, 300), "kv_seq_len equal to seq_len"),
    ],
)
def test_bad_block_masks_are_refused_with_a_reason(make, message):
    with pytest.raises(ShapeError, match=re.escape(message)):
        make()


def test_flash_decode_refuses_a_block_mask():
    shape = A(1, 2, 1, 8, kv_seq_len=300, block_mask=kernels.BlockMask.random(1, 0.5,
              kv_seq_len=300, block_q=1, block_kv=64))  # fmt: skip
    with pytest.raises(kernels.TilingError, match="no block mask"):
        kernels.schedule("flash_decode", shape)


@pytest.mark.parametrize("name", ("flash2", "flash2_bwd", "flash1", "flash1_bwd"))
@given(shape=variant_shapes(variants=("block_mask",), max_seq_len=40), data=st.data())
def test_a_block_mask_never_moves_more_than_its_shape_without_it(name, shape, data):
    """Dropping blocks only drops visits: a block mask never adds global bytes or FLOPs."""
    sched = data.draw(tilings(shape=shape, names=(name,)))
    bare = kernels.schedule(name, dataclasses.replace(shape, block_mask=None), sched.block_q,
                            sched.block_kv, sched.warps)  # fmt: skip
    assert io_counts_of(sched).total_bytes <= io_counts_of(bare).total_bytes
    assert matmul_flops(sched) <= matmul_flops(bare)
