"""Cross-check: the simulator's predictions next to the GPU measurements, with error figures.

Every measured configuration in ``data/gpu`` is re-simulated from the same schedule (block
sizes, warps, shape) on the model of the H200 that ``analysis/validation/calibration.toml`` names
(``h200-measured``, the issue model, the launch harness) and set next to
what was measured, with the comparison each measurement calls for:

- **time** (``gpu_measure.json``): CUDA events around the schedule's launches from Python,
  median of 20 launches, inputs rotated among buffer sets larger than 3x the L2, so each
  launch starts with its inputs outside the L2. Simulated as a sequence of kernels on one
  (cold) L2, and passed through the launch harness model (``Harness.event_time``).
- **global bytes** (``l1tex__m_xbar2l1tex_read_bytes`` + ``l1tex__m_l1tex2xbar_write_bytes``)
  and **HBM bytes** (``dram__bytes_read`` + ``dram__bytes_write``) from Nsight Compute, which
  flushes the caches before each profiled kernel: each kernel is simulated alone on an empty L2.

Nothing in that model is fitted to an attention kernel's timing (:data:`TRAINING`), so every
row is held out. ``flashio crosscheck`` prints the table; docs/validation.md explains the
method.
"""

from __future__ import annotations

import dataclasses
import math
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from flashio import simulator
from flashio.analysis.validation.calibration import Calibration, load_calibration
from flashio.analysis.validation.gpu_data import (
    DATA_DIR,
    EVENTS,
    NCU,
    TRAINING,
    Config,
    ncu_rows_for,
    parse_ncu_csv,
    read_ncu,
    read_timings,
)

__all__ = [
    "DATA_DIR",
    "METRICS",
    "TRAINING",
    "Config",
    "Report",
    "crosscheck",
    "ncu_rows_for",
    "parse_ncu_csv",
    "read_ncu",
    "read_timings",
    "summarize",
]

METRICS = ("time", "global_bytes", "hbm_bytes")


@dataclasses.dataclass(frozen=True, slots=True)
class Report:
    """``rows`` (dicts, see :func:`crosscheck`) and ``summary`` (see :func:`summarize`)."""

    rows: tuple[dict, ...]
    summary: dict

    def to_json(self) -> dict:
        return {"rows": list(self.rows), "summary": self.summary}


# ------------------------------------------------------------------------------- predicting
class _OneKernel:
    """Kernel ``k`` of a schedule as a trace source of its own (simulated on an empty L2)."""

    def __init__(self, source, k: int):
        self._source, self._k = source, k
        self.meta = dataclasses.replace(source.meta, kernels=(source.meta.kernels[k],))

    def cta_events(self, kernel: int, start: int, stop: int) -> np.ndarray:
        ev = self._source.cta_events(self._k, start, stop).copy()
        ev["kernel"] = 0
        return ev


def predict(config: Config, cal: Calibration) -> dict:
    """The simulator's prediction for one configuration (see the module docstring)."""
    sched = config.build()
    opts = cal.options
    if config.kernel is None:
        res = simulator.simulate(sched, cal.gpu, options=opts)
        kt = [k.time_s for k in res.kernels]
        return {
            "time_s": cal.harness.event_time(kt),
            "parts_s": list(cal.harness.intervals(kt)),
            "kernels": [k.name for k in res.kernels],
            "bound": res.bound,
        }
    res = simulator.simulate(_OneKernel(sched, config.kernel), cal.gpu, options=opts)
    return {
        "global_bytes": res.global_read_bytes + res.global_write_bytes,
        "hbm_bytes": res.hbm_read_bytes + res.hbm_write_bytes,
        "kernel_time_s": res.time_s - cal.gpu.kernel_launch_s,
        "kernels": [res.kernels[0].name],
        "bound": res.bound,
    }


def _predict_job(args):
    config, cal, base = args
    pred = predict(config, cal)
    if base is not None:
        pred["baseline"] = predict(config, base)
    return pred


def datasheet_calibration() -> Calibration:
    """The datasheet model, for comparison: the built-in ``h200`` spec (datasheet rates,
    full L2), docs/model.md's defaults, no harness (time = the simulated kernels)."""
    from flashio.analysis.validation.calibration import Harness
    from flashio.simulator.simulate import ModelOptions

    return Calibration(
        simulator.load_gpu("h200"), ModelOptions(), Harness(0.0, 0.0), "h200 datasheet"
    )


METRIC_OF = {
    "time_s": "time",
    "global_bytes": "global_bytes",
    "hbm_bytes": "hbm_bytes",
    "kernel_time_s": "kernel_time",
}


def _errors(measured: dict, pred: dict) -> dict:
    return {METRIC_OF[k]: pred[k] / v - 1 for k, v in measured.items() if k in METRIC_OF and v}


def _row(config: Config, measured: dict, pred: dict) -> dict:
    sh = config.shape
    error = _errors(measured, pred)
    base = pred.get("baseline")
    extra = {"baseline_error": _errors(measured, base)} if base else {}
    return {
        "label": config.label(),
        "source": "events" if config.kernel is None else "ncu",
        "compared_with": EVENTS if config.kernel is None else NCU,
        "schedule": config.schedule,
        "kernel": pred["kernels"][0] if config.kernel is not None else None,
        "shape": sh.to_dict(),
        "block_q": config.block_q,
        "block_kv": config.block_kv,
        "warps": config.warps,
        "options": dict(config.options),
        "subset": config.subset,
        "measured": {k: v for k, v in measured.items()},
        "predicted": {k: v for k, v in pred.items() if k not in ("kernels", "bound", "baseline")},
        "error": error,
        "bound": pred["bound"],
        **extra,
    }


def crosscheck(
    configs: list[tuple[Config, dict]] | None = None,
    calibration: Calibration | str | Path | None = None,
    jobs: int = 1,
    progress=None,
    baseline: bool = False,
) -> Report:
    """Simulate every configuration and compare.

    Parameters
    ----------
    configs : list of (Config, measured dict), optional
        Default: every configuration in ``data/gpu`` (:func:`read_timings` of
        ``gpu_measure.json`` and :func:`read_ncu` of ``ncu.csv``).
    calibration : Calibration or path, optional
        Default ``analysis/validation/calibration.toml``.
    jobs : int
        Worker processes (simulating all of ``data/gpu`` takes minutes on one core).
    progress : callable, optional
        ``progress(done, total)`` after each configuration.
    baseline : bool
        Also simulate with :func:`datasheet_calibration` (rows get ``baseline_error``, the
        summary ``baseline``): what the calibration changed.

    Returns
    -------
    Report
        ``rows``: per configuration ``label``, ``source`` (events or ncu), ``compared_with``,
        the configuration, ``subset`` (train or held-out), ``measured``, ``predicted`` and
        ``error`` (predicted / measured - 1 per metric: time, global_bytes, hbm_bytes, and
        kernel_time for Nsight Compute's duration); ``summary`` from :func:`summarize`.
    """
    if configs is None:
        configs = read_timings(DATA_DIR / "gpu_measure.json") + read_ncu(DATA_DIR / "ncu.csv")
    cal = calibration if isinstance(calibration, Calibration) else load_calibration(calibration)
    base = datasheet_calibration() if baseline else None
    todo = [(cfg, cal, base) for cfg, _ in configs]
    preds = []
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as ex:
            for p in ex.map(_predict_job, todo):
                preds.append(p)
                if progress:
                    progress(len(preds), len(todo))
    else:
        for t in todo:
            preds.append(_predict_job(t))
            if progress:
                progress(len(preds), len(todo))
    rows = tuple(_row(c, m, p) for (c, m), p in zip(configs, preds, strict=True))
    return Report(rows, summarize(rows))


# -------------------------------------------------------------------------------- summaries
def _stats(errors: list[float]) -> dict:
    a = np.abs(np.asarray(errors, float))
    if a.size == 0:
        return {"n": 0, "mape": None, "max_error": None}
    return {"n": int(a.size), "mape": float(a.mean()), "max_error": float(a.max())}


def summarize(rows) -> dict:
    """MAPE (mean |predicted / measured - 1|, a fraction) and largest |error| per metric,
    over all rows and per subset. ``time_mape``, ``global_bytes_mape`` and ``hbm_bytes_mape``
    are over all rows; ``held_out`` and ``train`` hold the same per subset, and ``ncu_time``
    compares Nsight Compute's kernel durations (clocks not locked; not a target)."""
    out: dict = {}
    for subset in ("all", "train", "held-out"):
        part = [r for r in rows if subset == "all" or r["subset"] == subset]
        stats = {m: _stats([r["error"][m] for r in part if m in r["error"]]) for m in METRICS}
        stats["kernel_time"] = _stats(
            [r["error"]["kernel_time"] for r in part if "kernel_time" in r["error"]]
        )
        if subset == "all":
            for m, s in stats.items():
                out[f"{m}_mape"], out[f"{m}_max_error"], out[f"{m}_n"] = (
                    s["mape"],
                    s["max_error"],
                    s["n"],
                )
        else:
            out[subset.replace("-", "_")] = stats
    if any("baseline_error" in r for r in rows):
        out["baseline"] = {
            m: _stats([r["baseline_error"][m] for r in rows if m in r.get("baseline_error", {})])
            for m in (*METRICS, "kernel_time")
        }
    return out


def mean_log_ratio(pairs) -> float:
    """Mean of log(predicted / measured) over (predicted, measured) pairs: 0 when unbiased."""
    vals = [math.log(p / m) for p, m in pairs if p > 0 and m > 0]
    return float(np.mean(vals)) if vals else 0.0
