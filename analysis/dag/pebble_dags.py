"""The DAGs the red-blue pebble game (``analysis.dag.pebbling``) is played on: a validated
DAG type, small textbook DAGs and element-level attention with its symmetries."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

__all__ = ["PebbleDag", "attention_dag", "chain_dag", "diamond_dag", "tree_dag"]


@dataclass(frozen=True, slots=True)
class PebbleDag:
    """A computation DAG: vertex ``v`` has predecessors ``preds[v]``, all numbered below ``v``.

    Vertices without predecessors are the inputs (they start blue); ``outputs`` must end blue.
    ``symmetries`` are automorphisms (``perm[v]`` is the image of ``v``; checked) that the search
    uses to merge configurations that are images of each other; any subset of the automorphism
    group is correct, the whole group merges the most.
    """

    names: tuple[str, ...]
    preds: tuple[tuple[int, ...], ...]
    outputs: tuple[int, ...]
    symmetries: tuple[tuple[int, ...], ...] = ()

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
        n, outs = len(self.preds), set(self.outputs)
        for perm in self.symmetries:
            ok = sorted(perm) == list(range(n)) and {perm[o] for o in outs} == outs
            if not ok or any(
                {perm[p] for p in ps} != set(self.preds[perm[v]])
                for v, ps in enumerate(self.preds)
            ):
                raise ValueError(f"symmetry {perm} is not an automorphism of the DAG")

    @property
    def inputs(self) -> tuple[int, ...]:
        return tuple(v for v, ps in enumerate(self.preds) if not ps)


def chain_dag(length: int) -> PebbleDag:
    """x0 -> x1 -> ... -> x(length-1): one input, one output. Optimum 2 for any M >= 2."""
    if length < 2:
        raise ValueError(f"a chain needs length >= 2 (an input and an output), got {length}")
    return PebbleDag(
        tuple(f"x{i}" for i in range(length)),
        ((), *((i - 1,) for i in range(1, length))),
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
    return PebbleDag(
        tuple(names), tuple(preds), tuple(outs), _symmetries(names, n, d, granularity)
    )


def _symmetries(names, n, d, granularity) -> tuple[tuple[int, ...], ...]:
    """Automorphisms of ``attention_dag``: permute query rows i and output columns c; with
    ``node`` granularity also keys j (rows of K and V) and the dot-product index t (a chain
    fixes the order in which j and t are summed)."""
    roles = {"Q": "it", "K": "jt", "V": "jc", "S": "ij", "m": "i", "E": "ij", "l": "i"}
    roles |= {"P": "ij", "O": "ic"}
    index = {name: v for v, name in enumerate(names)}
    ident = tuple(range(n))
    js = itertools.permutations(range(n)) if granularity == "node" else [ident]
    ts = itertools.permutations(range(d)) if granularity == "node" else [tuple(range(d))]
    out = []
    for pi, pj, pt, pc in itertools.product(
        itertools.permutations(range(n)), list(js), list(ts), itertools.permutations(range(d))
    ):
        image = {"i": pi, "j": pj, "t": pt, "c": pc}
        perm = []
        for name in names:
            base, _, step = name.partition("#")
            head, args = base[0], base[2:-1].split(",")
            moved = ",".join(str(image[r][int(a)]) for r, a in zip(roles[head], args, strict=True))
            perm.append(index[f"{head}[{moved}]" + (f"#{step}" if step else "")])
        if perm != list(range(len(names))):
            out.append(tuple(perm))
    return tuple(out)
