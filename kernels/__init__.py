"""Attention shapes, block schedules, numeric executors and references."""

from flashio.kernels.block_mask import BlockMask
from flashio.kernels.execute import execute
from flashio.kernels.implementation import (
    IMPLEMENTATIONS,
    Implementation,
    ImplementationError,
    Tiling,
    implementation,
)
from flashio.kernels.paged_kv import PagedKV
from flashio.kernels.reference import attention_backward, attention_forward
from flashio.kernels.schedules import SCHEDULES, Schedule, default_block, schedule
from flashio.kernels.shape import DTYPES, AttentionShape
from flashio.simulator.errors import ShapeError, TilingError

__all__ = [
    "DTYPES",
    "IMPLEMENTATIONS",
    "SCHEDULES",
    "AttentionShape",
    "BlockMask",
    "Implementation",
    "ImplementationError",
    "PagedKV",
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
