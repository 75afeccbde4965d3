"""GPU specs, the trace format, and the replay engine. Knows nothing about attention."""

from simulator.trace import EVENT_DTYPE, KernelInfo, Op, Space, TensorInfo, Trace, TraceMeta

__all__ = ["EVENT_DTYPE", "KernelInfo", "Op", "Space", "TensorInfo", "Trace", "TraceMeta"]
