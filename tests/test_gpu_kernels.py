"""The CUDA kernels (kernels/cuda, run by kernels.gpu) compute attention under the
flash-attention error rule, write every output element, and launch exactly what the schedule
describes. Every test needs a GPU visible to CuPy (tests/conftest.py skips them otherwise)."""

import numpy as np
import pytest

from flashio import kernels
from flashio.kernels import gpu
from flashio.kernels._numerics import to_dtype
from tests._accuracy import quantum
from tests._util import random_inputs

pytestmark = pytest.mark.gpu

# (head_dim, block_q, block_kv, warps): one tiling per head dim for each kernel family
FWD_TILES = [(64, 64, 64, 4), (128, 128, 64, 8)]
BWD_TILES = [(64, 64, 64, 4), (128, 64, 64, 4)]
# ragged N (not a multiple of any block); 333 is not a multiple of 8 either, so standard
# attention's S and P rows are not 16-byte aligned there
CASES = [(1000, False, None), (333, True, 2)]  # (seq_len, causal, kv_heads)
# partial tiles: a decoding step (N = 1) and N below every block, the rows past N predicated
PARTIAL = [(1, False, None), (1, True, 2), (40, True, None)]


def _fresh_seed() -> int:
    """A new seed per check (fresh inputs every run), reported on failure."""
    return int(np.random.SeedSequence().entropy % 2**32)


def _check_rule(name, got, exact, same_prec, dtype, seed):
    """flash-attention rule (tests/_accuracy.py): max error vs fp64 at most twice that of
    the dense reference in the same precision, plus twice the dtype's rounding step."""
    assert np.all(np.isfinite(got)), f"{name}: unwritten (NaN-poisoned) or non-finite, seed {seed}"
    exact = np.asarray(exact, np.float64)
    ref_err = np.abs(np.asarray(same_prec, np.float64) - exact).max()
    err = np.abs(got.astype(np.float64) - exact).max()
    floor = quantum(exact, dtype)
    assert err <= 2 * ref_err + floor, (
        f"{name}: {err:.3e} > 2 * {ref_err:.3e} + {floor:.1e} (seed {seed})"
    )


def _shape(d, n, causal, kv_heads, dtype, batch=2, heads=4):
    return kernels.AttentionShape(batch, heads, n, d, dtype, causal=causal, kv_heads=kv_heads)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("tiles", FWD_TILES)
@pytest.mark.parametrize("case", CASES + PARTIAL)
def test_flash2_forward(dtype, tiles, case):
    (d, bq, bkv, w), (n, causal, kvh) = tiles, case
    sched = kernels.schedule("flash2", _shape(d, n, causal, kvh, dtype), bq, bkv, w)
    seed = _fresh_seed()
    q, k, v = random_inputs(sched.shape, seed=seed)
    o, lse = gpu.run_schedule(sched, q, k, v)
    check_forward(o, lse, (q, k, v), causal, dtype, seed)


def check_forward(o, lse, qkv, causal, dtype, seed):
    """O under the flash-attention rule, and L = m + log(l) in fp32 from the same rounded
    inputs: only fp32 arithmetic separates it from the fp64 value (|L| ~ 10 here, fp32 steps
    ~ 1e-6; ex2.approx adds 2 ulp per term)."""
    exact, m, l, _ = kernels.attention_forward(*qkv, causal=causal)
    same = kernels.attention_forward(*qkv, causal=causal, dtype=dtype)[0]
    _check_rule("O", o, exact, same, dtype, seed)
    assert np.all(np.isfinite(lse)), f"L: unwritten, seed {seed}"
    np.testing.assert_allclose(lse, m + np.log(l), rtol=0, atol=1e-4, err_msg=f"seed {seed}")


# masks beyond causal (kernels/mask.py) in the MASKED builds of flash2_fwd.cu and flash2_bwd.cu:
# windows, packed documents, a K/V length of its own (chunked prefill, decoding, queries that
# see no key)
MASKS = [
    {"seq_len": 1000, "causal": True, "window": 200},
    {"seq_len": 333, "window": (40, 7), "kv_heads": 2},
    {"seq_len": 900, "causal": True, "segments": (1, 300, 77, 522)},
    {"seq_len": 130, "causal": True, "kv_seq_len": 1111},
    {"seq_len": 1, "kv_seq_len": 2000, "kv_heads": 2},
    {"seq_len": 300, "causal": True, "kv_seq_len": 120, "window": 50},
    {"seq_len": 100, "causal": True, "kv_seq_len": 1000, "window": 64},  # keys no query sees
]


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("tiles", FWD_TILES)
@pytest.mark.parametrize("fields", MASKS, ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items()))
def test_flash2_forward_masked(dtype, tiles, fields):
    """The error rule against the dense reference with the same mask; a query that sees no
    key gets O = 0 and L = +inf, as the schedule's executor does."""
    d, bq, bkv, w = tiles
    shape = kernels.AttentionShape(**{"batch": 2, "heads": 4, "head_dim": d, "dtype": dtype,
                                      **fields})  # fmt: skip
    sched = kernels.schedule("flash2", shape, bq, bkv, w)
    assert gpu.tiling_errors(sched) == [] and dict(gpu.defines(sched))["MASKED"] == 1
    _check_masked_forward(sched)


def _check_masked_forward(sched, seed=None, shared_keys=0):
    """Run a forward (flash2, flash_decode) on fresh inputs (``seed``, else a fresh one; the
    first ``shared_keys`` keys and values the same in every sequence, as pages sequences
    share hold them): the error rule on O against the dense reference with the shape's mask;
    L = m + log(l) within fp32 rounding where a row sees a key, +inf where it sees none."""
    shape, dtype, seed = sched.shape, sched.shape.dtype, seed or _fresh_seed()
    q, k, v = random_inputs(shape, seed=seed)
    for x in (k, v):
        x[:, :, :shared_keys] = x[:1, :, :shared_keys]
    o, lse = gpu.run_schedule(sched, q, k, v)
    exact, m, l, _ = kernels.attention_forward(q, k, v, mask=shape)
    same = kernels.attention_forward(q, k, v, mask=shape, dtype=dtype)[0]
    _check_rule("O", o, exact, same, dtype, seed)
    seen = l > 0
    np.testing.assert_allclose(lse[seen], (m + np.log(np.where(seen, l, 1)))[seen], rtol=0,
                               atol=1e-4, err_msg=f"seed {seed}")  # fmt: skip
    assert np.all(np.isposinf(lse[~seen])), f"L of rows that see no key, seed {seed}"


@pytest.mark.parametrize("name", ["flash2", "flash2_bwd", "standard"])
@pytest.mark.parametrize("passes", [1, 2])
def test_decoding_step_with_128_row_tiles(name, passes):
    """N = 1 with 128 x 128 tiles (one query row, as a decoding step): every output is written
    and obeys the error rule; the launch is the schedule's (1 CTA per (b, h) and block)."""
    if name != "standard" and passes == 2:
        pytest.skip("softmax passes are standard attention's option")
    shape = _shape(64, 1, False, None, "bf16", batch=2, heads=4)
    opts = {"softmax_passes": passes} if name == "standard" else {}
    sched = kernels.schedule(name, shape, 128, 128, 4 if name == "flash2_bwd" else 8, **opts)
    assert gpu.tiling_errors(sched) == []
    assert [ln.grid for ln in gpu.launches(sched)] == [k.ctas for k in sched.kernels]
    seed = _fresh_seed()
    if name == "standard":
        _check_standard(sched, "bf16")
        return
    arrays = random_inputs(shape, seed=seed, backward=name == "flash2_bwd")
    got = gpu.run_schedule(sched, *arrays)
    if name == "flash2":
        exact = kernels.attention_forward(*arrays)[0]
        same = kernels.attention_forward(*arrays, dtype="bf16")[0]
        _check_rule("O", got[0], exact, same, "bf16", seed)
        return
    exact = kernels.attention_backward(*arrays)
    same = kernels.attention_backward(*arrays, dtype="bf16")
    for nm, g, e, p in zip(("dQ", "dK", "dV"), got, exact, same, strict=True):
        _check_rule(nm, g, e, p, "bf16", seed)


def test_flash2_forward_deterministic_and_takes_cupy_arrays():
    """Same inputs, same bits (a race would move them); cupy inputs give the numpy result."""
    import cupy

    sched = kernels.schedule("flash2", _shape(64, 777, True, None, "fp16"), 64, 64, 4)
    q, k, v = random_inputs(sched.shape, seed=_fresh_seed())
    first = gpu.run_schedule(sched, q, k, v)
    again = gpu.run_schedule(sched, *(cupy.asarray(x) for x in (q, k, v)))
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("tiles", FWD_TILES)
@pytest.mark.parametrize("case", CASES + PARTIAL)
def test_standard_forward(dtype, tiles, case):
    (d, bq, bkv, w), (n, causal, kvh) = tiles, case
    sched = kernels.schedule("standard", _shape(d, n, causal, kvh, dtype, batch=1), bq, bkv, w)
    _check_standard(sched, dtype)


@pytest.mark.parametrize("passes", [1, 2])
def test_standard_softmax_passes(passes):
    """Both softmax variants, with more rows per CTA than warps (each warp takes several)."""
    shape = _shape(64, 333, True, None, "bf16", batch=1, heads=2)
    sched = kernels.schedule("standard", shape, 64, 64, 4, softmax_passes=passes, softmax_rows=6)
    _check_standard(sched, "bf16")


def _check_standard(sched, dtype):
    seed = _fresh_seed()
    q, k, v = random_inputs(sched.shape, seed=seed)
    causal = sched.shape.causal
    o, p, s = gpu.run_schedule(sched, q, k, v)
    exact_o, _, _, exact_p = kernels.attention_forward(q, k, v, causal=causal)
    same_o, _, _, same_p = kernels.attention_forward(q, k, v, causal=causal, dtype=dtype)
    kk = np.repeat(k, sched.shape.group, axis=1)
    exact_s = (q.astype(np.float64) @ np.swapaxes(kk, -1, -2)) * sched.shape.scale
    prod = q.astype(np.float32) @ np.swapaxes(kk.astype(np.float32), -1, -2)
    same_s = to_dtype(prod * np.float32(sched.shape.scale), dtype)
    _check_rule("S", s, exact_s, same_s, dtype, seed)
    _check_rule("P", p, exact_p, same_p, dtype, seed)
    _check_rule("O", o, exact_o, same_o, dtype, seed)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("tiles", BWD_TILES)
@pytest.mark.parametrize("case", [(517, False, None), (333, True, 2), *PARTIAL])
def test_flash2_backward(dtype, tiles, case):
    (d, bq, bkv, w), (n, causal, kvh) = tiles, case
    sched = kernels.schedule("flash2_bwd", _shape(d, n, causal, kvh, dtype, batch=1), bq, bkv, w)
    check_backward(sched)


def check_backward(sched):
    """Run ``sched`` (a backward) on fresh inputs: dQ, dK and dV under the error rule against
    the float64 reference and the same-precision one."""
    dtype, causal = sched.shape.dtype, sched.shape.causal
    seed = _fresh_seed()
    arrays = random_inputs(sched.shape, seed=seed, backward=True)
    got = gpu.run_schedule(sched, *arrays)
    exact = kernels.attention_backward(*arrays, causal=causal)
    same = kernels.attention_backward(*arrays, causal=causal, dtype=dtype)
    for name, g, e, p in zip(("dQ", "dK", "dV"), got, exact, same, strict=True):
        _check_rule(name, g, e, p, dtype, seed)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("tiles", BWD_TILES)
@pytest.mark.parametrize("fields", MASKS, ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items()))
def test_flash2_backward_masked(dtype, tiles, fields):
    """flash2_bwd.cu's MASKED build against the dense masked reference: the error rule on
    dQ, dK and dV; a query that sees no key gets dQ = 0, a key no query sees dK = dV = 0."""
    d, bq, bkv, w = tiles
    shape = kernels.AttentionShape(**{"batch": 2, "heads": 4, "head_dim": d, "dtype": dtype,
                                      **fields})  # fmt: skip
    sched = kernels.schedule("flash2_bwd", shape, bq, bkv, w)
    assert gpu.tiling_errors(sched) == [] and dict(gpu.defines(sched))["MASKED"] == 1
    _check_masked_backward(sched)


def _check_masked_backward(sched):
    """Run a masked flash2_bwd on fresh inputs: the error rule on dQ, dK and dV against the
    dense reference with the shape's mask; zero gradients for rows that see no key and keys
    no row sees."""
    shape, seed = sched.shape, _fresh_seed()
    arrays = random_inputs(shape, seed=seed, backward=True)
    got = gpu.run_schedule(sched, *arrays)
    exact = kernels.attention_backward(*arrays, mask=shape)
    same = kernels.attention_backward(*arrays, mask=shape, dtype=shape.dtype)
    for name, g, e, p in zip(("dQ", "dK", "dV"), got, exact, same, strict=True):
        _check_rule(name, g, e, p, shape.dtype, seed)
    ok = kernels.mask.allowed(shape, 0, shape.seq_len, 0, shape.n_kv)
    assert np.all(got[0][:, :, ~ok.any(axis=1)] == 0), f"dQ of rows that see no key, seed {seed}"
    for g in got[1:]:
        assert np.all(g[:, :, ~ok.any(axis=0)] == 0), f"dK, dV of keys no row sees, seed {seed}"


# block masks (the BLOCK_SPARSE builds), 128 x 128 blocks over the tiles of FWD_TILES and
# BWD_TILES: random blocks over ragged N, local and global blocks with causal, keys of their
# own length, and a query block and a key block the mask drops entirely
def _block_sparse_shape(case: int, d: int, dtype: str) -> kernels.AttentionShape:
    bm = kernels.BlockMask
    fields = [
        {"seq_len": 1000, "block_mask": bm.random(1000, 0.3, seed=1)},
        {"seq_len": 900, "causal": True, "block_mask": bm.local(900, 2, global_blocks=1)},
        {"seq_len": 700, "kv_seq_len": 1000, "causal": True, "kv_heads": 2,
         "block_mask": bm.random(700, 0.5, kv_seq_len=1000, seed=2)},
        {"seq_len": 500, "block_mask": bm.from_array([[1, 0, 1, 1], [0, 0, 0, 0], [1, 0, 0, 1],
                                                      [1, 0, 1, 1]])},
    ][case]  # fmt: skip
    return kernels.AttentionShape(**{"batch": 2, "heads": 4, "head_dim": d, "dtype": dtype,
                                     **fields})  # fmt: skip


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("tiles", FWD_TILES)
@pytest.mark.parametrize("case", range(4))
def test_flash2_forward_block_sparse(dtype, tiles, case):
    """The BLOCK_SPARSE forward against the dense reference with the block mask: the error
    rule on O; rows the mask leaves without a key get O = 0 and L = +inf."""
    d, bq, bkv, w = tiles
    sched = kernels.schedule("flash2", _block_sparse_shape(case, d, dtype), bq, bkv, w)
    assert gpu.tiling_errors(sched) == [] and dict(gpu.defines(sched))["BLOCK_SPARSE"] == 1
    _check_masked_forward(sched)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("tiles", BWD_TILES)
@pytest.mark.parametrize("case", range(4))
def test_flash2_backward_block_sparse(dtype, tiles, case):
    """The BLOCK_SPARSE backward: the error rule on dQ, dK and dV; zero gradients for the
    rows and keys the mask leaves alone."""
    d, bq, bkv, w = tiles
    shape = _block_sparse_shape(case, d, dtype)
    sched = kernels.schedule("flash2_bwd", shape, bq, bkv, w)
    assert gpu.tiling_errors(sched) == [] and dict(gpu.defines(sched))["BLOCK_SPARSE"] == 1
    _check_masked_backward(sched)


def test_block_masks_must_hold_whole_tiles():
    shape = kernels.AttentionShape(1, 2, 256, 64, "bf16", block_mask=kernels.BlockMask.random(
        256, 0.5, block_q=64, block_kv=64))  # fmt: skip
    errs = gpu.tiling_errors(kernels.schedule("flash2", shape, 128, 64, 8))
    assert any("whole 128 x 64 tiles" in e for e in errs)


# FlashDecoding (flash2_fwd.cu's SPLIT_KV build and its combine): the group packed into one
# tile (GQA, one query), one query per head, several queries, a window that leaves most splits
# without a key, one split (no combine)
DECODES = [
    ({"seq_len": 1, "kv_seq_len": 3000, "heads": 8, "kv_heads": 2}, None),
    ({"seq_len": 1, "kv_seq_len": 3000, "heads": 8, "kv_heads": 2}, 5),
    ({"seq_len": 1, "kv_seq_len": 2000, "heads": 4}, 3),
    ({"seq_len": 4, "kv_seq_len": 1000, "heads": 4, "causal": True}, 2),
    ({"seq_len": 1, "kv_seq_len": 2000, "heads": 4, "causal": True, "window": 100}, 8),
    ({"seq_len": 1, "kv_seq_len": 700, "heads": 8, "kv_heads": 2}, 1),
]


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize(("fields", "splits"), DECODES, ids=lambda x: str(x))
def test_flash_decode(dtype, d, fields, splits):
    """The split kernel and the combine against the dense masked reference (as the masked
    forward); flash-attn's default tiles (64 rows, 4 warps)."""
    shape = kernels.AttentionShape(batch=2, head_dim=d, dtype=dtype, **fields)
    sched = kernels.schedule("flash_decode", shape, num_splits=splits)
    assert gpu.tiling_errors(sched) == [] and dict(gpu.defines(sched))["SPLIT_KV"] == 1
    assert [ln.grid for ln in gpu.launches(sched)] == [k.ctas for k in sched.kernels]
    _check_masked_forward(sched)


# a paged cache (the PAGED build): pages smaller than a key block, equal to it and larger,
# in a shuffled pool with pages to spare, ragged last pages, sequences sharing their first
# pages (prefix caching: equal keys there), GQA packed and not, one split and several
PAGED = [
    ({"seq_len": 1, "kv_seq_len": 3000, "heads": 8, "kv_heads": 2}, 16, None),
    ({"seq_len": 1, "kv_seq_len": 2000, "heads": 4}, 64, 3),
    ({"seq_len": 1, "kv_seq_len": 999, "heads": 8, "kv_heads": 2}, 256, 1),
    ({"seq_len": 4, "kv_seq_len": 1000, "heads": 4, "causal": True}, 8, 2),
    ({"seq_len": 1, "kv_seq_len": 2000, "heads": 4, "causal": True, "window": 100}, 32, 8),
]


def _paged(shape, page_size: int, shared: int, seed: int) -> kernels.PagedKV:
    """A pool with 5 pages to spare, in a random order; ``shared`` leading pages common to
    both sequences."""
    need = -(-shape.n_kv // page_size)
    ids = np.random.default_rng(seed).permutation(shared + 2 * (need - shared) + 5)
    own = ids[shared : shared + 2 * (need - shared)].reshape(2, need - shared)
    table = np.concatenate([np.tile(ids[:shared], (2, 1)), own], axis=1)
    return kernels.PagedKV.from_array(table, page_size, len(ids))


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize(("fields", "page", "splits"), PAGED, ids=lambda x: str(x))
@pytest.mark.parametrize("shared", [0, 2])
def test_flash_decode_paged(dtype, d, fields, page, splits, shared):
    """The PAGED build reads K and V through the block table from a pool whose unused slots
    are NaN: the split kernel and the combine against the dense masked reference, and the
    shared memory it carves out (tiles and two slots of page ids) is the schedule's."""
    import cupy

    shape = kernels.AttentionShape(batch=2, head_dim=d, dtype=dtype, **fields)
    seed = _fresh_seed()
    pk = _paged(shape, page, shared, seed)
    paged = kernels.AttentionShape(**{**shape.to_dict(), "paged_kv": pk})
    sched = kernels.schedule("flash_decode", paged, num_splits=splits)
    if gpu.tiling_errors(sched):  # 4-token pages of a 256-key block: more ids than a warp
        pytest.skip("; ".join(gpu.tiling_errors(sched)))
    assert dict(gpu.defines(sched))["PAGED"] == 1
    _check_masked_forward(sched, seed=seed, shared_keys=shared * page)
    out = cupy.zeros(1, cupy.int64)
    gpu.compile_schedule(sched).function("flash2_fwd_smem_bytes")((1,), (1,), (out,))
    assert int(out.get()[0]) == gpu.launches(sched)[0].smem_bytes == sched.kernels[0].smem_bytes


SMEM_CASES = [
    ("flash2", 128, 128, 64, 8),
    ("flash2", 64, 64, 64, 4),
    ("flash2_bwd", 128, 64, 64, 4),
    ("flash2_bwd", 64, 64, 128, 8),
    ("standard", 128, 128, 64, 4),
    ("standard", 64, 64, 128, 4),
]


@pytest.mark.parametrize(("name", "d", "bq", "bkv", "w"), SMEM_CASES)
def test_shared_memory_is_the_schedules(name, d, bq, bkv, w):
    """The bytes each kernel carves out of shared memory (its own constexpr, read back from the
    GPU) equal what the runner requests and what the schedule counts; flash2_bwd's main kernel
    adds exactly its dS^T tile (block_kv x block_q elements), which the schedule keeps in
    registers."""
    import cupy

    sched = kernels.schedule(name, _shape(d, 1000, False, None, "fp16"), bq, bkv, w)
    c = gpu.compile_schedule(sched)
    out = cupy.zeros(3, cupy.int64)
    fn = {"flash2": "flash2_fwd_smem_bytes", "flash2_bwd": "flash2_bwd_smem_bytes"}
    args = (out,) if name != "standard" else (out, np.int32(sched.shape.seq_len))
    c.function(fn.get(name, "std_smem_bytes"))((1,), (1,), args)
    cuda = [int(x) for x in out.get()]
    requested = [ln.smem_bytes for ln in c.launches]
    modelled = [k.smem_bytes for k in sched.kernels]
    if name == "flash2":
        assert requested == modelled == cuda[:1]
    elif name == "standard":
        assert requested == modelled == cuda
    else:
        ds = bkv * bq * sched.shape.elem_bytes
        assert cuda[:2] == [modelled[1], ds]
        assert requested == [0, modelled[1] + ds, 0] and modelled[0] == modelled[2] == 0
    assert [ln.grid for ln in c.launches] == [k.ctas for k in sched.kernels]
    assert [ln.block for ln in c.launches] == [32 * k.warps for k in sched.kernels]


BAD_TILINGS = [
    ("flash2", 64, 64, 64, 8),  # 64 Q rows over 8 warps: not whole m16 tiles
    ("flash2", 64, 64, 40, 4),  # block_kv not a multiple of 16
    ("flash2_bwd", 64, 64, 32, 4),  # 32 keys over 4 warps
    ("standard", 48, 48, 64, 4),  # 48 Q rows over 4 warps (head_dim 48 itself is fine)
    ("flash2", 256, 256, 256, 4),  # Q, K, V tiles: 384 KiB > 227 KiB of shared memory
]


@pytest.mark.parametrize(("name", "d", "bq", "bkv", "w"), BAD_TILINGS)
def test_static_asserts_agree_with_tiling_errors(name, d, bq, bkv, w):
    """kernels.gpu.tiling_errors rejects what the kernels' static_asserts reject, and the
    runner refuses before compiling."""
    import cupy

    sched = kernels.schedule(name, _shape(d, max(bq, bkv), False, None, "fp16"), bq, bkv, w)
    assert gpu.tiling_errors(sched)
    with pytest.raises(ValueError, match="cannot run on the GPU"):
        gpu.compile_schedule(sched)
    code, options = gpu.source(sched), gpu.compile_options(gpu.defines(sched))
    with pytest.raises(cupy.cuda.compiler.CompileException, match="static assertion failed"):
        cupy.RawModule(code=code, options=options).get_function(gpu.launches(sched)[0].function)


@pytest.mark.parametrize("name", ["flash1", "flash1_bwd", "standard_bwd"])
def test_other_schedules_have_no_gpu_version(name):
    sched = kernels.schedule(name, _shape(64, 128, False, None, "fp16"), 64, 64, 4)
    with pytest.raises(NotImplementedError, match="no GPU version"):
        gpu.run_schedule(sched, *random_inputs(sched.shape, backward=name.endswith("_bwd")))
