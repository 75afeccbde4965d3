"""Analysis on top of the simulator and the schedules: comparisons, reports, the CLI."""

from analysis.comparison import ComparisonRow, compare

__all__ = ["ComparisonRow", "compare"]
