"""Capacity and occupancy: how many CTAs of a kernel fit on one SM, and what limits them."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from flashio.simulator.errors import CapacityError
from flashio.simulator.gpu import GPUSpec
from flashio.simulator.trace import KernelInfo, Space, TensorInfo

__all__ = ["CapacityError", "Occupancy", "occupancy"]


@dataclass(frozen=True, slots=True)
class Occupancy:
    """Resident CTAs per SM and the resource that bounds them.

    ``limits`` maps each resource (``shared memory``, ``registers``, ``warps``, ``ctas``) to the
    CTAs per SM it alone would allow; ``limiter`` is the smallest. ``spilled_regs_per_thread`` is
    how far the kernel's register need exceeds the per-thread maximum (the compiler spills it).
    """

    ctas_per_sm: int
    limiter: str
    limits: tuple[tuple[str, int], ...]
    regs_per_thread: int
    spilled_regs_per_thread: int
    warps_per_sm: int

    def to_dict(self) -> dict:
        d = asdict(self)
        d["limits"] = dict(self.limits)
        return d


def _fmt(n: int) -> str:
    return f"{n:,} B ({n / 1024:.1f} KiB)"


def capacity_message(kernel: KernelInfo, gpu: GPUSpec, buffers: tuple[TensorInfo, ...]) -> str:
    tiles = [t for t in buffers if t.space == Space.SHARED]
    parts = " + ".join(
        f"{t.name} {'x'.join(map(str, t.shape))} = {_fmt(t.size_bytes)}" for t in tiles
    )
    return (
        f"kernel {kernel.name!r} needs {_fmt(kernel.smem_bytes)} of shared memory per CTA "
        f"({parts or 'no tile list available'}), but {gpu.name} allows "
        f"{_fmt(gpu.smem_per_cta_bytes)} per CTA. Use smaller blocks (block_q, block_kv), a "
        "smaller head_dim or dtype, or a GPU with more shared memory."
    )


def occupancy(kernel: KernelInfo, gpu: GPUSpec, buffers: tuple[TensorInfo, ...] = ()) -> Occupancy:
    """CTAs of ``kernel`` resident per SM on ``gpu`` (CUDA occupancy-calculator rules).

    Raises
    ------
    CapacityError
        When one CTA alone does not fit: shared memory above ``smem_per_cta_bytes``, or more
        threads than ``max_threads_per_cta``. ``buffers`` (the kernel's on-chip tensors) name
        the tiles in the message.
    """
    threads = kernel.warps * gpu.warp_size
    if threads > gpu.max_threads_per_cta:
        raise CapacityError(
            f"kernel {kernel.name!r} uses {kernel.warps} warps = {threads} threads per CTA; "
            f"{gpu.name} allows {gpu.max_threads_per_cta}"
        )
    if kernel.smem_bytes > gpu.smem_per_cta_bytes:
        raise CapacityError(capacity_message(kernel, gpu, buffers))
    regs = min(kernel.regs_per_thread, gpu.regs_per_thread_max)
    unit = gpu.regs_alloc_unit_per_warp
    regs_per_warp = math.ceil(regs * gpu.warp_size / unit) * unit
    smem = kernel.smem_bytes + gpu.smem_reserved_per_cta_bytes
    limits = (
        ("shared memory", gpu.smem_per_sm_bytes // smem),
        ("registers", gpu.regs_per_sm // (regs_per_warp * kernel.warps)),
        ("warps", gpu.max_warps_per_sm // kernel.warps),
        ("ctas", gpu.max_ctas_per_sm),
    )
    limiter, ctas = min(limits, key=lambda kv: kv[1])
    if ctas < 1:
        raise CapacityError(
            f"kernel {kernel.name!r} cannot place one CTA on an SM of {gpu.name}: "
            + ", ".join(f"{k} allows {v}" for k, v in limits)
        )
    return Occupancy(
        ctas_per_sm=ctas,
        limiter=limiter,
        limits=limits,
        regs_per_thread=regs,
        spilled_regs_per_thread=max(0, kernel.regs_per_thread - gpu.regs_per_thread_max),
        warps_per_sm=ctas * kernel.warps,
    )
