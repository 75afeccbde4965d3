"""The measured rows the cross-check by implementation family compares the model with
(``analysis.validation.families``): every timing of data/gpu/ (this project's kernels, its
Hopper kernels) and data/impl/impl_measure.json (PyTorch's and Triton's kernels), each a
:class:`Measured` with the implementation description it is predicted with."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from flashio import kernels
from flashio.analysis.paths import DATA
from flashio.analysis.validation.gpu_data import read_timings
from flashio.kernels import hopper

__all__ = ["FAMILIES", "MODEL_IMPL", "PRESET_LABEL", "Measured", "measurements"]

FAMILIES = ("flashio", "flash-attn2", "triton", "cudnn", "flashio-hopper", "pytorch")
# the implementation description each family's kernels are predicted with
MODEL_IMPL = {
    "flashio": None,
    "flash-attn2": "flash-attn2",
    "triton": "triton",
    "cudnn": "cudnn",
    "flashio-hopper": "flashio-hopper",
    "pytorch": "pytorch",
}
HOPPER_RUN = DATA / "gpu" / "hopper" / "hopper_measure.json"
HOPPER_BWD_RUN = DATA / "gpu" / "hopper" / "hopper_bwd_measure.json"
PRESET_LABEL = "hopper preset"  # benchmarks/hopper_measure.py's row of the preset's build
IMPL_TIMINGS = DATA / "impl" / "impl_measure.json"  # benchmarks/impl_measure on the H200
# event-timed runs shorter than this are launch overhead more than kernel; the profiler's
# kernel durations (the other families) have no such floor
MIN_TIME_S = 50e-6


@dataclass(frozen=True)
class Measured:
    family: str
    schedule: str
    shape: kernels.AttentionShape
    block_q: int
    block_kv: int
    warps: int
    time_s: float
    harness: bool  # event-timed through this project's launch loop
    overlap: str | None = None  # the softmax overlap of a flashio-hopper row
    stages: int = 2  # K and V (forward) or Q and dO (backward) buffers of a flashio-hopper row
    persistent: bool = False  # a flashio-hopper forward launched as a persistent grid

    @property
    def label(self) -> str:
        sh = self.shape
        c = " causal" if sh.causal else ""
        o = f" {self.overlap}" if self.overlap else ""
        o += f" {self.stages} stages" if self.stages != 2 else ""
        o += " persistent" if self.persistent else ""
        return (
            f"{self.family} {self.schedule} {sh.dtype}{c} {sh.batch}x{sh.heads} N={sh.seq_len} "
            f"d={sh.head_dim} {self.block_q}x{self.block_kv} w{self.warps}{o}"
        )

    @property
    def variant(self) -> tuple:
        """What distinguishes the kernels measured at one shape: tiling, overlap, stages, grid."""
        tiling = (self.block_q, self.block_kv, self.warps)
        return (*tiling, self.overlap, self.stages, self.persistent)

    @property
    def impl(self):
        """The implementation description this row is predicted with."""
        if self.family == "flashio-hopper" and self.schedule == "flash2_bwd":
            return hopper.bwd_description(self.block_kv, self.stages)
        if self.overlap is None:
            return MODEL_IMPL[self.family]
        return hopper.description(self.block_q, self.overlap, self.stages, self.persistent)


def _shape(r) -> kernels.AttentionShape:
    return kernels.AttentionShape(
        int(r["batch"]), int(r["heads"]), int(r["seq_len"]), int(r["head_dim"]), r["dtype"],
        causal=str(r["causal"]) == "True",
    )  # fmt: skip


def impl_rows(path: Path, families=FAMILIES, skipped: dict | None = None) -> list[Measured]:
    """The rows of ``families`` in an impl_measure.json (benchmarks/impl_measure: PyTorch's
    and Triton's kernels); counts of the rows of other implementations go to ``skipped``."""
    skipped = {} if skipped is None else skipped
    out = []
    for r in json.loads(Path(path).read_text())["rows"]:
        fam = {"torch_flash": "flash-attn2", "triton_fa": "triton", "torch_eager": "pytorch"}.get(
            r["impl"]
        )
        if r["impl"] == "torch_cudnn" and r["pass"] == "fwd":
            fam = "cudnn"
        if fam is None:
            skipped[r["impl"]] = skipped.get(r["impl"], 0) + 1
            continue
        if fam not in families:
            continue
        names = [p["name"] for p in r.get("profile", []) if p.get("cat", "kernel") == "kernel"]
        us = zip(r["kernel_us"], names, strict=True)
        attn = [u for u, n in us if "flash" in n or "fa2" in n or "fprop" in n]
        t = sum(attn) * 1e-6
        sched = "flash2" if r["pass"] == "fwd" else "flash2_bwd"
        if fam == "pytorch":  # every kernel of the call: the GEMMs, scale, mask, softmax
            t, sched = sum(r["kernel_us"]) * 1e-6, "standard"
            tiling = kernels.implementation("pytorch").tiling(sched, _shape(r))
        elif fam == "cudnn":  # the preset's tiles: cuDNN's launches (its kernel name, grid)
            tiling = kernels.implementation("cudnn").tiling(sched, _shape(r))
        else:
            tiling = (int(r["block_m"]), int(r["block_n"]), int(r["num_warps"]))
        out.append(Measured(fam, sched, _shape(r), *tiling, t, False))
    return out


def measurements(families=FAMILIES) -> tuple[list[Measured], dict]:
    """Every measured configuration of ``families``, and counts of the rows left out."""
    out, skipped = [], {}
    flashio = "flashio" in families
    runs = (
        "gpu_measure.json",
        "heldout/gpu_measure.json",
        "unseen/gpu_measure.json",
        "search/gpu_measure.json",
    )
    runs = runs if flashio else ()
    timed = [row for run in runs for row in read_timings(DATA / "gpu" / run)]
    for cfg, measured in timed:  # this project's kernels (PyTorch's rows are left to im below)
        if measured["time_s"] >= MIN_TIME_S:
            out.append(
                Measured(
                    "flashio",
                    cfg.schedule,
                    cfg.shape,
                    cfg.block_q,
                    cfg.block_kv,
                    cfg.warps,
                    measured["time_s"],
                    True,
                )
            )
    out += impl_rows(IMPL_TIMINGS, families, skipped)
    if "flashio-hopper" in families:
        out += _hopper_rows()
    return out, skipped


def _hopper_rows() -> list[Measured]:
    """The Hopper kernels' rows of benchmarks/hopper_measure.py and hopper_bwd_measure.py
    (PyTorch's rows beside them there are timed in impl_measure.json too, and come from
    there), the persistent builds' (a CTA per SM taking every grid-th tile) among them."""
    rows = [
        r for r in json.loads(HOPPER_RUN.read_text())["rows"] if r["kernel"].startswith("hopper")
    ]
    kept = [r for r in rows if r["kernel"] != PRESET_LABEL]
    out = [
        Measured(
            "flashio-hopper",
            "flash2",
            _shape(r),
            r["block_q"],
            r["block_kv"],
            4 * (r["block_q"] // 64 + 1),
            r["median_s"],
            False,
            r["softmax_overlap"],
            r.get("stages", 2),  # runs before the column: two buffers
            bool(r.get("persistent")),
        )
        # the preset's row times one of the builds again: a row per build, not two
        for r in kept
    ]
    bwd = json.loads(HOPPER_BWD_RUN.read_text())["rows"] if HOPPER_BWD_RUN.exists() else []
    out += [
        Measured(
            "flashio-hopper",
            "flash2_bwd",
            _shape(r),
            r["block_q"],
            r["block_kv"],
            4 * (r["block_kv"] // 64 + 1),
            r["median_s"],
            False,
            stages=r["stages"],
        )
        for r in bwd
        if r["kernel"].startswith("hopper")
    ]
    return out
