"""A paged KV cache (kernels.PagedKV) read by flash_decode: the executor gathers keys through
the block table and stays exact, the tracer moves what the executor moves, the closed form
what the tracer moves, and every key row read is the row the unpaged schedule reads, found
by inverting the table."""

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashio import kernels, simulator
from flashio.analysis.closed_form.io import io_counts_of
from flashio.analysis.strategies import paged_kvs, variant_shapes
from flashio.kernels import PagedKV, flash_decode, gpu
from flashio.kernels._record import Recorder
from flashio.kernels.paged_kv import parse_paged_kv
from flashio.simulator import Op
from flashio.simulator.errors import ShapeError, TilingError
from tests._util import trace_traffic

A = kernels.AttentionShape
NO_L2 = simulator.load_gpu("h200").replace(l2_bytes=0)


def _decode_shapes():
    """Decoding steps and short chunks over a cache, with GQA (packed at N = 1), windows and
    causal masks, batches of several sequences."""
    return variant_shapes(
        variants=("kv_seq_len", "window"), max_seq_len=4, max_kv_seq_len=70,
        head_dims=(8, 16), dtypes=("fp64",), max_batch=3,
    ).filter(lambda s: s.kv_seq_len is not None)  # fmt: skip


def _inputs(shape, rng, shared_pages: int):
    """q, k, v in fp64 whose sequences hold equal keys in the ``shared_pages`` leading pages
    every sequence shares (prefix caching)."""
    q = rng.standard_normal((shape.batch, shape.heads, shape.seq_len, shape.head_dim))
    k, v = (
        rng.standard_normal((shape.batch, shape.n_kv_heads, shape.n_kv, shape.head_dim))
        for _ in "kv"
    )
    common = shared_pages * shape.paged_kv.page_size
    k[:, :, :common], v[:, :, :common] = k[:1, :, :common], v[:1, :, :common]
    return q, k, v


def _shared_pages(pk: PagedKV) -> int:
    t = pk.table
    return int(np.argmin(np.append((t == t[:1]).all(axis=0), False))) if pk.batch > 1 else 0


def _logical_rows(sched, tensor: int) -> list[tuple[int, int, int, int]]:
    """(CTA, batch, kv head, token) of every K or V row the trace loads, decoded from byte
    offsets: through the inverted block table when paged, the (b, h, n, d) layout otherwise."""
    sh, ev = sched.shape, sched.trace().events
    ev = ev[(ev["op"] == int(Op.LOAD)) & (ev["tensor"] == tensor) & (ev["kernel"] == 0)]
    row, kh, pk = sh.head_dim * sh.elem_bytes, sh.n_kv_heads, sh.paged_kv
    out = []
    for e in ev:
        for r in range(int(e["rows"])):
            at = (int(e["offset_bytes"]) + r * int(e["row_stride_bytes"])) // row
            if pk is None:
                (b, h), tok = divmod(at // sh.n_kv, kh), at % sh.n_kv
            else:
                page, (h, slot) = (
                    at // (kh * pk.page_size),
                    divmod(at % (kh * pk.page_size), pk.page_size),
                )
                seqs, idx = np.nonzero(pk.table == page)
                b = next(int(s) for s in seqs if int(s) == _cta_batch(sched, int(e["cta"])))
                tok = int(idx[list(seqs).index(b)]) * pk.page_size + slot
            out.append((int(e["cta"]), b, h, tok))
    return sorted(out)


def _cta_batch(sched, cta: int) -> int:
    n_units, rows = flash_decode.units(sched.shape)
    t_m = -(-rows // sched.block_q)
    unit = cta // (t_m * flash_decode.splits(sched))
    per_batch = n_units // sched.shape.batch
    return unit // per_batch


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_paged_decoding_is_exact_and_reads_the_rows_it_should(data):
    """fp64 executor within 1e-12 of the dense reference with K and V in the pool (unused
    slots NaN); its events are the tracer's; the closed form is the trace's traffic; the K
    and V rows read, decoded through the table, are the unpaged schedule's rows; the table
    is read 4 bytes per page a visited key block spans."""
    shape = data.draw(_decode_shapes())
    pk = data.draw(paged_kvs(shape))
    paged = A(**{**shape.to_dict(), "paged_kv": pk})
    bq = data.draw(st.integers(1, 8))
    bc = data.draw(st.integers(1, shape.n_kv + 2))
    ns = data.draw(st.integers(1, min(4, -(-shape.n_kv // bc))))
    sched = kernels.schedule("flash_decode", paged, bq, bc, num_splits=ns)
    plain = kernels.schedule("flash_decode", shape, bq, bc, num_splits=ns)

    q, k, v = _inputs(paged, np.random.default_rng(data.draw(st.integers(0, 99))),
                      _shared_pages(pk))  # fmt: skip
    rec = Recorder()
    o, lse = flash_decode.execute(sched, q, k, v, None, rec)
    want, m, l, _ = kernels.attention_forward(q, k, v, mask=shape)
    assert np.abs(o - want).max() <= 1e-12 * max(1.0, float(np.abs(want).max()))
    with np.errstate(divide="ignore"):
        assert np.allclose(lse, np.where(l > 0, m + np.log(l), np.inf), rtol=0, atol=1e-12)
    assert np.array_equal(rec.events(), sched.trace().events)

    traffic = trace_traffic(sched)
    counts = {t.name: (t.read_bytes, t.write_bytes) for t in io_counts_of(sched).tensors}
    assert counts == traffic
    unpaged = trace_traffic(plain)
    assert {n: t for n, t in traffic.items() if n != "block_table"} == unpaged
    for tensor in (flash_decode.K, flash_decode.V):
        assert _logical_rows(sched, tensor) == _logical_rows(plain, tensor)
    ps = pk.page_size
    spans = [(min(shape.n_kv, (j + 1) * bc) - 1) // ps - j * bc // ps + 1
             for j in range(plain.t_kv)]  # fmt: skip
    visited = [e for e in plain.trace().events
               if e["op"] == int(Op.LOAD) and e["tensor"] == flash_decode.K]  # fmt: skip
    assert traffic["block_table"][0] == 4 * sum(spans[int(e["block_row"])] for e in visited)


def test_a_paged_cache_costs_its_table_and_the_simulator_replays_it():
    """One decoding step over 8 sequences of 4,096 cached tokens: pages of 16 tokens add
    their table (4 bytes per 16 rows of each kv head) and no K/V byte; without an L2 the
    simulator moves exactly the closed form, in any page order."""
    base = A(8, 32, 1, 128, "bf16", kv_heads=8, kv_seq_len=4096)
    plain = kernels.schedule("flash_decode", base, sm_count=132)
    for pk in (PagedKV.contiguous(8, 4096, 16), PagedKV.shuffled(8, 4096, 16, seed=1)):
        sched = kernels.schedule("flash_decode", A(**{**base.to_dict(), "paged_kv": pk}),
                                 sm_count=132)  # fmt: skip
        io, io_plain = io_counts_of(sched), io_counts_of(plain)
        assert io.tensor("K").read_bytes == io_plain.tensor("K").read_bytes
        # every (b, kv head) reads its 256 pages' ids once per 128-key block: 8 per block
        assert io.tensor("block_table").read_bytes == 8 * 8 * 4096 // 16 * 4
        res = simulator.simulate(sched, NO_L2)
        total = res.global_read_bytes + res.global_write_bytes
        assert total == io_counts_of(sched, NO_L2).total_bytes


def test_shared_prefix_pages_are_read_from_the_l2():
    """Sequences whose first pages are the same pages (prefix caching) read the prefix from
    HBM about once when it fits the L2: 8 sequences sharing 3/4 of a 2 MiB-per-sequence
    cache move less than half the HBM bytes of unshared pages, the same SM-side bytes."""
    n, ps, b = 4096, 16, 8
    per = n // ps
    common = 3 * per // 4
    pool = np.arange(common + b * (per - common))
    table = np.concatenate(
        [np.tile(pool[:common], (b, 1)), pool[common:].reshape(b, per - common)], axis=1
    )
    base = A(b, 32, 1, 128, "bf16", kv_heads=8, kv_seq_len=n)
    shared = A(**{**base.to_dict(), "paged_kv": PagedKV.from_array(table, ps)})
    apart = A(**{**base.to_dict(), "paged_kv": PagedKV.contiguous(b, n, ps)})
    h200 = simulator.load_gpu("h200")
    r_shared, r_apart = (
        simulator.simulate(kernels.schedule("flash_decode", s, num_splits=4), h200)
        for s in (shared, apart)
    )
    assert r_shared.global_read_bytes == r_apart.global_read_bytes
    assert r_shared.hbm_read_bytes < 0.5 * r_apart.hbm_read_bytes


def test_paged_kv_constructors_round_trip_and_parse():
    pk = PagedKV.shuffled(3, 100, 16, seed=5, num_pages=40)
    assert pk.table.shape == (3, 7) and len(np.unique(pk.table)) == 21
    assert pk.table.max() < 40
    assert np.array_equal(PagedKV.contiguous(2, 33, 16).table, [[0, 1, 2], [3, 4, 5]])
    shape = A(3, 4, 1, 16, kv_seq_len=100, paged_kv=pk)
    assert A(**shape.to_dict()) == shape
    assert "paged_kv=16-token pages, 21 of 40" in shape.describe()
    assert parse_paged_kv("16", 3, 100) == PagedKV.shuffled(3, 100, 16)
    assert parse_paged_kv("16:shuffled:5", 3, 100) == PagedKV.shuffled(3, 100, 16, seed=5)
    assert parse_paged_kv("8:contiguous", 3, 100) == PagedKV.contiguous(3, 100, 8)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: PagedKV.from_array([[0, 0]], 16), "lists a page twice"),
        (lambda: PagedKV.from_array([[0, 5]], 16, num_pages=4), "must lie in 0..3"),
        (lambda: PagedKV.from_array([[0.5]], 16), "2-D integer array"),
        (lambda: PagedKV.from_array([[0]], 0), "page_size must be a positive integer"),
        (lambda: A(1, 1, 1, 8, kv_seq_len=40, paged_kv=PagedKV.contiguous(1, 20, 16)),
         "need 1 x 3"),
        (lambda: A(2, 1, 1, 8, kv_seq_len=40, paged_kv=PagedKV.contiguous(1, 40, 16)),
         "batch=2"),
        (lambda: A(1, 1, 1, 8, paged_kv="16"), "must be a kernels.PagedKV"),
        (lambda: parse_paged_kv("16:sorted", 1, 8), "PAGE_SIZE"),
        (lambda: PagedKV.from_dict({"page_size": 4}), "needs page_size, num_pages and table"),
    ],
)  # fmt: skip
def test_bad_paged_caches_are_refused_with_a_reason(make, message):
    with pytest.raises(ShapeError, match=message):
        make()


def test_only_flash_decode_reads_a_paged_cache():
    shape = A(1, 2, 1, 16, kv_seq_len=64, paged_kv=PagedKV.contiguous(1, 64, 16))
    for name in kernels.SCHEDULES:
        if name == "flash_decode":
            kernels.schedule(name, shape)
        else:
            with pytest.raises(TilingError, match="does not read a paged KV cache"):
                kernels.schedule(name, shape, 16, 16)


def test_sequences_sharing_a_page_must_hold_the_same_keys():
    pk = PagedKV.from_array([[0, 1], [0, 2]], 4)
    shape = A(2, 1, 1, 4, "fp64", kv_seq_len=8, paged_kv=pk)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(s) for s in ((2, 1, 1, 4), (2, 1, 8, 4), (2, 1, 8, 4)))
    sched = kernels.schedule("flash_decode", shape, 1, 4, num_splits=1)
    with pytest.raises(ValueError, match="share page 0"):
        flash_decode.execute(sched, q, k, v, None, Recorder())


def test_paged_tilings_the_cuda_kernel_cannot_run_are_named():
    """Pages must divide a key block or hold whole ones; one warp reads a block's page ids."""
    shape = kernels.AttentionShape(1, 4, 1, 128, "bf16", kv_seq_len=1000,
                                   paged_kv=PagedKV.contiguous(1, 1000, 48))  # fmt: skip
    errs = gpu.tiling_errors(kernels.schedule("flash_decode", shape, 64, 128))
    assert any("must divide block_kv=128" in e for e in errs)
    shape = kernels.AttentionShape(1, 4, 1, 128, "bf16", kv_seq_len=1000,
                                   paged_kv=PagedKV.contiguous(1, 1000, 2))  # fmt: skip
    errs = gpu.tiling_errors(kernels.schedule("flash_decode", shape, 64, 128))
    assert any("at most 32" in e for e in errs)


def test_cli_paged_kv(capsys, tmp_path):
    """--paged-kv on flash_decode: the table's bytes in the per-tensor table; a saved table;
    a clear error for a bad spec and for a schedule that reads no paged cache."""
    from flashio.analysis.cli.main import main

    argv = ["simulate", "flash_decode", "--seq-len", "1", "--kv-seq-len", "4096", "--heads",
            "8", "--batch", "2"]  # fmt: skip
    assert main([*argv, "--paged-kv", "16"]) == 0
    out = capsys.readouterr().out
    assert "paged_kv=16-token pages, 512 of 512 in the pool" in out and "block_table" in out
    path = tmp_path / "table.npy"
    np.save(path, PagedKV.shuffled(2, 4096, 64, seed=3).table)
    assert main([*argv, "--paged-kv", f"{path}:64"]) == 0
    assert "64-token pages" in capsys.readouterr().out
    assert main([*argv, "--paged-kv", "16:sorted"]) == 2
    assert "PAGE_SIZE[:shuffled[:SEED]]" in capsys.readouterr().err
    assert main(["simulate", "flash2", "--kv-seq-len", "4096", "--paged-kv", "16"]) == 2
    assert "does not read a paged KV cache" in capsys.readouterr().err


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_page_order_moves_no_byte_through_the_sms_and_sharing_never_adds_hbm_bytes(data):
    """Replayed on the H200, whose L2 holds these small caches whole: any table moves the
    unpaged step's K and V bytes through the SMs plus its own entries; and a table whose
    sequences share their leading pages reads no more from HBM than the same table with
    those pages made distinct (with everything resident, HBM reads each line touched once,
    and sharing touches fewer)."""
    shape = data.draw(
        variant_shapes(variants=("kv_seq_len",), max_seq_len=2, max_kv_seq_len=300,
                       head_dims=(16,), dtypes=("fp16",), max_batch=3)
        .filter(lambda s: s.batch > 1)
    )  # fmt: skip
    shared = data.draw(paged_kvs(shape, shared=True))
    t = shared.table
    common = int(np.argmin(np.append((t == t[:1]).all(axis=0), False)))
    apart = t.copy()
    spare = shared.num_pages
    for b in range(1, shape.batch):  # fresh pages in place of the shared ones
        apart[b, :common] = np.arange(spare, spare + common)
        spare += common
    distinct = PagedKV.from_array(apart, shared.page_size, spare)
    gpu = simulator.load_gpu("h200")
    splits = min(2, -(-shape.n_kv // 16))
    plain = kernels.schedule("flash_decode", shape, 1, 16, num_splits=splits)
    res = {}
    for name, pk in (("shared", shared), ("distinct", distinct)):
        sched = kernels.schedule("flash_decode", A(**{**shape.to_dict(), "paged_kv": pk}),
                                 1, 16, num_splits=splits)  # fmt: skip
        res[name] = simulator.simulate(sched, gpu)
        table = io_counts_of(sched).tensor("block_table").read_bytes
        assert (
            res[name].global_read_bytes == simulator.simulate(plain, gpu).global_read_bytes + table
        )
    assert res["shared"].hbm_read_bytes <= res["distinct"].hbm_read_bytes


def test_tiling_search_over_a_paged_gqa_cache(capsys):
    """`flashio tiling --search` takes the decoding step's GQA heads and paged cache: at the
    pipe rates every tiling ranks; by default the one the census holds for the paged build
    (flash-attn's 64 x 256 split tiles, the schedule's default) is priced by its loop, the
    rule's block stays at the pipe rates, and the rest are left out."""
    from flashio.analysis.cli.main import main

    argv = ["tiling", "--schedule", "flash_decode", "--seq-len", "1", "--kv-seq-len", "4096",
            "--heads", "8", "--kv-heads", "2", "--paged-kv", "16", "--search",
            "--block-sizes", "16", "64", "--warps", "4"]  # fmt: skip
    assert main([*argv, "--pipe-rates"]) == 0
    out = capsys.readouterr().out
    # 2 x 2 block sizes, the seed's and the paper's tilings
    assert "Fastest:" in out and re.search(r"rank \d of 6", out)
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "rank 1 of 2" in out and "4 left out" in out  # and the rule's 1 x 454, at pipe rates
    assert "each priced by its compiled or written main loop" in out


def test_the_issue_model_prices_the_paged_build_where_the_census_has_it():
    """A paged decoding step looks up the PAGED build of its page size (kernels/cuda's
    flash2_fwd.cu, data/sass/flashio.json.gz); a page size the census lacks falls back to the
    contiguous loop."""
    from flashio.simulator import issue

    base = A(1, 32, 1, 128, "bf16", kv_heads=8, kv_seq_len=8192)
    plain = issue.lookup(kernels.schedule("flash_decode", base).meta.params, "flash_decode", 4)
    got = {}
    for ps in (16, 256, 64):
        shape = A(**{**base.to_dict(), "paged_kv": PagedKV.contiguous(1, 8192, ps)})
        params = kernels.schedule("flash_decode", shape).meta.params
        got[ps] = issue.lookup(params, "flash_decode", 4)
    assert plain is not None and all(c is not None for c in got.values())
    assert got[16].key.endswith(" paged=16") and got[256].key.endswith(" paged=256")
    assert got[64].key == plain.key  # not in the census: the contiguous build's loop
