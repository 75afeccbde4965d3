"""The schedule DAG of a trace (networkx) and its work/span statistics.

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

from flashio.analysis.dag.regions import MEMORY, _granules, _mask
from flashio.simulator.trace import Op, Trace

__all__ = ["DagStats", "KernelDagStats", "dag_stats", "schedule_dag"]

LOAD, STORE, REDUCE, ALLOC, FREE, SHARED = (
    Op.LOAD,
    Op.STORE,
    Op.REDUCE,
    Op.ALLOC,
    Op.FREE,
    Op.SHARED,
)
COMPUTE = frozenset(int(o) for o in (Op.MMA, Op.ELEMENTWISE, Op.EXP, Op.SHARED, Op.SYNC))


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


# The example of docs/dag.md: `python -m flashio.analysis.dag.graph`
def doc_table() -> str:
    """docs/dag.md's example: every schedule's DAG at B = 1, H = 2, N = 8, d = 16, Br = Bc = 2,
    one warp, unit weights, with the trace validator's problem count on the H200."""
    from flashio import kernels, simulator
    from flashio.analysis.dag.trace_check import validate_trace

    gpu = simulator.load_gpu("h200")
    shape = kernels.AttentionShape(batch=1, heads=2, seq_len=8, head_dim=16)
    lines = ["| schedule | kernel | CTAs | events | work | span | parallelism | problems |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name in kernels.SCHEDULES:
        trace = kernels.schedule(name, shape, 2, 2, warps=1).trace()
        problems = len(validate_trace(trace, gpu))
        st = dag_stats(schedule_dag(trace))
        for k in (*st.kernels, None):
            label, row = ("all", st) if k is None else (k.name, k)
            ctas = sum(x.ctas for x in st.kernels) if k is None else k.ctas
            events = sum(x.events for x in st.kernels) if k is None else k.events
            lines.append(f"| {name} | {label} | {ctas} | {events} | {row.work} | {row.span} | "
                         f"{row.parallelism:.2f} | {problems if k is None else ''} |")  # fmt: skip
    return "\n".join(lines)


def _main() -> None:
    from flashio import kernels

    shape = kernels.AttentionShape(batch=1, heads=2, seq_len=8, head_dim=16)
    print(f"{shape}, block_q = block_kv = 2, 1 warp; validate_trace(trace, h200)")
    print(doc_table())
    print("\nweights='bytes' and 'flops', flash1 vs flash2 (same shape and blocks):")
    print(weighted_table())


def weighted_table() -> str:
    """docs/dag.md's second example: flash1 and flash2 of :func:`doc_table` weighted by bytes
    and by FLOPs."""
    from flashio import kernels

    shape = kernels.AttentionShape(batch=1, heads=2, seq_len=8, head_dim=16)
    lines = ["| schedule | weights | work | span | parallelism |", "|---|---|---|---|---|"]
    for name in ("flash1", "flash2"):
        g = schedule_dag(kernels.schedule(name, shape, 2, 2, warps=1).trace())
        for w in ("bytes", "flops"):
            st = dag_stats(g, w)
            lines.append(f"| {name} | {w} | {st.work:,} | {st.span:,} | {st.parallelism:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    _main()
