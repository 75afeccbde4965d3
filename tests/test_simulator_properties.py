"""Invariants of the fast simulator (conservation, monotonicity, determinism) and figures
worked out by hand."""

import os
import tempfile

import numpy as np
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from flashio import kernels, simulator
from flashio.simulator import Op, Space, Trace
from tests._sim_common import (  # noqa: F401
    FLOAT_FIELDS,
    H200,
    INT_FIELDS,
    KERNEL_INT_FIELDS,
    REL,
    _names,
    attention_schedules,
    gpu_specs,
    random_traces,
    spills,
)

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
    gpu = data.draw(gpu_specs(l2=("none",)))
    assume(not spills(trace, gpu))  # spill traffic is not in the trace's events
    r = simulator.simulate(trace, gpu)
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
    assume(not spills(trace, gpu))  # spill traffic is not in the trace's events
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
    assume(not spills(trace, gpu))  # spill traffic is not in the trace's events
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
    assert simulator.simulate(_OtherSource(trace), gpu, window_events=window) == want


class _OtherSource:
    """A TraceSource that is neither a Trace (replayed whole) nor a Schedule."""

    def __init__(self, trace: Trace):
        self.meta, self._trace = trace.meta, trace

    def cta_events(self, kernel: int, start: int, stop: int):
        return self._trace.cta_events(kernel, start, stop)


# ------------------------------------------------------------------------- sanity figures


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
