"""Attention problem shapes."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

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
    """

    batch: int
    heads: int
    seq_len: int
    head_dim: int
    dtype: str = "fp16"
    causal: bool = False
    kv_heads: int | None = None

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
        rows = self.batch * self.heads * self.seq_len
        if rows > MAX_SIZE:  # a CTA per row is the most any schedule launches; indices are int32
            raise ShapeError(
                f"batch * heads * seq_len = {rows:,} rows exceeds {MAX_SIZE:,} (2**31 - 1): "
                "CTA indices in a trace are int32; make the shape smaller"
            )
        scores = self.batch * self.heads * self.seq_len**2
        if scores > MAX_SCORES:  # byte offsets of S (8-byte elements at most) must fit int64
            raise ShapeError(
                f"batch * heads * seq_len**2 = {scores:,} score elements exceeds 2**59: "
                "make the shape smaller (sizes up to a few million tokens per head fit)"
            )
        if self.dtype not in DTYPES:
            raise ShapeError(
                f"AttentionShape.dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}"
            )
        if not isinstance(self.causal, bool | np.bool_):
            raise ShapeError(f"AttentionShape.causal must be True or False, got {self.causal!r}")
        object.__setattr__(self, "causal", bool(self.causal))
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
        """Matmul FLOPs of the forward pass, 4*N^2*d per head (causal: the unmasked half)."""
        n, d = self.seq_len, self.head_dim
        pairs = n * (n + 1) // 2 if self.causal else n * n
        return 4 * pairs * d * self.batch * self.heads

    def to_dict(self) -> dict:
        return asdict(self)
