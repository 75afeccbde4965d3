"""What a simulation reports."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from flashio.simulator.occupancy import Occupancy

__all__ = ["KernelResult", "SimResult", "TensorTraffic"]

# A resource busy at least this fraction of the run is called saturated when naming the bound.
SATURATED = 0.5


@dataclass(frozen=True, slots=True)
class TensorTraffic:
    """Bytes of one tensor: requested by SMs (global) and reaching HBM after the L2 model."""

    name: str
    global_read_bytes: int
    global_write_bytes: int
    hbm_read_bytes: int
    hbm_write_bytes: int


@dataclass(frozen=True, slots=True)
class KernelResult:
    name: str
    ctas: int
    waves: int
    occupancy: Occupancy
    start_s: float
    time_s: float  # launch overhead included
    smem_peak_bytes: int  # per CTA, replayed from ALLOC/FREE
    reg_tile_peak_bytes: int  # per CTA, register tiles replayed from ALLOC/FREE
    global_read_bytes: int
    global_write_bytes: int
    hbm_read_bytes: int
    hbm_write_bytes: int
    # the instruction-census entry whose replayed main loop priced the kernel's steps (the
    # issue model: docs/model.md); empty where the pipe rates did
    census_key: str = ""


@dataclass(frozen=True, slots=True, eq=True)
class SimResult:
    """Traffic, time and resource use of one schedule on one GPU.

    ``global_*`` bytes are what the SMs ask of the memory system (the FlashAttention papers'
    "HBM accesses", ncu's l1tex<->xbar bytes); ``hbm_*`` bytes are what reaches DRAM after the L2
    model (ncu's dram__bytes). ``l2_dirty_bytes_at_end``: written lines still in L2 when the last
    kernel ends (their write-back is not in ``hbm_write_bytes``).
    """

    schedule: str
    gpu: str
    global_read_bytes: int
    global_write_bytes: int
    hbm_read_bytes: int
    hbm_write_bytes: int
    l2_dirty_bytes_at_end: int
    tensors: tuple[TensorTraffic, ...]
    kernels: tuple[KernelResult, ...]
    sram_peak_bytes: int  # shared memory per CTA, largest over the kernels
    mma_flops: int
    elementwise_flops: int
    exps: int
    shared_exchange_bytes: int
    time_s: float
    cycles: float
    breakdown: dict[str, float] = field(hash=False)  # busy seconds per resource, launch overhead
    utilization: dict[str, float] = field(hash=False)  # busy fraction of the run per resource
    # with simulate(..., timeline=True): per kernel, a (ctas, 3) array of start s, end s, SM
    timeline: tuple | None = field(default=None, compare=False, hash=False, repr=False)
    # and a (ctas, 4) array sampled as each CTA ends: its end s, HBM bytes moved so far in the
    # run (read + write), bytes the L2 holds, and how many of them are dirty
    memory_timeline: tuple | None = field(default=None, compare=False, hash=False, repr=False)
    # with simulate(..., mode="sampled"): what was replayed and the error estimate
    # (simulator.sampled.Sampling); None for an exact replay
    sampling: object | None = field(default=None, compare=False, hash=False, repr=False)

    @property
    def occupancy(self) -> Occupancy:
        """Occupancy of the kernel that takes the most time."""
        return max(self.kernels, key=lambda k: k.time_s).occupancy

    @property
    def waves(self) -> int:
        return max(self.kernels, key=lambda k: k.time_s).waves

    @property
    def global_bytes(self) -> int:
        return self.global_read_bytes + self.global_write_bytes

    @property
    def hbm_bytes(self) -> int:
        return self.hbm_read_bytes + self.hbm_write_bytes

    @property
    def bound(self) -> str:
        """``memory`` or ``compute`` when that kind of resource is the busiest and saturated
        (busy at least half the run), else ``latency``."""
        name, busy = max(self.utilization.items(), key=lambda kv: kv[1])
        if busy < SATURATED:
            return "latency"
        return "memory" if name in ("hbm", "l2", "sm_memory") else "compute"

    def tensor(self, name: str) -> TensorTraffic:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(f"no tensor {name!r}; have {', '.join(t.name for t in self.tensors)}")

    def to_dict(self) -> dict:
        """Everything but the timelines, as plain JSON-ready values."""
        d = asdict(self)
        d.pop("timeline")
        d.pop("memory_timeline")
        d["sampling"] = None if self.sampling is None else self.sampling.to_dict()
        d["bound"] = self.bound
        d["occupancy"] = self.occupancy.to_dict()
        d["waves"] = self.waves
        for k, kr in zip(d["kernels"], self.kernels, strict=True):
            k["occupancy"] = kr.occupancy.to_dict()
        return d
