"""The schedule DAG, the trace validator, work/span statistics and exact red-blue pebbling.

Exact relations only: the DAG's work and span are integers under unit weights, derived below
from each schedule's documented event sequence, and pebbling optima are integers checked
against hand derivations and a plain Dijkstra over the unreduced game.
"""

import heapq
import itertools
import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from flashio import kernels, simulator
from flashio.analysis.dag import dag_stats, schedule_dag, validate_trace
from flashio.analysis.dag.pebbling import (
    PebbleDag,
    attention_dag,
    chain_dag,
    diamond_dag,
    flash_io,
    min_io,
    min_red,
    replay,
    tree_dag,
    trivial_lower_bound,
)
from flashio.simulator import EVENT_DTYPE, KernelInfo, Op, Space, TensorInfo, Trace, TraceMeta

H200 = simulator.load_gpu("h200")


@st.composite
def small_schedules(draw, name, *, causal=None, warps=(1, 2, 4)):
    """A small schedule; block sizes drawn as tile counts (failures shrink to few tiles)."""
    heads, kv = draw(st.sampled_from([(1, 1), (2, 2), (2, 1), (4, 2)]))
    n = draw(st.integers(1, 12))
    shape = kernels.AttentionShape(
        batch=draw(st.integers(1, 2)),
        heads=heads,
        seq_len=n,
        head_dim=draw(st.sampled_from([8, 16])),
        dtype=draw(st.sampled_from(["fp16", "fp32"])),
        causal=draw(st.booleans()) if causal is None else causal,
        kv_heads=kv,
    )
    bq = math.ceil(n / draw(st.integers(1, min(n, 4))))
    bkv = math.ceil(n / draw(st.integers(1, min(n, 4))))
    try:
        return kernels.schedule(name, shape, bq, bkv, warps=draw(st.sampled_from(warps)))
    except ValueError:
        assume(False)


# ------------------------------------------------------------------------------------ the DAG


@pytest.mark.parametrize("name", kernels.SCHEDULES)
@given(data=st.data())
def test_dag_is_a_forward_acyclic_graph_of_the_events(name, data):
    trace = data.draw(small_schedules(name)).trace()
    g = schedule_dag(trace)
    ops = trace.events["op"]
    data_events = {i for i in range(len(trace)) if ops[i] not in (Op.ALLOC, Op.FREE)}
    barriers = {("end", k) for k in range(len(trace.meta.kernels))}
    assert set(g.nodes) == data_events | barriers
    assert nx.is_directed_acyclic_graph(g)
    for u, v in g.edges:  # every dependence points forward in the trace
        if isinstance(u, int) and isinstance(v, int):
            assert u < v
    stats = dag_stats(g)
    # barriers serialise the kernels: the span is the sum of theirs; work adds up too
    assert stats.span == sum(k.span for k in stats.kernels)
    assert stats.work == len(data_events) == sum(k.events for k in stats.kernels)
    # the critical path is a path of the graph, and its weight is the span
    path = stats.critical_path
    assert all(g.has_edge(a, b) for a, b in itertools.pairwise(path))
    assert sum(1 for v in path if isinstance(v, int)) == stats.span


@given(sched=small_schedules("standard"))
def test_every_read_of_s_and_p_depends_on_the_store_that_wrote_it(sched):
    trace = sched.trace()
    g, ev = schedule_dag(trace), trace.events
    names = [t.name for t in trace.meta.tensors]
    for i in np.flatnonzero(ev["op"] == Op.LOAD):
        name = names[ev["tensor"][i]]
        raw = [u for u in g.predecessors(i) if g.edges[u, i]["kind"] == "raw"]
        if name in ("S", "P"):
            assert raw, f"LOAD {i} of {name} has no RAW edge"
            for u in raw:  # from a STORE of the same tensor in the kernel before
                assert ev["op"][u] == Op.STORE and names[ev["tensor"][u]] == name
                assert ev["kernel"][u] == ev["kernel"][i] - 1
        else:  # Q, K, V are inputs
            assert not raw


@given(sched=small_schedules("flash2_bwd"))
def test_atomic_adds_are_unordered_and_the_final_read_waits_for_all(sched):
    trace = sched.trace()
    g, ev = schedule_dag(trace), trace.events
    dq = trace.meta.tensor_index("dQ_acc")
    reduces = set(np.flatnonzero((ev["op"] == Op.REDUCE) & (ev["tensor"] == dq)).tolist())
    zeroing = set(np.flatnonzero((ev["op"] == Op.STORE) & (ev["tensor"] == dq)).tolist())
    for u, v in g.edges:
        assert not (u in reduces and v in reduces)
    for r in reduces:  # each atomic add needs the accumulator it adds into zeroed first
        assert any(g.edges[u, r]["kind"] == "waw" for u in g.predecessors(r) if u in zeroing)
    # a Q block's dQ_acc read depends on every atomic add into it (here: the same rows)
    for i in np.flatnonzero((ev["op"] == Op.LOAD) & (ev["tensor"] == dq)):
        rows = {ev["offset_bytes"][i]}
        feeding = {r for r in reduces if ev["offset_bytes"][r] in rows}
        assert feeding and feeding <= set(g.predecessors(i))


def fa2_expected(b, h, t_q, t_kv):
    """Unit-weight work and span of flash2 forward, non-causal (kernels/flash2.py).

    A CTA: LOAD Q_i; per K/V block: LOAD K_j, LOAD V_j, MMA, EW, EXP, MMA; then EW, EXP,
    STORE O_i, STORE L_i. Events: 6 Tc + 5. Longest chain: a load, the 4 Tc + 2 compute events
    (one chain: O_i, m_i, l_i carry over), a store: 4 Tc + 4. CTAs are independent.
    """
    return b * h * t_q * (6 * t_kv + 5), 4 * t_kv + 4


def fa1_expected(b, h, t_q, t_kv, warps):
    """Unit-weight work and span of flash1 forward, non-causal (kernels/flash1.py).

    A CTA: 3 STOREs (O_acc, l, m := 0, 0, -inf); per j: LOAD K_j, V_j; per (i, j): 4 LOADs (Q_i,
    O_acc_i, l_i, m_i), c compute events (MMA, EW, EXP, MMA, EW, and SHARED + SYNC when
    warps > 1), 3 STOREs. Span: the initial STORE, the LOAD of O_acc_0 that reads it, the chain
    of all c Tr Tc compute events, a STORE; with Tr = 1 the chain also detours through
    STORE O_acc_i -> LOAD O_acc_i between consecutive j (2 more per step).
    """
    c = 5 + 2 * (warps > 1)
    work = b * h * (3 + t_kv * (2 + (7 + c) * t_q))
    span = c * t_q * t_kv + 3 + (2 * (t_kv - 1) if t_q == 1 else 0)
    return work, span


@given(sched=small_schedules("flash2", causal=False))
def test_flash2_parallelism_grows_with_batch_heads_and_q_blocks(sched):
    sh = sched.shape
    stats = dag_stats(schedule_dag(sched.trace()))
    work, span = fa2_expected(sh.batch, sh.heads, sched.t_q, sched.t_kv)
    assert (stats.work, stats.span) == (work, span)
    # parallelism = B H Tr (6 Tc + 5) / (4 Tc + 4) > B H Tr
    assert stats.parallelism > sh.batch * sh.heads * sched.t_q


@given(sched=small_schedules("flash1", causal=False))
def test_flash1_parallelism_is_bounded_by_batch_times_heads(sched):
    sh = sched.shape
    stats = dag_stats(schedule_dag(sched.trace()))
    work, span = fa1_expected(sh.batch, sh.heads, sched.t_q, sched.t_kv, sched.warps)
    assert (stats.work, stats.span) == (work, span)
    # (3 + Tc (2 + (7 + c) Tr)) / (c Tr Tc + 3) < 3 for c in {5, 7}: no growth with Tr
    assert stats.parallelism < 3 * sh.batch * sh.heads


@given(
    b=st.integers(1, 2),
    h=st.integers(1, 3),
    t_q=st.integers(1, 4),
    block_q=st.integers(1, 4),
    block_kv=st.integers(1, 8),
    warps=st.sampled_from([1, 2, 4]),
)
def test_flops_parallelism_is_the_number_of_ctas(b, h, t_q, block_q, block_kv, warps):
    """Weighted by FLOPs, a CTA's compute is one chain, so work / span counts identical CTAs:
    B H Tr for flash2 (one CTA per Q block) and B H for flash1 (one CTA per head): the FA2
    paper's reason (Sec. 3.2) to parallelise over the sequence."""
    n = t_q * block_q  # whole Q blocks, so flash2's CTAs are identical
    shape = kernels.AttentionShape(b, h, n, 8)
    bkv = min(block_kv, n)
    graphs = {
        name: schedule_dag(kernels.schedule(name, shape, block_q, bkv, warps).trace())
        for name in ("flash1", "flash2")
    }
    fa1, fa2 = (dag_stats(graphs[name], "flops") for name in ("flash1", "flash2"))
    assert fa2.work == b * h * t_q * fa2.span
    assert fa1.work == b * h * fa1.span
    # the same two matmuls, 4 N^2 d per head, counted once in each DAG
    mma = [dag_stats(g, lambda a: a["flops"] if a["op"] == Op.MMA else 0) for g in graphs.values()]
    assert mma[0].work == mma[1].work == 4 * n * n * 8 * b * h
    assert mma[0].parallelism == b * h and mma[1].parallelism == b * h * t_q


def test_flash2_overtakes_flash1_as_q_blocks_grow():
    """The FA2 paper's reason to parallelise over the sequence, on one shape: 2 x 2 heads."""
    shape = kernels.AttentionShape(2, 2, 16, 16)
    for br in (16, 8, 4, 2):
        fa1 = dag_stats(schedule_dag(kernels.schedule("flash1", shape, br, 4, 1).trace()))
        fa2 = dag_stats(schedule_dag(kernels.schedule("flash2", shape, br, 4, 1).trace()))
        t_q = 16 // br
        assert fa2.parallelism == 4 * t_q * (6 * 4 + 5) / (4 * 4 + 4)
        assert fa1.parallelism < 3 * 4
    assert fa2.parallelism / fa1.parallelism > 8 * 29 / 20 / 3  # Tr = 8


@given(sched=small_schedules("flash2_bwd"))
def test_weights_bytes_and_flops_add_up_to_the_trace(sched):
    trace = sched.trace()
    g, ev = schedule_dag(trace), trace.events
    mem = np.isin(ev["op"], [Op.LOAD, Op.STORE, Op.REDUCE])
    comp = np.isin(ev["op"], [Op.MMA, Op.ELEMENTWISE, Op.EXP, Op.SHARED, Op.SYNC])
    assert dag_stats(g, "bytes").work == int(ev["bytes"][mem].sum())
    assert dag_stats(g, "flops").work == int(ev["flops"][comp].sum())
    by_fn = dag_stats(g, lambda a: a["bytes"] if a["op"] in (Op.LOAD, Op.STORE, Op.REDUCE) else 0)
    assert (by_fn.work, by_fn.span) == (dag_stats(g, "bytes").work, dag_stats(g, "bytes").span)
    # a LOAD that must wait for the compute before it never shortens the critical path
    assert dag_stats(schedule_dag(trace, prefetch=False)).span >= dag_stats(g).span
    with pytest.raises(ValueError, match="weights"):
        dag_stats(g, "seconds")


# ------------------------------------------------------------------------------ the validator


@pytest.mark.parametrize("name", kernels.SCHEDULES)
@given(data=st.data())
def test_validator_passes_every_schedule(name, data):
    sched = data.draw(small_schedules(name))
    assume(all(k.smem_bytes <= H200.smem_per_cta_bytes for k in sched.kernels))
    assert validate_trace(sched.trace(), H200) == []


S_META = (
    TensorInfo("Q", Space.GLOBAL, (4, 4), 2),
    TensorInfo("S", Space.GLOBAL, (4, 4), 2),
    TensorInfo("buf", Space.SHARED, (4, 4), 2),
    TensorInfo("acc", Space.REGISTERS, (4, 4), 4),
)
Q, S, BUF, ACC = range(4)
ALLOC_BUF = (Op.ALLOC, BUF, 0, 0, 0, 32)
FREE_BUF = (Op.FREE, BUF, 0, 0, 0, 32)


def hand_trace(ctas, smem_bytes=32):
    """``ctas``: per kernel, per CTA, events (op, tensor, offset, rows, row_bytes, bytes)."""
    rows, kinfos = [], []
    for k, kernel in enumerate(ctas):
        kinfos.append(KernelInfo(f"k{k}", len(kernel), 1, smem_bytes, 32))
        for c, events in enumerate(kernel):
            for op, t, off, nrows, rb, nb in events:
                rows.append((k, c, -1, op, t, -1, -1, off, nrows, rb, rb, nb, 0))
    ev = np.array(rows, dtype=EVENT_DTYPE)
    return Trace(ev, TraceMeta("hand", {}, tuple(kinfos), S_META))


def kinds(trace, gpu=None):
    return sorted(p.kind for p in validate_trace(trace, gpu))


def test_a_correct_hand_trace_passes():
    write_s = [ALLOC_BUF, (Op.LOAD, Q, 0, 1, 8, 8), (Op.MMA, -1, 0, 0, 0, 0)]
    write_s += [(Op.STORE, S, 0, 4, 8, 32), FREE_BUF]
    read_s = [ALLOC_BUF, (Op.LOAD, S, 8, 1, 8, 8), FREE_BUF]
    assert kinds(hand_trace([[write_s], [read_s, read_s]])) == []


def test_reading_s_before_it_is_written_is_caught():
    read_s = [ALLOC_BUF, (Op.LOAD, S, 8, 1, 8, 8), FREE_BUF]
    write_s = [ALLOC_BUF, (Op.STORE, S, 0, 4, 8, 32), FREE_BUF]
    problems = validate_trace(hand_trace([[read_s], [write_s]]))
    assert [(p.kind, p.tensor, p.event) for p in problems] == [("uninitialised_read", "S", 1)]
    # only the unwritten bytes count: rows 0..1 written, a read of rows 1..2 misses 8 bytes
    part = [ALLOC_BUF, (Op.STORE, S, 0, 2, 8, 16), (Op.LOAD, S, 8, 2, 8, 16), FREE_BUF]
    (p,) = validate_trace(hand_trace([[part]]))
    assert p.kind == "uninitialised_read" and "8 B" in p.message


def test_buffer_misuse_is_caught():
    assert kinds(hand_trace([[[ALLOC_BUF, FREE_BUF, FREE_BUF]]])) == ["double_free"]
    assert kinds(hand_trace([[[ALLOC_BUF]]])) == ["missing_free"]
    assert kinds(hand_trace([[[FREE_BUF]]])) == ["free_without_alloc"]
    assert kinds(hand_trace([[[ALLOC_BUF, ALLOC_BUF, FREE_BUF]]])) == ["double_alloc"]
    after = [ALLOC_BUF, FREE_BUF, (Op.LOAD, Q, 0, 1, 8, 8)]
    assert kinds(hand_trace([[after]])) == ["use_outside_buffers"]
    short = [ALLOC_BUF, (Op.FREE, BUF, 0, 0, 0, 16)]
    assert kinds(hand_trace([[short]])) == ["free_size_mismatch"]
    shared = [ALLOC_BUF, FREE_BUF, (Op.ALLOC, ACC, 0, 0, 0, 64), (Op.SHARED, BUF, 0, 0, 0, 8)]
    shared.append((Op.FREE, ACC, 0, 0, 0, 64))
    assert kinds(hand_trace([[shared]])) == ["use_not_live"]


def test_shared_memory_overflow_is_caught():
    over = [ALLOC_BUF, (Op.ALLOC, ACC, 0, 0, 0, 64), FREE_BUF, (Op.FREE, ACC, 0, 0, 0, 64)]
    assert kinds(hand_trace([[over]], smem_bytes=32)) == []  # registers do not count
    assert kinds(hand_trace([[over]], smem_bytes=16)) == ["smem_over_declared"]
    tiny = H200.replace(smem_per_cta_bytes=16)
    assert kinds(hand_trace([[over]], smem_bytes=32), tiny) == ["smem_over_gpu"]


def test_races_between_ctas_of_one_kernel_are_caught():
    store = [ALLOC_BUF, (Op.STORE, S, 0, 1, 8, 8), FREE_BUF]
    load = [ALLOC_BUF, (Op.LOAD, S, 0, 1, 8, 8), FREE_BUF]
    reduce = [ALLOC_BUF, (Op.REDUCE, S, 0, 1, 8, 8), FREE_BUF]
    assert kinds(hand_trace([[store, store]])) == ["race"]
    assert "race" in kinds(hand_trace([[store, load]]))
    # atomics commute, once S was initialised by an earlier kernel
    assert kinds(hand_trace([[store], [reduce, reduce]])) == []
    assert kinds(hand_trace([[reduce]])) == ["uninitialised_reduce"]


def test_region_outside_its_tensor_is_caught():
    assert kinds(hand_trace([[[ALLOC_BUF, (Op.LOAD, Q, 24, 2, 8, 16), FREE_BUF]]])) == [
        "out_of_bounds"
    ]


# ------------------------------------------------------------------------------ red-blue pebbling


def oracle_min_io(dag, red):
    """Dijkstra over the unreduced game: every load, store, compute and delete, any order."""
    n, inputs = len(dag.preds), sum(1 << v for v in dag.inputs)
    goal, pm = sum(1 << o for o in dag.outputs), [sum(1 << p for p in ps) for ps in dag.preds]
    best, heap = {(0, inputs): 0}, [(0, 0, inputs)]
    while heap:
        g, r, b = heapq.heappop(heap)
        if g > best[(r, b)]:
            continue
        if b & goal == goal:
            return g
        room = r.bit_count() < red
        for v in range(n):
            bit = 1 << v
            nxt = []
            if r & bit:
                nxt.append((0, r & ~bit, b))
                if not b & bit:
                    nxt.append((1, r, b | bit))
            elif room and b & bit:
                nxt.append((1, r | bit, b))
            if not r & bit and room and dag.preds[v] and pm[v] & r == pm[v]:
                nxt.append((0, r | bit, b))
            for cost, nr, nb in nxt:
                if g + cost < best.get((nr, nb), math.inf):
                    best[(nr, nb)] = g + cost
                    heapq.heappush(heap, (g + cost, nr, nb))
    raise AssertionError("no pebbling")


@st.composite
def small_dags(draw):
    n = draw(st.integers(3, 7))
    preds = [()]
    for v in range(1, n):
        k = draw(st.integers(0, min(3, v)))
        preds.append(tuple(sorted(draw(st.sets(st.integers(0, v - 1), min_size=k, max_size=k)))))
    used = {p for ps in preds for p in ps}
    outputs = {v for v in range(n) if preds[v] and v not in used}
    inner = [v for v in range(n) if preds[v] and v in used]
    if inner and draw(st.booleans()):  # an output that also feeds others
        outputs.add(draw(st.sampled_from(inner)))
    assume(outputs)
    return PebbleDag(tuple(f"v{v}" for v in range(n)), tuple(preds), tuple(sorted(outputs)))


@settings(max_examples=200)  # cheap (about 2 ms each), and the reductions are subtle
@given(dag=small_dags(), extra=st.integers(0, 3))
def test_min_io_equals_the_unreduced_search_on_random_dags(dag, extra):
    red = min_red(dag) + extra
    res = min_io(dag, red)
    assert res.io == oracle_min_io(dag, red)
    assert replay(dag, red, res.moves) == res.io == res.loads + res.stores
    assert trivial_lower_bound(dag) <= min_io(dag, red + 1).io <= res.io
    assert min_io(dag, len(dag.names)).io == trivial_lower_bound(dag)


@pytest.mark.parametrize(
    ("dag", "expected"),
    [
        # chain: load x0, compute along it, store the end: 2 for any M >= 2
        (chain_dag(5), {2: 2, 3: 2, 5: 2}),
        # diamond: load a, compute b, c (3 pebbles), delete a, compute d, store: 2
        (diamond_dag(), {3: 2, 4: 2}),
        # 4 leaves, M = 3: the left sum must be stored and reloaded to add the right: 5 + 2
        (tree_dag(4), {3: 7, 4: 5, 6: 5}),
        # 8 leaves: M = 3 spills each left child at levels 1, 1, 2 (3 x 2); M = 4 only the
        # level-2 left child (2); M = 5 nothing: 8 loads + 1 store
        (tree_dag(8), {3: 15, 4: 11, 5: 9}),
        # x = f(a), y = g(a, x, b) and z = h(a, x, b) (y an output), w = k(y, z), M = 4: load a,
        # b, compute x, y (store), evict y, compute z, reload y over an operand, compute w, store.
        # A search that never loads what it could recompute misses this (found by the oracle).
        (
            PebbleDag(
                ("a", "x", "b", "y", "z", "w"),
                ((), (0,), (), (0, 1, 2), (0, 1, 2), (3, 4)),
                (3, 5),
            ),
            {4: 5},
        ),
    ],
)
def test_min_io_on_hand_checked_dags(dag, expected):
    for red, io in expected.items():
        res = min_io(dag, red)
        assert res.io == io
        assert replay(dag, red, res.moves) == io


@pytest.mark.parametrize(("n", "d", "gran"), [(1, 1, "node"), (1, 2, "node"), (2, 1, "chain")])
def test_attention_optimum_is_monotone_and_reaches_the_trivial_bound(n, d, gran):
    dag = attention_dag(n, d, granularity=gran)
    trivial = trivial_lower_bound(dag)
    assert trivial == 4 * n * d  # Q, K, V read once, O written once
    prev = math.inf
    for red in range(min_red(dag), len(dag.names) + 1):
        res = min_io(dag, red)
        assert trivial <= res.io <= prev
        assert replay(dag, red, res.moves) == res.io
        prev = res.io
    assert prev == trivial  # with a pebble for every vertex nothing is moved twice


def test_attention_dag_has_the_documented_vertices_and_symmetries():
    for n, d in ((1, 1), (2, 3), (3, 2)):
        dag = attention_dag(n, d)  # Q K V, S, m, E, l, P, O
        assert len(dag.names) == 3 * n * d + 3 * n * n + 2 * n + n * d
        assert len(dag.symmetries) + 1 == math.factorial(n) ** 2 * math.factorial(d) ** 2
        assert min_red(dag) == 2 * max(n, d) + 1
    chain = attention_dag(2, 3, granularity="chain")
    assert min_red(chain) == 4 and len(chain.symmetries) + 1 == 2 * 6
    with pytest.raises(ValueError, match="automorphism"):
        PebbleDag(("a", "b", "c"), ((), (0,), (1,)), (2,), symmetries=((1, 0, 2),))
    with pytest.raises(ValueError, match="at least 5"):
        min_io(attention_dag(2, 2), 4)


def test_flash2_traffic_for_tiny_shapes():
    # 1 x 1 blocks: on-chip Q_i, K_j, V_j, O_i (d each), S_ij (1), m and l (2): 4d + 3
    fl = flash_io(2, 2, 11)
    assert (fl.block_q, fl.block_kv, fl.on_chip_elements) == (1, 1, 11)
    assert (fl.q, fl.k, fl.v, fl.o, fl.total) == (4, 8, 8, 4, 24)  # K, V read Tr = 2 times
    assert flash_io(2, 2, 10) is None
    assert flash_io(2, 2, 18).total == 16  # Br = N: everything once
