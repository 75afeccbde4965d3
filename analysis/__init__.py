"""Analysis on top of the simulator and the schedules: comparisons, tiling, sweeps, plots.

The schedule DAG (networkx) and the hypothesis strategies load on first use, so that a command
that needs neither (``flashio simulate``) does not import them."""

import importlib

from flashio.analysis.closed_form.bounds import (
    IORegime,
    compulsory_bytes,
    flash_order,
    io_regime,
    lower_bound_order,
    on_chip_bytes,
    schedule_lower_bound_bytes,
    sram_elements,
    standard_crossover,
    standard_order,
)
from flashio.analysis.closed_form.capacity import Capacity, Tile, tile_capacity
from flashio.analysis.closed_form.flops import (
    RecomputeRatios,
    Roofline,
    algorithmic_flops,
    matmul_flops,
    recompute_ratios,
    ridge_point,
    roofline,
)
from flashio.analysis.closed_form.io import IOCounts, TensorIO, io_counts, io_counts_of
from flashio.analysis.closed_form.tiling import (
    KernelFit,
    TilingForm,
    TilingRule,
    kernel_fit,
    tiling_rule,
)
from flashio.analysis.explore.comparison import ComparisonRow, compare
from flashio.analysis.explore.search import (
    SearchPlan,
    TileResult,
    plan_search,
    search_notes,
    search_tiles,
)

__all__ = [
    "Capacity",
    "ComparisonRow",
    "DagStats",
    "IOCounts",
    "IORegime",
    "KernelFit",
    "Problem",
    "RecomputeRatios",
    "Roofline",
    "SearchPlan",
    "TensorIO",
    "Tile",
    "TileResult",
    "TilingForm",
    "TilingRule",
    "algorithmic_flops",
    "compare",
    "compulsory_bytes",
    "dag_stats",
    "flash_order",
    "io_counts",
    "io_counts_of",
    "io_regime",
    "kernel_fit",
    "lower_bound_order",
    "matmul_flops",
    "on_chip_bytes",
    "plan_search",
    "recompute_ratios",
    "ridge_point",
    "roofline",
    "schedule_dag",
    "schedule_lower_bound_bytes",
    "search_notes",
    "search_tiles",
    "sram_elements",
    "standard_crossover",
    "standard_order",
    "strategies",
    "tile_capacity",
    "tiling_rule",
    "validate_trace",
]

_LAZY = {name: "flashio.analysis.dag.graph" for name in ("DagStats", "dag_stats", "schedule_dag")}
_LAZY |= {name: "flashio.analysis.dag.trace_check" for name in ("Problem", "validate_trace")}
_LAZY["strategies"] = None  # the submodule itself


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'analysis' has no attribute {name!r}")
    if _LAZY[name] is None:
        return importlib.import_module(f"flashio.analysis.{name}")
    return getattr(importlib.import_module(_LAZY[name]), name)
