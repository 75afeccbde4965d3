"""The model of the validation GPU the cross-check uses: spec, model options, timing harness.

``calibration.toml`` (beside this module) names the spec (``h200-measured``: microbenchmarks of
the H200, ``data/gpu/probe/``), the switches of the time model (the issue model among them) and the
host-side costs of the timing loop the measurements were taken with. Nothing in it is fitted
to an attention kernel's timing, and a file cannot hold such a constant: a ``[fit]`` table (an
issue efficiency per kernel, in earlier files) is refused. A user's file may add ``[spec]``
overrides.

    cal = load_calibration()
    res = simulator.simulate(schedule, cal.gpu, options=cal.options)
    t = cal.harness.event_time([k.time_s for k in res.kernels])  # what CUDA events measure
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from flashio.simulator.errors import FileError, FlashioError
from flashio.simulator.gpu import GPUSpec
from flashio.simulator.simulate import ModelOptions
from flashio.simulator.specfiles import load_gpu

__all__ = ["DEFAULT_PATH", "NOTHING_FITTED", "Calibration", "Harness", "load_calibration"]

DEFAULT_PATH = Path(__file__).with_name("calibration.toml")
# what the cross-check says its model was trained on
NOTHING_FITTED = "none: nothing is fitted to an attention kernel's timing; every row is held out"


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
    """A calibrated GPU: ``gpu`` (the base spec with any overrides), ``options`` (model
    switches, the same for every kernel), ``harness`` and the file it was read from."""

    gpu: GPUSpec
    options: ModelOptions
    harness: Harness
    path: str


def load_calibration(path: str | os.PathLike | None = None) -> Calibration:
    """Read a calibration file (default ``analysis/validation/calibration.toml``).

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
    need = {"base": str, "model": dict, "harness": dict}
    for key, kind in need.items():
        if not isinstance(data.get(key), kind):
            raise FileError(f"{p}: missing {kind.__name__} '{key}' (see docs/validation.md)")
    if "fit" in data:
        raise FileError(
            f"{p}: a [fit] table (an issue efficiency per kernel) is no longer read: the time "
            "model has no constant fitted to a kernel's timing. Remove it; describe a kernel "
            "of your own by its implementation (kernels.Implementation, docs/implementations.md)"
        )
    if not isinstance(data.get("spec", {}), dict):
        raise FileError(f"{p}: 'spec' must be a table (see docs/validation.md)")
    try:
        gpu = load_gpu(data["base"]).replace(**data.get("spec", {}))
        model = data["model"]
        options = ModelOptions(
            shared_issue=bool(model.get("shared_issue", False)),
            prefetch_kernels=tuple(model.get("prefetch_kernels", ())),
            issue_model=bool(model.get("issue_model", False)),
            streamed_requests=bool(model.get("streamed_requests", False)),
            cta_drift=bool(model.get("cta_drift", False)),
            staged_loads=bool(model.get("staged_loads", False)),
            pending_fills=bool(model.get("pending_fills", False)),
        )
        harness = Harness(**data["harness"])
    except (TypeError, ValueError) as err:
        raise FileError(f"{p}: {err}") from None
    return Calibration(gpu, options, harness, str(p))
