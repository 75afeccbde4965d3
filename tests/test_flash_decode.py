"""FlashDecoding (kernels.flash_decode): split-KV partial results and their combine, GQA
query heads packed into one tile, flash-attn's split heuristic.

Its executor, tracer and closed form are also checked with every other schedule in
tests/test_masks.py (exact against the dense reference, trace against tracer, closed form
against trace and simulator) and tests/test_io.py."""

import numpy as np
import pytest

from flashio import kernels, simulator
from flashio.analysis.cli.main import main
from flashio.analysis.closed_form.bounds import compulsory_bytes
from flashio.analysis.closed_form.io import io_counts_of
from flashio.kernels import flash_decode
from flashio.kernels._record import Recorder
from flashio.simulator.errors import TilingError

A = kernels.AttentionShape
H200 = simulator.load_gpu("h200-measured")


def test_split_heuristic_worked_by_hand():
    """flash-attn's own example (flash_api.cpp): 48 units on 108 'SMs' (54 with the 2x):
    2 splits reach 0.89 of a wave, 3 only 0.67, and 2 is within 85% of the best."""
    assert flash_decode.split_heuristic(48, 54, 64) == 2
    # enough units to fill 0.8 of 2 x SMs: one split
    assert flash_decode.split_heuristic(212, 132, 512) == 1
    # 8 units on 264 slots, 512 key blocks: efficiencies 8 s / 264 grow until 33 splits fill
    # one wave; the smallest within 85% of that is ceil(0.85 * 33) = 29
    assert flash_decode.split_heuristic(8, 132, 512) == 29
    # a split count whose blocks per split repeat the previous one is not eligible: with 10
    # blocks, 9 splits is 10 splits' work with one idle
    assert flash_decode.split_heuristic(2, 132, 10) == 10


def test_the_schedule_says_what_it_chose():
    shape = A(1, 32, 1, 128, "bf16", kv_heads=8, kv_seq_len=65536)
    auto = kernels.schedule("flash_decode", shape, sm_count=132)
    assert (auto.block_q, auto.block_kv, auto.warps) == (64, 128, 4)  # flash-attn's tiles
    assert dict(auto.options) == {"num_splits": 29, "sm_count": 132, "split_heuristic": 1}
    given = kernels.schedule("flash_decode", shape, num_splits=4)
    assert dict(given.options)["split_heuristic"] == 0
    assert [k.name for k in given.kernels] == ["flash_decode", "flash_decode_combine"]
    one = kernels.schedule("flash_decode", shape, num_splits=1)
    assert [k.name for k in one.kernels] == ["flash_decode"]
    with pytest.raises(TilingError, match="exceeds min"):
        kernels.schedule("flash_decode", A(1, 1, 1, 64, kv_seq_len=100), 64, 64, num_splits=3)
    with pytest.raises(TilingError, match="positive integer"):
        kernels.schedule("flash_decode", shape, num_splits=0)


def test_gqa_decoding_packs_the_group_into_one_tile():
    """At N = 1 with 4 query heads per kv head, a CTA's rows are the group's heads: K and V
    are read once per kv head and split, not once per query head (flash2 reads them 4x)."""
    shape = A(2, 16, 1, 64, "fp16", kv_heads=4, kv_seq_len=3000)
    assert flash_decode.packs_group(shape) and flash_decode.units(shape) == (8, 4)
    sched = kernels.schedule("flash_decode", shape, 64, 256, num_splits=3)
    cache = 2 * 4 * 3000 * 64 * 2  # K of every kv head, bytes
    assert io_counts_of(sched).tensor("K").read_bytes == cache
    fa2 = kernels.schedule("flash2", shape, 64, 256)
    assert io_counts_of(fa2).tensor("K").read_bytes == 4 * cache
    # a window stops the packing (flash-attn's rule), so does a single query head per kv head
    assert not flash_decode.packs_group(A(1, 16, 1, 64, kv_heads=4, kv_seq_len=99, window=(8, 0)))
    assert not flash_decode.packs_group(A(1, 16, 1, 64, kv_seq_len=99))


@pytest.mark.parametrize("num_splits", [1, 2, 5, 10])
def test_splits_combine_to_the_reference(num_splits):
    """Any split count gives the same O and logsumexp (fp64, to rounding): the combine's
    L = log sum exp(LSE_s) and O = sum exp(LSE_s - L) O_s are exact rewrites."""
    shape = A(1, 6, 3, 16, "fp64", causal=True, kv_heads=2, kv_seq_len=77, window=40)
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 6, 3, 16))
    k, v = (rng.standard_normal((1, 2, 77, 16)) for _ in "kv")
    sched = kernels.schedule("flash_decode", shape, 2, 8, num_splits=num_splits)
    o, lse = flash_decode.execute(sched, q, k, v, None, Recorder())
    want, m, l, _ = kernels.attention_forward(q, k, v, mask=shape)
    assert np.abs(o - want).max() <= 1e-13 and np.abs(lse - (m + np.log(l))).max() <= 1e-13


def test_split_kv_decoding_fills_the_gpu():
    """One decoding step at 32/8 heads over 64k tokens: FA2 runs 32 CTAs and FlashDecoding
    232; the simulated step is over 3x faster and reads the cache once from HBM."""
    shape = A(1, 32, 1, 128, "bf16", kv_heads=8, kv_seq_len=65536)
    dec = simulator.simulate(kernels.schedule("flash_decode", shape, sm_count=132), H200)
    fa2 = simulator.simulate(kernels.schedule("flash2", shape, 64, 128), H200)
    assert dec.kernels[0].ctas == 8 * 29 and fa2.kernels[0].ctas == 32
    assert dec.time_s * 3 < fa2.time_s
    assert compulsory_bytes(shape) <= dec.hbm_read_bytes <= 1.01 * compulsory_bytes(shape)


def test_cli_num_splits(capsys):
    argv = ["simulate", "flash_decode", "--seq-len", "1", "--kv-seq-len", "8192", "--heads", "8"]
    assert main([*argv, "--num-splits", "4"]) == 0
    assert "num_splits=4 (given)" in capsys.readouterr().out
    assert main([*argv, "--gpu", "h100-sxm"]) == 0
    assert "flash-attn's heuristic for 132 SMs" in capsys.readouterr().out
    assert main(["simulate", "flash2", "--num-splits", "4"]) == 2
    assert "--num-splits is an option of the flash_decode" in capsys.readouterr().err
