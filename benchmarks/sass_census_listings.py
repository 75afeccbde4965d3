"""Instruction census of other implementations' kernels, from the SASS listings measured with
them (``benchmarks/impl_measure.py --mode sass``, committed under data/impl/sass/).

Each listing's main loop becomes a warp program (simulator.sass.program) in
data/sass/<impl>.json.gz, keyed like this project's census by the trace kernel the simulator
replays for it (``flash2_fwd``, ``flash2_bwd``), the head dim, tiling, warps, dtype and, for
kernels compiled per causal flag, ``causal``:

- ``flash-attn2``: PyTorch's flash kernels (``flash_fwd_kernel`` and
  ``flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel``, tiling from their kernel traits);
- ``triton``: this project's Triton FlashAttention-2 forward (benchmarks/triton_attention.py)
  at each tiling measured.

    python -m benchmarks.sass_census_listings
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

from benchmarks.sass_census import write
from flashio.simulator.issue import CENSUS_DIR, program_key
from flashio.simulator.sass import loop_copies_overlap, parts

LISTINGS = Path(__file__).resolve().parents[1] / "data" / "impl" / "sass"
DTYPE = "bf16"  # every listing was compiled for, and measured in, bf16


def _entry(
    text: str, function: str, key: str, marker: str, regs: int, smem=None, **more
) -> dict:  # fmt: skip
    """A census entry; ``more``: further facts of the compiled kernel (``local_bytes`` per
    thread, ``carveout``)."""
    progs = parts(text, function, name=key, marker=marker)
    compiled = {"registers": regs} | ({"smem_bytes": int(smem)} if smem else {}) | more
    return {
        **progs["loop"].to_json(),
        "copies_overlap": loop_copies_overlap(text, function, marker),
        "compiled": compiled,
        "prologue": progs["prologue"].to_json(),
        "epilogue": progs["epilogue"].to_json(),
    }


def flash_attn2(index: dict) -> dict:
    out = {}
    for e in index["torch_flash"]:
        sig = e["signature"]
        kernel, traits = sig["kernel"], sig.get("traits") or {}
        if kernel == "flash_fwd_kernel":
            trace_kernel = "flash2_fwd"
        elif kernel == "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel":
            trace_kernel = "flash2_bwd"
        else:  # the backward's dO.O row sums and dQ conversion: no tensor-core loop
            continue
        flags = sig.get("flags") or {}
        key = program_key(
            trace_kernel, traits["kHeadDim"], traits["kBlockM"], traits["kBlockN"],
            traits["kNWarps"], DTYPE, causal=bool(flags.get("Is_causal")),
        )  # fmt: skip
        text = gzip.open(LISTINGS / e["file"], "rt").read()
        # cuobjdump -res-usage's STACK: the local memory (stack frame) per thread
        out[key] = _entry(
            text, e["mangled"], key, "HMMA", int(e.get("regs") or e["REG"]),
            local_bytes=int(e.get("STACK", 0)),
        )  # fmt: skip
    return out


def triton(index: dict) -> dict:
    out = {}
    for e in index["triton"]:
        if e.get("impl") != "triton_fa":
            continue
        bm, bn, w, _stages = e["tiling"]
        key = program_key("flash2_fwd", e["head_dim"], bm, bn, w, DTYPE, causal=e["causal"])
        text = gzip.open(LISTINGS / e["file"], "rt").read()
        k = e["kernel"]  # its launch's shared memory: the pipeline's stages
        # Triton's n_spills is its local memory per thread over 4 (the launcher divides
        # CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES by 4; "spills" holds the bytes); above 48 KiB of
        # shared memory its launcher sets PREFER_SHARED: the largest carve-out
        big = (k.get("smem_bytes") or 0) > 48 * 1024
        out[key] = _entry(
            text, k["name"], key, "HGMMA", int(k["regs"]), k.get("smem_bytes"),
            local_bytes=int(k.get("spills", 0)), **({"carveout": "max"} if big else {}),
        )  # fmt: skip
    return out


def main(argv=None) -> int:
    for impl, build, index_file in (
        ("flash-attn2", flash_attn2, "torch_sass_index.json"),
        ("triton", triton, "triton_sass_index.json"),
    ):
        index = json.loads((LISTINGS / index_file).read_text())
        progs = build(index)
        write(progs, CENSUS_DIR / f"{impl}.json.gz",
              generated_by="python -m benchmarks.sass_census_listings")  # fmt: skip
        print(f"{impl}: {len(progs)} programs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
