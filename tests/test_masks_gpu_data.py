"""The model against the committed GPU measurements of masked attention (data/gpu/masks/,
analysis.validation.masks): bytes to the sector, flash-attn's split count exactly."""

from flashio import simulator
from flashio.analysis.validation import masks

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
