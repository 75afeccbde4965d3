"""docs/validation.md's "Masks" tables (``flashio docs``), rendered from the comparisons of
``analysis.validation.masks``: bytes and times of this project's masked forward and backward and
of flash_decode, and PyTorch's split-KV decoding, against the model."""

from __future__ import annotations

import numpy as np

from flashio.analysis.validation.masks import (
    block_byte_rows,
    block_time_rows,
    bwd_byte_rows,
    bwd_time_rows,
    byte_rows,
    decode_byte_rows,
    decode_rows,
    flash_decode_rows,
    run_data,
    time_rows,
)

__all__ = ["markdown"]


def _table(head: tuple[str, ...], rows) -> list[str]:
    """A markdown table: the header, its rule, a line per row of cells."""
    return [
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        *("| " + " | ".join(cells) + " |" for cells in rows),
    ]


def _mape(rows) -> str:
    err = np.array([r["error"] for r in rows])
    return f"MAPE {np.abs(err).mean():.1%}, bias {err.mean():+.1%}"


def markdown() -> str:
    """docs/validation.md's "Masks" tables."""
    copy = run_data()["ceilings"]["copy_bytes_per_s"] / 1e12
    lines = [
        "Bytes in and out of the SMs (Nsight Compute) against the replay, this project's masked "
        "forward, B = 1, H = 8, d = 64, bf16:",
        "",
        *_table(
            ("case", "read (GPU)", "read (trace)", "write (GPU)", "write (trace)"),
            (
                (r["case"], f"{r['read']:,.0f}", f"{r['trace_read']:,}", f"{r['write']:,.0f}",
                 f"{r['trace_write']:,}")
                for r in byte_rows()
            ),
        ),
    ]  # fmt: skip
    rows = time_rows()
    lines += [
        "",
        "Time, this project's masked forward (B = 1, H = 16, bf16; event-timed through the "
        "launch harness) against the issue model on h200-measured, with torch flex_attention "
        f"(the same mask, compiled) beside it: {_mape(rows)}.",
        "",
        *_table(
            ("case", "N", "d", "tiling", "partial blocks", "measured ms", "predicted ms",
             "error", "other", "other ms"),
            (
                (r["case"], f"{r['shape'].seq_len:,}", f"{r['shape'].head_dim}",
                 "{}x{} w{}".format(*r["tiling"]), f"{r['partial']:.0%}",
                 f"{r['measured_s'] * 1e3:.3f}", f"{r['predicted_s'] * 1e3:.3f}",
                 f"{r['error']:+.1%}", r["other"], f"{r['other_s'] * 1e3:.3f}")
                for r in rows
            ),
        ),
    ]  # fmt: skip
    lines += _bwd_lines()
    lines += _block_lines()
    lines += _decode_lines()
    lines += _paged_lines()
    lines += [
        "",
        "Decoding, PyTorch SDPA's flash backend (flash-attn 2's split-KV kernel and combine; "
        "B = 1, 32 query heads on 8 kv heads, d = 128, bf16; the kernels' profiled durations) "
        f"against flash_decode with flash-attn's split heuristic (copy bandwidth {copy:.2f} "
        "TB/s measured in the same run):",
        "",
        *_table(
            ("cached tokens", "splits (kernel grid)", "splits (model)", "split kernel us",
             "predicted us", "both kernels us", "predicted us", "error", "cache read TB/s"),
            (
                (f"{r['shape'].n_kv:,}", f"{r['splits_measured']}", f"{r['splits_model']}",
                 f"{r['measured_split_s'] * 1e6:.1f}", f"{r['predicted_split_s'] * 1e6:.1f}",
                 f"{r['measured_s'] * 1e6:.1f}", f"{r['predicted_s'] * 1e6:.1f}",
                 f"{r['error']:+.1%}", f"{r['cache_tb_per_s']:.2f}")
                for r in decode_rows()
            ),
        ),
    ]  # fmt: skip
    return "\n".join(lines)


def _decode_lines() -> list[str]:
    """flash_decode's bytes, kernel times and cache bandwidth, and its event times."""
    copy = run_data("masks_decode.json")["ceilings"]["copy_bytes_per_s"] / 1e12

    rows = flash_decode_rows()
    return [
        "",
        "This project's flash_decode (flash2_fwd.cu's SPLIT_KV build and its combine; 32 query "
        "heads on 8 kv heads, d = 128, bf16; flash-attn's tiles and split heuristic): Nsight "
        "Compute's bytes in and out of the SMs and kernel durations (cold L2) against the "
        "replay and the issue model, and the cache each split kernel read per second (copy "
        f"bandwidth {copy:.2f} TB/s):",
        "",
        *_decode_byte_table("decode"),
        "",
        "Event-timed, both kernels through the launch harness, against the issue model (the "
        "census holds the split kernel's loop; the combine, which has no matrix products, is "
        f"priced by the pipe rates): {_mape(rows)}; PyTorch SDPA's flash backend on the same "
        "inputs beside it (its call event-timed, and its two kernels' profiled durations):",
        "",
        *_table(
            ("cached tokens", "splits", "measured ms", "predicted ms", "error", "PyTorch ms",
             "PyTorch kernels ms"),
            (
                (f"{r['shape'].n_kv:,}", f"{r['splits']}", f"{r['measured_s'] * 1e3:.4f}",
                 f"{r['predicted_s'] * 1e3:.4f}", f"{r['error']:+.1%}",
                 f"{r['other_s'] * 1e3:.4f}", f"{r['other_kernels_s'] * 1e3:.4f}")
                for r in rows
            ),
        ),
    ]  # fmt: skip


def _paged_lines() -> list[str]:
    """flash_decode over a paged cache (the PAGED build): bytes per kernel, event times."""
    copy = run_data("masks_paged.json")["ceilings"]["copy_bytes_per_s"] / 1e12
    rows = flash_decode_rows(paged=True)
    return [
        "",
        "Over a paged KV cache (flash2_fwd.cu's PAGED build; the same decoding steps, K and V in "
        "pools of 16- or 256-token pages, shuffled): Nsight Compute's bytes and durations "
        "(cold L2) against the replay and the issue model, and the cache each split kernel read "
        f"per second (copy bandwidth {copy:.2f} TB/s in the timing run):",
        "",
        *_decode_byte_table("paged"),
        "",
        "Event-timed, both kernels, against the issue model (the census holds the PAGED "
        f"build's loop at 16- and 256-token pages): {_mape(rows)}; the contiguous cache "
        "beside it in the same run:",
        "",
        *_table(
            ("cached tokens", "pages", "splits", "measured ms", "predicted ms", "error",
             "contiguous ms", "paged / contiguous"),
            (
                (f"{r['shape'].n_kv:,}",
                 f"{r['shape'].paged_kv.page_size}, "
                 + ("in order" if r["impl"].endswith("_in_order") else "shuffled"),
                 f"{r['splits']}", f"{r['measured_s'] * 1e3:.4f}",
                 f"{r['predicted_s'] * 1e3:.4f}", f"{r['error']:+.1%}",
                 f"{r['other_s'] * 1e3:.4f}", f"{r['measured_s'] / r['other_s']:.2f}")
                for r in rows
            ),
        ),
    ]  # fmt: skip


def _decode_byte_table(kind: str) -> list[str]:
    """Nsight Compute's bytes and durations of flash_decode's kernels against the replay and
    the issue model, and the cache each split kernel read per second (``kind``: "decode" or
    "paged", masks.decode_byte_rows)."""

    def tb_per_s(r):
        split = r["kernel"] == "flash_decode"
        return f"{r['cache'] / r['measured_s'] / 1e12:.2f}" if split else ""

    return _table(
        ("case", "kernel", "CTAs", "read (GPU)", "read (trace)", "write (GPU)",
         "write (trace)", "us (GPU)", "us (model)", "cache TB/s"),
        (
            (r["case"], r["kernel"], f"{r['ctas']}", f"{r['read']:,.0f}",
             f"{r['trace_read']:,}", f"{r['write']:,.0f}", f"{r['trace_write']:,}",
             f"{r['measured_s'] * 1e6:.1f}", f"{r['predicted_s'] * 1e6:.1f}", tb_per_s(r))
            for r in decode_byte_rows(kind)
        ),
    )  # fmt: skip


def _block_lines() -> list[str]:
    """Block masks (the BLOCK_SPARSE builds): bytes per kernel, times of both passes."""
    rows = block_time_rows()
    fwd, bwd = ([r for r in rows if r["pass"] == p] for p in ("fwd", "bwd"))
    return [
        "",
        "Bytes in and out of the SMs, block masks of 128 x 128 blocks (B = 1, H = 8, N = 4,096, "
        "d = 64, bf16; forward 128x128 tiles, 8 warps; backward 64x128, 8 warps), the replay "
        "with the issue model; `table`: the tile states the kernel reads, which the trace leaves "
        "out (at most a 32-byte sector per CTA, per visited Q block in the backward):",
        "",
        *_table(
            ("case", "kernel", "read (GPU)", "read (trace)", "table at most", "write (GPU)",
             "write (trace)"),
            (
                (r["case"], r["kernel"], f"{r['read']:,.0f}", f"{r['trace_read']:,}",
                 f"{r['table']:,}" if r["table"] else "", f"{r['write']:,.0f}",
                 f"{r['trace_write']:,}")
                for r in block_byte_rows()
            ),
        ),
        "",
        "Time, block masks at N = 16,384 (B = 1, H = 16, bf16; 128 x 128 blocks; forward "
        "128x128 w8 at d = 64 and 128x64 w8 at d = 128, backward 64x128 w8), event-timed "
        "through the launch harness, against the issue model on h200-measured, with torch "
        f"flex_attention (the same block mask, compiled) beside it. Forward {_mape(fwd)}; "
        f"backward {_mape(bwd)}.",
        "",
        *_table(
            ("case", "pass", "d", "tiles kept", "measured ms", "predicted ms", "error",
             "flex ms"),
            (
                (r["case"], r["pass"], f"{r['shape'].head_dim}", f"{r['kept']:.0%}",
                 f"{r['measured_s'] * 1e3:.3f}", f"{r['predicted_s'] * 1e3:.3f}",
                 f"{r['error']:+.1%}", f"{r['other_s'] * 1e3:.3f}")
                for r in rows
            ),
        ),
    ]  # fmt: skip


def _bwd_lines() -> list[str]:
    """The backward's bytes (per kernel) and times."""
    rows = bwd_time_rows()
    return [
        "",
        "Bytes in and out of the SMs, this project's masked backward (its three kernels; B = 1, "
        "H = 8, d = 64, bf16, 64x128 tiles, 8 warps), the replay with the issue model:",
        "",
        *_table(
            ("case", "kernel", "read (GPU)", "read (trace)", "write (GPU)", "write (trace)",
             "dK, dV"),
            (
                (r["case"], r["kernel"], f"{r['read']:,.0f}", f"{r['trace_read']:,}",
                 f"{r['write']:,.0f}", f"{r['trace_write']:,}",
                 f"{r['dkdv']:,}" if r["dkdv"] else "")
                for r in bwd_byte_rows()
            ),
        ),
        "",
        "Time, this project's masked backward (B = 1, H = 16, N = 16,384, bf16; its three "
        "kernels, event-timed through the launch harness) against the issue model on "
        f"h200-measured, with torch flex_attention's backward beside it: {_mape(rows)}.",
        "",
        *_table(
            ("case", "d", "tiling", "partial blocks", "measured ms", "predicted ms", "error",
             "flex ms"),
            (
                (r["case"], f"{r['shape'].head_dim}", "{}x{} w{}".format(*r["tiling"]),
                 f"{r['partial']:.0%}", f"{r['measured_s'] * 1e3:.3f}",
                 f"{r['predicted_s'] * 1e3:.3f}", f"{r['error']:+.1%}",
                 f"{r['other_s'] * 1e3:.3f}")
                for r in rows
            ),
        ),
    ]  # fmt: skip
