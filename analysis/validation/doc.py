"""docs/validation.md's generated block and its figure, rendered from a cross-check report.

``update_doc`` rewrites the block between the markers and redraws docs/figures/crosscheck.png;
``flashio docs --check`` re-renders the block and tells when the committed one is stale.
:data:`BOUNDS` are the error bounds the doc states and the tests assert.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from flashio.analysis.paths import DOCS
from flashio.analysis.validation import calibrate
from flashio.analysis.validation import crosscheck as cc
from flashio.analysis.validation.calibration import load_calibration
from flashio.simulator import FileError, atomic_write

__all__ = [
    "BOUNDS",
    "DOC",
    "FIGURE",
    "markdown",
    "plot",
    "text_table",
    "update_doc",
]

DOC = DOCS / "validation.md"
FIGURE = DOCS / "figures" / "crosscheck.png"
BEGIN, END = "<!-- crosscheck:begin -->", "<!-- crosscheck:end -->"
# Bounds docs/validation.md states and tests/test_crosscheck.py asserts over the committed
# table: (metric, statistic, subset) -> fraction. What the committed data achieve, rounded up
# a little; where the target is not met these are the achieved values, not the target.
BOUNDS: dict[tuple[str, str, str], float] = {
    ("time", "MAPE", "held-out"): 0.17,
    ("time", "max error", "all"): 0.50,
    # std_qk (d=64, 128x128) reads 1.6% more than its trace since load_tile's copy loop was
    # unrolled (1 KB per CTA more, measured; the cause is not identified)
    ("global_bytes", "max error", "all"): 0.02,
    ("hbm_bytes", "MAPE", "all"): 0.027,
    # standard attention's P x V at N = 4096, d = 64: 601 MB against 555 (545, -1.7%, before
    # CTA drift: CTAs that drift apart share fewer V tiles in the L2; the model's drift is
    # about twice the H200's, docs/model.md); the CTAs' order on the SMs, which the replayed
    # step times set, decides which tiles the L2 still holds
    ("hbm_bytes", "max error", "all"): 0.085,
}


def _pct(x) -> str:
    return "" if x is None else f"{100 * x:+.1f}%"


def _abs_pct(x) -> str:
    if x is None:
        return "n/a"
    return f"{100 * x:.2f}%" if x < 0.01 else f"{100 * x:.1f}%"


def _value(metric: str, v: float) -> str:
    if metric.endswith("_s"):
        return f"{v * 1e3:.3f} ms"
    return f"{v / 1e6:,.1f} MB"


def row_lines(report) -> list[str]:
    """One markdown table row per (configuration, metric)."""
    out = []
    for r in report.rows:
        what = r["label"] + (f" `{r['kernel']}`" if r["kernel"] else "")
        for key, metric in (
            ("time_s", "time"),
            ("global_bytes", "global_bytes"),
            ("hbm_bytes", "hbm_bytes"),
            ("kernel_time_s", "kernel_time"),
        ):
            if metric not in r["error"]:
                continue
            m, p = r["measured"][key], r["predicted"][key]
            out.append(
                f"| {r['subset']} | {what} | {metric} | {_value(key, m)} | "
                f"{_value(key, p)} | {_pct(r['error'][metric])} |"
            )
    return out


def summary_lines(summary: dict) -> list[str]:
    lines = [
        "| metric | train: n, MAPE, max | held-out: n, MAPE, max | all: MAPE, max |",
        "|---|---|---|---|",
    ]
    for m in (*cc.METRICS, "kernel_time"):
        tr, ho = summary["train"][m], summary["held_out"][m]

        def cell(s):
            return (
                "none"
                if not s["n"]
                else f"{s['n']}, {_abs_pct(s['mape'])}, {_abs_pct(s['max_error'])}"
            )

        lines.append(
            f"| {m} | {cell(tr)} | {cell(ho)} | {_abs_pct(summary[f'{m}_mape'])}, "
            f"{_abs_pct(summary[f'{m}_max_error'])} |"
        )
    return lines


def baseline_line(summary: dict) -> str:
    base = summary.get("baseline")
    if not base:
        return ""
    parts = [
        f"{m} MAPE {_abs_pct(base[m]['mape'])} (max {_abs_pct(base[m]['max_error'])})"
        for m in cc.METRICS
        if base[m]["n"]
    ]
    return (
        "The datasheet model (built-in `h200` spec, docs/model.md's defaults, no "
        "harness) on the same rows: " + "; ".join(parts) + "."
    )


TARGETS = (  # the targets over held-out rows: (metric, statistic, fraction)
    ("global_bytes", "max error", 0.05),
    ("hbm_bytes", "max error", 0.10),
    ("time", "MAPE", 0.15),
    ("time", "MAPE (goal)", 0.08),
)


def target_lines(summary: dict) -> list[str]:
    out = ["| target (held-out rows) | achieved | met |", "|---|---|---|"]
    for metric, stat, limit in TARGETS:
        s = summary["held_out"][metric]
        value = s["mape"] if stat.startswith("MAPE") else s["max_error"]
        met = "yes" if value is not None and value <= limit else "no"
        out.append(f"| {metric} {stat} <= {100 * limit:g}% | {_abs_pct(value)} | {met} |")
    return out


def bounds_lines() -> list[str]:
    out = ["| metric | bound the tests assert | over |", "|---|---|---|"]
    for (metric, stat, subset), value in BOUNDS.items():
        out.append(f"| {metric} | {stat} <= {100 * value:g}% | {subset} rows |")
    return out


def calibration_lines(cal) -> list[str]:
    from flashio import simulator

    spec = simulator.load_gpu("h200")
    out = [
        f"| spec key | h200 datasheet | {cal.gpu.name} |",
        "|---|---|---|",
    ]
    for f in dataclasses.fields(spec):
        a, b = getattr(spec, f.name), getattr(cal.gpu, f.name)
        if f.name not in ("name", "description") and a != b:
            out.append(f"| `{f.name}` | {a:.4g} | {b:.4g} |")
    h = cal.harness
    out += [
        "",
        f"Sources: simulator/specs/{cal.gpu.name}.toml, a source on every line. Model options: "
        f"issue model {cal.options.issue_model}, shared issue {cal.options.shared_issue}, "
        f"prefetch in {', '.join(cal.options.prefetch_kernels)}. Harness: first launch "
        f"{h.first_launch_s * 1e6:.1f} us, then one every {h.launch_interval_s * 1e6:.1f} us "
        "(harness.json, N = 128, less the simulated kernels).",
    ]
    return out


def ncu_lines() -> list[str]:
    out = [
        "| kernel (b, h, N, d) | warps per scheduler | tensor pipe active | issue active | "
        "SM clock | thread instructions per score | warp cycles per issue: largest stalls |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in calibrate.ncu_view():
        pct = {
            k: f"{100 * r[k]:.0f}%" if k in r else "-" for k in ("tensor_active", "issue_active")
        }
        clock = f"{r['clock_hz'] / 1e9:.2f} GHz" if "clock_hz" in r else "-"
        stalls = ", ".join(f"{k} {v:.2f}" for k, v in r["top_stalls"])
        out.append(
            f"| {r['kernel']} {tuple(r['shape'])} | {r['warps_per_scheduler']:.1f} | "
            f"{pct['tensor_active']} | {pct['issue_active']} | {clock} | "
            f"{r['thread_instructions_per_score']:.0f} | {r['cycles_per_issue']:.2f}: "
            f"{stalls} |"
        )
    return out


def step_trend_lines(report) -> list[str]:
    """Time per CTA step (one K/V block) per SM, measured and predicted, against N: flash2
    forward, bf16, non-causal, batch x heads = 64."""
    by: dict[str, dict[int, tuple[float, float]]] = {}
    for r in report.rows:
        sh = r["shape"]
        if r["source"] != "events" or r["schedule"] != "flash2" or sh["causal"]:
            continue
        if sh["dtype"] != "bf16" or sh["batch"] * sh["heads"] != 64:
            continue
        n, bq, bkv = sh["seq_len"], r["block_q"], r["block_kv"]
        steps = 64 * -(-n // bq) * -(-n // bkv) / 132  # CTA steps per SM
        key = f"d={sh['head_dim']} {bq}x{bkv} {r['warps']}w"
        by.setdefault(key, {})[n] = (
            r["measured"]["time_s"] / steps * 1e6,
            r["predicted"]["time_s"] / steps * 1e6,
        )
    ns = sorted({n for v in by.values() for n in v})
    out = ["| variant | " + " | ".join(f"N={n}" for n in ns) + " |", "|---" * (len(ns) + 1) + "|"]
    for key, v in sorted(by.items()):
        cells = [f"{v[n][0]:.2f} / {v[n][1]:.2f}" if n in v else "" for n in ns]
        out.append(f"| {key} | " + " | ".join(cells) + " |")
    return out


def retention_lines() -> list[str]:
    out = [
        "| written | then read | DRAM writes during the kernel | still dirty in L2 at its end |",
        "|---|---|---|---|",
    ]
    for r in calibrate.write_retention():
        out.append(
            f"| {r['write_bytes'] / 2**20:.0f} MiB | {r['read_bytes'] / 2**20:.0f} MiB | "
            f"{r['dram_write_bytes'] / 1e6:.2f} MB | {r['kept_bytes'] / 1e6:.2f} MB |"
        )
    return out


def markdown(report, cal=None) -> str:
    """The generated block of docs/validation.md."""
    cal = cal or load_calibration()
    rep = calibrate.repeatability()
    lines = [
        BEGIN,
        "",
        "Generated by `flashio docs --update --only crosscheck --jobs 2` (or `flashio crosscheck "
        "--update-doc --jobs 2`); do not edit by hand.",
        "",
        "### Summary",
        "",
        *summary_lines(report.summary),
        "",
        baseline_line(report.summary),
        "",
        *target_lines(report.summary),
        "",
        "### Bounds the tests assert (tests/test_crosscheck.py)",
        "",
        *bounds_lines(),
        "",
        "### Calibration (analysis/validation/calibration.toml)",
        "",
        *calibration_lines(cal),
        "",
        "### Nsight Compute's view of the kernels (data/gpu/probe, ncu_stalls.csv and "
        "ncu_metrics.csv)",
        "",
        *ncu_lines(),
        "",
        "### Dirty data left in L2 by streaming writes (data/gpu/probe/ncu_write.csv)",
        "",
        *retention_lines(),
        "",
        "### Repeatability of the timings",
        "",
        f"This run against data/gpu/previous_run (our kernels but flash2_bwd and standard, "
        f"whose kernels changed): up to {100 * rep['below_0.1ms']:.0f}% apart below 0.1 ms "
        f"({rep['n_below']} configurations), up to {100 * rep['above_0.3ms']:.1f}% from 0.3 ms "
        f"on ({rep['n_above']}).",
        "",
        "### Time per K/V step against N: measured / predicted microseconds per SM (flash2 "
        "forward, bf16, B x H = 64)",
        "",
        *step_trend_lines(report),
        "",
        "### Every configuration",
        "",
        "| subset | configuration | metric | measured | predicted | error |",
        "|---|---|---|---|---|---|",
        *row_lines(report),
        "",
        END,
    ]
    return "\n".join(lines)


def replace_block(doc: Path, begin: str, end: str, block: str) -> None:
    """Replace the generated block of ``doc`` (``begin`` ... ``end``, markers included) with
    ``block``, which starts and ends with the same markers."""
    text = doc.read_text()
    if begin not in text or end not in text:
        raise FileError(f"{doc}: no generated block ({begin} ... {end}) to replace")
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    with atomic_write(doc) as f:
        f.write(pattern.sub(lambda _: block, text))


def update_doc(report, cal=None, doc: Path = DOC, figure: Path = FIGURE) -> None:
    """Replace the generated block of ``doc`` and redraw ``figure``."""
    replace_block(doc, BEGIN, END, markdown(report, cal))
    plot(report, figure)


def text_table(report) -> str:
    lines = [
        f"{'subset':8s} {'configuration':60s} {'metric':12s} {'measured':>14s} "
        f"{'predicted':>14s} {'error':>8s}"
    ]
    for line in row_lines(report):
        c = [x.strip() for x in line.strip("|").split("|")]
        lines.append(f"{c[0]:8s} {c[1]:60s} {c[2]:12s} {c[3]:>14s} {c[4]:>14s} {c[5]:>8s}")
    lines += ["", *summary_lines(report.summary)]
    return "\n".join(lines)


def plot(report, path: Path) -> Path:
    """Predicted against measured, log-log, one panel per metric, y = x drawn."""
    from flashio.analysis.present.plots import _plt, save_figure

    plt = _plt()
    panels = (
        ("time", "time_s", "time, s (CUDA events)"),
        ("global_bytes", "global_bytes", "global bytes (ncu)"),
        ("hbm_bytes", "hbm_bytes", "HBM bytes (ncu)"),
    )
    fig, axes = plt.subplots(1, 3, figsize=(13.5, 4.4))
    for ax, (metric, key, title) in zip(axes, panels, strict=True):
        for subset, style, color in (("train", "o", "C0"), ("held-out", "^", "C1")):
            pts = [
                (r["measured"][key], r["predicted"][key])
                for r in report.rows
                if metric in r["error"] and r["subset"] == subset
            ]
            if pts:
                m, p = zip(*pts, strict=True)
                ax.loglog(
                    m, p, style, color=color, ms=4, alpha=0.75, label=f"{subset} ({len(pts)})"
                )
        lo, hi = ax.get_xlim()
        lo, hi = min(lo, ax.get_ylim()[0]), max(hi, ax.get_ylim()[1])
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8, label="y = x")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        mape = report.summary[f"{metric}_mape"]
        ax.set_title(f"{title}\nMAPE {_abs_pct(mape)}", fontsize=10)
        ax.set_xlabel("measured")
        ax.set_ylabel("predicted")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)
