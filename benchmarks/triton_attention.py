"""A FlashAttention-2 forward kernel in Triton, written for this project's measurements.

One program computes a ``BLOCK_M x d`` tile of the output for one (batch, head): the Q tile is
loaded once and held in registers across the loop over the keys, K and V arrive as
``BLOCK_N x d`` tiles, and the softmax is kept online in base 2 (the scale is folded into
``log2(e) / sqrt(d)``, so every exponential is one ``exp2``). A causal kernel skips the key
blocks wholly above the diagonal and masks only the blocks that cross it; a sequence length
that is not a multiple of the tiles is masked in its last key block and at the Q rows'
loads and stores. Outputs: O in the inputs' dtype and the row log-sum-exp (natural log, fp32),
as FlashAttention-2 writes them for its backward.

``run(q, k, v, causal, block_m, block_n, num_warps, num_stages)`` takes (batch, heads, N, d)
tensors whose last dimension is contiguous; ``launch`` is the same and also returns Triton's
compiled kernel (``n_regs``, ``n_spills``, ``metadata.shared``, ``asm['cubin']``).

Needs torch and triton (imported here, so import this module only where both are installed).
Under ``TRITON_INTERPRET=1`` it runs on CPU tensors, slowly, for checking the numerics.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634
KERNEL_NAME = "fa2_fwd"  # the name the profiler shows for the launches


@triton.jit
def _kv_step(
    acc,
    m_i,
    l_i,
    q,
    k_ptrs,
    v_ptrs,
    start_n,
    offs_m,
    offs_n,
    n_ctx,
    qk_scale,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
):
    """One key block: S = Q K^T (log2 units), the running max and sum, acc += P V."""
    if MASKED:
        kv_ok = (start_n + offs_n) < n_ctx
        k = tl.load(k_ptrs, mask=kv_ok[:, None], other=0.0)
        v = tl.load(v_ptrs, mask=kv_ok[:, None], other=0.0)
    else:
        k = tl.load(k_ptrs)
        v = tl.load(v_ptrs)
    s = tl.dot(q, tl.trans(k)) * qk_scale
    if MASKED:
        keep = kv_ok[None, :]
        if CAUSAL:
            keep = keep & (offs_m[:, None] >= (start_n + offs_n)[None, :])
        s = tl.where(keep, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    p = tl.math.exp2(s - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, m_new, l_i


@triton.jit
def fa2_fwd(
    Q,
    K,
    V,
    Out,
    LSE,
    qk_scale,
    n_ctx,
    n_heads,
    stride_qb,
    stride_qh,
    stride_qm,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_ob,
    stride_oh,
    stride_om,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // n_heads
    h = pid_bh % n_heads
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < n_ctx

    q_ptrs = Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]
    q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0)
    k_ptrs = K + b * stride_kb + h * stride_kh + offs_n[:, None] * stride_kn + offs_d[None, :]
    v_ptrs = V + b * stride_vb + h * stride_vh + offs_n[:, None] * stride_vn + offs_d[None, :]

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    # Key blocks [0, full_end) need no mask; [full_end, end) are masked (the diagonal blocks
    # of a causal kernel, the ragged last block otherwise); blocks past `end` are skipped.
    if CAUSAL:
        full_end = (start_m // BLOCK_N) * BLOCK_N
        end = tl.minimum(start_m + BLOCK_M, n_ctx)
    else:
        full_end = (n_ctx // BLOCK_N) * BLOCK_N
        end = n_ctx
    for start_n in range(0, full_end, BLOCK_N):
        acc, m_i, l_i = _kv_step(
            acc,
            m_i,
            l_i,
            q,
            k_ptrs + start_n * stride_kn,
            v_ptrs + start_n * stride_vn,
            start_n,
            offs_m,
            offs_n,
            n_ctx,
            qk_scale,
            False,
            CAUSAL,
        )
    for start_n in range(full_end, end, BLOCK_N):
        acc, m_i, l_i = _kv_step(
            acc,
            m_i,
            l_i,
            q,
            k_ptrs + start_n * stride_kn,
            v_ptrs + start_n * stride_vn,
            start_n,
            offs_m,
            offs_n,
            n_ctx,
            qk_scale,
            True,
            CAUSAL,
        )

    acc = acc / l_i[:, None]
    o_ptrs = Out + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :]
    tl.store(o_ptrs, acc.to(Out.dtype.element_ty), mask=row_ok[:, None])
    # m_i and log2(l_i) are in log2 units of the scaled scores; LSE is in natural-log units.
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453
    tl.store(LSE + pid_bh * n_ctx + offs_m, lse, mask=row_ok)


def launch(q, k, v, causal=False, block_m=128, block_n=64, num_warps=4, num_stages=3,
           sm_scale=None):  # fmt: skip
    """(O, LSE, compiled kernel) for q, k, v of shape (batch, heads, N, d)."""
    if not (q.shape == k.shape == v.shape and q.dim() == 4):
        raise ValueError(f"q, k, v must share one (batch, heads, N, d) shape: {q.shape}")
    if any(t.stride(-1) != 1 for t in (q, k, v)):
        raise ValueError("the head dimension of q, k, v must be contiguous")
    batch, heads, n, d = q.shape
    if d & (d - 1) or d < 16:
        raise ValueError(f"head_dim must be a power of two >= 16, not {d}")
    scale = 1.0 / math.sqrt(d) if sm_scale is None else sm_scale
    o = torch.empty_like(q)
    lse = torch.empty((batch, heads, n), device=q.device, dtype=torch.float32)
    grid = (triton.cdiv(n, block_m), batch * heads)
    kernel = fa2_fwd[grid](
        q, k, v, o, lse, scale * LOG2E, n, heads,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        o.stride(0), o.stride(1), o.stride(2),
        HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=bool(causal),
        num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    return o, lse, kernel


def run(q, k, v, causal=False, block_m=128, block_n=64, num_warps=4, num_stages=3):
    """(O, LSE): O like q, LSE fp32 (batch, heads, N), natural log."""
    o, lse, _ = launch(q, k, v, causal, block_m, block_n, num_warps, num_stages)
    return o, lse


def reference(q, k, v, causal=False):
    """(O, LSE) in fp32 by the definition, for checks (materialises S: small shapes only)."""
    qf, kf, vf = (t.float() for t in (q, k, v))
    s = qf @ kf.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1), -math.inf)
    return torch.softmax(s, dim=-1) @ vf, torch.logsumexp(s, dim=-1)
