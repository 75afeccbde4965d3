"""``flashio demo``: the main job on one GPU, printed, saved as JSON and drawn.

It compares standard attention with FlashAttention-1 and -2 (forward and backward) on a GPT-style
shape (its headline time is the issue model's where it prices a schedule's kernels, by this
project's compiled main loops or a written program, the pipe rates' elsewhere, each row saying
which, the pipe-rate time beside it), shows the tiling rule for that GPU,
checks the seeds' headline claims against the model, and writes demo.json plus seven plots:
traffic and time per schedule, traffic against N (log-log, six schedules), a roofline, a per-SM
timeline of FlashAttention-2, traffic and time against block size, and hypothetical GPUs: shared
memory scaled, and the SM count scaled (each SM keeping its resources, the L2 and HBM the
chip's; docs/hypothetical-gpus.md). Last, attention as it runs at long context: FA2's forward
with full, causal and sliding-window masks, and one decoding step over a long KV cache.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from flashio import kernels, simulator
from flashio.analysis.closed_form.flops import recompute_ratios
from flashio.analysis.closed_form.tiling import tiling_rule
from flashio.analysis.explore import comparison as cmp
from flashio.analysis.explore import demo_masks, sweep
from flashio.analysis.explore.search import COMPILED
from flashio.analysis.present import plots, report
from flashio.analysis.present.progress import Progress
from flashio.analysis.validation import sm_scaling

# A GPT-2-medium-like layer: 16 heads of 64, 4k context, batch 2, fp16.
DEMO_SHAPE = kernels.AttentionShape(batch=2, heads=16, seq_len=4096, head_dim=64, dtype="fp16")
SCALING_NS = (256, 512, 1024, 2048, 4096)  # sequence lengths of the traffic-vs-N picture
SCALING_HEADS = 4
BLOCKS = (16, 32, 64, 128, 256)  # block sizes of the Fig. 2 (middle) picture
SCALES = (0.25, 0.5, 1.0, 2.0, 4.0)  # hypothetical GPUs: shared memory or HBM bandwidth scaled
SM_SCALES = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0)  # hypothetical GPUs: fewer SMs
# The table's headline time is the validated model's (search.COMPILED: each kernel the
# instruction census holds priced by its compiled main loop) where it prices a schedule; the
# pictures and the claims use the pipe rates throughout, so every curve and ratio compares
# schedules under one model. The long-context part is demo_masks'.


def _regime(gpu: simulator.GPUSpec, shape: kernels.AttentionShape) -> str:
    """Where the seeds' "IO drops from O(N^2) to O(N)" holds: only when M >= N*d."""
    m = gpu.smem_per_cta_bytes // shape.elem_bytes
    nd = shape.seq_len * shape.head_dim
    if m >= nd:
        return (
            f"M = {m:,} elements of SRAM per CTA >= N*d = {nd:,}: a whole K/V fits on chip, so "
            "flash traffic is linear in N here."
        )
    return (
        f"M = {m:,} elements of SRAM per CTA < N*d = {nd:,}: K and V are re-streamed, so flash "
        "traffic is Theta(N^2 d^2 / M), quadratic in N with a constant ~M/d^2 times smaller than "
        "standard attention's Theta(N^2) (the seeds' O(N) holds only when M >= N*d)."
    )


def _scaling(gpu, seq_lens, say) -> dict[str, list[dict]]:
    """Global bytes of the six schedules vs N (batch 1, SCALING_HEADS heads, d 64)."""
    out: dict[str, list[dict]] = {name: [] for name in cmp.FORWARD + cmp.BACKWARD}
    for n in seq_lens:
        shape = kernels.AttentionShape(1, SCALING_HEADS, n, 64, "fp16")
        for name in out:
            say("traffic against N", f"{name} N={n}")
            b = min(64, n)
            res = simulator.simulate(kernels.schedule(name, shape, b, b), gpu)
            out[name].append(
                {
                    "seq_len": n,
                    "global_bytes": res.global_bytes,
                    "hbm_bytes": res.hbm_bytes,
                    "time_s": res.time_s,
                }
            )
    return out


def _block_sizes(gpu, shape, say) -> list[tuple[int, int, float]]:
    """FlashAttention-2 forward traffic and time against its (square) block size."""
    points = []
    for b in BLOCKS:
        say("block sizes", f"{b} x {b}")
        try:
            res = simulator.simulate(kernels.schedule("flash2", shape, b, b), gpu)
        except simulator.CapacityError:
            continue
        points.append((b, res.global_bytes, res.time_s))
    return points


def _hypothetical(gpu, shape, say) -> list[sweep.SweepRow]:
    """Standard and flash2 forward on GPUs with scaled shared memory, blocks by the seed rule."""
    rows = []
    for g in sweep.gpu_variants(gpu, sram_scales=SCALES):
        rule = tiling_rule(g, shape.head_dim, shape.dtype)
        b = 1 << (min(rule.seed_block, shape.seq_len, 256).bit_length() - 1)
        rows += sweep.run_sweep(
            [g],
            ["standard", "flash2"],
            [shape],
            [(b, b)],
            progress=lambda i, n, s: say("scaled shared memory", s),
        )
    return rows


def _fewer_sms(gpu, shape, say) -> list[sweep.SweepRow]:
    """Standard and flash2 forward on GPUs with 1/16 .. all of ``gpu``'s SMs, default blocks."""
    return sweep.run_sweep(
        sweep.gpu_variants(gpu, sm_scales=SM_SCALES),
        ["standard", "flash2"],
        [shape],
        [(None, None)],
        progress=lambda i, n, s: say("fewer SMs", s, i, n),
    )


def _sm_claim(sms_rows, gpu, shape) -> str:
    """What the SM count does to flash2, next to the H200 measured on 8 of its SMs."""
    fa2 = sorted((r.sm_count, r.time_s) for r in sms_rows if r.schedule == "flash2")
    fa2 = [(n, t) for n, t in fa2 if t > 0]  # tilings that do not fit have no time
    if len(fa2) < 2:
        return "hypothetical GPUs with fewer SMs: flash2's default tiling does not fit this GPU."
    (n_few, t_few), (n_all, t_all) = fa2[0], fa2[-1]
    text = (
        f"hypothetical GPUs with fewer SMs: flash2 on {n_few} of {gpu.name}'s SMs takes "
        f"{t_few / t_all:.1f}x its time on {n_all} (each SM keeps its resources, the L2 and HBM "
        "stay the chip's)"
    )
    return text + _measured_on_fewer_sms(shape) + "."


def _measured_on_fewer_sms(shape) -> str:
    """The H200 measured on its fewest SMs (data/gpu/probe/sm_scaling.json, where present):
    this project's flash2 forward at ``shape``'s head dim, the longest sequence measured."""
    try:
        runs = sm_scaling.load_measurements()
    except simulator.FileError:
        return ""
    fwd = [(v["shape"].seq_len, v["tiles"], k) for k, v in runs.items()
           if v["schedule"] == "flash2" and v["shape"].head_dim == shape.head_dim]  # fmt: skip
    if not fwd:
        return ""
    label = max(fwd)[2]  # the longest sequence, then the largest tiles
    run = runs[label]
    few, full = min(run["times"]), max(run["times"])
    ratio = run["times"][few] / run["times"][full]
    return (
        f"; measured, this project's {label} on {few} of the H200's {full} SMs (a CUDA green "
        f"context) takes {ratio:.1f}x (docs/hypothetical-gpus.md)"
    )


def _claims(rows, gpu, shape) -> list[str]:
    """The seeds' headline claims, next to what the model says for this GPU and shape."""
    by = {r.schedule: r for r in rows if not r.error}
    lines = []
    if {"standard", "flash2"} <= by.keys():
        s, f = by["standard"], by["flash2"]
        lines.append(
            f"flash vs standard 'IO O(N^2) -> O(N)', '2-4x faster': here "
            f"{s.global_bytes / f.global_bytes:.1f}x fewer global bytes, "
            f"{s.time_s / f.time_s:.1f}x faster (forward)."
        )
    if {"flash1", "flash2"} <= by.keys():
        ratio = by["flash1"].time_s / by["flash2"].time_s
        heads = shape.batch * shape.heads
        text = f"'V2 about 2x faster than V1': here {ratio:.1f}x (forward)"
        if heads < gpu.sm_count:  # FA1 has one CTA per head: too few to fill the GPU
            full = kernels.AttentionShape(
                max(1, gpu.sm_count // shape.heads),
                shape.heads,
                shape.seq_len,
                shape.head_dim,
                shape.dtype,
            )
            t1, t2 = (
                simulator.simulate(
                    kernels.schedule(n, full, by[n].block_q, by[n].block_kv, by[n].warps), gpu
                ).time_s
                for n in ("flash1", "flash2")
            )
            text += (
                f" with FA1's {heads} CTAs (one per head) on {gpu.sm_count} SMs; "
                f"{t1 / t2:.1f}x at batch {full.batch}, where they fill the GPU"
            )
        lines.append(text + ".")
    rr = recompute_ratios()
    lines.append(
        f"'recompute adds about a third of the FLOPs': the backward recomputes S only, "
        f"+{float(rr.of_standard_backward):.0%} of the backward, "
        f"+{float(rr.of_standard_training):.1%} of training; a whole recomputed forward "
        f"would add {float(rr.full_forward_recompute):.1%}."
    )
    lines.append(_regime(gpu, shape))
    return lines


def _plot(rows, scaling, blocks, hypo, sms_rows, gpu, shape, out: Path) -> list[Path]:
    title = (
        f"{gpu.name}: B={shape.batch}, H={shape.heads}, N={shape.seq_len}, "
        f"d={shape.head_dim}, {shape.dtype}"
    )
    series = {k: [(p["seq_len"], p["global_bytes"]) for p in v] for k, v in scaling.items()}
    fits = [r for r in rows if not r.error]
    points = [(r.schedule, r.mma_flops / r.hbm_bytes, r.mma_flops / r.time_s) for r in fits]
    fa2 = simulator.simulate(kernels.schedule("flash2", shape), gpu, timeline=True)
    return [
        plots.comparison_bars(rows, title, out / "demo_traffic_time.png"),
        plots.traffic_vs_n(
            series,
            f"traffic vs N on {gpu.name} (batch 1, {SCALING_HEADS} heads, d=64, 64x64 blocks)",
            out / "demo_traffic_vs_n.png",
        ),
        plots.roofline(gpu, points, shape.dtype, out / "demo_roofline.png"),
        plots.timeline(fa2, out / "demo_flash2_timeline.png"),
        plots.block_sweep(
            blocks, f"flash2 forward vs block size, {title}", out / "demo_block_size.png"
        ),
        plots.gpu_sweep(
            hypo,
            "smem_per_cta_bytes",
            out / "demo_hypothetical_sram.png",
            f"scaled shared memory ({gpu.name}), blocks by B = M/(4d)",
        ),
        plots.gpu_sweep(
            sms_rows,
            "sm_count",
            out / "demo_hypothetical_sms.png",
            f"fewer SMs ({gpu.name}: each SM as it is; L2 and HBM the chip's)",
        ),
    ]


def run_demo(
    gpu: simulator.GPUSpec,
    out: Path,
    as_json: bool = False,
    shape: kernels.AttentionShape = DEMO_SHAPE,
    seq_lens: tuple[int, ...] = SCALING_NS,
) -> int:
    """Compare the six schedules on ``shape``, write demo.json and plots into ``out``."""
    t0 = time.perf_counter()
    if out.exists() and not out.is_dir():
        raise simulator.FileError(f"--out {out}: is a file; give a folder for JSON and plots")
    with Progress(quiet=as_json) as say:
        rows = cmp.compare(
            shape,
            gpu,
            cmp.FORWARD + cmp.BACKWARD,
            progress=lambda n: say("the six schedules", n),
        )
        compiled = {
            r.schedule: r
            for r in cmp.compare(
                shape,
                gpu,
                cmp.FORWARD + cmp.BACKWARD,
                progress=lambda n: say("the six schedules, compiled loops", n),
                options=COMPILED,
            )
            if r.compiled_kernels
        }
        scaling = _scaling(gpu, seq_lens, say)
        blocks = _block_sizes(gpu, shape, say)
        hypo = _hypothetical(gpu, shape, say)
        sms_rows = _fewer_sms(gpu, shape, say)
        masks = demo_masks.masks(gpu, say)
    pictures = _plot(rows, scaling, blocks, hypo, sms_rows, gpu, shape, out)
    rule = tiling_rule(gpu, shape.head_dim, shape.dtype)
    summary = {
        "gpu": gpu.name,
        "shape": shape.to_dict(),
        "tiling_rule": {
            "M_elements": rule.m_elements,
            "seed_block": rule.seed_block,
            "paper_block_q": rule.block_q,
            "paper_block_kv": rule.block_kv,
        },
        "rows": [r.to_dict() for r in rows],
        # this project's CUDA kernels priced by their compiled main loops, where the census
        # holds them: schedule -> time and TFLOP/s
        "compiled": {
            name: {
                "time_s": r.time_s,
                "tflops_per_s": r.tflops_per_s,
                "kernels": list(r.compiled_kernels),
            }
            for name, r in compiled.items()
        },
        "scaling": scaling,
        "block_sizes": [{"block": b, "global_bytes": g, "time_s": t} for b, g, t in blocks],
        "fewer_sms": [
            {"sm_count": r.sm_count, "schedule": r.schedule, "time_s": r.time_s}
            for r in sms_rows
            if not r.error
        ],
        "masks": masks,
        "claims": [
            *_claims(rows, gpu, shape),
            _sm_claim(sms_rows, gpu, shape),
            demo_masks.decode_claim(masks),
        ],
        "plots": [str(p) for p in pictures],
    }
    with simulator.atomic_write(out / "demo.json") as f:
        f.write(json.dumps(summary, indent=2))
    if as_json:
        print(json.dumps(summary, indent=2))
        return 0
    print(report.comparison_table(rows, shape, gpu, compiled))
    print(
        f"\ntiling rule B = M/(4d) on {gpu.name}, d={shape.head_dim}: M = {rule.m_elements:,} "
        f"{shape.dtype} elements; seed floor(M/4d) = {rule.seed_block}; paper "
        f"Bc = {rule.block_kv}, Br = {rule.block_q} (flashio tiling explains)"
    )
    print("\nthe seeds' claims, checked:")
    for line in summary["claims"]:
        print(f"  - {line}")
    print("\n" + demo_masks.masks_table(masks, gpu))
    print(f"\nwrote {out / 'demo.json'}")
    for p in pictures:
        print(f"wrote {p}")
    print(f"({time.perf_counter() - t0:.1f} s)")
    return 0
