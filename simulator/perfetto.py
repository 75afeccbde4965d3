"""A simulation as a timeline: Chrome trace-event JSON that ui.perfetto.dev and chrome://tracing
open.

``trace_events(result, source)`` turns a result of ``simulate(..., timeline=True)`` into trace
events; ``write(result, source, path)`` saves them. What the file holds:

- process "SMs": a track per (SM, CTA slot), a slice per CTA (kernel, CTA index, the first
  global tile it loads, its global bytes). Slots are recovered from the replay's start and end
  times: a CTA takes the lowest slot of its SM that is free when it starts;
- process "kernels": a slice per kernel, and counter tracks over time: CTAs resident on the
  GPU; global (SM-side) traffic, each CTA's bytes spread evenly over its lifetime; HBM traffic
  and the bytes the L2 holds (all, and dirty), from the memory system sampled as each CTA ends
  (``SimResult.memory_timeline``): HBM GB/s is the growth of the bytes moved so far between
  those samples, so it resolves the time between CTA ends, not single requests.

Above :data:`MAX_CTAS` CTAs a slice stands for up to ``ceil(ctas / MAX_CTAS)`` consecutive CTAs
of one slot and kernel (its args say which, and ``otherData.aggregated`` says so), so that the
file still opens; beyond :data:`MAX_TIMELINE_CTAS` the timeline itself is refused.

Times are microseconds from the first kernel's start (the trace-event unit).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from flashio.simulator.errors import UsageError
from flashio.simulator.trace import MEMORY_OPS, Space

__all__ = ["MAX_CTAS", "MAX_TIMELINE_CTAS", "check_size", "trace_events", "write"]

MAX_CTAS = 500_000  # CTA slices a file holds; beyond it the JSON is too large to open
MAX_TIMELINE_CTAS = 20_000_000  # CTAs a timeline records (48 bytes each) and aggregates
BINS = 400  # counter samples per kernel
CHUNK = 8192  # CTAs traced at a time when summing their bytes


def _cta_bytes(source, k: int, ctas: int) -> tuple[np.ndarray, list]:
    """Global bytes each CTA of kernel ``k`` moves, and its first global LOAD's (tensor, block
    row, block column)."""
    tensors = source.meta.tensors
    is_global = np.array([t.space == Space.GLOBAL for t in tensors])
    total = np.zeros(ctas)
    first: list = [None] * ctas
    for lo in range(0, ctas, CHUNK):
        ev = source.cta_events(k, lo, min(ctas, lo + CHUNK))
        mem = np.isin(ev["op"], [int(o) for o in MEMORY_OPS]) & (ev["tensor"] >= 0)
        mem &= is_global[np.maximum(ev["tensor"], 0)]
        total += np.bincount(ev["cta"][mem], weights=ev["bytes"][mem], minlength=ctas)[:ctas]
        loads = ev[mem & (ev["op"] == 0)]
        _, idx = np.unique(loads["cta"], return_index=True)
        for e in loads[idx]:
            first[int(e["cta"])] = (tensors[e["tensor"]].name, int(e["block_row"]),
                                    int(e["block_col"]))  # fmt: skip
    return total, first


def _slots(span: np.ndarray) -> np.ndarray:
    """A CTA slot per CTA: the lowest slot of its SM free at its start (interval partition)."""
    slot = np.zeros(len(span), np.int64)
    free: dict[int, list[float]] = {}
    for c in np.lexsort((span[:, 0], span[:, 2])):
        start, end, sm = span[c]
        ends = free.setdefault(int(sm), [])
        i = next((i for i, e in enumerate(ends) if e <= start), len(ends))
        if i == len(ends):
            ends.append(end)
        else:
            ends[i] = end
        slot[c] = i
    return slot


def _spread(span: np.ndarray, weights: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Per bin of ``edges``: the sum of each interval's weight times the share of it in the bin."""
    out = np.zeros(len(edges) - 1)
    for (start, end, _), w in zip(span, weights, strict=True):
        if w <= 0:
            continue
        length = max(end - start, 1e-30)
        overlap = np.clip(np.minimum(edges[1:], end) - np.maximum(edges[:-1], start), 0, None)
        out += w * overlap / length
    return out


def _memory_counters(memory: np.ndarray, hbm_before: float, k_start: float, edges: np.ndarray):
    """Per bin of ``edges``: HBM GB/s, and L2 held and dirty bytes at the bin's start, from the
    samples taken as each CTA ended (end s, HBM bytes so far, held, dirty)."""
    m = memory[np.argsort(memory[:, 0], kind="stable")]
    t = np.concatenate(([k_start], m[:, 0]))
    moved = np.maximum.accumulate(np.concatenate(([hbm_before], m[:, 1])))
    at_edges = np.interp(edges, t, moved)
    gbps = np.diff(at_edges) / np.maximum(np.diff(edges), 1e-30) / 1e9
    # the L2 as last sampled at or before each bin start (the first sample before any end)
    last = np.clip(np.searchsorted(m[:, 0], edges[:-1], side="right") - 1, 0, len(m) - 1)
    return gbps, m[last, 2], m[last, 3]


def check_size(ctas: int) -> None:
    """Raise ``UsageError`` when a timeline of ``ctas`` CTAs is too large to record."""
    if ctas > MAX_TIMELINE_CTAS:
        raise UsageError(
            f"{ctas:,} CTAs are more than a timeline records ({MAX_TIMELINE_CTAS:,}); "
            "simulate a smaller batch or fewer heads for the timeline"
        )


def _groups(slot: np.ndarray, span: np.ndarray, size: int) -> list[np.ndarray]:
    """The CTAs of one kernel in slices of up to ``size`` consecutive CTAs of one slot."""
    order = np.lexsort((span[:, 0], slot, span[:, 2]))  # by SM, slot, then start
    key = span[order, 2] * (slot.max() + 1) + slot[order]
    out = []
    for run in np.split(order, np.flatnonzero(np.diff(key)) + 1):
        out += [run[i : i + size] for i in range(0, len(run), size)]
    return out


def trace_events(result, source) -> dict:
    """The trace-event document of ``result`` (``simulate(source, ..., timeline=True)``)."""
    if result.timeline is None:
        raise UsageError("the result has no timeline: simulate(..., timeline=True) first")
    total = sum(len(s) for s in result.timeline)
    check_size(total)
    group = -(-total // MAX_CTAS)  # CTAs per slice
    t0 = min((float(s[:, 0].min()) for s in result.timeline if len(s)), default=0.0)

    def us(t):
        return (float(t) - t0) * 1e6

    def name(pid, what, tid=None):
        return {"ph": "M", "pid": pid, "name": f"{what[0]}_name", "args": {"name": what[1]}} | (
            {} if tid is None else {"tid": tid}
        )

    events = [
        name(1, ("process", f"SMs of {result.gpu}")),
        name(2, ("process", f"kernels of {result.schedule}")),
        name(2, ("thread", "kernels"), tid=0),
    ]
    slots_per_sm = max((k.occupancy.ctas_per_sm for k in result.kernels), default=1)
    named: set[int] = set()
    hbm_before = 0.0  # HBM bytes moved by the kernels before this one
    kernels = zip(result.kernels, result.timeline, result.memory_timeline, strict=True)
    for k, (kres, span, memory) in enumerate(kernels):
        if not len(span):
            continue
        nbytes, first = _cta_bytes(source, k, len(span))
        slot = _slots(span)
        for ctas in _groups(slot, span, group) if group > 1 else np.arange(len(span))[:, None]:
            c, sm, s = int(ctas[0]), int(span[ctas[0], 2]), int(slot[ctas[0]])
            tid = sm * slots_per_sm + s + 1
            if tid not in named:
                named.add(tid)
                events.append(name(1, ("thread", f"SM {sm} slot {s}"), tid=tid))
            args = {"cta": c, "global_bytes": int(nbytes[ctas].sum())}
            if len(ctas) > 1:
                args |= {"ctas": len(ctas), "last_cta": int(ctas[-1])}
            elif first[c] is not None:
                tensor, row, col = first[c]
                args["first_tile"] = f"{tensor} block " + (
                    f"({row}, {col})" if col >= 0 else f"{row}"
                )
            start, end = span[ctas, 0].min(), span[ctas, 1].max()
            events.append({"ph": "X", "pid": 1, "tid": tid, "name": kres.name, "cat": "cta",
                           "ts": us(start), "dur": us(end) - us(start), "args": args})  # fmt: skip
        k_start, k_end = float(span[:, 0].min()), float(span[:, 1].max())
        events.append({"ph": "X", "pid": 2, "tid": 0, "name": kres.name, "cat": "kernel",
                       "ts": us(k_start), "dur": us(k_end) - us(k_start),
                       "args": {"ctas": kres.ctas, "waves": kres.waves,
                                "ctas_per_sm": kres.occupancy.ctas_per_sm}})  # fmt: skip
        edges = np.linspace(k_start, k_end, BINS + 1)
        width = max(edges[1] - edges[0], 1e-30)
        gbps = _spread(span, nbytes, edges) / width / 1e9
        resident = _spread(span, span[:, 1] - span[:, 0], edges) / width
        hbm_gbps, held, dirty = _memory_counters(memory, hbm_before, k_start, edges)
        hbm_before = float(memory[:, 1].max())
        for i in range(BINS):
            ts = us(edges[i])
            for track, unit, value in (("global traffic GB/s", "GB/s", gbps[i]),
                                       ("CTAs resident", "CTAs", resident[i]),
                                       ("HBM GB/s", "GB/s", hbm_gbps[i]),
                                       ("L2 held MB", "MB", held[i] / 1e6),
                                       ("L2 dirty MB", "MB", dirty[i] / 1e6)):  # fmt: skip
                events.append({"ph": "C", "pid": 2, "name": track, "ts": ts,
                               "args": {unit: round(float(value), 3)}})  # fmt: skip
        events.append({"ph": "C", "pid": 2, "name": "HBM GB/s", "ts": us(k_end),
                       "args": {"GB/s": 0.0}})  # fmt: skip
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"schedule": result.schedule, "gpu": result.gpu,
                          "time_s": result.time_s,
                          "aggregated": f"a slice is up to {group} consecutive CTAs of a slot"
                          if group > 1 else "no: a slice per CTA"}}  # fmt: skip


def write(result, source, path) -> Path:
    """Write ``trace_events(result, source)`` to ``path``, whole or not at all."""
    path = Path(path)
    doc = trace_events(result, source)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, separators=(",", ":")))
    os.replace(tmp, path)
    return path
