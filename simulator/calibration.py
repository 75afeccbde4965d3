"""The calibrated model of the validation GPU: spec overrides, model options, timing harness.

``simulator/calibration.toml`` holds every constant the cross-check (``analysis.crosscheck``)
adds to the built-in spec, each with its source: measured by a microbenchmark of the H200
(``data/gpu/probe/``), or fitted on a named training subset of the measured attention
configurations (docs/validation.md reports the held-out error separately).

    cal = load_calibration()
    opts = cal.options_for({"flash2_fwd": "flash2_fwd d=64 128x128 w=8"})
    res = simulator.simulate(schedule, cal.gpu, options=opts)
    t = cal.harness.event_time([k.time_s for k in res.kernels])  # what CUDA events measure
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from simulator.errors import FileError, FlashioError
from simulator.gpu import GPUSpec
from simulator.simulate import ModelOptions
from simulator.specfiles import load_gpu

__all__ = ["DEFAULT_PATH", "Calibration", "Harness", "load_calibration"]

DEFAULT_PATH = Path(__file__).with_name("calibration.toml")


@dataclass(frozen=True, slots=True)
class Harness:
    """What CUDA events around a sequence of launches from Python measure.

    The first event is recorded on an idle GPU; the first kernel reaches the GPU
    ``first_launch_s`` later (host-side launch work) and each further one
    ``launch_interval_s`` after the previous one. A kernel starts when it has arrived and the
    previous kernel has ended; simulated kernel times already hold the GPU-side gap between
    kernels (the spec's ``kernel_launch_s``).

    Attributes
    ----------
    first_launch_s, launch_interval_s : float
        Seconds (host time per launch of ``kernels.gpu.CompiledSchedule.launch``).
    """

    first_launch_s: float
    launch_interval_s: float

    def __post_init__(self):
        for name in ("first_launch_s", "launch_interval_s"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and v >= 0):
                raise FlashioError(f"Harness.{name} must be a number of seconds >= 0, got {v!r}")

    def intervals(self, kernel_times_s) -> tuple[float, ...]:
        """Event-to-event seconds per kernel, for kernels that take ``kernel_times_s``."""
        out, end, arrive = [], 0.0, self.first_launch_s
        for i, t in enumerate(kernel_times_s):
            if i:
                arrive += self.launch_interval_s
            start = max(arrive, end)
            out.append(start + t - end)
            end = start + t
        return tuple(out)

    def event_time(self, kernel_times_s) -> float:
        """Seconds between the events before the first and after the last launch."""
        return sum(self.intervals(kernel_times_s))


@dataclass(frozen=True, slots=True)
class Calibration:
    """A calibrated GPU: ``gpu`` (the base spec with measured overrides), ``options`` (model
    switches), ``harness``, ``efficiency`` (fitted issue efficiency per compiled kernel
    variant, keyed ``"<kernel> d=<head_dim> <block_q>x<block_kv> w=<warps>[ <option>=<v>]"``)
    and ``training`` (the configurations the fitted constants were fitted on, in words)."""

    gpu: GPUSpec
    options: ModelOptions
    harness: Harness
    efficiency: tuple[tuple[str, float], ...]
    training: str
    path: str

    def efficiency_of(self, variant: str) -> float:
        """The fitted efficiency of ``variant``; for a variant not fitted, the median of the
        fitted variants of the same kernel (the key's first word), else 1."""
        table = dict(self.efficiency)
        if variant in table:
            return table[variant]
        same = sorted(v for k, v in table.items() if k.split()[0] == variant.split()[0])
        return same[len(same) // 2] if same else 1.0

    def options_for(self, variants: dict[str, str]) -> ModelOptions:
        """``options`` with the issue efficiency of each kernel (name -> variant key)."""
        eff = {name: self.efficiency_of(key) for name, key in variants.items()}
        return ModelOptions(self.options.shared_issue, self.options.prefetch_kernels, eff)


def load_calibration(path: str | os.PathLike | None = None) -> Calibration:
    """Read a calibration file (default ``simulator/calibration.toml``).

    Raises
    ------
    FileError
        For a missing or unreadable file, a TOML syntax error, a missing section or key, or a
        value the spec or ModelOptions rejects; the message names the file and the key.
    """
    p = Path(path) if path is not None else DEFAULT_PATH
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise FileError(f"{p}: cannot read the calibration file: {err}") from None
    need = {"base": str, "spec": dict, "model": dict, "harness": dict, "fit": dict}
    for key, kind in need.items():
        if not isinstance(data.get(key), kind):
            raise FileError(f"{p}: missing {kind.__name__} '{key}' (see docs/validation.md)")
    try:
        gpu = load_gpu(data["base"]).replace(**data["spec"])
        model, fit = data["model"], data["fit"]
        options = ModelOptions(
            shared_issue=bool(model.get("shared_issue", False)),
            prefetch_kernels=tuple(model.get("prefetch_kernels", ())),
        )
        efficiency = ModelOptions(issue_efficiency=fit.get("issue_efficiency", {}))
        harness = Harness(**data["harness"])
    except (TypeError, ValueError) as err:
        raise FileError(f"{p}: {err}") from None
    training = str(fit.get("training", ""))
    return Calibration(gpu, options, harness, efficiency.issue_efficiency, training, str(p))
