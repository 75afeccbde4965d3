"""Attention shapes, block schedules, numeric executors and references."""

from kernels.execute import execute
from kernels.reference import attention_backward, attention_forward
from kernels.schedules import SCHEDULES, Schedule, default_block, schedule
from kernels.shape import DTYPES, AttentionShape
from simulator.errors import ShapeError, TilingError

__all__ = [
    "DTYPES",
    "SCHEDULES",
    "AttentionShape",
    "Schedule",
    "ShapeError",
    "TilingError",
    "attention_backward",
    "attention_forward",
    "default_block",
    "execute",
    "schedule",
]
