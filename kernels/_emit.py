"""Shared machinery of the fast tracers: one jitted event writer and the schedule registry glue.

Every tracer is a private ``@njit`` function ``_emit(ev, write, kernel, cta_start, cta_stop, p,
kmin, kmax, keep, pages)`` that walks the schedule's loops for a range of CTAs and calls ``put``
once per event; ``kmin, kmax`` are the shape's mask (``kernels.mask.key_ranges``), ``keep`` its
block mask (``kernels.mask.keep_table``, grain ``p[P_MASK_BQ], p[P_MASK_BKV]``) and ``pages``
its paged KV cache's block table (``kernels.paged_kv``, page size ``p[P_PAGE]``; a 0 x 0 array
and page size 0 when K and V are contiguous). It returns how many events the range has and
writes those that fit in ``ev`` (none with ``write=False``): a window's recycled buffer is
written in one pass; elsewhere it runs twice, counting, then writing into an array of exactly
that size, so memory is bounded by the CTA range asked for.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from flashio.simulator._memory import empty
from flashio.simulator.trace import EVENT_DTYPE, Op

# Op codes as plain ints, which numba folds as constants inside the tracers.
LOAD, STORE, REDUCE, MMA, EW, EXP, SHARED, SYNC, ALLOC, FREE = (int(o) for o in Op)

JIT = {"cache": True, "nogil": True}  # JIT options live here, once

# Layout of the int64 parameter vector every tracer receives.
P_BATCH, P_HEADS, P_KV_HEADS, P_SEQ, P_DIM, P_EB, P_ACC, P_BQ, P_BKV, P_WARPS, P_CAUSAL = range(11)
P_KV_SEQ = 11  # rows of K and V
P_MASK_BQ, P_MASK_BKV = 12, 13  # the block mask's grain (kernels.mask.NO_GRAIN: none)
P_PAGE = 14  # tokens per page of a paged KV cache (0: K and V contiguous)
P_EXTRA = 15  # schedule-specific options start here
N_PARAMS = 19


@njit(inline="always")
def put(
    ev,
    n,
    write,
    kernel,
    cta,
    step,
    op,
    tensor,
    brow,
    bcol,
    off,
    rows,
    row_bytes,
    stride,
    nbytes,
    flops,
):
    # events beyond ``ev`` are counted, not written: a buffer that may be too small is
    # written in one pass (run_emitter); item syntax, so the tracers also run as Python
    # under NUMBA_DISABLE_JIT=1
    if write and n < ev.shape[0]:
        e = ev[n]
        e["kernel"] = kernel
        e["cta"] = cta
        e["step"] = step
        e["op"] = op
        e["tensor"] = tensor
        e["block_row"] = brow
        e["block_col"] = bcol
        e["offset_bytes"] = off
        e["rows"] = rows
        e["row_bytes"] = row_bytes
        e["row_stride_bytes"] = stride
        e["bytes"] = nbytes
        e["flops"] = flops
    return n + 1


@njit(inline="always")
def mem(ev, k, write, kernel, cta, step, op, tensor, brow, bcol, off, rows, row_bytes, stride):
    """A LOAD, STORE or REDUCE of ``rows`` rows of ``row_bytes`` bytes, ``stride`` apart."""
    return put(
        ev, k, write, kernel, cta, step, op, tensor, brow, bcol, off, rows, row_bytes, stride,
        rows * row_bytes, 0,
    )  # fmt: skip


@njit(inline="always")
def calc(ev, k, write, kernel, cta, step, op, brow, bcol, flops):
    """An MMA, ELEMENTWISE or EXP event of ``flops`` operations."""
    return put(ev, k, write, kernel, cta, step, op, -1, brow, bcol, 0, 0, 0, 0, 0, flops)


@njit(inline="always")
def buf(ev, k, write, kernel, cta, op, tensor, nbytes):
    """ALLOC or FREE of the on-chip buffer ``tensor`` of ``nbytes`` bytes."""
    return put(ev, k, write, kernel, cta, -1, op, tensor, -1, -1, 0, 0, 0, 0, nbytes, 0)


def run_emitter(emit, kernel: int, start: int, stop: int, params: np.ndarray, tables, out=None):
    """The events of CTAs ``start..stop-1`` of one kernel: written in one pass into the start
    of ``out`` where they fit (returning that view; ``out`` is scratch either way), else
    counted, then written into a new array of the exact size.
    ``tables`` are the tracer's arrays after ``p``: the shape's ``kernels.mask.key_ranges``
    (two), its ``keep_table``'s summed-area table and its page table."""
    if out is not None:  # one pass where they fit (counting first took half the time)
        n = emit(out, True, kernel, start, stop, params, *tables)
        if n <= len(out):
            return out[:n]
    n = emit(np.empty(0, EVENT_DTYPE), False, kernel, start, stop, params, *tables)
    ev = empty(n, EVENT_DTYPE)
    written = emit(ev, True, kernel, start, stop, params, *tables)
    assert written == n, "tracer wrote a different number of events than it counted"
    return ev
