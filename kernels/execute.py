"""Numeric execution of a schedule, tile by tile, with the trace of what it did."""

from __future__ import annotations

import numpy as np

from flashio.kernels._numerics import numpy_dtype, to_dtype
from flashio.kernels._record import Recorder
from flashio.simulator.trace import Trace

__all__ = ["execute"]


def _check(name: str, x, expected_shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(x).__name__}")
    if x.shape != expected_shape:
        raise ValueError(
            f"{name} has shape {x.shape}, expected {expected_shape} "
            "(batch, heads or kv_heads, seq_len or kv_seq_len, head_dim)"
        )
    want = numpy_dtype(dtype)
    if x.dtype.name == "bfloat16" and dtype == "bf16":
        x = x.astype(np.float32)
    elif x.dtype != want:
        hint = " (bf16 values are passed as float32 and rounded)" if dtype == "bf16" else ""
        raise ValueError(f"{name} has dtype {x.dtype}, expected {want} for {dtype}{hint}")
    if not np.all(np.isfinite(x)):
        bad = np.argwhere(~np.isfinite(x))[0]
        raise ValueError(
            f"{name} contains NaN or Inf (first at index {tuple(int(i) for i in bad)})"
        )
    return to_dtype(x, dtype) if dtype == "bf16" else x


def execute(sched, q, k, v, grad_out=None):
    """Run ``sched`` on real data, block by block as the schedule prescribes.

    Parameters
    ----------
    sched : kernels.Schedule
    q : ndarray, (batch, heads, seq_len, head_dim)
    k, v : ndarray, (batch, kv_heads, kv_seq_len, head_dim)
    grad_out : ndarray, (batch, heads, seq_len, head_dim), backward schedules only
        dO, the gradient of the loss with respect to O.

    Returns
    -------
    result, trace
        ``O`` for forward schedules, ``(dQ, dK, dV)`` for backward ones, in the shape's storage
        dtype; and the ``simulator.Trace`` of every event the run performed.

    Notes
    -----
    Arithmetic follows the kernels' mixed precision: inputs in the shape's dtype, products
    accumulated in fp32 (fp64 for fp64 inputs), softmax statistics in the accumulator type, and
    P rounded to the input dtype before it multiplies V (as the tensor cores take it).
    """
    from flashio.kernels.registry import spec

    sh = sched.shape
    qshape = (sh.batch, sh.heads, sh.seq_len, sh.head_dim)
    kvshape = (sh.batch, sh.n_kv_heads, sh.n_kv, sh.head_dim)
    q = _check("q", q, qshape, sh.dtype)
    k = _check("k", k, kvshape, sh.dtype)
    v = _check("v", v, kvshape, sh.dtype)
    kind = spec(sched.name)
    backward = kind.backward
    if backward:
        if grad_out is None:
            raise ValueError(f"schedule {sched.name!r} is a backward pass: pass grad_out (dO)")
        grad_out = _check("grad_out", grad_out, qshape, sh.dtype)
    elif grad_out is not None:
        raise ValueError(f"schedule {sched.name!r} is a forward pass: grad_out must be None")
    rec = Recorder()
    result = kind.module.execute(sched, q, k, v, grad_out, rec)
    if not backward:
        result = result[0]  # O; the logsumexp stays internal
    return result, Trace(rec.events(), sched.meta)
