"""One registered object per schedule: everything flashio knows about it, in one place.

Each schedule is a module of ``flashio.kernels`` (one algorithm per file) that holds its
tensors, kernels, tracer (``_emit``), numeric executor (``execute``), closed-form traffic
(``traffic``), outer-loop steps (``outer_steps``, for register spills), on-chip footprint
(``on_chip_bytes``, the M of its lower bound) and constants (``FORWARD``, ``EVERY_TILE``,
``MATMUL_PRODUCTS``, ``BOUND_CONSTANT``, ``WARP_SPECIALIZED``, ``OPTIONS``). ``spec(name)``
returns the :class:`ScheduleSpec` of that module; the analysis, the simulator's callers and the
CLI ask it instead of testing a schedule's name.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from types import ModuleType

from flashio.simulator.errors import TilingError

__all__ = ["SCHEDULES", "ScheduleSpec", "spec"]

SCHEDULES = (
    "standard", "standard_bwd", "flash1", "flash1_bwd", "flash2", "flash2_bwd", "flash_decode",
)  # fmt: skip


@dataclass(frozen=True)
class ScheduleSpec:
    """What one schedule is, read from its module.

    Attributes
    ----------
    name : str
    module : ModuleType
        ``flashio.kernels.<name>``: tensors, kernels, tracer, executor.
    forward : str
        The forward schedule whose outputs a backward one differentiates (itself for a
        forward): the executor that makes its O, L or P.
    every_tile : bool
        Whether its kernels compute every tile whatever the mask (standard attention's
        batched GEMMs) rather than only the blocks the mask reaches (the flash schedules).
    matmul_products : int
        Matmuls of 2 d FLOPs per score of each computed tile (forward 2; the flash backward 5,
        recomputing S; standard's backward 4).
    bound_constant : int
        c in its exact traffic >= c B H W d^2 / M (docs/io.md, "Schedule constants").
    warp_specialized : tuple of str
        The kernels an implementation's warp roles and register budgets describe (the tiled
        loops, not pre- and post-processing or standard attention's softmax).
    options : tuple of str
        Its schedule options (``softmax_passes``, ``softmax_rows`` for standard attention).
    """

    name: str
    module: ModuleType
    forward: str
    every_tile: bool
    matmul_products: int
    bound_constant: int
    warp_specialized: tuple[str, ...]
    options: tuple[str, ...]

    @property
    def backward(self) -> bool:
        return self.forward != self.name

    @property
    def own_tiles(self) -> bool:
        """Whether the schedule has its own default tiles (``default_blocks``: flash_decode's
        are flash-attn's split-KV tiles) instead of the seed's rule B = M/(4d)."""
        return hasattr(self.module, "default_blocks")

    @property
    def reads_paged_kv(self) -> bool:
        """Whether the schedule reads a paged KV cache (``AttentionShape.paged_kv``: the
        module's ``PAGED_KV``, flash_decode's); the others refuse a paged shape."""
        return getattr(self.module, "PAGED_KV", False)

    @property
    def needs_sm_count(self) -> bool:
        """Whether the schedule's options depend on the GPU's SM count (flash_decode's split
        heuristic): callers that know the GPU pass ``sm_count``."""
        return "sm_count" in self.options

    def traffic(self, sched) -> list[tuple[str, int, int, int]]:
        """Exact global (tensor, element bytes, elements read, elements written) of
        ``sched``, from the closed form of its loop order (docs/io.md)."""
        return self.module.traffic(sched)

    def outer_steps(self, sched, block_sums) -> tuple[int, ...]:
        """Outer-loop steps per kernel of ``sched``, summed over its CTAs."""
        return self.module.outer_steps(sched, block_sums)

    def on_chip_bytes(self, sched) -> int:
        """Shared memory plus register tiles per CTA, the largest over its kernels."""
        return self.module.on_chip_bytes(sched)


@cache
def spec(name: str) -> ScheduleSpec:
    """The registered :class:`ScheduleSpec` of schedule ``name`` (one of ``SCHEDULES``)."""
    if name not in SCHEDULES:
        raise TilingError(f"unknown schedule {name!r}; choose one of {', '.join(SCHEDULES)}")
    mod = importlib.import_module(f"flashio.kernels.{name}")
    return ScheduleSpec(
        name=name,
        module=mod,
        forward=mod.FORWARD,
        every_tile=mod.EVERY_TILE,
        matmul_products=mod.MATMUL_PRODUCTS,
        bound_constant=mod.BOUND_CONSTANT,
        warp_specialized=mod.WARP_SPECIALIZED,
        options=tuple(getattr(mod, "OPTIONS", ())),
    )
