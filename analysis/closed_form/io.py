"""Exact closed-form global traffic of every schedule, derived by hand from its loop order.

Nothing here runs a tracer: each schedule's reads and writes per global tensor (its module's
``traffic``, asked through ``kernels.registry``) are arithmetic on
N (``seq_len``), d (``head_dim``), Tr = ceil(N/Br), Tc = ceil(N/Bc), batch B, query heads H, key/
value heads Hkv and the element sizes, plus sums over the blocks that ragged blocking and masks
(causal, window, segments, kv_seq_len: ``kernels.mask``) make irregular (``block_sums``); N_kv
is the K/V length. ``docs/io.md`` derives every line; ``tests/test_io.py`` checks
them byte for byte against the trace and the simulator with ``l2_bytes = 0``. Given a GPU, the
counts add the register-spill traffic the simulator charges (``analysis.closed_form.spills``).
"""

from __future__ import annotations

from dataclasses import dataclass

from flashio import kernels, simulator
from flashio.analysis.closed_form.spills import REG_BYTES, spilled_registers
from flashio.kernels.mask import BlockSums, block_sums
from flashio.kernels.registry import spec
from flashio.kernels.schedules import DEFAULT_WARPS
from flashio.simulator.simulate import LOCAL_NAME

__all__ = ["BlockSums", "IOCounts", "TensorIO", "block_sums", "io_counts", "io_counts_of"]


@dataclass(frozen=True, slots=True)
class TensorIO:
    """Global traffic of one tensor: reads are LOAD events, writes STORE plus REDUCE events."""

    name: str
    elem_bytes: int
    read_elements: int
    write_elements: int

    @property
    def read_bytes(self) -> int:
        return self.read_elements * self.elem_bytes

    @property
    def write_bytes(self) -> int:
        return self.write_elements * self.elem_bytes


@dataclass(frozen=True, slots=True)
class IOCounts:
    """Closed-form global traffic of one schedule: what the SMs ask of L2 + HBM, which is HBM
    traffic on a GPU without L2 (the FlashAttention papers' "HBM accesses").

    With a ``gpu``, register spills are one more row of ``tensors``, named as the simulator
    names it (``simulator.simulate.LOCAL_NAME``, 4-byte elements: registers), present when the
    GPU makes a kernel spill; they count in ``read_bytes`` and ``write_bytes`` as they do in
    ``SimResult.global_read_bytes`` and ``global_write_bytes``.
    """

    schedule: str
    shape: kernels.AttentionShape
    block_q: int
    block_kv: int
    options: tuple[tuple[str, int], ...]
    tensors: tuple[TensorIO, ...]
    warps: int = DEFAULT_WARPS
    gpu: str | None = None  # the GPU whose register limit set the spill term; None: no term

    @property
    def read_bytes(self) -> int:
        return sum(t.read_bytes for t in self.tensors)

    @property
    def write_bytes(self) -> int:
        return sum(t.write_bytes for t in self.tensors)

    @property
    def total_bytes(self) -> int:
        return self.read_bytes + self.write_bytes

    @property
    def spill_read_bytes(self) -> int:
        """Register reloads from local memory (0 without a gpu or without spills)."""
        return sum(t.read_bytes for t in self.tensors if t.name == LOCAL_NAME)

    @property
    def spill_write_bytes(self) -> int:
        """Register spills stored to local memory (0 without a gpu or without spills)."""
        return sum(t.write_bytes for t in self.tensors if t.name == LOCAL_NAME)

    def tensor(self, name: str) -> TensorIO:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(f"no tensor {name!r}; have {', '.join(t.name for t in self.tensors)}")

    def to_dict(self) -> dict:
        return {
            "schedule": self.schedule,
            "shape": self.shape.to_dict(),
            "block_q": self.block_q,
            "block_kv": self.block_kv,
            "options": dict(self.options),
            "warps": self.warps,
            "gpu": self.gpu,
            "read_bytes": self.read_bytes,
            "write_bytes": self.write_bytes,
            "spill_read_bytes": self.spill_read_bytes,
            "spill_write_bytes": self.spill_write_bytes,
            "tensors": {
                t.name: {"read_bytes": t.read_bytes, "write_bytes": t.write_bytes}
                for t in self.tensors
            },
        }


def io_counts_of(sched: kernels.Schedule, gpu: simulator.GPUSpec | str | None = None) -> IOCounts:
    """``IOCounts`` of a built schedule (block sizes, warps and options as it holds them).

    Parameters
    ----------
    sched : kernels.Schedule
    gpu : GPUSpec or str, optional
        A spec or built-in name. Given, the counts add the register-spill row (local memory)
        the simulator charges on that GPU; without it there is no spill term.
    """
    sh = sched.shape
    bs = block_sums(sh, sched.block_q, sched.block_kv)
    rows = spec(sched.name).traffic(sched)
    if gpu is not None:
        gpu = gpu if isinstance(gpu, simulator.GPUSpec) else simulator.load_gpu(gpu)
        stored, reloaded = spilled_registers(sched, gpu, bs)
        if stored:  # stored, then loaded back unless it stays in L1 (docs/model.md)
            rows.append((LOCAL_NAME, REG_BYTES, reloaded, stored))
    return IOCounts(
        sched.name,
        sh,
        sched.block_q,
        sched.block_kv,
        sched.options,
        tuple(TensorIO(*r) for r in rows),
        sched.warps,
        None if gpu is None else gpu.name,
    )


def io_counts(
    name: str,
    shape: kernels.AttentionShape,
    block_q: int | None = None,
    block_kv: int | None = None,
    *,
    warps: int | None = None,
    gpu: simulator.GPUSpec | str | None = None,
    **options: int,
) -> IOCounts:
    """Exact global reads and writes per tensor of schedule ``name``, from its loop order.

    Parameters
    ----------
    name : str
        One of ``kernels.SCHEDULES``.
    shape : kernels.AttentionShape
    block_q, block_kv : int, optional
        Br and Bc in rows, any size >= 1 (a block larger than N is one partial block);
        defaults as in ``kernels.schedule``.
    warps : int, optional
        Warps per CTA (default 4). They change no byte of the algorithm's tensors, but they
        set the standard schedules' default ``softmax_rows`` and, with a ``gpu``, the spills.
    gpu : GPUSpec or str, optional
        A spec or built-in name. Given, the counts add the register spills the simulator
        charges on that GPU as the tensor ``local (register spills)``; without one there is
        no spill term (the algorithm's traffic only).
    **options : int
        The schedule's options (``softmax_passes``, ``softmax_rows`` for the standard
        schedules; only ``softmax_passes`` changes the bytes, but the default number of passes
        depends on ``softmax_rows``, whose default is the warp count).

    Returns
    -------
    IOCounts
        Reads (LOAD bytes) and writes (STORE + REDUCE bytes) per global tensor, in elements and
        bytes, as the trace counts them; with a ``gpu``, also the spill row, equal to what
        ``simulator.simulate`` replays.

    Notes
    -----
    The formulas per schedule are in ``_counts`` and ``analysis.closed_form.spills``, derived in
    ``docs/io.md``. The schedule is built only to validate the arguments and resolve defaults;
    no event is generated.
    """
    sched = kernels.schedule(name, shape, block_q, block_kv, warps, **options)
    return io_counts_of(sched, gpu)
