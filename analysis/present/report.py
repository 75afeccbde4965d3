"""Plain-text tables for people (the CLI's default output)."""

from __future__ import annotations

from flashio.simulator import issue

GB = 1e9


def table(header: list[str], rows: list[list[str]]) -> str:
    """Right-aligned columns (first column left-aligned) under a header and a rule."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]

    def line(cells):
        out = [str(cells[0]).ljust(widths[0])]
        out += [str(c).rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join(out)

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *map(line, rows)])


def gpu_table(specs) -> str:
    rows = [
        [
            s.name,
            s.sm_count,
            f"{s.clock_hz / 1e9:.2f}",
            f"{s.smem_per_sm_bytes // 1024}",
            f"{s.smem_per_cta_bytes // 1024}",
            f"{s.l2_bytes / 2**20:.0f}",
            f"{s.hbm_bandwidth_bytes_per_s / 1e12:.2f}",
            f"{s.hbm_efficiency:.2f}",
            f"{s.tensor_fp16_flops_per_s / 1e12:.0f}",
            f"{s.fp32_flops_per_s / 1e12:.1f}",
        ]
        for s in specs
    ]
    header = [
        "gpu",
        "SMs",
        "GHz",
        "smem/SM KiB",
        "smem/CTA KiB",
        "L2 MiB",
        "HBM TB/s",
        "HBM eff",
        "fp16 TFLOP/s",
        "fp32 TFLOP/s",
    ]
    return table(header, rows)


def _shape_line(shape) -> str:
    return shape.describe()


def mask_line(sched) -> str | None:
    """What the mask leaves of the work (None without one): allowed query-key pairs, and for
    the flash schedules the visited blocks and how many are partial (computed whole, masked
    element by element)."""
    from flashio.analysis.closed_form.bounds import work
    from flashio.analysis.closed_form.io import block_sums
    from flashio.kernels.registry import spec

    sh = sched.shape
    if not (sh.causal or sh.variant):
        return None
    pairs, every = work(sh), sh.seq_len * sh.n_kv
    text = f"mask          {pairs:,} of {every:,} query-key pairs per head ({pairs / every:.1%})"
    if spec(sched.name).every_tile:
        where = "a masked_fill kernel" if dict(sched.options).get("unfused") else "its softmax"
        return text + f"; standard attention computes every score and masks in {where}"
    bs = block_sums(sh, sched.block_q, sched.block_kv)
    partial = bs.pairs - bs.full_pairs
    return (
        text + f"; {bs.pairs:,} of {sched.t_q * sched.t_kv:,} blocks visited, {partial:,} "
        "of them partial (computed whole, masked element by element)"
    )


def comparison_table(rows, shape, gpu, compiled=None) -> str:
    """The comparison of ``rows``; ``compiled`` (optional, by schedule): the same schedules
    simulated with the issue model. With it the headline time is the issue model's wherever
    it priced a schedule's kernels with tensor-core steps (by their compiled main loops, or a
    forward's written program), the pipe rates' elsewhere, and the table says which and
    keeps the pipe-rate time beside it."""
    fits = [r for r in rows if not r.error]
    header = ["schedule", "Br x Bc", "warps", "GFLOP", "global GB", "HBM GB", "time ms", "TFLOP/s"]
    if compiled is not None:
        header += ["priced by", "pipe-rate ms"]
    header += ["CTAs/SM (limit)", "bound"]
    body = []
    for r in fits:
        c = (compiled or {}).get(r.schedule)
        head = c if c is not None and c.compiled_kernels else r
        line = [
            r.schedule,
            f"{r.block_q}x{r.block_kv}",
            r.warps,
            f"{r.mma_flops / 1e9:.1f}",
            f"{r.global_bytes / GB:.3f}",
            f"{r.hbm_bytes / GB:.3f}",
            f"{head.time_s * 1e3:.3f}",
            f"{head.tflops_per_s:.0f}",
        ]
        if compiled is not None:
            line += [_row_priced_by(head), f"{r.time_s * 1e3:.3f}"]
        body.append([*line, f"{head.ctas_per_sm} ({head.occupancy_limiter})", head.bound])
    extra = 2 if compiled is not None else 0
    body += [
        [r.schedule, f"{r.block_q}x{r.block_kv}", r.warps, *["-"] * (6 + extra), "does not fit"]
        for r in rows
        if r.error
    ]
    notes = "".join(f"\n{r.schedule}: {r.error}" for r in rows if r.error)
    if compiled is not None:
        notes += (
            "\ntime ms: the issue model (docs/model.md) where it prices the schedule's kernels: "
            "this project's CUDA kernels by their compiled main loops, a forward the census "
            "lacks by its written program; the pipe rates elsewhere (no such kernel: every "
            "pipe at its peak, faster than any kernel runs). pipe-rate ms: every schedule at "
            "the pipe rates, the one model of the pictures and the claims"
        )
    return f"{gpu.name}: {_shape_line(shape)}\n\n" + table(header, body) + notes


def _row_priced_by(row) -> str:
    """How a comparison row's time was priced: its kernels' census keys."""
    kinds = {_priced_kind(k.census_key) for k in row.result.kernels} if row.result else set()
    for kind in ("written program", "compiled loop"):
        if kind in kinds:
            return kind
    return "pipe rates"


def _priced_kind(census_key: str) -> str:
    """What priced a kernel's steps: its compiled loop, a written program or the pipe rates."""
    if not census_key:
        return "pipe rates"
    return "written program" if census_key.startswith("synthetic") else "compiled loop"


def _priced_by(census_key: str) -> str:
    kind = _priced_kind(census_key)
    return kind if not census_key else f"{kind} ({census_key})"


def options_line(sched) -> str:
    """The schedule's options, and for a split count who chose it (flash_decode)."""
    opts = dict(sched.options)
    if "split_heuristic" in opts:
        who = (
            f"flash-attn's heuristic for {opts['sm_count']} SMs"
            if opts["split_heuristic"]
            else "given"
        )
        return f", num_splits={opts['num_splits']} ({who})"
    return "".join(f", {k}={v}" for k, v in opts.items())


def result_text(sched, res, gpu) -> str:
    lines = [
        f"{sched.name} on {gpu.name}: {_shape_line(sched.shape)}, "
        f"block_q={sched.block_q}, block_kv={sched.block_kv}, warps={sched.warps}"
        + options_line(sched)
        + ("" if sched.impl is None else f", implementation {sched.implementation.name}"),
        "",
        f"time          {res.time_s * 1e3:.4f} ms ({res.cycles:,.0f} cycles), bound: {res.bound}",
        f"global bytes  read {res.global_read_bytes:,}  write {res.global_write_bytes:,}",
        f"HBM bytes     read {res.hbm_read_bytes:,}  write {res.hbm_write_bytes:,}"
        f"  (dirty in L2 at end: {res.l2_dirty_bytes_at_end:,})",
        f"FLOPs         matmul {res.mma_flops:,}  elementwise {res.elementwise_flops:,}"
        f"  exp {res.exps:,}",
        f"shared memory peak {res.sram_peak_bytes:,} B per CTA",
        *filter(None, [mask_line(sched)]),
        "",
    ]
    krows = [
        [
            k.name,
            k.ctas,
            k.waves,
            f"{k.occupancy.ctas_per_sm} ({k.occupancy.limiter})",
            k.occupancy.regs_per_thread,
            f"{k.smem_peak_bytes:,}",
            f"{k.time_s * 1e3:.4f}",
            _priced_by(k.census_key),
        ]
        for k in res.kernels
    ]
    header = [
        "kernel",
        "CTAs",
        "waves",
        "CTAs/SM (limit)",
        "regs",
        "smem B",
        "time ms",
        "priced by",
    ]
    lines.append(table(header, krows))
    lines.append("")
    trows = [
        [
            t.name,
            f"{t.global_read_bytes:,}",
            f"{t.global_write_bytes:,}",
            f"{t.hbm_read_bytes:,}",
            f"{t.hbm_write_bytes:,}",
        ]
        for t in res.tensors
    ]
    lines.append(table(["tensor", "global read", "global write", "HBM read", "HBM write"], trows))
    lines.append("")
    util = "  ".join(f"{k} {v:.0%}" for k, v in res.utilization.items())
    lines.append(f"busy: {util}")
    spilled = [k for k in res.kernels if k.occupancy.spilled_regs_per_thread]
    for k in spilled:
        lines.append(
            f"warning: kernel {k.name} needs {k.occupancy.spilled_regs_per_thread} more "
            "registers per thread than the GPU allows; they spill to local memory, charged "
            "as one store and one reload per outer-loop step (tensor 'local (register "
            "spills)' above; docs/model.md, Register spills)"
        )
    if res.sampling is not None and res.sampling.replayed_fraction < 1:
        smp = res.sampling
        lines.append(
            f"sampled: {smp.replayed_fraction:.1%} of the CTAs replayed (a prefix), "
            f"the rest extended from the steady state; estimated error: time "
            f"{smp.time_error:.2%}, HBM bytes {smp.hbm_error:.2%} (simulator.sampled)"
        )
        if smp.unseen_waves:
            lines.append(
                f"sampled: {smp.unseen_waves} wave(s) of a kind the prefix never replayed, "
                "extended from a coarser class: their error is not in the estimate "
                '(docs/model.md, "Where the HBM estimate falls short")'
            )
    for k in res.kernels:
        if issue.would_spill(k.census_key):
            lines.append(
                f"warning: kernel {k.name}'s written program needs more registers than the GPU "
                "allows (the count, in 'priced by'); the compiler spills what does not fit, "
                'the program does not, so its time is a lower bound (docs/model.md, "An '
                'mma.sync forward at a tiling the census lacks")'
            )
    return "\n".join(lines)
