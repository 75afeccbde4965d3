"""Markdown tables from the raw GPU measurements in data/gpu/ (written by benchmarks.gpu_measure
on the device). Runs without a GPU; docs/gpu.md holds its output.

    python -m benchmarks.gpu_report data/gpu
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import defaultdict
from pathlib import Path

from flashio import kernels
from flashio.simulator.trace import Op


def _key(r: dict, impl: str | None = None) -> tuple:
    fields = ("batch", "heads", "seq_len", "head_dim", "dtype", "causal")
    return (impl or r["impl"], *(r[f] for f in fields))


def _rows(doc: dict, impls: tuple[str, ...], causal=False, dtype="bf16") -> list[dict]:
    return [
        r
        for r in doc["results"]
        if r["impl"] in impls and r["causal"] == causal and r["dtype"] == dtype
    ]


def timing_table(doc: dict, impl: str, ref: str, causal=False, dtype="bf16") -> str:
    """One row per shape: each tiling's time and TFLOP/s, PyTorch's, and the best ratio."""
    torch_ms = {_key(r): r["median_ms"] for r in _rows(doc, (ref,), causal, dtype)}
    by_shape = defaultdict(list)
    for r in _rows(doc, (impl,), causal, dtype):
        by_shape[_key(r, ref)].append(r)
    out = [
        f"| N | d | B x H | {impl}: Br x Bc, warps: ms (TFLOP/s) | PyTorch flash: ms (TFLOP/s) "
        "| best / PyTorch throughput |",
        "|---|---|---|---|---|---|",
    ]
    for key, rs in by_shape.items():
        _, b, h, n, d, _, _ = key
        cells = "; ".join(
            f"{r['block_q']}x{r['block_kv']},{r['warps']}w: "
            f"{r['median_ms']:.3f} ({r['tflops']:.0f})"
            for r in rs
        )
        t = torch_ms.get(key)
        tf = rs[0]["flops"] / (t * 1e-3) / 1e12 if t else float("nan")
        best = min(r["median_ms"] for r in rs)
        ratio = f"{t / best:.2f}" if t else "not measured"
        out.append(f"| {n} | {d} | {b} x {h} | {cells} | {t:.3f} ({tf:.0f}) | {ratio} |")
    return "\n".join(out)


def standard_table(doc: dict) -> str:
    out = [
        "| N | d | B x H | Br x Bc, warps | softmax passes | qk ms | softmax ms | pv ms "
        "| total ms | TFLOP/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in _rows(doc, ("standard",)):
        qk, sm, pv = r["parts_median_ms"]
        out.append(
            f"| {r['seq_len']} | {r['head_dim']} | {r['batch']} x {r['heads']} | "
            f"{r['block_q']}x{r['block_kv']},{r['warps']}w | {r['options']['softmax_passes']} | "
            f"{qk:.3f} | {sm:.3f} | {pv:.3f} | {r['median_ms']:.3f} | {r['tflops']:.1f} |"
        )
    return "\n".join(out)


def _ncu_metrics(path: Path) -> list[dict]:
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    per_id: dict[int, dict] = defaultdict(dict)
    for row in csv.DictReader(lines[start:]):
        per_id[int(row["ID"])][row["Metric Name"]] = int(row["Metric Value"].replace(",", ""))
        per_id[int(row["ID"])]["kernel"] = row["Kernel Name"]
    return [per_id[i] for i in sorted(per_id)]


def _model_bytes(launch: dict) -> tuple[int, int]:
    """SM-side (read, write) bytes of one kernel by the schedule's own trace: LOAD events
    read; STORE and REDUCE (atomic adds) write."""
    b, h, n, d = launch["shape"]
    shape = kernels.AttentionShape(b, h, n, d, "bf16", causal=launch.get("causal", False))
    sched = kernels.schedule(launch["schedule"], shape, *launch["tiles"], **launch["options"])
    k = [ki.name for ki in sched.kernels].index(
        {"flash2_fwd": "flash2_fwd", "std_qk": "qk", "std_softmax": "softmax", "std_pv": "pv"}.get(
            launch["kernel"], launch["kernel"]
        )
    )
    ev = sched.trace().events
    ev = ev[ev["kernel"] == k]
    read = int(ev["bytes"][ev["op"] == Op.LOAD].sum())
    write = int(ev["bytes"][(ev["op"] == Op.STORE) | (ev["op"] == Op.REDUCE)].sum())
    return read, write


def ncu_table(folder: Path) -> str:
    metrics = _ncu_metrics(folder / "ncu.csv")
    launches = json.loads((folder / "ncu_launches.json").read_text())["launches"]
    out = [
        "| kernel | B, H, N, d | causal | Br x Bc, warps | SM reads measured / schedule "
        "| SM writes measured / schedule | DRAM read | DRAM write | time us |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m, ln in zip(metrics, launches, strict=True):
        assert m["kernel"] == ln["kernel"], (m["kernel"], ln["kernel"])
        if "shape" not in ln:  # the forward pass a backward run needs for O and L
            continue
        mr, mw = _model_bytes(ln)
        rd = m["l1tex__m_xbar2l1tex_read_bytes.sum"]
        wr = m["l1tex__m_l1tex2xbar_write_bytes.sum"]
        bq, bkv, w = ln["tiles"]
        out.append(
            f"| {ln['kernel']} | {', '.join(map(str, ln['shape']))} | {ln.get('causal', False)} "
            f"| {bq}x{bkv},{w}w | {rd:,} / {mr:,} | {wr:,} / {mw:,} "
            f"| {m['dram__bytes_read.sum']:,} | {m['dram__bytes_write.sum']:,} "
            f"| {m['gpu__time_duration.sum'] / 1e3:.1f} |"
        )
    return "\n".join(out)


def register_table(doc: dict) -> str:
    out = [
        "| schedule | d | Br x Bc, warps | kernel | registers (build that ran) | local bytes "
        "| ptxas via NVRTC: regs, spill st/ld | ptxas via nvcc: regs, spill st/ld |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for v in doc["variants"].values():
        df, p = v["defines"], v["ptxas"]
        if df["DTYPE_BF16"] != 1:
            continue
        for fn, a in v["nvrtc_attributes"].items():
            cells = []
            for tool in ("nvrtc", "nvcc"):
                x = p.get(tool, {}).get(fn)
                cells.append(
                    f"{x['registers']}, {x['spill_store_bytes']}/{x['spill_load_bytes']}"
                    if x
                    else "n/a"
                )
            out.append(
                f"| {v['schedule']} | {df['HEAD_DIM']} | {df['BLOCK_Q']}x{df['BLOCK_KV']},"
                f"{df['WARPS']}w | {fn} | {a['num_regs']} | {a['local_size_bytes']} "
                f"| {cells[0]} | {cells[1]} |"
            )
    return "\n".join(out)


def repeat_table(folder: Path, previous: Path) -> str:
    """Median times of the same configurations in two runs (N >= 4096), where the kernel's own
    source file is unchanged between them (its sha256 in both provenances)."""
    docs = [json.loads((f / "gpu_measure.json").read_text()) for f in (folder, previous)]
    same = {
        name
        for name, h in docs[0]["provenance"]["cuda_sources_sha256"].items()
        if docs[1]["provenance"]["cuda_sources_sha256"].get(name) == h
    }
    source = {"flash2": "flash2_fwd.cu", "flash2_bwd": "flash2_bwd.cu", "standard": "standard.cu"}

    def key(r):
        return (*_key(r), r.get("block_q"), r.get("block_kv"), r.get("warps"))

    before = {key(r): r["median_ms"] for r in docs[1]["results"]}
    out = [
        "| impl | configurations | this run / previous run, median time: min .. max |",
        "|---|---|---|",
    ]
    for impl in ("flash2", "torch_fwd", "standard", "torch_bwd"):
        if impl in source and source[impl] not in same:
            continue
        ratios = [
            r["median_ms"] / before[key(r)]
            for r in docs[0]["results"]
            if r["impl"] == impl and r["seq_len"] >= 4096 and key(r) in before
        ]
        if ratios:
            out.append(f"| {impl} | {len(ratios)} | {min(ratios):.3f} .. {max(ratios):.3f} |")
    return "\n".join(out)


def report(folder: Path) -> str:
    doc = json.loads((folder / "gpu_measure.json").read_text())
    p, c = doc["provenance"], doc["ceilings"]
    parts = [
        f"Measured on {p['gpu']} ({p['sm_count']} SMs, L2 {p['l2_bytes']:,} B), driver "
        f"{p['nvidia_smi'].split(',')[1].strip()}, CUDA runtime {p['cuda_runtime_version']}, "
        f"NVRTC {'.'.join(map(str, p['nvrtc_version']))}, CuPy {p['cupy']}, PyTorch "
        f"{p['torch']}, {p['date_utc']}. Ceilings in the same run: device copy "
        f"{c['copy_bytes_per_s'] / 1e12:.2f} TB/s (bytes read + written), bf16 GEMM "
        f"{c['gemm_m']}^3 {c['gemm_bf16_flops_per_s'] / 1e12:.0f} TFLOP/s.",
        "### Forward, bf16, non-causal",
        timing_table(doc, "flash2", "torch_fwd"),
        "### Forward, bf16, causal",
        timing_table(doc, "flash2", "torch_fwd", causal=True),
        "### Forward, fp16, non-causal",
        timing_table(doc, "flash2", "torch_fwd", dtype="fp16"),
        "### Backward, bf16, non-causal (the three kernels; the forward is not timed)",
        timing_table(doc, "flash2_bwd", "torch_bwd"),
        "### Standard attention, bf16, non-causal",
        standard_table(doc),
        "### Nsight Compute: one launch per kernel, bf16",
        ncu_table(folder),
        "### Registers and spills per kernel variant (bf16)",
        register_table(doc),
    ]
    if (folder / "previous_run" / "gpu_measure.json").exists():
        parts += [
            "### Repeatability: this run against data/gpu/previous_run (N >= 4096)",
            repeat_table(folder, folder / "previous_run"),
        ]
    return "\n\n".join(parts) + "\n"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.gpu_report", description=__doc__.split("\n\n", 1)[0]
    )
    p.add_argument(
        "folder",
        nargs="?",
        type=Path,
        default=Path("data/gpu"),
        help="the measurements (default data/gpu)",
    )
    sys.stdout.write(report(p.parse_args(argv).folder))


if __name__ == "__main__":
    main()
