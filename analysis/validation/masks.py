"""Masks on the GPU against the model: this project's masked flash2 forward (windows, packed
documents, decoding over a KV cache) and backward, its flash_decode, and PyTorch SDPA's split-KV
decoding, measured on the H200 (data/gpu/masks/, ``bash data/gpu/runs/masks_run.sh measure``,
``measure-bwd`` and ``measure-decode``), next to flex_attention.

- Bytes: Nsight Compute's bytes in and out of the SMs for the launches of
  ``benchmarks/masks_ncu.py`` (``NCU_CASES``; the backward's ``NCU_BWD_CASES`` and
  flash_decode's ``NCU_DECODE_CASES``, per kernel) against the replay's global reads and writes.
- Time: this project's kernels (event-timed, through the launch harness of
  analysis/validation/calibration.toml) against the issue model on ``h200-measured``; PyTorch's
  flash-attn 2 decoding (its kernels' durations from the profiler) against ``flash_decode``
  with flash-attn's split heuristic, whose split count is checked against the grid the kernel
  ran with. flex_attention's times are shown beside ours, not modelled.

``analysis.validation.masks_doc`` renders these as docs/validation.md's "Masks" tables.
"""

from __future__ import annotations

import json

from flashio import kernels, simulator
from flashio.analysis.paths import DATA
from flashio.analysis.validation.calibration import load_calibration
from flashio.analysis.validation.gpu_data import parse_ncu_csv
from flashio.kernels.mask import block_sums
from flashio.simulator.simulate import VALIDATED

__all__ = [
    "NCU_BWD_CASES",
    "NCU_CASES",
    "NCU_DECODE_CASES",
    "NCU_PAGED_CASES",
    "block_byte_rows",
    "block_time_rows",
    "bwd_byte_rows",
    "bwd_time_rows",
    "byte_rows",
    "decode_byte_rows",
    "decode_rows",
    "flash_decode_rows",
    "ncu_schedules",
    "run_data",
    "time_rows",
]

GPU = "h200-measured"
OPTIONS = VALIDATED
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


# flash_decode over a paged cache (--paged): 16- and 256-token pages in a shuffled pool
NCU_PAGED_CASES = tuple(
    (f"{label}, {ps}-token pages", f, ps) for label, f in NCU_DECODE_CASES for ps in (16, 256)
)


def paged_shape(fields: dict, page_size: int) -> kernels.AttentionShape:
    """The profiled and timed paged shapes: NCU_BASE's with pages of ``page_size`` tokens,
    ``PagedKV.shuffled`` with seed = page size (benchmarks/masks_measure.py)."""
    f = {**NCU_BASE, **fields}
    pk = kernels.PagedKV.shuffled(f["batch"], f["kv_seq_len"], page_size, seed=page_size)
    return kernels.AttentionShape(**f, paged_kv=pk)


def _block_cases():
    """Block masks profiled (benchmarks/masks_ncu.py --block-sparse), 128 x 128 blocks at 4k."""
    bm = kernels.BlockMask
    return (
        ("random 25%", {"seq_len": 4096, "block_mask": bm.random(4096, 0.25, seed=0)}),
        ("local 2 + 1 global, causal",
         {"seq_len": 4096, "causal": True, "block_mask": bm.local(4096, 2, global_blocks=1)}),
    )  # fmt: skip


def ncu_schedules(kind: str = "forward") -> list[tuple[str, kernels.Schedule]]:
    """The profiled schedules of ``kind``: "forward", "backward", "decode", "paged" (decoding
    over a paged cache) or "block" (the block masks' forward launches, then their
    backward's)."""
    if kind == "block":
        return [
            (label, kernels.schedule(name, kernels.AttentionShape(**NCU_BASE, **f), *tiles))
            for name, tiles in (("flash2", (128, 128, 8)), ("flash2_bwd", (64, 128, 8)))
            for label, f in _block_cases()
        ]
    if kind == "paged":
        return [
            (label, kernels.schedule("flash_decode", paged_shape(f, ps)))
            for label, f, ps in NCU_PAGED_CASES
        ]
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


def run_data(name: str = "masks.json") -> dict:
    """The committed JSON of one masks_run.sh measurement (data/gpu/masks/<name>)."""
    return json.loads((DATA / "gpu" / "masks" / name).read_text())


def _ncu_launches(name: str) -> list[dict]:
    """The launches of one committed Nsight Compute CSV (data/gpu/masks/<name>)."""
    return parse_ncu_csv((DATA / "gpu" / "masks" / name).read_text())


def _bytes(metrics: dict, replayed) -> dict:
    """Bytes in and out of the SMs as Nsight Compute measured one launch (``metrics``)
    beside the replay's (``replayed``: a SimResult or one of its kernels)."""
    return {
        "read": metrics["l1tex__m_xbar2l1tex_read_bytes.sum"],
        "write": metrics["l1tex__m_l1tex2xbar_write_bytes.sum"],
        "trace_read": replayed.global_read_bytes,
        "trace_write": replayed.global_write_bytes,
    }


def byte_rows() -> list[dict]:
    """Per NCU case: measured and replayed bytes in and out of the SMs. Allowed beyond the
    trace (docs/validation.md, "Masks"): the segment table the kernel reads, one sector per SM
    and 8 segment ends; and a row of the logsumexp shorter than a sector costs the sector."""
    out = []
    for (label, sched), ln in zip(ncu_schedules(), _ncu_launches("masks_ncu.csv"), strict=True):
        res = simulator.simulate(sched, GPU)
        out.append(
            {"case": label, "shape": sched.shape, **_bytes(ln["metrics"], res),
             "ctas": sched.kernels[0].ctas}
        )  # fmt: skip
    return out


def bwd_byte_rows() -> list[dict]:
    """Per NCU backward case and kernel (pre, main, post): measured and replayed bytes in and
    out of the SMs, replayed with the issue model (whose census holds the main kernel's spill
    stores), and the bytes of dK and dV (their stores leave as halves of 32-byte sectors)."""
    launches = iter(_ncu_launches("masks_bwd_ncu.csv"))
    out = []
    for label, sched in ncu_schedules("backward"):
        res = simulator.simulate(sched, GPU, options=OPTIONS)
        sh = sched.shape
        dkdv = 2 * sh.batch * sh.n_kv_heads * sh.n_kv * sh.head_dim * sh.elem_bytes
        for k in res.kernels:
            ln = next(launches)
            out.append(
                {
                    "case": label,
                    "shape": sh,
                    "kernel": k.name,
                    "profiled": ln["kernel"],
                    **_bytes(ln["metrics"], k),
                    "dkdv": dkdv if k.name == "flash2_bwd" else 0,
                }
            )
    return out


def block_byte_rows() -> list[dict]:
    """Per block-mask NCU case and kernel (the forward's, then the backward's pre, main and
    post; the forward each backward run makes first is skipped): measured and replayed bytes
    in and out of the SMs, and the tile states the kernel reads (``table``: the Tr x Tc bytes
    the trace leaves out, in 32-byte sectors, one a CTA for the forward's row of states, one a
    visited Q block for the backward's column)."""
    launches = iter(_ncu_launches("masks_block_ncu.csv"))
    out = []
    for label, sched in ncu_schedules("block"):
        res = simulator.simulate(sched, GPU, options=OPTIONS)
        for k in res.kernels:
            ln = next(launches)
            while sched.name == "flash2_bwd" and ln["kernel"] == "flash2_fwd":
                ln = next(launches)  # the forward that made O and L
            m = ln["metrics"]
            t_q = sched.t_q if k.name == "flash2_bwd" else 1
            reads_states = k.name in ("flash2_fwd", "flash2_bwd")
            out.append(
                {
                    "case": label,
                    "schedule": sched.name,
                    "shape": sched.shape,
                    "kernel": k.name,
                    "profiled": ln["kernel"],
                    **_bytes(m, k),
                    "table": k.ctas * t_q * SECTOR if reads_states else 0,
                    "time_s": m["gpu__time_duration.sum"] * 1e-9,
                }
            )
    return out


def block_time_rows() -> list[dict]:
    """The block masks' forward and backward (data/gpu/masks/masks_block.json), measured and
    predicted by the issue model, flex_attention beside, the share of tiles kept."""
    doc = run_data("masks_block.json")
    harness = load_calibration().harness
    other = {(r["pass"], r["case"], json.dumps(r["shape"])): r for r in doc["rows"]
             if r["impl"] != "flashio"}  # fmt: skip
    out = []
    for r in doc["rows"]:
        if r["impl"] != "flashio":
            continue
        shape = kernels.AttentionShape(**r["shape"])
        name = "flash2_bwd" if r["pass"] == "bwd" else "flash2"
        sched = kernels.schedule(name, shape, r["block_q"], r["block_kv"], r["warps"])
        res = simulator.simulate(sched, GPU, options=OPTIONS)
        pred = harness.event_time([k.time_s for k in res.kernels])
        bs = block_sums(shape, sched.block_q, sched.block_kv)
        peer = other[(r["pass"], r["case"], json.dumps(r["shape"]))]
        out.append(
            {
                "pass": r["pass"],
                "case": r["case"],
                "shape": shape,
                "tiling": (sched.block_q, sched.block_kv, sched.warps),
                "measured_s": r["median_ms"] * 1e-3,
                "predicted_s": pred,
                "error": pred / (r["median_ms"] * 1e-3) - 1,
                "kept": bs.pairs / (sched.t_q * sched.t_kv),
                "other_s": peer["median_ms"] * 1e-3,
            }
        )
    return out


def time_rows(backward: bool = False) -> list[dict]:
    """This project's masked forward (or backward: its three kernels), measured and predicted,
    with flex_attention beside it and the share of visited blocks that are partial (masked
    element by element)."""
    name = "flash2_bwd" if backward else "flash2"
    doc = run_data("masks_bwd.json" if backward else "masks.json")
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


def decode_byte_rows(kind: str = "decode") -> list[dict]:
    """Per NCU decoding case and kernel (split, combine): measured and replayed bytes in and
    out of the SMs, the kernel's duration and, for the split kernel, the KV cache's bytes;
    ``kind`` "paged": the paged cache's cases (masks_paged_ncu.csv)."""
    launches = iter(_ncu_launches(f"masks_{kind}_ncu.csv"))
    out = []
    for label, sched in ncu_schedules(kind):
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
                    **_bytes(m, k),
                    "measured_s": m["gpu__time_duration.sum"] * 1e-9,
                    "predicted_s": k.time_s,
                    "cache": 2 * sh.batch * sh.n_kv_heads * sh.n_kv * sh.head_dim * sh.elem_bytes,
                }
            )
    return out


def flash_decode_rows(paged: bool = False) -> list[dict]:
    """This project's flash_decode beside PyTorch SDPA's decoding (masks_decode.json): ours
    event-timed (through the launch harness) against the model, PyTorch's kernels' profiled
    durations beside it. ``paged``: ours over a paged cache (masks_paged.json), the same step
    over a contiguous cache beside it."""
    doc = run_data("masks_paged.json" if paged else "masks_decode.json")
    harness = load_calibration().harness
    beside = {
        r["case"]: r for r in doc["rows"] if r["impl"] == ("flashio" if paged else "torch_flash")
    }
    out = []
    for r in doc["rows"]:
        if not (r["impl"].startswith("flashio_paged") if paged else r["impl"] == "flashio"):
            continue
        shape = kernels.AttentionShape(**r["shape"])
        if paged:  # the table benchmarks/masks_measure.py drew
            pk, size = kernels.PagedKV, r["page_size"]
            table = (
                pk.contiguous(shape.batch, shape.n_kv, size)
                if r["page_order"] == "contiguous"
                else pk.shuffled(shape.batch, shape.n_kv, size, seed=r["page_seed"])
            )
            shape = kernels.AttentionShape(**{**r["shape"], "paged_kv": table})
        sched = kernels.schedule("flash_decode", shape, r["block_q"], r["block_kv"], r["warps"])
        assert sched.option("num_splits") == r["num_splits"], r["case"]
        res = simulator.simulate(sched, GPU, options=OPTIONS)
        pred = harness.event_time([k.time_s for k in res.kernels])
        other = beside[r["case"]]
        out.append(
            {
                "case": r["case"],
                "impl": r["impl"],
                "shape": shape,
                "splits": r["num_splits"],
                "measured_s": r["median_ms"] * 1e-3,
                "predicted_s": pred,
                "error": pred / (r["median_ms"] * 1e-3) - 1,
                "other_s": other["median_ms"] * 1e-3,
                "other_kernels_s": sum(other.get("kernel_us", [])) * 1e-6,
            }
        )
    return out


def decode_rows() -> list[dict]:
    """PyTorch SDPA's decoding (flash-attn 2's split-KV kernel and its combine), its kernels'
    measured durations against flash_decode with flash-attn's heuristic on 132 SMs."""
    out = []
    for r in run_data()["rows"]:
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
