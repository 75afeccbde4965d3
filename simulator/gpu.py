"""GPU specifications: every hardware constant the models read, with its unit in its name.

A spec is a frozen :class:`GPUSpec`. Built-in specs live in ``simulator/specs/*.toml`` (one file
per GPU, every value with its source); users write their own TOML file, optionally inheriting from
another one with ``base = "h200"``. ``docs/gpus.md`` documents every key.

Resources are stored where they live: per SM and per cycle (arithmetic rates, shared memory,
registers, the SM's path to memory), per L2 partition (bandwidth), per chip (L2 capacity, HBM,
the SM count) and the clock. Chip totals (``tensor_bf16_flops_per_s``, ``l2_bandwidth_bytes_
per_s``, ...) are derived properties, never stored, so ``replace(sm_count=n)`` gives a GPU of n
SMs like the others rather than n faster SMs.
"""

import dataclasses
import difflib
import math
import numbers
from typing import Any, NamedTuple

from flashio.simulator.errors import GPUSpecError

__all__ = ["GPUSpec", "GPUSpecError"]

# Shared-memory carve-outs of the unified L1 (KiB) that Ampere and Hopper offer (CUDA C++
# Programming Guide, compute capabilities 8.0 and 9.0; the A100's list ends at 164)
SMEM_CARVEOUTS_KIB = (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)


# Chip totals that earlier spec files stored; now derived. For each: the stored field it
# comes from, and what the stored field is multiplied by (besides clock_hz).
DERIVED = {
    "tensor_fp16_flops_per_s": ("tensor_fp16_flops_per_cycle_per_sm", "sm_count"),
    "tensor_bf16_flops_per_s": ("tensor_bf16_flops_per_cycle_per_sm", "sm_count"),
    "tensor_tf32_flops_per_s": ("tensor_tf32_flops_per_cycle_per_sm", "sm_count"),
    "tensor_fp64_flops_per_s": ("tensor_fp64_flops_per_cycle_per_sm", "sm_count"),
    "fp32_flops_per_s": ("fp32_flops_per_cycle_per_sm", "sm_count"),
    "fp64_flops_per_s": ("fp64_flops_per_cycle_per_sm", "sm_count"),
    "sfu_ops_per_s": ("sfu_ops_per_cycle_per_sm", "sm_count"),
    "l2_bandwidth_bytes_per_s": ("l2_bandwidth_bytes_per_cycle_per_partition", "l2_partitions"),
}


def derived_message(key: str) -> str:
    """Why ``key`` cannot be set, and what to set instead."""
    stored, count = DERIVED[key]
    return (
        f"{key} is a chip total, derived as {stored} x {count} x clock_hz (docs/gpus.md, "
        f"'What scales with what'); set {stored} instead"
    )


class RequestCosts(NamedTuple):
    """Memory requests on a GPU, plain or bulk copies (``GPUSpec.request_costs``): the rates
    at which one SM's path sends loads and stores, the latency a load adds after its bytes
    have passed the L2 or HBM, and a store after the L2."""

    load_bytes_per_s: float
    store_bytes_per_s: float
    l2_latency_s: float
    hbm_latency_s: float
    store_latency_s: float


class _ChipTotal:
    """A chip total, read-only: its stored per-SM (or per-partition) field x the count of those
    x ``clock_hz``, as :data:`DERIVED` says."""

    def __set_name__(self, owner, name):
        self.name = name
        self.stored, self.count = DERIVED[name]
        self.__doc__ = f"{name}: {self.stored} x {self.count} x clock_hz (derived)."

    def __get__(self, spec, owner=None):
        if spec is None:
            return self
        return getattr(spec, self.stored) * getattr(spec, self.count) * spec.clock_hz


@dataclasses.dataclass(frozen=True, slots=True)
class GPUSpec:
    """One GPU, real or hypothetical. Counts and sizes are ints, rates are floats.

    Every field is positive except ``l2_bytes``, which may be 0 ("no L2", the FlashAttention
    paper's model where every global access reaches HBM), the fields a spec file may leave
    out (``l1_bytes_per_sm`` and those after it: 0 where not known), and ``description``
    (may be empty).
    ``docs/gpus.md`` gives each field's meaning and what the simulator uses it for.
    """

    name: str
    description: str
    # SM array: per-SM resources below are multiplied by sm_count for chip totals
    sm_count: int
    clock_hz: float  # SM clock; per-cycle rates times this give rates per second
    warp_size: int
    sm_sub_partitions: int  # warp schedulers per SM; one warp issues to one of them
    # shared memory (the FA papers' SRAM), per SM and per CTA (opt-in maximum)
    smem_per_sm_bytes: int
    smem_per_cta_bytes: int
    smem_bandwidth_bytes_per_cycle_per_sm: int
    smem_reserved_per_cta_bytes: int  # shared memory the system reserves for each resident CTA
    # occupancy limits, per SM
    regs_per_sm: int
    regs_per_thread_max: int
    regs_alloc_unit_per_warp: int  # registers are allocated to warps in units of this many
    max_warps_per_sm: int
    max_ctas_per_sm: int
    max_threads_per_cta: int
    # one SM's path to the memory system: bytes in plus out per cycle it can sustain
    sm_memory_bytes_per_cycle_per_sm: float
    # L2: capacity per chip, bandwidth per partition
    l2_bytes: int
    l2_line_bytes: int
    l2_sector_bytes: int
    l2_partitions: int
    l2_bandwidth_bytes_per_cycle_per_partition: float
    # HBM, per chip
    hbm_bytes: int
    hbm_bandwidth_bytes_per_s: float  # datasheet
    hbm_efficiency: float  # achievable fraction of the datasheet bandwidth, in (0, 1]
    # latencies and overheads
    hbm_latency_cycles: int
    l2_latency_cycles: int
    smem_latency_cycles: int
    kernel_launch_s: float
    # arithmetic throughput per SM per cycle (dense)
    tensor_fp16_flops_per_cycle_per_sm: float
    tensor_bf16_flops_per_cycle_per_sm: float
    tensor_tf32_flops_per_cycle_per_sm: float
    tensor_fp64_flops_per_cycle_per_sm: float
    fp32_flops_per_cycle_per_sm: float
    fp64_flops_per_cycle_per_sm: float
    sfu_ops_per_cycle_per_sm: float  # special-function unit (exp) results
    # the SM's unified L1 data cache and shared memory; the L1 is what the shared-memory
    # carve-out leaves, and holds spilled registers where they fit. 0: not known (no spill
    # reload then hits L1). Last, with a default, so spec files without it still load.
    l1_bytes_per_sm: int = 0
    # the reductions (atomic adds: red.global) one SM can send per cycle, where they are
    # slower than its memory path; 0: not measured (they move at the path's rate). Last, with
    # a default, so spec files without it still load.
    sm_reduce_bytes_per_cycle_per_sm: float = 0.0
    # bulk copies (TMA, cp.async.bulk: a warp-specialized kernel's tiles in and out of shared
    # memory), where measured: one SM's rate and the latency of a copy from the L2 and from
    # HBM, and of a copy out; 0: not known (priced as the loads and stores above). Last, with
    # defaults, so spec files without them still load.
    bulk_load_bytes_per_cycle_per_sm: float = 0.0
    bulk_l2_latency_cycles: int = 0
    bulk_hbm_latency_cycles: int = 0
    bulk_store_bytes_per_cycle_per_sm: float = 0.0
    bulk_store_latency_cycles: int = 0
    # the block scheduler's turnaround, where measured: how long a slot idles between its
    # CTA's end and the next CTA's start; 0: not known (the next CTA starts as the last one
    # ends). Seconds: the probe times it on the global timer. Last, with a default, so spec
    # files without it still load.
    cta_turnaround_s: float = 0.0

    def __post_init__(self):
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, _checked(f.name, f.type, getattr(self, f.name)))
        _check_relations(self)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """Names of all fields, in declaration order (the keys of a spec file, less ``base``)."""
        return tuple(f.name for f in dataclasses.fields(cls))

    def replace(self, **changes: Any) -> "GPUSpec":
        """Return a new spec with ``changes`` applied, validated like a loaded file.

        Parameters
        ----------
        **changes
            Field names and new values, e.g. ``smem_per_sm_bytes=2 * gpu.smem_per_sm_bytes``.

        Raises
        ------
        GPUSpecError
            For an unknown field name or an invalid resulting spec. ``self`` is never modified.
        """
        for key in changes:
            if key in DERIVED:
                raise GPUSpecError(f"GPUSpec.replace: {derived_message(key)}", key=key)
            if key not in _FIELD_NAMES:
                raise GPUSpecError(f"GPUSpec.replace: {_unknown_key(key)}", key=key)
        return dataclasses.replace(self, **changes)

    # -- chip totals, derived from the per-SM and per-partition resources (DERIVED) -----------
    tensor_fp16_flops_per_s = _ChipTotal()
    tensor_bf16_flops_per_s = _ChipTotal()
    tensor_tf32_flops_per_s = _ChipTotal()
    tensor_fp64_flops_per_s = _ChipTotal()
    fp32_flops_per_s = _ChipTotal()
    fp64_flops_per_s = _ChipTotal()
    sfu_ops_per_s = _ChipTotal()
    l2_bandwidth_bytes_per_s = _ChipTotal()

    @property
    def sm_memory_bandwidth_bytes_per_s(self) -> float:
        """What one SM can move to and from the memory system per second."""
        return self.sm_memory_bytes_per_cycle_per_sm * self.clock_hz

    @property
    def sm_reduce_bandwidth_bytes_per_s(self) -> float:
        """The reductions one SM can send per second: its measured rate where it is below
        the memory path's, else the path's."""
        red = self.sm_reduce_bytes_per_cycle_per_sm or self.sm_memory_bytes_per_cycle_per_sm
        return min(red, self.sm_memory_bytes_per_cycle_per_sm) * self.clock_hz

    def request_costs(self, bulk: bool = False) -> RequestCosts:
        """What memory requests cost on this GPU: loads' and stores' rates through the SM's
        path and their latencies; ``bulk``, those of bulk copies (TMA: the tiles a
        warp-specialized kernel copies in and out), at the bulk-copy fields wherever they are
        known and the plain requests' elsewhere."""

        def pick(measured, plain):
            return measured if bulk and measured else plain

        path = self.sm_memory_bytes_per_cycle_per_sm
        l2 = self.l2_latency_cycles
        return RequestCosts(
            load_bytes_per_s=pick(self.bulk_load_bytes_per_cycle_per_sm, path) * self.clock_hz,
            store_bytes_per_s=pick(self.bulk_store_bytes_per_cycle_per_sm, path) * self.clock_hz,
            l2_latency_s=self.cycles_to_s(pick(self.bulk_l2_latency_cycles, l2)),
            hbm_latency_s=self.cycles_to_s(pick(self.bulk_hbm_latency_cycles,
                                                self.hbm_latency_cycles)),
            store_latency_s=self.cycles_to_s(pick(self.bulk_store_latency_cycles, l2)),
        )  # fmt: skip

    def mma_flops_per_s(self, dtype: str) -> float:
        """Matrix-multiply throughput for inputs of ``dtype``, in FLOP/s (dense).

        ``fp16`` and ``bf16`` use the tensor cores; ``fp32`` is plain FP32 FMA (attention kernels
        in fp32 are written without TF32); ``fp64`` uses the FP64 tensor cores.
        """
        return self.mma_flops_per_cycle_per_sm(dtype) * self.sm_count * self.clock_hz

    def mma_flops_per_cycle_per_sm(self, dtype: str) -> float:
        """Matrix-multiply FLOP one SM completes per cycle for inputs of ``dtype`` (dense)."""
        field = _MMA_FIELDS.get(dtype) if isinstance(dtype, str) else None
        if field is None:
            raise GPUSpecError(f"dtype must be one of {', '.join(_MMA_FIELDS)}, got {dtype!r}")
        return getattr(self, field)

    @property
    def effective_hbm_bandwidth_bytes_per_s(self) -> float:
        """Achievable HBM bandwidth: datasheet bandwidth times ``hbm_efficiency``."""
        return self.hbm_bandwidth_bytes_per_s * self.hbm_efficiency

    def l1_free_bytes(self, smem_bytes: int) -> int:
        """L1 bytes an SM has beside ``smem_bytes`` of shared memory in use: the unified array
        less the carve-out the driver picks, the smallest of the architecture's carve-out steps
        (:data:`SMEM_CARVEOUTS_KIB`) that holds ``smem_bytes``; 0 where ``l1_bytes_per_sm`` is
        not known."""
        steps = [k * 1024 for k in SMEM_CARVEOUTS_KIB if k * 1024 >= smem_bytes]
        carve = steps[0] if steps else smem_bytes
        return max(0, self.l1_bytes_per_sm - carve)

    def cycles_to_s(self, cycles: float) -> float:
        """Convert SM clock cycles to seconds at ``clock_hz``."""
        return cycles / self.clock_hz

    def s_to_cycles(self, seconds: float) -> float:
        """Convert seconds to SM clock cycles at ``clock_hz``."""
        return seconds * self.clock_hz

    def to_dict(self) -> dict[str, Any]:
        """All fields as a plain dict, in declaration order (``GPUSpec(**d)`` rebuilds it)."""
        return {name: getattr(self, name) for name in _FIELD_NAMES}


_FIELD_NAMES: tuple[str, ...] = GPUSpec.field_names()
# fields a spec file may leave out (they take their default) and the fields that may be 0
OPTIONAL_FIELDS = {
    f.name: f.default for f in dataclasses.fields(GPUSpec) if f.default is not dataclasses.MISSING
}
BULK_FIELDS = (
    "bulk_load_bytes_per_cycle_per_sm",
    "bulk_l2_latency_cycles",
    "bulk_hbm_latency_cycles",
    "bulk_store_bytes_per_cycle_per_sm",
    "bulk_store_latency_cycles",
)
ZERO_ALLOWED = (
    "l2_bytes", "l1_bytes_per_sm", "sm_reduce_bytes_per_cycle_per_sm", *BULK_FIELDS,
    "cta_turnaround_s",
)  # fmt: skip
_MMA_FIELDS = {
    "fp16": "tensor_fp16_flops_per_cycle_per_sm",
    "bf16": "tensor_bf16_flops_per_cycle_per_sm",
    "fp32": "fp32_flops_per_cycle_per_sm",
    "fp64": "tensor_fp64_flops_per_cycle_per_sm",
}


_UNITS = (  # name suffix -> unit, longest suffix first
    ("_bytes_per_cycle_per_partition", "bytes per cycle per L2 partition"),
    ("_flops_per_cycle_per_sm", "FLOP per cycle per SM"),
    ("_ops_per_cycle_per_sm", "operations per cycle per SM"),
    ("_bytes_per_cycle_per_sm", "bytes per cycle per SM"),
    ("_bytes_per_s", "bytes/s"),
    ("_flops_per_s", "FLOP/s"),
    ("_ops_per_s", "operations/s"),
    ("_bytes", "bytes"),
    ("_cycles", "SM clock cycles"),
    ("_hz", "Hz"),
    ("_s", "seconds"),
)


def _unit(name: str) -> str:
    return next((f" ({unit})" for suffix, unit in _UNITS if name.endswith(suffix)), "")


def _checked(name: str, kind: type, value: Any) -> Any:
    """Return ``value`` converted to ``kind`` (int, float or str), or raise GPUSpecError."""
    got = f"{name} = {value!r} ({type(value).__name__})"
    if kind is str:
        if not isinstance(value, str):
            raise GPUSpecError(f"{got} must be a string", key=name)
        if name == "name" and not value.strip():
            raise GPUSpecError(f"name must be a non-empty string, got {value!r}", key=name)
        return value
    may_be_zero = name in ZERO_ALLOWED
    lowest = "an integer >= 0" if may_be_zero else "a positive integer"
    if kind is int:
        if isinstance(value, float) and value.is_integer():
            raise GPUSpecError(
                f"{got} must be {lowest}{_unit(name)}, not a float: write the integer"
                f" {int(value)} (or {int(value):_})",
                key=name,
            )
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise GPUSpecError(f"{got} must be {lowest}{_unit(name)}", key=name)
        value = int(value)
        if value < 0 or (value == 0 and not may_be_zero):
            hint = f" (only {', '.join(ZERO_ALLOWED)} may be 0)" if value == 0 else ""
            raise GPUSpecError(f"{got} must be {lowest}{_unit(name)}{hint}", key=name)
        if value >= 2**62:  # the engine and the outputs hold sizes in 64-bit integers
            raise GPUSpecError(f"{got} is too large: at most 2**62 - 1{_unit(name)}", key=name)
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise GPUSpecError(f"{got} must be a positive number{_unit(name)}", key=name)
    value = float(value)
    if not (math.isfinite(value) and (value > 0 or (value == 0 and may_be_zero))):
        lowest = "a finite number >= 0" if may_be_zero else "a positive, finite number"
        raise GPUSpecError(f"{got} must be {lowest}{_unit(name)}", key=name)
    if name == "hbm_efficiency" and value > 1:
        raise GPUSpecError(
            f"{got} must be in (0, 1]: the achievable fraction of hbm_bandwidth_bytes_per_s,"
            " e.g. 0.9",
            key=name,
        )
    return value


def _check_relations(s: GPUSpec) -> None:
    """Constraints between fields; the error names the field that is most likely wrong."""
    if s.smem_per_cta_bytes > s.smem_per_sm_bytes:
        raise GPUSpecError(
            f"smem_per_cta_bytes = {s.smem_per_cta_bytes} exceeds smem_per_sm_bytes = "
            f"{s.smem_per_sm_bytes}: a CTA cannot use more shared memory than its SM has; "
            f"set smem_per_cta_bytes <= {s.smem_per_sm_bytes}",
            key="smem_per_cta_bytes",
        )
    if s.l2_line_bytes % s.l2_sector_bytes:
        raise GPUSpecError(
            f"l2_line_bytes = {s.l2_line_bytes} must be a multiple of l2_sector_bytes = "
            f"{s.l2_sector_bytes} (a line is made of whole sectors, e.g. 128 and 32)",
            key="l2_line_bytes",
        )
    if s.l2_line_bytes & (s.l2_line_bytes - 1):
        raise GPUSpecError(
            f"l2_line_bytes = {s.l2_line_bytes} must be a power of two (cache lines are; "
            "the L2 model addresses lines by bit shifts), e.g. 128",
            key="l2_line_bytes",
        )
    if s.l2_bytes % s.l2_line_bytes:
        raise GPUSpecError(
            f"l2_bytes = {s.l2_bytes} must be a multiple of l2_line_bytes = "
            f"{s.l2_line_bytes} (the L2 model holds whole lines; 0 means no L2)",
            key="l2_bytes",
        )
    if s.max_threads_per_cta % s.warp_size:
        raise GPUSpecError(
            f"max_threads_per_cta = {s.max_threads_per_cta} must be a multiple of "
            f"warp_size = {s.warp_size} (a CTA is made of whole warps)",
            key="max_threads_per_cta",
        )
    if s.max_threads_per_cta > s.max_warps_per_sm * s.warp_size:
        raise GPUSpecError(
            f"max_threads_per_cta = {s.max_threads_per_cta} exceeds max_warps_per_sm * "
            f"warp_size = {s.max_warps_per_sm * s.warp_size}: the largest CTA must fit on an SM",
            key="max_threads_per_cta",
        )
    if s.regs_per_thread_max * s.warp_size > s.regs_per_sm:
        raise GPUSpecError(
            f"regs_per_thread_max = {s.regs_per_thread_max} times warp_size = "
            f"{s.warp_size} exceeds regs_per_sm = {s.regs_per_sm}: one warp at the maximum "
            "must fit in the register file",
            key="regs_per_thread_max",
        )


def _unknown_key(key: str) -> str:
    valid = ("base", *_FIELD_NAMES)
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else "."
    return f"unknown key '{key}'{hint} Valid keys: {', '.join(valid)}"


# ---------------------------------------------------------------------------- spec files
