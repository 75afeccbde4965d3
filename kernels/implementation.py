"""How a kernel executes a schedule's tiles on the chip, as data: the attention implementations
people run, each written from that kernel's source (never from its timings).

A :class:`~kernels.Schedule` says which tiles move and which arithmetic happens in what order;
an :class:`Implementation` says how a real kernel runs those tiles: the tensor-core instruction
class, how tiles reach shared memory, how many buffers are in flight, warp roles, overlap of the
softmax with the matrix products, a persistent grid, the register budget, and the block sizes
the kernel picks for a shape (``tilings``). Bytes depend on the schedule and its block sizes;
the implementation never changes a trace, only how long it takes (docs/implementations.md).

Presets (``IMPLEMENTATIONS``): ``flashio`` (this project's kernels/cuda/*.cu), ``flash-attn2``
(FlashAttention-2 as vendored in PyTorch's SDPA flash backend, sm80 code on sm90),
``triton`` (Triton's fused-attention tutorial and torch ``flex_attention``'s default configs on
H100), ``fa3`` (FlashAttention-3, the ``hopper/`` directory of flash-attention), ``cudnn``
(PyTorch SDPA's cuDNN forward on Hopper: what its launches show, the rest FlashAttention-3's),
``flashio-hopper`` (this project's Hopper forward, kernels/cuda/hopper_fwd.cu) and ``pytorch``
(eager attention: cuBLAS GEMMs and a softmax kernel). Every number carries its
source next to it; where a fact could not be found the comment says so and names the
assumption made instead.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from flashio.kernels.shape import DTYPES, AttentionShape
from flashio.simulator.errors import TilingError

__all__ = [
    "IMPLEMENTATIONS",
    "LOADS",
    "MAX_REGISTERS",
    "MMA_CLASSES",
    "SOFTMAX_OVERLAPS",
    "Implementation",
    "ImplementationError",
    "Tiling",
    "implementation",
]

MMA_CLASSES = ("mma.sync.m16n8k16", "wgmma.m64nNk16")
LOADS = ("ld.global", "cp.async", "tma")
SOFTMAX_OVERLAPS = ("none", "pingpong", "intra-warpgroup", "both")
TILE_SCHEDULERS = ("dynamic", "static")
# Registers per thread the compiler may allocate (PTX ISA: at most 255 per thread; setmaxnreg
# takes 24..256 but no preset here asks for more than 240).
MAX_REGISTERS = 255
MAX_WARPS = 32  # 1024 threads per CTA
DEFAULT_IMPLEMENTATION = "flashio"

# Fields of Implementation a tiling row may override for the shapes it covers (for example
# FlashAttention-3's third consumer warpgroup and smaller register budget at head dim 64).
OVERRIDABLE = (
    "mma",
    "wgmma_n",
    "loads",
    "stages",
    "producer_warps",
    "consumer_warpgroups",
    "softmax_overlap",
    "persistent",
    "tile_scheduler",
    "q_in_registers",
    "register_budget",
    "producer_register_budget",
)


# The fields that say how a warp-specialized CTA divides its warps (producers, consumer
# warpgroups, their register budgets): facts of its warps, not of its shape.
WARP_ROLES = ("consumer_warpgroups", "register_budget", "producer_register_budget")


class ImplementationError(TilingError):
    """An implementation description is invalid, unknown, or has no tiling for a request.

    A :class:`~simulator.errors.TilingError` (so a :class:`~simulator.errors.FlashioError`, so a
    ``ValueError``): the implementation is one of a schedule's parameters.
    """


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_int(owner: str, name: str, v: Any, lo: int, hi: int | None = None) -> None:
    if not _is_int(v) or v < lo or (hi is not None and v > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ImplementationError(f"{owner}.{name} must be an integer {rng}, got {v!r}")


def _check_bool(owner: str, name: str, v: Any) -> None:
    if not isinstance(v, bool):
        raise ImplementationError(f"{owner}.{name} must be True or False, got {v!r}")


def _check_choice(owner: str, name: str, v: Any, choices: tuple[str, ...]) -> None:
    if v not in choices:
        raise ImplementationError(
            f"{owner}.{name} must be one of {', '.join(repr(c) for c in choices)}, got {v!r}"
        )


def _check_text(owner: str, name: str, v: Any) -> None:
    if not isinstance(v, str) or not v.strip():
        raise ImplementationError(f"{owner}.{name} must be a non-empty string, got {v!r}")


@dataclass(frozen=True, slots=True)
class Tiling:
    """One row of an implementation's tiling table: the block sizes it uses for some shapes.

    A row applies to schedule ``schedule`` when ``head_dim_min <= shape.head_dim <=
    head_dim_max`` (``head_dim_max`` None: no upper bound), ``causal`` is None or equals
    ``shape.causal``, ``dtypes`` is None or holds ``shape.dtype``, and ``shape.seq_len >=
    seq_len_min``. The first row that applies, in table order, wins.

    Attributes
    ----------
    schedule : str
        Schedule name (``flash2``, ``flash2_bwd``, ``standard``, ...).
    head_dim_max : int or None
        Largest head dim the row covers (kernels compiled for head dim D serve d <= D).
    causal : bool or None
        Only causal (True) or only non-causal (False) shapes; None: both.
    block_q, block_kv, warps : int or None
        Br (Q rows per block), Bc (K/V rows per block) and warps per CTA, all warps counted
        (producers too). None: this project's default for the shape
        (``kernels.default_block(shape)`` and ``kernels.schedules.DEFAULT_WARPS``).
    head_dim_min : int
        Smallest head dim the row covers (default 1).
    dtypes : tuple of str or None
        Dtypes the row covers; None: all.
    overrides : tuple of (str, value)
        Fields of the :class:`Implementation` that differ for the shapes of this row (names
        in ``OVERRIDABLE``); :meth:`Implementation.specialize` applies them.
    note : str
        Where the row comes from (file, function, line of the kernel's source).
    seq_len_min : int
        Shortest sequence the row covers (default 1): a kernel whose best tile changes with
        the number of tiles, as wave quantization does, gets a row per range of N.
    options : tuple of (str, int)
        Schedule options the implementation runs the schedule with, which
        ``kernels.schedule`` takes unless given (``pytorch``'s ``unfused=1``: standard
        attention as eager PyTorch's separate kernels). Unlike the other facts, options
        change the trace.
    """

    schedule: str
    head_dim_max: int | None
    causal: bool | None
    block_q: int | None
    block_kv: int | None
    warps: int | None
    head_dim_min: int = 1
    dtypes: tuple[str, ...] | None = None
    overrides: tuple[tuple[str, Any], ...] = ()
    note: str = ""
    seq_len_min: int = 1
    options: tuple[tuple[str, int], ...] = ()

    def __post_init__(self):
        o = "Tiling"
        _check_text(o, "schedule", self.schedule)
        _check_int(o, "head_dim_min", self.head_dim_min, 1)
        _check_int(o, "seq_len_min", self.seq_len_min, 1)
        if self.head_dim_max is not None:
            _check_int(o, "head_dim_max", self.head_dim_max, self.head_dim_min)
        if self.causal is not None:
            _check_bool(o, "causal", self.causal)
        for f in ("block_q", "block_kv", "warps"):
            v = getattr(self, f)
            if v is not None:
                _check_int(o, f, v, 1, MAX_WARPS if f == "warps" else None)
        if self.dtypes is not None:
            if not isinstance(self.dtypes, tuple) or not self.dtypes:
                raise ImplementationError(
                    f"Tiling.dtypes must be None or a non-empty tuple, got {self.dtypes!r}"
                )
            for dt in self.dtypes:
                _check_choice(o, "dtypes", dt, tuple(DTYPES))
        if not isinstance(self.overrides, tuple):
            raise ImplementationError(
                f"Tiling.overrides must be a tuple of (field, value) pairs, got {self.overrides!r}"
            )
        seen = set()
        for item in self.overrides:
            if not (isinstance(item, tuple) and len(item) == 2):
                raise ImplementationError(
                    f"Tiling.overrides must hold (field, value) pairs, got {item!r}"
                )
            key = item[0]
            _check_choice(o, "overrides field", key, OVERRIDABLE)
            if key in seen:
                raise ImplementationError(f"Tiling.overrides names {key!r} twice")
            seen.add(key)
        if not isinstance(self.note, str):
            raise ImplementationError(f"Tiling.note must be a string, got {self.note!r}")
        if not isinstance(self.options, tuple) or not all(
            isinstance(o, tuple) and len(o) == 2 and isinstance(o[0], str) for o in self.options
        ):
            raise ImplementationError(
                f"Tiling.options must be a tuple of (option, value) pairs, got {self.options!r}"
            )

    def covers(self, schedule_name: str, shape) -> bool:
        """Whether this row applies to ``schedule_name`` at ``shape``."""
        d = shape.head_dim
        return (
            self.schedule == schedule_name
            and self.head_dim_min <= d
            and (self.head_dim_max is None or d <= self.head_dim_max)
            and (self.causal is None or self.causal == shape.causal)
            and (self.dtypes is None or shape.dtype in self.dtypes)
            and shape.seq_len >= self.seq_len_min
        )

    def describe(self) -> str:
        hi = "" if self.head_dim_max is None else f" <= {self.head_dim_max}"
        lo = "" if self.head_dim_min == 1 else f"{self.head_dim_min} <= "
        parts = [f"{lo}head_dim{hi}" if (lo or hi) else "any head_dim"]
        if self.causal is not None:
            parts.append("causal" if self.causal else "non-causal")
        if self.dtypes is not None:
            parts.append("/".join(self.dtypes))
        if self.seq_len_min > 1:
            parts.append(f"seq_len >= {self.seq_len_min}")
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class Implementation:
    """How a kernel executes a schedule's tiles: one attention implementation, as data.

    Attributes
    ----------
    name : str
    mma : str
        Tensor-core instruction class: ``"mma.sync.m16n8k16"`` (warp-synchronous, Ampere
        style, operands in registers) or ``"wgmma.m64nNk16"`` (Hopper warpgroup MMA,
        asynchronous, B operand from shared memory).
    wgmma_n : int or None
        N of the wgmma instruction when ``mma`` is wgmma; None: the K/V block size (the N of
        S = Q K^T). A multiple of 8 in [8, 256]; must be None for mma.sync.
    loads : str
        How tiles reach shared memory: ``"ld.global"`` (through registers), ``"cp.async"``
        (Ampere asynchronous copy, issued by the computing threads) or ``"tma"`` (Hopper bulk
        tensor copies with mbarriers).
    stages : int
        Buffers per streamed tile (K and V in a forward pass, Q and dO in a backward pass).
        1: one buffer each; a load can overlap only the other tensor's matrix product (FA2
        issues V_j during S = Q K_j^T and K_{j+1} during P V_j). 2: double buffering, the next
        block loads while both products of this one run (FA3). Triton's ``num_stages``.
    producer_warps : int
        Warps that only move data (0: every warp computes; FA3: one producer warpgroup, 4).
    consumer_warpgroups : int
        Warpgroups (4 warps) that compute; 0 for mma.sync kernels, whose warps are not grouped.
    softmax_overlap : str
        ``"none"``, ``"pingpong"`` (the softmax of one consumer warpgroup overlaps the GEMMs
        of another, ordered by named barriers), ``"intra-warpgroup"`` (the softmax of block j
        overlaps the Q K^T of block j+1 within a warpgroup) or ``"both"``.
    persistent : bool
        One CTA per SM looping over tiles (a tile scheduler) instead of one CTA per tile.
    tile_scheduler : str
        Which tile a CTA takes next: ``"dynamic"`` (the next tile in the grid's order goes to
        the first CTA free: the hardware's block scheduler, or a persistent grid's atomic
        counter) or ``"static"`` (persistent only: CTA p takes the tiles p, p + G, p + 2G, ...
        of a grid of G CTAs, whatever their lengths: FA3's StaticPersistentTileScheduler).
    q_in_registers : bool
        Q fragments held in registers across the K/V loop (flash-attn 2's Is_Q_in_regs)
        instead of re-read from shared memory every step.
    register_budget : int
        Registers per thread the compiler may use (at most 255), for computing threads
        (FA3's consumers: setmaxnreg 240).
    source : str
        Where these facts come from: repository, file, commit or version, paper section.
    tilings : tuple of Tiling
        The block sizes the kernel uses per schedule and shape (:meth:`tiling`); rows may
        override the fields above for the shapes they cover (:meth:`specialize`).
    producer_register_budget : int or None
        Registers per thread of the producer warps (FA3: setmaxnreg 24 or 32); None when
        there are no producer warps or they keep ``register_budget``.
    """

    name: str
    mma: str
    wgmma_n: int | None
    loads: str
    stages: int
    producer_warps: int
    consumer_warpgroups: int
    softmax_overlap: str
    persistent: bool
    q_in_registers: bool
    register_budget: int
    source: str
    tilings: tuple[Tiling, ...] = field(default=(), repr=False)
    producer_register_budget: int | None = None
    tile_scheduler: str = "dynamic"

    def __post_init__(self):
        o = f"Implementation({self.name!r})" if isinstance(self.name, str) else "Implementation"
        _check_text("Implementation", "name", self.name)
        _check_choice(o, "mma", self.mma, MMA_CLASSES)
        wgmma = self.mma.startswith("wgmma")
        if self.wgmma_n is not None:
            if not wgmma:
                raise ImplementationError(
                    f"{o}.wgmma_n={self.wgmma_n!r} is only meaningful for wgmma; "
                    f"use None with mma={self.mma!r}"
                )
            if not _is_int(self.wgmma_n) or not 8 <= self.wgmma_n <= 256 or self.wgmma_n % 8:
                raise ImplementationError(
                    f"{o}.wgmma_n must be a multiple of 8 in [8, 256] (wgmma.m64nNk16), "
                    f"got {self.wgmma_n!r}"
                )
        _check_choice(o, "loads", self.loads, LOADS)
        _check_int(o, "stages", self.stages, 1)
        _check_int(o, "producer_warps", self.producer_warps, 0, MAX_WARPS - 1)
        _check_int(o, "consumer_warpgroups", self.consumer_warpgroups, 0, MAX_WARPS // 4)
        if wgmma and self.consumer_warpgroups < 1:
            raise ImplementationError(
                f"{o}.consumer_warpgroups must be >= 1 with wgmma: a wgmma is issued by a "
                "warpgroup of 4 warps"
            )
        if not wgmma and self.consumer_warpgroups != 0:
            raise ImplementationError(
                f"{o}.consumer_warpgroups must be 0 with mma.sync (warps are not grouped), "
                f"got {self.consumer_warpgroups!r}"
            )
        if self.producer_warps + 4 * self.consumer_warpgroups > MAX_WARPS:
            raise ImplementationError(
                f"{o}: {self.producer_warps} producer warps + {self.consumer_warpgroups} "
                f"consumer warpgroups exceed {MAX_WARPS} warps (1024 threads) per CTA"
            )
        _check_choice(o, "softmax_overlap", self.softmax_overlap, SOFTMAX_OVERLAPS)
        if self.softmax_overlap in ("pingpong", "both") and self.consumer_warpgroups < 2:
            raise ImplementationError(
                f"{o}.softmax_overlap={self.softmax_overlap!r} needs at least 2 consumer "
                f"warpgroups to alternate between, got {self.consumer_warpgroups}"
            )
        _check_bool(o, "persistent", self.persistent)
        _check_choice(o, "tile_scheduler", self.tile_scheduler, TILE_SCHEDULERS)
        if self.tile_scheduler == "static" and not self.persistent:
            raise ImplementationError(
                f"{o}.tile_scheduler='static' needs persistent=True: a grid of a CTA per tile "
                "hands its tiles out as CTAs free up (use 'dynamic')"
            )
        _check_bool(o, "q_in_registers", self.q_in_registers)
        _check_int(o, "register_budget", self.register_budget, 1, MAX_REGISTERS)
        if self.producer_register_budget is not None:
            if self.producer_warps == 0:
                raise ImplementationError(
                    f"{o}.producer_register_budget is set but producer_warps is 0"
                )
            _check_int(
                o, "producer_register_budget", self.producer_register_budget, 1, MAX_REGISTERS
            )
        _check_text(o, "source", self.source)
        if not isinstance(self.tilings, tuple) or not all(
            isinstance(t, Tiling) for t in self.tilings
        ):
            raise ImplementationError(f"{o}.tilings must be a tuple of Tiling rows")
        for row in self.tilings:
            spec = self
            if row.overrides:
                try:
                    spec = dataclasses.replace(self, tilings=(), **dict(row.overrides))
                except ImplementationError as e:
                    raise ImplementationError(
                        f"{o}: tiling row for {row.schedule} ({row.describe()}) overrides to "
                        f"an invalid implementation: {e}"
                    ) from None
            self._check_warps(o, spec, row)

    @staticmethod
    def _check_warps(o: str, spec: Implementation, row: Tiling) -> None:
        """A warpgroup-MMA kernel's CTA is its producer warps plus its consumer warpgroups."""
        if row.warps is None or not spec.mma.startswith("wgmma"):
            return
        need = spec.producer_warps + 4 * spec.consumer_warpgroups
        if row.warps != need:
            raise ImplementationError(
                f"{o}: tiling row for {row.schedule} ({row.describe()}) has warps={row.warps}, "
                f"but {spec.producer_warps} producer warps + {spec.consumer_warpgroups} "
                f"consumer warpgroups make {need}"
            )

    # -- tilings ----------------------------------------------------------------------------
    @property
    def schedules(self) -> tuple[str, ...]:
        """Schedules this implementation has tilings for, in table order."""
        return tuple(dict.fromkeys(t.schedule for t in self.tilings))

    def tiling_entry(self, schedule_name: str, shape) -> Tiling:
        """The row of ``tilings`` that applies to ``schedule_name`` at ``shape``.

        Raises
        ------
        ImplementationError
            The implementation does not provide the schedule, or no row covers the shape
            (head dim, causal, dtype); the message lists what it does provide.
        """
        if not isinstance(shape, AttentionShape):
            raise TypeError(f"shape must be an AttentionShape, got {type(shape).__name__}")
        rows = [t for t in self.tilings if t.schedule == schedule_name]
        if not rows:
            have = ", ".join(self.schedules) or "none"
            raise ImplementationError(
                f"implementation {self.name!r} does not provide schedule {schedule_name!r}; "
                f"it provides: {have}"
            )
        for row in rows:
            if row.covers(schedule_name, shape):
                return row
        covered = "; ".join(row.describe() for row in rows)
        raise ImplementationError(
            f"implementation {self.name!r} has no {schedule_name} tiling for head_dim="
            f"{shape.head_dim}, causal={shape.causal}, dtype={shape.dtype!r}; its rows cover: "
            f"{covered}. Pass block_q, block_kv and warps explicitly to use it anyway"
        )

    def tiling(self, schedule_name: str, shape) -> tuple[int, int, int]:
        """(block_q, block_kv, warps) this implementation uses for ``schedule_name`` at
        ``shape``, from its ``tilings`` table (None entries: the project's defaults)."""
        row = self.tiling_entry(schedule_name, shape)
        if None in (row.block_q, row.block_kv, row.warps):
            from flashio.kernels.schedules import DEFAULT_WARPS, default_block

            b = default_block(shape)
            return (
                b if row.block_q is None else row.block_q,
                b if row.block_kv is None else row.block_kv,
                DEFAULT_WARPS if row.warps is None else row.warps,
            )
        return row.block_q, row.block_kv, row.warps

    def specialize(self, schedule_name: str, shape, warps: int | None = None) -> Implementation:
        """The facts that hold for the kernel instantiation this implementation runs for
        ``schedule_name`` at ``shape``: its fields with the overrides of the applicable tiling
        row applied, and no ``tilings`` (it describes that one instantiation; the table's rows
        are relative to the preset's own fields).

        ``warps``: the CTA's warps where the caller chose them. A warpgroup-MMA kernel's warp
        roles (``WARP_ROLES``) follow its warps, not its shape: with warps other than the
        row's, they are those of the first row of the schedule with that many warps, else the
        preset's own (FlashAttention-3's 128 x 128 tiles with 12 warps at head dim 64 keep two
        consumer warpgroups, where its own d = 64 row has three and 16 warps). Raises
        :class:`ImplementationError` where the warps do not make those roles."""
        row = self.tiling_entry(schedule_name, shape)
        overrides = dict(row.overrides)
        if warps is not None and row.warps is not None and warps != row.warps:
            donor = next(
                (t for t in self.tilings if t.schedule == schedule_name and t.warps == warps), None
            )
            overrides = {k: v for k, v in overrides.items() if k not in WARP_ROLES}
            if donor is not None:
                overrides |= {k: v for k, v in donor.overrides if k in WARP_ROLES}
        out = dataclasses.replace(self, tilings=(), **overrides)
        need = out.producer_warps + 4 * out.consumer_warpgroups
        if warps is not None and out.mma.startswith("wgmma") and warps != need:
            raise ImplementationError(
                f"implementation {self.name!r}: {warps} warps do not make its "
                f"{out.producer_warps} producer warps and {out.consumer_warpgroups} consumer "
                f"warpgroups ({need} warps)"
            )
        return out

    # -- serialization ----------------------------------------------------------------------
    def to_dict(self) -> dict:
        """Plain data (JSON-ready): every field, tilings as dicts."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["tilings"] = [
            {
                **{f.name: getattr(t, f.name) for f in dataclasses.fields(t)},
                "dtypes": None if t.dtypes is None else list(t.dtypes),
                "overrides": dict(t.overrides),
                "options": dict(t.options),
            }
            for t in self.tilings
        ]
        return d


def _rows(schedule: str, table, **common) -> tuple[Tiling, ...]:
    """Tiling rows of one schedule from (head_dim_max, causal, block_q, block_kv, warps[,
    overrides[, options]]) tuples; ``common`` (dtypes, note, ...) applies to all of them."""
    out = []
    for r in table:
        hi, causal, bq, bkv, w, *rest = r
        extra = dict(common)
        if rest:
            extra["overrides"] = tuple(rest[0].items())
        if len(rest) > 1:
            extra["options"] = tuple(rest[1].items())
        out.append(Tiling(schedule, hi, causal, bq, bkv, w, **extra))
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# flashio: this project's CUDA kernels, kernels/cuda/{flash2_fwd,flash2_bwd,standard}.cu.
# - mma.sync.m16n8k16 with fp32 accumulation, operands by ldmatrix (mma_tiles.cu: mma16816,
#   ldsm_x4); tiles reach shared memory by 16-byte cp.async.cg (mma_tiles.cu: load_tile).
# - flash2_fwd.cu keeps one buffer each of Q_i, K_j, V_j ((BLOCK_Q + 2 BLOCK_KV) d 2 bytes):
#   V_j is fetched while S = Q K_j^T runs and K_{j+1} while P V_j runs (stages = 1, not a
#   double buffer); flash2_bwd.cu likewise holds one Q_i and one dO_i buffer.
# - The A fragments of Q are re-read from shared memory (frag_a(a, sQ, ...)) at every k16 step
#   of every K/V block: Q is not held in registers.
# - One CTA per tile (blockIdx.x = (b H + h) Tr + i): not persistent; no warp specialization.
# - __launch_bounds__(WARPS * 32) and no -maxrregcount (kernels/gpu.py compile_options): the
#   compiler may use up to 255 registers per thread.
# Tilings: the ones benchmarks/gpu_measure.py measures first for each head dim (FWD_TILES,
# BWD_TILES, STD_TILES: measured at d = 64 and 128, applied here to head dims up to those);
# other head dims and schedules get the project's default (kernels.default_block, 4 warps).
_FLASHIO_NOTE = "benchmarks/gpu_measure.py FWD_TILES/BWD_TILES/STD_TILES (first entry)"
_DEFAULT_NOTE = "kernels.schedules.default_block (seed rule) and DEFAULT_WARPS"
_FLASHIO_TILINGS = (
    _rows("flash2", [(64, None, 128, 128, 8), (128, None, 128, 64, 8)], note=_FLASHIO_NOTE)
    + _rows("flash2", [(None, None, None, None, None)], note=_DEFAULT_NOTE)
    + _rows("flash2_bwd", [(128, None, 64, 64, 4)], note=_FLASHIO_NOTE)
    + _rows("flash2_bwd", [(None, None, None, None, None)], note=_DEFAULT_NOTE)
    + _rows("standard", [(64, None, 128, 128, 8), (128, None, 128, 64, 8)], note=_FLASHIO_NOTE)
    + tuple(
        Tiling(s, None, None, None, None, None, note=_DEFAULT_NOTE)
        for s in ("standard", "standard_bwd", "flash1", "flash1_bwd")
    )
)

FLASHIO = Implementation(
    name="flashio",
    mma="mma.sync.m16n8k16",
    wgmma_n=None,
    loads="cp.async",
    stages=1,
    producer_warps=0,
    consumer_warpgroups=0,
    softmax_overlap="none",
    persistent=False,
    q_in_registers=False,
    register_budget=MAX_REGISTERS,
    source=(
        "this repository: kernels/cuda/mma_tiles.cu (mma16816, ldsm_x4, cp_async16, "
        "load_tile), kernels/cuda/flash2_fwd.cu, flash2_bwd.cu, standard.cu; kernels/gpu.py "
        "compile_options; tilings from benchmarks/gpu_measure.py FWD_TILES, BWD_TILES, "
        "STD_TILES"
    ),
    tilings=_FLASHIO_TILINGS,
)

# ---------------------------------------------------------------------------------------------
# flash-attn2: FlashAttention-2 as vendored in PyTorch (SDPBackend.FLASH_ATTENTION), running its
# sm80 code on an H100/H200 (sm90): is_sm8x = (major == 8 && minor > 0) is false there, and
# cudaDevAttrMaxSharedMemoryPerBlockOptin = 232,448 B (227 KiB), ...PerMultiprocessor =
# 233,472 B (docs/gpus.md; DESIGN "Facts to build on").
# Sources (identical block choices for head dims 64 and 128 in all of them):
#   pytorch/pytorch@04ff5bebd3a737cd53c7858de8998a37a4003c49
#     aten/src/ATen/native/transformers/cuda/flash_attn/flash_fwd_launch_template.h
#   pytorch/pytorch@08e43ed521ff6a77b1f9dc6f0512deb418ba1011 .../flash_bwd_launch_template.h
#   pytorch/pytorch@035290b77d8b4bd106cf5f9a728516d4335d5a42 .../static_switch.h
#     (HEADDIM_SWITCH: kernels for head dims 32, 64, 96, 128, 160, 192, 224, 256; d <= D)
#   Dao-AILab/flash-attention@0251105a2fb19d2957484b7f023cd8c115286ced (tags v2.3.6..v2.8.3
#     make the same choices for d = 64, 128) csrc/flash_attn/src/kernel_traits.h,
#     flash_fwd_launch_template.h, flash_bwd_launch_template.h, flash_fwd_kernel.h.
# Kernel traits: Flash_fwd_kernel_traits<kHeadDim, kBlockM, kBlockN, kNWarps, Is_Q_in_regs,
# Share_Q_K_smem>; every forward launch above uses Is_Q_in_regs = Share_Q_K_smem = false.
# MMA_Atom SM80_16x8x16_F32{F16F16,BF16BF16}F32_TN (mma.sync m16n8k16), copies by
# SM80_CP_ASYNC_CACHEGLOBAL (cp.async), one K and one V buffer (kSmemKVSize = 2 tiles), V_j
# prefetched during S = Q K_j^T and K_{j+1} during P V_j (flash_fwd_kernel.h), grid
# (num_m_block, b, h): one CTA per tile. No __launch_bounds__ and no -maxrregcount in the
# launch templates or upstream setup.py nvcc flags: 255 registers/thread (PyTorch's own CMake
# flags were not checked). Dropout is not modelled: the rows are the p_dropout == 0 branches.
_FA2_FWD_NOTE = (
    "pytorch@04ff5beb flash_fwd_launch_template.h run_mha_fwd_hdim*, !Is_dropout, !is_sm8x"
)
_FA2_BWD_NOTE = "pytorch@08e43ed5 flash_bwd_launch_template.h run_mha_bwd_hdim*, H100 branch"
_FP16_BF16 = ("fp16", "bf16")
_FA2_TILINGS = _rows(
    "flash2",
    [
        (32, None, 128, 128, 4),  # hdim32: <Headdim, 128, 128, 4, false, false>
        (64, None, 128, 128, 4),  # hdim64 !dropout: <64, 128, 128, 4, false, false>
        (96, None, 128, 64, 4),  # hdim96 !is_sm8x: <96, 128, 64, 4, false, false>
        (128, None, 128, 64, 4),  # hdim128 !dropout, !is_sm8x: <128, 128, 64, 4, false, false>
        (160, None, 128, 32, 4),  # hdim160 !is_sm8x: <160, 128, 32, 4, false, false>
        (192, None, 128, 64, 8),  # hdim192 !dropout: <192, 128, 64, 8, false, false>
        # hdim224: max_smem_per_block >= 2*224*(128 + 2*64) = 114,688 B: <224, 128, 64, 8>
        (224, None, 128, 64, 8),
        # hdim256: 232,448 >= 131,072 but max_smem_per_sm 233,472 >= 4*256*(64 + 2*64) =
        # 196,608, so the else branch: <256, 64, 64, 4, false, false> ("for H100 ... 2 CTAs/SM")
        (256, None, 64, 64, 4),
    ],
    dtypes=_FP16_BF16,
    note=_FA2_FWD_NOTE,
) + _rows(
    "flash2_bwd",
    # Flash_bwd_kernel_traits<kHeadDim, kBlockM, kBlockN, kNWarps, AtomLayoutMSdP,
    # AtomLayoutNdKV, AtomLayoutMdQ, Is_V_in_regs, No_double_buffer>. kBlockM = Q rows (Br),
    # kBlockN = K/V rows (Bc, one CTA per K/V block: run_flash_bwd_seqk_parallel). On an H100
    # every max_smem_per_block test passes, so No_double_buffer = false: Q is double buffered
    # (kSmemQdOSize = 3 tiles: 2 Q + 1 dO), hence stages = 2 for the backward rows.
    [
        (32, None, 128, 128, 8, {"stages": 2}),  # <32, 128, 128, 8, 4, 4, 4, true, false>
        (64, None, 128, 128, 8, {"stages": 2}),  # >= 144 KiB: <64, 128, 128, 8, 4, 4, 4, f, f>
        (96, None, 64, 128, 8, {"stages": 2}),  # >= 116 KiB, !dropout: <96, 64, 128, 8, ...>
        (128, None, 64, 128, 8, {"stages": 2}),  # >= 144 KiB: <128, 64, 128, 8, 2, 4, 2, f, f>
        (160, None, 64, 64, 8, {"stages": 2}),  # >= 116 KiB: <160, 64, 64, 8, 4, 4, 4, f, f>
        (192, None, 64, 64, 8, {"stages": 2}),  # >= 136 KiB: <192, 64, 64, 8, 4, 2, 2, f, f>
        (224, None, 64, 64, 8, {"stages": 2}),  # <224, 64, 64, 8, 4, 4, 4, false, false>
        (256, None, 64, 64, 8, {"stages": 2}),  # >= 176 KiB (H100): <256, 64, 64, 8, 4, 2, 2>
    ],
    dtypes=_FP16_BF16,
    note=_FA2_BWD_NOTE,
)

FLASH_ATTN2 = Implementation(
    name="flash-attn2",
    mma="mma.sync.m16n8k16",
    wgmma_n=None,
    loads="cp.async",
    stages=1,
    producer_warps=0,
    consumer_warpgroups=0,
    softmax_overlap="none",
    persistent=False,
    q_in_registers=False,
    register_budget=MAX_REGISTERS,
    source=(
        "FlashAttention-2 as vendored in PyTorch SDPA: pytorch/pytorch@04ff5beb "
        "aten/src/ATen/native/transformers/cuda/flash_attn/flash_fwd_launch_template.h, "
        "@08e43ed5 flash_bwd_launch_template.h, @035290b7 static_switch.h; upstream "
        "Dao-AILab/flash-attention@0251105a csrc/flash_attn/src/kernel_traits.h, "
        "flash_fwd_kernel.h (same d=64/128 choices in tags v2.3.6..v2.8.3); Dao 2023, "
        "FlashAttention-2, Sec. 3. sm80 code path on sm90 (is_sm8x false)."
    ),
    tilings=_FA2_TILINGS,
)

# ---------------------------------------------------------------------------------------------
# triton: Triton's flash-attention kernels compiled for sm90, with the block sizes of torch
# flex_attention's default (non-autotuned) configs on an H100 (capability == (9, 0), which an
# H200 also reports).
# - tl.dot on sm90 lowers to wgmma (MMAv3); its instruction N for S = Q K^T is BLOCK_N when one
#   warpgroup covers the N dimension (triton-lang/triton@02a2f24d
#   lib/Dialect/TritonGPU/Transforms/Utility.cpp mmaVersionToInstrShape: the largest N <= 256
#   dividing the tile's N), hence wgmma_n = None.
# - flex's template loads through block pointers / masked pointers; its USE_TMA option
#   defaults to False on CUDA (pytorch@008d483d torch/_inductor/kernel/flex/flex_attention.py:
#   "USE TMA = false by default", setdefault("USE_TMA", False)). Triton rewrites block
#   pointers to plain pointers (add_rewrite_tensor_pointer), and its software pipeliner
#   (add_pipeline(num_stages)) turns the loads feeding tl.dot into asynchronous copies with
#   num_stages shared-memory buffers: loads = cp.async, stages = num_stages
#   (triton-lang/triton@00526b7b third_party/nvidia/backend/compiler.py).
# - No warp specialization by default: flex sets num_consumer_groups only when the user asks
#   (the same file, and pytorch@009e9893 torch/_inductor/kernel/flex_attention.py:
#   "num_consumer_groups, num_buffers_warp_spec = 0, 0"), and the tutorial's configs
#   (triton@003da478 python/tutorials/06-fused-attention.py) use none. No softmax overlap is
#   claimed beyond what Triton's instruction scheduler does by itself.
# - One CTA per (Q block, batch * head): grid (cdiv(N, BLOCK_M), B H, 1) (flex_attention_grid;
#   tutorial grid): not persistent.
# - "load q: it will stay in SRAM throughout" (tutorial _attn_fwd): Q is kept in shared memory
#   and read by an SS wgmma; Triton moves a wgmma A operand into registers only when it is the
#   result of another MMAv3 (P, for P V): pattern MMAV3UseRegOperand in
#   lib/Dialect/TritonGPU/Transforms/OptimizeDotOperands.cpp (seen in the stored copies of
#   recent versions; commit not pinned). q_in_registers = False.
# - CUDAOptions.maxnreg = None (no .maxnreg; num_warps <= 8 leaves >= 255 registers/thread).
# Flex configs: pytorch/pytorch@00131b6bd4bedfa71eb27b407292be0ba45e5ee8
#   torch/_inductor/template_heuristics/triton.py, CUDAConfigHeuristic:
#   h100_default_flex_config[(dtype, head_dim)] = FlexConfig(block_m, block_n, num_stages,
#   num_warps); get_flex_attn_fwd_configs: default FlexConfig(128, 64, 3, 4) for 16-bit dtypes
#   at head_dim <= 256 not in the table, FlexConfig(64, 32, 3, 4) above 256;
#   get_flex_attn_bwd_configs "sm90": FlexBwDConfig(block_m1, block_n1, block_m2, block_n2,
#   num_stages, num_warps) = (64, 64, 64, 64, 3, 4) if h < 64, (64, 128, 128, 64, 3, 8) if
#   h <= 128, else (64, 64, 64, 64, 2, 4). (The older torch/_inductor/kernel/flex_attention.py,
#   pytorch@009e9893, had the same forward values for bf16 but fp16 d=128 at 128 x 128 and the
#   backward at d=64 as (64, 64, 4 warps, 3 stages).) The backward kernel's dK/dV programs own
#   BLOCK_N1 keys and step over queries by BLOCK_M1: block_q = BLOCK_M1, block_kv = BLOCK_N1.
#   (Its dQ programs, BLOCK_M2 queries over BLOCK_N2 keys without atomics, are a different
#   loop than flashio's flash2_bwd, whose bytes a trace with these tiles counts.)
# The fp32 configs are left out: flex runs them on TF32 wgmma (k8), not wgmma.m64nNk16.
_FLEX_FWD_NOTE = (
    "pytorch@00131b6b template_heuristics/triton.py h100_default_flex_config / "
    "get_flex_attn_fwd_configs"
)
_FLEX_BWD_NOTE = "pytorch@00131b6b template_heuristics/triton.py get_flex_attn_bwd_configs sm90"
_WG2 = {"consumer_warpgroups": 2}


def _flex_fwd(dtype: str, d128_block_kv: int) -> tuple[Tiling, ...]:
    exact = [  # (head dim, block_m, block_n, num_warps); num_stages = 3 in all of them
        (64, 128, 128, 4),
        (128, 128, d128_block_kv, 8),
        (256, 64, 32, 4),
    ]
    rows = tuple(
        Tiling(
            "flash2",
            d,
            None,
            bm,
            bn,
            w,
            head_dim_min=d,
            dtypes=(dtype,),
            overrides=tuple(_WG2.items()) if w == 8 else (),
            note=_FLEX_FWD_NOTE,
        )
        for d, bm, bn, w in exact
    )
    return (
        *rows,
        # head dims below 16 are rejected by flex ("embedding dimension ... at least 16")
        Tiling(
            "flash2",
            256,
            None,
            128,
            64,
            4,
            head_dim_min=16,
            dtypes=(dtype,),
            note=_FLEX_FWD_NOTE + " (default for head dims not in the table)",
        ),
        Tiling(
            "flash2",
            None,
            None,
            64,
            32,
            4,
            head_dim_min=257,
            dtypes=(dtype,),
            note=_FLEX_FWD_NOTE + " (head_dim > 256)",
        ),
    )


_TRITON_TILINGS = (
    _flex_fwd("bf16", 64)  # (torch.bfloat16, 128): FlexConfig(128, 64, 3, 8)
    + _flex_fwd("fp16", 64)  # (torch.float16, 128): FlexConfig(128, 64, 3, 8)
    + (
        Tiling(
            "flash2_bwd",
            63,
            None,
            64,
            64,
            4,
            head_dim_min=16,
            dtypes=_FP16_BF16,
            note=_FLEX_BWD_NOTE + " h < 64",
        ),
        Tiling(
            "flash2_bwd",
            128,
            None,
            64,
            128,
            8,
            head_dim_min=64,
            dtypes=_FP16_BF16,
            overrides=tuple(_WG2.items()),
            note=_FLEX_BWD_NOTE + " 64 <= h <= 128",
        ),
        Tiling(
            "flash2_bwd",
            256,
            None,
            64,
            64,
            4,
            head_dim_min=129,
            dtypes=_FP16_BF16,
            overrides=(("stages", 2),),
            note=_FLEX_BWD_NOTE + " 128 < h <= 256",
        ),
        # head_dim > 256: FlexBwDConfig(16, 16, 16, 16, 1, 4); a 16-row tile cannot be a
        # wgmma (m64), and which MMA Triton falls back to was not checked: no row.
    )
)

TRITON = Implementation(
    name="triton",
    mma="wgmma.m64nNk16",
    wgmma_n=None,
    loads="cp.async",
    stages=3,  # num_stages = 3 in every forward config above (and CUDAOptions' default)
    producer_warps=0,
    consumer_warpgroups=1,  # num_warps = 4 (8-warp rows override to 2)
    softmax_overlap="none",
    persistent=False,
    q_in_registers=False,
    register_budget=MAX_REGISTERS,
    source=(
        "torch flex_attention defaults on H100: pytorch/pytorch@00131b6b "
        "torch/_inductor/template_heuristics/triton.py (CUDAConfigHeuristic."
        "h100_default_flex_config, get_flex_attn_fwd_configs, get_flex_attn_bwd_configs), "
        "@008d483d torch/_inductor/kernel/flex/flex_attention.py (USE_TMA and "
        "num_consumer_groups defaults), @009e9893 torch/_inductor/kernel/flex_attention.py "
        "(grid); Triton: triton-lang/triton@003da478 python/tutorials/06-fused-attention.py, "
        "@00526b7b third_party/nvidia/backend/compiler.py (CUDAOptions, sm90 passes), "
        "@02a2f24d lib/Dialect/TritonGPU/Transforms/Utility.cpp (mmaVersionToInstrShape)"
    ),
    tilings=_TRITON_TILINGS,
)

# ---------------------------------------------------------------------------------------------
# fa3: FlashAttention-3 (Shah et al. 2024, arXiv 2407.08608: Sec. 3.1 producer-consumer warp
# specialization with setmaxnreg and pingpong scheduling of two warpgroups, Sec. 3.2
# intra-warpgroup overlap of softmax and GEMMs), code: Dao-AILab/flash-attention@
# 0251105a2fb19d2957484b7f023cd8c115286ced hopper/ (16-bit dtypes; fp8 is not a project dtype).
# - tile_size.h tile_size_fwd_sm90(headdim, headdim_v = headdim, is_causal, ...) returns
#   {kBlockM, kBlockN, MmaPV_is_RS, IntraWGOverlap} on the head dim rounded up to 64, 96, 128,
#   192 or 256 (flash_api.cpp round_up_headdim).
# - mainloop_fwd_sm90_tma_gmma_ws.hpp: AtomLayoutQK = kBlockM / 64 warpgroups (consumer
#   warpgroups = kBlockM / 64), MmaQK_is_RS = false ("we don't want Q to be in registers": Q is
#   read from shared memory by an SS wgmma), TMA for Q, K, V (Use_TMA_KV without paged KV),
#   PipelineTmaAsync<kStages> with kStages = 2 on sm90 (flash_fwd_launch_template.h);
#   UseSchedulerBarrier = IntraWGOverlap ? NumMmaWarpGroups >= 2 && kHeadDim <= 128 : ... ;
#   warp_scheduler_barrier_arrive passes the GEMM turn to the next consumer warpgroup
#   (pingpong; round robin over 3).
# - flash_fwd_kernel_sm90.h: NumLoadWarpGroups = 1 (4 producer warps; one warp issues TMA),
#   LoadRegisterRequirement = 24 (2 consumer WGs, TMA) or 32 (3 WGs), MmaRegisterRequirement =
#   240 (2 WGs) or 160 (3 WGs), via warpgroup_reg_dealloc / warpgroup_reg_alloc (setmaxnreg).
# - flash_fwd_launch_template.h: UsePersistentScheduler = !(Split && !Varlen) on sm90:
#   StaticPersistentTileScheduler (non-causal: CTA p takes tiles p, p + grid, ...),
#   DynamicPersistentTileScheduler (causal: an atomic counter hands out the next tile, in
#   hopper/tile_scheduler.hpp's longest-first order: flash2's longest_first option).
# - Backward (flash_bwd_launch_template.h run_mha_bwd_hdim*, Arch >= 90, no softcap):
#   run_mha_bwd_dispatch<..., kBlockM, kBlockN, kHeadDim, ..., Stages_dO, Stages_dS, SdP_swapAB,
#   dKV_swapAB, dQ_swapAB, NumMmaWarpGroups, ...>; the CTA owns kBlockN keys and loops over
#   kBlockM query blocks (block_q = kBlockM, block_kv = kBlockN); flash_bwd_kernel_sm90.h
#   registers 240/24 (2 WGs) or 160/32 (3 WGs); Q in PipelineTmaAsync<kStages = 2>;
#   SingleTileScheduler (not persistent; the LPT scheduler only when deterministic and causal);
#   no scheduler barrier or intra-warpgroup overlap in mainloop_bwd_sm90_tma_gmma_ws.hpp.
# Earlier code (tag v2.7.0, hopper/flash_fwd_launch_template.h, which had only d = 64, 128,
# 256) used 192 x 128 at d = 64 (3 WGs) causal or not, 128 x 176 / 128 x 128 (causal) at
# d = 128 and 128 x 80 at d = 256: only d = 64 non-causal has changed since (192 x 192).
_FA3_FWD_NOTE = "flash-attention@0251105a hopper/tile_size.h tile_size_fwd_sm90"
_FA3_BWD_NOTE = "flash-attention@0251105a hopper/flash_bwd_launch_template.h run_mha_bwd_hdim*"
_WG3 = {"consumer_warpgroups": 3, "register_budget": 160, "producer_register_budget": 32}
_INTRA = {"softmax_overlap": "intra-warpgroup"}  # d > 128: no scheduler barrier
_DYN = {"tile_scheduler": "dynamic"}  # causal: DynamicPersistentTileScheduler
_LPT = {"longest_first": 1}  # ... which hands out the longest tiles first (kernels.flash2)
_BWD = {"persistent": False, "softmax_overlap": "none", **_DYN}
_FA3_TILINGS = _rows(
    "flash2",
    [
        (64, True, 192, 128, 16, {**_WG3, **_DYN}, _LPT),  # {192, 128, true, true} (blockN 128)
        (64, False, 192, 192, 16, _WG3),  # {192, 192, false, true}
        (96, True, 192, 144, 16, {**_WG3, **_DYN}, _LPT),  # {192, 144, false, true} (not local)
        (96, False, 192, 144, 16, _WG3),
        (128, True, 128, 128, 12, _DYN, _LPT),  # {128, 128, true, true}
        (128, False, 128, 176, 12),  # {128, 176, true, true}
        (192, True, 128, 112, 12, {**_INTRA, **_DYN}, _LPT),  # headdim_v 192: {128, 112, t, t}
        (192, False, 128, 112, 12, _INTRA),
        (256, True, 128, 80, 12, {**_INTRA, **_DYN}, _LPT),  # {128, 80, true, true} (smem)
        (256, False, 128, 80, 12, _INTRA),
    ],
    dtypes=_FP16_BF16,
    note=_FA3_FWD_NOTE,
) + _rows(
    "flash2_bwd",
    [
        (64, None, 128, 128, 12, _BWD),  # <128, 128, 64, ..., 2, 2, true, f, f, 2 WGs, ...>
        (96, None, 64, 128, 12, _BWD),  # <64, 128, 96, ..., 2, 2, true, f, f, 2 WGs>
        (128, True, 64, 128, 12, _BWD),  # causal: <64, 128, 128, ..., 2 WGs>
        (128, False, 80, 128, 12, _BWD),  # <80, 128, 128, ..., 2, 2, true, f, true, 2 WGs>
        (192, None, 64, 96, 16, {**_BWD, **_WG3}),  # <64, 96, 192, ..., 1, 1, f, t, f, 3 WGs>
        (256, None, 64, 80, 12, _BWD),  # <64, 80, 256, ..., 1, 1, f, t, t, 2 WGs>
    ],
    dtypes=_FP16_BF16,
    note=_FA3_BWD_NOTE,
)

FA3 = Implementation(
    name="fa3",
    mma="wgmma.m64nNk16",
    wgmma_n=None,  # S = Q K^T is TileShape_MNK (kBlockM, kBlockN, d): N = kBlockN
    loads="tma",
    stages=2,
    producer_warps=4,
    consumer_warpgroups=2,  # kBlockM = 128 (d > 96); d <= 96 rows override to 3
    softmax_overlap="both",
    persistent=True,
    tile_scheduler="static",  # non-causal; the causal rows: dynamic
    q_in_registers=False,
    register_budget=240,
    source=(
        "FlashAttention-3: Shah et al. 2024, arXiv 2407.08608, Sec. 3.1-3.2; "
        "Dao-AILab/flash-attention@0251105a hopper/tile_size.h, flash_fwd_launch_template.h, "
        "mainloop_fwd_sm90_tma_gmma_ws.hpp, flash_fwd_kernel_sm90.h, "
        "flash_bwd_launch_template.h, flash_bwd_kernel_sm90.h, flash_api.cpp"
    ),
    tilings=_FA3_TILINGS,
    producer_register_budget=24,
)

# ---------------------------------------------------------------------------------------------
# cudnn: PyTorch SDPA's cuDNN forward on Hopper, cudnn_generated_fort_native_sdpa_sm90_flash_
# fprop_wgmma_f16_knob_7_64x128x{64,128}_4x1x1_cga1x1x1_kernel0_0 (cuDNN 9.19 under PyTorch 2.11,
# data/impl/impl_measure.json). cuDNN compiles it at run time and its source is not public; its
# launches say:
# - 384 threads (12 warps) at 168 registers a thread: one producer warpgroup and two consumer
#   warpgroups, 4 x 24 + 8 x 240 = 12 x 168 as FlashAttention-3's setmaxnreg splits them.
# - a grid of min(tiles, 132) CTAs: persistent, a CTA per SM.
# - wgmma (its name) on 64-row warpgroup tiles ("64x128xd"): 128 x 128 tiles of two consumer
#   warpgroups, measured at head dims 64 and 128 (the rows cover d <= 128).
# The rest is FlashAttention-3's description, ASSUMED: TMA loads, both softmax overlaps, a
# static tile scheduler without a mask and a dynamic one causal. The order in which it takes
# the tiles is not public: the grid's (not FA3's longest-first). Forward only (its backward's
# three kernels are not described).
_CUDNN_NOTE = "data/impl/impl_measure.json: kernel name, 384 threads, 168 registers, grid"
CUDNN = dataclasses.replace(
    FA3,
    name="cudnn",
    source=(
        "PyTorch 2.11 SDPA's cuDNN 9.19 forward on the H200: kernel name, threads, registers "
        "and grid (data/impl/impl_measure.json); the rest ASSUMED from FlashAttention-3 ("
        + FA3.source
        + ")"
    ),
    tilings=_rows(
        "flash2",
        [(128, True, 128, 128, 12, _DYN), (128, False, 128, 128, 12)],
        dtypes=_FP16_BF16,
        note=_CUDNN_NOTE,
    ),
)

# ---------------------------------------------------------------------------------------------
# flashio-hopper: this project's Hopper forward, kernels/cuda/hopper_fwd.cu (kernels/hopper.py).
# - wgmma m64nNk16: S = Q K^T with both operands from shared memory (N = block_kv), O += P V
#   with P from registers (N = head_dim); TMA copies (cp.async.bulk.tensor, 128-byte swizzle)
#   of Q, K and V completing on mbarriers; STAGES = 2 buffers of K and of V.
# - One producer warpgroup (one thread issues every copy; setmaxnreg 24) and block_q / 64
#   consumer warpgroups of 64 Q rows each (setmaxnreg 240, or 32 / 160 with three).
# - PINGPONG: the two consumers take turns issuing their products (named barriers 1 and 2),
#   so one's softmax runs under the other's products; INTRA: S_j is issued with P_{j-1} V_{j-1}
#   and the softmax of block j runs under the latter (softmax_overlap "both": the two).
# - One CTA per tile (blockIdx.x = (b H + h) Tr + i), not persistent (the PERSISTENT build, a
#   CTA per SM taking every grid-th tile, measured slower but at d = 64 with 192-row tiles).
_HOPPER_NOTE = "kernels/cuda/hopper_fwd.cu"
# Tiles: the fastest of the builds data/gpu/hopper/hopper_measure.json times (B = 1, H = 16).
# d = 64: three consumers without overlap from N = 16k (496 TFLOP/s there against 454 for
# 128 x 128); below, 128 x 128 without overlap, the fastest from N = 2k to 8k, where 192-row
# tiles leave a partial last wave (8k: 688 CTAs, 5.2 waves of 132). d = 128: 176 keys a block,
# ping-pong and intra-warpgroup.
_HOPPER_WG3 = {
    "consumer_warpgroups": 3,
    "register_budget": 160,
    "producer_register_budget": 32,
    "softmax_overlap": "none",
}
_HOPPER_FWD_NOTE = _HOPPER_NOTE + "; data/gpu/hopper/hopper_measure.json"
_HOPPER_TILINGS = (
    Tiling("flash2", 64, None, 192, 128, 16, dtypes=_FP16_BF16, seq_len_min=16384,
           overrides=tuple(_HOPPER_WG3.items()), note=_HOPPER_FWD_NOTE),
    *_rows(
        "flash2",
        [(64, None, 128, 128, 12, {"softmax_overlap": "none"}), (128, None, 128, 176, 12),
         (256, None, 128, 64, 12)],
        dtypes=_FP16_BF16,
        note=_HOPPER_FWD_NOTE,
    ),
    # kernels/cuda/hopper_bwd.cu: two consumer warpgroups of 64 keys (block_kv = 128), S^T and
    # dP^T then dQ, dV, dK with no softmax overlap; of the builds that fit 240 registers, the
    # fastest of data/gpu/hopper/hopper_bwd_measure.json (d = 128: three Q and dO buffers)
    *_rows(
        "flash2_bwd",
        [(64, None, 128, 128, 12, {"softmax_overlap": "none"}),
         (128, None, 64, 128, 12, {"softmax_overlap": "none", "stages": 3})],
        dtypes=_FP16_BF16,
        note="kernels/cuda/hopper_bwd.cu",
    ),
)  # fmt: skip

FLASHIO_HOPPER = Implementation(
    name="flashio-hopper",
    mma="wgmma.m64nNk16",
    wgmma_n=None,
    loads="tma",
    stages=2,
    producer_warps=4,
    consumer_warpgroups=2,  # three at d <= 64 (the tiling row's overrides)
    softmax_overlap="both",
    persistent=False,
    q_in_registers=False,
    register_budget=240,
    source="this project's kernels/cuda/hopper_fwd.cu and wgmma.cu",
    tilings=_HOPPER_TILINGS,
    producer_register_budget=24,
)

# ---------------------------------------------------------------------------------------------
# pytorch: eager attention, softmax(Q K^T * scale) V as separate kernels: a cuBLAS GEMM for
# Q K^T, an elementwise scale, a softmax kernel, a cuBLAS GEMM for P V (the project's
# ``standard`` schedule; its backward, ``standard_bwd``, is the autograd of the same ops).
# cuBLAS is closed source and picks its kernels by heuristics, so most facts here are
# ASSUMPTIONS, modelled on the public counterpart of cuBLAS's Hopper GEMMs, CUTLASS 3's
# TMA warp-specialized cooperative kernel (NVIDIA/cutlass@05cacc3d4c335dde51eb74d7788bc53045a2648f
# include/cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized_cooperative.hpp):
# - wgmma with TMA loads (assumed; on Hopper cuBLAS runs wgmma kernels, recorded as wgmma).
# - NumLoadWarpGroups = 1 (4 producer warps), 2 consumer warpgroups (NumMMAThreads = 8 warps),
#   setmaxnreg 232 / 40 (LoadRegisterRequirement = 40, MmaRegisterRequirement = 232 unless
#   RegsPerThread >= 208; a 128 x 128 fp32 tile over 256 threads needs 64).
# - persistent grid ("Setting persistent grid SM count"): the GEMMs of eager PyTorch's profile
#   run as 2 x 66 CTAs of 384 threads on the 132-SM H200 (data/impl/eager/eager_ncu.csv.gz).
# - Operands from shared memory (SS wgmma; q_in_registers = False).
# - stages = 2: cuBLAS's stage count is not public (CUTLASS sizes it to fill shared memory);
#   2, the least a TMA pipeline that overlaps needs, is an assumption.
# - Tile 128 x 128 (block_q x block_kv of the Q K^T GEMM) for every head dim: an assumption
#   (cuBLAS's tile choice is not documented); 12 warps = 4 producer + 2 x 4 consumer.
# The forward runs unfused (the standard schedule's ``unfused=1``, kernels._standard_unfused):
# Q K^T unscaled, the scale and the mask as elementwise kernels of their own and PyTorch's row
# softmax at its own launch, each priced by its machine code (data/sass/pytorch.json.gz). The
# backward (standard_bwd) keeps the standard schedule's fused kernels: not measured.
_PYTORCH_NOTE = "ASSUMPTION: cuBLAS tile not documented; CUTLASS 3 cooperative-style 128 x 128"
_PYTORCH_TILINGS = (
    Tiling("standard", None, None, 128, 128, 12, note=_PYTORCH_NOTE, options=(("unfused", 1),)),
    Tiling("standard_bwd", None, None, 128, 128, 12, note=_PYTORCH_NOTE),
)

PYTORCH = Implementation(
    name="pytorch",
    mma="wgmma.m64nNk16",
    wgmma_n=None,
    loads="tma",
    stages=2,
    producer_warps=4,
    consumer_warpgroups=2,
    softmax_overlap="none",
    persistent=True,
    q_in_registers=False,
    register_budget=232,
    source=(
        "PyTorch eager attention (matmul, scale, softmax, matmul); cuBLAS internals are not "
        "public: GEMM facts ASSUMED from NVIDIA/cutlass@05cacc3d include/cutlass/gemm/kernel/"
        "sm90_gemm_tma_warpspecialized_cooperative.hpp; tile 128 x 128 assumed"
    ),
    tilings=_PYTORCH_TILINGS,
    producer_register_budget=40,
)

IMPLEMENTATIONS: dict[str, Implementation] = {
    i.name: i for i in (FLASHIO, FLASH_ATTN2, TRITON, FA3, CUDNN, FLASHIO_HOPPER, PYTORCH)
}


def implementation(name_or_obj: str | Implementation | None = None) -> Implementation:
    """The implementation named ``name_or_obj`` (a key of ``IMPLEMENTATIONS``), the given
    :class:`Implementation` itself, or for None the project's own kernels (``"flashio"``)."""
    if name_or_obj is None:
        return IMPLEMENTATIONS[DEFAULT_IMPLEMENTATION]
    if isinstance(name_or_obj, Implementation):
        return name_or_obj
    if isinstance(name_or_obj, str):
        try:
            return IMPLEMENTATIONS[name_or_obj]
        except KeyError:
            raise ImplementationError(
                f"unknown implementation {name_or_obj!r}; choose one of "
                f"{', '.join(IMPLEMENTATIONS)} or pass a kernels.Implementation"
            ) from None
    raise ImplementationError(
        "impl must be an implementation name, a kernels.Implementation or None, got "
        f"{type(name_or_obj).__name__} {name_or_obj!r}"
    )
