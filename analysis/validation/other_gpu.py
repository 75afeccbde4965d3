"""This project's kernels timed on a GPU the model was not built from, against the model's
hypothetical version of that GPU.

The cross-check's model is the measured H200 (``calibration.toml``: ``h200-measured``, the
issue model, the launch harness). An H100 SXM has the same SM (GH100), the same 132 SMs and
clocks, and less memory: 50 MiB of L2 and 3.35 TB/s of HBM3 against 60 MiB and 4.8 TB/s
(``h100-sxm.toml``, from NVIDIA's whitepaper and datasheet). Its hypothetical twin is what a
user would build: the cross-check's calibration with its spec's L2 size, HBM bandwidth and HBM
capacity replaced by the H100's (``GPUSpec.replace``), nothing measured on an H100 in it. The
H200's HBM efficiency and latencies are kept (documented assumptions). The measurements:
``data/gpu/h100/gpu_measure.json``, the validation grid timed on an H100 SXM as
``data/gpu/gpu_measure.json`` was on the H200 (``data/gpu/runs/h100_measure_run.sh``).
docs/hypothetical-gpus.md, "A real GPU the model was not built from".
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from flashio import simulator
from flashio.analysis.paths import DATA
from flashio.analysis.validation import families
from flashio.analysis.validation.calibration import Calibration, load_calibration
from flashio.analysis.validation.crosscheck import Report, crosscheck, read_timings
from flashio.analysis.validation.family_rows import IMPL_TIMINGS, impl_rows
from flashio.analysis.validation.gpu_data import DATA_DIR

H100_TIMINGS = DATA_DIR / "h100" / "gpu_measure.json"
H200_TIMINGS = DATA_DIR / "gpu_measure.json"
# other implementations' kernels (benchmarks/impl_measure), timed on each GPU
H100_IMPL = DATA / "impl" / "h100" / "impl_measure.json"
# what the hypothetical twin takes from the other GPU's datasheet spec
MEMORY_FIELDS = ("l2_bytes", "hbm_bandwidth_bytes_per_s", "hbm_bytes")
LONG = 4096  # sequences at least this long: kernels of 0.1 ms and more, out of launch noise


def twin(spec: str = "h100-sxm", calibration: Calibration | None = None) -> Calibration:
    """The cross-check's calibration with ``MEMORY_FIELDS`` of spec ``spec``."""
    cal = calibration or load_calibration()
    sheet = simulator.load_gpu(spec)
    gpu = cal.gpu.replace(
        name=f"{cal.gpu.name}-as-{spec}", **{f: getattr(sheet, f) for f in MEMORY_FIELDS}
    )
    return dataclasses.replace(cal, gpu=gpu, path=f"{Path(cal.path).name} with {spec}'s memory")


def report(path: Path = H100_TIMINGS, spec: str = "h100-sxm", jobs: int = 1) -> Report:
    """The cross-check of ``path``'s timings on :func:`twin`."""
    return crosscheck(read_timings(path), calibration=twin(spec), jobs=jobs)


def ratios(other: Report, path: Path = H200_TIMINGS, jobs: int = 1) -> list[dict]:
    """Per configuration timed on both GPUs: its time on the other GPU over its time on the
    H200, measured and predicted (what the other memory does, on the GPUs and in the model)."""
    h200 = dict((cfg.label(), (cfg, m)) for cfg, m in read_timings(path))
    both = [r for r in other.rows if r["label"] in h200 and "time_s" in r["measured"]]
    base = crosscheck([h200[r["label"]] for r in both], jobs=jobs)
    return [
        {"label": r["label"],
         "measured": r["measured"]["time_s"] / b["measured"]["time_s"],
         "predicted": r["predicted"]["time_s"] / b["predicted"]["time_s"]}
        for r, b in zip(both, base.rows, strict=True)
    ]  # fmt: skip


def impl_errors(path: Path, gpu, jobs: int = 1, only=None) -> list[dict]:
    """Per row of an impl_measure.json (flash-attn 2, cuDNN, Triton, eager PyTorch: the
    families of docs/validation.md; ``only``: those families), its family, schedule and the
    time error on ``gpu``."""
    ms = impl_rows(path, only or families.FAMILIES)
    args = (ms, [families.OPTIONS] * len(ms), [gpu] * len(ms))
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as ex:
            preds = list(ex.map(families.predict, *args))
    else:
        preds = list(map(families.predict, *args))
    return [{"family": m.family, "schedule": m.schedule, "error": p / m.time_s - 1}
            for m, p in zip(ms, preds, strict=True)]  # fmt: skip


def impl_markdown(on_twin: list[dict], on_h200: list[dict]) -> str:
    """Per family and schedule: the time errors on the twin against the H100's timings and
    on the H200's model against the H200's (docs/validation.md's families)."""
    lines = [
        "| family, schedule | twin vs the H100: n, MAPE, max, bias | H200 model vs the H200 |",
        "|---|---|---|",
    ]
    keys = sorted({(r["family"], r["schedule"]) for r in on_twin})
    for fam, sched in keys:
        a = [r["error"] for r in on_twin if (r["family"], r["schedule"]) == (fam, sched)]
        b = [r["error"] for r in on_h200 if (r["family"], r["schedule"]) == (fam, sched)]
        lines.append(f"| {fam} {sched} | {_stats(a)} | {_stats(b)} |")
    return "\n".join(lines)


def _stats(errors) -> str:
    a = np.abs(np.asarray(errors, float))
    return f"{a.size}, {a.mean():.1%}, {a.max():.1%}, {np.mean(errors):+.1%}"


def markdown(twin_report: Report, sheet_report: Report, pairs: list[dict]) -> str:
    """docs/hypothetical-gpus.md's table: time errors on the twin per schedule, over every
    shape and over N >= ``LONG``, beside the datasheet spec's; and the H100 / H200 ratios."""
    sheet = {r["label"]: r["error"]["time"] for r in sheet_report.rows}
    lines = [
        f"| schedule | twin: n, MAPE, max, bias | twin, N >= {LONG} | `h100-sxm` datasheet spec |",
        "|---|---|---|---|",
    ]
    groups = sorted({r["schedule"] for r in twin_report.rows})
    for name in (*groups, "all"):
        rows = [r for r in twin_report.rows if name in ("all", r["schedule"])]
        errors = [r["error"]["time"] for r in rows]
        long = [r["error"]["time"] for r in rows if r["shape"]["seq_len"] >= LONG]
        on_sheet = [sheet[r["label"]] for r in rows]
        lines.append(f"| {name} | {_stats(errors)} | {_stats(long)} | {_stats(on_sheet)} |")
    seq = {r["label"]: r["shape"]["seq_len"] for r in twin_report.rows}
    long = [p for p in pairs if seq[p["label"]] >= LONG]
    m = np.array([p["measured"] for p in long])
    q = np.array([p["predicted"] for p in long])
    off = np.abs(q / m - 1)
    lines += [
        "",
        f"At N >= {LONG} the H100 takes {m.min():.3f}-{m.max():.3f}x the H200's time (median "
        f"{np.median(m):.3f}), the twin {q.min():.3f}-{q.max():.3f}x the H200 model's; the "
        f"ratios agree within {off.mean():.1%} on average, {off.max():.1%} at worst.",
    ]
    return "\n".join(lines)


def block(jobs: int = 1) -> str:
    """The generated block of docs/hypothetical-gpus.md, markers included."""
    rep = report(jobs=jobs)
    cal = load_calibration()
    sheet = dataclasses.replace(cal, gpu=simulator.load_gpu("h100-sxm"))
    sheet_rep = crosscheck(read_timings(H100_TIMINGS), calibration=sheet, jobs=jobs)
    body = markdown(rep, sheet_rep, ratios(rep, jobs=jobs))
    others = impl_markdown(
        impl_errors(H100_IMPL, twin().gpu, jobs), impl_errors(IMPL_TIMINGS, families.GPU, jobs)
    )
    body += f"\n\nOther implementations' kernels, timed on each GPU alike:\n\n{others}"
    return f"<!-- other-gpu:begin -->\n\n{body}\n\n<!-- other-gpu:end -->"
