"""simulator._memory: large event arrays on huge pages, small ones from the C allocator."""

import mmap

import numpy as np

from flashio.simulator import _memory
from flashio.simulator.trace import EVENT_DTYPE


def test_small_arrays_are_ordinary_and_large_ones_writable_mappings():
    small = _memory.empty(10, EVENT_DTYPE)
    assert small.dtype == EVENT_DTYPE and len(small) == 10 and small.base is None
    n = _memory.HUGE_MIN_BYTES // EVENT_DTYPE.itemsize + 1
    big = _memory.empty(n, EVENT_DTYPE)
    assert big.dtype == EVENT_DTYPE and len(big) == n and big.flags.writeable
    if _memory._HUGE is not None:  # Linux: an anonymous mapping under the array
        assert isinstance(big.base.obj, mmap.mmap)
    big["cta"] = np.arange(n) % 1000  # every page writable, every record kept
    view = big[n - 5 :]
    del big
    assert view["cta"].tolist() == [(n - 5 + i) % 1000 for i in range(5)]  # the view keeps it
