"""Hypothetical GPUs checked against a real one: the H200 run on n of its SMs.

``data/gpu/probe/sm_scaling_run{2,4,5}.json`` (written by ``data/gpu/probe/sm_scaling.py``)
are three full runs of this project's flash2 forward and backward kernels timed inside CUDA
green contexts of n SMs, which keep the whole L2 and HBM; the measured time of a configuration
on n SMs is the median of the three runs' (each a median of launches). Run 1 (``sm_scaling.json``)
timed the kernels before their copy loop was unrolled and is kept as the source of the SM's
memory-path rate; run 3 re-timed only the configurations that missed then, so it is left out
of the median. Each configuration is re-simulated with the cross-check's model of the H200
(``analysis/validation/calibration.toml``: ``h200-measured`` with the issue model, nothing
fitted to an attention kernel) on ``replace(sm_count=n)``, and its timing loop is modelled by
the measured launch harness there (host-side launch costs, read off tiny kernels). The figure
of merit is the scaling curve t(n) / t(132), measured against predicted; absolute times are
reported beside it (they carry the time model's own error, docs/validation.md), and so is how
far the runs' own curves lie apart.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Sequence
from pathlib import Path

from flashio import kernels, simulator
from flashio.analysis.paths import DATA, DOCS
from flashio.analysis.validation.calibration import Harness, load_calibration

__all__ = ["PROBE", "PROBES", "ScalingRow", "load_measurements", "scaling_report"]

# the full runs of the current kernels (docs/hypothetical-gpus.md)
PROBES = tuple(DATA / "gpu" / "probe" / f"sm_scaling_run{k}.json" for k in (2, 4, 5))
PROBE = PROBES[0]


@dataclasses.dataclass(frozen=True, slots=True)
class ScalingRow:
    """One kernel configuration on n SMs: measured and predicted seconds, and each divided by
    the same configuration's time on the whole GPU."""

    label: str
    sms: int
    measured_s: float
    predicted_s: float
    measured_ratio: float
    predicted_ratio: float
    # (largest - smallest) / median of the runs' own t(n) / t(132): the measurement's spread
    ratio_spread: float = 0.0

    @property
    def ratio_error(self) -> float:
        """Predicted over measured scaling, minus 1."""
        return self.predicted_ratio / self.measured_ratio - 1

    @property
    def time_error(self) -> float:
        return self.predicted_s / self.measured_s - 1


def _one_run(path: Path) -> dict:
    """One sm_scaling.json: ``{label: {"schedule", "shape", "tiles", "times": {SMs: median
    seconds}}}``, labels such as ``"flash2 d=64 N=8192 128x128 w8"``."""
    try:
        doc = json.loads(Path(path).read_text())
        out: dict[str, dict] = {}
        for ctx in doc["contexts"]:
            for k in ctx["kernels"]:
                shape = kernels.AttentionShape(
                    k["batch"], k["heads"], k["seq_len"], k["head_dim"], k["dtype"],
                    causal=k["causal"], kv_heads=k["kv_heads"],
                )  # fmt: skip
                tiles = (k["block_q"], k["block_kv"], k["warps"])
                label = (
                    f"{k['schedule']} d={k['head_dim']} N={k['seq_len']} "
                    f"{tiles[0]}x{tiles[1]} w{tiles[2]}"
                )
                entry = out.setdefault(label, {"schedule": k["schedule"], "shape": shape,
                                               "tiles": tiles, "times": {}})  # fmt: skip
                entry["times"][int(ctx["context_sms"])] = k["median_ms"] * 1e-3
    except (OSError, ValueError, KeyError, TypeError) as err:
        msg = f"{path}: not an sm_scaling.json flashio can read: {err!r}"
        raise simulator.FileError(msg) from None
    return out


def load_measurements(paths: Path | Sequence[Path] = PROBES) -> dict:
    """The probe's kernel timings, over one run or the median of several: ``{label:
    {"schedule", "shape", "tiles", "times": {SMs: seconds}, "runs": [{SMs: seconds}, ...]}}``,
    each configuration at the SM counts every run timed it at."""
    runs = [_one_run(p) for p in ([paths] if isinstance(paths, (str, Path)) else paths)]
    out = {}
    for label, first in runs[0].items():
        per_run = [r[label]["times"] for r in runs if label in r]
        sms = sorted(set.intersection(*(set(t) for t in per_run)))
        times = {n: statistics.median(t[n] for t in per_run) for n in sms}
        out[label] = {**first, "times": times, "runs": per_run}
    return out


def _spread(runs: list[dict], n: int, full: int) -> float:
    ratios = sorted(t[n] / t[full] for t in runs)
    return (ratios[-1] - ratios[0]) / statistics.median(ratios)


def scaling_report(
    paths: Path | Sequence[Path] = PROBES,
    gpu: simulator.GPUSpec | None = None,
    harness: Harness | None = None,
) -> list[ScalingRow]:
    """Measured and predicted scaling rows, in the order of the first file (module doc)."""
    cal = load_calibration()
    gpu = gpu or cal.gpu
    harness = harness or cal.harness  # measured launch costs, nothing fitted
    rows = []
    for label, m in load_measurements(paths).items():
        sched = kernels.schedule(m["schedule"], m["shape"], *m["tiles"])
        full = max(m["times"])
        pred = {}
        for n in m["times"]:
            res = simulator.simulate(sched, gpu.replace(sm_count=n), options=cal.options)
            pred[n] = harness.event_time([k.time_s for k in res.kernels])
        for n, t in sorted(m["times"].items()):
            ratios = (t / m["times"][full], pred[n] / pred[full])
            spread = _spread(m["runs"], n, full)
            rows.append(ScalingRow(label, n, t, pred[n], *ratios, spread))
    return rows


# ----------------------------------------------------------------------------------- output
DOC = DOCS / "hypothetical-gpus.md"
FIGURE = DOC.parent / "figures" / "sm_scaling.png"
BEGIN, END = "<!-- sm-scaling:begin -->", "<!-- sm-scaling:end -->"


def summary(rows: list[ScalingRow]) -> dict:
    """Largest and median |ratio error| over the rows below the full GPU, and how many are
    within 5%; the same for the absolute times."""
    part = [r for r in rows if r.measured_ratio != 1.0]
    ratio = sorted(abs(r.ratio_error) for r in part)
    times = sorted(abs(r.time_error) for r in rows)
    return {
        "rows": len(part),
        "ratio_max_error": ratio[-1],
        "ratio_median_error": ratio[len(ratio) // 2],
        "ratio_within_5pct": sum(e <= 0.05 for e in ratio),
        "time_mape": sum(times) / len(times),
        "time_max_error": times[-1],
    }


def text_table(rows: list[ScalingRow]) -> str:
    head = f"{'configuration':34s} {'SMs':>4s} {'measured':>10s} {'predicted':>10s} "
    lines = [head + f"{'t/t132':>7s} {'pred':>7s} {'error':>7s} {'abs err':>8s} {'spread':>7s}"]
    for r in rows:
        lines.append(
            f"{r.label:34s} {r.sms:4d} {r.measured_s * 1e3:8.3f}ms {r.predicted_s * 1e3:8.3f}ms "
            f"{r.measured_ratio:7.2f} {r.predicted_ratio:7.2f} {100 * r.ratio_error:+6.1f}% "
            f"{100 * r.time_error:+7.1f}% {100 * r.ratio_spread:6.1f}%"
        )
    s = summary(rows)
    lines.append(
        f"\nscaling t(n)/t(132), {s['rows']} rows below 132 SMs: largest error "
        f"{100 * s['ratio_max_error']:.1f}%, median {100 * s['ratio_median_error']:.1f}%, "
        f"{s['ratio_within_5pct']} within 5%; absolute time MAPE {100 * s['time_mape']:.0f}%"
    )
    return "\n".join(lines)


def markdown(rows: list[ScalingRow]) -> str:
    """The generated block of docs/hypothetical-gpus.md: a table and the summary."""
    s = summary(rows)
    out = [
        BEGIN,
        "",
        "| configuration | SMs | measured | predicted | t(n)/t(132) | predicted | error | runs' "
        "spread |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.measured_ratio == 1.0:
            continue
        out.append(
            f"| {r.label} | {r.sms} | {r.measured_s * 1e3:.3f} ms | {r.predicted_s * 1e3:.3f} ms "
            f"| {r.measured_ratio:.2f} | {r.predicted_ratio:.2f} | {100 * r.ratio_error:+.1f}% "
            f"| {100 * r.ratio_spread:.1f}% |"
        )
    out += [
        "",
        f"Scaling, {s['rows']} rows below 132 SMs: largest error "
        f"{100 * s['ratio_max_error']:.1f}%, median {100 * s['ratio_median_error']:.1f}%, "
        f"{s['ratio_within_5pct']} of {s['rows']} within 5%. Absolute times: MAPE "
        f"{100 * s['time_mape']:.0f}%, largest error {100 * s['time_max_error']:.0f}%.",
        "",
        END,
    ]
    return "\n".join(out)


def plot(rows: list[ScalingRow], path: Path = FIGURE) -> Path:
    """t(n)/t(132) against n, measured (markers) and predicted (lines), forward and backward;
    and the error of the predicted curve, with the 5% band."""
    from flashio.analysis.present.plots import _plt, save_figure

    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    labels = list(dict.fromkeys(r.label for r in rows))
    full = max(r.sms for r in rows)
    sms = sorted({r.sms for r in rows})
    for ax, kind in zip(axes[:2], ("flash2 ", "flash2_bwd "), strict=True):
        for i, label in enumerate(labels):
            if not label.startswith(kind):
                continue
            pts = [r for r in rows if r.label == label]
            n = [r.sms for r in pts]
            ax.plot(n, [r.measured_ratio for r in pts], "o", color=f"C{i}", ms=5, label=label)
            ax.plot(n, [r.predicted_ratio for r in pts], "-", color=f"C{i}", lw=1)
        ax.plot(sms, [full / x for x in sms], "k:", lw=1, label=f"{full}/n (ideal)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("SMs (CUDA green context)")
        ax.set_ylabel("t(n) / t(132)")
        ax.set_title(f"{kind.strip()}: measured (o) and predicted (-)", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    ax = axes[2]
    for i, label in enumerate(labels):
        pts = [r for r in rows if r.label == label and r.sms != full]
        ax.plot([r.sms for r in pts], [100 * r.ratio_error for r in pts], "o-", color=f"C{i}",
                ms=4, lw=0.8)  # fmt: skip
    ax.axhspan(-5, 5, color="0.85", zorder=0, label="within 5%")
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("SMs (CUDA green context)")
    ax.set_ylabel("predicted / measured t(n)/t(132) - 1, %")
    ax.set_title("error of the predicted curve (colours as left)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path, dpi=100)


def update_doc(rows: list[ScalingRow], doc: Path = DOC, figure: Path = FIGURE) -> None:
    """Replace the generated block of ``doc`` and redraw ``figure``."""
    from flashio.analysis.validation.doc import replace_block

    replace_block(doc, BEGIN, END, markdown(rows))
    plot(rows, figure)
