"""Attention problem shapes."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from flashio.kernels.block_mask import BlockMask
from flashio.kernels.paged_kv import PagedKV
from flashio.simulator.errors import ShapeError

__all__ = ["DTYPES", "AttentionShape"]

MAX_SIZE = 2**31 - 1  # largest batch, heads, seq_len or head_dim
MAX_SCORES = 2**59  # largest batch * heads * seq_len**2 (elements of the score matrix S)

# name -> (bytes per element, numpy dtype used by the executors, accumulator dtype)
DTYPES: dict[str, tuple[int, str, str]] = {
    "fp16": (2, "float16", "float32"),
    "bf16": (2, "bfloat16", "float32"),
    "fp32": (4, "float32", "float32"),
    "fp64": (8, "float64", "float64"),
}


@dataclass(frozen=True, slots=True)
class AttentionShape:
    """Shape of one attention call: Q, K, V and O are (batch, heads, seq_len, head_dim).

    Parameters
    ----------
    batch, heads, seq_len, head_dim : int
        Sizes; ``seq_len`` is N and ``head_dim`` is d in the FlashAttention papers.
    dtype : str
        Element type of Q, K, V, O and their gradients: ``fp16``, ``bf16``, ``fp32`` or ``fp64``.
        Softmax statistics (m, l, logsumexp, D) and the dQ accumulator are kept in the
        accumulator type: fp32, or fp64 for fp64 inputs.
    causal : bool
        Mask out keys after the query (row i attends to keys 0..i).
    kv_heads : int or None
        Heads of K and V (grouped-query attention); ``None`` means ``heads``. Query head h reads
        key/value head ``h // (heads // kv_heads)``.
    kv_seq_len : int or None
        Rows of K and V; ``None`` means ``seq_len``. The queries are aligned to the end of the
        keys (flash-attn's bottom-right convention): query i sits at key ``i + kv_seq_len -
        seq_len``. Decoding over a KV cache is ``seq_len=1``.
    window : int, (int, int) or None
        Local (sliding-window) attention. With ``causal=True`` an int W: each query sees
        itself and the W - 1 keys before it (flash-attn's ``window_size=(W - 1, 0)``).
        Without causal a pair ``(left, right)``: the keys from ``left`` before to ``right``
        after the query's position.
    segments : tuple of int or None
        Packed documents (flash-attn varlen's ``cu_seqlens``, a block-diagonal mask): the
        lengths of the sequences laid end to end, summing to ``seq_len``; a query sees only
        keys of its own segment (and, with ``causal`` or ``window``, only those keys of it).
        Needs ``kv_seq_len`` equal to ``seq_len``.
    block_mask : kernels.BlockMask or None
        Block-sparse attention (FlashAttention's Prop. 4, flex_attention's ``BlockMask``):
        query i sees key j only where block ``(i // block_q, j // block_kv)`` is kept, on top
        of the masks above. A dict (``BlockMask.to_dict``) is accepted too.
    paged_kv : kernels.PagedKV or None
        K and V kept in a paged cache (vLLM, FlashInfer, flash-attn's ``block_table``): a pool
        of fixed-size pages and a table of each sequence's pages. It changes where keys lie,
        not which keys a query sees; ``flash_decode`` reads it. A dict
        (``PagedKV.to_dict``) is accepted too.

    Notes
    -----
    Which keys each query sees is ``kernels.mask.key_ranges(shape)``.
    """

    batch: int
    heads: int
    seq_len: int
    head_dim: int
    dtype: str = "fp16"
    causal: bool = False
    kv_heads: int | None = None
    kv_seq_len: int | None = None
    window: int | tuple[int, int] | None = None
    segments: tuple[int, ...] | None = None
    block_mask: BlockMask | None = None
    paged_kv: PagedKV | None = None

    def __post_init__(self):
        for name in ("batch", "heads", "seq_len", "head_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ShapeError(
                    f"AttentionShape.{name} must be a positive integer, got {value!r}"
                )
            if value > MAX_SIZE:  # trace events hold sizes and indices as int32
                raise ShapeError(f"AttentionShape.{name}={value} exceeds {MAX_SIZE} (2**31 - 1)")
            object.__setattr__(self, name, int(value))
        if not isinstance(self.causal, bool | np.bool_):
            raise ShapeError(f"AttentionShape.causal must be True or False, got {self.causal!r}")
        object.__setattr__(self, "causal", bool(self.causal))
        self._check_variants()
        rows = self.batch * self.heads * max(self.seq_len, self.n_kv)
        if rows > MAX_SIZE:  # a CTA per row is the most any schedule launches; indices are int32
            raise ShapeError(
                f"batch * heads * max(seq_len, kv_seq_len) = {rows:,} rows exceeds "
                f"{MAX_SIZE:,} (2**31 - 1): CTA indices in a trace are int32; make the shape "
                "smaller"
            )
        scores = self.batch * self.heads * self.seq_len * self.n_kv
        if scores > MAX_SCORES:  # byte offsets of S (8-byte elements at most) must fit int64
            raise ShapeError(
                f"batch * heads * seq_len * kv_seq_len = {scores:,} score elements exceeds 2**59: "
                "make the shape smaller (sizes up to a few million tokens per head fit)"
            )
        if self.dtype not in DTYPES:
            raise ShapeError(
                f"AttentionShape.dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}"
            )
        kv = self.kv_heads
        if kv is not None:
            if isinstance(kv, bool) or not isinstance(kv, int | np.integer) or kv < 1:
                raise ShapeError(f"AttentionShape.kv_heads must be a positive integer, got {kv!r}")
            if self.heads % kv:
                raise ShapeError(
                    f"AttentionShape.kv_heads={kv} must divide heads={self.heads} "
                    "(each key/value head serves heads // kv_heads query heads)"
                )
            object.__setattr__(self, "kv_heads", int(kv))

    def _check_variants(self) -> None:
        def positive(name, v):
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
                raise ShapeError(f"AttentionShape.{name} must be a positive integer, got {v!r}")
            if v > MAX_SIZE:
                raise ShapeError(f"AttentionShape.{name}={v} exceeds {MAX_SIZE} (2**31 - 1)")
            return int(v)

        if self.kv_seq_len is not None:
            object.__setattr__(self, "kv_seq_len", positive("kv_seq_len", self.kv_seq_len))
        w = self.window
        if w is not None:
            if isinstance(w, int | np.integer) and not isinstance(w, bool):
                if not self.causal:
                    raise ShapeError(
                        f"AttentionShape.window={w} without causal=True: give the non-causal "
                        "window as a (left, right) pair of keys before and after the query"
                    )
                object.__setattr__(self, "window", positive("window", w))
            elif isinstance(w, tuple | list) and len(w) == 2:
                for v in w:
                    if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 0:
                        raise ShapeError(
                            f"AttentionShape.window={w!r}: left and right must be integers >= 0"
                        )
                if self.causal:
                    raise ShapeError(
                        f"AttentionShape.window={tuple(w)} with causal=True: a causal window is "
                        f"one int, the keys it spans (window={int(w[0]) + 1} for "
                        f"{int(w[0])} keys before the query)"
                    )
                object.__setattr__(self, "window", (int(w[0]), int(w[1])))
            else:
                raise ShapeError(
                    f"AttentionShape.window must be an int (causal) or a (left, right) pair, "
                    f"got {w!r}"
                )
        seg = self.segments
        if seg is not None:
            if not isinstance(seg, tuple | list) or not seg:
                raise ShapeError(
                    f"AttentionShape.segments must be a non-empty tuple of lengths, got {seg!r}"
                )
            seg = tuple(positive("segments[]", v) for v in seg)
            if sum(seg) != self.seq_len:
                raise ShapeError(
                    f"AttentionShape.segments sum to {sum(seg)}, not seq_len={self.seq_len}"
                )
            if self.n_kv != self.seq_len:
                raise ShapeError(
                    "AttentionShape.segments needs kv_seq_len equal to seq_len "
                    f"(got {self.n_kv} and {self.seq_len})"
                )
            object.__setattr__(self, "segments", seg)
        bm = self.block_mask
        if isinstance(bm, dict):
            bm = BlockMask.from_dict(bm)
            object.__setattr__(self, "block_mask", bm)
        if bm is not None:
            if not isinstance(bm, BlockMask):
                raise ShapeError(
                    "AttentionShape.block_mask must be a kernels.BlockMask, got "
                    f"{type(bm).__name__}"
                )
            bm.check_fits(self.seq_len, self.n_kv)
        pk = self.paged_kv
        if isinstance(pk, dict):
            pk = PagedKV.from_dict(pk)
            object.__setattr__(self, "paged_kv", pk)
        if pk is not None:
            if not isinstance(pk, PagedKV):
                raise ShapeError(
                    f"AttentionShape.paged_kv must be a kernels.PagedKV, got {type(pk).__name__}"
                )
            pk.check_fits(self.batch, self.n_kv)

    @property
    def n_kv(self) -> int:
        """Rows of K and V: ``kv_seq_len``, or ``seq_len`` when it is None."""
        return self.seq_len if self.kv_seq_len is None else self.kv_seq_len

    @property
    def window_bounds(self) -> tuple[int, int] | None:
        """The window as (keys before, keys after) the query's position, or None."""
        w = self.window
        if w is None:
            return None
        return (w - 1, 0) if isinstance(w, int) else w

    @property
    def variant(self) -> bool:
        """True for a mask beyond full and causal attention of equal lengths (window,
        segments, a block mask or kv_seq_len != seq_len): the CUDA kernels' MASKED builds."""
        return (
            self.window is not None
            or self.segments is not None
            or self.block_mask is not None
            or self.n_kv != self.seq_len
        )

    @property
    def elem_bytes(self) -> int:
        """Bytes per element of Q, K, V, O and their gradients."""
        return DTYPES[self.dtype][0]

    @property
    def acc_bytes(self) -> int:
        """Bytes per element of the accumulator type (softmax statistics, dQ accumulator)."""
        return 8 if self.dtype == "fp64" else 4

    @property
    def n_kv_heads(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.heads // self.n_kv_heads

    @property
    def np_dtype(self) -> np.dtype:
        """numpy dtype of the inputs (bf16 needs ml_dtypes; see kernels.numerics)."""
        from flashio.kernels._numerics import numpy_dtype

        return numpy_dtype(self.dtype)

    @property
    def scale(self) -> float:
        """Softmax scale 1/sqrt(d)."""
        return 1.0 / float(np.sqrt(self.head_dim))

    def forward_flops(self) -> int:
        """Matmul FLOPs of the forward pass, 4 d per query-key pair the mask allows, per head
        (4 N^2 d without a mask; causal: the unmasked N(N+1)/2 pairs)."""
        n, d = self.seq_len, self.head_dim
        if not self.variant:
            pairs = n * (n + 1) // 2 if self.causal else n * n
        else:
            from flashio.kernels.mask import pair_count

            pairs = pair_count(self)
        return 4 * pairs * d * self.batch * self.heads

    def describe(self) -> str:
        """One line for reports: ``batch=1, heads=16, N=4096, d=64, fp16, causal, window=512``."""
        parts = [f"batch={self.batch}", f"heads={self.heads}"]
        if self.kv_heads:
            parts.append(f"kv_heads={self.kv_heads}")
        parts.append(f"N={self.seq_len}")
        if self.kv_seq_len is not None:
            parts.append(f"N_kv={self.kv_seq_len}")
        parts += [f"d={self.head_dim}", self.dtype]
        if self.causal:
            parts.append("causal")
        if self.window is not None:
            w = self.window
            parts.append(f"window={w}" if isinstance(w, int) else f"window=({w[0]}, {w[1]})")
        if self.segments is not None:
            seg = self.segments
            more = f", ... {len(seg)} in all" if len(seg) > 4 else ""
            parts.append(f"segments=({', '.join(map(str, seg[:4]))}{more})")
        if self.block_mask is not None:
            parts.append(self.block_mask.describe())
        if self.paged_kv is not None:
            parts.append(self.paged_kv.describe())
        return ", ".join(parts)

    def to_dict(self) -> dict:
        """The fields as a dict (JSON-able); ``kv_seq_len``, ``window``, ``segments``,
        ``block_mask`` and ``paged_kv`` only when set."""
        d = asdict(self)
        if self.block_mask is not None:
            d["block_mask"] = self.block_mask.to_dict()
        if self.paged_kv is not None:
            d["paged_kv"] = self.paged_kv.to_dict()
        for k in ("kv_seq_len", "window", "segments", "block_mask", "paged_kv"):
            if d[k] is None:
                del d[k]
            elif isinstance(d[k], tuple):
                d[k] = list(d[k])
        return d
