"""Shared pieces of the simulator tests: hypothesis strategies and comparison fields."""

import math

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from flashio import kernels, simulator
from flashio.simulator import EVENT_DTYPE, KernelInfo, Op, Space, TensorInfo, Trace, TraceMeta
from flashio.simulator.gpu import BULK_FIELDS

H200 = simulator.load_gpu("h200")
BULK_H200 = {f: getattr(H200, f) for f in BULK_FIELDS}
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


def _names(names=kernels.SCHEDULES):
    return list(names)


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
    """An H200 with few SMs and an L2 of none, a few granules (evictions), or plenty; its SMs
    send reductions at their memory path's rate (0: not measured) or slower, bulk copies as
    plain requests or as the H200's, and its block scheduler hands a slot its next CTA at once
    or after the H200's turnaround."""
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
        sm_reduce_bytes_per_cycle_per_sm=draw(st.sampled_from([0.0, 2.5, 18.6])),
        # bulk copies not measured (0: priced as plain requests), or as the H200's
        **draw(st.sampled_from([dict.fromkeys(BULK_FIELDS, 0), BULK_H200])),
        cta_turnaround_s=draw(st.sampled_from([0.0, H200.cta_turnaround_s])),
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
    kinfos, rows, bulk, persistent, static = [], [], {}, [], []
    for k in range(draw(st.integers(1, 3))):
        ctas = draw(st.integers(1, 6))
        kinfos.append(KernelInfo(f"k{k}", ctas, draw(st.integers(1, 8)), 256, 32))
        # the global tensors this kernel moves by bulk copies, if any
        bulk[f"k{k}"] = draw(st.lists(st.sampled_from(["A", "B", "C"]), unique=True))
        if draw(st.booleans()):  # run by a persistent grid: no turnaround between its CTAs
            persistent.append(f"k{k}")
            if draw(st.booleans()):  # whose tile scheduler is static: slot s takes s + slots
                static.append(f"k{k}")
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
    params = {
        "dtype": dtype,
        "bulk_copies": bulk,
        "persistent_kernels": persistent,
        "static_tile_kernels": static,
    }
    return Trace(ev, TraceMeta("random", params, tuple(kinfos), tensors))


def spills(trace, gpu) -> bool:
    """Whether a kernel of ``trace`` needs more registers than ``gpu`` allows: the simulator
    then adds register-spill traffic that the trace's own events do not show."""
    return any(simulator.occupancy(k, gpu).spilled_regs_per_thread for k in trace.meta.kernels)
