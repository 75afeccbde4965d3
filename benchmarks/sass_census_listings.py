"""Instruction census of other implementations' kernels, from the SASS listings measured with
them (``python -m benchmarks.impl_measure --mode sass``, committed under data/impl/sass/).

Each listing's main loop becomes a warp program (simulator.sass_paths.program) in
data/sass/<impl>.json.gz, keyed like this project's census by the trace kernel the simulator
replays for it (``flash2_fwd``, ``flash2_bwd``), the head dim, tiling, warps, dtype and, for
kernels compiled per causal flag, ``causal``:

- ``flash-attn2``: PyTorch's flash kernels (``flash_fwd_kernel`` and
  ``flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel``, tiling from their kernel traits);
- ``triton``: this project's Triton FlashAttention-2 forward (benchmarks/triton_attention.py)
  at each tiling measured;
- ``pytorch``: eager attention's elementwise scale, masked_fill and row-softmax kernels
  (data/impl/eager/eager_sass.json.gz), each whole kernel one step, keyed by
  ``simulator.issue.eager_key``.

    python -m benchmarks.sass_census_listings
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

from benchmarks.sass_census import write
from flashio.simulator.issue import CENSUS_DIR, program_key
from flashio.simulator.sass_paths import (
    kernel_program,
    loop_copies_behind_product,
    loop_copies_overlap,
    parts,
)

DATA = Path(__file__).resolve().parents[1] / "data"
LISTINGS = DATA / "impl" / "sass"
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
        "copies_behind_product": loop_copies_behind_product(text, function, marker),
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


# PyTorch's eager kernels (data/impl/eager/eager_sass.json.gz, data/gpu/runs/eager_sass.py):
# census key -> (a substring of the profiler's kernel name, kernel-parameter constants)
EAGER = DATA / "impl" / "eager" / "eager_sass.json.gz"
# masked_fill of S (B, H, N, N_kv) by one (N, N_kv) mask: TensorIterator coalesces the two
# score dims into one and keeps the heads (the mask's stride 0 there), so its OffsetCalculator
# walks dims = 2 (its first member, the c[0x0][0x218] the unrolled loop compares against)
FILL_DIMS = {0x218: 2}
EAGER_LISTINGS = {
    f"scale {DTYPE}": ("vectorized_elementwise_kernel<8, at::native::AUnaryFunctor<c10::"
                       "BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::"
                       "MulFunctor<float> >", None),
    f"masked_fill {DTYPE}": ("masked_fill_kernel", FILL_DIMS),
    **{
        f"row_softmax warp log2={k} {DTYPE}": (
            f"softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, {k}, false, false>", None)
        for k in (10, 11)
    },
    **{
        f"row_softmax block ilp={ilp} {DTYPE}": (
            "cunn_SoftMaxForwardReg<c10::BFloat16, float, c10::BFloat16, at::native::(anonymous"
            f" namespace)::SoftMaxForwardEpilogue, long, {ilp}>", None)
        for ilp in (4, 8)
    },
}  # fmt: skip


def pytorch(listing: dict) -> dict:
    """Eager attention's elementwise and row-softmax kernels: each whole kernel one step
    (simulator.sass_paths.kernel_program), registers and shared memory from cuobjdump."""
    out = {}
    for key, (pattern, constants) in EAGER_LISTINGS.items():
        (name,) = [n for n in listing["kernels"] if pattern in n]
        k = listing["kernels"][name]
        prog = kernel_program(k["sass"], k["mangled"], key, constants)
        compiled = {"registers": int(k["REG"]), "smem_bytes": int(k["SHARED"])}
        # each thread loads scores no other thread reads, once: from HBM, not an L2 hit
        out[key] = {**prog.to_json(), "compiled": compiled, "source": name, "streams": True}
    return out


def main(argv=None) -> int:
    for impl, build, index_file in (
        ("flash-attn2", flash_attn2, LISTINGS / "torch_sass_index.json"),
        ("triton", triton, LISTINGS / "triton_sass_index.json"),
        ("pytorch", pytorch, EAGER),
    ):
        opener = gzip.open if index_file.suffix == ".gz" else open
        with opener(index_file, "rt") as f:
            index = json.load(f)
        progs = build(index)
        write(progs, CENSUS_DIR / f"{impl}.json.gz",
              generated_by="python -m benchmarks.sass_census_listings")  # fmt: skip
        print(f"{impl}: {len(progs)} programs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
