"""GPU specs, the trace format, and the replay engine. Knows nothing about attention."""

from simulator.gpu import GPUSpec, GPUSpecError
from simulator.occupancy import CapacityError, Occupancy, occupancy
from simulator.result import KernelResult, SimResult, TensorTraffic
from simulator.simulate import ModelOptions, simulate
from simulator.specfiles import builtin_gpus, load_gpu
from simulator.trace import EVENT_DTYPE, KernelInfo, Op, Space, TensorInfo, Trace, TraceMeta

__all__ = [
    "EVENT_DTYPE",
    "CapacityError",
    "GPUSpec",
    "GPUSpecError",
    "KernelInfo",
    "KernelResult",
    "ModelOptions",
    "Occupancy",
    "Op",
    "SimResult",
    "Space",
    "TensorInfo",
    "TensorTraffic",
    "Trace",
    "TraceMeta",
    "builtin_gpus",
    "load_gpu",
    "occupancy",
    "simulate",
]
