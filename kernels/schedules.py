"""Block schedules: one description of an attention algorithm's blocking, shared by the numeric
executor, the fast tracer, the simulator and the CUDA runner."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import ModuleType

import numpy as np

from flashio.kernels._emit import N_PARAMS, P_EXTRA, run_emitter
from flashio.kernels.implementation import (
    DEFAULT_IMPLEMENTATION,
    Implementation,
    ImplementationError,
    implementation,
)
from flashio.kernels.mask import keep_table, key_ranges
from flashio.kernels.registry import SCHEDULES, spec
from flashio.kernels.shape import MAX_SIZE, AttentionShape
from flashio.simulator import _memory
from flashio.simulator.errors import TilingError
from flashio.simulator.trace import EVENT_DTYPE, KernelInfo, Space, TensorInfo, Trace, TraceMeta

__all__ = ["SCHEDULES", "Schedule", "default_block", "schedule"]

# Shared memory assumed by default block sizes when no GPU is named: the A100's 192 KB of L1/SRAM
# per SM, the M the FlashAttention paper uses (Sec. 3.1, Fig. 2). analysis.tiling_rule owns the
# GPU-aware rule; this only keeps schedule() usable without one.
DEFAULT_SRAM_BYTES = 192 * 1024
DEFAULT_WARPS = 4


def _module(name: str) -> ModuleType:
    """The module implementing schedule ``name`` (one algorithm per file)."""
    return spec(name).module


def default_block(shape: AttentionShape, sram_bytes: int = DEFAULT_SRAM_BYTES) -> int:
    """The seed's rule B = floor(M / (4d)) with M in elements of the dtype, rounded down to a
    power of two (hardware-friendly) and clipped to [16, 128] and to the sequence length."""
    m_elems = sram_bytes // shape.elem_bytes
    b = max(1, m_elems // (4 * shape.head_dim))
    b = 1 << (b.bit_length() - 1)
    return max(1, min(128, max(16, b), shape.seq_len))


@dataclass(frozen=True, slots=True)
class Schedule:
    """A named attention algorithm with its block sizes: the unit every consumer shares.

    Attributes
    ----------
    name : str
        One of ``SCHEDULES``.
    shape : AttentionShape
    block_q, block_kv : int
        Rows of Q (Br) and of K/V (Bc) per block, any size >= 1, also larger than
        ``seq_len``. The last block of a ragged sequence holds ``seq_len % block`` real rows
        (all ``seq_len`` rows when the block is larger) and moves only those, as a predicated
        kernel does; on-chip buffers are still sized by the whole block (docs/io.md).
    warps : int
        Warps per CTA.
    options : tuple of (str, int)
        Schedule-specific options (``softmax_passes`` for standard attention).
    impl : Implementation or None
        How a kernel executes these tiles (``kernels.IMPLEMENTATIONS``: MMA class, loads,
        warp roles, overlap, register budget); None means this project's kernels,
        ``"flashio"``. A preset name is accepted and stored as its Implementation; the
        flashio preset itself is stored as None, so both spellings compare and hash equal.
        The implementation never changes the trace (bytes): only time models read it.
    """

    name: str
    shape: AttentionShape
    block_q: int
    block_kv: int
    warps: int = DEFAULT_WARPS
    options: tuple[tuple[str, int], ...] = field(default=())
    impl: Implementation | None = None

    def __post_init__(self):
        if self.name not in SCHEDULES:
            raise TilingError(
                f"unknown schedule {self.name!r}; choose one of {', '.join(SCHEDULES)}"
            )
        for f in ("block_q", "block_kv", "warps"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
                raise TilingError(f"{f} must be a positive integer, got {v!r}")
            if v > MAX_SIZE:  # trace events hold rows and block indices as int32
                raise TilingError(f"{f}={v} exceeds {MAX_SIZE} (2**31 - 1)")
            object.__setattr__(self, f, int(v))
        if self.warps > 32:
            raise TilingError(f"warps={self.warps} exceeds 32 (1024 threads per CTA)")
        if self.impl is not None:
            impl = implementation(self.impl)
            if impl == implementation(DEFAULT_IMPLEMENTATION):
                impl = None
            object.__setattr__(self, "impl", impl)
        if self.shape.paged_kv is not None and not spec(self.name).reads_paged_kv:
            raise TilingError(
                f"{self.name} does not read a paged KV cache (paged_kv): flash_decode does"
            )
        _module(self.name).validate(self)

    @property
    def implementation(self) -> Implementation:
        """The implementation executing this schedule (``impl``, or the flashio preset)."""
        return implementation(self.impl)

    # -- sizes --------------------------------------------------------------------------------
    @property
    def t_q(self) -> int:
        """Tr: number of Q blocks."""
        return math.ceil(self.shape.seq_len / self.block_q)

    @property
    def t_kv(self) -> int:
        """Tc: number of K/V blocks."""
        return math.ceil(self.shape.n_kv / self.block_kv)

    @property
    def mask(self) -> np.ndarray:
        """The keys each row of the tracer's Q tiles sees, (2, rows): the shape's
        ``kernels.mask.key_ranges``, or the schedule module's own ``mask`` (flash_decode packs a
        group's query heads into the rows of one tile)."""
        mod = _module(self.name)
        return mod.mask(self) if hasattr(mod, "mask") else key_ranges(self.shape)

    @property
    def keep(self) -> np.ndarray:
        """The block mask's summed-area table (``kernels.mask.keep_table``; its grain is in
        ``params``)."""
        return keep_table(self.shape)[0]

    @property
    def pages(self) -> np.ndarray:
        """The paged KV cache's block table (batch x pages per sequence), or a 0 x 0 array
        when K and V are contiguous; its page size is in ``params``."""
        pk = self.shape.paged_kv
        return np.zeros((0, 0), np.int64) if pk is None else pk.table

    @property
    def tables(self) -> tuple[np.ndarray, ...]:
        """The arrays the jitted tracers take after ``params``: kmin, kmax, keep, pages."""
        lo, hi = self.mask
        return lo, hi, self.keep, self.pages

    def option(self, key: str) -> int:
        return dict(self.options)[key]

    def params(self) -> np.ndarray:
        """The int64 parameter vector the jitted tracers take."""
        s = self.shape
        p = np.zeros(N_PARAMS, np.int64)
        p[:P_EXTRA] = (
            s.batch,
            s.heads,
            s.n_kv_heads,
            s.seq_len,
            s.head_dim,
            s.elem_bytes,
            s.acc_bytes,
            self.block_q,
            self.block_kv,
            self.warps,
            int(s.causal),
            s.n_kv,
            *keep_table(s)[1:],
            0 if s.paged_kv is None else s.paged_kv.page_size,
        )
        for i, (_, value) in enumerate(self.options):
            p[P_EXTRA + i] = value
        return p

    # -- what the consumers use ---------------------------------------------------------------
    @property
    def meta(self) -> TraceMeta:
        mod = _module(self.name)
        params = {
            **self.shape.to_dict(),
            "block_q": self.block_q,
            "block_kv": self.block_kv,
            "warps": self.warps,
            **dict(self.options),
        }
        if self.impl is not None:  # time models look the implementation up by name
            params["impl"] = self.impl.name
            params["copy_stages"] = _specialized(self).stages  # how loads overlap products
            registers = _launch_registers(self)
            if registers:
                params["launch_registers"] = registers
            bulk = _bulk_copies(self)
            if bulk:
                params["bulk_copies"] = bulk
            persistent = _persistent_kernels(self)
            if persistent:
                params["persistent_kernels"] = persistent
                if _specialized(self).tile_scheduler == "static":
                    params["static_tile_kernels"] = persistent
            roles = _warp_roles(self)
            if roles:
                params["warp_roles"] = roles
        return TraceMeta(self.name, params, mod.kernels(self), mod.tensors(self))

    @property
    def kernels(self) -> tuple[KernelInfo, ...]:
        return _module(self.name).kernels(self)

    @property
    def tensors(self) -> tuple[TensorInfo, ...]:
        return _module(self.name).tensors(self)

    def cta_events(
        self, kernel: int, start: int, stop: int, out: np.ndarray | None = None
    ) -> np.ndarray:
        """Events of CTAs ``start <= cta < stop`` of one kernel (a TraceSource chunk). With
        ``out`` (a 1-D EVENT_DTYPE array), they are written into its start when they fit and
        that view is returned; otherwise into a new array."""
        ctas = self.kernels[kernel].ctas
        if not 0 <= start <= stop <= ctas:
            raise ValueError(f"CTA range [{start}, {stop}) outside kernel {kernel}'s 0..{ctas}")
        if out is not None and (out.dtype != EVENT_DTYPE or out.ndim != 1):
            raise ValueError(f"out must be a 1-D EVENT_DTYPE array, got {out.dtype} {out.shape}")
        if start == stop:
            return np.empty(0, EVENT_DTYPE)
        emit = _module(self.name)._emit
        return run_emitter(emit, kernel, start, stop, self.params(), self.tables, out)

    def n_events(self) -> int:
        """Number of events in the whole trace, counted without storing them."""
        emit, p, tables = _module(self.name)._emit, self.params(), self.tables
        empty = np.empty(0, EVENT_DTYPE)
        return sum(
            emit(empty, False, k, 0, ki.ctas, p, *tables) for k, ki in enumerate(self.kernels)
        )

    def trace(self) -> Trace:
        """The whole trace, built by the fast tracer (no arithmetic), in one allocation."""
        emit, p, kernels = _module(self.name)._emit, self.params(), self.kernels
        tables = self.tables
        empty = np.empty(0, EVENT_DTYPE)
        counts = [emit(empty, False, k, 0, ki.ctas, p, *tables) for k, ki in enumerate(kernels)]
        events = _memory.empty(sum(counts), EVENT_DTYPE)  # on huge pages when large
        start = 0
        for k, (ki, n) in enumerate(zip(kernels, counts, strict=True)):
            emit(events[start : start + n], True, k, 0, ki.ctas, p, *tables)
            start += n
        return Trace(events, self.meta)

    def execute(self, q, k, v, grad_out=None):
        from flashio.kernels.execute import execute

        return execute(self, q, k, v, grad_out)


def _specialized(s) -> Implementation:
    """The facts of the kernel instantiation ``s.impl`` runs for ``s`` (its tiling row's
    overrides applied, the warp roles of ``s.warps``), or its preset fields where no row
    covers the shape or the warps do not make the row's roles."""
    try:
        return s.impl.specialize(s.name, s.shape, s.warps)
    except ImplementationError:
        return s.impl


def _launch_registers(s) -> dict[str, int]:
    """Registers per thread the kernels of a warp-specialized implementation launch with, by
    kernel name (empty for the others): what time models use instead of the trace's estimate.

    Its warps trade registers at run time (setmaxnreg): FlashAttention-3's 4 producer warps
    keep 24 and its 8 consumer warps take 240, 168 a thread on average, the count a profiler
    reports for such a kernel. The trace's estimate spreads the register tiles over every
    warp and, for 12 or 16 warps, asks for more than an SM holds; the implementation's
    budgets are what it compiles to (its tilings are chosen not to spill: an assumption
    where the kernel's machine code is not in the census)."""
    impl = _specialized(s)
    if not impl.producer_warps or impl.producer_register_budget is None:
        return {}
    out = {}
    for k in _module(s.name).kernels(s):
        consumers = k.warps - impl.producer_warps
        if k.name in spec(s.name).warp_specialized and consumers > 0:
            total = impl.producer_warps * impl.producer_register_budget
            total += consumers * impl.register_budget
            out[k.name] = -(-total // k.warps)
    return out


def _bulk_copies(s) -> dict[str, list[str]]:
    """The global tensors a TMA implementation moves by bulk copies, by kernel: in its
    warp-specialized kernels, the matrices (rank 4: batch, heads, rows, columns), whose tiles
    a producer warp copies in and the consumers copy out; not the row vectors (L, D), which
    its threads load and store, nor reductions (empty for implementations that load by
    ``cp.async``). Time models price their requests at the GPU's bulk-copy rates and
    latencies (``GPUSpec.request_costs``)."""
    impl = _specialized(s)
    if impl.loads != "tma" or not impl.producer_warps:
        return {}
    mod = _module(s.name)
    matrices = [t.name for t in mod.tensors(s) if t.space == Space.GLOBAL and len(t.shape) == 4]
    warp_specialized = spec(s.name).warp_specialized
    return {k.name: matrices for k in mod.kernels(s) if k.name in warp_specialized}


def _persistent_kernels(s) -> list[str]:
    """The kernels a persistent implementation launches as a persistent grid (its
    warp-specialized kernels, whose CTAs loop over tiles; empty for the others): time models
    start their CTAs without the block scheduler's turnaround (``simulate.turnaround``), and
    where its tile scheduler is static (``params["static_tile_kernels"]``), give the slot that
    ran tile c the tile c + slots (``simulate.static_tiles``)."""
    if not _specialized(s).persistent:
        return []
    warp_specialized = spec(s.name).warp_specialized
    return sorted(k.name for k in _module(s.name).kernels(s) if k.name in warp_specialized)


def _warp_roles(s) -> dict:
    """How a wgmma implementation's CTA divides its warps, for time models that write its
    warp program when its machine code is unknown (``simulator.synth``): empty for mma.sync
    implementations."""
    impl = _specialized(s)
    if not impl.mma.startswith("wgmma"):
        return {}
    return {
        "producer_warps": impl.producer_warps,
        "consumer_warpgroups": impl.consumer_warpgroups,
        "softmax_overlap": impl.softmax_overlap,
    }


def schedule(
    name: str,
    shape: AttentionShape,
    block_q: int | None = None,
    block_kv: int | None = None,
    warps: int | None = None,
    *,
    impl: Implementation | str | None = None,
    **options: int,
) -> Schedule:
    """Build a named schedule; block sizes and warps default when not given.

    Parameters
    ----------
    name : str
        ``standard``, ``standard_bwd``, ``flash1``, ``flash1_bwd``, ``flash2``, ``flash2_bwd`` or
        ``flash_decode`` (``kernels.SCHEDULES``).
    shape : AttentionShape
    block_q, block_kv : int, optional
        Br and Bc. Default: ``default_block(shape)`` (the seed's floor(M/(4d)) with the FA
        paper's M = 192 KB; see ``analysis.tiling_rule`` for the GPU-aware rule), or with
        ``impl`` the implementation's own tiling, ``impl.tiling(name, shape)``.
    warps : int, optional
        Warps per CTA, default 4 (with ``impl``: the implementation's).
    impl : str, Implementation or None, optional
        The kernel that executes the schedule: a preset name of ``kernels.IMPLEMENTATIONS``
        (``"flashio"``, ``"flash-attn2"``, ``"triton"``, ``"fa3"``, ``"cudnn"``,
        ``"flashio-hopper"``, ``"pytorch"``) or an
        ``Implementation``; None means flashio with the defaults above. Block sizes and
        warps not given default to the implementation's tiling for this shape (an error
        names what it provides when it has none). The implementation's tiling row may also
        set schedule options (``pytorch`` runs ``standard`` with ``unfused=1``, eager PyTorch's
        kernels), which ``options`` given here override; otherwise the trace is the same as
        with ``impl=None`` and the same block sizes.
    **options
        Schedule-specific integer options, e.g. ``softmax_passes=1|2`` for ``standard``.
    """
    if name not in SCHEDULES:
        raise TilingError(f"unknown schedule {name!r}; choose one of {', '.join(SCHEDULES)}")
    if not isinstance(shape, AttentionShape):
        raise TypeError(f"shape must be an AttentionShape, got {type(shape).__name__}")
    resolved = None if impl is None else implementation(impl)
    if resolved is not None and None in (block_q, block_kv, warps):
        tq, tkv, tw = resolved.tiling(name, shape)
        block_q = tq if block_q is None else block_q
        block_kv = tkv if block_kv is None else block_kv
        warps = tw if warps is None else warps
    if resolved is not None:
        try:
            options = {**dict(resolved.tiling_entry(name, shape).options), **options}
        except ImplementationError:  # no row for this shape: no options of its own
            pass
    mod = _module(name)
    bq_default, bkv_default = (
        mod.default_blocks(shape)
        if hasattr(mod, "default_blocks")
        else (default_block(shape),) * 2
    )
    opts = mod.default_options(shape, options) if hasattr(mod, "default_options") else options
    if set(opts) - set(getattr(mod, "OPTIONS", ())):
        bad = sorted(set(opts) - set(getattr(mod, "OPTIONS", ())))
        allowed = ", ".join(getattr(mod, "OPTIONS", ())) or "none"
        raise TilingError(f"schedule {name!r} has no option {bad[0]!r}; allowed: {allowed}")
    return Schedule(
        name,
        shape,
        block_q if block_q is not None else bq_default,
        block_kv if block_kv is not None else bkv_default,
        warps if warps is not None else DEFAULT_WARPS,
        tuple(sorted(opts.items())),
        resolved,
    )
