"""A componentwise bound on the rounding error of the executors, for any summation order.

The flash-attention rule compares an executor with the dense reference in the same precision;
this bound instead says how far an executor can be from the exact result, given where it rounds.
It is the standard first-order analysis (Higham, *Accuracy and Stability of Numerical
Algorithms*, 2nd ed., Sec. 3.1-3.5): a dot product of length k accumulated in unit roundoff u_a
in *any* order is off by at most gamma_k |x|.|y| with gamma_k = k u_a / (1 - k u_a); rounding x
to the storage dtype costs u |x| + eta (eta: half the smallest subnormal). The bounds are
propagated through attention with absolute values in float64 (sums of non-negative terms, so
their own rounding is ~1e-16 relative), so the BLAS kernel and the CPU cannot change them.

Where the schedules round (docs/numerics.md): every schedule rounds P before P V and dV = P^T dO,
dS before dQ and dK, and its outputs; standard attention also stores S, P, dP in the dtype and
forms D = rowsum(P * dP); the flash backward passes form D = rowsum(dO * O) from the stored O
and rebuild P in the accumulator type; flash1 writes O back after every K/V block.

Budgets beyond the dot products: numpy's float32 exp is within 2.52 ulp (its SIMD docs), taken
as 6 u_a; the softmax's max, sum, rescale per K/V block and division as gamma_(n + 4 T + 4). The
bound is first order; the terms it drops are products of relative errors. While the largest
relative error of P (plus u) is at most eps = 0.2 (the large-logit test reaches 0.14), a product
of such factors is off its first-order part by at most (e^eps - 1) / eps = 1.107 each, and three
in a chain (P, dS, an output) by 1.357: SECOND_ORDER = 1.4 covers that, and ``rounding_bound``
refuses inputs where eps is larger.
"""

from __future__ import annotations

import numpy as np

from flashio.kernels._numerics import unit_roundoff

SECOND_ORDER = 1.4
MAX_RELATIVE = 0.2
_HALF_SUBNORMAL = {"fp16": 2.0**-25, "bf16": 2.0**-134, "fp32": 2.0**-150, "fp64": 0.0}
_EXP_ULPS = 6


def _gamma(k, ua):
    return k * ua / (1 - k * ua)


def _expand(x, heads):
    return np.repeat(x, heads // x.shape[1], axis=1)


def _group_sum(x, kv_heads):
    b, h, n, d = x.shape
    return x.reshape(b, kv_heads, h // kv_heads, n, d).sum(axis=2)


def _t(x):
    return np.swapaxes(x, -1, -2)


def rounding_bound(sched, arrays):
    """Bounds on |computed - exact| for each output of ``sched`` (O; or dQ, dK, dV), elementwise.

    ``arrays`` are the executor's inputs (q, k, v[, dO]) in the storage dtype; exact is the
    float64 result on those same values.
    """
    sh = sched.shape
    dt, n, d, scale = sh.dtype, sh.seq_len, sh.head_dim, sh.scale
    u, eta = unit_roundoff(dt), _HALF_SUBNORMAL[dt]
    ua = unit_roundoff("fp64" if dt == "fp64" else "fp32")
    family = sched.name.removesuffix("_bwd")
    q, k, v = (np.asarray(x, np.float64) for x in arrays[:3])
    k, v = _expand(k, sh.heads), _expand(v, sh.heads)
    live = np.ones((n, n), bool) if not sh.causal else np.tril(np.ones((n, n), bool))

    # scores: d products and the scale; standard attention stores S in the dtype
    s = q @ _t(k) * scale
    d_s = _gamma(d + 2, ua) * (np.abs(q) @ _t(np.abs(k))) * scale
    if family == "standard":
        d_s += u * np.abs(s) + eta
    s = np.where(live, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    e = np.exp(s - m)
    lsum = e.sum(axis=-1, keepdims=True)
    p = e / lsum
    lse = m + np.log(lsum)
    # relative error of P in the accumulator type: its own scores, the row's normalisation
    # (the worst score error of the row and the softmax's own arithmetic), and log l
    sigma = np.where(live, d_s, 0).max(axis=-1, keepdims=True)
    sigma = sigma + _gamma(n + 4 * sched.t_kv + 4, ua) + _EXP_ULPS * ua + 2 * ua * np.abs(lse)
    rel_p = np.where(live, d_s, 0) + sigma
    if rel_p.max() + u > MAX_RELATIVE:
        raise ValueError(f"relative error of P up to {rel_p.max():.3f}: beyond first order")
    d_p = p * rel_p  # P in the accumulator type
    d_p_rounded = d_p + u * p + eta * live  # P rounded to the dtype

    abs_v = np.abs(v)
    o = p @ v
    d_o = d_p_rounded @ abs_v + _gamma(n + 2 * sched.t_kv, ua) * (p @ abs_v)
    if family == "flash1":  # O stored after each of the T_kv steps; |O_t| <= max_j |V_j|
        d_o += sched.t_kv * (u * abs_v.max(axis=-2, keepdims=True) + eta)
    else:
        d_o += u * np.abs(o) + eta
    if not sched.name.endswith("_bwd"):
        return (SECOND_ORDER * d_o,)

    do = np.asarray(arrays[3], np.float64)
    abs_do = np.abs(do)
    dp = do @ _t(v)
    d_dp = _gamma(d, ua) * (abs_do @ _t(abs_v))
    dd = (do * o).sum(axis=-1, keepdims=True)
    if family == "standard":  # dP stored in the dtype; D = rowsum(P * dP) from the stored tiles
        d_dp += u * np.abs(dp) + eta
        d_d = (d_p_rounded * np.abs(dp) + p * d_dp).sum(axis=-1, keepdims=True)
        d_d += _gamma(n, ua) * (p * np.abs(dp)).sum(axis=-1, keepdims=True)
        d_p_ds = d_p_rounded
    else:  # D = rowsum(dO * O) from the stored O; P rebuilt in the accumulator type
        d_d = (abs_do * d_o).sum(axis=-1, keepdims=True)
        d_d += _gamma(d, ua) * (abs_do * np.abs(o)).sum(axis=-1, keepdims=True)
        d_p_ds = d_p
    x = dp - dd
    d_x = d_dp + d_d + ua * (np.abs(dp) + np.abs(dd))
    ds = p * x
    d_ds = d_p_ds * np.abs(x) + p * d_x + 3 * ua * np.abs(ds)
    d_ds = np.where(live, d_ds + u * np.abs(ds) + eta / scale, 0)  # dS rounded (masked: 0)

    abs_ds = np.abs(ds)
    dq = scale * (ds @ k)
    d_dq = scale * (d_ds @ np.abs(k) + _gamma(n + 1, ua) * (abs_ds @ np.abs(k)))
    kv, g = sh.n_kv_heads, sh.group
    dk = _group_sum(scale * (_t(ds) @ q), kv)
    d_dk = _group_sum(
        scale * (_t(d_ds) @ np.abs(q) + _gamma(g * n + 1, ua) * (_t(abs_ds) @ np.abs(q))), kv
    )
    dv = _group_sum(_t(p) @ do, kv)
    d_dv = _group_sum(_t(d_p_rounded) @ abs_do + _gamma(g * n, ua) * (_t(p) @ abs_do), kv)
    return tuple(
        SECOND_ORDER * (err + u * np.abs(val) + eta)
        for err, val in ((d_dq, dq), (d_dk, dk), (d_dv, dv))
    )
