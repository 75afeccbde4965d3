"""The Hopper forward's builds launched one at a time, for Nsight Compute: their cycles.

The H200 runs the Hopper forward at the board's power limit once it has run back to back for
about 50 ms, at a clock that differs between builds (kernel_clock.py), so the validation's
timings (benchmarks/hopper_measure.py) mix each build's cycles with its clock. Cycles do not
depend on the clock: each build of hopper_measure.VARIANTS (not the persistent ones) at every
shape of its head dims (B = 1, H = 16, bf16, N = 1024..16384, causal and not) is launched
twice, the second launch the one read, so that Nsight Compute's sm__cycles_elapsed gives the
cycles of each row of docs/validation.md's flashio-hopper family.

    ncu --clock-control none --csv --metrics ... -k regex:hopper_fwd \\
        python data/gpu/probe/hopper_cycles.py --order DIR/hopper_cycles_launches.json

Writes the launch order (build, head dim, N, causal; two launches each) to --order.

``--cta-cost``: instead, three builds (d = 128, 128x128 and 128x176 with both overlaps; d =
64, 128x128 without) at N = 128 to 2816 (one to 22 steps a CTA) with as many heads as make
the grid exactly one round of 132 CTAs, and ten rounds: cycles per round against steps give
a CTA's fixed cost, and one round against ten the kernel's start against a CTA's.

``--persistent``: instead, each persistent build of hopper_measure.VARIANTS (a CTA per SM taking
every 132nd tile) and, launched just before it, the same build with a CTA a tile, at every
validation shape: the cycles of the two launch modes, which the validation's timings compare
at the clocks the power limit left them.

``--skeleton`` (with ``--cta-cost``): the same tilings built with ``SKELETON=1``
(kernels/cuda/hopper_fwd.cu): every copy, barrier and store of the kernel, and no
arithmetic: the consumers wait for each K/V block and free it. What a CTA costs beside its
matrix products and softmax, measured without them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks.hopper_measure import VARIANTS
from flashio import kernels
from flashio.kernels import gpu, hopper

SEQ_LENS = (1024, 2048, 4096, 8192, 16384)
LAUNCHES = 2  # the first warms the caches and the clock; the second is read
# --cta-cost: (head dim, block_kv, overlap) of 128-row builds; N (multiples of 128 whose tile
# count divides 132); rounds of 132 CTAs
CTA_COST_BUILDS = ((128, 128, "both"), (128, 176, "both"), (64, 128, "none"))
CTA_COST_SEQ_LENS = (128, 256, 512, 1408, 2816)
CTA_COST_ROUNDS = (1, 10)
SMS = 132


def cta_cost_shapes():
    """(build, heads, N) of --cta-cost: heads x N / 128 = rounds x 132 CTAs."""
    for d, bkv, overlap in CTA_COST_BUILDS:
        for n in CTA_COST_SEQ_LENS:
            for rounds in CTA_COST_ROUNDS:
                yield (d, bkv, overlap), rounds * SMS * 128 // n, n


def validation_builds(head_dims, seq_lens, masks):
    """(schedule, launch-order row) of every non-persistent build at the validation shapes."""
    for b in (v for v in VARIANTS if not v.persistent):
        for d in (d for d in b.dims if not head_dims or d in head_dims):
            for causal in masks:
                for n in seq_lens:
                    sh = kernels.AttentionShape(1, 16, n, d, "bf16", causal=causal)
                    impl = hopper.description(b.block_q, b.overlap, b.stages, False)
                    warps = 4 * (b.block_q // 64 + 1)
                    sched = kernels.Schedule("flash2", sh, b.block_q, b.block_kv, warps, impl=impl)
                    yield sched, {"label": b.label, "block_q": b.block_q, "block_kv": b.block_kv,
                                  "overlap": b.overlap, "stages": b.stages, "head_dim": d,
                                  "seq_len": n, "causal": causal}  # fmt: skip


def persistent_builds(seq_lens, masks):
    """(schedule, launch-order row) of --persistent: each persistent build at the validation
    shapes, after the same build with a CTA a tile."""
    for b in (v for v in VARIANTS if v.persistent):
        for d in b.dims:
            for causal in masks:
                for n in seq_lens:
                    for persistent in (False, True):
                        sh = kernels.AttentionShape(1, 16, n, d, "bf16", causal=causal)
                        impl = hopper.description(b.block_q, b.overlap, b.stages, persistent)
                        warps = 4 * (b.block_q // 64 + 1)
                        sched = kernels.Schedule("flash2", sh, b.block_q, b.block_kv, warps,
                                                 impl=impl)  # fmt: skip
                        yield sched, {"block_q": b.block_q, "block_kv": b.block_kv,
                                      "overlap": b.overlap, "stages": b.stages, "head_dim": d,
                                      "seq_len": n, "causal": causal,
                                      "persistent": persistent}  # fmt: skip


def cta_cost_builds(skeleton: bool = False):
    """(schedule, launch-order row) of --cta-cost (``skeleton``: each build without softmax
    overlap, which the skeleton does not have)."""
    for (d, bkv, overlap), heads, n in cta_cost_shapes():
        overlap = "none" if skeleton else overlap
        sh = kernels.AttentionShape(1, heads, n, d, "bf16")
        impl = hopper.description(128, overlap, 2, False)
        sched = kernels.Schedule("flash2", sh, 128, bkv, 12, impl=impl)
        yield sched, {"block_q": 128, "block_kv": bkv, "overlap": overlap, "stages": 2,
                      "head_dim": d, "heads": heads, "seq_len": n, "causal": False,
                      "skeleton": skeleton}  # fmt: skip


def compile_skeleton(sched):
    """``sched``'s Hopper forward built with SKELETON=1 (no arithmetic), launched as it is."""
    built = hopper.compile_hopper(sched)
    code = (gpu.CUDA_DIR / "hopper_fwd.cu").read_text()
    options = hopper.compile_options((*hopper.defines(sched), ("SKELETON", 1)))
    return hopper.CompiledHopper(sched, gpu._module(code, options), built.launches)


def launch_alone(sched, rng, skeleton: bool = False) -> None:
    """Compile ``sched``'s kernel (``skeleton``: without its arithmetic) and launch it
    LAUNCHES times on random bf16 inputs."""
    import cupy

    sh = sched.shape
    comp = compile_skeleton(sched) if skeleton else gpu.compile_schedule(sched)
    x = rng.standard_normal((3, sh.batch, sh.heads, sh.seq_len, sh.head_dim)).astype(np.float32)
    bits = [cupy.asarray(a.view(np.uint32) >> 16).astype(cupy.uint16) for a in x]
    bufs = comp.alloc(*bits)
    for _ in range(LAUNCHES):
        comp.launch(bufs)
    cupy.cuda.runtime.deviceSynchronize()
    del bufs
    cupy.get_default_memory_pool().free_all_blocks()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--order", type=Path, required=True, help="where to write the launch order")
    ap.add_argument("--head-dim", type=int, nargs="*", help="only these head dims")
    ap.add_argument("--seq-len", type=int, nargs="*", default=SEQ_LENS, help="only these N")
    ap.add_argument("--causal", choices=("no", "yes", "both"), default="both")
    ap.add_argument("--cta-cost", action="store_true", help="the CTA fixed-cost shapes instead")
    ap.add_argument("--skeleton", action="store_true", help="with --cta-cost: no arithmetic")
    twins = "the persistent builds, each after its build with a CTA a tile"
    ap.add_argument("--persistent", action="store_true", help=twins)
    args = ap.parse_args(argv)
    if args.skeleton and not args.cta_cost:
        ap.error("--skeleton goes with --cta-cost")
    if args.persistent and args.cta_cost:
        ap.error("--persistent and --cta-cost are two runs")
    masks = {"no": (False,), "yes": (True,), "both": (False, True)}[args.causal]
    if args.cta_cost:
        builds = cta_cost_builds(args.skeleton)
    elif args.persistent:
        builds = persistent_builds(args.seq_len, masks)
    else:
        builds = validation_builds(args.head_dim, args.seq_len, masks)
    rng = np.random.default_rng(0)
    order = []
    for sched, row in builds:
        launch_alone(sched, rng, args.skeleton)
        order.append({**row, "launches": LAUNCHES})
    args.order.write_text(json.dumps({"launches": order}, indent=1))


if __name__ == "__main__":
    main()
