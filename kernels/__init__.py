"""Attention shapes, block schedules, numeric executors and references."""

from kernels.execute import execute
from kernels.implementation import (
    IMPLEMENTATIONS,
    Implementation,
    ImplementationError,
    Tiling,
    implementation,
)
from kernels.reference import attention_backward, attention_forward
from kernels.schedules import SCHEDULES, Schedule, default_block, schedule
from kernels.shape import DTYPES, AttentionShape
from simulator.errors import ShapeError, TilingError

__all__ = [
    "DTYPES",
    "IMPLEMENTATIONS",
    "SCHEDULES",
    "AttentionShape",
    "Implementation",
    "ImplementationError",
    "Schedule",
    "ShapeError",
    "Tiling",
    "TilingError",
    "attention_backward",
    "attention_forward",
    "default_block",
    "execute",
    "implementation",
    "schedule",
]
