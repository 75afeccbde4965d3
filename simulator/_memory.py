"""Large arrays on huge pages, where the OS gives them.

A replay writes its windows of events into fresh memory, and the first touch of each 4 KiB page
is a page fault: on a 2-core Linux virtual machine a fresh 400 MB array written page by page took
0.94 s, the same array on 2 MiB pages (anonymous memory advised MADV_HUGEPAGE) 0.16 s. At
N = 128k the first windows are about 190 MB each, made while the engine waits for them.
"""

from __future__ import annotations

import mmap

import numpy as np

# Smaller arrays stay with the C allocator: a sweep's points make windows of tens of MB again
# and again, and there fresh huge pages were slower than what the allocator reuses (40 points:
# 10.8-11.0 s against 9.4-11.2 s)
HUGE_MIN_BYTES = 64 << 20
_HUGE = getattr(mmap, "MADV_HUGEPAGE", None)  # Linux only
_PRIVATE = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)


def empty(n: int, dtype) -> np.ndarray:
    """``np.empty(n, dtype)``, on huge pages when it is large and the OS offers them."""
    dtype = np.dtype(dtype)
    nbytes = n * dtype.itemsize
    if _HUGE is None or nbytes < HUGE_MIN_BYTES:
        return np.empty(n, dtype)
    # private: a shared mapping is backed by shmem, whose huge pages the OS may refuse where
    # it gives them to private memory (400 MB written, five each alternating: 0.19-0.24 s
    # shared, 0.09-0.10 s private)
    m = mmap.mmap(-1, nbytes, flags=_PRIVATE)
    try:
        m.madvise(_HUGE)
    except OSError:  # advice refused (huge pages off): ordinary pages, still correct
        pass
    return np.frombuffer(m, dtype, count=n)  # the array and its views keep the mapping alive
