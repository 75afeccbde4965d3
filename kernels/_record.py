"""The numeric executors' event log: a slow, plain-Python twin of the jitted ``put``.

Executors call ``Recorder.put`` (or its shorthands ``mem``, ``calc`` and ``buf``, twins of the
jitted helpers in ``kernels._emit``) as they actually move and compute each tile, so their trace
is what the run did; tests compare it event for event with the fast tracer's.
"""

from __future__ import annotations

import numpy as np

from flashio.simulator.trace import EVENT_DTYPE


class Recorder:
    __slots__ = ("rows",)

    def __init__(self):
        self.rows: list[tuple] = []

    def put(self, kernel, cta, step, op, *fields):
        """One event: the arguments of ``kernels._emit.put`` after ``ev, n, write``.

        ``fields`` are tensor, block_row, block_col, offset_bytes, rows, row_bytes,
        row_stride_bytes, bytes and flops, in that order (``EVENT_DTYPE``'s fields after op).
        """
        self.rows.append((kernel, cta, step, int(op), *fields))

    def mem(self, kernel, cta, step, op, tensor, brow, bcol, off, rows, row_bytes, stride):
        """A LOAD, STORE or REDUCE of ``rows`` rows of ``row_bytes`` bytes, ``stride`` apart."""
        region = (off, rows, row_bytes, stride, rows * row_bytes)
        self.put(kernel, cta, step, op, tensor, brow, bcol, *region, 0)

    def calc(self, kernel, cta, step, op, brow, bcol, flops):
        """An MMA, ELEMENTWISE or EXP event of ``flops`` operations."""
        self.put(kernel, cta, step, op, -1, brow, bcol, 0, 0, 0, 0, 0, flops)

    def buf(self, kernel, cta, op, tensor, nbytes):
        """ALLOC or FREE of the on-chip buffer ``tensor`` of ``nbytes`` bytes."""
        self.put(kernel, cta, -1, op, tensor, -1, -1, 0, 0, 0, 0, nbytes, 0)

    def events(self) -> np.ndarray:
        return np.array(self.rows, dtype=EVENT_DTYPE)


def offset4(dims: tuple[int, int, int, int], b: int, h: int, r0: int, c0: int, eb: int) -> int:
    """Byte offset of element (b, h, r0, c0) of a contiguous (B, H, R, C) tensor."""
    _, nh, nr, nc = dims
    return (((b * nh + h) * nr + r0) * nc + c0) * eb
