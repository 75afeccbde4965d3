"""Pictures where a picture beats a table. Every function writes one PNG and returns its path."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from flashio.simulator import FileError, atomic_write


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | Path, dpi: int = 120) -> Path:
    """Write ``fig`` to ``path`` whole or not at all (:func:`simulator.atomic_write`), close it.

    The format follows the suffix (``.png``, ``.svg``, ``.pdf``, ...); a suffix matplotlib cannot
    write is a ``FileError``, raised before anything is written.
    """
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower() or "png"
    try:
        formats = fig.canvas.get_supported_filetypes()
        if fmt not in formats:
            raise FileError(
                f"{path}: cannot draw a .{fmt} file; use one of "
                + ", ".join(f".{f}" for f in sorted(formats))
            )
        with atomic_write(path, "wb") as f:
            fig.savefig(f, format=fmt, dpi=dpi)
    finally:
        _plt().close(fig)
    return path


def _slope(x, y) -> float:
    """Least-squares slope of log y against log x over the last three points."""
    x, y = np.asarray(x, float)[-3:], np.asarray(y, float)[-3:]
    return float(np.polyfit(np.log(x), np.log(y), 1)[0]) if len(x) >= 2 else float("nan")


def traffic_vs_n(series: dict[str, list[tuple[int, int]]], title: str, path: Path) -> Path:
    """Log-log global bytes against N, one line per schedule, slope in the legend.

    ``series`` maps a schedule name to (N, bytes) points.
    """
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    for name, pts in series.items():
        ns, b = zip(*sorted(pts), strict=True)
        ax.loglog(ns, np.array(b) / 1e9, "o-", label=f"{name} (slope {_slope(ns, b):.2f})")
    ns_all = sorted({n for pts in series.values() for n, _ in pts})
    ax.set_xticks(ns_all, [str(n) for n in ns_all])
    ax.minorticks_off()
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("global traffic, GB")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


def comparison_bars(rows, title: str, path: Path) -> Path:
    """Global and HBM bytes, and time, of compared schedules (analysis.compare rows)."""
    plt = _plt()
    rows = [r for r in rows if not r.error]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    x = np.arange(len(rows))
    names = [r.schedule for r in rows]
    ax1.bar(x - 0.2, [r.global_bytes / 1e9 for r in rows], 0.4, label="global (SM-side)")
    ax1.bar(x + 0.2, [r.hbm_bytes / 1e9 for r in rows], 0.4, label="HBM (after L2)")
    ax1.set_xticks(x, names, rotation=30, ha="right")
    ax1.set_ylabel("GB moved")
    ax1.set_title("memory traffic")
    ax1.legend()
    ax2.bar(x, [r.time_s * 1e3 for r in rows], 0.6, color="tab:green")
    ax2.set_xticks(x, names, rotation=30, ha="right")
    ax2.set_ylabel("simulated time, ms")
    ax2.set_title("time")
    fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, path)


def block_sweep(points: list[tuple[int, int, float]], title: str, path: Path) -> Path:
    """Traffic and time against block size (the FlashAttention paper's Fig. 2, middle).

    ``points``: (block size, HBM or global bytes, time in seconds).
    """
    plt = _plt()
    blocks, nbytes, secs = zip(*sorted(points), strict=True)
    fig, ax1 = plt.subplots(figsize=(6.4, 4.4))
    ax1.plot(blocks, np.array(nbytes) / 1e9, "o-", color="tab:blue", label="traffic")
    ax1.set_xscale("log", base=2)
    ax1.set_xlabel("block size")
    ax1.set_ylabel("global traffic, GB", color="tab:blue")
    ax2 = ax1.twinx()
    ax2.plot(blocks, np.array(secs) * 1e3, "s--", color="tab:red", label="time")
    ax2.set_ylabel("simulated time, ms", color="tab:red")
    ax1.set_title(title)
    fig.tight_layout()
    return save_figure(fig, path)


def roofline(gpu, points: list[tuple[str, float, float]], dtype: str, path: Path) -> Path:
    """Roofline of ``gpu`` with schedules placed at (arithmetic intensity, achieved FLOP/s).

    ``points``: (label, FLOPs per HBM byte, simulated FLOP/s).
    """
    plt = _plt()
    peak = gpu.mma_flops_per_s(dtype)
    bw = gpu.effective_hbm_bandwidth_bytes_per_s
    ridge = peak / bw
    xs = np.logspace(-1, max(4, np.log10(ridge) + 1.5), 200)
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    ax.loglog(xs, np.minimum(peak, xs * bw) / 1e12, "k-", lw=1.5, label=f"{gpu.name} roof")
    ax.axvline(ridge, color="gray", ls=":", lw=1)
    ax.text(ridge, peak / 1e12 / 3, f" ridge {ridge:.0f} FLOP/B", fontsize=8, color="gray")
    for label, ai, flops in points:
        ax.loglog([ai], [flops / 1e12], "o")
        ax.annotate(
            label, (ai, flops / 1e12), fontsize=8, xytext=(4, 4), textcoords="offset points"
        )
    ax.set_xlabel("arithmetic intensity, FLOP per HBM byte (after L2)")
    ax.set_ylabel(f"TFLOP/s ({dtype} matmul)")
    ax.set_title("roofline")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


def timeline(result, path: Path, kernel: int = 0, max_sms: int = 32) -> Path:
    """Per-SM Gantt chart of a simulated kernel (needs ``simulate(..., timeline=True)``)."""
    if result.timeline is None:
        raise ValueError("this result has no timeline: simulate(..., timeline=True)")
    plt = _plt()
    span = result.timeline[kernel]
    sms = np.unique(span[:, 2]).astype(int)[:max_sms]
    fig, ax = plt.subplots(figsize=(8, 0.22 * len(sms) + 1.5))
    for cta, (t0, t1, sm) in enumerate(span):
        if int(sm) in sms:
            ax.broken_barh(
                [(t0 * 1e6, (t1 - t0) * 1e6)],
                (sm - 0.4, 0.8),
                facecolors=f"C{cta % 10}",
                edgecolor="white",
                lw=0.3,
            )
    k = result.kernels[kernel]
    ax.set_xlabel("time, us")
    ax.set_ylabel("SM")
    ax.set_title(
        f"{k.name}: {k.ctas} CTAs, {k.occupancy.ctas_per_sm}/SM, {k.waves} waves"
        f" (first {len(sms)} SMs)"
    )
    fig.tight_layout()
    return save_figure(fig, path)


# SweepRow fields of the resources a sweep scales, and what to call them
RESOURCES = {"smem_per_cta_bytes": "shared memory", "hbm_bandwidth_bytes_per_s": "HBM bandwidth",
             "l2_bytes": "L2 capacity", "sm_count": "SMs"}  # fmt: skip


def _workload(r) -> tuple:
    return (r.schedule, r.batch, r.heads, r.seq_len, r.head_dim)


def _only(scale: dict, f: str | None) -> bool:
    """Whether a GPU of these resource scales differs from its base in resource ``f`` at most."""
    return all(abs(s - 1) < 1e-9 for g, s in scale.items() if g != f)


def resource_scaling(rows, bases, path: Path) -> Path:
    """For each workload (schedule and shape on a base GPU): its time relative to the base GPU
    against the scale of each resource, one resource scaled at a time, the others as the base
    has them. ``bases`` are the unscaled GPU specs; a row belongs to the one whose name its GPU's
    name starts with (``sweep.gpu_variants`` names)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.0, 4.6))
    # a colour and marker per resource, a line style per workload
    marks = dict(zip(RESOURCES, ("o", "s", "^", "D"), strict=True))
    lines = ("-", "--", ":", "-.")
    drawn = 0
    for base in bases:
        mine = [r for r in rows if not r.error
                and (r.gpu == base.name or r.gpu.startswith(base.name + "-"))]  # fmt: skip
        scales = {id(r): {f: getattr(r, f) / getattr(base, f) for f in RESOURCES} for r in mine}
        for w in sorted({_workload(r) for r in mine}):
            line, drawn = lines[drawn % len(lines)], drawn + 1
            rows_w = [r for r in mine if _workload(r) == w]
            ref = [r for r in rows_w if _only(scales[id(r)], None)]
            if not ref:
                continue
            for f, label in RESOURCES.items():
                pts = sorted((scales[id(r)][f], r.time_s / ref[0].time_s)
                             for r in rows_w if _only(scales[id(r)], f))  # fmt: skip
                if len(pts) > 1:
                    xs, ys = zip(*pts, strict=True)
                    ax.plot(xs, ys, marker=marks[f], ls=line, ms=4,
                            color=f"C{list(RESOURCES).index(f)}",
                            label=f"{label}: {w[0]} N={w[3]} d={w[4]} on {base.name}")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.axhline(1.0, color="k", lw=0.6)
    ax.set_xlabel("resource scale (x the base GPU's)")
    ax.set_ylabel("simulated time / time on the base GPU")
    ax.set_title("which resource the time depends on (one scaled at a time)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path)


def gpu_sweep(rows, x: str, path: Path, title: str) -> Path:
    """Simulated time of each schedule against one scaled GPU property (``x`` is a SweepRow
    field such as ``smem_per_cta_bytes`` or ``hbm_bandwidth_bytes_per_s``)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for name in sorted({r.schedule for r in rows}):
        pts = sorted((getattr(r, x), r.time_s) for r in rows if r.schedule == name and not r.error)
        if pts:
            xs, ts = zip(*pts, strict=True)
            ax.plot(xs, np.array(ts) * 1e3, "o-", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(x)
    ax.set_ylabel("simulated time, ms")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)
