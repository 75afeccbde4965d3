"""The model against the committed GPU measurements of masked attention (data/gpu/masks/,
analysis.validation.masks): bytes to the sector, flash-attn's split count exactly, the masked
kernels' times within the time model's targets."""

import numpy as np

from flashio import simulator
from flashio.analysis.validation import masks
from flashio.kernels import flash_decode
from flashio.simulator import Op

SMS = simulator.load_gpu("h200-measured").sm_count


def test_bytes_in_and_out_of_the_sms_are_the_replays():
    """Reads and writes equal the trace's, but for what the trace leaves out by design: the
    segment table (at most one 32-byte sector per SM for 8 segment ends) and logsumexp rows
    shorter than a sector, which cost the whole sector (docs/io.md, "Partial tiles")."""
    rows = masks.byte_rows()
    assert len(rows) == len(masks.NCU_CASES)
    for r in rows:
        segs = len(r["shape"].segments or ())
        table = SMS * masks.SECTOR * -(-4 * segs // masks.SECTOR) if segs else 0
        assert 0 <= r["read"] - r["trace_read"] <= table, r["case"]
        assert 0 <= r["write"] - r["trace_write"] <= r["ctas"] * masks.SECTOR, r["case"]
    exact = [r for r in rows if not r["shape"].segments and r["shape"].seq_len > 1]
    assert exact and all(r["read"] == r["trace_read"] for r in exact)
    assert all(r["write"] == r["trace_write"] for r in exact)


def test_flash_decode_splits_as_pytorchs_kernel_did():
    """The split count flash_decode's heuristic picks is the grid PyTorch's flash-attn 2
    decoding kernel ran with, at every measured cache length."""
    rows = masks.decode_rows()
    assert len(rows) == 3
    assert all(r["splits_model"] == r["splits_measured"] for r in rows)


def test_backward_bytes_are_the_replays():
    """The masked backward's three kernels read what the trace reads (the main kernel also the
    segment table, one sector per SM) and write it, but that the main kernel's dK and dV leave
    the SM in 16-byte halves of 32-byte sectors (each lane stores 4 bytes, four lanes a row's
    16), which the memory system counts as whole sectors: up to their bytes once more."""
    rows = masks.bwd_byte_rows()
    assert len(rows) == 3 * len(masks.NCU_BWD_CASES)
    assert [r["profiled"] for r in rows] == [r["kernel"] for r in rows]
    for r in rows:
        segs = len(r["shape"].segments or ())
        table = SMS * masks.SECTOR * -(-4 * segs // masks.SECTOR) if segs else 0
        assert 0 <= r["read"] - r["trace_read"] <= table, (r["case"], r["kernel"])
        assert 0 <= r["write"] - r["trace_write"] <= r["dkdv"], (r["case"], r["kernel"])
    assert all(r["write"] == r["trace_write"] for r in rows if r["kernel"] != "flash2_bwd")


def test_masked_times_within_the_time_models_targets():
    """Nothing is fitted to these timings. The issue's targets: forward within 10% MAPE,
    backward within 15% (each row of the backward too); measured 9.8% and 5.0%."""
    for rows, target in ((masks.time_rows(), 0.10), (masks.bwd_time_rows(), 0.15)):
        err = np.abs([r["error"] for r in rows])
        assert len(rows) >= 6 and err.mean() <= target, err
    assert max(abs(r["error"]) for r in masks.bwd_time_rows()) <= 0.15


def test_flash_decode_bytes_are_the_replays_and_it_streams_the_cache():
    """flash_decode's split kernel reads the replay's bytes and writes them, but that each
    split's logsumexp rows (16 bytes for a group of 4 heads) cost a 32-byte sector; the combine
    reads those sectors back (one per split per CTA) and stores each row's L from its own warp,
    a sector a row. At 64k cached tokens the split kernel reads the cache at >= 85% of the copy
    bandwidth measured in the same run (the issue's target; measured 85.6%)."""
    rows = masks.decode_byte_rows()
    assert len(rows) == 2 * len(masks.NCU_DECODE_CASES)
    for r in rows:
        extra_read, extra_write = r["read"] - r["trace_read"], r["write"] - r["trace_write"]
        if r["kernel"] == "flash_decode":
            assert extra_read == 0 and 0 <= extra_write <= r["ctas"] * masks.SECTOR, r
        else:  # 4 rows a combine CTA at d = 128
            assert 0 <= extra_read <= r["ctas"] * r["splits"] * masks.SECTOR, r
            assert 0 <= extra_write <= r["ctas"] * 4 * masks.SECTOR, r
    copy = masks.run_data("masks_decode.json")["ceilings"]["copy_bytes_per_s"]
    split = next(r for r in rows if r["case"] == "decode 65536" and r["kernel"] == "flash_decode")
    assert split["cache"] / split["measured_s"] >= 0.85 * copy


def test_paged_decoding_bytes_are_the_replays():
    """Over a paged cache the split kernel reads the replay's bytes, K and V and the block
    table, but that a key block's page ids of fewer than 32 bytes (one id of a 256-token page)
    cost a sector; it writes as the contiguous build does (a sector per split's logsumexp
    rows at most), and the combine is the contiguous case's."""
    rows = masks.decode_byte_rows("paged")
    scheds = dict(masks.ncu_schedules("paged"))
    assert len(rows) == 2 * len(masks.NCU_PAGED_CASES)
    for r in rows:
        extra_read, extra_write = r["read"] - r["trace_read"], r["write"] - r["trace_write"]
        if r["kernel"] == "flash_decode":
            ev = scheds[r["case"]].trace().events
            ids = ev[(ev["op"] == int(Op.LOAD)) & (ev["tensor"] == flash_decode.BLOCK_TABLE)]
            off, n = ids["offset_bytes"], ids["bytes"]
            sectors = (off + n - 1) // masks.SECTOR - off // masks.SECTOR + 1
            assert extra_read == int((sectors * masks.SECTOR - n).sum()), r
            assert 0 <= extra_write <= r["ctas"] * masks.SECTOR, r
        else:
            assert 0 <= extra_read <= r["ctas"] * r["splits"] * masks.SECTOR, r
            assert 0 <= extra_write <= r["ctas"] * 4 * masks.SECTOR, r


def test_paged_decoding_is_near_the_contiguous_cache_and_priced_like_it():
    """Over a paged cache (16- and 256-token pages, shuffled and in order) a decoding step
    takes at most 1.25x the contiguous one's time in the same run (measured 0.94-1.20x; event
    timings spread 10-20% from their minimum to their maximum), and at 64k cached tokens
    the split kernel reads the cache at >= 75% of the copy bandwidth (Nsight; measured 76% and
    81%). The issue model prices the PAGED build's compiled loop of each page size (the
    census's `paged=` entries): -16% to +11%, MAPE <= 10% (measured 6.0%; -16% to +1% and
    4.1% without CTA drift, which slows the 65,536- and 131,072-token steps by 4-10%), as the
    contiguous steps, whose event times it puts up to 20% too fast (the combine on the pipe
    rates)."""
    rows = masks.flash_decode_rows(paged=True)
    assert len(rows) == 16
    for r in rows:
        assert r["measured_s"] <= 1.25 * r["other_s"], r
        assert -0.20 <= r["error"] < 0.12, r
    assert np.abs([r["error"] for r in rows]).mean() <= 0.10
    copy = masks.run_data("masks_paged.json")["ceilings"]["copy_bytes_per_s"]
    split = [r for r in masks.decode_byte_rows("paged") if r["kernel"] == "flash_decode"]
    at_64k = [r for r in split if r["case"].startswith("decode 65536")]
    assert len(at_64k) == 2 and all(r["cache"] / r["measured_s"] >= 0.75 * copy for r in at_64k)


def test_block_mask_bytes_are_the_replays():
    """With a block mask the forward reads the replay's bytes and its row of tile states
    (a sector a CTA at most) and writes exactly the replay's; the backward's pre and post
    kernels move exactly the replay's bytes, its main kernel reads the replay's and its column
    of tile states (a sector per Q block at most) and writes at least the replay's (dK, dV in
    half sectors, and spill stores the census's masked build does not make: docs/validation.md)."""
    rows = masks.block_byte_rows()
    assert len(rows) == 8 and [r["profiled"] for r in rows] == [r["kernel"] for r in rows]
    for r in rows:
        assert 0 <= r["read"] - r["trace_read"] <= r["table"], (r["case"], r["kernel"])
        if r["kernel"] == "flash2_bwd":
            assert r["write"] >= r["trace_write"], r["case"]
        else:
            assert r["write"] == r["trace_write"], (r["case"], r["kernel"])


def test_block_mask_times_scale_with_the_kept_tiles():
    """Nothing is fitted to these timings, and the census holds the BLOCK_SPARSE builds'
    loops: the backward is within the issue's 15% MAPE (measured 5.9%), the forward within
    its 10% (measured 4.2%), no row of it more than 20% too fast (the masked forward's
    documented range, docs/model.md) or 7% too slow (measured -10% to +6.4%; -14% to +2%
    before FFMA took one cycle and the interference rates were refitted so); and the
    measured time falls with the kept tiles (8% of them local, 25% random, all)."""
    rows = masks.block_time_rows()
    bwd = [r for r in rows if r["pass"] == "bwd"]
    assert len(bwd) == 8 and np.abs([r["error"] for r in bwd]).mean() <= 0.15
    fwd = [r for r in rows if r["pass"] == "fwd"]
    assert len(fwd) == 8 and np.abs([r["error"] for r in fwd]).mean() <= 0.10
    assert all(-0.20 <= r["error"] < 0.07 for r in fwd)
    for p in ("fwd", "bwd"):
        for d in (64, 128):
            t = {r["case"]: r["measured_s"] for r in rows if r["pass"] == p
                 and r["shape"].head_dim == d}  # fmt: skip
            assert t["local 4 + 2 global"] < t["random 25%"] < t["full"], (p, d)
