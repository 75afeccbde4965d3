"""This project's kernels at fewer resident CTAs per SM, measured against the model.

data/gpu/probe/occupancy.py timed each kernel with its dynamic shared memory padded so that
only k CTAs fit on an SM (the code and grid unchanged). The model is run the same way, with
``max_ctas_per_sm=k``: the time at k = 1 checks one CTA's step alone on its SM, the gain
T(1) / T(k) how well k resident CTAs overlap. docs/validation.md, "Resident CTAs".
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

from flashio import kernels, simulator
from flashio.analysis.paths import DATA
from flashio.analysis.validation.families import GPU, OPTIONS

PROBE = DATA / "gpu" / "probe" / "occupancy.json"
MAIN_KERNELS = ("flash2_fwd", "flash2_bwd")
# data/gpu/probe/lone_cta.py: the same kernels under Nsight Compute (its launch order, metrics)
LONE_ORDER = DATA / "gpu" / "probe" / "lone_cta_launches.json"
LONE_NCU = DATA / "gpu" / "probe" / "lone_cta_ncu.csv.gz"


def _predicted_s(r: dict, gpu) -> float:
    """Seconds of the main kernel of a probe row (schedule, head dim, tiles; B x H = 1 x 16,
    N = 4096, bf16) with at most ``r["k"]`` CTAs an SM."""
    shape = kernels.AttentionShape(1, 16, 4096, r["head_dim"], "bf16")
    sched = kernels.schedule(r["schedule"], shape, *r["tiles"])
    res = simulator.simulate(sched, gpu.replace(max_ctas_per_sm=r["k"]), options=OPTIONS)
    return next(k.time_s for k in res.kernels if k.name in MAIN_KERNELS)


def rows(path: Path = PROBE) -> list[dict]:
    """Per measured (kernel, k): measured and predicted milliseconds of the main kernel, and
    the gain over k = 1 of each."""
    gpu = simulator.load_gpu(GPU)
    out, first = [], {}
    for r in json.loads(path.read_text())["rows"]:
        pred = _predicted_s(r, gpu) * 1e3
        key = (r["schedule"], r["head_dim"], tuple(r["tiles"]))
        first.setdefault(key, (r["median_ms"], pred))
        m1, p1 = first[key]
        out.append({**r, "predicted_ms": pred, "measured_gain": m1 / r["median_ms"],
                    "predicted_gain": p1 / pred})  # fmt: skip
    return out


def read_launches(kernels_in_order: list[str], order: list[dict]) -> list[int]:
    """Which profiled launches to read: for each row of a probe's launch order (its
    ``kernel`` launched ``launches`` times), the index of its last launch among
    ``kernels_in_order``, the kernel names Nsight Compute profiled in order. A launch of
    another kernel between them (the forward a backward's setup runs) is skipped."""
    out, i = [], 0
    for r in order:
        got = []
        while len(got) < r["launches"]:
            if i == len(kernels_in_order):
                raise ValueError(f"the profile ends before {r['kernel']}'s launches of {r}")
            if kernels_in_order[i] == r["kernel"]:
                got.append(i)
            i += 1
        out.append(got[-1])
    return out


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def cycles_rows(order_path: Path = LONE_ORDER, ncu_path: Path = LONE_NCU) -> list[dict]:
    """The same kernels as :func:`rows` in SM cycles, which no clock assumption enters: the
    average SM's elapsed cycles Nsight Compute read (lone_cta.py's runs, the second launch of
    each), against the predicted time times the spec's clock."""
    gpu = simulator.load_gpu(GPU)
    table = list(csv.reader(io.StringIO(gzip.decompress(ncu_path.read_bytes()).decode())))
    head, launches = table[0], table[2:]  # row 1 holds the units
    name, cycles = head.index("Kernel Name"), head.index("sm__cycles_elapsed.avg")
    order = json.loads(order_path.read_text())["launches"]
    picked = read_launches([ln[name] for ln in launches], order)
    out = []
    for r, i in zip(order, picked, strict=True):
        out.append({**r, "measured_cycles": _number(launches[i][cycles]),
                    "predicted_cycles": _predicted_s(r, gpu) * gpu.clock_hz})  # fmt: skip
    return out


def _kernel_cells(r: dict) -> str:
    bq, bk, w = r["tiles"]
    return f"| {r['kernel']} | {r['head_dim']} | {bq}x{bk} w{w} | {r['k']} "


def markdown(table: list[dict]) -> str:
    lines = [
        "| kernel | d | tiling | CTAs per SM | measured ms | predicted ms | error "
        "| gain over 1 CTA: measured | predicted |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table:
        lines.append(
            _kernel_cells(r) + f"| {r['median_ms']:.3f} | {r['predicted_ms']:.3f} "
            f"| {r['predicted_ms'] / r['median_ms'] - 1:+.1%} "
            f"| {r['measured_gain']:.2f} | {r['predicted_gain']:.2f} |"
        )
    return "\n".join(lines)


def cycles_markdown(table: list[dict]) -> str:
    lines = [
        "| kernel | d | tiling | CTAs per SM | Nsight Compute: SM cycles | predicted cycles "
        "| error |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in table:
        lines.append(
            _kernel_cells(r) + f"| {r['measured_cycles']:,.0f} | {r['predicted_cycles']:,.0f} "
            f"| {r['predicted_cycles'] / r['measured_cycles'] - 1:+.1%} |"
        )
    return "\n".join(lines)


def block(table: list[dict], cycles: list[dict] | None = None) -> str:
    """docs/validation.md's generated block of :func:`markdown` (and, given ``cycles``,
    :func:`cycles_markdown` after it), markers included."""
    body = markdown(table)
    if cycles is not None:
        body += (
            "\n\nThe same kernels under Nsight Compute (data/gpu/probe/lone_cta.py), in the "
            "average SM's elapsed cycles against the predicted time at the spec's clock:"
            f"\n\n{cycles_markdown(cycles)}"
        )
    return f"<!-- resident-ctas:begin -->\n\n{body}\n\n<!-- resident-ctas:end -->"
