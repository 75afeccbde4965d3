"""The trace format: what a block schedule does, one tile event at a time.

A trace is columnar: one numpy structured array (``EVENT_DTYPE``), no Python object per event,
ordered by (kernel, CTA, sequence within the CTA) and read-only once built. The simulator knows
nothing about attention: events name tensors by index into ``TraceMeta.tensors`` and describe a
memory access as a strided 2-D region (``rows`` rows of ``row_bytes`` bytes, ``row_stride_bytes``
apart, starting ``offset_bytes`` into the tensor), which is all an L2 model needs.
"""

from __future__ import annotations

import enum
import json
import os
import zipfile
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np
from numba import njit

from flashio.simulator._atomic import atomic_write
from flashio.simulator.errors import FileError

__all__ = [
    "EVENT_DTYPE",
    "KernelInfo",
    "Op",
    "Space",
    "TensorInfo",
    "Trace",
    "TraceMeta",
    "TraceSource",
]


class Op(enum.IntEnum):
    """What an event does. Plain integers so numba sees them as such."""

    LOAD = 0  # global memory -> shared memory/registers of the CTA (bytes)
    STORE = 1  # shared memory/registers -> global memory (bytes)
    REDUCE = 2  # atomic add into global memory, done at L2 (bytes sent by the SM)
    MMA = 3  # tensor-core matrix multiply (flops = 2*m*n*k)
    ELEMENTWISE = 4  # FP32 non-tensor arithmetic (flops = operations)
    EXP = 5  # special-function unit exponentials (flops = number of exps)
    SHARED = 6  # exchange between the CTA's warps through shared memory (bytes)
    SYNC = 7  # barrier across the CTA's warps
    ALLOC = 8  # an on-chip buffer (shared memory or registers) becomes live (bytes)
    FREE = 9  # an on-chip buffer dies (bytes)


MEMORY_OPS = (Op.LOAD, Op.STORE, Op.REDUCE)


class Space(enum.IntEnum):
    """Where a tensor lives."""

    GLOBAL = 0  # device memory (HBM, cached by L2)
    SHARED = 1  # a shared-memory buffer of one CTA
    REGISTERS = 2  # a tile held in the registers of the CTA's threads


EVENT_DTYPE = np.dtype(
    [
        ("kernel", np.uint8),  # index into TraceMeta.kernels
        ("cta", np.int32),  # linear CTA index within the kernel (dispatch order)
        ("step", np.int32),  # iteration of the CTA's outer loop (-1: outside it)
        ("op", np.uint8),  # Op
        ("tensor", np.int16),  # index into TraceMeta.tensors, -1 when none
        ("block_row", np.int32),  # block index along the tensor's rows (-1: not blocked)
        ("block_col", np.int32),  # block index along its columns (-1: not blocked)
        ("offset_bytes", np.int64),  # start of the region within the tensor
        ("rows", np.int32),  # rows in the region
        ("row_bytes", np.int32),  # bytes per row of the region
        ("row_stride_bytes", np.int64),  # distance between region rows in the tensor
        ("bytes", np.int64),  # bytes moved (memory ops), live bytes (alloc/free)
        ("flops", np.int64),  # arithmetic operations (mma, elementwise, exp)
    ]
)


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """A tensor in global memory, or a shared-memory buffer of one CTA."""

    name: str
    space: Space
    shape: tuple[int, ...]
    elem_bytes: int

    @property
    def size_bytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.elem_bytes


@dataclass(frozen=True, slots=True)
class KernelInfo:
    """One kernel launch: its grid and per-CTA resources."""

    name: str
    ctas: int  # CTAs in the grid, dispatched in index order
    warps: int  # warps per CTA
    smem_bytes: int  # peak live shared memory per CTA
    regs_per_thread: int  # registers per thread the kernel needs (may exceed the limit: spills)

    def __post_init__(self):
        for f in ("ctas", "warps", "regs_per_thread"):
            if getattr(self, f) < 1:
                raise ValueError(f"KernelInfo.{f} must be >= 1, got {getattr(self, f)}")
        if self.smem_bytes < 0:
            raise ValueError(f"KernelInfo.smem_bytes must be >= 0, got {self.smem_bytes}")


@dataclass(frozen=True, slots=True)
class TraceMeta:
    """What produced a trace: schedule, parameters, kernels and tensors."""

    schedule: str
    params: dict[str, Any] = field(hash=False)
    kernels: tuple[KernelInfo, ...]
    tensors: tuple[TensorInfo, ...]

    def tensor_index(self, name: str) -> int:
        for i, t in enumerate(self.tensors):
            if t.name == name:
                return i
        names = ", ".join(t.name for t in self.tensors)
        raise KeyError(f"no tensor {name!r} in this trace; it has {names}")

    def to_json(self) -> str:
        d = asdict(self)
        d["tensors"] = [dict(t, space=int(t["space"])) for t in d["tensors"]]
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TraceMeta:
        d = json.loads(text)
        return cls(
            schedule=d["schedule"],
            params=d["params"],
            kernels=tuple(KernelInfo(**k) for k in d["kernels"]),
            tensors=tuple(
                TensorInfo(t["name"], Space(t["space"]), tuple(t["shape"]), t["elem_bytes"])
                for t in d["tensors"]
            ),
        )


class TraceSource(Protocol):
    """Anything the simulator can replay: a whole Trace, or a schedule that makes events lazily.

    ``cta_events(kernel, start, stop)`` returns the events of CTAs ``start <= cta < stop`` of one
    kernel, in trace order, so that long traces are consumed in bounded memory. A source whose
    ``cta_events`` also takes ``out=`` (an array to write into when the events fit, returning
    that view, as ``kernels.Schedule`` does) lets the simulator reuse its buffers.
    """

    @property
    def meta(self) -> TraceMeta: ...

    def cta_events(self, kernel: int, start: int, stop: int) -> np.ndarray: ...


@njit(cache=True)
def _is_ordered(kernel, cta):
    for i in range(1, kernel.size):
        if kernel[i] < kernel[i - 1] or (kernel[i] == kernel[i - 1] and cta[i] < cta[i - 1]):
            return False
    return True


class Trace:
    """A complete, read-only trace: ``events`` (EVENT_DTYPE) plus ``meta``."""

    __slots__ = ("_keys", "events", "meta")

    def __init__(self, events: np.ndarray, meta: TraceMeta):
        """Wrap ``events`` (taking ownership: the array is made read-only, not copied)."""
        if events.dtype != EVENT_DTYPE:
            raise ValueError(f"events must have dtype EVENT_DTYPE, got {events.dtype}")
        if events.ndim != 1:
            raise ValueError(f"events must be 1-D, got shape {events.shape}")
        if not _is_ordered(events["kernel"], events["cta"]):
            raise ValueError("events must be ordered by (kernel, cta)")
        events.flags.writeable = False
        self.events = events
        self.meta = meta
        self._keys = None

    def __len__(self) -> int:
        return self.events.size

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trace):
            return NotImplemented
        return self.meta == other.meta and np.array_equal(self.events, other.events)

    def __repr__(self) -> str:
        return (
            f"Trace({self.meta.schedule!r}, {len(self)} events, {len(self.meta.kernels)} kernels)"
        )

    def cta_events(self, kernel: int, start: int, stop: int) -> np.ndarray:
        keys = self._sort_keys()
        lo = np.searchsorted(keys, (kernel << 32) | start, side="left")
        hi = np.searchsorted(keys, (kernel << 32) | stop, side="left")
        return self.events[lo:hi]

    def _sort_keys(self) -> np.ndarray:
        if self._keys is None:  # (kernel, cta) as one sortable key, built on first use
            ev = self.events
            self._keys = ev["kernel"].astype(np.int64) << 32 | ev["cta"].astype(np.int64)
        return self._keys

    def with_meta(self, meta: TraceMeta) -> Trace:
        """The same events under ``meta`` (a prefix's, of fewer CTAs), sharing the array: a
        replay asks only for the CTAs its meta names."""
        view = object.__new__(Trace)
        view.events, view.meta, view._keys = self.events, meta, self._sort_keys()
        return view

    def bytes_by(self, op: Op) -> dict[str, int]:
        """Total bytes per tensor name for one memory op (LOAD, STORE or REDUCE)."""
        sel = self.events[self.events["op"] == op]
        totals = np.bincount(sel["tensor"], weights=sel["bytes"], minlength=len(self.meta.tensors))
        return {t.name: int(totals[i]) for i, t in enumerate(self.meta.tensors) if totals[i]}

    def save(self, path: str | os.PathLike) -> None:
        """Write ``events`` and ``meta`` to a compressed ``.npz`` file (``.npz`` is appended if
        ``path`` lacks it), whole or not at all (:func:`simulator.atomic_write`)."""
        path = os.fspath(path)
        path = path if path.endswith(".npz") else path + ".npz"
        with atomic_write(path, "wb") as f:
            np.savez_compressed(f, events=self.events, meta=np.array(self.meta.to_json()))

    @classmethod
    def load(cls, path: str | os.PathLike) -> Trace:
        """Read a trace written by :meth:`save`.

        Raises
        ------
        FileError
            The file is missing, unreadable, not a ``.npz`` or not a trace; the message names it.
        """
        try:
            with np.load(path, allow_pickle=False) as f:
                return cls(f["events"], TraceMeta.from_json(str(f["meta"])))
        except (OSError, EOFError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as err:
            why = err.strerror if isinstance(err, OSError) and err.strerror else err
            raise FileError(f"{os.fspath(path)}: not a flashio trace (.npz): {why}") from None

    @classmethod
    def from_source(cls, source: TraceSource) -> Trace:
        """Materialise every event of a lazy source (only for traces that fit in memory)."""
        parts = [source.cta_events(k, 0, info.ctas) for k, info in enumerate(source.meta.kernels)]
        events = np.concatenate(parts) if parts else np.empty(0, EVENT_DTYPE)
        return cls(events, source.meta)
