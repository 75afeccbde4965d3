"""The trace validator: reads of unwritten data, races between CTAs, buffer misuse and
shared-memory overflow (docs/dag.md, "The validator")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flashio.analysis.dag.regions import MEMORY, _granules, _mask, _region_end
from flashio.simulator.trace import Op, Space, Trace

__all__ = ["Problem", "validate_trace"]

LOAD, STORE, REDUCE, ALLOC, FREE, SHARED = (
    Op.LOAD,
    Op.STORE,
    Op.REDUCE,
    Op.ALLOC,
    Op.FREE,
    Op.SHARED,
)


# Accesses by two CTAs of one kernel that need an order the grid does not give (REDUCEs commute).
CONFLICTS = {
    "store": ("store", "reduce", "read"),
    "reduce": ("store", "read"),
    "read": ("store", "reduce"),
}


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a trace; ``event`` is an index into ``trace.events`` or -1."""

    kind: str
    message: str
    event: int = -1
    kernel: int = -1
    cta: int = -1
    tensor: str = ""


def validate_trace(trace: Trace, gpu=None) -> list[Problem]:
    """Check a trace for reads of unwritten data, races, buffer misuse and shared-memory overflow.

    Parameters
    ----------
    trace : simulator.Trace
    gpu : simulator.GPUSpec, optional
        When given, live shared memory is also checked against ``gpu.smem_per_cta_bytes``.

    Returns
    -------
    list of Problem
        Empty when the trace is fine. Kinds (docs/dag.md): ``bad_index``, ``bad_tensor``,
        ``out_of_bounds``, ``uninitialised_read``, ``uninitialised_reduce``, ``race``,
        ``double_alloc``, ``double_free``, ``free_without_alloc``, ``free_size_mismatch``,
        ``negative_live``, ``missing_free``, ``use_not_live``, ``use_outside_buffers``,
        ``smem_over_declared``, ``smem_over_gpu``.

    Notes
    -----
    Inputs are the global tensors no STORE or REDUCE ever writes (Q, K, V, dO, ...). A byte of
    any other tensor must be written before it is read, by an earlier kernel or earlier in the
    same CTA: CTAs of one kernel are unordered, so data passed between them is a ``race``
    (STORE vs anything, or a read vs a REDUCE, from two CTAs of one kernel; REDUCEs commute).
    Memory events do not name on-chip buffers, so "use" of a buffer is ALLOC/FREE balance per
    CTA, the SHARED events that do name one, and no data event while the CTA holds no buffer.
    """
    v = _Validator(trace, gpu)
    key = None
    for i, e in enumerate(trace.events):
        k, c = int(e["kernel"]), int(e["cta"])
        if (k, c) != key:
            if key is not None:
                v.end_cta(*key, kernel_ends=k != key[0])
            key = (k, c)
        if not (0 <= k < len(v.kinfos) and 0 <= c < v.kinfos[k].ctas):
            v.add("bad_index", f"kernel {k}, CTA {c} is not in the trace's grid", i, k, c)
        else:
            v.event(i, e, k, c)
    if key is not None:
        v.end_cta(*key, kernel_ends=True)
    return v.out


class _Validator:
    """State of one pass over a trace, in trace order (kernel, CTA, program order)."""

    def __init__(self, trace: Trace, gpu):
        ev = trace.events
        self.tensors, self.kinfos, self.gpu, self.out = (
            trace.meta.tensors,
            trace.meta.kernels,
            gpu,
            [],
        )
        self.gran = _granules(trace)
        self.written = {int(t) for t in ev["tensor"][np.isin(ev["op"], [STORE, REDUCE])]}
        self.done: dict[int, int] = {}  # tensor -> granules written by finished kernels
        self.kacc: dict[tuple, int] = {}  # (store|reduce|read, tensor) -> earlier CTAs' granules
        self.cur: dict[tuple, int] = {}  # the same for the CTA being scanned
        self.flagged: set = set()  # (kind, kernel): capacity is reported once per kernel
        self.live: dict[int, int] = {}  # on-chip buffer -> bytes, for the current CTA
        self.freed: set = set()
        self.live_smem = self.live_total = 0

    def add(self, kind, msg, i=-1, k=-1, c=-1, t=-1):
        name = self.tensors[t].name if 0 <= t < len(self.tensors) else ""
        self.out.append(Problem(kind, msg, i, k, c, name))

    def end_cta(self, k, c, kernel_ends):
        for t, nbytes in self.live.items():
            name = self.tensors[t].name
            self.add("missing_free", f"{name} ({nbytes} B) is never freed", -1, k, c, t)
        for (kind, t), m in self.cur.items():
            clash = 0
            for other in CONFLICTS[kind]:
                clash |= m & self.kacc.get((other, t), 0)
            if clash:
                self.add("race", f"{kind} of {clash.bit_count() * self.gran[t]} B of "
                         f"{self.tensors[t].name} that another CTA of the same kernel also "
                         "accesses (CTAs of one kernel are unordered)", -1, k, c, t)  # fmt: skip
        for key, m in self.cur.items():  # only after the checks: a CTA never races itself
            self.kacc[key] = self.kacc.get(key, 0) | m
        if kernel_ends:  # the kernel's writes become visible to the next kernels
            for (kind, t), m in self.kacc.items():
                if kind != "read":
                    self.done[t] = self.done.get(t, 0) | m
            self.kacc.clear()
        self.cur, self.live, self.freed = {}, {}, set()
        self.live_smem = self.live_total = 0

    def event(self, i, e, k, c):
        op, t, nb = int(e["op"]), int(e["tensor"]), int(e["bytes"])
        if op in (ALLOC, FREE) or (op == SHARED and t >= 0):
            if not 0 <= t < len(self.tensors) or self.tensors[t].space == Space.GLOBAL:
                self.add("bad_tensor", f"{Op(op).name} names tensor {t}, not an on-chip buffer",
                         i, k, c)  # fmt: skip
                return
        if op == ALLOC:
            self.alloc(i, k, c, t, nb)
        elif op == FREE:
            self.free(i, k, c, t, nb)
        else:
            if not self.live:
                self.add("use_outside_buffers", f"{Op(op).name} while the CTA holds no on-chip "
                         "buffer (before its ALLOCs or after its FREEs)", i, k, c, t)  # fmt: skip
            if op == SHARED and t >= 0 and t not in self.live:
                self.add("use_not_live", f"SHARED exchange through {self.tensors[t].name}, "
                         "which is not live", i, k, c, t)  # fmt: skip
            if op in MEMORY:
                self.memory(i, e, op, k, c, t)

    def alloc(self, i, k, c, t, nb):
        name, smem = self.tensors[t].name, self.tensors[t].space == Space.SHARED
        if t in self.live:
            self.add("double_alloc", f"{name} allocated while live", i, k, c, t)
            return
        self.live[t] = nb
        self.live_total += nb
        self.live_smem += nb if smem else 0
        limits = [("smem_over_declared", self.kinfos[k].smem_bytes, "the kernel declares")]
        if self.gpu is not None:
            limits.append(("smem_over_gpu", self.gpu.smem_per_cta_bytes, f"{self.gpu.name} has"))
        for kind, cap, who in limits:
            if self.live_smem > cap and (kind, k) not in self.flagged:
                self.flagged.add((kind, k))
                self.add(kind, f"{self.live_smem} B of live shared memory in a CTA, above the "
                         f"{cap} B per CTA {who}", i, k, c, t)  # fmt: skip

    def free(self, i, k, c, t, nb):
        name, smem = self.tensors[t].name, self.tensors[t].space == Space.SHARED
        if t not in self.live:
            kind = "double_free" if t in self.freed else "free_without_alloc"
            self.add(kind, f"FREE of {name}, which is not live", i, k, c, t)
            return
        if self.live[t] != nb:
            self.add("free_size_mismatch", f"FREE of {nb} B of {name}, allocated "
                     f"{self.live[t]} B", i, k, c, t)  # fmt: skip
        self.live_total -= nb
        self.live_smem -= nb if smem else 0
        if self.live_total < 0 or self.live_smem < 0:
            self.add("negative_live", f"live on-chip bytes {self.live_total} < 0", i, k, c, t)
        del self.live[t]
        self.freed.add(t)

    def memory(self, i, e, op, k, c, t):
        """Bounds, then reads of bytes that no ordered write produced."""
        if t not in self.gran:
            self.add("bad_tensor", f"{Op(op).name} of tensor {t}, not a global tensor", i, k, c)
            return
        info, end = self.tensors[t], _region_end(e)
        if int(e["rows"]) > 0 and (int(e["offset_bytes"]) < 0 or end > info.size_bytes):
            self.add("out_of_bounds", f"{Op(op).name} region ends at byte {end} of "
                     f"{info.name}, whose size is {info.size_bytes} B", i, k, c, t)  # fmt: skip
        m, g = _mask(e, self.gran[t]), self.gran[t]
        kind = {LOAD: "read", STORE: "store", REDUCE: "reduce"}[op]
        if op != STORE and t in self.written:  # a REDUCE reads the old value too
            cur = self.cur
            seen = self.done.get(t, 0) | cur.get(("store", t), 0) | cur.get(("reduce", t), 0)
            if missing := m & ~seen:
                self.add(f"uninitialised_{'read' if op == LOAD else 'reduce'}",
                         f"{Op(op).name} of {missing.bit_count() * g} B of {info.name} that "
                         "no earlier kernel and no earlier event of this CTA wrote",
                         i, k, c, t)  # fmt: skip
        self.cur[(kind, t)] = self.cur.get((kind, t), 0) | m
