"""What standard attention's forward (``kernels.standard``) and backward
(``kernels.standard_bwd``) share: the softmax options, kernel resources, the executors' tile
moves, and the two GEMM kernels that both run with other tensors.

- ``_emit_tile`` / ``tile_product``: one CTA per (b, h, i, j) tile of an N x N_kv product
  X_i Y_j^T, stored in the input dtype: S = Q K^T / sqrt(d) (forward ``qk``) and dP = dO V^T
  (backward ``dp``). Buffers: X_i, Y_j in shared memory, the product tile in registers.
- ``_emit_rows`` / ``row_product``: one CTA per (b, h, i) that streams every N x N tile T_ij
  and Y_j (causal too: the GEMM reads the zero tiles) and stores sum_j T_ij Y_j: O = P V
  (forward ``pv``) and dQ = dS K / sqrt(d) (backward ``dq``). Buffers: T_ij, Y_j in shared
  memory, the output block in registers.

Y is a key/value-side tensor (B, kv_heads, N_kv, d): query head h reads kv head h // group. The
softmax scale is applied, with its EW event, when the kernel's FP32 count per element is > 0.
Like a framework's batched GEMM, these kernels compute every tile whatever the mask
(``kernels.mask``): the softmax applies it, and masked entries of P and dS are zeros.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from flashio.kernels._emit import (
    ALLOC,
    EW,
    FREE,
    JIT,
    LOAD,
    MMA,
    P_ACC,
    P_BKV,
    P_BQ,
    P_DIM,
    P_EB,
    P_EXTRA,
    P_HEADS,
    P_KV_HEADS,
    P_KV_SEQ,
    P_SEQ,
    STORE,
    buf,
    calc,
    mem,
)
from flashio.kernels._numerics import acc_dtype, to_dtype
from flashio.kernels._record import offset4
from flashio.kernels._resources import regs_per_thread
from flashio.simulator.errors import TilingError
from flashio.simulator.trace import KernelInfo, Space

SOFTMAX_OPTIONS = ("softmax_passes", "softmax_rows")
P_SOFTMAX_PASSES, P_SOFTMAX_ROWS = P_EXTRA, P_EXTRA + 1  # options, in sorted-name order

# CUDA's limit on static shared memory per block (48 KiB); more needs a dynamic opt-in.
STATIC_SMEM_LIMIT_BYTES = 49152


def resolve_softmax_options(s, row_buffers: int, extra: tuple[str, ...] = ()) -> None:
    """Check the softmax options of schedule ``s`` and fill in their defaults.

    ``row_buffers`` is the number of N-wide row blocks a one-pass CTA keeps resident (1: S;
    2: P and dP in the backward). The default row count depends on ``s.warps``, which
    ``default_options(shape, options)`` is not given, so defaults are filled here, while the
    frozen Schedule is being built (``Schedule.__post_init__`` calls ``validate``). ``extra``:
    the schedule's on/off options beyond these (``unfused`` for the forward): 0 or 1, kept in
    ``options`` only when 1 (the tracers read 0 for an option left out).
    """
    opts = dict(s.options)
    unknown = sorted(set(opts) - set(SOFTMAX_OPTIONS) - set(extra))
    if unknown:
        allowed = ", ".join(SOFTMAX_OPTIONS + extra)
        raise TilingError(f"schedule {s.name!r} has no option {unknown[0]!r}; allowed: {allowed}")
    for key, value in opts.items():
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise TilingError(f"{key} must be an integer, got {value!r}")
    n, eb = s.shape.seq_len, s.shape.elem_bytes
    rows = int(opts.get("softmax_rows", min(s.warps, n)))
    if rows < 1:
        raise TilingError(f"softmax_rows must be >= 1 (rows of S per softmax CTA), got {rows}")
    resident = row_buffers * rows * s.shape.n_kv * eb
    passes = int(opts.get("softmax_passes", 1 if resident <= STATIC_SMEM_LIMIT_BYTES else 2))
    if passes not in (1, 2):
        raise TilingError(
            "softmax_passes must be 1 (row block resident in shared memory) or 2 (online "
            f"two-pass, one chunk in shared memory), got {passes}"
        )
    resolved = {"softmax_passes": passes, "softmax_rows": rows}
    for key in extra:
        if opts.get(key, 0) not in (0, 1):
            raise TilingError(f"{key} must be 0 or 1, got {opts[key]!r}")
        if opts.get(key, 0):
            resolved[key] = 1
    object.__setattr__(s, "options", tuple(sorted(resolved.items())))


# Columns of S the one-pass softmax kernel works on at a time, at least: its resident row block
# is walked in chunks of max(Bc, this) columns, 8 elements per lane (kernels/cuda/standard.cu).
RESIDENT_CHUNK = 256


def softmax_chunk(block_kv: int, passes: int) -> int:
    """Columns per chunk of the forward softmax kernel: Bc with two passes (the chunk in shared
    memory), ``max(Bc, RESIDENT_CHUNK)`` with one (the row block is resident)."""
    return block_kv if passes == 2 else max(block_kv, RESIDENT_CHUNK)


def row_block(s) -> tuple[int, int]:
    """(rows, columns) of a softmax CTA's shared-memory row block: the whole N_kv-wide row
    block with one pass, one chunk of Bc columns with two."""
    n = s.shape.n_kv if s.option("softmax_passes") == 1 else s.block_kv
    return s.option("softmax_rows"), n


def softmax_steps(s) -> tuple[int, int, int]:
    """(0, softmax steps, tile steps) summed over CTAs: a GEMM of one CTA per tile has no
    step; a softmax CTA walks its p Tc chunks as steps 0 .. p Tc - 1, and with one pass its
    P (dS) stores walk 0 .. Tc - 1 again, a new step each unless Tc = 1; a GEMM that streams
    K/V (or Q) blocks takes a step per block: B H Tr Tc in all."""
    sh, t_kv = s.shape, s.t_kv
    bh = sh.batch * sh.heads
    t_rows = -(-sh.seq_len // s.option("softmax_rows"))
    one_pass = s.option("softmax_passes") == 1
    return 0, bh * t_rows * (2 * t_kv - int(one_pass and t_kv == 1)), bh * s.t_q * t_kv


def kernel_infos(s, names, ctas, buffers, tensor_infos, warps=None) -> tuple[KernelInfo, ...]:
    """KernelInfo per kernel: shared memory and register tiles summed from ``buffers(s, k)``
    (every buffer is live for the whole CTA, so the sum is the peak); ``warps``: per kernel,
    default the schedule's for each."""
    warps = (s.warps,) * len(names) if warps is None else warps
    out = []
    for kernel, (name, grid, w) in enumerate(zip(names, ctas, warps, strict=True)):
        bufs = buffers(s, kernel)
        smem = sum(size for t, size in bufs if tensor_infos[t].space == Space.SHARED)
        regs = sum(size for t, size in bufs if tensor_infos[t].space == Space.REGISTERS)
        out.append(KernelInfo(name, grid, w, smem, regs_per_thread(regs, w)))
    return tuple(out)


# -- fast tracers ------------------------------------------------------------------------------
@njit(**JIT)
def _emit_tile(ev, write, kernel, cta_start, cta_stop, p, x, y, out, bufs, ew_per_score):
    """out_ij = X_i Y_j^T, one CTA per tile; ``bufs``: the X_i, Y_j and product buffers."""
    nh, nkh, n, nk, d = p[P_HEADS], p[P_KV_HEADS], p[P_SEQ], p[P_KV_SEQ], p[P_DIM]
    eb, acc, br, bc = p[P_EB], p[P_ACC], p[P_BQ], p[P_BKV]
    t_q, t_kv, grp = (n + br - 1) // br, (nk + bc - 1) // bc, nh // nkh
    row = d * eb
    sizes = (br * row, bc * row, br * bc * acc)
    k = 0
    for cta in range(cta_start, cta_stop):
        bhi, j = cta // t_kv, cta % t_kv
        bh, i = bhi // t_q, bhi % t_q
        q0, k0 = i * br, j * bc
        r, c = min(br, n - q0), min(bc, nk - k0)
        for t in range(3):
            k = buf(ev, k, write, kernel, cta, ALLOC, bufs[t], sizes[t])
        # X_i and Y_j: HBM -> SRAM, once per tile (X_i Tc times, Y_j Tr times in all)
        k = mem(ev, k, write, kernel, cta, -1, LOAD, x, i, -1, (bh * n + q0) * row, r, row, row)
        off = (((bh // nh) * nkh + (bh % nh) // grp) * nk + k0) * row
        k = mem(ev, k, write, kernel, cta, -1, LOAD, y, j, -1, off, c, row, row)
        k = calc(ev, k, write, kernel, cta, -1, MMA, i, j, 2 * r * c * d)
        if ew_per_score > 0:  # the 1/sqrt(d) scale, in registers
            k = calc(ev, k, write, kernel, cta, -1, EW, i, j, ew_per_score * r * c)
        # out_ij: registers -> HBM in the input dtype: r rows of the N_kv-wide tensor
        off = ((bh * n + q0) * nk + k0) * eb
        k = mem(ev, k, write, kernel, cta, -1, STORE, out, i, j, off, r, c * eb, nk * eb)
        for t in range(2, -1, -1):
            k = buf(ev, k, write, kernel, cta, FREE, bufs[t], sizes[t])
    return k


@njit(**JIT)
def _emit_rows(ev, write, kernel, cta_start, cta_stop, p, tile, y, out, bufs, ew_per_elem):
    """out_i = sum_j T_ij Y_j, one CTA per Q block; ``bufs``: the T_ij, Y_j and out_i buffers."""
    nh, nkh, n, nk, d = p[P_HEADS], p[P_KV_HEADS], p[P_SEQ], p[P_KV_SEQ], p[P_DIM]
    eb, acc, br, bc = p[P_EB], p[P_ACC], p[P_BQ], p[P_BKV]
    t_q, t_kv, grp = (n + br - 1) // br, (nk + bc - 1) // bc, nh // nkh
    row = d * eb
    sizes = (br * bc * eb, bc * row, br * d * acc)
    k = 0
    for cta in range(cta_start, cta_stop):
        bh, i = cta // t_q, cta % t_q
        q0 = i * br
        r = min(br, n - q0)
        for t in range(3):
            k = buf(ev, k, write, kernel, cta, ALLOC, bufs[t], sizes[t])
        for j in range(t_kv):
            k0 = j * bc
            c = min(bc, nk - k0)
            # T_ij and Y_j: HBM -> SRAM, once per (i, j); a mask's zero tiles are read too
            off = ((bh * n + q0) * nk + k0) * eb
            k = mem(ev, k, write, kernel, cta, j, LOAD, tile, i, j, off, r, c * eb, nk * eb)
            off = (((bh // nh) * nkh + (bh % nh) // grp) * nk + k0) * row
            k = mem(ev, k, write, kernel, cta, j, LOAD, y, j, -1, off, c, row, row)
            k = calc(ev, k, write, kernel, cta, j, MMA, i, j, 2 * r * c * d)
        if ew_per_elem > 0:  # the 1/sqrt(d) scale, in registers
            k = calc(ev, k, write, kernel, cta, -1, EW, i, -1, ew_per_elem * r * d)
        # out_i: registers -> HBM, once per CTA
        k = mem(ev, k, write, kernel, cta, -1, STORE, out, i, -1, (bh * n + q0) * row, r, row, row)
        for t in range(2, -1, -1):
            k = buf(ev, k, write, kernel, cta, FREE, bufs[t], sizes[t])
    return k


# -- numeric executors -------------------------------------------------------------------------
class Tiles:
    """The executors' tile moves: each reads or writes a numpy block and logs its event."""

    def __init__(self, s, rec, buffers):
        self.s, self.rec, self.buffers, self.calc = s, rec, buffers, rec.calc
        self.eb, self.dt, self.at = s.shape.elem_bytes, s.shape.dtype, acc_dtype(s.shape.dtype)

    def load(self, kernel, cta, step, t, x, b, h, r0, r, c0, c, brow, bcol):
        """Rows r0..r0+r, columns c0..c0+c of (B, H, R, C) tensor ``x``: HBM -> SRAM, upcast to
        the accumulator type."""
        eb, off = self.eb, offset4(x.shape, b, h, r0, c0, self.eb)
        self.rec.mem(kernel, cta, step, LOAD, t, brow, bcol, off, r, c * eb, x.shape[3] * eb)
        return x[b, h, r0 : r0 + r, c0 : c0 + c].astype(self.at)

    def store(self, kernel, cta, step, t, x, b, h, r0, c0, val, brow, bcol):
        """``val`` rounded to the storage dtype into ``x`` at (b, h, r0, c0): -> HBM."""
        (r, c), eb, off = val.shape, self.eb, offset4(x.shape, b, h, r0, c0, self.eb)
        x[b, h, r0 : r0 + r, c0 : c0 + c] = to_dtype(val, self.dt)
        self.rec.mem(kernel, cta, step, STORE, t, brow, bcol, off, r, c * eb, x.shape[3] * eb)

    def bufs(self, kernel, cta, op):
        """ALLOC the kernel's on-chip buffers in order, or FREE them in reverse."""
        order = self.buffers(self.s, kernel)
        for t, size in order if op == ALLOC else reversed(order):
            self.rec.buf(kernel, cta, op, t, size)


def tile_product(s, run, kernel, x_t, x, y_t, y, out_t, out, ew_per_score):
    """Executor of ``_emit_tile``: out_ij = X_i Y_j^T (scaled if ``ew_per_score`` > 0)."""
    sh, br, bc, d, n = s.shape, s.block_q, s.block_kv, s.shape.head_dim, s.shape.seq_len
    for cta in range(s.kernels[kernel].ctas):
        bhi, j = divmod(cta, s.t_kv)
        bh, i = divmod(bhi, s.t_q)
        b, h = divmod(bh, sh.heads)
        q0, k0 = i * br, j * bc
        r, c = min(br, n - q0), min(bc, sh.n_kv - k0)
        run.bufs(kernel, cta, ALLOC)
        x_i = run.load(kernel, cta, -1, x_t, x, b, h, q0, r, 0, d, i, -1)
        y_j = run.load(kernel, cta, -1, y_t, y, b, h // sh.group, k0, c, 0, d, j, -1)
        t_ij = x_i @ y_j.T
        run.calc(kernel, cta, -1, MMA, i, j, 2 * r * c * d)
        if ew_per_score > 0:
            t_ij = t_ij * run.at.type(sh.scale)
            run.calc(kernel, cta, -1, EW, i, j, ew_per_score * r * c)
        run.store(kernel, cta, -1, out_t, out, b, h, q0, k0, t_ij, i, j)  # input dtype
        run.bufs(kernel, cta, FREE)


def row_product(s, run, kernel, tile_t, tile, y_t, y, out_t, out, ew_per_elem):
    """Executor of ``_emit_rows``: out_i = sum_j T_ij Y_j (scaled if ``ew_per_elem`` > 0)."""
    sh, br, bc, d, n = s.shape, s.block_q, s.block_kv, s.shape.head_dim, s.shape.seq_len
    for cta in range(s.kernels[kernel].ctas):
        bh, i = divmod(cta, s.t_q)
        b, h = divmod(bh, sh.heads)
        q0 = i * br
        r = min(br, n - q0)
        run.bufs(kernel, cta, ALLOC)
        out_i = np.zeros((r, d), run.at)
        for j in range(s.t_kv):
            k0 = j * bc
            c = min(bc, sh.n_kv - k0)
            t_ij = run.load(kernel, cta, j, tile_t, tile, b, h, q0, r, k0, c, i, j)
            y_j = run.load(kernel, cta, j, y_t, y, b, h // sh.group, k0, c, 0, d, j, -1)
            out_i += t_ij @ y_j
            run.calc(kernel, cta, j, MMA, i, j, 2 * r * c * d)
        if ew_per_elem > 0:
            out_i = out_i * run.at.type(sh.scale)
            run.calc(kernel, cta, -1, EW, i, -1, ew_per_elem * r * d)
        run.store(kernel, cta, -1, out_t, out, b, h, q0, 0, out_i, i, -1)
        run.bufs(kernel, cta, FREE)
