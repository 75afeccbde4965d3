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

import kernels
import simulator
from kernels.schedule import DEFAULT_SRAM_BYTES, DEFAULT_WARPS
from simulator import Space

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

ALGORITHMS = ("flash1", "flash2")


@dataclass(frozen=True, slots=True)
class Tile:
    """One tile of Alg. 1's live set, ``rows x cols`` elements of the working dtype."""

    name: str
    rows: int
    cols: int
    seed_block: bool  # one of the seed's four blocks (Q_i, K_j, V_j, O_i)
    double_buffered: bool  # a second copy is live when block j+1 loads while j computes

    @property
    def elements(self) -> int:
        return self.rows * self.cols


@dataclass(frozen=True, slots=True)
class Capacity:
    """Elements (and bytes) of the tiles resident during one inner step of Alg. 1, against M.

    All counts are in elements of ``dtype`` (the paper's model, where every tile has the
    working precision); ``*_bytes`` multiply by ``elem_bytes``.
    """

    algorithm: str
    block_q: int
    block_kv: int
    head_dim: int
    dtype: str
    elem_bytes: int
    m_elements: int
    tiles: tuple[Tile, ...]

    @property
    def seed_elements(self) -> int:
        """Q_i, K_j, V_j, O_i only: the seed's "four blocks" count."""
        return sum(t.elements for t in self.tiles if t.seed_block)

    @property
    def live_elements(self) -> int:
        """Every tile of Alg. 1's inner step, S_ij/P_ij and the row statistics included."""
        return sum(t.elements for t in self.tiles)

    @property
    def double_buffered_elements(self) -> int:
        """The live set plus a second K_j and V_j (loads of block j+1 overlap compute on j)."""
        return self.live_elements + sum(t.elements for t in self.tiles if t.double_buffered)

    def totals(self) -> tuple[tuple[str, int], ...]:
        """(label, elements) of the three counts, smallest first."""
        return (
            ("seed's 4 blocks: Q_i, K_j, V_j, O_i", self.seed_elements),
            ("Alg. 1 live set: + S_ij/P_ij and row stats", self.live_elements),
            ("live set with K_j, V_j double-buffered", self.double_buffered_elements),
        )

    def to_dict(self) -> dict:
        return {
            "algorithm": self.algorithm,
            "block_q": self.block_q,
            "block_kv": self.block_kv,
            "m_elements": self.m_elements,
            "elem_bytes": self.elem_bytes,
            "tiles": [
                {
                    "name": t.name,
                    "rows": t.rows,
                    "cols": t.cols,
                    "elements": t.elements,
                    "bytes": t.elements * self.elem_bytes,
                    "seed_block": t.seed_block,
                    "double_buffered": t.double_buffered,
                }
                for t in self.tiles
            ],
            "totals": [
                {
                    "count": label,
                    "elements": n,
                    "bytes": n * self.elem_bytes,
                    "fits": n <= self.m_elements,
                }
                for label, n in self.totals()
            ],
        }


def _m_elements(sram_bytes: int, dtype: str) -> tuple[int, int]:
    if dtype not in kernels.DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(kernels.DTYPES)}, got {dtype!r}")
    if isinstance(sram_bytes, bool) or not isinstance(sram_bytes, int) or sram_bytes < 1:
        raise ValueError(f"sram_bytes must be a positive integer (bytes), got {sram_bytes!r}")
    eb = kernels.DTYPES[dtype][0]
    return sram_bytes // eb, eb


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def tile_capacity(
    block_q: int,
    block_kv: int,
    head_dim: int,
    dtype: str = "fp16",
    sram_bytes: int = DEFAULT_SRAM_BYTES,
    algorithm: str = "flash2",
) -> Capacity:
    """The tiles Alg. 1 keeps resident for blocks ``block_q x block_kv``, counted against M.

    Parameters
    ----------
    block_q, block_kv : int
        Br and Bc, rows of Q and of K/V per block.
    head_dim : int
        d.
    dtype : str
        Working dtype; M = ``sram_bytes // elem_bytes`` elements.
    sram_bytes : int
        On-chip memory in bytes (default: the A100's 192 KiB the FA paper uses).
    algorithm : {"flash1", "flash2"}
        FA1's Alg. 1 also holds the block statistics m~_ij, l~_ij and m_i^new, l_i^new (4 Br);
        FA2's Alg. 1 updates m_i, l_i in place.

    Returns
    -------
    Capacity

    Notes
    -----
    Dao et al. 2022, Alg. 1 and Dao 2023, Alg. 1: Q_i (Br x d), K_j, V_j (Bc x d), O_i (Br x d),
    S_ij (Br x Bc; P_ij overwrites it), l_i, m_i (Br each).
    """
    br, bc = _positive("block_q", block_q), _positive("block_kv", block_kv)
    d = _positive("head_dim", head_dim)
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    m, eb = _m_elements(sram_bytes, dtype)
    tiles = (
        Tile("Q_i", br, d, True, False),
        Tile("K_j", bc, d, True, True),
        Tile("V_j", bc, d, True, True),
        Tile("O_i", br, d, True, False),
        Tile("S_ij/P_ij", br, bc, False, False),
        Tile("l_i, m_i", 2, br, False, False),
    )
    if algorithm == "flash1":
        tiles += (Tile("m~_ij, l~_ij, m_new, l_new", 4, br, False, False),)
    return Capacity(algorithm, br, bc, d, dtype, eb, m, tiles)


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
        raise ValueError(
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
            " The paper only shows that each tile is O(M) (Alg. 1 and Thm. 2); the constant "
            "factor is not checked, and here it matters."
        )
    out.append(live)
    out.append(
        "With K_j, V_j double-buffered (as production kernels do to overlap loads): seed "
        f"{_verdict(sc.double_buffered_elements, m)}; paper "
        f"{_verdict(pc.double_buffered_elements, m)}."
    )
    for f in (seed, paper):
        shared = sum(t.size_bytes for t in f.on_chip if t.space == Space.SHARED)
        regs = sum(t.size_bytes for t in f.on_chip if t.space == Space.REGISTERS)
        s_names = ", ".join(t.name for t in f.on_chip if t.space == Space.SHARED)
        r_names = ", ".join(t.name for t in f.on_chip if t.space == Space.REGISTERS)
        line = (
            f"The project's {f.schedule} at the {f.name} blocks ({f.block_q} x {f.block_kv}): "
            f"shared memory {s_names} = {shared:,} B; register tiles {r_names} = {regs:,} B. "
        )
        for k in f.kernels:
            if not k.fits:
                line += f"{k.kernel}: does not fit: {k.error} "
                continue
            line += (
                f"{k.kernel}: {k.smem_bytes:,} of {k.smem_limit_bytes:,} B shared memory per "
                f"CTA, {k.regs_per_thread} registers/thread with {k.warps} warps"
            )
            if k.spilled_regs_per_thread:
                line += (
                    f" ({k.spilled_regs_per_thread} over the {k.regs_per_thread_max} maximum: "
                    "spilled to local memory, traffic the simulator does not model)"
                )
            line += f"; {k.ctas_per_sm} CTA(s)/SM, limited by {k.limiter}. "
        out.append(line.strip())
    return tuple(out)
