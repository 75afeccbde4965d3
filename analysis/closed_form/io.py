"""Exact closed-form global traffic of every schedule, derived by hand from its loop order.

Nothing here runs a tracer: each schedule's reads and writes per global tensor are arithmetic on
N (``seq_len``), d (``head_dim``), Tr = ceil(N/Br), Tc = ceil(N/Bc), batch B, query heads H, key/
value heads Hkv and the element sizes, plus sums over the blocks that ragged blocking and masks
(causal, window, segments, kv_seq_len: ``kernels.mask``) make irregular (``block_sums``); N_kv
is the K/V length. ``docs/io.md`` derives every line; ``tests/test_io.py`` checks
them byte for byte against the trace and the simulator with ``l2_bytes = 0``. Given a GPU, the
counts add the register-spill traffic the simulator charges (``analysis.closed_form.spills``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from flashio import kernels, simulator
from flashio.analysis.closed_form.spills import REG_BYTES, spilled_registers
from flashio.kernels.mask import block_ranges, key_ranges
from flashio.kernels.schedules import DEFAULT_WARPS
from flashio.simulator.simulate import LOCAL_NAME

__all__ = ["BlockSums", "IOCounts", "TensorIO", "block_sums", "io_counts", "io_counts_of"]


@dataclass(frozen=True, slots=True)
class BlockSums:
    """Sums over the (i, j) block pairs a flash schedule visits, per (batch, query head).

    A pair is visited iff some query of Q block i sees some key of K/V block j
    (``kernels.mask``: causal, window, segments, kv_seq_len). Without a mask every pair is.

    Attributes
    ----------
    row_visits : int
        sum over visited (i, j) of r_i (rows of Q block i): the rows of Q-side tensors moved
        when they travel once per pair. No mask: Tc * N.
    col_visits : int
        sum over visited (i, j) of c_j (rows of K block j): the rows of K and V moved when they
        travel once per pair. No mask: Tr * N_kv.
    area : int
        sum over visited (i, j) of r_i * c_j: scores computed (partial tiles count whole).
        No mask: N N_kv; causal: at least N(N+1)/2.
    pairs : int
        number of visited (i, j): the outer-loop steps of FA2's CTAs. No mask: Tr * Tc.
    q_rows : int
        rows of the Q blocks that visit at least one K/V block (N unless some queries see no
        key: ``kv_seq_len < seq_len`` with causal).
    kv_rows : int
        rows of the K/V blocks at least one Q block visits (N_kv unless a window or
        ``kv_seq_len`` leaves keys no query sees).
    kv_blocks : int
        number of those K/V blocks.
    full_pairs : int
        visited (i, j) in which every query sees every key; the other ``pairs - full_pairs``
        are partial: computed whole and masked element by element. No mask: all of them.
    """

    row_visits: int
    col_visits: int
    area: int
    pairs: int
    q_rows: int
    kv_rows: int
    kv_blocks: int
    full_pairs: int


def block_sums(shape: kernels.AttentionShape, block_q: int, block_kv: int) -> BlockSums:
    """``BlockSums`` for one (batch, head): one term per Q block i, each in closed form.

    Notes
    -----
    Q block i holds r_i = min(Br, N - i Br) rows and visits the contiguous K/V blocks
    lo_i <= j < hi_i (``kernels.mask.block_ranges``: no mask, 0 and Tc; causal, 0 and
    min(Tc, floor((e_i - 1) / Bc) + 1) with e_i = i Br + r_i), whose rows add up to
    C_i = min(N_kv, hi_i Bc) - lo_i Bc. So row_visits = sum_i (hi_i - lo_i) r_i, col_visits =
    sum_i C_i, area = sum_i r_i C_i and pairs = sum_i (hi_i - lo_i). A block larger than N is
    one partial block: r_0 = N (or c_0 = N_kv), as in a ragged last block.
    """
    n, nk, br, bc = shape.seq_len, shape.n_kv, block_q, block_kv
    t_q, t_kv = math.ceil(n / br), math.ceil(nk / bc)
    if not shape.causal and not shape.variant:
        return BlockSums(t_kv * n, t_q * nk, n * nk, t_q * t_kv, n, nk, t_kv, t_q * t_kv)
    lo, hi, kv_seen = block_ranges(shape, br, bc)
    kmin, kmax = key_ranges(shape)
    r0 = np.arange(t_q, dtype=np.int64) * br
    # full blocks of row block i: j Bc >= kmin(last row) and the block's last key <= kmax(r0)
    first_full = -(-kmin[np.minimum(r0 + br, n) - 1] // bc)
    top = kmax[r0]
    last_full = np.where(top >= nk - 1, t_kv - 1, (top + 1) // bc - 1)
    full = np.maximum(0, np.minimum(last_full, hi - 1) - np.maximum(first_full, lo) + 1)
    rows = np.minimum(br, n - np.arange(t_q, dtype=np.int64) * br)
    visits = hi - lo
    cols = np.where(visits > 0, np.minimum(nk, hi * bc) - lo * bc, 0)
    kv_len = np.minimum(bc, nk - np.arange(t_kv, dtype=np.int64) * bc)
    return BlockSums(
        int(visits @ rows),
        int(cols.sum()),
        int(rows @ cols),
        int(visits.sum()),
        int(rows[visits > 0].sum()),
        int(kv_len[kv_seen].sum()),
        int(kv_seen.sum()),
        int(full.sum()),
    )


@dataclass(frozen=True, slots=True)
class TensorIO:
    """Global traffic of one tensor: reads are LOAD events, writes STORE plus REDUCE events."""

    name: str
    elem_bytes: int
    read_elements: int
    write_elements: int

    @property
    def read_bytes(self) -> int:
        return self.read_elements * self.elem_bytes

    @property
    def write_bytes(self) -> int:
        return self.write_elements * self.elem_bytes


@dataclass(frozen=True, slots=True)
class IOCounts:
    """Closed-form global traffic of one schedule: what the SMs ask of L2 + HBM, which is HBM
    traffic on a GPU without L2 (the FlashAttention papers' "HBM accesses").

    With a ``gpu``, register spills are one more row of ``tensors``, named as the simulator
    names it (``simulator.simulate.LOCAL_NAME``, 4-byte elements: registers), present when the
    GPU makes a kernel spill; they count in ``read_bytes`` and ``write_bytes`` as they do in
    ``SimResult.global_read_bytes`` and ``global_write_bytes``.
    """

    schedule: str
    shape: kernels.AttentionShape
    block_q: int
    block_kv: int
    options: tuple[tuple[str, int], ...]
    tensors: tuple[TensorIO, ...]
    warps: int = DEFAULT_WARPS
    gpu: str | None = None  # the GPU whose register limit set the spill term; None: no term

    @property
    def read_bytes(self) -> int:
        return sum(t.read_bytes for t in self.tensors)

    @property
    def write_bytes(self) -> int:
        return sum(t.write_bytes for t in self.tensors)

    @property
    def total_bytes(self) -> int:
        return self.read_bytes + self.write_bytes

    @property
    def spill_read_bytes(self) -> int:
        """Register reloads from local memory (0 without a gpu or without spills)."""
        return sum(t.read_bytes for t in self.tensors if t.name == LOCAL_NAME)

    @property
    def spill_write_bytes(self) -> int:
        """Register spills stored to local memory (0 without a gpu or without spills)."""
        return sum(t.write_bytes for t in self.tensors if t.name == LOCAL_NAME)

    def tensor(self, name: str) -> TensorIO:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(f"no tensor {name!r}; have {', '.join(t.name for t in self.tensors)}")

    def to_dict(self) -> dict:
        return {
            "schedule": self.schedule,
            "shape": self.shape.to_dict(),
            "block_q": self.block_q,
            "block_kv": self.block_kv,
            "options": dict(self.options),
            "warps": self.warps,
            "gpu": self.gpu,
            "read_bytes": self.read_bytes,
            "write_bytes": self.write_bytes,
            "spill_read_bytes": self.spill_read_bytes,
            "spill_write_bytes": self.spill_write_bytes,
            "tensors": {
                t.name: {"read_bytes": t.read_bytes, "write_bytes": t.write_bytes}
                for t in self.tensors
            },
        }


def _counts(name: str, sh, t_q: int, t_kv: int, bs: BlockSums, passes: int) -> list[tuple]:
    """(tensor, elem bytes, read elements, write elements) of schedule ``name``.

    ``bh`` = B*H counts (batch, query head) pairs, ``bk`` = B*Hkv (batch, kv head) pairs; N
    query rows, N_kv key rows.
    """
    n, nk, d, eb, acc = sh.seq_len, sh.n_kv, sh.head_dim, sh.elem_bytes, sh.acc_bytes
    bh, bk = sh.batch * sh.heads, sh.batch * sh.n_kv_heads
    nd, kd, nn, rv, cv = n * d, nk * d, n * nk, bs.row_visits, bs.col_visits
    if name == "standard":  # qk: CTA per (i, j); softmax: row blocks; pv: CTA per i
        return [
            ("Q", eb, bh * t_kv * nd, 0),  # Q_i once per tile of S: Tc times
            ("K", eb, bh * t_q * kd, 0),  # K_j once per tile of S: Tr times (per query head)
            ("V", eb, bh * t_q * kd, 0),  # V_j once per (i, j) in pv: Tr times
            ("S", eb, passes * bh * nn, bh * nn),  # written by qk, read per softmax pass
            ("P", eb, bh * nn, bh * nn),  # written by softmax, read by pv
            ("O", eb, 0, bh * nd),
        ]
    if name == "standard_bwd":  # dv, dp, ds, dq, dk
        return [
            ("Q", eb, bh * t_kv * nd, 0),  # dk: Q_i once per (g, i) of each K block
            ("K", eb, bh * t_q * kd, 0),  # dq: K_j once per (i, j)
            ("V", eb, bh * t_q * kd, 0),  # dp: V_j once per tile of dP
            ("dO", eb, 2 * bh * t_kv * nd, 0),  # dv and dp: Tc times each
            ("P", eb, (1 + passes) * bh * nn, 0),  # dv once, ds once per pass
            ("dP", eb, passes * bh * nn, bh * nn),
            ("dS", eb, 2 * bh * nn, bh * nn),  # read by dq and by dk
            ("dQ", eb, 0, bh * nd),
            ("dK", eb, 0, bk * kd),  # summed over the group's query heads on chip
            ("dV", eb, 0, bk * kd),
        ]
    kv = bs.kv_rows * d  # K/V rows some query sees
    if name == "flash1":  # CTA per (b, h); outer j, inner i; O_acc, l, m live in HBM
        return [
            ("Q", eb, bh * rv * d, 0),  # once per visited (i, j)
            ("K", eb, bh * kv, 0),  # once per CTA, i.e. per query head
            ("V", eb, bh * kv, 0),
            ("O", eb, 0, bh * nd),  # at the last j of each i (zeros where no key is seen)
            # init: N rows, then at every visited (i, j) but each i's last
            ("O_acc", acc, bh * rv * d, bh * (n + rv - bs.q_rows) * d),
            ("l", acc, bh * rv, bh * (n + rv)),  # init + once per visited (i, j)
            ("m", acc, bh * rv, bh * (n + rv)),
        ]
    if name == "flash1_bwd":  # CTA per (b, kv head); outer j, group heads, inner i
        return [
            ("Q", eb, bh * rv * d, 0),
            ("K", eb, bk * kv, 0),
            ("V", eb, bk * kv, 0),
            ("O", eb, bh * rv * d, 0),
            ("dO", eb, bh * rv * d, 0),
            ("l", acc, bh * rv, 0),
            ("m", acc, bh * rv, 0),
            ("dQ_acc", acc, bh * (rv + n) * d, bh * (n + rv) * d),  # init, per pair, final pass
            ("dQ", eb, 0, bh * nd),
            ("dK", eb, 0, bk * kd),  # zeros for keys no query sees
            ("dV", eb, 0, bk * kd),
        ]
    if name == "flash2":  # CTA per (b, h, i); K_j, V_j once per visited (i, j)
        return [
            ("Q", eb, bh * bs.q_rows * d, 0),  # not by a CTA whose rows see no key
            ("K", eb, bh * cv * d, 0),
            ("V", eb, bh * cv * d, 0),
            ("O", eb, 0, bh * nd),
            ("L", acc, 0, bh * n),
        ]
    if name == "flash2_bwd":  # pre per (b, h, i); main per (b, kv head, j); post per (b, h, i)
        return [
            ("Q", eb, bh * rv * d, 0),
            ("K", eb, bk * kv, 0),
            ("V", eb, bk * kv, 0),
            ("O", eb, bh * nd, 0),  # pre only: D = rowsum(dO * O)
            ("dO", eb, bh * (n + rv) * d, 0),  # pre + once per visited pair
            ("L", acc, bh * rv, 0),
            ("D", acc, bh * rv, bh * n),
            ("dQ_acc", acc, bh * nd, bh * (n + rv) * d),  # pre zeroes, REDUCE per pair, post
            ("dQ", eb, 0, bh * nd),
            ("dK", eb, 0, bk * kd),
            ("dV", eb, 0, bk * kd),
        ]
    raise ValueError(f"unknown schedule {name!r}; choose one of {', '.join(kernels.SCHEDULES)}")


def io_counts_of(sched: kernels.Schedule, gpu: simulator.GPUSpec | str | None = None) -> IOCounts:
    """``IOCounts`` of a built schedule (block sizes, warps and options as it holds them).

    Parameters
    ----------
    sched : kernels.Schedule
    gpu : GPUSpec or str, optional
        A spec or built-in name. Given, the counts add the register-spill row (local memory)
        the simulator charges on that GPU; without it there is no spill term.
    """
    sh = sched.shape
    bs = block_sums(sh, sched.block_q, sched.block_kv)
    passes = dict(sched.options).get("softmax_passes", 1)
    rows = _counts(sched.name, sh, sched.t_q, sched.t_kv, bs, passes)
    if gpu is not None:
        gpu = gpu if isinstance(gpu, simulator.GPUSpec) else simulator.load_gpu(gpu)
        regs = spilled_registers(sched, gpu, bs)
        if regs:  # each spilled register is stored, then loaded back (docs/model.md)
            rows.append((LOCAL_NAME, REG_BYTES, regs, regs))
    return IOCounts(
        sched.name,
        sh,
        sched.block_q,
        sched.block_kv,
        sched.options,
        tuple(TensorIO(*r) for r in rows),
        sched.warps,
        None if gpu is None else gpu.name,
    )


def io_counts(
    name: str,
    shape: kernels.AttentionShape,
    block_q: int | None = None,
    block_kv: int | None = None,
    *,
    warps: int | None = None,
    gpu: simulator.GPUSpec | str | None = None,
    **options: int,
) -> IOCounts:
    """Exact global reads and writes per tensor of schedule ``name``, from its loop order.

    Parameters
    ----------
    name : str
        One of ``kernels.SCHEDULES``.
    shape : kernels.AttentionShape
    block_q, block_kv : int, optional
        Br and Bc in rows, any size >= 1 (a block larger than N is one partial block);
        defaults as in ``kernels.schedule``.
    warps : int, optional
        Warps per CTA (default 4). They change no byte of the algorithm's tensors, but they
        set the standard schedules' default ``softmax_rows`` and, with a ``gpu``, the spills.
    gpu : GPUSpec or str, optional
        A spec or built-in name. Given, the counts add the register spills the simulator
        charges on that GPU as the tensor ``local (register spills)``; without one there is
        no spill term (the algorithm's traffic only).
    **options : int
        The schedule's options (``softmax_passes``, ``softmax_rows`` for the standard
        schedules; only ``softmax_passes`` changes the bytes, but the default number of passes
        depends on ``softmax_rows``, whose default is the warp count).

    Returns
    -------
    IOCounts
        Reads (LOAD bytes) and writes (STORE + REDUCE bytes) per global tensor, in elements and
        bytes, as the trace counts them; with a ``gpu``, also the spill row, equal to what
        ``simulator.simulate`` replays.

    Notes
    -----
    The formulas per schedule are in ``_counts`` and ``analysis.closed_form.spills``, derived in
    ``docs/io.md``. The schedule is built only to validate the arguments and resolve defaults;
    no event is generated.
    """
    sched = kernels.schedule(name, shape, block_q, block_kv, warps, **options)
    return io_counts_of(sched, gpu)
