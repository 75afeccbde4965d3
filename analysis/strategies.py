"""Hypothesis strategies for property tests of attention IO: GPUs, shapes and tilings.

Public API, in Hypothesis' style (plural nouns, keyword-only ``min_*``/``max_*`` arguments,
arguments checked when the strategy is made). Block sizes are drawn as *counts of blocks*, so a
failing example shrinks towards one block per dimension and small sequences::

    from hypothesis import given, strategies as st
    from flashio.analysis.strategies import attention_shapes, tilings

    @given(st.data())
    def test_something(data):
        shape = data.draw(attention_shapes(max_seq_len=32))
        sched = data.draw(tilings(shape=shape))

``docs/property-testing.md`` shows complete tests.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from flashio import kernels, simulator
from flashio.kernels.registry import spec

__all__ = ["attention_shapes", "gpu_specs", "paged_kvs", "tilings", "variant_shapes"]

# a granule of the L2 model: 64 lines (docs/model.md); an L2 is 0 or whole granules
_LINES_PER_GRANULE = 64


def _check_range(name: str, lo: int, hi: int, floor: int = 1) -> None:
    for arg, v in ((f"min_{name}", lo), (f"max_{name}", hi)):
        if isinstance(v, bool) or not isinstance(v, int) or v < floor:
            raise InvalidArgument(f"{arg} must be an integer >= {floor}, got {v!r}")
    if lo > hi:
        raise InvalidArgument(f"min_{name}={lo} exceeds max_{name}={hi}; use min <= max")


def _check_choices(name: str, values, allowed=None) -> tuple:
    values = tuple(values)
    if not values:
        raise InvalidArgument(f"{name} must name at least one value, got an empty sequence")
    bad = [v for v in values if allowed is not None and v not in allowed]
    if bad:
        raise InvalidArgument(f"{name} has {bad[0]!r}; allowed: {', '.join(map(str, allowed))}")
    return values


def gpu_specs(
    *,
    base: str | simulator.GPUSpec = "h200",
    min_sm_count: int = 1,
    max_sm_count: int = 8,
    l2: bool | None = None,
    min_smem_per_sm_bytes: int | None = None,
    max_smem_per_sm_bytes: int | None = None,
) -> st.SearchStrategy[simulator.GPUSpec]:
    """Valid ``GPUSpec`` variants of ``base``, made with ``GPUSpec.replace``.

    Parameters
    ----------
    base : str or GPUSpec
        Built-in name, TOML path, or a spec.
    min_sm_count, max_sm_count : int
        Range of SMs (few SMs keep simulations short).
    l2 : bool or None
        True: an L2 of 1..4096 granules of 64 lines; False: ``l2_bytes = 0`` (every global access
        reaches HBM, the FlashAttention paper's model); None: either.
    min_smem_per_sm_bytes, max_smem_per_sm_bytes : int, optional
        Range of shared memory per SM, drawn in KiB; default 1/4x .. 2x the base's. Shared
        memory per CTA keeps the base's difference (the per-CTA reserve) below it.

    Notes
    -----
    Also drawn: ``max_ctas_per_sm`` (1 .. base) and the HBM bandwidth (0.5x, 1x or 2x).
    """
    gpu = base if isinstance(base, simulator.GPUSpec) else simulator.load_gpu(base)
    _check_range("sm_count", min_sm_count, max_sm_count)
    if l2 not in (True, False, None):
        raise InvalidArgument(f"l2 must be True, False or None, got {l2!r}")
    reserve = gpu.smem_per_sm_bytes - gpu.smem_per_cta_bytes
    lo = min_smem_per_sm_bytes if min_smem_per_sm_bytes is not None else gpu.smem_per_sm_bytes // 4
    hi = max_smem_per_sm_bytes if max_smem_per_sm_bytes is not None else 2 * gpu.smem_per_sm_bytes
    _check_range("smem_per_sm_bytes", lo, hi, floor=reserve + 1024)
    if hi // 1024 < -(-lo // 1024):
        raise InvalidArgument(f"no whole KiB between {lo} and {hi} bytes; widen the range")

    @st.composite
    def draw_gpu(draw):
        smem = 1024 * draw(st.integers(-(-lo // 1024), hi // 1024))
        with_l2 = draw(st.booleans()) if l2 is None else l2
        granule = _LINES_PER_GRANULE * gpu.l2_line_bytes
        return gpu.replace(
            sm_count=draw(st.integers(min_sm_count, max_sm_count)),
            max_ctas_per_sm=draw(st.integers(1, gpu.max_ctas_per_sm)),
            smem_per_sm_bytes=smem,
            smem_per_cta_bytes=smem - reserve,
            l2_bytes=granule * draw(st.integers(1, 4096)) if with_l2 else 0,
            hbm_bandwidth_bytes_per_s=gpu.hbm_bandwidth_bytes_per_s
            * draw(st.sampled_from([1.0, 0.5, 2.0])),
            name=f"{gpu.name}-drawn",
        )

    return draw_gpu()


def attention_shapes(
    *,
    min_seq_len: int = 1,
    max_seq_len: int = 64,
    head_dims: tuple[int, ...] = (16, 32, 64),
    dtypes: tuple[str, ...] = tuple(kernels.DTYPES),
    causal: bool | None = None,
    gqa: bool = True,
    max_batch: int = 2,
    max_heads: int = 4,
) -> st.SearchStrategy[kernels.AttentionShape]:
    """``AttentionShape`` values; shrink towards batch 1, one head, short sequences.

    Parameters
    ----------
    min_seq_len, max_seq_len : int
        Range of N (any N, so ragged last blocks appear).
    head_dims, dtypes : tuple
        Choices of d and of dtype (``kernels.DTYPES``).
    causal : bool or None
        Fixed, or drawn when None.
    gqa : bool
        Draw ``kv_heads`` among the divisors of ``heads`` (grouped-query attention); False:
        ``kv_heads = None`` (one K/V head per query head).
    max_batch, max_heads : int
    """
    _check_range("seq_len", min_seq_len, max_seq_len)
    _check_range("batch", 1, max_batch)
    _check_range("heads", 1, max_heads)
    head_dims = _check_choices("head_dims", head_dims)
    if any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in head_dims):
        raise InvalidArgument(f"head_dims must be positive integers, got {head_dims!r}")
    dtypes = _check_choices("dtypes", dtypes, tuple(kernels.DTYPES))
    if causal not in (True, False, None):
        raise InvalidArgument(f"causal must be True, False or None, got {causal!r}")

    @st.composite
    def draw_shape(draw):
        heads = draw(st.integers(1, max_heads))
        kv = None
        if gqa:
            kv = draw(st.sampled_from([k for k in range(heads, 0, -1) if heads % k == 0]))
        return kernels.AttentionShape(
            batch=draw(st.integers(1, max_batch)),
            heads=heads,
            seq_len=draw(st.integers(min_seq_len, max_seq_len)),
            head_dim=draw(st.sampled_from(head_dims)),
            dtype=draw(st.sampled_from(dtypes)),
            causal=draw(st.booleans()) if causal is None else causal,
            kv_heads=kv,
        )

    return draw_shape()


VARIANTS = ("window", "segments", "kv_seq_len", "block_mask")


def variant_shapes(
    *,
    variants: tuple[str, ...] = VARIANTS,
    max_kv_seq_len: int = 96,
    **shape_options,
) -> st.SearchStrategy[kernels.AttentionShape]:
    """``AttentionShape`` values with a mask beyond full and causal: a sliding window (causal
    int or non-causal (left, right) pair, larger than N too), packed segments (one-token ones
    included), a K/V length of its own (decoding with N = 1, chunked prefill, and
    ``kv_seq_len < seq_len``, whose first queries see no key when causal) or a block mask
    (any grain, ragged blocks and blocks larger than N included, any kept blocks); one or
    more of ``variants``, combined where the shape allows (segments need kv_seq_len =
    seq_len). ``shape_options`` go to :func:`attention_shapes`.

    Shrinks towards a window of one key, one segment, kv_seq_len = 1 and a block mask that
    keeps nothing.
    """
    variants = _check_choices("variants", variants, VARIANTS)
    _check_range("kv_seq_len", 1, max_kv_seq_len)

    @st.composite
    def draw_variant(draw):
        shape = draw(attention_shapes(**shape_options))
        n = shape.seq_len
        kinds = draw(st.sets(st.sampled_from(variants), min_size=1))
        fields = {}
        if "kv_seq_len" in kinds and "segments" not in kinds:
            fields["kv_seq_len"] = draw(st.integers(1, max_kv_seq_len))
        if "window" in kinds:
            if shape.causal:
                fields["window"] = draw(st.integers(1, 2 * n + 2))
            else:
                fields["window"] = (draw(st.integers(0, 2 * n)), draw(st.integers(0, 2 * n)))
        if "segments" in kinds:
            cuts = draw(st.sets(st.integers(1, n - 1), max_size=6)) if n > 1 else set()
            edges = [0, *sorted(cuts), n]
            fields["segments"] = tuple(b - a for a, b in itertools.pairwise(edges))
        if "block_mask" in kinds:
            nk = fields.get("kv_seq_len", shape.n_kv)
            bq, bk = draw(st.integers(1, n + 2)), draw(st.integers(1, nk + 2))
            tq, tk = math.ceil(n / bq), math.ceil(nk / bk)
            kept = draw(st.lists(st.booleans(), min_size=tq * tk, max_size=tq * tk))
            grid = np.array(kept, bool).reshape(tq, tk)
            fields["block_mask"] = kernels.BlockMask.from_array(grid, bq, bk)
        return kernels.AttentionShape(**{**shape.to_dict(), **fields})

    return draw_variant()


def paged_kvs(
    shape: kernels.AttentionShape, *, max_page_size: int | None = None, shared: bool = True
) -> st.SearchStrategy[kernels.PagedKV]:
    """``PagedKV`` caches for ``shape``'s batch and keys (``AttentionShape(...,
    paged_kv=...)``; ``flash_decode`` reads them): any page size up to ``max_page_size``
    (default: two more than the keys, so one page larger than the cache too), ragged last
    pages, tables with pages to spare, a pool with pages no sequence uses, the pages in any
    order and, with ``shared``, leading pages common to every sequence (prefix caching: the
    executors need equal keys there). Shrinks towards the largest pages (one per sequence
    when ``max_page_size`` holds the keys), in order."""
    if not isinstance(shape, kernels.AttentionShape):
        raise InvalidArgument(f"shape must be an AttentionShape, got {type(shape).__name__}")
    top = shape.n_kv + 2 if max_page_size is None else max_page_size
    _check_range("page_size", 1, top)

    @st.composite
    def draw_pages(draw):
        size = top + 1 - draw(st.integers(1, top))  # shrinks to the largest pages
        per = math.ceil(shape.n_kv / size) + draw(st.integers(0, 2))
        common = draw(st.integers(0, per)) if shared and shape.batch > 1 else 0
        pool = common + shape.batch * (per - common) + draw(st.integers(0, 3))
        order = draw(st.permutations(range(pool)))
        table = np.empty((shape.batch, per), np.int64)
        table[:, :common] = order[:common]
        table[:, common:] = np.reshape(order[common : common + shape.batch * (per - common)],
                                       (shape.batch, per - common))  # fmt: skip
        return kernels.PagedKV.from_array(table, size, pool)

    return draw_pages()


def _block(draw, n: int, max_blocks: int, max_block: int) -> int:
    """A block size drawn as its count of blocks t, then any size that gives t blocks: ceil(N /
    block) = t for block in [ceil(N/t), ceil(N/(t-1)) - 1], which shrinks to ceil(N/t). One
    block (t = 1) is any size in [N, max(N, max_block)]: larger ones are one partial block."""
    t = draw(st.integers(1, min(n, max_blocks)))
    lo = math.ceil(n / t)
    hi = math.ceil(n / (t - 1)) - 1 if t > 1 else max(n, max_block)
    return lo + draw(st.integers(0, max(0, hi - lo)))


def _fits(sched: kernels.Schedule, gpu: simulator.GPUSpec) -> bool:
    try:
        for k in sched.kernels:
            simulator.occupancy(k, gpu)
    except simulator.CapacityError:
        return False
    return True


def tilings(
    *,
    shape: kernels.AttentionShape,
    gpu: simulator.GPUSpec | None = None,
    names: tuple[str, ...] = kernels.SCHEDULES,
    max_blocks: int = 8,
    warps: tuple[int, ...] = (1, 2, 4, 8),
    softmax_passes: tuple[int, ...] = (1, 2),
    max_block: int | None = None,
) -> st.SearchStrategy[kernels.Schedule]:
    """``kernels.Schedule`` objects for ``shape``: a schedule name, Br and Bc, warps, options.

    Parameters
    ----------
    shape : kernels.AttentionShape
    gpu : simulator.GPUSpec, optional
        When given, only schedules whose every kernel fits it (shared memory and threads per
        CTA, at least one CTA per SM) are drawn.
    names : tuple of str
        Schedules to choose from (``kernels.SCHEDULES``).
    max_blocks : int
        Most blocks per dimension (Tr, Tc <= max_blocks), drawn as counts so failures shrink to
        one block.
    warps : tuple of int
    softmax_passes : tuple of int
        Choices of the standard schedules' softmax passes (1, 2); their ``softmax_rows`` is
        drawn in 1 .. min(N, 8), or up to 8 with ``max_block``; the forward's ``unfused``
        (eager PyTorch's kernels) is drawn on or off.
    max_block : int, optional
        Largest block size (and ``softmax_rows``) to draw; default N. Above N, a block is one
        partial block (the kernel predicates the rows past N), e.g. ``max_block=128`` for a
        decoding step's 128-row tiles at N = 1.
    """
    if not isinstance(shape, kernels.AttentionShape):
        raise InvalidArgument(f"shape must be a kernels.AttentionShape, got {shape!r}")
    if gpu is not None and not isinstance(gpu, simulator.GPUSpec):
        raise InvalidArgument(f"gpu must be a simulator.GPUSpec or None, got {gpu!r}")
    names = _check_choices("names", names, kernels.SCHEDULES)
    _check_range("blocks", 1, max_blocks)
    warps = _check_choices("warps", warps, (1, 2, 4, 8, 16, 32))
    softmax_passes = _check_choices("softmax_passes", softmax_passes, (1, 2))
    n = shape.seq_len
    if max_block is not None:
        _check_range("block", 1, max_block)
    big = n if max_block is None else max_block

    @st.composite
    def draw_tiling(draw):
        name = draw(st.sampled_from(names))
        opts = {}
        if "softmax_passes" in spec(name).options:
            opts["softmax_passes"] = draw(st.sampled_from(softmax_passes))
            opts["softmax_rows"] = draw(st.integers(1, min(8, max(n, big))))
        if "unfused" in spec(name).options:  # standard as eager PyTorch runs it
            opts["unfused"] = int(draw(st.booleans()))
        nk = shape.n_kv
        bq = _block(draw, n, max_blocks, big)
        bkv = _block(draw, nk, max_blocks, nk if max_block is None else max_block)
        sched = kernels.schedule(name, shape, bq, bkv, draw(st.sampled_from(warps)), **opts)
        return sched

    strategy = draw_tiling()
    return strategy if gpu is None else strategy.filter(lambda s: _fits(s, gpu))
