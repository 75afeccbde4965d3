"""Cross-check: the simulator's predictions next to the GPU measurements, with error figures.

Every measured configuration in ``data/gpu`` is re-simulated from the same schedule (block
sizes, warps, shape) on the calibrated H200 (``simulator/calibration.toml``) and set next to
what was measured, with the comparison each measurement calls for:

- **time** (``gpu_measure.json``): CUDA events around the schedule's launches from Python,
  median of 20 launches, inputs rotated among buffer sets larger than 3x the L2, so each
  launch starts with its inputs outside the L2. Simulated as a sequence of kernels on one
  (cold) L2, and passed through the launch harness model (``Harness.event_time``).
- **global bytes** (``l1tex__m_xbar2l1tex_read_bytes`` + ``l1tex__m_l1tex2xbar_write_bytes``)
  and **HBM bytes** (``dram__bytes_read`` + ``dram__bytes_write``) from Nsight Compute, which
  flushes the caches before each profiled kernel: each kernel is simulated alone on an empty L2.

Time constants fitted on attention data (per-kernel issue efficiency) are fitted on the
training subset (:data:`TRAINING`); every row says which subset it is in, and the summary
gives both. ``flashio crosscheck`` prints the table; docs/validation.md explains the method.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

import kernels
import simulator
from simulator.calibration import Calibration, load_calibration

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

DATA_DIR = Path(__file__).resolve().parents[1] / "data" / "gpu"
METRICS = ("time", "global_bytes", "hbm_bytes")
TRAINING = "event-timed rows with seq_len 1024 or 4096 (bf16, non-causal); all others held out"
NCU_GLOBAL = ("l1tex__m_xbar2l1tex_read_bytes.sum", "l1tex__m_l1tex2xbar_write_bytes.sum")
NCU_HBM = ("dram__bytes_read.sum", "dram__bytes_write.sum")
NCU_TIME = "gpu__time_duration.sum"
# kernels whose CUDA code the schedule's options change (standard.cu: SOFTMAX_PASSES and
# SOFTMAX_ROWS shape std_softmax only)
OPTION_KERNELS = ("softmax",)
EVENTS = "CUDA events, median of 20, inputs rotated (warm GPU, inputs not in L2)"
NCU = "Nsight Compute, one launch, caches flushed before the kernel (cold L2)"


@dataclasses.dataclass(frozen=True, slots=True)
class Config:
    """One measured configuration: a schedule on a shape with its tiling; ``kernel`` is the
    index of the profiled kernel (Nsight Compute rows) or None (the whole launch sequence)."""

    schedule: str
    shape: kernels.AttentionShape
    block_q: int
    block_kv: int
    warps: int
    options: tuple[tuple[str, int], ...] = ()
    kernel: int | None = None

    def build(self) -> kernels.Schedule:
        return kernels.schedule(
            self.schedule,
            self.shape,
            self.block_q,
            self.block_kv,
            self.warps,
            **dict(self.options),
        )

    @property
    def subset(self) -> str:
        """``train`` for event-timed configurations in :data:`TRAINING`, else ``held-out``."""
        sh = self.shape
        fitted = sh.seq_len in (1024, 4096) and sh.dtype == "bf16" and not sh.causal
        return "train" if self.kernel is None and fitted else "held-out"

    def variants(self) -> dict[str, str]:
        """Kernel name -> compiled-variant key (calibration.toml's issue efficiency keys): the
        kernel, head dim, tiling, warps and the schedule's options (dtype and causal are
        runtime or type choices of the same code and are left out)."""
        tail = "".join(f" {k}={v}" for k, v in self.options)
        return {
            k.name: f"{k.name} d={self.shape.head_dim} {self.block_q}x{self.block_kv} "
            f"w={self.warps}{tail if k.name in OPTION_KERNELS else ''}"
            for k in self.build().kernels
        }

    def label(self) -> str:
        sh = self.shape
        causal = " causal" if sh.causal else ""
        return (
            f"{self.schedule} {sh.dtype}{causal} {sh.batch}x{sh.heads} N={sh.seq_len} "
            f"d={sh.head_dim} {self.block_q}x{self.block_kv} {self.warps}w"
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Report:
    """``rows`` (dicts, see :func:`crosscheck`) and ``summary`` (see :func:`summarize`)."""

    rows: tuple[dict, ...]
    summary: dict

    def to_json(self) -> dict:
        return {"rows": list(self.rows), "summary": self.summary}


# ------------------------------------------------------------------------------ reading data
def read_timings(path: Path) -> list[tuple[Config, dict]]:
    """Event-timed configurations of our kernels from ``gpu_measure.json`` (or its CSV):
    ``(config, {"time_s": total, "parts_s": per kernel})``; PyTorch rows are skipped."""
    path = Path(path)
    if path.suffix == ".json":
        rows = json.loads(path.read_text())["results"]
    else:
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
    out = []
    for r in rows:
        if r["impl"].startswith("torch"):
            continue
        shape = kernels.AttentionShape(
            int(r["batch"]),
            int(r["heads"]),
            int(r["seq_len"]),
            int(r["head_dim"]),
            r["dtype"],
            causal=str(r["causal"]) == "True",
            kv_heads=_opt_int(r.get("kv_heads")),
        )
        parts = r["parts_median_ms"]
        parts = json.loads(parts) if isinstance(parts, str) else parts
        opts = tuple(sorted((k, int(v)) for k, v in (r.get("options") or {}).items()))
        cfg = Config(
            r["impl"], shape, int(r["block_q"]), int(r["block_kv"]), int(r["warps"]), opts
        )
        out.append(
            (cfg, {"time_s": float(r["median_ms"]) * 1e-3, "parts_s": [p * 1e-3 for p in parts]})
        )
    return out


def _opt_int(x):
    return None if x in (None, "", "None") else int(x)


def parse_ncu_csv(text: str) -> list[dict]:
    """An ``ncu --csv`` report (``--print-units base``), one dict per profiled kernel launch in
    ID order: ``{"id", "kernel", "metrics": {name: value}}``. Lines before the header (ncu's
    ``==PROF==`` notes) are skipped; values with thousands separators are accepted."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        raise ValueError(
            'not an Nsight Compute CSV: no header line starting with "ID"; make it with '
            "ncu --csv --print-units base --metrics ... (docs/validation.md)"
        )
    launches: dict[int, dict] = {}
    for r in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        one = launches.setdefault(int(r["ID"]), {"id": int(r["ID"]), "kernel": r["Kernel Name"]})
        try:
            value = float(r["Metric Value"].replace(",", ""))
        except ValueError:
            continue  # a metric ncu could not collect ("n/a")
        unit, name = r.get("Metric Unit", ""), r["Metric Name"]
        want = "byte" if name in NCU_GLOBAL + NCU_HBM else "ns" if name == NCU_TIME else None
        if want and unit not in (want, "nsecond" if want == "ns" else want):
            raise ValueError(
                f"metric {name} is in {unit!r}, not {want!r}: run ncu with --print-units base"
            )
        one.setdefault("metrics", {})[r["Metric Name"]] = value
    return [launches[i] for i in sorted(launches)]


def _measured(metrics: dict) -> dict:
    out = {}
    if all(m in metrics for m in NCU_GLOBAL):
        out["global_bytes"] = sum(metrics[m] for m in NCU_GLOBAL)
    if all(m in metrics for m in NCU_HBM):
        out["hbm_bytes"] = sum(metrics[m] for m in NCU_HBM)
    if NCU_TIME in metrics:
        out["kernel_time_s"] = metrics[NCU_TIME] * 1e-9
    return out


def read_ncu(path: Path, launches: Path | None = None) -> list[tuple[Config, dict]]:
    """Profiled kernels of ``benchmarks/gpu_measure.py --mode ncu``: the CSV and the
    ``ncu_launches.json`` written beside it (which launch is which configuration)."""
    path = Path(path)
    launches = Path(launches) if launches else path.with_name("ncu_launches.json")
    if not launches.is_file():
        raise ValueError(
            f"{path}: needs {launches.name} beside it (which launch is which configuration); "
            "for a kernel of your own give --schedule, the shape and the tiling instead"
        )
    order = json.loads(launches.read_text())["launches"]
    profiled = parse_ncu_csv(path.read_text())
    if len(profiled) != len(order):
        raise ValueError(
            f"{path}: {len(profiled)} profiled launches, {launches.name} lists {len(order)}"
        )
    out = []
    for prof, ln in zip(profiled, order, strict=True):
        if "for" in ln:  # the forward pass run to make a backward's inputs
            continue
        b, h, n, d = ln["shape"]
        shape = kernels.AttentionShape(b, h, n, d, "bf16", causal=ln["causal"])
        cfg = Config(
            ln["schedule"], shape, *ln["tiles"], options=tuple(sorted(ln["options"].items()))
        )
        names = [k.name for k in cfg.build().kernels]
        kernel = _kernel_index(prof["kernel"], names)
        out.append((dataclasses.replace(cfg, kernel=kernel), _measured(prof["metrics"])))
    return out


def _kernel_index(ncu_name: str, names: list[str]) -> int:
    for cand in (ncu_name, ncu_name.removeprefix("std_")):
        if cand in names:
            return names.index(cand)
    raise ValueError(f"profiled kernel {ncu_name!r} is not one of the schedule's {names}")


def ncu_rows_for(text: str, config: Config, kernel: str | None = None) -> list[tuple]:
    """Match the launches of a user's ``ncu --csv`` report to ``config``'s kernels: by name
    (``kernel`` forces one), else by position (launch i is kernel i mod the kernel count)."""
    names = [k.name for k in config.build().kernels]
    out = []
    for i, prof in enumerate(parse_ncu_csv(text)):
        if kernel is not None:
            if kernel not in names:
                raise ValueError(f"--kernel {kernel!r}: the schedule's kernels are {names}")
            k = names.index(kernel)
        else:
            try:
                k = _kernel_index(prof["kernel"], names)
            except ValueError:
                k = i % len(names)
        out.append((dataclasses.replace(config, kernel=k), _measured(prof.get("metrics", {}))))
    return out


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
    opts = cal.options_for(config.variants())
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
    """The uncalibrated model, for comparison: the built-in ``h200`` spec (datasheet rates,
    full L2), docs/model.md's defaults, no harness (time = the simulated kernels)."""
    from simulator.calibration import Harness
    from simulator.simulate import ModelOptions

    return Calibration(
        simulator.load_gpu("h200"), ModelOptions(), Harness(0.0, 0.0), (), "", "h200 datasheet"
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
        Default ``simulator/calibration.toml``.
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


# ------------------------------------------------------------------------------ calibration
PROBE_DIR = DATA_DIR / "probe"


def _ncu_by_id(path: Path) -> list[dict]:
    return parse_ncu_csv(path.read_text())


def probe_constants(probe_dir: Path = PROBE_DIR) -> dict:
    """The measured constants of ``simulator/calibration.toml``, computed from the probe data
    (no attention configuration enters). Returns ``{"spec": {...}, "notes": {...}}``: spec
    overrides and, per key, where it comes from."""
    probe = json.loads((probe_dir / "probe.json").read_text())
    sms = probe["provenance"]["sm_count"]
    # the SM clock while our kernels run (tensor-heavy kernels run below the 1980 MHz maximum)
    freq = [
        p["metrics"]["sm__cycles_elapsed.avg.per_second"]
        for p in _ncu_by_id(probe_dir / "ncu_metrics.csv")
        if p["kernel"].startswith("flash2")
    ]
    clock = float(np.median(freq))
    mma = [
        r["flops_per_cycle_per_sm"]
        for r in probe["mma_sync_bf16"]
        if r["ilp"] >= 4 and r["ctas_per_sm"] == 1 and r["warps_per_cta"] >= 8
    ]
    ex2 = [r["ops_per_cycle_per_sm"] for r in probe["alu"] if r["op"] == "ex2"]
    ffma = [r["ops_per_cycle_per_sm"] for r in probe["alu"] if r["op"] == "ffma"]
    l2_bw = max(r["bytes_per_s"] for r in probe["chunked"] if r["source"] == "l2")
    lat = {r["kind"]: r["cycles_per_load"] for r in probe["latency"]}
    gaps = [
        p - r["spin_ns"] * 1e-6
        for r in probe["launch"]
        if r["kernel"] == "spin" and r["launches"] > 1 and r["spin_ns"] >= 10_000
        for p in r["parts_median_ms"][1:]
    ]
    writes = json.loads((probe_dir / "ncu_write_launches.json").read_text())["launches"]
    kept = [
        w["write_bytes"] - p["metrics"]["dram__bytes_write.sum"]
        for w, p in zip(writes, _ncu_by_id(probe_dir / "ncu_write.csv"), strict=True)
        if w["kernel"] == "write_bw" and w["write_bytes"] >= 32 << 20
    ]
    granule = 64 * 128
    spec = {
        "tensor_bf16_flops_per_s": float(np.median(mma)) * sms * clock,
        "tensor_fp16_flops_per_s": float(np.median(mma)) * sms * clock,
        "sfu_ops_per_s": float(np.median(ex2)) * sms * clock,
        "fp32_flops_per_s": 2 * float(np.median(ffma)) * sms * clock,
        "l2_bandwidth_bytes_per_s": float(l2_bw),
        "l2_bytes": int(np.median(kept)) // granule * granule,
        "l2_latency_cycles": round(lat["l2_hit_1MB"]),
        "hbm_latency_cycles": round(lat["dram_1GB"]),
        "kernel_launch_s": float(np.median(gaps)) * 1e-3,
    }
    notes = {
        "clock_hz": clock,
        "mma_flops_per_cycle_per_sm": float(np.median(mma)),
        "ex2_per_cycle_per_sm": float(np.median(ex2)),
        "ffma_per_cycle_per_sm": float(np.median(ffma)),
    }
    return {"spec": spec, "notes": notes}


FIT_MIN_S = 50e-6  # event intervals shorter than this are mostly host launch time
# kernels whose time is memory and launch latency, not arithmetic: the backward's pre (row-by-row
# shuffle reductions of dO * O) and post (dQ conversion); an efficiency would stand for
# something else, so they keep 1
NOT_FITTED = ("flash2_bwd_pre", "flash2_bwd_post")
PREFETCH_KERNELS = ("flash2_fwd",)  # kernels/cuda/flash2_fwd.cu: cp.async of K_j+1, V_j ahead
CALIBRATION_HEADER = """\
# Calibration of the h200 spec for the cross-check against this project's CUDA kernels
# (analysis/crosscheck.py, docs/validation.md). WRITTEN BY `flashio crosscheck --fit`: do not
# edit by hand; change the probe data or the code and run the fit again.
#
# [spec]     measured on the validation H200 by microbenchmarks (data/gpu/probe/, provenance
#            in probe.json and README.md there); no attention configuration enters these.
# [model]    switches of the time model (simulator.simulate.ModelOptions), from the kernels'
#            code and Nsight Compute's view of them (docs/validation.md).
# [harness]  host-side launch costs of benchmarks/gpu_measure.py's timing loop, read off
#            data/gpu/probe/harness.json (tiny shapes) with the simulated kernel times removed.
# [fit]      per-kernel issue efficiency, fitted on the TRAINING subset named below only."""


SPEC_SOURCES = {  # where each measured constant of calibration.toml comes from
    "tensor_bf16_flops_per_s": "mma.sync m16n8k16 bf16->fp32, saturated (probe.json "
    "mma_sync_bf16: ILP >= 4, >= 8 warps, 1 CTA per SM), per cycle x SMs x clock",
    "tensor_fp16_flops_per_s": "as bf16: the same mma.sync rate",
    "sfu_ops_per_s": "ex2.approx.ftz.f32 per cycle per SM (probe.json alu) x SMs x clock",
    "fp32_flops_per_s": "FFMA lanes per cycle per SM (probe.json alu) x 2 x SMs x clock",
    "l2_bandwidth_bytes_per_s": "cp.async reads of an L2-resident buffer, best of the chunked "
    "probe (probe.json chunked)",
    "l2_bytes": "dirty bytes a streaming write of >= 32 MB leaves in L2 (ncu_write.csv), "
    "median, in whole 8 KiB granules: the capacity a kernel sees",
    "l2_latency_cycles": "pointer chase, L2 hit, ld.global.cg (probe.json latency)",
    "hbm_latency_cycles": "pointer chase, DRAM, 65,920-byte stride after a flush (probe.json "
    "latency)",
    "kernel_launch_s": "gap between back-to-back kernels: spin kernels of known length, "
    "event intervals less the spin (probe.json launch)",
}


def render_calibration(spec: dict, notes: dict, harness: dict, efficiency: dict) -> str:
    """The text of ``simulator/calibration.toml``."""
    lines = [
        CALIBRATION_HEADER,
        "",
        'base = "h200"',
        "",
        "[spec]",
        f"# per-cycle rates x the SM clock Nsight Compute read while the flash kernels "
        f"ran, {notes['clock_hz'] / 1e9:.3f} GHz",
    ]
    for key, value in spec.items():
        v = f"{value:_}" if isinstance(value, int) else f"{value:.6g}"
        lines.append(f"{key} = {v}  # {SPEC_SOURCES[key].split(' (')[0]}")
    lines += [
        "",
        "[model]",
        "shared_issue = true  # one arithmetic server per SM",
        f"prefetch_kernels = {json.dumps(list(PREFETCH_KERNELS))}  # cp.async ahead",
        "",
        "[harness]",
    ]
    for key, value in harness.items():
        lines.append(f"{key} = {value:.4g}")
    lines += [
        "",
        "[fit]",
        f'training = "{TRAINING}"',
        'command = "flashio crosscheck --fit"',
        "",
        "[fit.issue_efficiency]",
    ]
    for key, value in sorted(efficiency.items()):
        lines.append(f'"{key}" = {value:.4f}')
    return "\n".join(lines) + "\n"


def fit_harness(cal: Calibration, probe_dir: Path = PROBE_DIR) -> dict:
    """Host launch costs from the tiny-shape timings (N = 128, one head): the first interval
    less the simulated first kernel; later intervals less the simulated change in kernel time."""
    first, later = [], []
    for r in json.loads((probe_dir / "harness.json").read_text())["rows"]:
        if r["seq_len"] != 128:
            continue
        shape = kernels.AttentionShape(1, 1, r["seq_len"], r["head_dim"], "bf16")
        cfg = Config(r["schedule"], shape, *r["tiles"])
        opts = cal.options_for(cfg.variants())
        t = [k.time_s for k in simulator.simulate(cfg.build(), cal.gpu, options=opts).kernels]
        parts = [p * 1e-3 for p in r["parts_median_ms"]]
        first.append(parts[0] - t[0])
        later += [parts[i] - t[i] + t[i - 1] for i in range(1, len(parts))]
    return {
        "first_launch_s": float(np.median(first)),
        "launch_interval_s": float(np.median(later)),
    }


def _next_efficiency(h: list[tuple[float, float]]) -> float:
    """Next log efficiency from (log efficiency, mean log ratio) points: the ratio falls as
    the efficiency rises. Regula falsi inside the tightest bracket of a sign change, else a
    step as if time ~ 1 / efficiency (times respond little where memory or launches bind)."""
    pos = [p for p in h if p[1] > 0]  # too slow: efficiency must rise
    neg = [p for p in h if p[1] <= 0]
    if pos and neg:
        (x1, g1), (x2, g2) = max(pos), min(neg)
        if x2 > x1:  # the bracket is consistent with a decreasing ratio
            return x1 + (x2 - x1) * g1 / (g1 - g2) if g1 != g2 else (x1 + x2) / 2
    x, g = h[-1]
    return x + g


def fit_efficiency(cal: Calibration, configs, passes: int = 6, jobs: int = 1, log=print) -> dict:
    """Issue efficiency per compiled kernel variant (:meth:`Config.variants`): the value at
    which the mean log ratio of predicted to measured event intervals of that variant is zero,
    over the training ``configs`` whose measured interval is at least :data:`FIT_MIN_S` (all of
    them where none is), found by :func:`_next_efficiency` steps on log efficiency in [0.01, 1].
    Kernels in :data:`NOT_FITTED`, and variants that no efficiency in the range reproduces, keep
    1."""
    eff = dict(cal.efficiency)
    hist: dict[str, list[tuple[float, float]]] = {}
    for it in range(passes):
        rep = crosscheck(configs, cal, jobs=jobs)
        pairs: dict[str, list] = {}
        for r in rep.rows:
            keys = list(_config_of(r).variants().values())
            for key, p, m in zip(
                keys, r["predicted"]["parts_s"], r["measured"]["parts_s"], strict=True
            ):
                pairs.setdefault(key, []).append((p, m))
        for key, pm in sorted(pairs.items()):
            if key.split()[0] in NOT_FITTED:
                eff[key] = 1.0
                continue
            big = [x for x in pm if x[1] >= FIT_MIN_S]
            g = mean_log_ratio(big or pm)
            h = hist.setdefault(key, [])
            h.append((math.log(eff.setdefault(key, cal.efficiency_of(key))), g))
            eff[key] = float(np.clip(math.exp(_next_efficiency(h)), 0.01, 1.0))
            log(f"pass {it + 1}: {key:48s} log(pred/meas) {g:+.3f} -> {eff[key]:.4f}")
        cal = dataclasses.replace(cal, efficiency=tuple(sorted(eff.items())))
    for key, h in hist.items():
        best = min(h, key=lambda p: abs(p[1]))
        eff[key] = math.exp(best[0])  # the best value simulated, not an extrapolation
        at_limit = eff[key] <= 0.0101 or eff[key] >= 0.999
        gs = [g for _, g in h]
        if abs(best[1]) > 0.05 and (at_limit or max(gs) - min(gs) < 0.05):
            # no efficiency in (0.01, 1] reproduces it: its time is not its arithmetic
            log(f"{key}: not fitted (best log ratio {best[1]:+.3f} at {eff[key]:.3f}); left at 1")
            eff[key] = 1.0
    return eff


def _config_of(row: dict) -> Config:
    sh = kernels.AttentionShape(**row["shape"])
    return Config(
        row["schedule"],
        sh,
        row["block_q"],
        row["block_kv"],
        row["warps"],
        tuple(sorted(row["options"].items())),
    )


def fit_calibration(path: Path | None = None, jobs: int = 1, passes: int = 6, log=print) -> str:
    """Recompute ``simulator/calibration.toml``: measured constants from the probe data, the
    harness from the tiny-shape timings, then the per-kernel issue efficiency on the training
    subset (minutes). Writes the file and returns its text."""
    from simulator.calibration import DEFAULT_PATH, Harness

    path = Path(path) if path else DEFAULT_PATH
    consts = probe_constants()
    cal = load_calibration(path)
    cal = dataclasses.replace(cal, gpu=simulator.load_gpu("h200").replace(**consts["spec"]))
    configs = [c for c in read_timings(DATA_DIR / "gpu_measure.json") if c[0].subset == "train"]
    harness = fit_harness(cal)
    log(f"harness: {harness}")
    cal = dataclasses.replace(cal, harness=Harness(**harness))
    eff = fit_efficiency(cal, configs, passes=passes, jobs=jobs, log=log)
    cal = dataclasses.replace(cal, efficiency=tuple(sorted(eff.items())))
    harness = fit_harness(cal)  # once more, with the fitted kernel times
    log(f"harness: {harness}")
    text = render_calibration(consts["spec"], consts["notes"], harness, eff)
    path.write_text(text)
    return text


# ----------------------------------------------------------------- facts quoted in the docs
def _profiled_shapes(kernel_names: tuple[str, ...], count: int) -> list:
    """Shapes of the first ``count`` launches of ``gpu_measure --mode ncu`` (in
    ``ncu_launches.json`` order) whose kernel is in ``kernel_names``, as ncu's -k filter kept
    them; the forward run for a backward has the backward's shape."""
    launches = json.loads((DATA_DIR / "ncu_launches.json").read_text())["launches"]
    shapes = []
    for i, x in enumerate(launches):
        if x["kernel"] in kernel_names:
            shapes.append(x.get("shape") or next(y["shape"] for y in launches[i:] if "shape" in y))
    return shapes[:count]


def ncu_view(probe_dir: Path = PROBE_DIR) -> list[dict]:
    """Per kernel profiled by the probe runs (Nsight Compute): active warps per scheduler,
    warp cycles per issued instruction and the three largest stall reasons in it, thread
    instructions per attention score (b h N^2), and (run 1's kernels) SM clock, tensor pipe and
    issue activity."""
    stalls = _ncu_by_id(probe_dir / "ncu_stalls.csv")
    metrics = _ncu_by_id(probe_dir / "ncu_metrics.csv")
    shapes = _profiled_shapes(
        ("flash2_fwd", "flash2_bwd", "std_qk", "std_softmax", "std_pv"), len(stalls)
    )
    run1 = list(
        zip(
            _profiled_shapes(("flash2_fwd", "flash2_bwd", "std_softmax"), len(metrics)),
            metrics,
            strict=True,
        )
    )
    out = []
    for st, shape in zip(stalls, shapes, strict=True):
        sm = st["metrics"]
        per = {
            k.split("issue_stalled_")[1].split("_per_issue")[0]: v
            for k, v in sm.items()
            if "issue_stalled" in k
        }
        top = sorted(((v, k) for k, v in per.items() if k != "selected"), reverse=True)[:3]
        b, h, n, _ = shape
        row = {
            "kernel": st["kernel"],
            "shape": shape,
            "warps_per_scheduler": sm["smsp__warps_active.avg.per_cycle_active"],
            "cycles_per_issue": sum(per.values()),
            "top_stalls": [(k, v) for v, k in top],
            "thread_instructions_per_score": sm["smsp__inst_executed.sum"] * 32 / (b * h * n * n),
        }
        same = [m for s2, m in run1 if m["kernel"] == st["kernel"] and s2 == shape]
        if same:
            mm = same[0]["metrics"]
            row["clock_hz"] = mm["sm__cycles_elapsed.avg.per_second"]
            row["tensor_active"] = (
                mm["sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"] / 100
            )
            row["issue_active"] = mm["smsp__issue_active.avg.pct_of_peak_sustained_active"] / 100
            run1.remove(next(x for x in run1 if x[1] is same[0]))
        out.append(row)
    return out


def write_retention(probe_dir: Path = PROBE_DIR) -> list[dict]:
    """The streaming-write probe: bytes written (and then read) by one kernel, DRAM writes
    during it, and what stayed dirty in L2 (written - DRAM writes)."""
    order = json.loads((probe_dir / "ncu_write_launches.json").read_text())["launches"]
    out = []
    for w, p in zip(order, _ncu_by_id(probe_dir / "ncu_write.csv"), strict=True):
        dw = p["metrics"]["dram__bytes_write.sum"]
        out.append(
            {
                "write_bytes": w["write_bytes"],
                "read_bytes": w["read_bytes"],
                "dram_write_bytes": dw,
                "kept_bytes": w["write_bytes"] - dw,
            }
        )
    return out


def repeatability(data_dir: Path = DATA_DIR) -> dict:
    """This run's median times of our kernels against ``previous_run``'s, per size class
    (flash2_bwd left out: its kernel changed between the runs, docs/gpu.md)."""
    now = {c: m["time_s"] for c, m in read_timings(data_dir / "gpu_measure.json")}
    then = {
        c: m["time_s"] for c, m in read_timings(data_dir / "previous_run" / "gpu_measure.json")
    }
    small, large = [], []
    for c, t in now.items():
        if c in then and c.schedule != "flash2_bwd":
            (small if t < 1e-4 else large if t >= 3e-4 else []).append(t / then[c] - 1)
    return {
        "below_0.1ms": float(np.max(np.abs(small))),
        "n_below": len(small),
        "above_0.3ms": float(np.max(np.abs(large))),
        "n_above": len(large),
    }
