"""A paged KV cache: K and V kept in fixed-size pages that a block table maps to sequences.

Serving engines do not keep each sequence's keys in one contiguous run: vLLM's
PagedAttention (Kwon et al., SOSP 2023), FlashInfer and flash-attn's ``block_table`` keep a
pool of pages of ``page_size`` tokens and, per sequence, a table of the pages that hold its
tokens in order. Token t of sequence b lives in page ``table[b, t // page_size]`` at slot
``t % page_size``.

flashio lays the pool out as FlashInfer's "HND" layout: K (and V) is ``(num_pages, kv_heads,
page_size, head_dim)``, so a page's rows of one head are contiguous and a tile of keys is one
run of rows per page it spans. ``AttentionShape(..., paged_kv=PagedKV(...))`` puts a cache in a
shape; ``flash_decode`` reads it (the page table too: 4 bytes per page, int32).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from flashio.simulator.errors import ShapeError

__all__ = ["PagedKV", "parse_paged_kv"]

TABLE_BYTES = 4  # int32 page ids, as vLLM and flash-attn keep them


@dataclass(frozen=True, slots=True)
class PagedKV:
    """A block table of ``batch`` rows of ``pages_per_seq`` page ids into a pool of
    ``num_pages`` pages of ``page_size`` tokens.

    Build one with :meth:`contiguous`, :meth:`shuffled` or :meth:`from_array`; ``table`` is
    the block table as a new int64 array (batch x pages_per_seq). Sequences may share
    a page (a common prefix, as vLLM's prefix caching does): a page id may repeat across
    rows, not within one.
    """

    page_size: int
    batch: int
    pages_per_seq: int
    num_pages: int
    ids: bytes = field(repr=False)  # row-major little-endian int32 page ids

    def __post_init__(self):
        for name in ("page_size", "batch", "pages_per_seq", "num_pages"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
                raise ShapeError(f"PagedKV.{name} must be a positive integer, got {v!r}")
            object.__setattr__(self, name, int(v))
        if self.num_pages >= 2**31:
            raise ShapeError(f"PagedKV.num_pages={self.num_pages} exceeds int32 page ids")
        if len(self.ids) != TABLE_BYTES * self.batch * self.pages_per_seq:
            raise ShapeError(
                f"PagedKV: {len(self.ids) // TABLE_BYTES} page ids given for a {self.batch} x "
                f"{self.pages_per_seq} table"
            )
        t = self.table
        if t.min() < 0 or t.max() >= self.num_pages:
            raise ShapeError(
                f"PagedKV: page ids must lie in 0..{self.num_pages - 1} (num_pages), got "
                f"{t.min()}..{t.max()}"
            )
        twice = (np.diff(np.sort(t, axis=1), axis=1) == 0).any(axis=1)
        if twice.any():
            raise ShapeError(f"PagedKV: sequence {int(np.argmax(twice))} lists a page twice")

    # -- constructors ---------------------------------------------------------------------
    @classmethod
    def from_array(cls, table, page_size: int, num_pages: int | None = None) -> PagedKV:
        """From a 2-D integer array (sequences x pages); the pool holds ``num_pages`` pages
        (default: the largest id + 1)."""
        a = np.asarray(table)
        if a.ndim != 2 or 0 in a.shape or not np.issubdtype(a.dtype, np.integer):
            raise ShapeError(
                f"PagedKV.from_array needs a non-empty 2-D integer array, got {a.dtype} {a.shape}"
            )
        if a.min() < 0 or a.max() >= 2**31:
            raise ShapeError(f"PagedKV: page ids must be int32 >= 0, got {a.min()}..{a.max()}")
        pool = int(a.max()) + 1 if num_pages is None else num_pages
        return cls(page_size, a.shape[0], a.shape[1], pool, a.astype("<i4").tobytes())

    @classmethod
    def contiguous(cls, batch: int, kv_seq_len: int, page_size: int) -> PagedKV:
        """Sequence b in pages b n .. b n + n - 1, in order (n = ceil(kv_seq_len /
        page_size) pages a sequence): the layout of an unpaged cache, cut into pages."""
        per = _pages(kv_seq_len, page_size)
        return cls.from_array(np.arange(batch * per).reshape(batch, per), page_size)

    @classmethod
    def shuffled(
        cls, batch: int, kv_seq_len: int, page_size: int, *, seed: int = 0,
        num_pages: int | None = None,
    ) -> PagedKV:  # fmt: skip
        """Each sequence's pages drawn without replacement from a pool of ``num_pages``
        (default: just enough), in a random order (numpy's PCG64 with ``seed``): a cache
        whose pages were freed and reused in no order."""
        per = _pages(kv_seq_len, page_size)
        pool = batch * per if num_pages is None else num_pages
        if pool < batch * per:
            raise ShapeError(f"PagedKV.shuffled: {batch * per} pages needed, num_pages={pool}")
        ids = np.random.default_rng(seed).permutation(pool)[: batch * per]
        return cls.from_array(ids.reshape(batch, per), page_size, pool)

    # -- views ----------------------------------------------------------------------------
    @property
    def table(self) -> np.ndarray:
        """The block table, (batch, pages_per_seq) int64."""
        ids = np.frombuffer(self.ids, "<i4").reshape(self.batch, self.pages_per_seq)
        return ids.astype(np.int64)

    def check_fits(self, batch: int, kv_seq_len: int) -> None:
        """ShapeError unless the table has a row per sequence and enough pages for
        ``kv_seq_len`` tokens (more are allowed: a cache reserved ahead)."""
        need = _pages(kv_seq_len, self.page_size)
        if self.batch != batch or self.pages_per_seq < need:
            raise ShapeError(
                f"paged_kv is a {self.batch} x {self.pages_per_seq} table of {self.page_size}-"
                f"token pages; batch={batch} and kv_seq_len={kv_seq_len} need {batch} x {need} "
                "at least"
            )

    def describe(self) -> str:
        """``paged_kv=16-token pages, 4096 of 4096 in the pool``."""
        used = len(np.unique(self.table))
        return f"paged_kv={self.page_size}-token pages, {used} of {self.num_pages} in the pool"

    def to_dict(self) -> dict:
        """JSON-able: the page size, the pool's size and the table as lists of ids."""
        return {
            "page_size": self.page_size,
            "num_pages": self.num_pages,
            "table": self.table.tolist(),
        }

    @classmethod
    def from_dict(cls, d: dict) -> PagedKV:
        """The inverse of :meth:`to_dict`."""
        try:
            table = np.array(d["table"])
            if table.dtype == object or table.ndim != 2:
                raise ValueError
            return cls.from_array(table, d["page_size"], d["num_pages"])
        except (KeyError, TypeError, ValueError):
            raise ShapeError(
                "a paged_kv dict needs page_size, num_pages and table (equal-length lists of "
                f"page ids), got {d!r:.120}"
            ) from None


def _pages(n: int, page_size: int) -> int:
    for name, v in (("kv_seq_len", n), ("page_size", page_size)):
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
            raise ShapeError(f"PagedKV: {name} must be a positive integer, got {v!r}")
    return math.ceil(n / page_size)


def parse_paged_kv(text: str, batch: int, kv_seq_len: int) -> PagedKV:
    """A paged cache from the command line's ``--paged-kv`` text: ``PAGE_SIZE`` or
    ``PAGE_SIZE:shuffled[:SEED]`` (pages in a random order, the default),
    ``PAGE_SIZE:contiguous``, or ``TABLE.npy:PAGE_SIZE`` (a saved block table)."""
    head, _, rest = text.partition(":")
    args = rest.split(":") if rest else []
    try:
        if head.endswith(".npy") and len(args) == 1:
            try:
                table = np.load(head, allow_pickle=False)
            except OSError as e:
                raise ShapeError(f"--paged-kv {text}: {e.strerror or e}") from None
            return PagedKV.from_array(table, int(args[0]))
        size = int(head)
        if not args or (args[0] == "shuffled" and len(args) <= 2):
            seed = int(args[1]) if len(args) == 2 else 0
            return PagedKV.shuffled(batch, kv_seq_len, size, seed=seed)
        if args == ["contiguous"]:
            return PagedKV.contiguous(batch, kv_seq_len, size)
    except ValueError:  # a number that does not parse
        pass
    raise ShapeError(
        f"--paged-kv {text!r}: give PAGE_SIZE[:shuffled[:SEED]] (e.g. 16), "
        "PAGE_SIZE:contiguous or TABLE.npy:PAGE_SIZE"
    )
