"""The Triton forward's key-block step over N, on the GPU and in the replay.

data/gpu/runs/triton_scaling_run.sh ran the Triton FA2 forward (benchmarks/triton_attention.py)
at its five tilings, B = 1, H = 16, bf16, d = 128 at N = 2048..16384 and d = 64 at 4096 and
16384, on an H100 SXM (whose SMs and L2 are the H200's): timed (data/impl/triton_scaling.json)
and under Nsight Compute (data/impl/triton_scaling_ncu.csv, the second of two launches of each
configuration; the launch order in triton_scaling.log). Per configuration, a step is one CTA's
key block: the SM cycles a step takes (an SM's cycles over the steps each SM runs, so CTAs
resident together share them), the warp instructions it issues, the L2's sector hit rate and
the long-scoreboard stalls per issued instruction (warps waiting on global or local memory), and
the bytes a second the L2's slices serve and the SMs receive from the crossbar; ``replay_steps``
gives the replay's SM cycles a step for the same configurations."""

from __future__ import annotations

import json
import math

from flashio import kernels, simulator
from flashio.analysis.paths import DATA
from flashio.analysis.validation.gpu_data import parse_ncu_csv

RUN = DATA / "impl" / "triton_scaling"
SMS = 132  # the H100 SXM's, as the H200's
STALL = "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"


def _steps(d: dict) -> tuple[int, int]:
    """(CTAs, key blocks a CTA) of configuration ``d`` (non-causal)."""
    ctas = d["batch"] * d["heads"] * math.ceil(d["seq_len"] / d["block_q"])
    return ctas, math.ceil(d["seq_len"] / d["block_kv"])


def gpu_steps() -> list[dict]:
    """Per configuration of the run, in launch order: head_dim, seq_len, block_q, block_kv,
    warps, stages, the event-timed milliseconds, and from Nsight Compute cycles_per_step,
    instructions_per_step, l2_hit (a fraction), long_scoreboard, l2_slice_tb_s (``lts__t_bytes``:
    reads and writes the slices serve, TB/s over the kernel's duration) and delivered_tb_s
    (``l1tex__m_xbar2l1tex_read_bytes``: what the SMs receive)."""
    log = (RUN.parent / f"{RUN.name}.log").read_text().splitlines()
    order = [json.loads(ln) for ln in log if ln.startswith('{"tiling"')]
    profiled = parse_ncu_csv((RUN.parent / f"{RUN.name}_ncu.csv").read_text())
    if len(profiled) != 2 * len(order):
        raise ValueError("triton_scaling_ncu.csv: not two launches of each configuration")
    timed = {
        (r["head_dim"], r["seq_len"], tuple(r["tiling"])): r["median_ms"]
        for r in json.loads(RUN.with_suffix(".json").read_text())["rows"]
    }
    out = []
    for o, p in zip(order, profiled[1::2], strict=True):
        m = p["metrics"]
        (bq, bkv, warps, stages), (b, h, n, d) = o["tiling"], o["shape"]
        row = {"batch": b, "heads": h, "head_dim": d, "seq_len": n, "block_q": bq,
               "block_kv": bkv, "warps": warps, "stages": stages}  # fmt: skip
        ctas, steps = _steps(row)
        seconds = m["gpu__time_duration.sum"] * 1e-9
        out.append({
            **row,
            "ms": timed[(d, n, (bq, bkv, warps, stages))],
            "cycles_per_step": m["sm__cycles_elapsed.max"] * SMS / (ctas * steps),
            "instructions_per_step": m["smsp__inst_executed.sum"] / (ctas * steps),
            "l2_hit": m["lts__t_sector_hit_rate.pct"] / 100,
            "long_scoreboard": m[STALL],
            "l2_slice_tb_s": m["lts__t_bytes.sum"] / seconds / 1e12,
            "delivered_tb_s": m["l1tex__m_xbar2l1tex_read_bytes.sum"] / seconds / 1e12,
        })  # fmt: skip
    return out


def replay_steps(rows: list[dict], gpu: str = "h200-measured", options=None) -> list[float]:
    """The replay's SM cycles a step of each of ``rows`` (``gpu_steps``'s), the schedule as the
    family validation builds it (the triton preset at the row's tiling, the validated model
    unless ``options``)."""
    g = simulator.load_gpu(gpu)
    out = []
    for r in rows:
        shape = kernels.AttentionShape(r["batch"], r["heads"], r["seq_len"], r["head_dim"], "bf16")
        sched = kernels.schedule("flash2", shape, r["block_q"], r["block_kv"], r["warps"],
                                 impl="triton")  # fmt: skip
        res = simulator.simulate(sched, g, options=options or simulator.VALIDATED)
        ctas, steps = _steps(r)
        out.append(res.time_s * g.clock_hz * g.sm_count / (ctas * steps))
    return out
