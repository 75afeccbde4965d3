"""Exact red-blue pebbling (Hong & Kung 1981) of tiny DAGs, among them element-level attention.

The game on a DAG with M red pebbles (fast memory, in elements) and unlimited blue ones (slow
memory): inputs start blue; a move is ``load`` (red on a blue vertex, cost 1), ``store`` (blue
on a red vertex, cost 1), ``compute`` (red on a vertex all of whose predecessors are red, cost
0; recomputation allowed) or ``delete`` (remove a red pebble, cost 0); at most M red pebbles at
any time; the game ends when every output is blue. ``min_io`` finds the least number of loads +
stores by A* over pebble configurations (docs/dag.md gives the rules it uses to stay exact).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from flashio.analysis.dag.pebble_dags import (
    PebbleDag,
    attention_dag,
    chain_dag,
    diamond_dag,
    tree_dag,
)
from flashio.analysis.dag.pebble_search import _COMPUTE, MAX_VERTICES, _byte_tables, _search

__all__ = [
    "FlashIO",
    "PebbleDag",
    "Pebbling",
    "PebblingRow",
    "attention_dag",
    "chain_dag",
    "diamond_dag",
    "flash_io",
    "min_io",
    "min_red",
    "pebbling_table",
    "replay",
    "tree_dag",
    "trivial_lower_bound",
]


@dataclass(frozen=True, slots=True)
class Pebbling:
    """An optimal pebbling: ``io = loads + stores`` and the moves that achieve it."""

    red: int
    io: int
    loads: int
    stores: int
    moves: tuple[tuple[str, str], ...]  # (load|store|compute|delete, vertex name), in order
    states: int  # configurations expanded by the search


def min_red(dag: PebbleDag) -> int:
    """The fewest red pebbles that can pebble ``dag``: its largest in-degree + 1."""
    return max(len(ps) for ps in dag.preds) + 1


def trivial_lower_bound(dag: PebbleDag) -> int:
    """Every input that feeds something is loaded once; every output is stored once."""
    used = {p for ps in dag.preds for p in ps}
    return sum(1 for v in dag.inputs if v in used) + len(dag.outputs)


def min_io(dag: PebbleDag, red: int, *, max_states: int = 2_000_000) -> Pebbling:
    """Least I/O (loads + stores) of the red-blue pebble game on ``dag`` with ``red`` pebbles.

    Parameters
    ----------
    dag : PebbleDag
        At most 62 vertices.
    red : int
        M, the number of red pebbles (fast memory in elements); at least ``min_red(dag)``.
    max_states : int
        Give up (ValueError) after expanding this many configurations.

    Returns
    -------
    Pebbling
        The optimum and one optimal sequence of moves (the tests replay it with ``replay``).

    Notes
    -----
    Hong & Kung (1981), recomputation allowed. A* over configurations (red set, blue set) with
    0/1 move costs and a consistent heuristic, so the first goal popped is optimal. Reductions
    that keep it exact (docs/dag.md): a pebble is deleted only when a new one needs its place,
    and an intermediate is stored only just before its pebble is deleted; an output is stored
    when computed; pebbles on dead vertices are deleted at once; when a pebble is free and
    some vertex can be computed, computing it is the only move tried (the configuration with
    one more red pebble dominates).
    """
    lo = min_red(dag)
    if isinstance(red, bool) or not isinstance(red, int) or red < lo:
        raise ValueError(f"red={red!r}: this DAG needs at least {lo} red pebbles (in-degree + 1)")
    n = len(dag.preds)
    if n > MAX_VERTICES:
        raise ValueError(f"{n} vertices; min_io takes at most {MAX_VERTICES} (int64 bitsets)")
    pmask = np.array([sum(1 << p for p in ps) for ps in dag.preds], np.int64)
    succ = np.zeros(n, np.int64)
    for v, ps in enumerate(dag.preds):
        for p in ps:
            succ[p] |= 1 << v
    inputs = sum(1 << v for v in dag.inputs)
    outputs = sum(1 << o for o in dag.outputs)
    perms = np.array(dag.symmetries, np.int64).reshape(len(dag.symmetries), n)
    tables = _byte_tables(perms)
    io, expanded, rows = _search(pmask, inputs, outputs, succ, red, max_states, tables)
    if io < 0:
        raise ValueError(
            f"min_io gave up after {max_states:,} configurations (M={red}, {n} vertices); "
            "use a smaller DAG or raise max_states"
        )
    return _result(dag, red, io, rows, expanded)


def _result(dag, red, io, rows, expanded) -> Pebbling:
    """The move list, every deletion written out, from the search's path.

    The search stores each configuration as its least symmetric image, so the path's moves are
    in shifting frames; ``sigma`` maps the current frame's vertices to the real ones.
    """
    n = len(dag.names)
    sigma, moves = list(range(n)), []

    def name(u):
        return dag.names[sigma[u]]

    for kind, v, r, spill, pred_red, pred_blue, raw, p in rows.tolist():
        if spill:
            moves.append(("store", name(r)))
        if r >= 0:
            moves.append(("delete", name(r)))
        moves.append(("compute" if kind == _COMPUTE else "load", name(v)))
        if v in dag.outputs and not (pred_blue >> v) & 1:
            moves.append(("store", name(v)))
        after = (pred_red & ~(1 << r if r >= 0 else 0)) | 1 << v
        moves += [("delete", name(u)) for u in range(n) if (after & ~raw) >> u & 1]
        if p >= 0:  # the next configuration is pi(this frame's): sigma <- sigma o pi^-1
            inverse = [0] * n
            for u, w in enumerate(dag.symmetries[p]):
                inverse[w] = u
            sigma = [sigma[inverse[u]] for u in range(n)]
    loads = sum(1 for kind, _ in moves if kind == "load")
    stores = sum(1 for kind, _ in moves if kind == "store")
    if loads + stores != io:
        raise AssertionError(f"move list costs {loads + stores}, the search said {io}")
    return Pebbling(red, io, loads, stores, tuple(moves), expanded)


def replay(dag: PebbleDag, red: int, moves) -> int:
    """Play ``moves`` by the rules and return their I/O; ValueError on an illegal move or if
    an output is left without a blue pebble. An independent check of ``min_io``'s answer."""
    index = {name: v for v, name in enumerate(dag.names)}
    reds, blues, io = set(), set(dag.inputs), 0
    for step, (kind, name) in enumerate(moves):
        v = index[name]
        ok = {
            "load": v in blues and v not in reds,
            "store": v in reds and v not in blues,
            "compute": bool(dag.preds[v]) and v not in reds and set(dag.preds[v]) <= reds,
            "delete": v in reds,
        }[kind]
        if not ok:
            raise ValueError(f"move {step} ({kind} {name}) breaks the rules")
        io += kind in ("load", "store")
        if kind in ("load", "compute"):
            reds.add(v)
        elif kind == "store":
            blues.add(v)
        else:
            reds.discard(v)
        if len(reds) > red:
            raise ValueError(f"move {step} ({kind} {name}) puts {len(reds)} > {red} red pebbles")
    if missing := [dag.names[o] for o in dag.outputs if o not in blues]:
        raise ValueError(f"outputs {missing} end without a blue pebble")
    return io


# ------------------------------------------------------------------ comparison with FlashAttention


@dataclass(frozen=True, slots=True)
class FlashIO:
    """Elements a flash2 trace moves for one head, with blocks whose on-chip tiles fit M."""

    block_q: int
    block_kv: int
    on_chip_elements: int  # every on-chip tile of the schedule: Q_i, K_j, V_j, O_i, S_ij, m, l
    q: int
    k: int
    v: int
    o: int
    lse: int  # the logsumexp flash2 also writes (not an output of the pebbling DAG)

    @property
    def total(self) -> int:
        """Q + K + V reads and O writes: the pebbling DAG's inputs and outputs."""
        return self.q + self.k + self.v + self.o


def flash_io(seq_len: int, head_dim: int, red: int) -> FlashIO | None:
    """The least Q/K/V/O traffic (elements) of flash2 with on-chip tiles of at most ``red``
    elements, over all block sizes; None when even 1 x 1 blocks do not fit.

    Notes
    -----
    Counts come from ``kernels.schedule("flash2", ...).trace()`` (batch = heads = 1, fp32, so
    bytes / 4 = elements): Q read once, K and V read Tr times, O written once (Dao 2023, Alg. 1).
    """
    # imported here, so that the pebble game itself does not need the schedules
    from flashio import kernels
    from flashio.simulator.trace import Op, Space

    shape = kernels.AttentionShape(1, 1, seq_len, head_dim, dtype="fp32")
    best = None
    for bq, bkv in itertools.product(range(1, seq_len + 1), repeat=2):
        sched = kernels.schedule("flash2", shape, block_q=bq, block_kv=bkv, warps=1)
        tiles = sum(
            int(np.prod(t.shape)) for t in sched.tensors if t.space != Space.GLOBAL
        )  # fmt: skip
        if tiles > red:
            continue
        trace, eb = sched.trace(), shape.elem_bytes
        rd, wr = trace.bytes_by(Op.LOAD), trace.bytes_by(Op.STORE)
        row = FlashIO(
            bq, bkv, tiles, rd["Q"] // eb, rd["K"] // eb, rd["V"] // eb, wr["O"] // eb,
            wr["L"] // shape.acc_bytes,
        )  # fmt: skip
        if best is None or (row.total, tiles) < (best.total, best.on_chip_elements):
            best = row  # the least traffic, then the smallest tiles
    return best


@dataclass(frozen=True, slots=True)
class PebblingRow:
    """One line of the pebbling table (``io`` is None when the search gave up)."""

    seq_len: int
    head_dim: int
    granularity: str
    vertices: int
    red: int
    io: int | None
    states: int
    trivial: int
    flash: FlashIO | None


def pebbling_table(cases, *, max_states: int = 300_000) -> list[PebblingRow]:
    """Rows for ``cases`` = iterable of (seq_len, head_dim, granularity, red values)."""
    rows = []
    for n, d, gran, reds in cases:
        dag = attention_dag(n, d, granularity=gran)
        for m in reds:
            try:
                res = min_io(dag, m, max_states=max_states)
                io, states = res.io, res.states
            except ValueError:
                io, states = None, max_states
            rows.append(
                PebblingRow(
                    n, d, gran, len(dag.names), m, io, states, trivial_lower_bound(dag),
                    flash_io(n, d, m),
                )
            )  # fmt: skip
    return rows


# The table of docs/dag.md:
#   python -m flashio.analysis.dag.pebbling [--max-states N] [N,d,DAG,M0-M1 ...]
DOC_CASES = (
    (1, 1, "node", range(3, 8)),
    (1, 2, "node", range(5, 12)),
    (1, 3, "node", range(7, 16)),
    (2, 1, "node", range(5, 9)),
    (2, 1, "chain", range(4, 8)),
    (3, 1, "node", range(10, 13)),
    (2, 2, "node", range(7, 19)),
    (2, 2, "chain", range(7, 12)),
)


def _main(argv=None) -> None:
    import argparse
    import time

    ap = argparse.ArgumentParser(description="Exact red-blue pebbling of tiny attention DAGs.")
    ap.add_argument("--max-states", type=int, default=300_000)
    ap.add_argument("cases", nargs="*", help="N,d,node|chain,M0-M1 (default: docs/dag.md's)")
    args = ap.parse_args(argv)
    cases = DOC_CASES
    if args.cases:
        cases = []
        for c in args.cases:
            n, d, gran, ms = c.split(",")
            lo, _, hi = ms.partition("-")
            cases.append((int(n), int(d), gran, range(int(lo), int(hi or lo) + 1)))
    print("| N | d | DAG | vertices | M | optimum I/O | trivial bound | flash2 I/O (Br, Bc) "
          "| states (most) | seconds (most) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    group = []  # consecutive M with the same figures share a row

    def flush():
        if group:
            r, lo, hi = group[0][0], group[0][0].red, group[-1][0].red
            ms = str(lo) if lo == hi else f"{lo}-{hi}"
            opt = f"> {r.states:,} states" if r.io is None else str(r.io)
            states = f"{max(x.states for x, _ in group):,}" if r.io is not None else "-"
            fl = "no block fits" if r.flash is None else (
                f"{r.flash.total} ({r.flash.block_q}, {r.flash.block_kv})"
            )  # fmt: skip
            secs = max(s for _, s in group)
            print(f"| {r.seq_len} | {r.head_dim} | {r.granularity} | {r.vertices} | {ms} | "
                  f"{opt} | {r.trivial} | {fl} | {states} | {secs:.1f} |")  # fmt: skip
        group.clear()

    for n, d, gran, reds in cases:
        for m in reds:
            t0 = time.perf_counter()
            (row,) = pebbling_table([(n, d, gran, [m])], max_states=args.max_states)
            sec = time.perf_counter() - t0
            if group:
                prev = group[-1][0]
                key = (prev.seq_len, prev.head_dim, prev.granularity, prev.io, prev.flash)
                if key != (row.seq_len, row.head_dim, row.granularity, row.io, row.flash):
                    flush()
            group.append((row, sec))
        flush()


if __name__ == "__main__":
    _main()
