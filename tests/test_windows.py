"""simulator._windows: the windows of events the engine replays, against the whole trace."""

import numpy as np
import pytest

from flashio import kernels
from flashio.simulator._windows import Windows, cta_offsets
from flashio.simulator.trace import EVENT_DTYPE


@pytest.mark.parametrize("causal", [False, True])
def test_windows_hold_each_ctas_events_and_the_carried_ones(causal):
    """Window after window (made ahead, in recycled buffers), the new CTAs' events equal the
    trace's and the carried parts sit where ``advance`` says, intact."""
    shape = kernels.AttentionShape(batch=1, heads=3, seq_len=300, head_dim=32, causal=causal)
    sched = kernels.schedule("flash2", shape, block_q=32, block_kv=16)
    trace = sched.trace()
    ctas = sched.kernels[0].ctas
    slots = 2
    windows = Windows(sched, 0, ctas, width=7, slots=slots)  # windows of 4 CTAs, then 7
    try:
        seen = 0
        while True:
            ev, off, c0, c1 = windows.current
            assert not ev.flags.writeable  # one kind of array: the engine compiles once
            for c in range(c0, c1):
                got = ev[off[c - c0] : off[c - c0 + 1]]
                assert np.array_equal(got, trace.cta_events(0, c, c + 1)), c
            seen = c1
            if c1 == ctas:
                break
            # carry the tails of the window's last two CTAs, as resident CTAs would be
            parts = [
                ev[off[j] + (off[j + 1] - off[j]) // 2 : off[j + 1]]
                for j in (c1 - c0 - 2, c1 - c0 - 1)
            ]
            expected = [p.copy() for p in parts]
            starts = windows.advance(parts)
            ev = windows.current[0]
            for a, want in zip(starts, expected, strict=True):
                assert np.array_equal(ev[a : a + len(want)], want)
        assert seen == ctas
    finally:
        windows.close()


def test_cta_offsets_bisect_to_each_ctas_first_event_even_an_empty_ctas():
    """Offsets found by bisection equal those counted event by event, for a window that
    starts at CTA 5 and whose CTAs 6 and 8 have no events."""
    ev = np.zeros(9, EVENT_DTYPE)
    ev["cta"] = [5, 5, 7, 7, 7, 9, 9, 9, 9]
    counted = np.concatenate([[0], np.cumsum(np.bincount(ev["cta"] - 5, minlength=5))])
    assert cta_offsets(ev, 5, 10).tolist() == counted.tolist() == [0, 2, 2, 5, 5, 9]
