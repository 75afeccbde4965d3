"""The GPU measurements in data/gpu: the configurations measured and readers for their files.

Timings (``gpu_measure.json``, CUDA events) and Nsight Compute counters (``ncu.csv`` with the
launch list ``ncu_launches.json``, or a user's own ``ncu --csv`` output) become
``(Config, measured)`` pairs that ``analysis.validation.crosscheck`` sets next to the simulator's
predictions.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path

from flashio import kernels
from flashio.analysis.paths import DATA
from flashio.analysis.validation.calibration import NOTHING_FITTED

DATA_DIR = DATA / "gpu"
TRAINING = NOTHING_FITTED
NCU_GLOBAL = ("l1tex__m_xbar2l1tex_read_bytes.sum", "l1tex__m_l1tex2xbar_write_bytes.sum")
NCU_HBM = ("dram__bytes_read.sum", "dram__bytes_write.sum")
NCU_TIME = "gpu__time_duration.sum"
EVENTS = "CUDA events, median of 20, inputs rotated (warm GPU, inputs not in L2)"
NCU = "Nsight Compute, one launch, caches flushed before the kernel (cold L2)"


@dataclasses.dataclass(frozen=True, slots=True)
class Config:
    """One measured configuration: a schedule on a shape with its tiling; ``kernel`` is the
    index of the profiled kernel (Nsight Compute rows) or None (the whole launch sequence);
    ``impl`` the implementation that ran it (``kernels.IMPLEMENTATIONS``; None: this
    project's kernels)."""

    schedule: str
    shape: kernels.AttentionShape
    block_q: int
    block_kv: int
    warps: int
    options: tuple[tuple[str, int], ...] = ()
    kernel: int | None = None
    impl: str | None = None

    def build(self) -> kernels.Schedule:
        return kernels.schedule(
            self.schedule,
            self.shape,
            self.block_q,
            self.block_kv,
            self.warps,
            impl=self.impl,
            **dict(self.options),
        )

    @property
    def subset(self) -> str:
        """``held-out``: no configuration is trained on (:data:`TRAINING`)."""
        return "held-out"

    def label(self) -> str:
        sh = self.shape
        causal = " causal" if sh.causal else ""
        return (
            f"{self.schedule} {sh.dtype}{causal} {sh.batch}x{sh.heads} N={sh.seq_len} "
            f"d={sh.head_dim} {self.block_q}x{self.block_kv} {self.warps}w"
        )


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
