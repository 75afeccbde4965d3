"""Masks on the GPU against the model: this project's masked flash2 forward (windows, packed
documents, decoding over a KV cache) and backward, and PyTorch SDPA's split-KV decoding,
measured on the H200 (data/gpu/masks/, ``bash data/gpu/runs/masks_run.sh measure`` and
``measure-bwd``), next to flex_attention.

- Bytes: Nsight Compute's bytes in and out of the SMs for the launches of
  ``benchmarks/masks_ncu.py`` (``NCU_CASES``; the backward's ``NCU_BWD_CASES``, per kernel)
  against the replay's global reads and writes.
- Time: this project's kernels (event-timed, through the launch harness of
  analysis/validation/calibration.toml) against the issue model on ``h200-measured``; PyTorch's
  flash-attn 2 decoding (its kernels' durations from the profiler) against ``flash_decode``
  with flash-attn's split heuristic, whose split count is checked against the grid the kernel
  ran with. flex_attention's times are shown beside ours, not modelled.
"""

from __future__ import annotations

import json

import numpy as np

from flashio import kernels, simulator
from flashio.analysis.paths import DATA
from flashio.analysis.validation.calibration import load_calibration
from flashio.analysis.validation.gpu_data import parse_ncu_csv
from flashio.kernels.mask import block_sums
from flashio.simulator.simulate import ModelOptions

__all__ = [
    "NCU_BWD_CASES",
    "NCU_CASES",
    "NCU_DECODE_CASES",
    "bwd_byte_rows",
    "bwd_time_rows",
    "byte_rows",
    "decode_byte_rows",
    "decode_rows",
    "flash_decode_rows",
    "markdown",
    "ncu_schedules",
    "time_rows",
]

GPU = "h200-measured"
OPTIONS = ModelOptions(issue_model=True, prefetch_kernels=("flash2_fwd",))
SECTOR = 32  # bytes the memory system moves at least
NCU_BASE = {"batch": 1, "heads": 8, "head_dim": 64, "dtype": "bf16"}
NCU_CASES = (  # (label, shape fields, tiling): the launches benchmarks/masks_ncu.py profiles
    ("window 512", {"seq_len": 4096, "causal": True, "window": 512}, (128, 128, 8)),
    ("window (300, 40)", {"seq_len": 4096, "window": (300, 40)}, (128, 128, 8)),
    ("5 documents", {"seq_len": 4096, "causal": True,
                     "segments": (100, 900, 1000, 2000, 96)}, (128, 128, 8)),
    ("chunked prefill", {"seq_len": 512, "causal": True, "kv_seq_len": 8192}, (128, 128, 8)),
    ("decode", {"seq_len": 1, "kv_seq_len": 8192, "kv_heads": 2}, (64, 128, 4)),
)  # fmt: skip


# the backward's launches (benchmarks/masks_ncu.py --backward): its three kernels per case
NCU_BWD_CASES = tuple((label, f, (64, 128, 8)) for label, f, _ in NCU_CASES[:4])
# flash_decode's (--decode): the split kernel and the combine, flash-attn's tiles and splits
NCU_DECODE_CASES = tuple(
    (f"decode {c}", {"heads": 32, "kv_heads": 8, "head_dim": 128, "seq_len": 1, "kv_seq_len": c})
    for c in (8192, 65536)
)


def ncu_schedules(kind: str = "forward") -> list[tuple[str, kernels.Schedule]]:
    """The profiled schedules of ``kind``: "forward", "backward" or "decode"."""
    if kind == "decode":
        return [
            (label, kernels.schedule("flash_decode", kernels.AttentionShape(**{**NCU_BASE, **f})))
            for label, f in NCU_DECODE_CASES
        ]
    name, cases = ("flash2_bwd", NCU_BWD_CASES) if kind == "backward" else ("flash2", NCU_CASES)
    return [
        (label, kernels.schedule(name, kernels.AttentionShape(**NCU_BASE, **f), *tiles))
        for label, f, tiles in cases
    ]


def _doc(name: str = "masks.json") -> dict:
    return json.loads((DATA / "gpu" / "masks" / name).read_text())


def byte_rows() -> list[dict]:
    """Per NCU case: measured and replayed bytes in and out of the SMs. Allowed beyond the
    trace (docs/validation.md, "Masks"): the segment table the kernel reads, one sector per SM
    and 8 segment ends; and a row of the logsumexp shorter than a sector costs the sector."""
    launches = parse_ncu_csv((DATA / "gpu" / "masks" / "masks_ncu.csv").read_text())
    out = []
    for (label, sched), ln in zip(ncu_schedules(), launches, strict=True):
        res = simulator.simulate(sched, GPU)
        m = ln["metrics"]
        out.append(
            {
                "case": label,
                "shape": sched.shape,
                "read": m["l1tex__m_xbar2l1tex_read_bytes.sum"],
                "write": m["l1tex__m_l1tex2xbar_write_bytes.sum"],
                "trace_read": res.global_read_bytes,
                "trace_write": res.global_write_bytes,
                "ctas": sched.kernels[0].ctas,
            }
        )
    return out


def bwd_byte_rows() -> list[dict]:
    """Per NCU backward case and kernel (pre, main, post): measured and replayed bytes in and
    out of the SMs, replayed with the issue model (whose census holds the main kernel's spill
    stores), and the bytes of dK and dV (their stores leave as halves of 32-byte sectors)."""
    launches = iter(parse_ncu_csv((DATA / "gpu" / "masks" / "masks_bwd_ncu.csv").read_text()))
    out = []
    for label, sched in ncu_schedules("backward"):
        res = simulator.simulate(sched, GPU, options=OPTIONS)
        sh = sched.shape
        dkdv = 2 * sh.batch * sh.n_kv_heads * sh.n_kv * sh.head_dim * sh.elem_bytes
        for k in res.kernels:
            ln = next(launches)
            m = ln["metrics"]
            out.append(
                {
                    "case": label,
                    "shape": sh,
                    "kernel": k.name,
                    "profiled": ln["kernel"],
                    "read": m["l1tex__m_xbar2l1tex_read_bytes.sum"],
                    "write": m["l1tex__m_l1tex2xbar_write_bytes.sum"],
                    "trace_read": k.global_read_bytes,
                    "trace_write": k.global_write_bytes,
                    "dkdv": dkdv if k.name == "flash2_bwd" else 0,
                }
            )
    return out


def time_rows(backward: bool = False) -> list[dict]:
    """This project's masked forward (or backward: its three kernels), measured and predicted,
    with flex_attention beside it and the share of visited blocks that are partial (masked
    element by element)."""
    name = "flash2_bwd" if backward else "flash2"
    doc = _doc("masks_bwd.json" if backward else "masks.json")
    harness = load_calibration().harness
    other = {(r["case"], json.dumps(r["shape"])): r for r in doc["rows"] if r["impl"] != "flashio"}
    out = []
    for r in doc["rows"]:
        if r["impl"] != "flashio":
            continue
        shape = kernels.AttentionShape(**r["shape"])
        sched = kernels.schedule(name, shape, r["block_q"], r["block_kv"], r["warps"])
        res = simulator.simulate(sched, GPU, options=OPTIONS)
        pred = harness.event_time([k.time_s for k in res.kernels])
        bs = block_sums(shape, sched.block_q, sched.block_kv)
        peer = other[(r["case"], json.dumps(r["shape"]))]
        out.append(
            {
                "case": r["case"],
                "shape": shape,
                "tiling": (sched.block_q, sched.block_kv, sched.warps),
                "measured_s": r["median_ms"] * 1e-3,
                "predicted_s": pred,
                "error": pred / (r["median_ms"] * 1e-3) - 1,
                "partial": (bs.pairs - bs.full_pairs) / bs.pairs,
                "other": peer["impl"],
                "other_s": peer["median_ms"] * 1e-3,
            }
        )
    return out


def bwd_time_rows() -> list[dict]:
    return time_rows(backward=True)


def decode_byte_rows() -> list[dict]:
    """Per NCU decoding case and kernel (split, combine): measured and replayed bytes in and
    out of the SMs, the kernel's duration and, for the split kernel, the KV cache's bytes."""
    launches = iter(parse_ncu_csv((DATA / "gpu" / "masks" / "masks_decode_ncu.csv").read_text()))
    out = []
    for label, sched in ncu_schedules("decode"):
        res = simulator.simulate(sched, GPU, options=OPTIONS)
        sh = sched.shape
        for k, kinfo in zip(res.kernels, sched.kernels, strict=True):
            m = next(launches)["metrics"]
            out.append(
                {
                    "case": label,
                    "kernel": k.name,
                    "ctas": kinfo.ctas,
                    "splits": sched.option("num_splits"),
                    "read": m["l1tex__m_xbar2l1tex_read_bytes.sum"],
                    "write": m["l1tex__m_l1tex2xbar_write_bytes.sum"],
                    "trace_read": k.global_read_bytes,
                    "trace_write": k.global_write_bytes,
                    "measured_s": m["gpu__time_duration.sum"] * 1e-9,
                    "predicted_s": k.time_s,
                    "cache": 2 * sh.batch * sh.n_kv_heads * sh.n_kv * sh.head_dim * sh.elem_bytes,
                }
            )
    return out


def flash_decode_rows() -> list[dict]:
    """This project's flash_decode beside PyTorch SDPA's decoding (masks_decode.json): ours
    event-timed (through the launch harness) against the model, PyTorch's kernels' profiled
    durations beside it."""
    doc, harness = _doc("masks_decode.json"), load_calibration().harness
    theirs = {r["case"]: r for r in doc["rows"] if r["impl"] == "torch_flash"}
    out = []
    for r in doc["rows"]:
        if r["impl"] != "flashio":
            continue
        shape = kernels.AttentionShape(**r["shape"])
        sched = kernels.schedule("flash_decode", shape, r["block_q"], r["block_kv"], r["warps"])
        assert sched.option("num_splits") == r["num_splits"], r["case"]
        res = simulator.simulate(sched, GPU, options=OPTIONS)
        pred = harness.event_time([k.time_s for k in res.kernels])
        other = theirs[r["case"]]
        out.append(
            {
                "case": r["case"],
                "shape": shape,
                "splits": r["num_splits"],
                "measured_s": r["median_ms"] * 1e-3,
                "predicted_s": pred,
                "error": pred / (r["median_ms"] * 1e-3) - 1,
                "other_s": other["median_ms"] * 1e-3,
                "other_kernels_s": sum(other["kernel_us"]) * 1e-6,
            }
        )
    return out


def decode_rows() -> list[dict]:
    """PyTorch SDPA's decoding (flash-attn 2's split-KV kernel and its combine), its kernels'
    measured durations against flash_decode with flash-attn's heuristic on 132 SMs."""
    out = []
    for r in _doc()["rows"]:
        if r["impl"] != "torch_flash":
            continue
        shape = kernels.AttentionShape(**r["shape"])
        sched = kernels.schedule("flash_decode", shape, sm_count=132)
        res = simulator.simulate(sched, GPU)
        splits = r["grids"][0][1]  # flash-attn's split-KV grid: (m blocks, splits, b x h_kv)
        measured = sum(r["kernel_us"]) * 1e-6
        cache = 2 * shape.batch * shape.n_kv_heads * shape.n_kv * shape.head_dim * 2
        out.append(
            {
                "case": r["case"],
                "shape": shape,
                "splits_measured": splits,
                "splits_model": sched.option("num_splits"),
                "measured_s": measured,
                "measured_split_s": r["kernel_us"][0] * 1e-6,
                "predicted_s": res.time_s,
                "predicted_split_s": res.kernels[0].time_s,
                "error": res.time_s / measured - 1,
                "cache_tb_per_s": cache / (r["kernel_us"][0] * 1e-6) / 1e12,
            }
        )
    return out


def markdown() -> str:
    """docs/validation.md's "Masks" tables."""
    doc = _doc()
    copy = doc["ceilings"]["copy_bytes_per_s"] / 1e12
    lines = [
        "Bytes in and out of the SMs (Nsight Compute) against the replay, this project's masked "
        "forward, B = 1, H = 8, d = 64, bf16:",
        "",
        "| case | read (GPU) | read (trace) | write (GPU) | write (trace) |",
        "|---|---|---|---|---|",
    ]
    for r in byte_rows():
        lines.append(
            f"| {r['case']} | {r['read']:,.0f} | {r['trace_read']:,} | {r['write']:,.0f} | "
            f"{r['trace_write']:,} |"
        )
    rows = time_rows()
    err = np.array([r["error"] for r in rows])
    lines += [
        "",
        "Time, this project's masked forward (B = 1, H = 16, bf16; event-timed through the "
        "launch harness) against the issue model on h200-measured, with torch flex_attention "
        f"(the same mask, compiled) beside it: MAPE {np.abs(err).mean():.1%}, bias "
        f"{err.mean():+.1%}.",
        "",
        "| case | N | d | tiling | partial blocks | measured ms | predicted ms | error "
        "| other | other ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        sh, (bq, bkv, w) = r["shape"], r["tiling"]
        lines.append(
            f"| {r['case']} | {sh.seq_len:,} | {sh.head_dim} | {bq}x{bkv} w{w} | "
            f"{r['partial']:.0%} | {r['measured_s'] * 1e3:.3f} | {r['predicted_s'] * 1e3:.3f} | "
            f"{r['error']:+.1%} | {r['other']} | {r['other_s'] * 1e3:.3f} |"
        )
    lines += _bwd_lines()
    lines += _decode_lines()
    lines += [
        "",
        "Decoding, PyTorch SDPA's flash backend (flash-attn 2's split-KV kernel and combine; "
        "B = 1, 32 query heads on 8 kv heads, d = 128, bf16; the kernels' profiled durations) "
        f"against flash_decode with flash-attn's split heuristic (copy bandwidth {copy:.2f} "
        "TB/s measured in the same run):",
        "",
        "| cached tokens | splits (kernel grid) | splits (model) | split kernel us | "
        "predicted us | both kernels us | predicted us | error | cache read TB/s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in decode_rows():
        lines.append(
            f"| {r['shape'].n_kv:,} | {r['splits_measured']} | {r['splits_model']} | "
            f"{r['measured_split_s'] * 1e6:.1f} | {r['predicted_split_s'] * 1e6:.1f} | "
            f"{r['measured_s'] * 1e6:.1f} | {r['predicted_s'] * 1e6:.1f} | "
            f"{r['error']:+.1%} | {r['cache_tb_per_s']:.2f} |"
        )
    return "\n".join(lines)


def _decode_lines() -> list[str]:
    """flash_decode's bytes, kernel times and cache bandwidth, and its event times."""
    copy = _doc("masks_decode.json")["ceilings"]["copy_bytes_per_s"] / 1e12
    lines = [
        "",
        "This project's flash_decode (flash2_fwd.cu's SPLIT_KV build and its combine; 32 query "
        "heads on 8 kv heads, d = 128, bf16; flash-attn's tiles and split heuristic): Nsight "
        "Compute's bytes in and out of the SMs and kernel durations (cold L2) against the "
        "replay and the issue model, and the cache each split kernel read per second (copy "
        f"bandwidth {copy:.2f} TB/s):",
        "",
        "| case | kernel | CTAs | read (GPU) | read (trace) | write (GPU) | write (trace) | "
        "us (GPU) | us (model) | cache TB/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in decode_byte_rows():
        tb = f"{r['cache'] / r['measured_s'] / 1e12:.2f}" if r["kernel"] == "flash_decode" else ""
        lines.append(
            f"| {r['case']} | {r['kernel']} | {r['ctas']} | {r['read']:,.0f} | "
            f"{r['trace_read']:,} | {r['write']:,.0f} | {r['trace_write']:,} | "
            f"{r['measured_s'] * 1e6:.1f} | {r['predicted_s'] * 1e6:.1f} | {tb} |"
        )
    rows = flash_decode_rows()
    err = np.array([r["error"] for r in rows])
    lines += [
        "",
        "Event-timed, both kernels through the launch harness, against the issue model (the "
        "census holds the split kernel's loop; the combine, which has no matrix products, is "
        f"priced by the pipe rates): MAPE {np.abs(err).mean():.1%}, bias {err.mean():+.1%}; "
        "PyTorch SDPA's flash backend on the same inputs beside it (its call event-timed, and "
        "its two kernels' profiled durations):",
        "",
        "| cached tokens | splits | measured ms | predicted ms | error | PyTorch ms | "
        "PyTorch kernels ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['shape'].n_kv:,} | {r['splits']} | {r['measured_s'] * 1e3:.4f} | "
            f"{r['predicted_s'] * 1e3:.4f} | {r['error']:+.1%} | {r['other_s'] * 1e3:.4f} | "
            f"{r['other_kernels_s'] * 1e3:.4f} |"
        )
    return lines


def _bwd_lines() -> list[str]:
    """The backward's bytes (per kernel) and times."""
    lines = [
        "",
        "Bytes in and out of the SMs, this project's masked backward (its three kernels; B = 1, "
        "H = 8, d = 64, bf16, 64x128 tiles, 8 warps), the replay with the issue model:",
        "",
        "| case | kernel | read (GPU) | read (trace) | write (GPU) | write (trace) | dK, dV |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in bwd_byte_rows():
        dkdv = f"{r['dkdv']:,}" if r["dkdv"] else ""
        lines.append(
            f"| {r['case']} | {r['kernel']} | {r['read']:,.0f} | {r['trace_read']:,} | "
            f"{r['write']:,.0f} | {r['trace_write']:,} | {dkdv} |"
        )
    rows = bwd_time_rows()
    err = np.array([r["error"] for r in rows])
    lines += [
        "",
        "Time, this project's masked backward (B = 1, H = 16, N = 16,384, bf16; its three "
        "kernels, event-timed through the launch harness) against the issue model on "
        "h200-measured, with "
        f"torch flex_attention's backward beside it: MAPE {np.abs(err).mean():.1%}, bias "
        f"{err.mean():+.1%}.",
        "",
        "| case | d | tiling | partial blocks | measured ms | predicted ms | error | flex ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        sh, (bq, bkv, w) = r["shape"], r["tiling"]
        lines.append(
            f"| {r['case']} | {sh.head_dim} | {bq}x{bkv} w{w} | {r['partial']:.0%} | "
            f"{r['measured_s'] * 1e3:.3f} | {r['predicted_s'] * 1e3:.3f} | {r['error']:+.1%} | "
            f"{r['other_s'] * 1e3:.3f} |"
        )
    return lines
