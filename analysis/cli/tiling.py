"""The ``flashio tiling`` verb: B = M/(4d) in both forms, its capacity check, a tile search.

``add_tiling_command(subparsers)`` registers the verb on the ``flashio`` parser; ``main(argv)``
runs it alone (``python -m flashio.analysis.cli.tiling``), with the conventions of ``flashio``.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap

from flashio import kernels, simulator
from flashio.analysis.cli import options as opts
from flashio.analysis.closed_form.tiling import TilingRule, tiling_rule
from flashio.analysis.explore.search import (
    EVENTS_PER_S,
    PIPE_RATES_BOUND,
    plan_search,
    search_notes,
    search_tiles,
)
from flashio.analysis.explore.search_reading import short_why
from flashio.analysis.present.progress import Progress
from flashio.simulator import Space

__all__ = ["add_tiling_command", "cmd_tiling", "main"]


DESCRIPTION = """\
The tiling rule B = M/(4d), in the two forms the sources give:
  seed  (000, sec. 4):  Br = Bc = floor(M/(4d))      four blocks Q, K, V, O share M; rounding
                                                     down makes them always fit
  paper (FA Alg. 1):    Bc = ceil(M/(4d)), Br = min(ceil(M/(4d)), d)
M is on-chip memory in ELEMENTS of --dtype (the paper's unit); GPU specs store bytes, so
M = sram_bytes // bytes-per-element, with sram_bytes = the GPU's smem_per_cta_bytes unless
--sram-bytes is given.

Prints both forms, the capacity table (elements and bytes of Q_i, K_j, V_j, O_i, S_ij/P_ij,
l_i, m_i against M, with and without double-buffered K_j, V_j), what the project's kernels
(--schedule) need at those blocks, and whether they fit the GPU. With --search it also
simulates every (block_q, block_kv, warps) on a --batch x --heads x --seq-len shape and
ranks them by time and by HBM traffic, marking where the rule lands. Each tiling is priced by
its kernel's main loop (the issue model, validated against the H200: docs/validation.md)
wherever the issue model prices the schedule; --pipe-rates ranks every tiling at the pipe
rates instead."""

EPILOG = """\
examples:
  flashio tiling --gpu h200 --head-dim 64            both forms and the capacity table
  flashio tiling --head-dim 64 --sram-bytes 196608   M = 98,304 fp16 elements: Bc 384, Br 64
  flashio tiling --gpu a100-40gb --head-dim 128 --json
  flashio tiling --search --seq-len 2048 --heads 16  rank the tilings (a few seconds)
  flashio tiling --search --head-dim 128 --seq-len 16384 --dtype bf16   as the H200 ran them
  flashio tiling --search --pipe-rates --block-sizes 64 128 256 --warps 4 8   idealized
  flashio tiling --search --block-sizes 64 128 --warps 4 --schedule flash1
Progress of a search goes to stderr; bad input exits with status 2."""


def add_tiling_command(subparsers) -> argparse.ArgumentParser:
    """Register ``tiling`` on the ``flashio`` subparsers; returns its parser."""
    p = subparsers.add_parser(
        "tiling",
        help="B = M/(4d): both forms, capacity check, tile search",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    opts.add_gpu(p)
    opts.add_shape_flags(p, "head_dim", "dtype")
    p.add_argument(
        "--sram-bytes",
        type=int,
        default=None,
        help="on-chip memory in BYTES (default: the GPU's smem_per_cta_bytes); M in elements "
        "is this divided by the dtype's size",
    )
    p.add_argument(
        "--schedule",
        default="flash2",
        choices=kernels.SCHEDULES,
        metavar="SCHEDULE",
        help="schedule whose kernels are checked and searched (default flash2; one of "
        + ", ".join(kernels.SCHEDULES)
        + ")",
    )
    s = p.add_argument_group("tile search (with --search)")
    s.add_argument("--search", action="store_true", help="simulate and rank every tiling")
    opts.add_shape_flags(s, "batch", "heads", "kv_heads", "seq_len", "causal", *opts.VARIANT_FLAGS)
    s.add_argument(
        "--block-sizes", type=opts.listed(int), nargs="+", default=[(16, 32, 64, 128, 256)],
        metavar="B",
        help="candidate Br and Bc, every pair tried, e.g. 64,128 or 64 128 "
        "(default 16 32 64 128 256)",
    )  # fmt: skip
    s.add_argument(
        "--warps", type=opts.listed(int), nargs="+", default=[(2, 4, 8)], metavar="W",
        help="candidate warps per CTA (default 2 4 8)",
    )  # fmt: skip
    s.add_argument(
        "--top", type=int, default=15, help="rows of the ranking to print (default 15; 0 = all)"
    )
    pricing = s.add_mutually_exclusive_group()
    pricing.add_argument(
        "--compiled",
        action="store_const",
        const=True,
        dest="compiled",
        help="price each tiling by its kernel's main loop (the issue model, validated against "
        "the H200 in docs/validation.md): the compiled loop where the instruction census holds "
        "it, else a forward's written program ('priced by' says which, and whether its "
        "registers would spill); tilings neither prices are left out, but for the rule's "
        "blocks, kept at the pipe rates as lower bounds. This is the default wherever the "
        "issue model prices at least one candidate of the schedule",
    )
    pricing.add_argument(
        "--pipe-rates",
        action="store_const",
        const=False,
        dest="compiled",
        help="price every tiling at the pipe rates instead: one idealized model for all, "
        "whether or not a kernel exists for the tiling (useful for kernels not yet written; "
        "times 2-3x below what the kernels run). The default for a schedule the issue model "
        "prices at no tiling",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(func=cmd_tiling)
    return p


def table(header: list[str], rows: list[list], left: tuple[int, ...] = (0,)) -> str:
    """Columns under a header and a rule: right-aligned but for the ``left`` ones."""
    cells = [[str(c) for c in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]

    def line(row):
        out = [
            c.ljust(w) if i in left else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(out).rstrip()

    return "\n".join([line(cells[0]), "  ".join("-" * w for w in widths), *map(line, cells[1:])])


def _bullet(text: str) -> str:
    return textwrap.fill(text, 99, initial_indent="  - ", subsequent_indent="    ")


def _fits(n: int, m: int) -> str:
    return f"{n / m:.1%} fits" if n <= m else f"{n / m:.1%} EXCEEDS"


def rule_text(rule: TilingRule) -> str:
    """The rule's forms, the capacity table, the kernels' needs and the notes, for people."""
    seed, paper = rule.form("seed"), rule.form("paper")
    m, eb = rule.m_elements, rule.elem_bytes
    lines = [
        f"B = M/(4d) on {rule.gpu}, d = {rule.head_dim}, {rule.dtype}",
        f"M = {rule.sram_bytes:,} B ({rule.sram_source}) / {eb} B = {m:,} elements; "
        f"M/(4d) = {rule.ratio:g}",
        "",
        table(
            ["form", "formula", "block_q (Br)", "block_kv (Bc)"],
            [[f.name, f.formula, f.block_q, f.block_kv] for f in rule.forms],
            left=(0, 1),
        ),
        "",
        f"Capacity of Alg. 1 ({seed.capacity.algorithm}) against M = {m:,} {rule.dtype} elements",
        f"(the paper's model: every tile in the working dtype; bytes = elements x {eb} B):",
    ]
    rows = []
    for ts, tp in zip(seed.capacity.tiles, paper.capacity.tiles, strict=True):
        row = [ts.name + ("" if ts.seed_block else " (not in seed's 4)")]
        for t in (ts, tp):
            row += [f"{t.rows} x {t.cols}", f"{t.elements:,}", f"{t.elements * eb:,}"]
            row.append(f"{t.elements / m:.1%}")
        rows.append(row)
    for (label, ns), (_, np_) in zip(seed.capacity.totals(), paper.capacity.totals(), strict=True):
        row = [label]
        for n in (ns, np_):
            row += ["", f"{n:,}", f"{n * eb:,}", _fits(n, m)]
        rows.append(row)
    header = ["tile / count", "seed", "elements", "bytes", "of M", "paper", "elements", "bytes"]
    header.append("of M")
    lines += [table(header, rows), ""]
    lines.append(
        f"The project's {seed.schedule} kernels at these blocks, against {rule.gpu}'s own limits"
    )
    lines.append("(shared memory tiles in the input dtype, register tiles in fp32/fp64):")
    krows = []
    for f in rule.forms:
        regs = sum(t.size_bytes for t in f.on_chip if t.space == Space.REGISTERS)
        for i, k in enumerate(f.kernels):
            krows.append(
                [
                    f.name,
                    k.kernel,
                    f"{f.block_q} x {f.block_kv}",
                    f"{k.smem_bytes:,} / {k.smem_limit_bytes:,}",
                    f"{regs:,}" if i == 0 else "",
                    k.regs_per_thread,
                    k.spilled_regs_per_thread,
                    k.ctas_per_sm if k.fits else "-",
                    k.limiter if k.fits else "does not fit",
                ]
            )
    header = [
        "form",
        "kernel",
        "Br x Bc",
        "smem B / limit",
        "reg tiles B (all kernels)",
        "regs/thread",
        "spilled",
        "CTAs/SM",
        "limited by",
    ]
    lines += [table(header, krows, left=(0, 1, 8)), "", "Notes:"]
    lines += [_bullet(n) for n in rule.notes]
    return "\n".join(lines)


def search_text(
    results, shape, name, gpu, top: int, compiled: bool = False, left_out: int = 0,
    chosen: bool = True,
) -> str:  # fmt: skip
    """The ranking by time (top rows and every rule row), by HBM traffic, and the notes."""
    ok = [r for r in results if r.feasible]
    shown = ok if top <= 0 else [r for r in ok if r.rank_time <= top or r.rule]
    header = [
        "rank",
        "Br",
        "Bc",
        "warps",
        "rule",
        "time us",
        "x best",
        "global MB",
        "HBM MB",
        "HBM rank",
        "CTAs/SM",
        "limited by",
        "warps/SM",
        "regs(spill)",
    ]
    rows = [
        [
            r.rank_time,
            r.block_q,
            r.block_kv,
            r.warps,
            r.rule or "",
            f"{r.time_s * 1e6:.1f}",
            f"{r.slowdown:.2f}",
            f"{r.global_bytes / 1e6:,.1f}",
            f"{r.hbm_bytes / 1e6:,.1f}",
            r.rank_hbm,
            r.ctas_per_sm,
            r.limiter,
            f"{r.resident_warps_per_sm:.1f}",
            f"{r.regs_per_thread}({r.spilled_regs_per_thread})",
        ]
        + ([r.priced_by] if compiled else [])
        + [short_why(r.why)]
        for r in shown
    ]
    header += (["priced by"] if compiled else []) + ["why slower"]
    lines = [
        f"Tile search: {name} on {gpu.name}, {shape.describe()}; {len(ok)} tilings ran, "
        f"{len(results) - len(ok)} do not fit"
        + (
            f", {left_out} left out (the issue model has neither their compiled loop nor a "
            "written program: --pipe-rates ranks them too)"
            if left_out
            else ""
        ),
        f"(ranked by simulated time; {'all' if top <= 0 else f'top {top} and the rule rows'}"
        + (
            "; each priced by its compiled or written main loop"
            + (
                ", the rule's blocks without one at the pipe rates)"
                if any(r.priced_by == PIPE_RATES_BOUND for r in ok)
                else ")"
            )
            if compiled
            else "; at the pipe rates, as --pipe-rates asks)"
            if chosen
            else f"; at the pipe rates: the issue model prices no candidate of {name})"
        ),
        table(header, rows, left=(4, 11, 14, 15)) if rows else "(no tiling fits)",
    ]
    bad = [r for r in results if not r.feasible]
    if bad:
        lines += ["", "Do not fit:"]
        lines += [f"  {r.block_q} x {r.block_kv}, {r.warps} warps: {r.error}" for r in bad]
    lines += ["", "Reading:"] + [_bullet(n) for n in search_notes(results)]
    return "\n".join(lines)


def _progress(progress: Progress, total_events: int):
    """search_tiles' callback: each tiling done, and the events replayed so far."""
    replayed = 0

    def show(done, total, r):
        nonlocal replayed
        replayed += r.events
        detail = (f"{r.block_q} x {r.block_kv}, {r.warps} warps "
                  f"({replayed / 1e6:.1f} of {total_events / 1e6:.1f} M events)")  # fmt: skip
        progress("tilings", detail, done, total)

    return show


def cmd_tiling(a) -> int:
    """Handler of ``flashio tiling`` (argparse namespace in, exit status out)."""
    try:
        a.block_sizes = tuple(opts.positive(a.block_sizes, "--block-sizes"))
        a.warps = tuple(opts.positive(a.warps, "--warps"))
    except argparse.ArgumentTypeError as exc:
        raise simulator.FlashioError(str(exc)) from None
    gpu = simulator.load_gpu(a.gpu)
    rule = tiling_rule(gpu, a.head_dim, a.dtype, a.sram_bytes, schedule=a.schedule)
    out: dict = {"rule": rule.to_dict()}
    text = [rule_text(rule)]
    if a.search:
        shape = opts.shape_of(a)
        kw = {"include_rule": True, "sram_bytes": a.sram_bytes}
        plan = plan_search(a.schedule, shape, gpu, a.block_sizes, a.warps, **kw)
        compiled = plan.compiled if a.compiled is None else a.compiled
        todo = plan.simulated(compiled)
        events = sum(c.events for c in todo)
        print(
            f"flashio tiling: simulating {len(todo)} tilings, {events / 1e6:.1f} M events, "
            f"about {events / EVENTS_PER_S:.0f} s, "
            + ("priced by their kernels' main loops" if compiled else "at the pipe rates"),
            file=sys.stderr,
        )
        with Progress() as progress:
            results = search_tiles(
                a.schedule,
                shape,
                gpu,
                a.block_sizes,
                a.warps,
                _progress(progress, events),
                plan=plan,
                compiled=compiled,
                **kw,
            )
        out["search"] = {
            "schedule": a.schedule,
            "gpu": gpu.name,
            "shape": shape.to_dict(),
            "results": [r.to_dict() for r in results],
            "notes": list(search_notes(results)),
            "compiled": compiled,
        }
        left_out = sum(c.feasible for c in plan.candidates) - len(todo)
        out["search"]["left_out"] = left_out
        chosen = a.compiled is not None
        text.append(
            search_text(results, shape, a.schedule, gpu, a.top, compiled, left_out, chosen)
        )
    print(json.dumps(out, indent=2) if a.json else "\n\n".join(text))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run ``tiling`` alone: ``python -m flashio.analysis.cli.tiling [options]``."""
    parser = argparse.ArgumentParser(prog="flashio")
    add_tiling_command(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["tiling", *(sys.argv[1:] if argv is None else argv)])
    try:
        return args.func(args)
    except simulator.FlashioError as exc:
        print(f"flashio tiling: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
