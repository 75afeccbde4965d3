"""Helpers shared by the tests: random inputs for a shape, register limits that spill."""

import numpy as np
from hypothesis import strategies as st

from flashio.kernels._numerics import to_dtype


def random_inputs(shape, seed=0, backward=False, scale=1.0):
    """q, k, v (and dO) for ``shape`` in its storage dtype, drawn from N(0, scale^2)."""
    rng = np.random.default_rng(seed)
    qs = (shape.batch, shape.heads, shape.seq_len, shape.head_dim)
    kvs = (shape.batch, shape.n_kv_heads, shape.n_kv, shape.head_dim)
    arrays = [
        rng.standard_normal(qs) * scale,
        rng.standard_normal(kvs) * scale,
        rng.standard_normal(kvs) * scale,
    ]
    if backward:
        arrays.append(rng.standard_normal(qs))
    return [to_dtype(a, shape.dtype) for a in arrays]


def register_limits(sched):
    """Registers per thread a GPU allows: the H200's 255, or a hypothetical GPU's, from 32
    (below the 40 every kernel's estimate holds outside its tiles, kernels/_resources.py) to
    just below the schedule's largest need: then its neediest kernel spills, others may."""
    need = max(k.regs_per_thread for k in sched.kernels)
    return st.integers(32, need - 1) | st.just(255)


def trace_traffic(sched):
    """Per global tensor of ``sched``: (bytes read, bytes written) as its trace moves them
    (LOAD; STORE and REDUCE): what the closed forms are checked against."""
    from flashio.simulator import Op, Space

    tr = sched.trace()
    loads, stores, reduces = (tr.bytes_by(op) for op in (Op.LOAD, Op.STORE, Op.REDUCE))
    names = [t.name for t in sched.tensors if t.space == Space.GLOBAL]
    return {n: (loads.get(n, 0), stores.get(n, 0) + reduces.get(n, 0)) for n in names}
