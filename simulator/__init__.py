"""GPU specs, the trace format, and the replay engine. Knows nothing about attention."""

from simulator.gpu import GPUSpec, GPUSpecError, builtin_gpus, load_gpu
from simulator.trace import EVENT_DTYPE, KernelInfo, Op, Space, TensorInfo, Trace, TraceMeta

__all__ = [
    "EVENT_DTYPE",
    "GPUSpec",
    "GPUSpecError",
    "KernelInfo",
    "Op",
    "Space",
    "TensorInfo",
    "Trace",
    "TraceMeta",
    "builtin_gpus",
    "load_gpu",
]
