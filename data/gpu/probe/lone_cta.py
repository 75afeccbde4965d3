"""Where a CTA alone on its SM spends its time: this project's kernels for Nsight Compute's
per-instruction warp-state sampling.

occupancy.json has the 64x64, 4-warp forward at d = 64 taking 0.560 ms with one CTA per SM
(its shared memory padded), where the warp replay's step for a CTA alone gives 0.419 ms: a
step of about 1,890 cycles on the H200 against the replay's 1,414. The backward of the same
tiling agrees within 3.4% alone. This probe launches those kernels exactly as occupancy.py
times them (B x H = 1 x 16, N = 4096, bf16; k = 1 .. native CTAs per SM), each twice (the
second launch is the one to read), so that Nsight Compute's SourceCounters section samples
where each instruction's warps wait, alone and beside other CTAs.

    ncu --clock-control none --section SourceCounters ... -k regex:'^flash2_(fwd|bwd)$' \\
        python data/gpu/probe/lone_cta.py --order DIR/lone_cta_launches.json

Writes the launch order (schedule, head dim, tiles, k, CTAs per SM the driver reports) to
--order; data/gpu/runs/lone_cta_run.sh exports the per-instruction samples.

    python data/gpu/probe/lone_cta.py --summary DIR/lone_cta_source.csv.gz

prints, per profiled launch, each instruction class's share of the warp-state samples beside
its share of the replay's cycles at the same code for that kernel alone
(``simulator.warp_replay.pc_cycles``; the census's NVRTC build), and the instructions with the
most samples. Runs without a GPU.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import gzip
import io
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from occupancy import padded, resident

from benchmarks.gpu_measure import _random_inputs
from flashio import kernels
from flashio.kernels import gpu

LAUNCHES = 2  # the first warms the caches and the clock; the second is read
# (schedule, head dim, (block_q, block_kv, warps)): the forward that is 25% too fast alone,
# the d = 128 forward (8% alone), and the backward that is right alone (a control)
CONFIGS = (
    ("flash2", 64, (64, 64, 4)),
    ("flash2", 128, (64, 64, 4)),
    ("flash2_bwd", 64, (64, 64, 4)),
)


def launches():
    """(compiled schedule with its main kernel padded to k CTAs an SM, launch-order row)."""
    for name, d, tiles in CONFIGS:
        shape = kernels.AttentionShape(1, 16, 4096, d, "bf16")
        c = gpu.compile_schedule(kernels.schedule(name, shape, *tiles))
        kernel = "flash2_bwd" if name == "flash2_bwd" else "flash2_fwd"
        main = next(i for i, ln in enumerate(c.launches) if ln.function == kernel)
        fn = c.function(kernel)
        smem = c.launches[main].smem_bytes
        fn.max_dynamic_shared_size_bytes = max(fn.max_dynamic_shared_size_bytes, smem)
        native = resident(fn, tiles[2], smem)
        for k in range(1, native + 1):
            lns = list(c.launches)
            lns[main] = padded(lns[main], k) if k < native else lns[main]
            ck = dataclasses.replace(c, launches=tuple(lns))
            smem_k = ck.launches[main].smem_bytes
            fn.max_dynamic_shared_size_bytes = max(fn.max_dynamic_shared_size_bytes, smem_k)
            row = {"schedule": name, "head_dim": d, "tiles": list(tiles), "k": k,
                   "ctas_per_sm": resident(fn, tiles[2], smem_k), "smem_bytes": smem_k,
                   "kernel": kernel, "ctas": ck.launches[main].grid}  # fmt: skip
            yield ck, row


def source_tables(text: str) -> list[tuple[str, list[dict]]]:
    """(kernel name, per-instruction rows) of each profiled launch in an ``ncu --page source
    --csv`` export, in launch order. A table starts at its ``"Kernel Name"`` row; its header
    row names a ``Source`` column. Nsight Compute 2025.3 writes every launch's table twice in
    a row (lone_cta_source.csv.gz: 32 tables for 16 launches, each pair identical to the
    byte); when all tables pair up so, one of each pair is kept."""
    tables: list[tuple[str, list[dict]]] = []
    kernel, header = "", None
    for row in csv.reader(io.StringIO(text)):
        if row[:1] == ["Kernel Name"]:
            kernel, header = row[1], None
        elif "Source" in row and any("Sampling" in c for c in row):
            header = row
            tables.append((kernel, []))
        elif header is not None and len(row) == len(header):
            tables[-1][1].append(dict(zip(header, row, strict=True)))
    if len(tables) % 2 == 0 and tables[0::2] == tables[1::2]:
        tables = tables[0::2]
    return tables


def read_launches(tables: list, order: list[dict]) -> list[tuple[dict, list[dict]]]:
    """(launch-order row, table) of each configuration's read launch, its last
    (``resident_ctas.read_launches``: a table of another kernel is skipped)."""
    from flashio.analysis.validation.resident_ctas import read_launches as pick

    picked = pick([k for k, _ in tables], order)
    return [(r, tables[i][1]) for r, i in zip(order, picked, strict=True)]


def _samples(row: dict) -> float:
    col = next(c for c in row if "Sampling" in c and "All" in c)
    return float(row[col].replace(",", "") or 0)


def class_shares(table: list[dict]) -> dict[str, float]:
    """Each instruction class's share of a launch's warp-state samples (``sass.classify`` of
    the opcode in the ``Source`` column)."""
    from flashio.simulator.sass import classify

    by: dict[str, float] = {}
    for row in table:
        text = row["Source"].split()
        op = next((w for w in text if not w.startswith("@")), "")
        by[classify(op)] = by.get(classify(op), 0.0) + _samples(row)
    total = sum(by.values()) or 1.0
    return {c: v / total for c, v in by.items()}


def replay_shares(
    key: str, ctas: int, impl: str = "flashio", warps: int = 4, turns: int = 0
) -> dict[str, float]:
    """Each class's share of the replay's cycles at the census program ``key`` of ``impl``,
    with ``ctas`` CTAs of ``warps`` warps an SM (``turns``: ``warp_replay.first_turn``)."""
    from flashio import simulator
    from flashio.simulator import issue
    from flashio.simulator.sass import CLASSES
    from flashio.simulator.warp_replay import pc_cycles

    model = issue.issue_model(simulator.load_gpu("h200-measured"))
    prog = issue._program(key, impl)
    pc = pc_cycles(prog, model, warps, ctas, turns=turns)
    by: dict[str, float] = {}
    for c, v in zip(prog.klass, pc, strict=True):
        by[CLASSES[c]] = by.get(CLASSES[c], 0.0) + v
    return {c: v / pc.sum() for c, v in by.items()}


def summary(path: Path, order_path: Path | None = None) -> str:
    raw = path.read_bytes()
    tables = source_tables((gzip.decompress(raw) if path.suffix == ".gz" else raw).decode())
    order_path = order_path or path.with_name("lone_cta_launches.json")
    lines = []
    for r, table in read_launches(tables, json.loads(order_path.read_text())["launches"]):
        bq, bkv, w = r["tiles"]
        key = f"{r['kernel']} d={r['head_dim']} {bq}x{bkv} w={w} bf16"
        gpu, model = class_shares(table), replay_shares(key, r["ctas_per_sm"])
        lines.append(f"{key}, {r['ctas_per_sm']} CTA(s) an SM: class, GPU samples, replay cycles")
        for c in sorted(set(gpu) | set(model), key=lambda c: -gpu.get(c, 0.0)):
            lines.append(f"  {c:8s} {gpu.get(c, 0.0):6.1%} {model.get(c, 0.0):6.1%}")
        top = sorted(table, key=_samples, reverse=True)[:8]
        lines += [f"    {_samples(t):8.0f}  {t['Source'][:70]}" for t in top]
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--order", type=Path, help="where to write the launch order")
    ap.add_argument("--summary", type=Path, help="summarize an exported source page instead")
    args = ap.parse_args(argv)
    if args.summary:
        print(summary(args.summary))
        return
    if args.order is None:
        ap.error("give --order (to launch) or --summary (to read an export)")
    import cupy

    order = []
    for ck, row in launches():
        sh = ck.sched.shape
        n_in = 4 if row["schedule"] == "flash2_bwd" else 3
        dims = (sh.batch, sh.heads, sh.seq_len, sh.head_dim)
        bufs = ck.alloc(*_random_inputs(dims, n_in, sh.dtype))
        for _ in range(LAUNCHES):
            ck.launch(bufs)
        cupy.cuda.runtime.deviceSynchronize()
        del bufs
        cupy.get_default_memory_pool().free_all_blocks()
        order.append({**row, "launches": LAUNCHES, "elements": math.prod(dims)})
        print(row, flush=True)
    args.order.write_text(json.dumps({"launches": order}, indent=1))


if __name__ == "__main__":
    main()
