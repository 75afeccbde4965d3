"""The fast simulator against its plain-Python oracle (tests/oracle_sim.py), its invariants, and
figures worked out by hand.

Tolerances. Bytes, FLOP counts and peaks must agree exactly. Times are compared to a relative
1e-9: the oracle applies docs/model.md's formulas (max(t, free) + w / R, ...) to the same
events in the same order, so the two are normally bit-identical; an algebraically equal rewrite
(w / (R * f) as w / R / f, busy seconds summed per SM before the mean) costs a few ulps per
operation, and over the at most ~1e4 operations of these traces that stays below 1e4 * 2**-53
~ 1e-12. One cycle of any latency (~5e-10 s) on runs of ~1e-6..1e-4 s is >= 5e-6 relative, so
1e-9 still catches every modelling difference.
"""

import importlib
import math
import os
import tempfile

import numpy as np
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

import kernels
import simulator
from simulator import EVENT_DTYPE, KernelInfo, Op, Space, TensorInfo, Trace, TraceMeta
from tests.oracle_sim import simulate_oracle

H200 = simulator.load_gpu("h200")
REL = 1e-9  # see the module docstring
FLOAT_FIELDS = ("time_s", "cycles")
INT_FIELDS = (
    "global_read_bytes",
    "global_write_bytes",
    "hbm_read_bytes",
    "hbm_write_bytes",
    "l2_dirty_bytes_at_end",
    "sram_peak_bytes",
    "mma_flops",
    "elementwise_flops",
    "exps",
    "shared_exchange_bytes",
)
KERNEL_INT_FIELDS = (
    "name",
    "waves",
    "smem_peak_bytes",
    "reg_tile_peak_bytes",
    "global_read_bytes",
    "global_write_bytes",
    "hbm_read_bytes",
    "hbm_write_bytes",
)


def _available(name: str) -> bool:
    try:  # standard and flash1 may still be under construction
        importlib.import_module(f"kernels.{name}")
    except ImportError:
        return False
    return True


def _names(names=kernels.SCHEDULES):
    skip = pytest.mark.skip(reason="schedule module not importable yet")
    return [pytest.param(n, marks=() if _available(n) else skip) for n in names]


# ------------------------------------------------------------------------------- strategies


@st.composite
def attention_schedules(draw, name, *, max_seq_len=40, max_tiles=5, dtypes=tuple(kernels.DTYPES)):
    """A small schedule; block sizes drawn as tile counts so failures shrink to few tiles."""
    heads, kv = draw(st.sampled_from([(1, 1), (2, 2), (2, 1), (4, 2), (4, 1)]))
    n = draw(st.integers(1, max_seq_len))
    shape = kernels.AttentionShape(
        batch=draw(st.integers(1, 2)),
        heads=heads,
        seq_len=n,
        head_dim=draw(st.sampled_from([16, 32, 64])),
        dtype=draw(st.sampled_from(dtypes)),
        causal=draw(st.booleans()),
        kv_heads=kv,
    )
    bq = math.ceil(n / draw(st.integers(1, min(n, max_tiles))))
    bkv = math.ceil(n / draw(st.integers(1, min(n, max_tiles))))
    warps = draw(st.sampled_from([1, 2, 4, 8]))
    try:
        return kernels.schedule(name, shape, block_q=bq, block_kv=bkv, warps=warps)
    except ValueError:  # a combination the schedule rejects
        assume(False)


@st.composite
def gpu_specs(draw, *, l2=("none", "tiny", "large")):
    """An H200 with few SMs and an L2 of none, a few granules (evictions), or plenty."""
    line = draw(st.sampled_from([64, 128, 256]))
    kind = draw(st.sampled_from(l2))
    granules = {"none": 0, "tiny": draw(st.integers(1, 6)), "large": 4096}[kind]
    spare_lines = draw(st.integers(0, 63)) if granules else 0  # not a whole granule: unused
    return H200.replace(
        sm_count=draw(st.integers(1, 4)),
        max_ctas_per_sm=draw(st.integers(1, 4)),
        l2_line_bytes=line,
        l2_bytes=(granules * 64 + spare_lines) * line,
        l2_latency_cycles=draw(st.sampled_from([1, 260])),
    )


@st.composite
def random_traces(draw):
    """Traces no schedule makes: unaligned, overlapping and strided regions, REDUCE everywhere,
    several kernels sharing the L2."""
    dtype = draw(st.sampled_from(tuple(kernels.DTYPES)))
    tensors = (
        TensorInfo("A", Space.GLOBAL, (40_000,), 1),
        TensorInfo("B", Space.GLOBAL, (9_000,), 1),
        TensorInfo("C", Space.GLOBAL, (300,), 1),
        TensorInfo("tile", Space.SHARED, (64,), 4),
        TensorInfo("acc", Space.REGISTERS, (32,), 4),
    )
    kinfos, rows = [], []
    for k in range(draw(st.integers(1, 3))):
        ctas = draw(st.integers(1, 6))
        kinfos.append(KernelInfo(f"k{k}", ctas, draw(st.integers(1, 8)), 256, 32))
        for c in range(ctas):
            rows += [
                (k, c, Op.ALLOC, 3, 0, 1, 0, 0, 256, 0),
                (k, c, Op.ALLOC, 4, 0, 1, 0, 0, 128, 0),
            ]
            for _ in range(draw(st.integers(0, 10))):
                op = draw(st.sampled_from(list(Op)[:8]))
                if op in (Op.LOAD, Op.STORE, Op.REDUCE):
                    t = draw(st.integers(0, 2))
                    n, rb = draw(st.integers(1, 4)), draw(st.integers(1, 70))
                    span = tensors[t].size_bytes - rb  # room for the region's start
                    gap = draw(st.integers(0, max(0, span // max(1, n - 1) - rb)))
                    stride = draw(st.sampled_from([rb, rb + gap, rb // 2]))  # overlap too
                    off = draw(st.integers(0, span - (n - 1) * stride))
                    rows.append((k, c, op, t, off, n, rb, stride, n * rb, 0))
                else:
                    w = draw(st.integers(1, 10**7))
                    nb, fl = (w, 0) if op == Op.SHARED else (0, w)
                    rows.append((k, c, op, -1 if op == Op.SYNC else 0, 0, 1, 0, 0, nb, fl))
            rows += [
                (k, c, Op.FREE, 4, 0, 1, 0, 0, 128, 0),
                (k, c, Op.FREE, 3, 0, 1, 0, 0, 256, 0),
            ]
    ev = np.zeros(len(rows), EVENT_DTYPE)
    for i, (k, c, op, t, off, n, rb, stride, nb, fl) in enumerate(rows):
        ev[i] = (k, c, -1, op, t, -1, -1, off, n, rb, stride, nb, fl)
    return Trace(ev, TraceMeta("random", {"dtype": dtype}, tuple(kinfos), tensors))


# --------------------------------------------------------------------- oracle agreement


def assert_agrees(r: simulator.SimResult, o: dict) -> None:
    """Bytes and counts exactly, times to REL (module docstring)."""
    for f in INT_FIELDS:
        assert getattr(r, f) == o[f], f
    for f in FLOAT_FIELDS:
        assert getattr(r, f) == pytest.approx(o[f], rel=REL), f
    got = {
        t.name: (t.global_read_bytes, t.global_write_bytes, t.hbm_read_bytes, t.hbm_write_bytes)
        for t in r.tensors
    }
    assert got == o["tensors"]
    assert len(r.kernels) == len(o["kernels"])
    for kr, ko in zip(r.kernels, o["kernels"], strict=True):
        for f in KERNEL_INT_FIELDS:
            assert getattr(kr, f) == ko[f], (kr.name, f)
        for f in ("start_s", "time_s"):
            assert getattr(kr, f) == pytest.approx(ko[f], rel=REL), (kr.name, f)
    for part in ("breakdown", "utilization"):
        assert getattr(r, part).keys() == o[part].keys()
        for key, value in o[part].items():
            assert getattr(r, part)[key] == pytest.approx(value, rel=REL, abs=1e-300), key


def _check_against_oracle(trace: Trace, gpu: simulator.GPUSpec) -> None:
    try:
        want = simulate_oracle(trace, gpu)
    except simulator.CapacityError:
        with pytest.raises(simulator.CapacityError):
            simulator.simulate(trace, gpu)
        return
    assert_agrees(simulator.simulate(trace, gpu), want)


@pytest.mark.parametrize("name", _names())
@given(data=st.data())
def test_schedules_agree_with_oracle(name, data):
    sched = data.draw(attention_schedules(name))
    trace = sched.trace()
    assume(len(trace) <= 6000)
    _check_against_oracle(trace, data.draw(gpu_specs()))


@given(trace=random_traces(), gpu=gpu_specs())
def test_random_traces_agree_with_oracle(trace, gpu):
    _check_against_oracle(trace, gpu)


def _one_cta_trace(events, tensors, warps=1, smem_bytes=0):
    ev = np.zeros(len(events), EVENT_DTYPE)
    for i, (op, t, off, rows, rb, stride, nb, fl) in enumerate(events):
        ev[i] = (0, 0, -1, op, t, -1, -1, off, rows, rb, stride, nb, fl)
    kinfo = KernelInfo("k", 1, warps, smem_bytes, 32)
    return Trace(ev, TraceMeta("hand", {"dtype": "fp16"}, (kinfo,), tensors))


def test_timing_worked_by_hand():
    """LOAD -> MMA -> STORE on one SM without L2, each step of docs/model.md written out."""
    gpu = H200.replace(sm_count=1, l2_bytes=0)
    tensors = (TensorInfo("X", Space.GLOBAL, (4096,), 1),)
    w = 3_000_000
    trace = _one_cta_trace(
        [
            (Op.LOAD, 0, 0, 1, 1000, 1000, 1000, 0),
            (Op.MMA, 0, 0, 0, 0, 0, 0, w),
            (Op.STORE, 0, 0, 1, 500, 500, 500, 0),
        ],
        tensors,
        warps=2,
    )
    hbm_rate = 4.8e12 * 0.896
    hbm_lat, mma_rate = 560 / 1.98e9, 989e12
    start = 4e-6  # one launch
    ready = start + 1000 / hbm_rate + hbm_lat  # the load misses to HBM
    t = ready + w / (mma_rate * 0.5)  # 2 warps of 4 sub-partitions: half the tensor pipe
    store_done = max(t, start + 1000 / hbm_rate) + 500 / hbm_rate + hbm_lat
    r = simulator.simulate(trace, gpu)
    assert r.time_s == pytest.approx(store_done, rel=1e-12)
    assert r.breakdown["tensor_busy_s"] == pytest.approx(w / mma_rate, rel=1e-12)
    assert r.breakdown["hbm_busy_s"] == pytest.approx(1500 / hbm_rate, rel=1e-12)
    assert (r.hbm_read_bytes, r.hbm_write_bytes) == (1000, 500)
    assert_agrees(r, simulate_oracle(trace, gpu))


def test_l2_worked_by_hand():
    """One 8 KiB granule of 64 lines of 128 B: write-back on eviction, partial-line misses."""
    gpu = H200.replace(l2_bytes=8192, l2_line_bytes=128)
    tensors = (
        TensorInfo("A", Space.GLOBAL, (16384,), 1),
        TensorInfo("B", Space.GLOBAL, (16384,), 1),
    )
    trace = _one_cta_trace(
        [
            (Op.STORE, 0, 0, 1, 8192, 8192, 8192, 0),  # A granule 0: all 64 lines dirty
            (Op.LOAD, 0, 100, 1, 200, 200, 200, 0),  # hit
            (Op.LOAD, 1, 0, 1, 200, 200, 200, 0),  # evicts A (8192 B back), misses 200 B
            (Op.LOAD, 1, 64, 1, 192, 192, 192, 0),  # lines 0, 1 present: hit
            # lines 62, 63 miss 64 + 128 B; granule 1 evicts B's granule 0 (2 dirty lines);
            # line 64 misses 108 B and stays dirty to the end
            (Op.REDUCE, 1, 8000, 1, 300, 300, 300, 0),
        ],
        tensors,
    )
    r = simulator.simulate(trace, gpu)
    assert (r.global_read_bytes, r.global_write_bytes) == (592, 8492)
    assert (r.hbm_read_bytes, r.hbm_write_bytes, r.l2_dirty_bytes_at_end) == (500, 8448, 128)
    assert r.tensor("A") == simulator.TensorTraffic("A", 200, 8192, 0, 8192)
    assert r.tensor("B") == simulator.TensorTraffic("B", 392, 300, 500, 256)
    assert_agrees(r, simulate_oracle(trace, gpu))


def test_an_empty_region_touches_no_line():
    """docs/model.md: an access walks the granules the range [start, end) overlaps; an empty
    range overlaps none. No schedule emits one (rows >= 1, row_bytes >= 1)."""
    gpu = H200.replace(l2_bytes=8192)
    tensors = (TensorInfo("A", Space.GLOBAL, (1024,), 1),)
    trace = _one_cta_trace([(Op.STORE, 0, 300, 1, 0, 0, 0, 0)], tensors)
    assert simulate_oracle(trace, gpu)["l2_dirty_bytes_at_end"] == 0
    assert simulator.simulate(trace, gpu).l2_dirty_bytes_at_end == 0  # the engine says 128


def test_live_shared_memory_above_declared_is_rejected():
    tensors = (TensorInfo("X", Space.GLOBAL, (64,), 1), TensorInfo("T", Space.SHARED, (96,), 1))
    trace = _one_cta_trace(
        [(Op.ALLOC, 1, 0, 1, 0, 0, 96, 0), (Op.FREE, 1, 0, 1, 0, 0, 96, 0)], tensors, smem_bytes=64
    )
    for run in (simulator.simulate, simulate_oracle):
        with pytest.raises(simulator.CapacityError):
            run(trace, H200)


# ------------------------------------------------------------ invariants of the fast simulator


def _trace_bytes(trace: Trace, ops) -> dict[str, int]:
    out: dict[str, int] = {}
    for op in ops:
        for name, b in trace.bytes_by(op).items():
            out[name] = out.get(name, 0) + b
    return out


def _first_touches(trace: Trace, line: int):
    """For each memory event, {(tensor, line index): bytes of the first row (in order) that
    touches the line}: the bytes a miss on that line would count (docs/model.md, L2)."""
    ev = trace.events
    for i in np.flatnonzero(np.isin(ev["op"], (Op.LOAD, Op.STORE, Op.REDUCE))):
        e = ev[i]
        rb, stride = int(e["row_bytes"]), int(e["row_stride_bytes"])
        n = 1 if e["rows"] == 1 or rb == stride else int(e["rows"])
        rb = rb * int(e["rows"]) if n == 1 else rb  # one contiguous range
        touched: dict[tuple[int, int], int] = {}
        for r in range(n):
            a = int(e["offset_bytes"]) + r * stride
            for ln in range(a // line, (a + rb - 1) // line + 1):
                key = (int(e["tensor"]), ln)
                if key not in touched:
                    touched[key] = min(a + rb, (ln + 1) * line) - max(a, ln * line)
        yield int(e["kernel"]), int(e["op"]), touched


def _write_line_touches(trace: Trace, line: int) -> tuple[int, int]:
    """Distinct lines written (STORE/REDUCE), and (write event, line) pairs."""
    lines, pairs = set(), 0
    for _, op, touched in _first_touches(trace, line):
        if op != Op.LOAD:
            lines |= touched.keys()
            pairs += len(touched)
    return len(lines), pairs


@pytest.mark.parametrize("name", _names())
@given(data=st.data())
def test_without_l2_every_global_byte_is_an_hbm_byte(name, data):
    trace = data.draw(attention_schedules(name)).trace()
    r = simulator.simulate(trace, data.draw(gpu_specs(l2=("none",))))
    reads, writes = trace.bytes_by(Op.LOAD), _trace_bytes(trace, (Op.STORE, Op.REDUCE))
    for t in r.tensors:
        assert t.global_read_bytes == t.hbm_read_bytes == reads.get(t.name, 0)
        assert t.global_write_bytes == t.hbm_write_bytes == writes.get(t.name, 0)
    for k in r.kernels:
        assert (k.hbm_read_bytes, k.hbm_write_bytes) == (k.global_read_bytes, k.global_write_bytes)
    assert (r.hbm_read_bytes, r.hbm_write_bytes) == (r.global_read_bytes, r.global_write_bytes)
    assert r.l2_dirty_bytes_at_end == 0


@pytest.mark.parametrize("name", _names())
@given(data=st.data())
def test_l2_accounts_for_every_dirtied_line(name, data):
    """Every dirtied line is written back or still dirty at the end (each dirty spell starts
    with a write touching the line); HBM reads never exceed the bytes requested."""
    trace = data.draw(attention_schedules(name)).trace()
    gpu = data.draw(gpu_specs(l2=("tiny", "large")))
    r = simulator.simulate(trace, gpu)
    line = gpu.l2_line_bytes
    reads = _trace_bytes(trace, (Op.LOAD,))
    writes = _trace_bytes(trace, (Op.STORE, Op.REDUCE))
    read_or_reduce = _trace_bytes(trace, (Op.LOAD, Op.REDUCE))
    for t in r.tensors:
        assert (t.global_read_bytes, t.global_write_bytes) == (
            reads.get(t.name, 0),
            writes.get(t.name, 0),
        )
        assert t.hbm_read_bytes <= read_or_reduce.get(t.name, 0)  # a miss is a requested byte
        assert t.hbm_write_bytes % line == 0  # write-back moves whole dirty lines
    for f in ("global_read_bytes", "global_write_bytes", "hbm_read_bytes", "hbm_write_bytes"):
        assert (
            getattr(r, f)
            == sum(getattr(t, f) for t in r.tensors)
            == sum(getattr(k, f) for k in r.kernels)
        )
    distinct, pairs = _write_line_touches(trace, line)
    dirtied = r.hbm_write_bytes + r.l2_dirty_bytes_at_end
    assert dirtied % line == 0
    assert line * distinct <= dirtied <= line * pairs
    assert r.l2_dirty_bytes_at_end <= gpu.l2_bytes // (64 * line) * 64 * line  # whole granules


@pytest.mark.parametrize("name", _names())
@given(data=st.data())
def test_l2_holding_everything_reads_each_line_once(name, data):
    """No eviction: nothing is written back, every written line is dirty at the end, and HBM
    reads are the compulsory misses: per line, the first toucher's bytes if it reads."""
    trace = data.draw(attention_schedules(name)).trace()
    gpu = data.draw(gpu_specs(l2=("large",)))
    line, granule = gpu.l2_line_bytes, 64 * gpu.l2_line_bytes
    first_kernel: dict[tuple[int, int], int] = {}
    touches: dict[tuple[int, int], list[tuple[int, int]]] = {}  # line -> (op, bytes), 1st kernel
    for k, op, touched in _first_touches(trace, line):
        for key, nbytes in touched.items():
            if first_kernel.setdefault(key, k) == k:
                touches.setdefault(key, []).append((op, nbytes))
    assume(len({(t, ln * line // granule) for t, ln in touches}) <= gpu.l2_bytes // granule)
    r = simulator.simulate(trace, gpu)
    assert r.hbm_write_bytes == 0
    assert r.l2_dirty_bytes_at_end == line * _write_line_touches(trace, line)[0]
    # which touch of a line comes first within its first kernel depends on timing: bound it
    low = sum(
        min(b for _, b in ts) for ts in touches.values() if all(o != Op.STORE for o, _ in ts)
    )
    high = sum(max((b for o, b in ts if o != Op.STORE), default=0) for ts in touches.values())
    assert low <= r.hbm_read_bytes <= high


@pytest.mark.parametrize("name", _names())
@given(data=st.data())
def test_more_shared_memory_never_breaks_a_tiling(name, data):
    n = data.draw(st.integers(16, 256))
    shape = kernels.AttentionShape(
        1,
        1,
        n,
        data.draw(st.sampled_from([32, 64, 128, 256])),
        data.draw(st.sampled_from(["fp16", "fp32"])),
    )
    blocks = st.sampled_from([b for b in (16, 32, 64, 128) if b <= n])
    try:
        sched = kernels.schedule(name, shape, data.draw(blocks), data.draw(blocks), 4)
    except ValueError:
        assume(False)
    per_sm = data.draw(st.integers(16 * 1024, H200.smem_per_sm_bytes // 2))
    gpu = H200.replace(
        smem_per_sm_bytes=per_sm,
        smem_per_cta_bytes=data.draw(st.integers(8 * 1024, per_sm)),
        sm_count=8,
    )
    bigger = gpu.replace(
        smem_per_sm_bytes=2 * per_sm, smem_per_cta_bytes=2 * gpu.smem_per_cta_bytes
    )
    try:
        small = simulator.simulate(sched, gpu)
    except simulator.CapacityError:
        return
    big = simulator.simulate(sched, bigger)
    for a, b in zip(small.kernels, big.kernels, strict=True):
        assert b.occupancy.ctas_per_sm >= a.occupancy.ctas_per_sm


@pytest.mark.parametrize("name", _names())
def test_capacity_error_names_bytes_and_tiles(name):
    sched = kernels.schedule(name, kernels.AttentionShape(1, 2, 128, 64, "fp16"), 64, 64, 4)
    need = max(k.smem_bytes for k in sched.kernels)
    gpu = H200.replace(smem_per_cta_bytes=need - 1)
    with pytest.raises(simulator.CapacityError) as err:
        simulator.simulate(sched, gpu)
    msg = str(err.value)
    assert f"{need:,} B" in msg and f"{need - 1:,} B" in msg
    for t in sched.tensors:
        if t.space == Space.SHARED:
            assert t.name in msg


@pytest.mark.parametrize(
    "name",
    _names(("standard", "standard_bwd", "flash2", "flash2_bwd")),
)
@given(
    heads=st.sampled_from([4, 8]),
    n=st.sampled_from([128, 192, 256]),
    d=st.sampled_from([16, 32]),
    block=st.sampled_from([32, 64]),
    sms=st.integers(2, 16),
    hbm=st.sampled_from([1e11, 2e11, 4e11]),
)
# Cases that once ran slower with faster HBM, when a CTA still waiting for its operands could
# book an SM pipe ahead of CTAs whose operands had arrived (flash2: 3.219 us -> 3.711 us).
@example(heads=8, n=192, d=16, block=32, sms=11, hbm=4e11)
@example(heads=8, n=192, d=16, block=32, sms=15, hbm=4e11)
def test_more_hbm_bandwidth_never_slows_a_memory_bound_schedule(
    name, heads, n, d, block, sms, hbm
):
    sched = kernels.schedule(name, kernels.AttentionShape(1, heads, n, d, "fp16"), block, block)
    gpu = H200.replace(
        l2_bytes=0, sm_count=sms, kernel_launch_s=1e-9, hbm_bandwidth_bytes_per_s=hbm
    )
    r = simulator.simulate(sched, gpu)
    assume(r.bound == "memory")
    faster = gpu.replace(hbm_bandwidth_bytes_per_s=2 * hbm)
    assert simulator.simulate(sched, faster).time_s <= r.time_s


@pytest.mark.parametrize("name", _names())
@given(data=st.data())
def test_every_way_of_feeding_a_trace_gives_the_same_result(name, data):
    """Deterministic; Schedule == its Trace == the Trace after .npz == small windows."""
    sched = data.draw(attention_schedules(name))
    gpu = data.draw(gpu_specs())
    trace = sched.trace()
    want = simulator.simulate(trace, gpu)
    assert simulator.simulate(trace, gpu) == want
    assert simulator.simulate(sched, gpu) == want
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.npz")
        trace.save(path)
        assert simulator.simulate(Trace.load(path), gpu) == want
    window = data.draw(st.integers(1, 60))
    assert simulator.simulate(sched, gpu, window_events=window) == want
    assert simulator.simulate(trace, gpu, window_events=window) == want


# ------------------------------------------------------------------------- sanity figures


@pytest.mark.skipif(not _available("flash2"), reason="flash2 not importable")
def test_flash2_forward_reads_q_once_and_kv_once_per_q_block():
    """DESIGN.md: FA2 forward at N=4096, d=64, 16 heads, Br=Bc=128 read 545.3 MB on an H200,
    Q + 32 (K + V) (Tr = 32 Q blocks)."""
    n, d, heads = 4096, 64, 16
    sched = kernels.schedule("flash2", kernels.AttentionShape(1, heads, n, d, "fp16"), 128, 128)
    one = heads * n * d * 2  # bytes of Q (or K, V, O)
    reads = one + 32 * 2 * one
    assert reads == 545_259_520  # the 545.3 MB measured
    writes = one + heads * n * 4  # O, and the fp32 logsumexp
    r = simulator.simulate(sched, "h200")
    assert (r.global_read_bytes, r.global_write_bytes) == (reads, writes)
    r0 = simulator.simulate(sched, H200.replace(l2_bytes=0))
    assert (r0.hbm_read_bytes, r0.hbm_write_bytes) == (reads, writes)
    # Q, K, V, O, L (33.8 MB, 128-byte rows) fit the 60 MiB L2: each input line is read from HBM
    # once, and the outputs are still dirty in L2 when the kernel ends
    assert (r.hbm_read_bytes, r.hbm_write_bytes, r.l2_dirty_bytes_at_end) == (3 * one, 0, writes)
