"""Asymptotic IO orders, lower bounds and regimes of attention, next to the exact closed forms.

What is known, and how exactly (``docs/io.md`` has the derivations):

- FlashAttention paper (Dao et al. 2022), Theorem 2, for d <= M <= N d: standard attention
  makes Theta(N d + N^2) HBM accesses, FlashAttention Theta(N^2 d^2 / M). Orders only.
- Saha & Ye 2024 ("The I/O complexity of attention, or how optimal is FlashAttention?", ICML
  2024, arXiv:2402.07443): for M >= d^2 any algorithm computing exact attention needs
  Omega(N^2 d^2 / M) IOs (red-blue pebble game; the compression argument extends it to fast
  matrix multiplication), so the flash order is tight. For M < d^2 the complexity is
  Theta(N^2 d / sqrt(M)), the order of the matrix product Q K^T itself (lower bound for
  combinatorial algorithms; their algorithm attains it and beats FlashAttention there). The
  paper states orders "within constant factors": no constant is implemented as theirs.
- Compulsory traffic, constant 1: every element of Q, K, V must be read and every element of O
  written at least once (``compulsory_bytes``).
- Per schedule, from its closed form: exact elements >= c * B*H * W d^2 / M, with M the
  schedule's own on-chip footprint and W the query-key pairs the mask allows (N^2; N(N+1)/2
  causal; any window, segments or kv_seq_len: ``kernels.mask.pair_count``), for the constants
  in ``SCHEDULE_CONSTANTS`` (proved in docs/io.md; the proofs use only W <= the visited area).
- With a mask the orders take W for N^2: the FlashAttention paper's Proposition 4 for
  block-sparse attention, Theta(N d + N^2 d^2 s / M) with s the fraction of blocks kept, is
  this with W = s N^2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from flashio import kernels, simulator
from flashio.analysis.closed_form.io import io_counts
from flashio.kernels.mask import seen_counts
from flashio.kernels.registry import spec

__all__ = [
    "SCHEDULE_CONSTANTS",
    "IORegime",
    "compulsory_bytes",
    "flash_order",
    "io_regime",
    "lower_bound_order",
    "on_chip_bytes",
    "schedule_lower_bound_bytes",
    "sram_elements",
    "standard_crossover",
    "standard_order",
    "work",
]

FORWARD = ("standard", "flash1", "flash2")

# exact elements >= c * B*H * W d^2 / M for each schedule, M = its on-chip footprint in
# elements: each schedule module's BOUND_CONSTANT, with the argument beside it
SCHEDULE_CONSTANTS = {name: spec(name).bound_constant for name in kernels.SCHEDULES}


def work(shape: kernels.AttentionShape) -> int:
    """Query-key pairs that count per (batch, head): N^2, N(N+1)/2 when causal, and what
    ``kernels.mask.pair_count`` counts for a window, segments or kv_seq_len."""
    return shape.forward_flops() // (4 * shape.head_dim * shape.batch * shape.heads)


def sram_elements(gpu: simulator.GPUSpec, dtype: str, *, per: str = "cta") -> int:
    """The papers' M: on-chip SRAM in elements of ``dtype``.

    ``per="cta"`` uses ``smem_per_cta_bytes`` (what one CTA, one instance of the algorithm, can
    hold); ``per="sm"`` uses ``smem_per_sm_bytes``. Registers are not counted (the papers' M is
    SRAM).
    """
    if per not in ("cta", "sm"):
        raise ValueError(f"per must be 'cta' or 'sm', got {per!r}")
    eb = kernels.DTYPES[dtype][0]
    return (gpu.smem_per_cta_bytes if per == "cta" else gpu.smem_per_sm_bytes) // eb


def standard_order(shape: kernels.AttentionShape) -> int:
    """B*H*(N d + N^2): the order of standard attention's IO (FA paper Theorem 2), in elements.
    An order: the exact count is ``io_counts("standard", ...)``, about 4 N^2 + 4 N d per head.
    With kv_seq_len, N^2 is N N_kv: standard attention stores every score, whatever the mask."""
    n, d = shape.seq_len, shape.head_dim
    return shape.batch * shape.heads * (n * d + n * shape.n_kv)


def flash_order(shape: kernels.AttentionShape, m_elements: float) -> float:
    """B*H*W d^2 / M: the order of FlashAttention's IO (FA paper Theorem 2, d <= M <= N d;
    W = N^2 without a mask, the allowed pairs with one: Proposition 4)."""
    d = shape.head_dim
    return shape.batch * shape.heads * work(shape) * d * d / m_elements


def lower_bound_order(shape: kernels.AttentionShape, m_elements: float) -> float:
    """The order of the IO lower bound (Saha & Ye 2024), in elements; no constant is known.

    N^2 d^2 / M for M >= d^2 (large cache), N^2 d / sqrt(M) for M < d^2 (small cache), per
    (batch, head), times B*H. The two agree at M = d^2 (both N^2). With a mask N^2 is the
    allowed pairs W (``work``).
    """
    w, d = work(shape), shape.head_dim
    per_head = w * d * d / m_elements if m_elements >= d * d else w * d / math.sqrt(m_elements)
    return shape.batch * shape.heads * per_head


def compulsory_bytes(shape: kernels.AttentionShape, *, backward: bool = False) -> int:
    """Bytes any exact algorithm must move, constant 1: read every input, write every output.

    Forward: read Q, K, V, write O. Backward: read Q, K, V, dO, write dQ, dK, dV (forward
    statistics such as L or D are not counted: an algorithm may recompute them). With a mask
    only the queries that see a key and the keys some query sees must be read (a window
    over a long KV cache reads the window); every output is written.
    """
    b, h, kh, d = shape.batch, shape.heads, shape.n_kv_heads, shape.head_dim
    q_seen, kv_seen = seen_counts(shape)
    q_in, q_out = b * h * q_seen * d, b * h * shape.seq_len * d
    kv_in, kv_out = b * kh * kv_seen * d, b * kh * shape.n_kv * d
    if backward:
        elems = 2 * q_in + 2 * kv_in + q_out + 2 * kv_out  # Q, dO, K, V in; dQ, dK, dV out
    else:
        elems = q_in + 2 * kv_in + q_out
    return elems * shape.elem_bytes


def on_chip_bytes(sched: kernels.Schedule) -> int:
    """The schedule's on-chip footprint per CTA: shared memory plus register tiles, the largest
    over its kernels (all of a kernel's buffers are live for the whole CTA); its module's
    ``on_chip_bytes``."""
    return spec(sched.name).on_chip_bytes(sched)


def schedule_lower_bound_bytes(sched: kernels.Schedule) -> Fraction:
    """c * B*H * W d^2 / M in bytes, with M = ``on_chip_bytes(sched) / elem_bytes`` and c from
    ``SCHEDULE_CONSTANTS``: what the schedule's exact traffic provably never goes below."""
    sh = sched.shape
    m_elems = Fraction(on_chip_bytes(sched), sh.elem_bytes)
    c = SCHEDULE_CONSTANTS[sched.name]
    return c * sh.batch * sh.heads * work(sh) * sh.head_dim**2 / m_elems * sh.elem_bytes


def standard_crossover(name: str, shape: kernels.AttentionShape, **options: int) -> int | None:
    """Smallest block from which flash schedule ``name`` moves no more global bytes than standard
    attention (forward, or backward for ``*_bwd``) at its best tiling (block = N).

    The block is ``block_q`` for ``flash2`` (its traffic depends on Tr only) and ``block_kv``
    for ``flash1``, ``flash1_bwd`` and ``flash2_bwd`` (Tc only). Non-causal shapes only.
    Returns None when no block works. ``options`` go to the standard schedule
    (``softmax_passes``).

    Notes
    -----
    Without a mask the flash traffic is a + b T (T = Tr or Tc passes over the streamed tensors),
    with a and b read off the closed form at T = 1 and T = 2; standard attention at its best is
    s bytes. So flash <= standard iff T <= T_max = floor((s - a) / b), and T = ceil(N / block)
    <= T_max iff block >= ceil(N / T_max).
    """
    if name not in ("flash1", "flash2", "flash1_bwd", "flash2_bwd"):
        raise ValueError(f"name must be flash1, flash2, flash1_bwd or flash2_bwd, got {name!r}")
    if shape.causal or shape.variant:
        raise ValueError(
            "standard_crossover needs a shape without a mask (no causal, window, segments or "
            "kv_seq_len): with one the traffic is not linear in the number of passes (use "
            "io_counts on both schedules instead)"
        )
    n = shape.seq_len
    s = io_counts("standard_bwd" if name.endswith("_bwd") else "standard", shape, n, n, **options)

    def flash(passes: int) -> int:  # the closed form at T passes; the other block is N
        blk = math.ceil(n / passes)
        bq, bkv = (blk, n) if name == "flash2" else (n, blk)
        return io_counts(name, shape, bq, bkv).total_bytes

    if n == 1:
        return 1 if flash(1) <= s.total_bytes else None
    b = flash(2) - flash(1)
    a = flash(1) - b
    t_max = min(n, (s.total_bytes - a) // b)
    return None if t_max < 1 else math.ceil(n / t_max)


@dataclass(frozen=True, slots=True)
class IORegime:
    """Where a shape sits on a GPU: M, the regimes, the bounds and each schedule's exact ratio."""

    gpu: str
    shape: kernels.AttentionShape
    m_elements: int
    large_cache: bool  # M >= d^2: Saha & Ye's Theta(N^2 d^2 / M) regime
    linear_in_n: bool  # M >= N d: flash traffic O(N d) (a bounded number of passes)
    block: int  # the seed's rule floor(M / (4 d)), clipped to [1, N]
    kv_passes: int  # Tr = ceil(N / block): how often flash2 streams K and V
    lower_bound_order_elements: float  # order only, no constant
    compulsory_bytes: int  # exact lower bound, constant 1
    exact_bytes: tuple[tuple[str, int], ...]  # forward schedules at `block`
    ratio_to_order: tuple[tuple[str, float], ...]  # exact elements / order bound
    ratio_to_compulsory: tuple[tuple[str, float], ...]


def io_regime(
    gpu: simulator.GPUSpec,
    shape: kernels.AttentionShape,
    *,
    m_elements: int | None = None,
    block: int | None = None,
) -> IORegime:
    """Report M, whether M >= d^2 and M >= N d, the bounds, and the forward schedules' exact
    traffic at the seed's block size B = floor(M / (4d)) relative to them.

    Parameters
    ----------
    gpu : simulator.GPUSpec
        M defaults to ``sram_elements(gpu, shape.dtype)`` (shared memory per CTA, in elements).
    shape : kernels.AttentionShape
    m_elements : int, optional
        Override M (elements).
    block : int, optional
        Override Br = Bc for all schedules (rows).
    """
    m = sram_elements(gpu, shape.dtype) if m_elements is None else m_elements
    n, d = shape.seq_len, shape.head_dim
    b = max(1, min(n, m // (4 * d))) if block is None else block
    order = lower_bound_order(shape, m)
    comp = compulsory_bytes(shape)
    exact = tuple((nm, io_counts(nm, shape, b, b).total_bytes) for nm in FORWARD)
    return IORegime(
        gpu=gpu.name,
        shape=shape,
        m_elements=m,
        large_cache=m >= d * d,
        linear_in_n=m >= n * d,
        block=b,
        kv_passes=math.ceil(n / b),
        lower_bound_order_elements=order,
        compulsory_bytes=comp,
        exact_bytes=exact,
        ratio_to_order=tuple((nm, x / shape.elem_bytes / order) for nm, x in exact),
        ratio_to_compulsory=tuple((nm, x / comp) for nm, x in exact),
    )


def regime_table(
    gpus: tuple[str, ...] = ("a100-40gb", "h100-sxm", "h200", "h200-2xsram"),
    dtypes: tuple[str, ...] = ("fp16", "fp32"),
    head_dims: tuple[int, ...] = (64, 128, 256),
) -> str:
    """Markdown table: per GPU, dtype and d, M (per CTA, elements), whether M >= d^2, the seed's
    block floor(M/(4d)), and the largest N with M >= N d (flash traffic linear in N up to it)."""
    lines = [
        "| GPU | dtype | d | M (elements) | M >= d^2 | floor(M/(4d)) | largest N with M >= N d |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in gpus:
        gpu = simulator.load_gpu(name)
        for dt in dtypes:
            m = sram_elements(gpu, dt)
            for d in head_dims:
                big = "yes" if m >= d * d else "no"
                lines.append(
                    f"| {name} | {dt} | {d} | {m:,} | {big} | {m // (4 * d)} | {m // d:,} |"
                )
    return "\n".join(lines)


def ratio_table(gpu_name: str = "h200", seq_lens=(1024, 4096, 16384), head_dims=(64, 128)) -> str:
    """Markdown table: forward schedules' exact bytes per (batch, head) at the seed's block, and
    exact elements over the order bound N^2 d^2 / M (fp16, non-causal)."""
    gpu = simulator.load_gpu(gpu_name)
    lines = [
        "| d | N | block | Tr | M >= N d | standard bytes | flash1 bytes | flash2 bytes "
        "| standard / order | flash1 / order | flash2 / order |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for d in head_dims:
        for n in seq_lens:
            r = io_regime(gpu, kernels.AttentionShape(1, 1, n, d))
            ex = " | ".join(f"{b:,}" for _, b in r.exact_bytes)
            ratio = " | ".join(f"{x:.2f}" for _, x in r.ratio_to_order)
            lin = "yes" if r.linear_in_n else "no"
            lines.append(f"| {d} | {n:,} | {r.block} | {r.kv_passes} | {lin} | {ex} | {ratio} |")
    return "\n".join(lines)


def mask_table(gpu_name: str = "h200", seq_lens=(4096, 16384, 65536), d: int = 128) -> str:
    """Markdown table: flash2 forward bytes per (batch, head) under each mask, next to full
    attention and to what any exact algorithm must move (``compulsory_bytes``), fp16, Br = Bc
    = the seed's block for N on the GPU (``kernels.default_block``): causal, a 4,096-key
    causal window, 4 equal packed documents (causal), one decoding step (N = 1) over an
    N-token KV cache (its Q tile holds one real row), and a block mask keeping a random
    quarter of the 128 x 128 blocks (seed 0)."""
    gpu = simulator.load_gpu(gpu_name)
    lines = [
        "| N | mask | pairs W | flash2 bytes | compulsory bytes | flash2 / compulsory "
        "| flash2 / full |",
        "|---|---|---|---|---|---|---|",
    ]
    for n in seq_lens:
        masks = {
            "full": {},
            "causal": {"causal": True},
            "causal, window 4096": {"causal": True, "window": 4096},
            "causal, 4 documents": {"causal": True, "segments": (n // 4,) * 4},
            f"decode, KV cache {n:,}": {"seq_len": 1, "kv_seq_len": n},
            "25% of 128 x 128 blocks": {"block_mask": kernels.BlockMask.random(n, 0.25)},
        }
        b = kernels.default_block(kernels.AttentionShape(1, 1, n, d), gpu.smem_per_cta_bytes)
        full = None
        for label, fields in masks.items():
            shape = kernels.AttentionShape(**{"batch": 1, "heads": 1, "seq_len": n,
                                              "head_dim": d, **fields})  # fmt: skip
            moved = io_counts("flash2", shape, b, b).total_bytes
            full = moved if full is None else full
            comp = compulsory_bytes(shape)
            lines.append(
                f"| {n:,} | {label} | {work(shape):,} | {moved:,} | {comp:,} | "
                f"{moved / comp:.2f} | {moved / full:.3f} |"
            )
    return "\n".join(lines)


if (
    __name__ == "__main__"
):  # python -m flashio.analysis.closed_form.bounds: the tables of docs/io.md
    print(regime_table(), ratio_table(), mask_table(), sep="\n\n")
