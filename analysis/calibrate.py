"""Fitting ``simulator/calibration.toml``, and the measured facts docs/validation.md quotes.

The launch harness and the machine constants come from the probes in ``data/gpu/probe``; the
per-kernel issue efficiencies are fitted on the training subset of the attention measurements
(``analysis.gpu_data.TRAINING``) only, so that the held-out rows test the model.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np

import kernels
import simulator
from analysis.crosscheck import crosscheck, mean_log_ratio
from analysis.gpu_data import DATA_DIR, TRAINING, Config, parse_ncu_csv, read_timings
from simulator.calibration import Calibration, load_calibration

PROBE_DIR = DATA_DIR / "probe"
BASE_GPU = "h200"  # the built-in spec calibration.toml overrides


def _ncu_by_id(path: Path) -> list[dict]:
    return parse_ncu_csv(path.read_text())


def probe_constants(probe_dir: Path = PROBE_DIR, base: str = BASE_GPU) -> dict:
    """The measured constants of ``simulator/calibration.toml``, computed from the probe data
    (no attention configuration enters). Returns ``{"spec": {...}, "notes": {...}}``: spec
    overrides of ``base`` and the clocks and per-cycle rates they come from.

    Notes
    -----
    The probes measure per SM per cycle at the clock Nsight Compute read while the flash
    kernels ran (``notes["clock_hz"]``, below the spec's maximum). The spec keeps its own
    ``clock_hz``, so a rate is written per cycle of that clock: measured per cycle x measured
    clock / ``clock_hz``, the same rate per second (docs/gpus.md, "What scales with what").
    """
    probe = json.loads((probe_dir / "probe.json").read_text())
    gpu = simulator.load_gpu(base)
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
    # per cycle at the measured clock -> per cycle at the spec's clock_hz: the same rate per
    # second, measured per cycle x measured clock / clock_hz
    at_spec_clock = clock / gpu.clock_hz
    spec = {
        "tensor_bf16_flops_per_cycle_per_sm": float(np.median(mma)) * at_spec_clock,
        "tensor_fp16_flops_per_cycle_per_sm": float(np.median(mma)) * at_spec_clock,
        "sfu_ops_per_cycle_per_sm": float(np.median(ex2)) * at_spec_clock,
        "fp32_flops_per_cycle_per_sm": 2 * float(np.median(ffma)) * at_spec_clock,
        # the chip's L2 bytes/s, per partition and per cycle of clock_hz
        "l2_bandwidth_bytes_per_cycle_per_partition": float(l2_bw)
        / (gpu.l2_partitions * gpu.clock_hz),
        "l2_bytes": int(np.median(kept)) // granule * granule,
        "l2_latency_cycles": round(lat["l2_hit_1MB"]),
        "hbm_latency_cycles": round(lat["dram_1GB"]),
        "kernel_launch_s": float(np.median(gaps)) * 1e-3,
    }
    notes = {
        "clock_hz": clock,
        "spec_clock_hz": gpu.clock_hz,
        "l2_partitions": gpu.l2_partitions,
        "l2_bandwidth_bytes_per_s": float(l2_bw),
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
    "tensor_bf16_flops_per_cycle_per_sm": "mma.sync m16n8k16 bf16->fp32, saturated (probe.json "
    "mma_sync_bf16: ILP >= 4, >= 8 warps, 1 CTA per SM), per cycle per SM x measured clock / "
    "clock_hz",
    "tensor_fp16_flops_per_cycle_per_sm": "as bf16: the same mma.sync rate",
    "sfu_ops_per_cycle_per_sm": "ex2.approx.ftz.f32 per cycle per SM (probe.json alu) x "
    "measured clock / clock_hz",
    "fp32_flops_per_cycle_per_sm": "FFMA lanes per cycle per SM (probe.json alu) x 2 x "
    "measured clock / clock_hz",
    "l2_bandwidth_bytes_per_cycle_per_partition": "cp.async reads of an L2-resident buffer, "
    "best of the chunked probe (probe.json chunked), bytes/s / (l2_partitions x clock_hz)",
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
    clock, spec_clock = notes["clock_hz"] / 1e9, notes["spec_clock_hz"] / 1e9
    lines = [
        CALIBRATION_HEADER,
        "",
        f'base = "{BASE_GPU}"',
        "",
        "[spec]",
        "# per-cycle rates measured at the SM clock Nsight Compute read while the flash kernels "
        "ran,",
        f"# {clock:.3f} GHz, written per cycle of the spec's clock_hz, {spec_clock:.2f} GHz: "
        f"measured x {clock:.3f} / {spec_clock:.2f},",
        f"# the same rate per second; L2: the measured {notes['l2_bandwidth_bytes_per_s']:.6g} "
        f"B/s / ({notes['l2_partitions']} partitions x clock_hz)",
    ]
    for key, value in spec.items():
        if isinstance(value, int):
            v = f"{value:_}"
        elif "_per_cycle_" in key:  # a quotient: in full, so that x SMs x clock_hz gives back
            v = repr(value)  # the measured rate per second
        else:
            v = f"{value:.6g}"
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
    cal = dataclasses.replace(cal, gpu=simulator.load_gpu(BASE_GPU).replace(**consts["spec"]))
    configs = [c for c in read_timings(DATA_DIR / "gpu_measure.json") if c[0].subset == "train"]
    harness = fit_harness(cal)
    log(f"harness: {harness}")
    cal = dataclasses.replace(cal, harness=Harness(**harness))
    eff = fit_efficiency(cal, configs, passes=passes, jobs=jobs, log=log)
    cal = dataclasses.replace(cal, efficiency=tuple(sorted(eff.items())))
    harness = fit_harness(cal)  # once more, with the fitted kernel times
    log(f"harness: {harness}")
    text = render_calibration(consts["spec"], consts["notes"], harness, eff)
    with simulator.atomic_write(path) as f:
        f.write(text)
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
