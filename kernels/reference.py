"""Dense float64 (or same-precision) references for attention forward and backward.

These are the seeds' formulas written densely: S = QK^T/sqrt(d), m_i = max_j S_ij,
l_i = sum_j exp(S_ij - m_i), P = exp(S - m)/l, O = PV; backward D_i = rowsum(dO_i * O_i),
dV = P^T dO, dP = dO V^T, dS = P * (dP - D), dQ = dS K / sqrt(d), dK = dS^T Q / sqrt(d).
"""

from __future__ import annotations

import numpy as np

from flashio.kernels._numerics import to_dtype

__all__ = ["attention_backward", "attention_forward"]


def _expand_kv(x: np.ndarray, heads: int) -> np.ndarray:
    return np.repeat(x, heads // x.shape[1], axis=1)


def _allowed(n_q: int, n_k: int, causal: bool, mask) -> np.ndarray | None:
    """(n_q, n_k) booleans of the pairs that count, or None for all of them."""
    if mask is not None:
        if hasattr(mask, "seq_len"):  # an AttentionShape: its kernels.mask
            from flashio.kernels.mask import allowed

            return allowed(mask, 0, mask.seq_len, 0, mask.n_kv)
        return np.asarray(mask, bool)
    if causal:  # queries aligned to the end of the keys, as kernels.mask
        return np.tril(np.ones((n_q, n_k), bool), k=n_k - n_q)
    return None


def attention_forward(q, k, v, causal=False, dtype=None, mask=None):
    """O, plus the softmax statistics (m, l) and P.

    ``dtype=None`` computes everything in float64. ``dtype="fp16"`` etc. mimics standard
    attention in that precision: S and P are rounded to the dtype when written (as a framework's
    standard attention stores them), products accumulate in fp32, O is rounded at the end.
    ``mask``: an ``AttentionShape`` (its window, segments, kv_seq_len and causal flag, as
    ``kernels.mask``) or a boolean (n_q, n_k) array of the pairs that count; it replaces
    ``causal``. A query that sees no key gets O = 0, P = 0, m = -inf and l = 0.
    """
    acc = np.float64 if dtype in (None, "fp64") else np.float32
    q, k, v = (np.asarray(x, acc) for x in (q, k, v))
    k, v = _expand_kv(k, q.shape[1]), _expand_kv(v, q.shape[1])
    s = (q @ np.swapaxes(k, -1, -2)) * acc(1.0 / np.sqrt(q.shape[-1]))
    if dtype is not None:
        s = to_dtype(s, dtype).astype(acc)
    keep = _allowed(q.shape[2], k.shape[2], causal, mask)
    if keep is not None:
        s = np.where(keep, s, -np.inf)
    m = s.max(axis=-1)
    e = np.exp(s - np.where(np.isneginf(m), 0, m)[..., None])
    l = e.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where(l[..., None] > 0, e / l[..., None], 0)
    if dtype is not None:
        p = to_dtype(p, dtype).astype(acc)
    o = p @ v
    if dtype is not None:
        o = to_dtype(o, dtype)
    return o, m, l, p


def attention_backward(q, k, v, grad_out, causal=False, dtype=None, mask=None):
    """(dQ, dK, dV) of attention, densely. K/V gradients are summed over the query heads that
    share a key/value head (grouped-query attention).

    ``dtype=None`` computes in float64 with D = rowsum(dO * O). ``dtype="fp16"`` etc. is
    standard attention's backward in that precision, as autograd runs it over the forward
    above (the reference flash-attention's own tests hold their kernels to): dP = dO V^T and
    dS stored in the dtype, D = rowsum(P * dP) from the stored P and dP, products accumulated
    in fp32, dQ, dK, dV rounded at the end. ``mask`` as in :func:`attention_forward`.
    """
    acc = np.float64 if dtype in (None, "fp64") else np.float32
    o, _, _, p = attention_forward(q, k, v, causal, dtype, mask)
    q, k, v, do = (np.asarray(x, acc) for x in (q, k, v, grad_out))
    o = np.asarray(o, acc)
    heads, kv_heads = q.shape[1], k.shape[1]
    ke, ve = _expand_kv(k, heads), _expand_kv(v, heads)
    scale = acc(1.0 / np.sqrt(q.shape[-1]))
    dv = np.swapaxes(p, -1, -2) @ do
    dp = do @ np.swapaxes(ve, -1, -2)
    if dtype is None:
        d_row = (do * o).sum(axis=-1)
    else:  # as autograd of eager attention: dP stored in the dtype, softmax's D = rowsum(P dP)
        dp = to_dtype(dp, dtype).astype(acc)
        d_row = (p * dp).sum(axis=-1)
    ds = p * (dp - d_row[..., None])
    if dtype is not None:
        ds = to_dtype(ds, dtype).astype(acc)
    dq = ds @ ke * scale
    dk = np.swapaxes(ds, -1, -2) @ q * scale
    g = heads // kv_heads
    b, _, n_k, d = k.shape
    dk = dk.reshape(b, kv_heads, g, n_k, d).sum(axis=2)
    dv = dv.reshape(b, kv_heads, g, n_k, d).sum(axis=2)
    if dtype is not None:
        dq, dk, dv = (to_dtype(x, dtype) for x in (dq, dk, dv))
    return dq, dk, dv
