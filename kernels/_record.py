"""The numeric executors' event log: a slow, plain-Python twin of the jitted ``put``.

Executors call ``Recorder.put`` as they actually move and compute each tile, so their trace is
what the run did; tests compare it event for event with the fast tracer's.
"""

from __future__ import annotations

import numpy as np

from simulator.trace import EVENT_DTYPE


class Recorder:
    __slots__ = ("rows",)

    def __init__(self):
        self.rows: list[tuple] = []

    def put(
        self,
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
        self.rows.append(
            (
                kernel,
                cta,
                step,
                int(op),
                tensor,
                brow,
                bcol,
                off,
                rows,
                row_bytes,
                stride,
                nbytes,
                flops,
            )
        )

    def events(self) -> np.ndarray:
        return np.array(self.rows, dtype=EVENT_DTYPE)


def offset4(dims: tuple[int, int, int, int], b: int, h: int, r0: int, c0: int, eb: int) -> int:
    """Byte offset of element (b, h, r0, c0) of a contiguous (B, H, R, C) tensor."""
    _, nh, nr, nc = dims
    return (((b * nh + h) * nr + r0) * nc + c0) * eb
