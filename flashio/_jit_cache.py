"""Where numba keeps the machine code of flashio's jitted functions: one directory per version
of their sources.

numba's cache (``@njit(cache=True)``) is invalidated only when the file of a cached function
changes. The engine inlines functions and reads constants of other files (the L2 model of
simulator/_l2.py, the state layout of simulator/_state.py, the tracers' mask helpers of
kernels/mask.py), so an edit or an upgrade that touches only those would leave stale machine
code running. Unless ``NUMBA_CACHE_DIR`` is set, the cache therefore lives in a directory named
by a digest of the size and modification time of every Python file of the folders that hold
jitted code; the newest ``KEEP`` such directories are kept.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

ENV = "NUMBA_CACHE_DIR"
OURS = "FLASHIO_NUMBA_CACHE_DIR"  # set beside ENV when the directory is this module's choice
KEEP = 8  # cache directories of other source versions kept (other checkouts, recent edits)
PREFIX = "numba-"


def source_digest(folders) -> str:
    """A digest of the path, size and modification time of every ``.py`` file under
    ``folders`` (16 hex digits)."""
    h = hashlib.sha1()
    for folder in folders:
        root = Path(folder)
        for path in sorted(root.rglob("*.py")):
            st = path.stat()
            h.update(f"{path.relative_to(root)}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:16]


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "flashio"


def _prune(root: Path, keep: int = KEEP) -> None:
    """Remove all but the ``keep`` most recently modified cache directories under ``root``."""
    try:
        dirs = sorted(
            (d for d in root.iterdir() if d.is_dir() and d.name.startswith(PREFIX)),
            key=lambda d: d.stat().st_mtime,
            reverse=True,
        )
    except OSError:
        return
    for d in dirs[keep:]:
        shutil.rmtree(d, ignore_errors=True)


def configure(folders) -> str | None:
    """Point numba's cache at the directory of this version of ``folders``' sources, unless the
    user chose one (``NUMBA_CACHE_DIR`` set by someone else). Returns the directory used, or
    None where the user's is."""
    chosen = os.environ.get(ENV)
    if chosen and chosen != os.environ.get(OURS):
        return None
    root = cache_root()
    path = root / (PREFIX + source_digest(folders))
    if not path.exists():
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError:
            return None  # an unwritable home: numba's own cache beside the sources
        _prune(root)
    os.environ[ENV] = os.environ[OURS] = str(path)  # worker processes find the same one
    numba = sys.modules.get("numba")
    if numba is not None:  # imported before flashio: its configuration is already read
        numba.config.CACHE_DIR = str(path)
    return str(path)
