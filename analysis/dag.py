"""The schedule DAG of a trace (networkx), a trace validator, and work/span statistics.

A trace lists what each CTA does in program order but names no operands of its compute events,
so the DAG is inferred, conservatively, from three kinds of evidence (docs/dag.md):

- program order inside a CTA: compute events (MMA, ELEMENTWISE, EXP, SHARED, SYNC) form a chain,
  since every schedule carries its on-chip accumulators (O_i, m, l, dK_j, ...) from one compute
  step to the next; a LOAD feeds the next compute event after it; a STORE or REDUCE follows the
  last compute event before it (or, in a copy with no compute, every LOAD before it);
- global memory, by (tensor, byte region): read-after-write (a LOAD depends on the STOREs and
  REDUCEs that last wrote its bytes earlier in the trace), write-after-write and write-after-read
  (atomic REDUCEs are not ordered among themselves);
- kernel boundaries: one zero-cost barrier node ``("end", k)`` per kernel; every event of kernel
  k precedes it and every event of kernel k+1 follows it.

ALLOC and FREE carry no data and are not nodes; ``validate_trace`` checks them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import networkx as nx
import numpy as np

from simulator.trace import Op, Space, Trace

__all__ = ["DagStats", "KernelDagStats", "Problem", "dag_stats", "schedule_dag", "validate_trace"]

LOAD, STORE, REDUCE, ALLOC, FREE, SHARED = (
    Op.LOAD,
    Op.STORE,
    Op.REDUCE,
    Op.ALLOC,
    Op.FREE,
    Op.SHARED,
)
COMPUTE = frozenset(int(o) for o in (Op.MMA, Op.ELEMENTWISE, Op.EXP, Op.SHARED, Op.SYNC))
MEMORY = frozenset(int(o) for o in (LOAD, STORE, REDUCE))


# ------------------------------------------------------------------------ byte regions as bitsets


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


# ------------------------------------------------------------------------------------ the DAG


def schedule_dag(trace: Trace, *, prefetch: bool = True) -> nx.DiGraph:
    """Dependence DAG of a trace's events.

    Parameters
    ----------
    trace : simulator.Trace
    prefetch : bool
        True (default): a LOAD waits only for the data it reads (RAW through global memory) and
        the start of its kernel, as if the CTA had a buffer per tile (unbounded prefetch). False:
        a LOAD also waits for the last compute event before it in its CTA (single buffering: the
        tile it overwrites must have been consumed).

    Returns
    -------
    networkx.DiGraph
        Nodes: event indices into ``trace.events`` (ALLOC/FREE excluded), with attributes
        ``op`` (Op), ``kernel``, ``cta``, ``step``, ``tensor`` (name or None), ``bytes``,
        ``flops``; and one barrier node ``("end", k)`` per kernel with ``op=None``. Edges carry
        ``kind``: ``load``, ``chain``, ``produce`` (program order), ``raw``, ``waw``, ``war``
        (global memory) or ``kernel`` (barrier).

    Notes
    -----
    Every edge goes from an earlier to a later position in the trace (barriers sit between
    kernels), so the graph is acyclic by construction.
    """
    ev, meta = trace.events, trace.meta
    gran = _granules(trace)
    g = nx.DiGraph()
    writes: dict[int, list] = {t: [] for t in gran}  # (event, op, mask), in trace order
    reads: dict[int, list] = {t: [] for t in gran}  # [event, mask not yet overwritten]
    g.graph["schedule"] = meta.schedule
    g.graph["kernels"] = tuple(ki.name for ki in meta.kernels)
    for k in range(len(meta.kernels)):
        g.add_node(("end", k), op=None, kernel=k, cta=-1, step=-1, tensor=None, bytes=0, flops=0)
        if k > 0:  # kernels stay ordered even when one has no events
            g.add_edge(("end", k - 1), ("end", k), kind="kernel")
    prev_cta, last_compute, loads = None, None, []
    for i, e in enumerate(ev):
        op, k, cta, t = int(e["op"]), int(e["kernel"]), int(e["cta"]), int(e["tensor"])
        if op in (ALLOC, FREE):
            continue
        if (k, cta) != prev_cta:
            prev_cta, last_compute, loads = (k, cta), None, []
        name = meta.tensors[t].name if 0 <= t < len(meta.tensors) else None
        g.add_node(
            i, op=Op(op), kernel=k, cta=cta, step=int(e["step"]), tensor=name,
            bytes=int(e["bytes"]), flops=int(e["flops"]),
        )  # fmt: skip
        g.add_edge(i, ("end", k), kind="kernel")
        if k > 0:
            g.add_edge(("end", k - 1), i, kind="kernel")
        if op in COMPUTE:
            if last_compute is not None:
                g.add_edge(last_compute, i, kind="chain")
            g.add_edges_from(((j, i) for j in loads), kind="load")
            last_compute, loads = i, []
            continue
        if op == LOAD:
            loads.append(i)
            if not prefetch and last_compute is not None:
                g.add_edge(last_compute, i, kind="chain")
        elif last_compute is not None:  # STORE, REDUCE: the value comes from compute
            g.add_edge(last_compute, i, kind="produce")
        else:  # a copy: the value comes from the loads before it
            g.add_edges_from(((j, i) for j in loads), kind="produce")
        if t in gran:
            _global_edges(g, i, op, t, _mask(e, gran[t]), writes, reads)
    return g


def _global_edges(g, i, op, t, mask, writes, reads) -> None:
    """RAW/WAW/WAR edges of event ``i`` through tensor ``t``'s granules ``mask``."""
    rem = mask
    for w, wop, wm in reversed(writes[t]):  # the writes still visible at i
        if not rem:
            break
        if wm & rem and not (op == REDUCE and wop == REDUCE):  # atomics commute
            g.add_edge(w, i, kind="raw" if op == LOAD else "waw")
        if wop == STORE:
            rem &= ~wm
    if op == LOAD:
        reads[t].append([i, mask])
        return
    live = []
    for r in reads[t]:
        if r[1] & mask:
            g.add_edge(r[0], i, kind="war")
            r[1] &= ~mask
        if r[1]:
            live.append(r)
    reads[t] = live
    writes[t].append((i, op, mask))


# ----------------------------------------------------------------------------- work and span


@dataclass(frozen=True, slots=True)
class KernelDagStats:
    """Work, span and parallelism of one kernel's events (edges inside the kernel only)."""

    name: str
    ctas: int
    events: int
    work: float
    span: float
    parallelism: float


@dataclass(frozen=True, slots=True)
class DagStats:
    """Work, span (critical path) and parallelism = work / span of a schedule DAG.

    ``span`` of the whole DAG is the sum of the kernels' spans (the barriers serialise them).
    ``parallelism`` is NaN when the span is 0 (no node has weight).
    """

    weights: str
    work: float
    span: float
    parallelism: float
    critical_path: tuple
    kernels: tuple[KernelDagStats, ...]


WEIGHTS: dict[str, Callable[[dict], float]] = {
    "unit": lambda a: 1,
    "bytes": lambda a: a["bytes"] if a["op"] in MEMORY else 0,
    "flops": lambda a: a["flops"] if a["op"] in COMPUTE else 0,
}


def _longest(g: nx.DiGraph, w: dict) -> tuple[float, list]:
    """Heaviest path by node weights, by dynamic programming in topological order."""
    best, back = {}, {}
    for v in nx.topological_sort(g):
        p = max(g.predecessors(v), key=best.__getitem__, default=None)
        best[v] = w[v] + (best[p] if p is not None else 0)
        back[v] = p
    if not best:
        return 0, []
    v, path = max(best, key=best.__getitem__), []
    while v is not None:
        path.append(v)
        v = back[v]
    return best[path[0]], path[::-1]


def dag_stats(graph: nx.DiGraph, weights: str | Callable[[dict], float] = "unit") -> DagStats:
    """Critical path, total work and parallelism of a ``schedule_dag``.

    Parameters
    ----------
    graph : networkx.DiGraph
        From ``schedule_dag``.
    weights : {"unit", "bytes", "flops"} or callable
        Cost of a node: ``unit`` 1 per event; ``bytes`` the bytes of LOAD/STORE/REDUCE (others
        0); ``flops`` the operations of compute events (others 0); or a function of the node's
        attribute dict. Barrier nodes always cost 0.

    Notes
    -----
    Work T1 and span T_inf as in Brent's theorem: a greedy schedule on p processors takes at
    most T1/p + T_inf. FlashAttention-2 (Dao 2023, Sec. 3.2) parallelises over Q blocks so that
    T1/T_inf grows with batch * heads * Tr; FlashAttention-1's one CTA per head gives
    batch * heads times a constant (docs/dag.md).
    """
    if isinstance(weights, str):
        if weights not in WEIGHTS:
            raise ValueError(f"weights={weights!r}; use one of {', '.join(WEIGHTS)} or a callable")
        fn, label = WEIGHTS[weights], weights
    else:
        fn, label = weights, getattr(weights, "__name__", "custom")
    w = {v: (0 if a["op"] is None else fn(a)) for v, a in graph.nodes(data=True)}
    span, path = _longest(graph, w)
    work = sum(w.values())
    per_kernel = []
    names = graph.graph.get("kernels", ())
    for k in sorted({a["kernel"] for a in graph.nodes.values()}):
        nodes = [v for v, a in graph.nodes(data=True) if a["kernel"] == k and a["op"] is not None]
        ksp, _ = _longest(graph.subgraph(nodes), w)
        kw = sum(w[v] for v in nodes)
        ctas = len({graph.nodes[v]["cta"] for v in nodes})
        name = names[k] if k < len(names) else str(k)
        per_kernel.append(KernelDagStats(name, ctas, len(nodes), kw, ksp, _ratio(kw, ksp)))
    return DagStats(label, work, span, _ratio(work, span), tuple(path), tuple(per_kernel))


def _ratio(a, b) -> float:
    return a / b if b else math.nan


# ------------------------------------------------------------------------------ the validator

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


# The example of docs/dag.md: `python -m analysis.dag`
def _main() -> None:
    import kernels
    import simulator

    gpu = simulator.load_gpu("h200")
    shape = kernels.AttentionShape(batch=1, heads=2, seq_len=8, head_dim=16)
    print(f"{shape}, block_q = block_kv = 2, 1 warp; validate_trace(trace, h200)")
    print("| schedule | kernel | CTAs | events | work | span | parallelism | problems |")
    print("|---|---|---|---|---|---|---|---|")
    for name in kernels.SCHEDULES:
        trace = kernels.schedule(name, shape, 2, 2, warps=1).trace()
        problems = len(validate_trace(trace, gpu))
        st = dag_stats(schedule_dag(trace))
        for k in (*st.kernels, None):
            label, row = ("all", st) if k is None else (k.name, k)
            ctas = sum(x.ctas for x in st.kernels) if k is None else k.ctas
            events = sum(x.events for x in st.kernels) if k is None else k.events
            print(f"| {name} | {label} | {ctas} | {events} | {row.work} | {row.span} | "
                  f"{row.parallelism:.2f} | {problems if k is None else ''} |")  # fmt: skip
    print("\nweights='bytes' and 'flops', flash1 vs flash2 (same shape and blocks):")
    print("| schedule | weights | work | span | parallelism |")
    print("|---|---|---|---|---|")
    for name in ("flash1", "flash2"):
        g = schedule_dag(kernels.schedule(name, shape, 2, 2, warps=1).trace())
        for w in ("bytes", "flops"):
            st = dag_stats(g, w)
            print(f"| {name} | {w} | {st.work:,} | {st.span:,} | {st.parallelism:.2f} |")


if __name__ == "__main__":
    _main()
