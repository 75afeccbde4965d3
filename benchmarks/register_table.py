"""The compiler's register report for this project's forward at the tilings of a grid, for the
written programs of tilings the instruction census lacks (``simulator.issue.written_registers``).

A written program's occupancy follows from its registers per thread, and the register line of
``simulator.synth_sync`` (a least-squares line over the census's compiled tilings) is 10-30
registers off where the compiler packs a tiling tighter or looser than the line: 128 x 48 with
8 warps at d = 64 gets 127 registers from NVRTC and 138 from the line, two CTAs an SM against
one. Compiling a tiling takes NVRTC under a second and needs no GPU, so the table holds NVRTC's
ptxas report (registers, spill and stack bytes per thread) of ``flash2_fwd`` at every tiling
of the grid below, compiled as CuPy compiles the kernel on the H200 (sm_90, the options of
``kernels.gpu.nvrtc_options``; bf16: fp16 builds the same program). Tilings the kernel's own
checks reject (tiles over 227 KiB of shared memory at d = 256) are listed apart, with the
compiler's message.

    python -m benchmarks.register_table [--check]

Writes data/sass/flashio-registers.json; ``--check`` compiles again and compares.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import sys

from benchmarks import nvrtc
from benchmarks.ptxas import nvrtc_report
from flashio import kernels
from flashio.kernels.gpu import CUDA_DIR
from flashio.simulator.issue import register_table_path

HEAD_DIMS = (64, 96, 128, 256)
WARPS = (2, 4, 6, 8, 12)
ROWS_PER_WARP = (16, 32)
BLOCK_KV = tuple(range(16, 129, 16))
KERNEL = "flash2_fwd"
DTYPE = "bf16"
FIELDS = ("registers", "spill_store_bytes", "spill_load_bytes", "stack_bytes")
SOURCES = ("flash2_fwd.cu", "mma_tiles.cu", "key_range.cu")  # the forward and what it includes


def sources_sha256() -> dict[str, str]:
    """The forward's CUDA sources the table was compiled from: a table is current while they
    are unchanged (tests/test_synth_sync.py)."""
    return {n: hashlib.sha256((CUDA_DIR / n).read_bytes()).hexdigest() for n in SOURCES}


def compile_report(head_dim: int, block_q: int, block_kv: int, warps: int) -> dict:
    """NVRTC's ptxas report of the forward at one tiling (FIELDS)."""
    shape = kernels.AttentionShape(batch=1, heads=1, seq_len=4096, head_dim=head_dim, dtype=DTYPE)
    report = nvrtc_report(kernels.schedule("flash2", shape, block_q, block_kv, warps), KERNEL)
    return {f: int(report[f]) for f in FIELDS}


def table(progress=print) -> tuple[list[dict], list[dict]]:
    """(entries, rejected): each tiling of the grid with its report, or with the compiler's
    first error line."""
    rows, rejected = [], []
    for d in HEAD_DIMS:
        for w in WARPS:
            for rpw in ROWS_PER_WARP:
                for bkv in BLOCK_KV:
                    tiling = {"head_dim": d, "block_q": rpw * w, "block_kv": bkv, "warps": w}
                    try:
                        row = {**tiling, **compile_report(*tiling.values())}
                        rows.append(row)
                    except nvrtc.NvrtcError as e:
                        error = next(x for x in str(e).splitlines() if "error" in x)
                        row = {**tiling, "error": error.split("error: ", 1)[-1]}
                        rejected.append(row)
                    progress(f"{len(rows) + len(rejected)}: {row}")
    return rows, rejected


def dumps(doc: dict) -> str:
    """``doc`` as JSON, a tiling to a line."""
    lists = {k: v for k, v in doc.items() if isinstance(v, list)}
    head = json.dumps({k: v for k, v in doc.items() if k not in lists}, indent=1)[:-2]
    body = [
        f'"{k}": [\n' + ",\n".join(json.dumps(r) for r in rows) + "\n]"
        for k, rows in lists.items()
    ]
    return head + ",\n" + ",\n".join(body) + "\n}\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed table")
    args = ap.parse_args(argv)
    if not nvrtc.available():
        print("NVRTC not found: pip install nvidia-cuda-nvrtc (of the GPU's CUDA version)")
        return 2
    path = register_table_path("flashio")
    rows, rejected = table(progress=lambda s: print(s, file=sys.stderr, flush=True))
    if args.check:
        same = json.loads(path.read_text())["entries"] == rows
        print("table matches the committed file" if same else "table differs")
        return 0 if same else 1
    major, minor = nvrtc.version()
    doc = {
        "generated_by": "python -m benchmarks.register_table",
        "compiler": f"NVRTC {major}.{minor}, the options of kernels.gpu.nvrtc_options",
        "date": datetime.date.today().isoformat(),
        "cuda_sources_sha256": sources_sha256(),
        "kernel": KERNEL,
        "dtype": DTYPE,
        "entries": rows,
        "rejected": rejected,
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(dumps(doc))
    tmp.replace(path)
    print(f"wrote {len(rows)} tilings ({len(rejected)} rejected by the kernel) to {path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
