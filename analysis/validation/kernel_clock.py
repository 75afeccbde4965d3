"""The replay's cycles against the H200's, for kernels the GPU runs at different clocks.

data/gpu/probe/kernel_clock.py ran this project's mma.sync forwards, its Hopper forward at four
builds, flash-attn 2 and cuDNN (B = 1, H = 16, N = 16384, bf16) alone under Nsight Compute (SM
clock and duration: cycles) and back to back for 1.5 s (launch times, board power). A kernel's
cycles do not depend on the clock it ran at, so they compare the replay with the GPU where
times mix in the clock (docs/model.md, "One SM clock for every kernel").
"""

from __future__ import annotations

import json
import math
import statistics
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from flashio import kernels, simulator
from flashio.analysis.paths import DATA
from flashio.analysis.validation import families
from flashio.analysis.validation.family_rows import Measured
from flashio.analysis.validation.gpu_data import parse_ncu_csv
from flashio.simulator import issue

PROBE = DATA / "gpu" / "probe"
CLOCK = "sm__cycles_elapsed.avg.per_second"
SMS = 132  # the H200 the builds ran on: one CTA an SM (shared memory and registers)
LAUNCHES = 3  # per kernel under Nsight Compute (the probe's --launches)


def _row(label: str, d: int) -> Measured:
    """The probe's kernel ``label`` at head dim ``d`` as the cross-check prices it."""
    sh = kernels.AttentionShape(1, 16, 16384, d, "bf16")
    if label == "sdpa-flash":
        tiling = kernels.implementation("flash-attn2").tiling("flash2", sh)
        return Measured("flash-attn2", "flash2", sh, *tiling, 0.0, False)
    if label == "sdpa-cudnn":
        tiling = kernels.implementation("cudnn").tiling("flash2", sh)
        return Measured("cudnn", "flash2", sh, *tiling, 0.0, False)
    impl, tiles, extra = label.split(" ", 2)
    bq, bkv = map(int, tiles.split("x"))
    if impl == "flashio":  # "flashio 128x64 w8"
        return Measured("flashio", "flash2", sh, bq, bkv, int(extra[1:]), 0.0, False)
    warps = 4 * (bq // 64 + 1)  # "hopper 128x176 both": a producer and bq / 64 consumers
    return Measured("flashio-hopper", "flash2", sh, bq, bkv, warps, 0.0, False, overlap=extra)


def rows(run: str = "kernel_clock") -> list[dict]:
    """Per kernel of the probe's run ``run`` (``kernel_clock``: the H200, the default set;
    ``kernel_clock_d64``: ``--set d64``, on an H100 SXM, whose SMs are the H200's): the GPU's
    clock and cycles alone, its time and power back to back, the clock those cycles imply back
    to back, and the replay's cycles (on the H200's spec)."""
    sustained = json.loads((PROBE / f"{run}.json").read_text())["kernels"]
    profiled = parse_ncu_csv((PROBE / f"{run}_ncu.csv").read_text())
    if len(profiled) != LAUNCHES * len(sustained):
        raise ValueError(f"{run}_ncu.csv: {len(profiled)} launches, not {LAUNCHES} a kernel")
    hz = simulator.load_gpu(families.GPU).clock_hz
    out = []
    for i, k in enumerate(sustained):
        runs = [p["metrics"] for p in profiled[LAUNCHES * i : LAUNCHES * (i + 1)]]
        clock = statistics.median(m[CLOCK] for m in runs)
        cycles = statistics.median(m[CLOCK] * m["gpu__time_duration.sum"] * 1e-9 for m in runs)
        model = families.predict(_row(k["label"], k["head_dim"])) * hz
        out.append(
            {
                "label": k["label"],
                "head_dim": k["head_dim"],
                "kernel": profiled[LAUNCHES * i]["kernel"],
                "clock_alone_hz": clock,
                "cycles": cycles,
                "sustained_s": k["median_ms_last_half"] * 1e-3,
                "sustained_watts": k["median_watts_last_half"],
                "sustained_clock_hz": cycles / (k["median_ms_last_half"] * 1e-3),
                "model_cycles": model,
                "cycles_error": model / cycles - 1,
            }
        )
    return out


def gpu_cycles(run: str) -> list[dict]:
    """The launch-order rows of data/gpu/probe/hopper_cycles.py's run ``run`` (files
    ``{run}_launches.json``, ``{run}_ncu.csv``), each with the cycles and clock Nsight Compute
    read on its last launch: ``hopper_cycles`` (the validation shapes), ``hopper_cta_cost``
    (``--cta-cost``: one and ten rounds of 132 CTAs), ``hopper_skeleton`` (the same built
    without arithmetic: ``--skeleton``)."""
    return [
        {**o, "cycles": m["sm__cycles_elapsed.max"], "clock_hz": m[CLOCK]}
        for o, m in last_launches(run)
    ]


def last_launches(run: str) -> list[tuple[dict, dict]]:
    """(launch-order row, Nsight Compute's metrics of its last launch) of hopper_cycles.py's
    run ``run``."""
    order = json.loads((PROBE / f"{run}_launches.json").read_text())["launches"]
    profiled = parse_ncu_csv((PROBE / f"{run}_ncu.csv").read_text())
    if len(profiled) != sum(o["launches"] for o in order):
        raise ValueError(f"{run}_ncu.csv: not the launches {run}_launches.json lists")
    out, at = [], 0
    for o in order:
        at += o["launches"]
        out.append((o, profiled[at - 1]["metrics"]))  # the last launch of each build and shape
    return out


def pipe_activity(run: str = "hopper_pipes") -> list[dict]:
    """Per Hopper build of hopper_cycles.py's run ``run`` (taken with pipe metrics: run 11's
    ``hopper_pipes``, the d = 128 builds at N = 16384; ``hopper_pipes64``, data/gpu/runs/
    hopper_pipes64_run.sh, the d = 64 ones): the share of cycles the GPU's tensor pipes are busy
    (``sm__pipe_shared_cycles_active``, the wgmma's) and its sub-partitions issue, against the
    same of the replayed step (one CTA an SM, its consumer warps: ``StepTime``)."""
    gpu = simulator.load_gpu(families.GPU)
    pct = ".avg.pct_of_peak_sustained_active"
    out = []
    for o, m in last_launches(run):
        warps = 4 * (o["block_q"] // 64 + 1)
        key = issue.hopper_key(o["head_dim"], o["block_q"], o["block_kv"], warps, "bf16",
                               o["overlap"])  # fmt: skip
        # the consumer warps: the producer warpgroup only issues copies
        consumers = warps - kernels.implementation("flashio-hopper").producer_warps
        step = issue.step_costs(gpu, key, consumers, 1, impl="flashio-hopper")
        out.append({**o, "census_key": key,
                    "gpu_tensor": m["sm__pipe_shared_cycles_active" + pct] / 100,
                    "gpu_issue": m["smsp__issue_active" + pct] / 100,
                    "model_tensor": step.replay.pipe_busy["tensor"],
                    "model_issue": step.replay.issue_busy})  # fmt: skip
    return out


def hopper_cycles(jobs: int = 1, run: str = "hopper_cycles") -> list[dict]:
    """Every non-persistent build of the Hopper forward at every validation shape, launched
    alone under Nsight Compute (data/gpu/probe/hopper_cycles.py: the second of two launches):
    the GPU's cycles and clock beside the replay's cycles. ``run="hopper_cta_cost"``: the
    probe's ``--cta-cost`` shapes instead (``gpu_cycles``)."""
    out, ms = gpu_cycles(run), []
    for o in out:
        heads, n, d = o.get("heads", 16), o["seq_len"], o["head_dim"]
        sh = kernels.AttentionShape(1, heads, n, d, "bf16", causal=o["causal"])
        warps = 4 * (o["block_q"] // 64 + 1)
        ms.append(Measured("flashio-hopper", "flash2", sh, o["block_q"], o["block_kv"], warps,
                           0.0, False, o["overlap"], o["stages"]))  # fmt: skip
    with ProcessPoolExecutor(jobs) as ex:
        times = list(ex.map(families.predict, ms))
    hz = simulator.load_gpu(families.GPU).clock_hz
    for row, t in zip(out, times, strict=True):
        row["model_cycles"] = t * hz
        row["cycles_error"] = row["model_cycles"] / row["cycles"] - 1
    return out


def cycle_parts(rows: list[dict], by_rounds: bool = False) -> list[dict]:
    """Per non-causal build of ``hopper_cycles(...)``: cycles per round of CTAs (one CTA an SM,
    ``ceil(CTAs / SMS)`` rounds) against steps a CTA (``ceil(N / block_kv)``), a line through
    the shapes for the GPU and for the model each: its slope the cycles a step, its intercept
    a CTA's fixed cost (code before and after the loop, loads not hidden, the next CTA's
    start). ``by_rounds``: a line per build and number of rounds (the ``--cta-cost`` run's one
    and ten). Rows without the replay's cycles (``gpu_cycles``) get the GPU's line only. A
    description of the measurements, not a constant of the model."""
    by = {}
    for r in rows:
        if r["causal"]:
            continue
        rounds = math.ceil(r.get("heads", 16) * math.ceil(r["seq_len"] / r["block_q"]) / SMS)
        key = (r["head_dim"], r["block_q"], r["block_kv"], r["overlap"], r["stages"])
        key += (rounds,) if by_rounds else (None,)
        steps = math.ceil(r["seq_len"] / r["block_kv"])
        model = r.get("model_cycles", math.nan) / rounds  # none for gpu_cycles' rows
        by.setdefault(key, []).append((steps, r["cycles"] / rounds, model))
    out = []
    for (d, bq, bkv, overlap, stages, rounds), pts in sorted(by.items()):
        steps, gpu, model = (np.array(c, float) for c in zip(*pts, strict=True))
        g_step, g_fixed = np.polyfit(steps, gpu, 1)
        m_step, m_fixed = np.polyfit(steps, model, 1) if np.isfinite(model).all() else (None,) * 2
        out.append({"head_dim": d, "block_q": bq, "block_kv": bkv, "overlap": overlap,
                    "stages": stages, "rounds": rounds, "shapes": len(pts), "gpu_step": g_step,
                    "gpu_fixed": g_fixed, "model_step": m_step,
                    "model_fixed": m_fixed})  # fmt: skip
    return out
