"""Closed form of the register-spill traffic the simulator charges (docs/model.md, "Register
spills"; derived in docs/io.md, "Register spills").

A kernel that needs more registers per thread than the GPU allows spills the excess to local
memory. At every new outer-loop step of a CTA (an event whose ``step`` is >= 0 and differs from
the CTA's previous one) the replay stores the spilled registers and loads them back, so the
spill writes are (steps summed over the kernel's CTAs) x (spilled registers per thread) x 4 B x
threads per CTA; the reads are as many, unless the resident CTAs' spilled registers fit the L1
their shared memory leaves (``simulator.simulate.spill_reloads_hit``): then the reloads hit L1
and none leaves the SM. The steps come from each schedule's loop order, here; the replay counts
them from the trace's events.
"""

from __future__ import annotations

from flashio import kernels, simulator
from flashio.kernels.registry import spec
from flashio.simulator.simulate import spill_reloads_hit

REG_BYTES = 4  # one 32-bit register


def outer_steps(sched: kernels.Schedule, bs) -> tuple[int, ...]:
    """Outer-loop steps per kernel of ``sched``, summed over its CTAs: its module's
    ``outer_steps`` (``kernels.registry``; docs/io.md, "Register spills").

    Parameters
    ----------
    sched : kernels.Schedule
    bs : BlockSums
        The visited blocks per (batch, query head) (``kernels.mask.block_sums``).
    """
    return spec(sched.name).outer_steps(sched, bs)


def spilled_registers(sched: kernels.Schedule, gpu: simulator.GPUSpec, bs) -> tuple[int, int]:
    """Registers all kernels of ``sched`` on ``gpu`` store to local memory and load back from
    beyond L1: steps x spilled registers per thread x threads per CTA, summed over kernels; a
    kernel whose spills stay in L1 loads none back."""
    stored = reloaded = 0
    for k, steps in zip(sched.kernels, outer_steps(sched, bs), strict=True):
        spilled = max(0, k.regs_per_thread - gpu.regs_per_thread_max)
        regs = steps * spilled * k.warps * gpu.warp_size
        occ = simulator.occupancy(k, gpu)
        stored += regs
        reloaded += 0 if spill_reloads_hit(k, occ, gpu, None) else regs
    return stored, reloaded
