"""GPU specs, the trace format, and the replay engine. Knows nothing about attention."""

from flashio.simulator._atomic import atomic_write
from flashio.simulator.errors import (
    CapacityError,
    FileError,
    FlashioError,
    GPUSpecError,
    ShapeError,
    TilingError,
    UsageError,
)
from flashio.simulator.gpu import GPUSpec
from flashio.simulator.occupancy import Occupancy, occupancy
from flashio.simulator.result import KernelResult, SimResult, TensorTraffic
from flashio.simulator.simulate import VALIDATED, ModelOptions, simulate
from flashio.simulator.specfiles import builtin_gpus, load_gpu
from flashio.simulator.trace import (
    EVENT_DTYPE,
    KernelInfo,
    Op,
    Space,
    TensorInfo,
    Trace,
    TraceMeta,
)

__all__ = [
    "EVENT_DTYPE",
    "VALIDATED",
    "CapacityError",
    "FileError",
    "FlashioError",
    "GPUSpec",
    "GPUSpecError",
    "KernelInfo",
    "KernelResult",
    "ModelOptions",
    "Occupancy",
    "Op",
    "ShapeError",
    "SimResult",
    "Space",
    "TensorInfo",
    "TensorTraffic",
    "TilingError",
    "Trace",
    "TraceMeta",
    "UsageError",
    "atomic_write",
    "builtin_gpus",
    "load_gpu",
    "occupancy",
    "simulate",
]
