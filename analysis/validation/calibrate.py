"""Writing ``calibration.toml`` (beside this module), and the measured facts docs/validation.md
quotes.

The launch harness comes from the tiny-shape timings in ``data/gpu/probe/harness.json``;
``probe_constants`` recomputes the memory-side constants of ``h200-measured`` from the probe
data (tests/test_crosscheck.py checks the spec file against it). Nothing is fitted to an
attention kernel's timing.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import numpy as np

from flashio import kernels, simulator
from flashio.analysis.validation.calibration import Calibration, load_calibration
from flashio.analysis.validation.gpu_data import DATA_DIR, Config, parse_ncu_csv, read_timings

PROBE_DIR = DATA_DIR / "probe"
BASE_GPU = "h200-measured"  # the spec calibration.toml names


def _ncu_by_id(path: Path) -> list[dict]:
    return parse_ncu_csv(path.read_text())


def probe_constants(probe_dir: Path = PROBE_DIR) -> dict:
    """The memory-side constants of ``h200-measured`` and the SM clock, computed from the probe
    data (no attention configuration enters): ``{key: value}`` for the keys of
    :data:`SPEC_SOURCES`. Per-cycle values are per cycle of the SM clock Nsight Compute read
    while the flash kernels ran."""
    probe = json.loads((probe_dir / "probe.json").read_text())
    gpu = simulator.load_gpu(BASE_GPU)
    freq = [
        p["metrics"]["sm__cycles_elapsed.avg.per_second"]
        for p in _ncu_by_id(probe_dir / "ncu_metrics.csv")
        if p["kernel"].startswith("flash2")
    ]
    clock = float(np.median(freq))
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
    atomics = json.loads((probe_dir / "atomics.json").read_text())["rows"]
    red = [r["bytes_per_s"] for r in atomics if r.get("one_sm") and r["threads"] >= 128]
    return {
        **bulk_copy_constants(clock, probe_dir),
        **cta_turnaround(probe_dir),
        "sm_reduce_bytes_per_cycle_per_sm": float(np.median(red)) / clock,
        "clock_hz": clock,
        "l2_bandwidth_bytes_per_cycle_per_partition": float(l2_bw) / (gpu.l2_partitions * clock),
        "l2_bytes": int(np.median(kept)) // granule * granule,
        "l2_latency_cycles": round(lat["l2_hit_1MB"]),
        "hbm_latency_cycles": round(lat["dram_1GB"]),
        "kernel_launch_s": float(np.median(gaps)) * 1e-3,
    }


def bulk_copy_constants(clock_hz: float, probe_dir: Path = PROBE_DIR) -> dict:
    """One SM's bulk copies (TMA) alone on the GPU, per cycle of ``clock_hz``: a straight
    line through each lone CTA's copy time against its bytes. In (burst.py: cp.async.bulk of
    16 to 192 KiB into shared memory): from the L2, whose rows lie within 19 cycles of their
    line, the slope gives the rate and the intercept the latency; from HBM, whose rows
    scatter more, the mean intercept at that slope the latency. Out (burst.py --stores: 16
    to 64 KiB, waited until read): the stores' own line. Rates are bytes/s over
    ``clock_hz``, the probe's clock read off its cycles and nanoseconds; latencies are in the
    probe's cycles, as the pointer chase's are."""

    def columns(rows):
        nbytes = np.array([r["bytes"] for r in rows], np.float64)
        cycles = np.array([r["cycles"][0] for r in rows], np.float64)
        ns = np.array([r["end_ns"][0] - r["start_ns"][0] for r in rows], np.float64)
        return nbytes, cycles, cycles.sum() / ns.sum() * 1e9  # the probe's clock, Hz

    loads = json.loads((probe_dir / "burst.json").read_text())["rows"]
    lone = [r for r in loads if r["copy"] == "tma" and r["ctas"] == 1]
    nbytes, cycles, clock = columns([r for r in lone if r["where"] == "l2"])
    slope, l2_latency = np.polyfit(nbytes, cycles, 1)  # cycles per byte, cycles
    hbm_bytes, hbm_cycles, _ = columns([r for r in lone if r["where"] == "hbm"])
    stores = json.loads((probe_dir / "burst_stores.json").read_text())["rows"]
    out_bytes, out_cycles, out_clock = columns(
        [r for r in stores if r["ctas"] == 1 and r["wait"] == "read"]
    )
    out_slope, out_latency = np.polyfit(out_bytes, out_cycles, 1)
    return {
        "bulk_load_bytes_per_cycle_per_sm": float(clock / slope / clock_hz),
        "bulk_l2_latency_cycles": round(l2_latency),
        "bulk_hbm_latency_cycles": round(float(np.mean(hbm_cycles - hbm_bytes * slope))),
        "bulk_store_bytes_per_cycle_per_sm": float(out_clock / out_slope / clock_hz),
        "bulk_store_latency_cycles": round(out_latency),
    }


def slot_gaps_ns(row: dict) -> np.ndarray:
    """One launch of data/gpu/probe/cta_dispatch.py (per CTA its ``smid``, ``start_ns`` and
    ``end_ns`` on the global timer): per CTA after the first wave, the gap from the last end of
    a CTA on its SM before its start to that start, in ns."""
    sm, start, end = (np.asarray(row[k], np.int64) for k in ("smid", "start_ns", "end_ns"))
    out = []
    for s in np.unique(sm):
        mine = np.flatnonzero(sm == s)
        for i in mine:
            before = end[mine][end[mine] <= start[i]]
            if len(before):
                out.append(start[i] - before.max())
    return np.array(out, np.float64)


def cta_turnaround(probe_dir: Path = PROBE_DIR) -> dict:
    """The block scheduler's turnaround, in seconds on the global timer: with one CTA an SM on
    all 132 SMs (cta_dispatch.json.gz, the H200), the median over the launches of each
    launch's median gap from a CTA's end to the next CTA's start on its SM."""
    doc = json.loads(gzip.decompress((probe_dir / "cta_dispatch.json.gz").read_bytes()))
    medians = [
        np.median(slot_gaps_ns(row))
        for row in doc["launches"]
        if row["sms"] == 132 and row["ctas_per_sm"] == 1
    ]
    return {"cta_turnaround_s": float(np.median(medians)) * 1e-9}


PREFETCH_KERNELS = ("flash2_fwd",)  # kernels/cuda/flash2_fwd.cu: cp.async of K_j+1, V_j ahead
CALIBRATION_HEADER = """\
# The model of the validation H200 for the cross-check against this project's CUDA kernels
# (analysis/validation/crosscheck.py, docs/validation.md). WRITTEN BY `flashio crosscheck --fit`:
# do not edit by hand; change the probe data or the code and run it again. Nothing here is
# fitted to an attention kernel's timing.
#
# base       the spec: h200-measured (simulator/specs/h200-measured.toml, microbenchmarks of
#            this H200 with their sources).
# [model]    switches of the time model (simulator.simulate.ModelOptions): the issue model
#            (each kernel's compiled main loop replayed, docs/model.md), from the kernels' code.
# [harness]  host-side launch costs of benchmarks/gpu_measure.py's timing loop, read off
#            data/gpu/probe/harness.json (tiny shapes) with the simulated kernel times removed."""


SPEC_SOURCES = {  # where probe_constants' values come from
    "bulk_load_bytes_per_cycle_per_sm": "one SM's cp.async.bulk into shared memory, 16-192 "
    "KiB of an L2-resident source: slope of copy time against bytes (burst.json, one CTA)",
    "bulk_l2_latency_cycles": "the same line's intercept",
    "bulk_hbm_latency_cycles": "mean intercept at that slope of the copies of a region no "
    "launch read (HBM)",
    "bulk_store_bytes_per_cycle_per_sm": "one SM's cp.async.bulk out of shared memory, 16-64 "
    "KiB, waited until read: slope (burst_stores.json, one CTA)",
    "bulk_store_latency_cycles": "the same line's intercept",
    "cta_turnaround_s": "the median gap from a CTA's end to the next CTA's start on its SM, "
    "one CTA an SM on 132 SMs, median of the launches (cta_dispatch.json.gz)",
    "sm_reduce_bytes_per_cycle_per_sm": "red.global.add.v2.f32 one SM sends, 128-1024 threads, "
    "median (atomics.json one_sm rows), bytes/s / clock",
    "clock_hz": "SM clock Nsight Compute read while flash2_fwd / flash2_bwd ran, median "
    "(ncu_metrics.csv)",
    "l2_bandwidth_bytes_per_cycle_per_partition": "cp.async reads of an L2-resident buffer, "
    "best of the chunked probe (probe.json chunked: 32 KiB, 4 CTAs an SM, each line read by 66 "
    "CTAs at once; lines no other SM reads come at about half: docs/model.md, 'What the model "
    "leaves out'), bytes/s / (l2_partitions x clock)",
    "l2_bytes": "dirty bytes a streaming write of >= 32 MB leaves in L2 (ncu_write.csv), "
    "median, in whole 8 KiB granules: the capacity a kernel sees",
    "l2_latency_cycles": "pointer chase, L2 hit, ld.global.cg (probe.json latency)",
    "hbm_latency_cycles": "pointer chase, DRAM, 65,920-byte stride after a flush (probe.json "
    "latency)",
    "kernel_launch_s": "gap between back-to-back kernels: spin kernels of known length, "
    "event intervals less the spin (probe.json launch)",
}


def render_calibration(harness: dict) -> str:
    """The text of ``analysis/validation/calibration.toml``."""
    lines = [
        CALIBRATION_HEADER,
        "",
        f'base = "{BASE_GPU}"',
        "",
        "[model]",
        "shared_issue = true  # one arithmetic server per SM (kernels the census does not hold)",
        f"prefetch_kernels = {json.dumps(list(PREFETCH_KERNELS))}  # cp.async ahead",
        "issue_model = true  # compiled main loops replayed (simulator.issue)",
        "cta_drift = true  # an SM's schedulers serve its oldest CTA first (docs/model.md)",
        "staged_loads = true  # one buffer per K/V tile: V_j during Q K_j^T, K_j+1 during P V_j",
        "pending_fills = true  # a read of a line whose fill is in flight waits for it",
        "",
        "[harness]",
    ]
    lines += [f"{key} = {value:.4g}" for key, value in harness.items()]
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
        res = simulator.simulate(cfg.build(), cal.gpu, options=cal.options)
        t = [k.time_s for k in res.kernels]
        parts = [p * 1e-3 for p in r["parts_median_ms"]]
        first.append(parts[0] - t[0])
        later += [parts[i] - t[i] + t[i - 1] for i in range(1, len(parts))]
    return {
        "first_launch_s": float(np.median(first)),
        "launch_interval_s": float(np.median(later)),
    }


def fit_calibration(path: Path | None = None, log=print) -> str:
    """Recompute ``calibration.toml``: the spec and the model switches as fixed above, the
    harness from the tiny-shape timings (host launch costs, harness.json) with the simulated
    kernel times removed. Writes the file and returns its text."""
    from flashio.analysis.validation.calibration import DEFAULT_PATH

    path = Path(path) if path else DEFAULT_PATH
    cal = load_calibration(path)
    cal = dataclasses.replace(cal, gpu=simulator.load_gpu(BASE_GPU))
    harness = fit_harness(cal)
    log(f"harness: {harness}")
    text = render_calibration(harness)
    with simulator.atomic_write(path) as f:
        f.write(text)
    return text


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
    (flash2_bwd and standard left out: their kernels changed between the runs, docs/gpu.md)."""
    now = {c: m["time_s"] for c, m in read_timings(data_dir / "gpu_measure.json")}
    then = {
        c: m["time_s"] for c, m in read_timings(data_dir / "previous_run" / "gpu_measure.json")
    }
    small, large = [], []
    for c, t in now.items():
        if c in then and c.schedule not in ("flash2_bwd", "standard"):
            (small if t < 1e-4 else large if t >= 3e-4 else []).append(t / then[c] - 1)
    return {
        "below_0.1ms": float(np.max(np.abs(small))),
        "n_below": len(small),
        "above_0.3ms": float(np.max(np.abs(large))),
        "n_above": len(large),
    }
