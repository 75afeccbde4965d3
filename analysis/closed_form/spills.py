"""Closed form of the register-spill traffic the simulator charges (docs/model.md, "Register
spills"; derived in docs/io.md, "Register spills").

A kernel that needs more registers per thread than the GPU allows spills the excess to local
memory. At every new outer-loop step of a CTA (an event whose ``step`` is >= 0 and differs from
the CTA's previous one) the replay stores the spilled registers and loads them back, so the
spill traffic is (steps summed over the kernel's CTAs) x (spilled registers per thread) x 4 B x
threads per CTA, read and written alike. The steps come from each schedule's loop order, here;
the replay counts them from the trace's events.
"""

from __future__ import annotations

import math

from flashio import kernels, simulator

REG_BYTES = 4  # one 32-bit register


def outer_steps(sched: kernels.Schedule, bs) -> tuple[int, ...]:
    """Outer-loop steps per kernel of ``sched``, summed over its CTAs.

    Parameters
    ----------
    sched : kernels.Schedule
    bs : BlockSums
        The visited blocks per (batch, query head) (``analysis.closed_form.io.block_sums``).

    Notes
    -----
    Per CTA: ``standard``'s qk and ``standard_bwd``'s dp tiles have no step; pv, dq (one CTA per
    Q block, a step per K/V block) and dv, dk (one per K/V block, a step per (group head, Q
    block)) have Tc and g Tr, i.e. BH Tr Tc in all; a softmax (ds) CTA walks its p Tc chunks as
    steps 0 .. p Tc - 1, and with one pass its P (dS) stores walk 0 .. Tc - 1 again, a new step
    each unless Tc = 1. ``flash1`` (per (b, h)) has a step per K/V block some query sees
    (Tc without a window or kv_seq_len), ``flash1_bwd`` (per (b, kv head)) one per K/V
    block, Tc, mask or not (an unseen block still stores its zero dK_j, dV_j); ``flash2``
    (per Q block) and ``flash2_bwd``'s main kernel (per K/V block, a step per (group head, Q
    block)) have one per visited pair; the
    pre- and postprocessing kernels have none.
    """
    sh, t_q, t_kv = sched.shape, sched.t_q, sched.t_kv
    bh, bk = sh.batch * sh.heads, sh.batch * sh.n_kv_heads
    name = sched.name
    if name.startswith("standard"):
        t_rows = math.ceil(sh.seq_len / sched.option("softmax_rows"))
        one_pass = sched.option("softmax_passes") == 1
        soft = bh * t_rows * (2 * t_kv - int(one_pass and t_kv == 1))
        tiles = bh * t_q * t_kv
        return (0, soft, tiles) if name == "standard" else (tiles, 0, soft, tiles, tiles)
    if name == "flash1":
        return (bh * bs.kv_blocks,)
    if name == "flash1_bwd":
        return (bk * t_kv,)
    if name == "flash2":
        return (bh * bs.pairs,)
    if name == "flash2_bwd":
        return (0, bh * bs.pairs, 0)
    raise ValueError(f"unknown schedule {name!r}; choose one of {', '.join(kernels.SCHEDULES)}")


def spilled_registers(sched: kernels.Schedule, gpu: simulator.GPUSpec, bs) -> int:
    """Registers stored to local memory by all kernels of ``sched`` on ``gpu`` (as many are
    loaded back): steps x spilled registers per thread x threads per CTA, summed over kernels.
    """
    total = 0
    for k, steps in zip(sched.kernels, outer_steps(sched, bs), strict=True):
        spilled = max(0, k.regs_per_thread - gpu.regs_per_thread_max)
        total += steps * spilled * k.warps * gpu.warp_size
    return total
