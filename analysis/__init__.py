"""Analysis on top of the simulator and the schedules: comparisons, tiling, sweeps, plots."""

from analysis.capacity import Capacity, Tile, tile_capacity
from analysis.comparison import ComparisonRow, compare
from analysis.search import SearchPlan, TileResult, plan_search, search_notes, search_tiles
from analysis.tiling import KernelFit, TilingForm, TilingRule, kernel_fit, tiling_rule

__all__ = [
    "Capacity",
    "ComparisonRow",
    "KernelFit",
    "SearchPlan",
    "Tile",
    "TileResult",
    "TilingForm",
    "TilingRule",
    "compare",
    "kernel_fit",
    "plan_search",
    "search_notes",
    "search_tiles",
    "tile_capacity",
    "tiling_rule",
]
