"""Exact red-blue pebbling (Hong & Kung 1981) of tiny DAGs, among them element-level attention.

The game on a DAG with M red pebbles (fast memory, in elements) and unlimited blue ones (slow
memory): inputs start blue; a move is ``load`` (red on a blue vertex, cost 1), ``store`` (blue
on a red vertex, cost 1), ``compute`` (red on a vertex all of whose predecessors are red, cost
0; recomputation allowed) or ``delete`` (remove a red pebble, cost 0); at most M red pebbles at
any time; the game ends when every output is blue. ``min_io`` finds the least number of loads +
stores by A* over pebble configurations (docs/dag.md gives the rules it uses to stay exact).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

__all__ = [
    "PebbleDag",
    "Pebbling",
    "attention_dag",
    "chain_dag",
    "diamond_dag",
    "min_io",
    "min_red",
    "replay",
    "tree_dag",
    "trivial_lower_bound",
]


@dataclass(frozen=True, slots=True)
class PebbleDag:
    """A computation DAG: vertex ``v`` has predecessors ``preds[v]``, all numbered below ``v``.

    Vertices without predecessors are the inputs (they start blue); ``outputs`` must end blue.
    """

    names: tuple[str, ...]
    preds: tuple[tuple[int, ...], ...]
    outputs: tuple[int, ...]

    def __post_init__(self):
        if len(self.names) != len(self.preds):
            raise ValueError(f"{len(self.names)} names for {len(self.preds)} vertices")
        for v, ps in enumerate(self.preds):
            if any(not 0 <= p < v for p in ps) or len(set(ps)) != len(ps):
                raise ValueError(
                    f"vertex {v} ({self.names[v]}) has predecessors {ps}: they must be distinct "
                    f"and numbered below {v} (vertices in topological order)"
                )
        if not self.outputs or len(set(self.outputs)) != len(self.outputs):
            raise ValueError(f"outputs {self.outputs} must be a non-empty set of vertices")
        for o in self.outputs:
            if not 0 <= o < len(self.preds) or not self.preds[o]:
                raise ValueError(f"output {o} must be a computed vertex (not an input)")

    @property
    def inputs(self) -> tuple[int, ...]:
        return tuple(v for v, ps in enumerate(self.preds) if not ps)


@dataclass(frozen=True, slots=True)
class Pebbling:
    """An optimal pebbling: ``io = loads + stores`` and the moves that achieve it."""

    red: int
    io: int
    loads: int
    stores: int
    moves: tuple[tuple[str, str], ...]  # (load|store|compute|delete, vertex name), in order
    states: int  # configurations expanded by the search


def chain_dag(length: int) -> PebbleDag:
    """x0 -> x1 -> ... -> x(length-1): one input, one output. Optimum 2 for any M >= 2."""
    if length < 2:
        raise ValueError(f"a chain needs length >= 2 (an input and an output), got {length}")
    return PebbleDag(
        tuple(f"x{i}" for i in range(length)),
        ((),) + tuple((i - 1,) for i in range(1, length)),
        (length - 1,),
    )


def tree_dag(leaves: int) -> PebbleDag:
    """A binary reduction tree over ``leaves`` inputs (pairs combined left to right)."""
    if leaves < 2:
        raise ValueError(f"a tree needs at least 2 leaves, got {leaves}")
    names, preds = [f"x{i}" for i in range(leaves)], [() for _ in range(leaves)]
    level = list(range(leaves))
    while len(level) > 1:
        nxt = []
        for a, b in itertools.zip_longest(level[::2], level[1::2]):
            if b is None:
                nxt.append(a)
                continue
            names.append(f"({names[a]}+{names[b]})")
            preds.append((a, b))
            nxt.append(len(preds) - 1)
        level = nxt
    return PebbleDag(tuple(names), tuple(preds), (level[0],))


def diamond_dag() -> PebbleDag:
    """a -> b, a -> c, (b, c) -> d: one input, one output, two paths."""
    return PebbleDag(("a", "b", "c", "d"), ((), (0,), (0,), (1, 2)), (3,))


def attention_dag(seq_len: int, head_dim: int, *, granularity: str = "node") -> PebbleDag:
    """Element-level DAG of O = softmax(Q K^T) V for one head (no scaling, no mask).

    Parameters
    ----------
    seq_len, head_dim : int
        N and d; inputs Q, K, V (N x d), outputs O (N x d).
    granularity : {"node", "chain"}
        ``node``: one vertex per value: S[i,j] (inputs Q[i,:], K[j,:]), m[i] = max_j S[i,j],
        E[i,j] = exp(S[i,j] - m[i]), l[i] = sum_j E[i,j], P[i,j] = E[i,j] / l[i],
        O[i,c] = sum_j P[i,j] V[j,c]. ``chain``: every reduction (the dot products of S and O,
        the max and the sum) is a left-to-right chain of two-operand steps (a multiply-add
        counts as one step with three operands), so at most 3 operands per vertex.

    Notes
    -----
    The 1/sqrt(d) scale is folded into S (a unary step changes no I/O). Saha & Ye (2024)
    pebble the same computation; their bound Omega(N^2 d^2 / M) is asymptotic, so these tiny
    instances only check the game and the search, not the constant.
    """
    if granularity not in ("node", "chain"):
        raise ValueError(f"granularity={granularity!r}; use 'node' or 'chain'")
    n, d = seq_len, head_dim
    if n < 1 or d < 1:
        raise ValueError(f"seq_len and head_dim must be >= 1, got {n} and {d}")
    names, preds = [], []

    def add(name, ps=()):
        names.append(name)
        preds.append(tuple(ps))
        return len(names) - 1

    def reduce(name, operands):
        """One vertex over all operand groups ("node"), or a left-to-right chain ("chain")."""
        flat = [p for ops in operands for p in ops]
        first = 2 if len(operands[0]) == 1 else 1  # max/sum start from two values, dot from q*k
        if granularity == "node" or len(operands) <= first:
            return add(name, flat)
        acc = add(f"{name}#{first - 1}", [p for ops in operands[:first] for p in ops])
        for t in range(first, len(operands)):
            acc = add(name if t == len(operands) - 1 else f"{name}#{t}", (acc, *operands[t]))
        return acc

    q = [[add(f"Q[{i},{t}]") for t in range(d)] for i in range(n)]
    k = [[add(f"K[{j},{t}]") for t in range(d)] for j in range(n)]
    v = [[add(f"V[{j},{c}]") for c in range(d)] for j in range(n)]
    s = [[reduce(f"S[{i},{j}]", [(q[i][t], k[j][t]) for t in range(d)]) for j in range(n)]
         for i in range(n)]  # fmt: skip
    outs = []
    for i in range(n):
        m = reduce(f"m[{i}]", [(s[i][j],) for j in range(n)])
        e = [add(f"E[{i},{j}]", (s[i][j], m)) for j in range(n)]
        l_ = reduce(f"l[{i}]", [(x,) for x in e])
        p = [add(f"P[{i},{j}]", (e[j], l_)) for j in range(n)]
        outs += [reduce(f"O[{i},{c}]", [(p[j], v[j][c]) for j in range(n)]) for c in range(d)]
    return PebbleDag(tuple(names), tuple(preds), tuple(outs))


def min_red(dag: PebbleDag) -> int:
    """The fewest red pebbles that can pebble ``dag``: its largest in-degree + 1."""
    return max(len(ps) for ps in dag.preds) + 1


def trivial_lower_bound(dag: PebbleDag) -> int:
    """Every input that feeds something is loaded once; every output is stored once."""
    used = {p for ps in dag.preds for p in ps}
    return sum(1 for v in dag.inputs if v in used) + len(dag.outputs)


class _Game:
    """Bitset view of a DAG for the search: vertex v is bit 1 << v."""

    def __init__(self, dag: PebbleDag):
        n = len(dag.preds)
        self.n, self.preds = n, dag.preds
        self.pmask = [sum(1 << p for p in ps) for ps in dag.preds]
        self.succs = [[] for _ in range(n)]
        for v, ps in enumerate(dag.preds):
            for p in ps:
                self.succs[p].append(v)
        self.inputs = sum(1 << v for v in dag.inputs)
        self.outputs = sum(1 << o for o in dag.outputs)
        self._dead: dict[int, int] = {}

    def dead(self, blue: int) -> int:
        """Vertices a red pebble can no longer help: stored outputs and whatever only feeds them
        (or feeds nothing and is not an output). Depends only on which outputs are blue."""
        key = blue & self.outputs
        if key not in self._dead:
            dead = 0
            for v in reversed(range(self.n)):
                if (not self.outputs >> v & 1 or key >> v & 1) and all(
                    dead >> s & 1 for s in self.succs[v]
                ):
                    dead |= 1 << v
            self._dead[key] = dead
        return self._dead[key]

    def h(self, red: int, blue: int) -> int:
        """Admissible and consistent lower bound on the I/O still to pay (docs/dag.md): one
        store per output not yet blue, one load per input that a pending output needs through
        vertices holding no pebble (such an input cannot be recomputed)."""
        need = self.outputs & ~blue
        cost, seen, stack = need.bit_count(), need, [v for v in range(self.n) if need >> v & 1]
        while stack:
            for p in self.preds[stack.pop()]:
                if (seen | red) >> p & 1:
                    continue
                seen |= 1 << p
                if self.inputs >> p & 1:
                    cost += 1
                elif not blue >> p & 1:  # a blue vertex may be reloaded: count nothing
                    stack.append(p)
        return cost

    def moves(self, red: int, blue: int, m: int):
        """(cost, kind, vertex, evicted or -1, stored-before-evicting, red', blue') from a
        canonical configuration, under the reductions of ``min_io``'s Notes."""
        full, dead = red.bit_count() >= m, self.dead(blue)
        computable = [
            v
            for v in range(self.n)
            if not (red | dead | self.inputs) >> v & 1 and self.pmask[v] & red == self.pmask[v]
        ]
        if not full and computable:  # a free compute into a free pebble loses nothing
            computable = computable[:1]
        for v, kind in [(v, "compute") for v in computable] + [
            (v, "load")
            for v in range(self.n)
            if blue >> v & 1 and not (red | dead) >> v & 1 and v not in computable
        ]:
            b = 1 << v
            cost, nblue = (0 if kind == "compute" else 1), blue
            if self.outputs & b:  # an output is stored as soon as it is red (it must be once)
                cost, nblue = cost + 1, blue | b
            if not full:
                yield cost, kind, v, -1, False, (red | b) & ~self.dead(nblue), nblue
                continue
            rest = red & ~(self.pmask[v] if kind == "compute" else 0)
            while rest:  # evict only when fast memory is full (deleting later is never worse)
                r = rest & -rest
                rest ^= r
                for spill in (False, True) if not nblue & r else (False,):
                    nb = nblue | r if spill else nblue
                    nr = (red & ~r | b) & ~self.dead(nb)
                    yield cost + spill, kind, v, r.bit_length() - 1, spill, nr, nb


def min_io(dag: PebbleDag, red: int, *, max_states: int = 2_000_000) -> Pebbling:
    """Least I/O (loads + stores) of the red-blue pebble game on ``dag`` with ``red`` pebbles.

    Parameters
    ----------
    dag : PebbleDag
    red : int
        M, the number of red pebbles (fast memory in elements); at least ``min_red(dag)``.
    max_states : int
        Give up (ValueError) after expanding this many configurations.

    Returns
    -------
    Pebbling
        The optimum and one optimal sequence of moves (checked by ``replay`` in the tests).

    Notes
    -----
    Hong & Kung (1981), with recomputation. A* over configurations (red set, blue set) with
    0/1 move costs and the consistent heuristic ``_Game.h``, so the first time the goal is
    popped its cost is optimal. Three reductions keep the search exact (docs/dag.md): a red
    pebble is deleted only when a new one needs its place; an output is stored when computed;
    pebbles on dead vertices are deleted at once.
    """
    lo = min_red(dag)
    if isinstance(red, bool) or not isinstance(red, int) or red < lo:
        raise ValueError(f"red={red!r}: this DAG needs at least {lo} red pebbles (in-degree + 1)")
    game = _Game(dag)
    start = (0, game.inputs)
    best, parent = {start: 0}, {start: None}
    tie = itertools.count()
    heap = [(game.h(*start), 0, next(tie), start)]
    expanded = 0
    while heap:
        _, neg_g, _, state = heapq.heappop(heap)
        g = -neg_g  # ties on f go to the deepest configuration first
        if g > best[state]:
            continue
        if state[1] & game.outputs == game.outputs:
            return _result(dag, red, g, state, parent, expanded)
        expanded += 1
        if expanded > max_states:
            raise ValueError(
                f"min_io gave up after {max_states:,} configurations (M={red}, "
                f"{len(dag.preds)} vertices); use a smaller DAG or raise max_states"
            )
        for cost, kind, v, r, spill, nred, nblue in game.moves(*state, red):
            nxt, ng = (nred, nblue), g + cost
            if ng < best.get(nxt, ng + 1):
                best[nxt], parent[nxt] = ng, (state, kind, v, r, spill)
                heapq.heappush(heap, (ng + game.h(nred, nblue), -ng, next(tie), nxt))
    raise AssertionError("unreachable: every DAG can be pebbled with min_red pebbles")


def _result(dag, red, io, state, parent, expanded) -> Pebbling:
    """Rebuild the move list, with every deletion written out, from the parent links."""
    steps = []
    while parent[state] is not None:
        prev, kind, v, r, spill = parent[state]
        steps.append((prev, kind, v, r, spill, state))
        state = prev
    moves, nm = [], dag.names
    for (pred_red, _), kind, v, r, spill, (nred, _) in reversed(steps):
        if spill:
            moves.append(("store", nm[r]))
        if r >= 0:
            moves.append(("delete", nm[r]))
        moves.append((kind, nm[v]))
        if v in dag.outputs:
            moves.append(("store", nm[v]))
        after = (pred_red & ~(1 << r if r >= 0 else 0)) | 1 << v
        moves += [("delete", nm[u]) for u in range(len(nm)) if (after & ~nred) >> u & 1]
    loads = sum(1 for kind, _ in moves if kind == "load")
    stores = sum(1 for kind, _ in moves if kind == "store")
    assert loads + stores == io, "move list disagrees with the search's cost"
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
