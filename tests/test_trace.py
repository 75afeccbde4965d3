"""The trace format: columnar, read-only, ordered, saved and loaded whole."""

import numpy as np
import pytest

from flashio import kernels
from flashio.simulator import EVENT_DTYPE, Op, Trace


def _trace():
    shape = kernels.AttentionShape(2, 2, 37, 16, "fp16", kv_heads=1)
    return kernels.schedule("flash2_bwd", shape, 8, 16).trace()


def test_events_are_read_only_and_ordered(tmp_path):
    t = _trace()
    assert t.events.dtype == EVENT_DTYPE
    with pytest.raises(ValueError):
        t.events["bytes"][0] = 1
    key = t.events["kernel"].astype(np.int64) << 32 | t.events["cta"]
    assert np.all(np.diff(key) >= 0)
    path = tmp_path / "t.npz"
    t.save(path)
    back = Trace.load(path)
    assert back == t and back.meta.kernels == t.meta.kernels
    assert not back.events.flags.writeable


def test_unordered_events_are_refused():
    ev = _trace().events.copy()
    with pytest.raises(ValueError, match="ordered by"):
        Trace(ev[::-1].copy(), _trace().meta)


def test_cta_ranges_partition_the_trace():
    t = _trace()
    sched = kernels.schedule(
        "flash2_bwd", kernels.AttentionShape(2, 2, 37, 16, "fp16", kv_heads=1), 8, 16
    )
    parts = []
    for k, info in enumerate(t.meta.kernels):
        for c0 in range(0, info.ctas, 3):
            chunk = t.cta_events(k, c0, min(info.ctas, c0 + 3))
            assert np.array_equal(chunk, sched.cta_events(k, c0, min(info.ctas, c0 + 3)))
            parts.append(chunk)
    assert np.array_equal(np.concatenate(parts), t.events)


def test_bytes_by_tensor():
    t = _trace()
    loads = t.bytes_by(Op.LOAD)
    sel = t.events[(t.events["op"] == Op.LOAD) & (t.events["tensor"] == t.meta.tensor_index("K"))]
    assert loads["K"] == int(sel["bytes"].sum()) > 0
    assert "dQ_acc" in t.bytes_by(Op.REDUCE)
    with pytest.raises(KeyError, match="no tensor 'S'"):
        t.meta.tensor_index("S")


def test_cta_events_into_a_buffer():
    """``out=``: the events land in its start when they fit (a view of it), else in a new array;
    a buffer of another dtype is refused."""
    sched = kernels.schedule("flash2", kernels.AttentionShape(1, 2, 64, 16), 16, 16)
    want = sched.cta_events(0, 1, 3)
    big = np.zeros(len(want) + 5, EVENT_DTYPE)
    got = sched.cta_events(0, 1, 3, out=big)
    assert np.array_equal(got, want) and np.shares_memory(got, big)
    assert np.array_equal(big[: len(want)], want)
    small = np.zeros(len(want) - 1, EVENT_DTYPE)
    got = sched.cta_events(0, 1, 3, out=small)
    assert np.array_equal(got, want) and not np.shares_memory(got, small)
    with pytest.raises(ValueError, match="EVENT_DTYPE"):
        sched.cta_events(0, 1, 3, out=np.zeros(100))


def test_events_beyond_a_small_buffer_are_not_written():
    """Written in one pass where they may not fit, the events that do not fit are counted, not
    written past the buffer's end."""
    sched = kernels.schedule("flash2", kernels.AttentionShape(1, 2, 64, 16), 16, 16)
    want = sched.cta_events(0, 0, 4)
    room = np.zeros(len(want), EVENT_DTYPE)
    room["cta"] = -7  # a sentinel after the buffer handed over
    got = sched.cta_events(0, 0, 4, out=room[: len(want) // 2])
    assert np.array_equal(got, want)
    assert (room["cta"][len(want) // 2 :] == -7).all()
