"""Output files written whole or not at all: a temporary file beside the target, then a rename.

Every file flashio writes for the user (CSV, JSON, plots, saved traces, docs) goes through
:func:`atomic_write`, so that a run that fails, or is interrupted, never leaves a half-written
file at the path the user named: the path keeps its old content, or does not appear.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from flashio.simulator.errors import FileError

__all__ = ["atomic_write"]


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", **open_kwargs) -> Iterator[IO]:
    """Open a temporary file beside ``path`` for writing; rename it to ``path`` on success.

    Parameters
    ----------
    path : str or os.PathLike
        The file to write. Missing parent folders are created.
    mode : str
        ``"w"`` (text, UTF-8 unless ``encoding`` is given) or ``"wb"`` (binary).
    **open_kwargs
        Passed to :func:`open`, e.g. ``newline=""`` for CSV.

    Yields
    ------
    file object
        The temporary file. When the ``with`` block raises, the file is deleted and ``path`` is
        left as it was; otherwise it replaces ``path`` (``os.replace``, atomic on one file
        system).

    Raises
    ------
    FileError
        The folder cannot be created or written, or ``path`` is a folder; the message names it.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write mode must be 'w' or 'wb', got {mode!r}")
    if mode == "w":
        open_kwargs.setdefault("encoding", "utf-8")
    path = Path(path)
    if path.is_dir():
        raise FileError(f"{path}: is a folder; give the path of a file to write")
    # the same folder, so that the rename cannot cross file systems; hidden, so that a listing
    # during the write does not show it; opened with "x", so that it honours the umask
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(tmp, mode.replace("w", "x"), **open_kwargs)  # closed below, before the rename
    except OSError as err:
        raise FileError(f"{path}: cannot write: {err.strerror or err}") from None
    try:
        with f:
            yield f
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, OSError):  # disk full, quota: the environment, not a bug
            raise FileError(f"{path}: cannot write: {err.strerror or err}") from err
        raise
