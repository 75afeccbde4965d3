"""This project's kernels at fewer resident CTAs per SM, measured against the model.

data/gpu/probe/occupancy.py timed each kernel with its dynamic shared memory padded so that
only k CTAs fit on an SM (the code and grid unchanged). The model is run the same way, with
``max_ctas_per_sm=k``: the time at k = 1 checks one CTA's step alone on its SM, the gain
T(1) / T(k) how well k resident CTAs overlap. docs/validation.md, "Resident CTAs".
"""

from __future__ import annotations

import json
from pathlib import Path

from flashio import kernels, simulator
from flashio.analysis.paths import DATA
from flashio.analysis.validation.families import GPU, OPTIONS

PROBE = DATA / "gpu" / "probe" / "occupancy.json"
MAIN_KERNELS = ("flash2_fwd", "flash2_bwd")


def rows(path: Path = PROBE) -> list[dict]:
    """Per measured (kernel, k): measured and predicted milliseconds of the main kernel, and
    the gain over k = 1 of each."""
    gpu = simulator.load_gpu(GPU)
    out, first = [], {}
    for r in json.loads(path.read_text())["rows"]:
        shape = kernels.AttentionShape(1, 16, 4096, r["head_dim"], "bf16")
        sched = kernels.schedule(r["schedule"], shape, *r["tiles"])
        res = simulator.simulate(sched, gpu.replace(max_ctas_per_sm=r["k"]), options=OPTIONS)
        pred = next(k.time_s for k in res.kernels if k.name in MAIN_KERNELS) * 1e3
        key = (r["schedule"], r["head_dim"], tuple(r["tiles"]))
        first.setdefault(key, (r["median_ms"], pred))
        m1, p1 = first[key]
        out.append({**r, "predicted_ms": pred, "measured_gain": m1 / r["median_ms"],
                    "predicted_gain": p1 / pred})  # fmt: skip
    return out


def markdown(table: list[dict]) -> str:
    lines = [
        "| kernel | d | tiling | CTAs per SM | measured ms | predicted ms | error "
        "| gain over 1 CTA: measured | predicted |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table:
        bq, bk, w = r["tiles"]
        lines.append(
            f"| {r['kernel']} | {r['head_dim']} | {bq}x{bk} w{w} | {r['k']} "
            f"| {r['median_ms']:.3f} | {r['predicted_ms']:.3f} "
            f"| {r['predicted_ms'] / r['median_ms'] - 1:+.1%} "
            f"| {r['measured_gain']:.2f} | {r['predicted_gain']:.2f} |"
        )
    return "\n".join(lines)


def block(table: list[dict]) -> str:
    """docs/validation.md's generated block of :func:`markdown`, markers included."""
    return f"<!-- resident-ctas:begin -->\n\n{markdown(table)}\n\n<!-- resident-ctas:end -->"
