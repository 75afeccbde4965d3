"""The time model against the GPU, per implementation family, with nothing fitted.

Every configuration measured on the H200 is simulated on ``h200-measured`` (microbenchmarked
rates, simulator/specs/h200-measured.toml) with the issue model (``ModelOptions(issue_model=
True)``: each kernel's main loop replayed from its compiled code, docs/model.md). No constant of
this model comes from an attention kernel's timing, so every row is held out:

- ``flashio``: this project's kernels, event-timed (data/gpu/gpu_measure.json, the held-out
  tilings of data/gpu/heldout/gpu_measure.json, and the forwards at tilings the census never
  held of data/gpu/unseen/gpu_measure.json, priced by written programs, and the census's
  forward tilings at the shapes of data/gpu/search/gpu_measure.json, the candidates of the
  compiled tile search), through the launch harness of ``analysis/validation/calibration.toml``
  (host-side costs of that timing loop);
- ``flash-attn2``: PyTorch's SDPA flash kernels (flash-attn 2), forward and backward;
- ``triton``: a Triton FlashAttention-2 forward (benchmarks/triton_attention.py) at five
  tilings (data/impl/impl_measure.json). For these two the measured time is the sum of the
  attention kernels' durations that the profiler recorded in the same run (the conversions
  PyTorch's backward adds around them are left out; the simulated time is the schedule's
  kernels and the gaps between them).

- ``cudnn``: PyTorch SDPA's cuDNN forward, a Hopper-native kernel (wgmma, TMA, warp
  specialized) whose machine code is not in the census (cuDNN compiles it at run time),
  against the ``fa3`` description at cuDNN's tiling: 128 x 128 tiles, one producer and two
  consumer warpgroups (12 warps), which the kernel's name (``..._64x128x{d}_...``: 64 rows
  per warpgroup, 128 keys), its 384 threads and its grid (128 CTAs at N = 1024, 16 heads:
  16 x 1024 / 128; 132, one per SM, beyond) give. The issue model writes its consumer warps'
  program from that description (``simulator.synth``).

Each forward of the first three is also priced by the program the issue model writes for a
tiling whose machine code it lacks (``ModelOptions(written_programs=True)``: an mma.sync forward
from the instruction mix of this project's other compiled tilings, ``simulator.synth_sync``; a
wgmma forward from its description, ``simulator.synth``), each written without its own tiling's
code: the error a user gets at a tiling never compiled (``report()["written"]``).

- ``flashio-hopper``: this project's Hopper forward (kernels/cuda/hopper_fwd.cu: TMA, wgmma,
  one producer and two or three consumer warpgroups), timed beside PyTorch's kernels by
  benchmarks/hopper_measure.py (data/gpu/hopper/hopper_measure.json: the median of sets of
  back-to-back launches, each set CUDA-event-timed) at its tilings and softmax overlaps, each
  against the ``flashio-hopper`` description of that build, its consumer warps' loop replayed
  from its compiled code (data/sass/flashio-hopper.json.gz); and its backward
  (kernels/cuda/hopper_bwd.cu between flash2_bwd.cu's first and last kernels), timed the same
  way by benchmarks/hopper_bwd_measure.py (data/gpu/hopper/hopper_bwd_measure.json), against
  ``hopper.bwd_description`` of each build.

- ``pytorch``: PyTorch's eager attention (``softmax(q @ k^T * scale) @ v``, masked_fill when
  causal; benchmarks/impl_measure/setups.py's ``torch_eager``), the sum of every kernel the call
  launched, against ``standard`` with the ``pytorch`` preset: ``unfused=1``, eager PyTorch's
  kernels (kernels/_standard_unfused.py), its elementwise and row-softmax kernels priced by
  their machine code from libtorch_cuda.so (data/sass/pytorch.json.gz), cuBLAS's GEMMs (closed
  source, not in the census) at the pipe rates.

cuDNN's backward and flex_attention were measured too; their kernels are neither in the
instruction census nor written by ``simulator.synth``, so they are listed as not modelled.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from flashio import kernels, simulator
from flashio.analysis.validation.calibration import load_calibration
from flashio.analysis.validation.family_rows import (
    FAMILIES,
    PRESET_LABEL,
    Measured,
    measurements,
)
from flashio.kernels.registry import spec
from flashio.simulator.simulate import VALIDATED, ModelOptions

__all__ = [
    "FAMILIES",
    "GPU",
    "MARKERS",
    "PICK_WITHIN",
    "PRESET_LABEL",
    "Measured",
    "block",
    "markdown",
    "measurements",
    "predict",
    "report",
]

GPU = "h200-measured"
WRITABLE = ("flash2",)  # schedules whose kernels have written programs (forwards)
# families the census holds code of
COMPILED = ("flashio", "flash-attn2", "triton", "flashio-hopper", "pytorch")
MARKERS = ("<!-- families:begin -->", "<!-- families:end -->")  # in docs/validation.md
# a pick within this of the measured best counts as right (issue 11's criterion); the tile
# search names the tilings predicted this close to its fastest (explore.search_reading)
PICK_WITHIN = 0.05
OPTIONS = VALIDATED
# forwards priced by their written programs, each without its own tiling's compiled code
WRITTEN = dataclasses.replace(OPTIONS, written_programs=True)
NOT_MODELLED = ("torch_cudnn", "flex")


def predict(m: Measured, options: ModelOptions = OPTIONS, gpu=GPU) -> float:
    """Simulated seconds of ``m`` (see the module docstring) on ``gpu`` (a spec or a name)."""
    sched = kernels.schedule(m.schedule, m.shape, m.block_q, m.block_kv, m.warps, impl=m.impl)
    res = simulator.simulate(sched, gpu, options=options)
    times = [k.time_s for k in res.kernels]
    if m.harness:
        return load_calibration().harness.event_time(times)
    return sum(times)


def report(jobs: int = 1, families=FAMILIES) -> dict:
    """Rows (label, family, pass, measured and predicted seconds, error) and a summary per
    family and schedule: n, MAPE, bias (mean error), max |error|."""
    ms, skipped = measurements(families)
    forwards = [m for m in ms if m.schedule in WRITABLE and m.family in COMPILED]
    todo = [(m, OPTIONS) for m in ms] + [(m, WRITTEN) for m in forwards]
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as ex:
            done = list(ex.map(predict, *zip(*todo, strict=True)))
    else:
        done = [predict(m, o) for m, o in todo]
    preds, written = done[: len(ms)], done[len(ms) :]
    rows = [
        {
            "label": m.label,
            "family": m.family,
            "pass": "bwd" if spec(m.schedule).backward else "fwd",
            "schedule": m.schedule,
            "measured_s": m.time_s,
            "predicted_s": p,
            "error": p / m.time_s - 1,
        }
        for m, p in zip(ms, preds, strict=True)
    ]
    summary = _summary(ms, preds)
    return {
        "rows": rows,
        "summary": summary,
        "written": _summary(forwards, written),
        "ranking": tiling_ranking(ms, preds),
        "not_modelled": skipped,
        "gpu": GPU,
    }


def _summary(ms: list[Measured], preds: list[float]) -> dict:
    """Per family and schedule: n, MAPE, bias (mean error), max |error|."""
    out = {}
    for fam in FAMILIES:
        for sched in ("flash2", "flash2_bwd", "standard"):
            e = np.array(
                [p / m.time_s - 1 for m, p in zip(ms, preds, strict=True)
                 if m.family == fam and m.schedule == sched]
            )  # fmt: skip
            if e.size:
                out[f"{fam} {sched}"] = {
                    "n": int(e.size),
                    "mape": float(np.abs(e).mean()),
                    "bias": float(e.mean()),
                    "max_error": float(np.abs(e).max()),
                }
    return out


def _ranks(x) -> np.ndarray:
    """Ranks from 0, tied values sharing the mean of the ranks they span (the builds the model
    cannot tell apart, e.g. two pipeline depths of one compute-bound loop, are tied in its
    prediction, not ordered by where their rows happen to lie)."""
    x = np.asarray(x)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and x[order[j + 1]] == x[order[i]]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2
        i = j + 1
    return ranks


def spearman(a, b) -> float:
    """Spearman's rank correlation of ``a`` and ``b``: the Pearson correlation of their ranks
    (``_ranks``; without ties, 1 - 6 sum d^2 / (n (n^2 - 1))). 0 where either is constant."""
    ra, rb = _ranks(a) - (len(a) - 1) / 2, _ranks(b) - (len(b) - 1) / 2
    den = float(np.sqrt((ra * ra).sum() * (rb * rb).sum()))
    return float((ra * rb).sum()) / den if den > 0 else 0.0


def tiling_ranking(ms: list[Measured], preds: list[float]) -> list[dict]:
    """Per family, schedule and shape measured at several tilings: the Spearman correlation of
    predicted and measured times over the tilings, and how much slower (measured) the tiling
    the model ranks first is than the measured best (where it ties several first, the mean of
    theirs)."""
    groups: dict[tuple, list] = {}
    for m, p in zip(ms, preds, strict=True):
        groups.setdefault((m.family, m.schedule, m.shape), []).append((m, p))
    out = []
    for (fam, sched, shape), pts in groups.items():
        if len({m.variant for m, _ in pts}) < 3:
            continue
        meas = np.array([m.time_s for m, _ in pts])
        pred = np.array([p for _, p in pts])
        rho = spearman(meas, pred)
        first = np.flatnonzero(pred == pred.min())
        pick = pts[int(first[0])][0]
        slower = float(meas[first].mean() / meas.min() - 1)
        out.append(
            {
                "family": fam,
                "schedule": sched,
                "shape": shape.to_dict(),
                "tilings": len(pts),
                "spearman": rho,
                "picked": [pick.block_q, pick.block_kv, pick.warps]
                + ([pick.overlap] if pick.overlap else [])
                + (["persistent"] if pick.persistent else []),
                "picked_slower_than_best": slower,
            }
        )
    return out


def markdown(rep: dict) -> str:
    lines = [
        f"Simulated on `{rep['gpu']}` with the issue model; nothing fitted, every row held out.",
        "",
        "| family, schedule | n | MAPE | bias | max error |",
        "|---|---|---|---|---|",
    ]
    for k, s in rep["summary"].items():
        lines.append(
            f"| {k} | {s['n']} | {s['mape']:.1%} | {s['bias']:+.1%} | {s['max_error']:.1%} |"
        )
    rk = rep["ranking"]
    if rk:
        rho = np.array([r["spearman"] for r in rk])
        slow = np.array([r["picked_slower_than_best"] for r in rk])
        lines += [
            "",
            f"Ranking tilings by predicted time ({len(rk)} shapes measured at 3 or more tilings): "
            f"mean Spearman {rho.mean():.2f} (lowest {rho.min():.2f}; {int((rho >= 0.8).sum())} "
            f"of {len(rk)} at 0.8 or more); the tiling ranked first runs {np.median(slow):.1%} "
            f"slower than the measured best in the median, {slow.max():.1%} at worst "
            f"({int((slow <= PICK_WITHIN).sum())} of {len(rk)} within {PICK_WITHIN:.0%}).",
        ]
    wr = rep.get("written", {})
    if wr:
        lines += [
            "",
            "Forwards priced by written programs instead of their compiled code, each written "
            "without its own tiling's code (`ModelOptions(written_programs=True)`: what a "
            'tiling never compiled is predicted as; docs/model.md, "Kernels outside the '
            'census"):',
            "",
            "| family, schedule | n | MAPE | bias | max error |",
            "|---|---|---|---|---|",
        ]
        for k, s in wr.items():
            lines.append(
                f"| {k} | {s['n']} | {s['mape']:.1%} | {s['bias']:+.1%} | {s['max_error']:.1%} |"
            )
    nm = "; ".join(
        f"{k}, {v} rows (no instruction census, no written program)"
        for k, v in sorted(rep["not_modelled"].items())
    )
    lines += ["", f"Measured, not modelled: {nm}.", ""]
    lines += ["| configuration | measured ms | predicted ms | error |", "|---|---|---|---|"]
    for r in rep["rows"]:
        lines.append(
            f"| {r['label']} | {r['measured_s'] * 1e3:.3f} | {r['predicted_s'] * 1e3:.3f} "
            f"| {r['error']:+.1%} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    rep = report(jobs=int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    print(markdown(rep))


def block(rep: dict) -> str:
    """docs/validation.md's generated block of :func:`markdown`, markers included."""
    begin, end = MARKERS
    note = ("Generated by `flashio docs --update --only families` (or `flashio crosscheck "
            "--by-implementation --update-doc`); do not edit by hand.")  # fmt: skip
    return f"{begin}\n\n{note}\n\n{markdown(rep)}\n\n{end}"
