"""Warp programs of mma.sync FlashAttention-2 forwards at tilings the census does not hold.

The instruction census (data/sass/) holds a kernel's compiled main loop at the tilings it was
compiled for. A user asks about others: "how fast is 128 x 96 with 4 warps?". This module writes
the program one warp issues for one K/V step of an mma.sync forward (FlashAttention-2's
split-Q loop: Dao 2023, arXiv 2307.08691, Algorithm 1 and Sec. 3.3) at any tiling, so that the
warp replay prices it as it prices compiled code.

Per warp of R = block_q / warps query rows, a K/V block of ``block_kv`` keys and head dim d,
16-bit operands, the algorithm fixes the tensor-core and shared-memory work exactly:

- S = Q K^T: (R/16)(block_kv/8)(d/16) ``mma.sync.m16n8k16``, their operands through ``ldmatrix``
  (an ``.x4`` moves 512 bytes): all of K_j, and Q unless it stays in registers;
- O += P V: (R/16)(d/8)(block_kv/16) mma.sync, V_j through ``ldmatrix.trans``;
- the next tiles' ``cp.async`` copies, 16 bytes a thread each, shared by the CTA's warps.

The rest (the online softmax's FP32 and special-function work, packing, address arithmetic,
loop control) is what the implementation's compiler makes of it. Its count per class is read
from the implementation's own compiled code: over the census entries of the kernel that keep
all their registers (no local-memory spills), a least-squares line per instruction class in
the work terms of a warp's step (``TERMS``: scores, O accumulators and rows a thread holds,
copies a thread issues). For this project's forward the lines reproduce every such entry's
count per class within 16 instructions (tests/test_synth_sync.py). Nothing here comes from a
timing.

The program keeps the compiled loop's order: a barrier (K_j landed); S k-slice by k-slice, the
next slice's fragments loading while this one's products run, the address arithmetic and V_j's
copies in the tensor pipe's shadow; a wait of the measured HMMA latency; the softmax (row max
across the quad by two shuffle rounds, exp2 by FFMA and MUFU with the row sum interleaved, O and
l rescaled); a barrier (V_j landed); K_{j+1}'s copies; then P V, P packed to 16 bits beside its
products. An instruction waits on what the algorithm makes it wait on; stall counts are one
cycle. Bank conflicts come from the kernel's tile layout: this project's XOR swizzle leaves
ldmatrix conflict-free where a row holds a multiple of 8 chunks of 16 bytes and 2-way
conflicted at d = 96 (``xor_swizzle_ways``); other implementations' layouts (CuTe swizzles
sized to the head dim) are taken as conflict-free.

Registers come from the same compiled code: a least-squares line in the values a thread keeps
live in the step (``live_values``: S, P packed two to a register, O, two k-slices' operand
fragments), over the entries that neither spill nor sit at the compiler's per-thread cap
(there the compiler fills the budget rather than needing it). Occupancy follows from the
line, capped at the budget. A tiling whose
line exceeds the budget would spill; its spills are not written (the compiler's choice of what
to spill does not follow a line: over this project's spilling forwards the spilled registers
are 0.1 to 1.3 times the line's excess), so its program is priced as if it kept every register
and says so in its name: a lower bound on its time.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass

import numpy as np

from flashio.simulator.sass import CLASS_ID, NO_BARRIER, WarpProgram

__all__ = [
    "TERMS",
    "InstructionMix",
    "instruction_mix",
    "live_values",
    "sync_forward_program",
    "work_terms",
    "xor_swizzle_ways",
]

TERMS = ("one", "scores", "accumulators", "rows", "copies")
# classes whose count the implementation's code decides (the others follow from the tiling)
FITTED = ("alu", "imad", "fma", "mufu", "shfl", "lds", "uniform", "other", "control")
# what the instructions beyond the algorithm's own scale with: address arithmetic grows with
# the copies a thread issues; the rest (loop control, barriers, bookkeeping) is per step
BOOKKEEPING = {"alu": ("one", "copies"), "imad": ("one", "copies")}


def _algorithm(terms: dict[str, float]) -> dict[str, int]:
    """The online softmax's own instructions per thread and step, by class (Dao 2023,
    Algorithm 1, lines 8-10): a max per score and per row, two shuffle rounds per row, exp2 of
    each scaled score (FFMA, MUFU) and of each row's max change, a row sum, P packed to 16 bits
    two scores an instruction, O and l rescaled, two barriers (K_j, V_j landed)."""
    scores, acc, rows = int(terms["scores"]), int(terms["accumulators"]), int(terms["rows"])
    return {
        "alu": scores + scores // 2 + 2 * rows,
        "fma": 2 * scores + acc + 2 * rows,
        "mufu": scores + rows,
        "shfl": 2 * rows,
        "bar": 2,
    }


LDSM_BYTES = 512  # ldmatrix.x4: four 8 x 8 matrices of 16-bit elements
COPY_BYTES = 16  # cp.async.cg: 16 bytes a thread
HMMA_FLOPS = 2 * 16 * 8 * 16  # one m16n8k16
# bytes one warp instruction moves through the shared-memory port: a 16-byte copy or load a
# thread, a 4-byte shuffle a thread (as the census records them)
SHARED_BYTES = {"ldgsts": COPY_BYTES * 32, "lds": 128, "shfl": 128}
_KEY = re.compile(
    r"^(?P<kernel>\w+) d=(?P<d>\d+) (?P<bq>\d+)x(?P<bkv>\d+) w=(?P<w>\d+) (?P<dt>\w+)$"
)  # a plain census key (issue.program_key): no causal, masked or option suffix
# scoreboards: two fragment buffers, the shuffles, the max change's exp2, and three for the
# scores' exp2 (a sum waits for the exp two back; the shuffles' is free again by then)
_FRAG_SB, _SHFL_SB, _ALPHA_SB, _MUFU_SB = (0, 1), 2, 3, (4, 5, 2)


def work_terms(
    block_q: int, block_kv: int, head_dim: int, warps: int, elem_bytes: int = 2
) -> dict[str, float]:  # fmt: skip
    """What one thread of a warp holds and issues per K/V step (``TERMS``)."""
    rows_per_warp = block_q / warps
    return {
        "one": 1.0,
        "scores": rows_per_warp * block_kv / 32,  # S fragment elements per thread
        "accumulators": rows_per_warp * head_dim / 32,  # O fragment elements per thread
        "rows": 2 * math.ceil(rows_per_warp / 16),  # rows a thread's fragments touch
        "copies": 2 * block_kv * head_dim * elem_bytes / (COPY_BYTES * 32 * warps),  # K and V
        # registers of one k16 slice's Q, K and V fragments (ldmatrix), double-buffered
        "fragments": 2 * 16 * (rows_per_warp + block_kv + head_dim) * elem_bytes / (32 * 4),
    }


def live_values(terms: dict[str, float]) -> float:
    """Registers' worth of values a thread keeps live in a step: S's scores (fp32), P packed
    two 16-bit values to a register, O's accumulators (fp32), and the operand fragments of two
    k-slices (one loading while the other's products run)."""
    return 1.5 * terms["scores"] + terms["accumulators"] + terms["fragments"]


# a count that rounds up to the cap's allocation granule (8 registers a thread) is at the cap
REGISTER_GRANULE = 8


@dataclass(frozen=True)
class InstructionMix:
    """Instructions per class of one warp's step, as lines in ``TERMS``, and registers per
    thread as a line in ``live_values``, read from an implementation's compiled kernel
    (``instruction_mix``)."""

    impl: str
    kernel: str
    coefficients: tuple[tuple[str, tuple[float, ...]], ...]
    entries: tuple[str, ...]  # the census keys the lines were read from
    registers: tuple[float, float] = (0.0, 0.0)  # intercept, registers per live value

    def register_demand(self, terms: dict[str, float]) -> int:
        """Registers per thread the compiler would give this tiling with no cap."""
        base, per_value = self.registers
        return math.ceil(base + per_value * live_values(terms))

    def extra(self, terms: dict[str, float]) -> dict[str, int]:
        """Instructions per class beyond the algorithm's own (``_algorithm``)."""
        x = np.array([terms[t] for t in TERMS])
        return {c: max(0, round(float(np.dot(k, x)))) for c, k in self.coefficients}

    def counts(self, terms: dict[str, float]) -> dict[str, int]:
        """Instructions of each ``FITTED`` class in one warp's step."""
        own = _algorithm(terms)
        return {c: own.get(c, 0) + n for c, n in self.extra(terms).items()}


def _tiling(key: str) -> tuple[int, int, int, int]:
    """(head_dim, block_q, block_kv, warps) of a census key."""
    m = _KEY.match(key)
    return int(m["d"]), int(m["bq"]), int(m["bkv"]), int(m["w"])


def _entries(programs: dict, kernel: str) -> list[tuple[str, dict[str, float], dict, int]]:
    """(key, work terms, class counts, registers per thread) of each plain, spill-free 16-bit
    entry of ``kernel``; fp16 and bf16 builds are one program, so each tiling counts once."""
    out, seen = [], set()
    for key, entry in sorted(programs.items()):
        m = _KEY.match(key)
        if not m or m["kernel"] != kernel or m["dt"] not in ("bf16", "fp16"):
            continue  # causal, masked or option variants, other kernels and dtypes
        prog = WarpProgram.from_json(entry)
        counts = prog.counts()
        tiling = (m["d"], m["bq"], m["bkv"], m["w"])
        if counts.get("local", 0) or counts.get("hgmma", 0) or tiling in seen:
            continue
        seen.add(tiling)
        terms = work_terms(int(m["bq"]), int(m["bkv"]), int(m["d"]), int(m["w"]))
        out.append((key, terms, counts, int(entry.get("compiled", {}).get("registers", 0))))
    return out


def instruction_mix(
    programs: dict, impl: str, kernel: str = "flash2_fwd", exclude: tuple = (),
    register_cap: int = 255,
) -> InstructionMix | None:  # fmt: skip
    """The least-squares lines of ``kernel``'s instruction counts per class and of its
    registers per thread over the census ``programs`` of ``impl`` (module docstring), leaving
    out the tilings (head_dim, block_q, block_kv, warps) in ``exclude`` (to check the lines
    on a tiling they were not read from); entries at ``register_cap`` (the compiler's limit)
    do not enter the register line. None with too few entries to fix them."""
    left_out = set(exclude)
    rows = [r for r in _entries(programs, kernel) if _tiling(r[0]) not in left_out]
    if len(rows) < len(TERMS) + 2:
        return None
    coefficients = []
    for c in FITTED:
        basis = BOOKKEEPING.get(c, ("one",))
        a = np.array([[terms[t] for t in basis] for _, terms, _, _ in rows])
        y = np.array(
            [counts.get(c, 0) - _algorithm(terms).get(c, 0) for _, terms, counts, _ in rows]
        )
        k, *_ = np.linalg.lstsq(a, y, rcond=None)
        line = dict(zip(basis, k, strict=True))
        coefficients.append((c, tuple(float(line.get(t, 0.0)) for t in TERMS)))
    cap = -(-register_cap // REGISTER_GRANULE)
    below = [(terms, regs) for _, terms, _, regs in rows if 0 < -(-regs // REGISTER_GRANULE) < cap]
    registers = (0.0, 0.0)
    if len(below) >= 3:  # two coefficients and one entry to spare
        a = np.array([[1.0, live_values(terms)] for terms, _ in below])
        (base, per_value), *_ = np.linalg.lstsq(a, np.array([r for _, r in below]), rcond=None)
        registers = (float(base), float(per_value))
    keys = tuple(r[0] for r in rows)
    return InstructionMix(impl, kernel, tuple(coefficients), keys, registers)


class _Writer:
    def __init__(self):
        self.rows = []

    def add(self, klass, n=1, stall=1, wbar=NO_BARRIER, wait=0, sbytes=0, flops=0, fresh=0):
        for i in range(int(n)):
            first = i == 0
            self.rows.append(
                (CLASS_ID[klass], stall, wbar, wait if first else 0, sbytes, flops,
                 fresh if first else 0)
            )  # fmt: skip

    def program(self, name: str) -> WarpProgram:
        a = np.array(self.rows, np.int64).reshape(-1, 7)
        nobar = np.full(len(a), NO_BARRIER, np.int64)
        return WarpProgram(
            name, a[:, 0], a[:, 1], a[:, 2], nobar, a[:, 3], a[:, 4], a[:, 5],
            np.zeros(len(a), np.int64), fresh=a[:, 6],
        )  # fmt: skip


def xor_swizzle_ways(cols: int, elem_bytes: int = 2) -> int:
    """Shared-memory wavefronts of one ``ldmatrix`` phase (8 consecutive rows, 16 bytes each)
    on this project's tile layout (kernels/cuda/mma_tiles.cu, ``swz``): rows of ``cols``
    elements in 16-byte chunks, chunk c of row r at position c ^ (r & SWZ), SWZ the largest of
    7, 3, 1, 0 whose chunk count is a multiple of SWZ + 1. A phase takes as many wavefronts as
    the most of its 8 rows that land in one 128-byte bank group: 1 where rows hold a multiple
    of 8 chunks (d = 64, 128, 256), 2 at d = 96 (12 chunks: rows r and r + 2 collide)."""
    chunks = cols * elem_bytes // COPY_BYTES
    swz = next(m for m in (7, 3, 1, 0) if chunks % (m + 1) == 0)
    worst = 1
    for r0 in range(0, 64, 8):  # the pattern repeats within 64 rows
        for c in range(chunks):
            groups = [(r * chunks + (c ^ (r & swz))) % 8 for r in range(r0, r0 + 8)]
            worst = max(worst, max(groups.count(g) for g in set(groups)))
    return worst


def _products(
    w: _Writer, slices: int, ldsm_per_slice: float, hmma_per_slice: int, beside: dict[str, int],
    ldsm_ways: int = 1,
):  # fmt: skip
    """``slices`` k-slices of a matrix product: each slice's fragments load (ldmatrix, into
    one of two register buffers) while the previous slice's mma.sync run; an mma.sync waits
    for its slice's fragments, and the first of a slice reads both operands fresh. The
    instructions in ``beside`` (class: count) are spread over the slices, after each slice's
    products, as a compiler fills the tensor pipe's shadow. An ldmatrix whose phases take
    ``ldsm_ways`` wavefronts (bank conflicts) holds the port that many times as long."""
    for s in range(slices + 1):
        if s < slices:
            lo, hi = round(s * ldsm_per_slice), round((s + 1) * ldsm_per_slice)
            w.add("ldsm", hi - lo, wbar=_FRAG_SB[s % 2], sbytes=LDSM_BYTES * ldsm_ways)
        if s > 0:
            sb = _FRAG_SB[(s - 1) % 2]
            w.add("hmma", hmma_per_slice, wait=1 << sb, flops=HMMA_FLOPS, fresh=1)
            for c, n in beside.items():
                w.add(c, n * s // slices - n * (s - 1) // slices, sbytes=SHARED_BYTES.get(c, 0))


@functools.lru_cache(maxsize=256)
def sync_forward_program(
    block_q: int, block_kv: int, head_dim: int, warps: int, mix: InstructionMix,
    hmma_latency: float, q_in_registers: bool = False, elem_bytes: int = 2,
    ldsm_ways: int = 1,
) -> WarpProgram:  # fmt: skip
    """One warp's instructions for one K/V step of an mma.sync FlashAttention-2 forward at
    this tiling, with ``mix``'s instruction counts (module docstring); ``ldsm_ways``: the
    shared-memory wavefronts of each ldmatrix phase on the kernel's tile layout (1: no bank
    conflicts; ``xor_swizzle_ways`` for this project's)."""
    if block_q % (16 * warps) or block_kv % 16 or head_dim % 16:
        raise ValueError(
            "an mma.sync forward needs block_q a multiple of 16 rows per warp and block_kv, "
            f"head_dim multiples of 16: {block_q}/{warps} warps, {block_kv}, {head_dim}"
        )
    t = work_terms(block_q, block_kv, head_dim, warps, elem_bytes)
    mt, rows_per_warp = block_q // warps // 16, block_q // warps
    scores, acc, rows = int(t["scores"]), int(t["accumulators"]), int(t["rows"])
    copies = math.ceil(t["copies"])
    extra = mix.extra(t)  # beyond the algorithm's own: addresses, bookkeeping
    w = _Writer()
    w.add("bar")  # K_j has landed (cp.async wait, then the CTA's barrier)
    # addresses and bookkeeping, and V_j's copies (global -> shared), beside S's products
    beside = {c: extra[c] for c in ("alu", "imad", "uniform", "other", "lds")}
    beside["ldgsts"] = copies // 2
    k_slices = head_dim // 16
    ldsm_s = (block_kv * 16 + (0 if q_in_registers else rows_per_warp * 16)) * elem_bytes
    _products(w, k_slices, ldsm_s / LDSM_BYTES, mt * block_kv // 8, beside, ldsm_ways)
    w.add("control", stall=round(hmma_latency))  # S's last products land
    w.add("alu", scores)  # row max, per score
    for _ in range(2):  # across the quad of threads sharing a row
        w.add("shfl", rows, wbar=_SHFL_SB, sbytes=SHARED_BYTES["shfl"])
        w.add("alu", rows, wait=1 << _SHFL_SB)
    w.add("fma", 2 * rows)
    w.add("mufu", rows, wbar=_ALPHA_SB)  # exp2(m_old - m_new)
    # exp2(S * scale - m * scale) and the row sum: each sum waits for the exp two back, so
    # the special-function pipe stays busy while the sums follow
    for i in range(scores + 2):
        if i < scores:
            w.add("fma")
            w.add("mufu", wbar=_MUFU_SB[i % 3])
        if i >= 2:
            w.add("fma", wait=1 << _MUFU_SB[(i - 2) % 3])
    w.add("fma", acc, wait=1 << _ALPHA_SB)  # O *= alpha
    w.add("fma", extra["fma"])
    w.add("mufu", extra["mufu"])
    w.add("shfl", extra["shfl"], sbytes=SHARED_BYTES["shfl"])
    w.add("bar")  # V_j has landed
    w.add("ldgsts", copies - copies // 2, sbytes=SHARED_BYTES["ldgsts"])  # K_{j+1}
    v_slices = block_kv // 16
    ldsm_v = head_dim * 16 * elem_bytes
    # P packed to 16 bits slice by slice, beside P V's products
    _products(
        w, v_slices, ldsm_v / LDSM_BYTES, mt * head_dim // 8, {"alu": scores // 2}, ldsm_ways
    )
    w.add("control", max(1, extra["control"]), stall=2)  # loop counter, branch
    return w.program(f"synthetic mma.sync forward {block_q}x{block_kv} d={head_dim} w={warps}")
