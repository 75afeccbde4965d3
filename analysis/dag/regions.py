"""Byte regions of global tensors as bitsets: what the schedule DAG and the validator compare.

Each global tensor a trace touches is cut into granules on which every region of the trace starts
and ends (``_granules``); a memory event's strided region is then a Python-int bitset over them
(``_mask``), so overlap tests are exact and one AND.
"""

from __future__ import annotations

import math

import numpy as np

from flashio.simulator.trace import Op, Space, Trace

LOAD, STORE, REDUCE = Op.LOAD, Op.STORE, Op.REDUCE
MEMORY = frozenset(int(o) for o in (LOAD, STORE, REDUCE))


def _granules(trace: Trace) -> dict[int, int]:
    """Per global tensor, the largest granule (bytes) on which every region starts and ends.

    Regions become Python-int bitsets over granules, so overlap tests are exact and cheap.
    """
    ev, out = trace.events, {}
    mem = ev[np.isin(ev["op"], list(MEMORY))]
    tensors = trace.meta.tensors
    for t in np.unique(mem["tensor"]).tolist():
        if not (0 <= t < len(tensors) and tensors[t].space == Space.GLOBAL):
            continue  # not a global tensor: validate_trace reports it
        sel = mem[mem["tensor"] == t]
        parts = (sel[f].tolist() for f in ("offset_bytes", "row_bytes", "row_stride_bytes"))
        out[t] = math.gcd(*(x for p in parts for x in p)) or 1
    return out


def _mask(e, g: int) -> int:
    """Bitset of the granules of event ``e``'s strided region (0 for an empty region)."""
    rows, rb = int(e["rows"]), int(e["row_bytes"])
    if rows <= 0 or rb <= 0:
        return 0
    off, width, step = int(e["offset_bytes"]) // g, rb // g, int(e["row_stride_bytes"]) // g
    if rows == 1 or step == width:  # contiguous: one run of granules
        return ((1 << (width * rows)) - 1) << off
    row, out = (1 << width) - 1, 0
    for r in range(rows):
        out |= row << (off + r * step)
    return out


def _region_end(e) -> int:
    return (
        int(e["offset_bytes"])
        + (int(e["rows"]) - 1) * int(e["row_stride_bytes"])
        + int(e["row_bytes"])
    )
