"""The tiling rule B = M/(4d) in its two forms, and what each form must hold on chip.

M is the on-chip memory in *elements* of the working dtype (the FlashAttention paper's unit); a
GPU spec stores bytes, so M = sram_bytes // elem_bytes. The seed (000, section 4) takes
B = floor(M/(4d)) for Q, K, V and O blocks alike ("四份开销": four blocks share M; "向下取整":
round down so that they always fit). The FA paper (Alg. 1, line 1) takes Bc = ceil(M/(4d)) and
Br = min(ceil(M/(4d)), d). Neither counts every tile that is live in Alg. 1, and the project's
kernels keep some tiles in registers instead of shared memory: ``tiling_rule`` reports all three
views with the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from flashio import kernels, simulator
from flashio.analysis.closed_form.capacity import (
    Capacity,
    Tile,
    _m_elements,
    _positive,
    tile_capacity,
)
from flashio.kernels.schedules import DEFAULT_WARPS
from flashio.simulator import Space, TilingError

__all__ = [
    "Capacity",
    "KernelFit",
    "Tile",
    "TilingForm",
    "TilingRule",
    "kernel_fit",
    "tile_capacity",
    "tiling_rule",
]


@dataclass(frozen=True, slots=True)
class KernelFit:
    """What one of the project's kernels needs per CTA at given blocks, and whether it fits."""

    kernel: str
    warps: int
    smem_bytes: int
    smem_limit_bytes: int
    regs_per_thread: int
    regs_per_thread_max: int
    ctas_per_sm: int  # 0 when one CTA does not fit
    limiter: str
    error: str = ""

    @property
    def fits(self) -> bool:
        return not self.error

    @property
    def spilled_regs_per_thread(self) -> int:
        return max(0, self.regs_per_thread - self.regs_per_thread_max)

    def to_dict(self) -> dict:
        d = {f: getattr(self, f) for f in self.__dataclass_fields__}
        d["fits"], d["spilled_regs_per_thread"] = self.fits, self.spilled_regs_per_thread
        return d


def kernel_fit(
    gpu: simulator.GPUSpec,
    sched: kernels.Schedule,
) -> tuple[tuple[KernelFit, ...], tuple[simulator.TensorInfo, ...]]:
    """Per-kernel shared memory, registers and occupancy of ``sched`` on ``gpu``.

    Returns the fits (one per kernel) and the schedule's on-chip tensors (shared memory and
    register tiles), which is what the kernels actually hold.
    """
    on_chip = tuple(t for t in sched.tensors if t.space != Space.GLOBAL)
    fits = []
    for k in sched.kernels:
        common = (k.name, k.warps, k.smem_bytes, gpu.smem_per_cta_bytes, k.regs_per_thread)
        try:
            occ = simulator.occupancy(k, gpu, on_chip)
        except simulator.CapacityError as exc:
            fits.append(KernelFit(*common, gpu.regs_per_thread_max, 0, "", str(exc)))
            continue
        fits.append(KernelFit(*common, gpu.regs_per_thread_max, occ.ctas_per_sm, occ.limiter))
    return tuple(fits), on_chip


@dataclass(frozen=True, slots=True)
class TilingForm:
    """One form of the rule: its blocks, its capacity count, and the project's kernel at them."""

    name: str  # "seed" or "paper"
    formula: str
    block_q: int
    block_kv: int
    capacity: Capacity
    schedule: str
    kernels: tuple[KernelFit, ...]
    on_chip: tuple[simulator.TensorInfo, ...]

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "formula": self.formula,
            "block_q": self.block_q,
            "block_kv": self.block_kv,
            "capacity": self.capacity.to_dict(),
            "schedule": self.schedule,
            "kernels": [k.to_dict() for k in self.kernels],
            "on_chip": [
                {
                    "name": t.name,
                    "space": t.space.name,
                    "shape": list(t.shape),
                    "bytes": t.size_bytes,
                }
                for t in self.on_chip
            ],
        }


@dataclass(frozen=True, slots=True)
class TilingRule:
    """B = M/(4d) on one GPU for one head dim and dtype, in the seed's and the paper's form.

    ``block_kv`` and ``block_q`` are the paper's (Alg. 1 line 1), ``seed_block`` the seed's.
    M (``m_elements``) is in elements of ``dtype``; ``sram_bytes`` is the same memory in bytes.
    """

    gpu: str
    head_dim: int
    dtype: str
    elem_bytes: int
    sram_bytes: int
    sram_source: str
    m_elements: int
    seed_block: int
    block_kv: int
    block_q: int
    forms: tuple[TilingForm, TilingForm]
    notes: tuple[str, ...]

    @property
    def ratio(self) -> float:
        """M/(4d), unrounded."""
        return self.m_elements / (4 * self.head_dim)

    def form(self, name: str) -> TilingForm:
        for f in self.forms:
            if f.name == name:
                return f
        raise KeyError(f"no form {name!r}; have seed, paper")

    def to_dict(self) -> dict:
        d = {f: getattr(self, f) for f in self.__dataclass_fields__ if f not in ("forms",)}
        d["ratio"] = self.ratio
        d["notes"] = list(self.notes)
        d["forms"] = [f.to_dict() for f in self.forms]
        return d


def tiling_rule(
    gpu: simulator.GPUSpec | str,
    head_dim: int,
    dtype: str = "fp16",
    sram_bytes: int | None = None,
    *,
    schedule: str = "flash2",
    warps: int | None = None,
) -> TilingRule:
    """B = M/(4d) for ``gpu``: both forms, their capacity counts, and the project's kernels.

    Parameters
    ----------
    gpu : simulator.GPUSpec, or a built-in name / TOML path
    head_dim : int
        d.
    dtype : str
        Working dtype (``kernels.DTYPES``); M counts elements of it.
    sram_bytes : int, optional
        On-chip memory in bytes; default ``gpu.smem_per_cta_bytes`` (the most one CTA may have).
    schedule : str
        The project's schedule whose kernels are checked at each form's blocks (default flash2).
    warps : int, optional
        Warps per CTA for that check (default 4).

    Returns
    -------
    TilingRule
        ``block_kv = ceil(M/(4d))``, ``block_q = min(ceil(M/(4d)), d)`` (paper) and
        ``seed_block = floor(M/(4d))`` (seed), with a ``TilingForm`` each and plain-language
        ``notes`` on what fits and what does not.

    Raises
    ------
    ValueError
        Bad arguments, or M < 4d (not one row of each of the four blocks fits).

    Notes
    -----
    Dao et al. 2022, Alg. 1 line 1 (M in elements); seed 000 section 4, B_Q = floor(M_SRAM/(4d)).
    The check of the kernels uses a nominal shape (batch 1, one head, N = the larger block):
    shared memory and registers per CTA do not depend on N, batch or heads.
    """
    if not isinstance(gpu, simulator.GPUSpec):
        gpu = simulator.load_gpu(gpu)
    d = _positive("head_dim", head_dim)
    source = f"smem_per_cta_bytes of {gpu.name}" if sram_bytes is None else "given sram_bytes"
    sram = gpu.smem_per_cta_bytes if sram_bytes is None else sram_bytes
    m, eb = _m_elements(sram, dtype)
    if m < 4 * d:
        raise TilingError(
            f"sram_bytes={sram} holds M={m} {dtype} elements, fewer than 4d={4 * d}: not one row "
            f"each of Q, K, V and O fits; use at least {4 * d * eb} bytes or a smaller head_dim"
        )
    floor_b, ceil_b = m // (4 * d), -(-m // (4 * d))
    algorithm = "flash1" if schedule.startswith("flash1") else "flash2"
    forms = []
    for name, formula, br, bc in (
        ("seed", "Br = Bc = floor(M/(4d))", floor_b, floor_b),
        ("paper", "Bc = ceil(M/(4d)), Br = min(ceil(M/(4d)), d)", min(ceil_b, d), ceil_b),
    ):
        shape = kernels.AttentionShape(1, 1, max(br, bc), d, dtype)
        sched = kernels.schedule(schedule, shape, br, bc, warps or DEFAULT_WARPS)
        fits, on_chip = kernel_fit(gpu, sched)
        cap = tile_capacity(br, bc, d, dtype, sram, algorithm)
        forms.append(TilingForm(name, formula, br, bc, cap, schedule, fits, on_chip))
    seed, paper = forms
    notes = _notes(m, d, dtype, eb, sram, seed, paper, gpu)
    return TilingRule(
        gpu=gpu.name,
        head_dim=d,
        dtype=dtype,
        elem_bytes=eb,
        sram_bytes=sram,
        sram_source=source,
        m_elements=m,
        seed_block=floor_b,
        block_kv=ceil_b,
        block_q=min(ceil_b, d),
        forms=(seed, paper),
        notes=notes,
    )


def _verdict(n: int, m: int) -> str:
    if n <= m:
        return f"{n:,} <= M = {m:,}: fits ({n / m:.0%} of M)"
    return f"{n:,} > M = {m:,}: exceeds M by {n - m:,} elements (+{(n - m) / m:.1%})"


def _notes(m, d, dtype, eb, sram, seed, paper, gpu) -> tuple[str, ...]:
    r = m / (4 * d)
    out = [
        f"M = {sram:,} B / {eb} B per {dtype} element = {m:,} elements (the FA paper's M counts "
        "elements; GPU specs store bytes).",
        f"M/(4d) = {m:,}/{4 * d:,} = {r:g}: seed floor -> Br = Bc = {seed.block_kv}; paper ceil "
        f"-> Bc = {paper.block_kv}, Br = min({paper.block_kv}, d={d}) = {paper.block_q}.",
    ]
    if seed.block_kv != paper.block_kv:
        out.append(
            f"The forms differ by rounding: 4d = {4 * d} does not divide M, so ceil gives "
            f"{paper.block_kv} rows where floor gives {seed.block_kv}."
        )
    sc, pc = seed.capacity, paper.capacity
    out.append(
        f"Seed, 4 blocks: 4 x {seed.block_kv} x {d} = {_verdict(sc.seed_elements, m)}. Rounding "
        "down makes this hold for every M and d."
    )
    out.append(
        f"Seed, counting S_ij = {seed.block_q} x {seed.block_kv} = "
        f"{seed.block_q * seed.block_kv:,} and l, m as well (the seed's '4 blocks' leave them "
        f"out): {_verdict(sc.live_elements, m)}."
    )
    cause = (
        "Br = Bc here (ceil(M/4d) <= d), so 4 x ceil(M/4d) x d can pass M by rounding"
        if paper.block_q == paper.block_kv
        else f"Br is capped at d = {d}, so Q_i and O_i are small"
    )
    out.append(
        f"Paper blocks, counting Q_i, K_j, V_j, O_i as the seed does ({cause}): "
        f"{_verdict(pc.seed_elements, m)}."
    )
    live = (
        f"Paper blocks, live set with S_ij = {paper.block_q} x {paper.block_kv} (Br <= d keeps "
        f"S_ij <= d x ceil(M/4d), about M/4) and l, m: {_verdict(pc.live_elements, m)}."
    )
    if pc.live_elements > m:
        live += (
            " The paper sizes blocks so that each tile is O(M) (Alg. 1 line 1, proof of "
            "Thm. 2); the constant factor is not checked, and here it matters."
        )
    out.append(live)
    out.append(
        "With K_j, V_j double-buffered (as production kernels do to overlap loads): seed "
        f"{_verdict(sc.double_buffered_elements, m)}; paper "
        f"{_verdict(pc.double_buffered_elements, m)}."
    )
    for f in (seed, paper):
        held = []
        for space, where in (
            (Space.SHARED, "shared memory holds"),
            (Space.REGISTERS, "registers hold"),
        ):
            tiles = [t for t in f.on_chip if t.space == space]
            if tiles:
                names = ", ".join(t.name for t in tiles)
                held.append(f"{where} {names} ({sum(t.size_bytes for t in tiles):,} B)")
        line = [f"The project's {f.schedule} at the {f.name} blocks ({f.block_q} x {f.block_kv}):"]
        line.append("; ".join(held) + ".")
        for k in f.kernels:
            if not k.fits and k.smem_bytes > k.smem_limit_bytes:
                line.append(
                    f"{k.kernel} does not fit: {k.smem_bytes:,} B of shared memory per CTA, "
                    f"{gpu.name} allows {k.smem_limit_bytes:,} B."
                )
            elif not k.fits:
                line.append(f"{k.kernel} does not fit: {k.error}")
            elif k.spilled_regs_per_thread:
                line.append(
                    f"{k.kernel} fits shared memory but needs {k.regs_per_thread} registers per "
                    f"thread with {k.warps} warps, {k.spilled_regs_per_thread} above the "
                    f"{k.regs_per_thread_max} maximum: the compiler would spill them to local "
                    "memory (the simulator charges them as local-memory traffic)."
                )
            else:
                line.append(f"{k.kernel} fits: {k.ctas_per_sm} CTA(s)/SM, limited by {k.limiter}.")
        out.append(" ".join(line))
    return tuple(out)
