"""The errors flashio raises for bad input: one base type, a subclass per kind of input.

Every error here is a :class:`FlashioError`, and a ``FlashioError`` is a ``ValueError``, so
``except ValueError`` in user code keeps working. The ``flashio`` command reports a
``FlashioError`` as ``flashio <verb>: error: <message>`` with exit status 2; any other exception
is a bug in flashio and ends with its traceback and exit status 1.

Defined in ``simulator`` (the bottom layer) so that ``kernels`` and ``analysis`` raise the same
types; each package re-exports them.
"""

from __future__ import annotations

__all__ = [
    "CapacityError",
    "FileError",
    "FlashioError",
    "GPUSpecError",
    "ShapeError",
    "TilingError",
    "UsageError",
]


class FlashioError(ValueError):
    """Bad input: a value, file or combination of arguments flashio cannot work with.

    The message says what was wrong and, where it can, what would be right.
    """


class GPUSpecError(FlashioError):
    """A GPU spec (a value, or a spec file) is invalid; the message says where and why.

    ``key`` is the offending field when there is one, else ``None``.
    """

    def __init__(self, message: str, *, key: str | None = None):
        super().__init__(message)
        self.key = key


class CapacityError(FlashioError):
    """A kernel's on-chip tiles do not fit the GPU (shared memory per CTA, threads per CTA)."""


class ShapeError(FlashioError):
    """An attention shape (batch, heads, sequence length, head dim, dtype, mask) is invalid."""


class TilingError(FlashioError):
    """A schedule's parameters are invalid: its name, block sizes, warps or options."""


class FileError(FlashioError):
    """A file the user named cannot be read, parsed or written; the message names the path."""


class UsageError(FlashioError):
    """Command-line arguments that are each valid but make no sense together, or out of range."""
