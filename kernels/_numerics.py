"""Storage types and rounding of the executors: what "runs in the shape's dtype" means.

fp16, fp32 and fp64 use numpy's own types. numpy has no bfloat16, so bf16 values are held in
float32 arrays and rounded to bfloat16 (8-bit mantissa, round to nearest even) wherever a real
kernel would store bf16: inputs, the P tile fed to the tensor cores, outputs.
"""

from __future__ import annotations

import numpy as np

_STORAGE = {"fp16": np.float16, "bf16": np.float32, "fp32": np.float32, "fp64": np.float64}
_ACC = {"fp16": np.float32, "bf16": np.float32, "fp32": np.float32, "fp64": np.float64}


def numpy_dtype(dtype: str) -> np.dtype:
    """numpy type holding values of ``dtype`` (float32 for bf16)."""
    return np.dtype(_STORAGE[dtype])


def acc_dtype(dtype: str) -> np.dtype:
    """Accumulator type: float32, or float64 for fp64."""
    return np.dtype(_ACC[dtype])


def _round_bf16(x: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    bias = np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))
    out = ((u + bias) & np.uint32(0xFFFF0000)).view(np.float32)
    return np.where(np.isfinite(x), out, x).astype(np.float32)


def to_dtype(x: np.ndarray, dtype: str) -> np.ndarray:
    """Round ``x`` to ``dtype`` and return it in its storage type."""
    if dtype == "bf16":
        return _round_bf16(np.asarray(x, np.float32))
    return np.asarray(x).astype(_STORAGE[dtype])


def unit_roundoff(dtype: str) -> float:
    """Half the distance from 1 to the next value: 2^-11 fp16, 2^-8 bf16, 2^-24 fp32, 2^-53."""
    return {"fp16": 2.0**-11, "bf16": 2.0**-8, "fp32": 2.0**-24, "fp64": 2.0**-53}[dtype]
