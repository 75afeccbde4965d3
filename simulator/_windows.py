"""Windows of CTAs' events for the engine: bounded memory for long traces, made ahead of time.

A whole ``Trace`` is already in memory, so each kernel is one window (a view, no copy). Any other
source (a schedule making events lazily) is consumed in windows of CTAs; the next window is made
in a background thread while the engine replays the current one. Both release the GIL, so on two
cores most of the trace generation is hidden.

CTAs still resident when the engine reaches the end of a window carry their remaining events
into the next. Each window is made with room in front for them, so that only the carried events
are copied, and into a recycled buffer when the source can write into one (fresh memory costs a
page fault per 4 KiB).
"""

from __future__ import annotations

import inspect
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from flashio.simulator._memory import empty
from flashio.simulator.trace import Trace, TraceSource


@njit(cache=True, nogil=True)
def cta_offsets(ev, c0, c1):
    """Start of each CTA ``c0..c1`` in ``ev`` (ordered by CTA, as a trace is), and the end:
    ``c1 - c0 + 1`` entries. Found by bisection: a pass that counts would read the whole window
    again (0.38 of the 3.5 s that making FA2's windows at N = 64k takes)."""
    off = np.empty(c1 - c0 + 1, np.int64)
    lo = 0
    for j in range(c1 - c0 + 1):
        hi = ev.shape[0]
        while lo < hi:  # the first event of a CTA >= c0 + j, at or after the previous start
            mid = (lo + hi) >> 1
            if ev[mid].cta < c0 + j:
                lo = mid + 1
            else:
                hi = mid
        off[j] = lo
    return off


def _raw(ev: np.ndarray) -> np.ndarray:
    """The events as opaque records: numpy copies a packed structured dtype field by field,
    ten times slower than whole records."""
    return ev.view(np.dtype((np.void, ev.dtype.itemsize)))


def _data(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _read_only(ev: np.ndarray) -> np.ndarray:
    """A read-only view: the engine is compiled for one kind of array, and a ``Trace``'s
    events are read-only (each kind would compile the engine again, a minute or more)."""
    view = ev.view()
    view.flags.writeable = False
    return view


def _takes_out(source: TraceSource) -> bool:
    try:
        return "out" in inspect.signature(source.cta_events).parameters
    except (TypeError, ValueError):
        return False


class Windows:
    """The events of one kernel's CTAs, window by window.

    ``current`` is ``(events, offsets, c0, c1)``: the events of CTAs ``c0 <= c < c1`` (after the
    remaining events of CTAs carried over from earlier windows) and each of these CTAs' start in
    them. ``advance(parts)`` moves to the next window with ``parts`` (the carried CTAs' remaining
    events) in front, and returns where each part starts.
    """

    def __init__(
        self, source: TraceSource, kernel: int, ctas: int, width: int, slots: int,
        in_order: bool = True,
    ):  # fmt: skip
        """``in_order`` False: the windows after the first are not the next CTAs in order but
        those ``seek`` asks for, made then (no window is made ahead)."""
        self._source, self._kernel, self._ctas, self._slots = source, kernel, ctas, slots
        self._max_width = ctas if isinstance(source, Trace) else width
        ahead = in_order and self._max_width < ctas
        self._pool = ThreadPoolExecutor(max_workers=1) if ahead else None
        self._takes_out = _takes_out(source)
        # the first window is made before the engine can start: small (at most two waves),
        # then the windows double up to ``width`` while the engine replays
        self._width = self._max_width if self._pool is None else min(width, 2 * slots)
        c1 = min(ctas, self._width)
        ev = source.cta_events(kernel, 0, c1)
        off = cta_offsets(ev, 0, c1)
        self._most = int(np.diff(off).max(initial=0))  # most events of one CTA so far
        self.current = (_read_only(ev), off, 0, c1)
        self._buffer = None  # the memory under ``current`` once it is one this class made
        self._ahead = self._submit(c1, spare=None)

    def _submit(self, c0: int, spare: np.ndarray | None):
        self._width = min(self._max_width, 2 * self._width)
        c1 = min(self._ctas, c0 + self._width)
        if self._pool is None or c0 >= c1:
            return None
        # carried CTAs come from the windows made so far: at most slots x the longest of them
        room = self._slots * self._most
        return self._pool.submit(self._make, c0, c1, room, spare), c0, c1

    def _make(self, c0: int, c1: int, room: int, spare: np.ndarray | None):
        """The events of CTAs c0..c1 at ``buffer[room:room + n]``: (buffer, room, offsets).
        ``buffer`` is ``spare`` when the source can write into it and they fit."""
        if self._takes_out:
            if spare is None:  # a first buffer, recycled from now on
                first = self._source.cta_events(self._kernel, c0, min(c1, c0 + 1))
                spare = empty(room + (c1 - c0) * max(len(first), self._most), first.dtype)
            if len(spare) > room:
                ev = self._source.cta_events(self._kernel, c0, c1, out=spare[room:])
                if _data(ev) == _data(spare[room:]):  # written in place
                    return spare, room, cta_offsets(ev, c0, c1)
            else:
                ev = self._source.cta_events(self._kernel, c0, c1)
        else:
            ev = self._source.cta_events(self._kernel, c0, c1)
        buf = empty(room + len(ev), ev.dtype)
        _raw(buf)[room:] = _raw(ev)
        return buf, room, cta_offsets(ev, c0, c1)

    def advance(self, parts: list[np.ndarray]) -> list[int]:
        """Next window, ``parts`` in front of it. Returns the start of each part."""
        future, c0, c1 = self._ahead
        buf, room, off = future.result()
        starts = self._place(buf, room, off, parts, c0, c1)
        # the old window has been copied from: its buffer is free for the window after this one
        spare, self._buffer = self._buffer, buf
        self._ahead = self._submit(c1, spare)
        return starts

    def seek(self, c0: int, c1: int, parts: list[np.ndarray]) -> list[int]:
        """The window of CTAs ``c0 <= c < c1``, made now, ``parts`` in front (a static tile
        scheduler's slots each take their own next CTA, so the CTAs still to come need not
        follow the last window's). Returns the start of each part."""
        buf, room, off = self._make(c0, c1, sum(len(p) for p in parts), None)
        return self._place(buf, room, off, parts, c0, c1)

    def _place(self, buf, room: int, off, parts: list[np.ndarray], c0: int, c1: int) -> list[int]:
        """Make CTAs c0..c1, made at ``buf[room:]`` with offsets ``off``, the current window,
        the carried ``parts`` copied into the room in front. Returns where each part starts."""
        sizes = [len(p) for p in parts]
        carried = sum(sizes)
        assert carried <= room, "carried CTAs outgrew their room"  # at most slots x the longest
        ev = buf[room - carried : room + off[-1]]
        starts = np.cumsum([0, *sizes])
        for part, a in zip(parts, starts, strict=False):
            _raw(ev)[a : a + len(part)] = _raw(part)
        self._most = max(self._most, int(np.diff(off).max(initial=0)))
        self.current = (_read_only(ev), off + carried, c0, c1)
        return [int(a) for a in starts[:-1]]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
