"""Block-sparse attention: which (query block, key block) pairs a user keeps.

A ``BlockMask`` is a boolean grid over blocks of ``block_q`` queries by ``block_kv`` keys
(FlashAttention, Sec. 3.3 and Prop. 4: block-sparse FlashAttention; torch flex_attention's
``BlockMask``, 128 x 128 by default). Query i may see key j only where the block
``(i // block_q, j // block_kv)`` is kept; the shape's other masks (causal, window, segments,
kv_seq_len) apply as well, so a kept block can still be partial. ``AttentionShape(...,
block_mask=BlockMask(...))`` puts it in a shape; ``kernels.mask`` reads it for every schedule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from flashio.simulator.errors import ShapeError

__all__ = ["BlockMask", "parse_block_mask"]


@dataclass(frozen=True, slots=True)
class BlockMask:
    """Kept (query block, key block) pairs of ``block_q`` x ``block_kv`` elements.

    Build one with :meth:`from_array`, :meth:`random` or :meth:`local`; ``array`` is the grid
    as a read-only boolean array (query blocks x key blocks), ``density`` the kept share.
    """

    block_q: int
    block_kv: int
    q_blocks: int
    kv_blocks: int
    bits: bytes = field(repr=False)  # row-major, one byte (0 or 1) per block

    def __post_init__(self):
        for name in ("block_q", "block_kv", "q_blocks", "kv_blocks"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 1:
                raise ShapeError(f"BlockMask.{name} must be a positive integer, got {v!r}")
            object.__setattr__(self, name, int(v))
        if len(self.bits) != self.q_blocks * self.kv_blocks:
            raise ShapeError(
                f"BlockMask: {len(self.bits)} blocks given for a {self.q_blocks} x "
                f"{self.kv_blocks} grid"
            )
        if set(self.bits) - {0, 1}:
            raise ShapeError("BlockMask.bits must hold one byte 0 or 1 per block")

    # -- constructors ---------------------------------------------------------------------
    @classmethod
    def from_array(cls, kept, block_q: int = 128, block_kv: int = 128) -> BlockMask:
        """From a 2-D array (query blocks x key blocks) whose true or nonzero entries are kept."""
        a = np.asarray(kept)
        if a.ndim != 2 or 0 in a.shape:
            raise ShapeError(f"BlockMask.from_array needs a non-empty 2-D array, got {a.shape}")
        a = a.astype(bool).astype(np.uint8)
        return cls(block_q, block_kv, a.shape[0], a.shape[1], a.tobytes())

    @classmethod
    def random(
        cls,
        seq_len: int,
        density: float,
        *,
        kv_seq_len: int | None = None,
        block_q: int = 128,
        block_kv: int = 128,
        seed: int = 0,
    ) -> BlockMask:
        """``round(density x blocks)`` blocks kept, drawn uniformly without replacement
        (numpy's PCG64 with ``seed``), for ``seq_len`` queries and ``kv_seq_len`` keys."""
        if not 0 <= density <= 1:
            raise ShapeError(f"BlockMask.random: density must be in [0, 1], got {density!r}")
        tq, tk = _blocks(seq_len, block_q), _blocks(kv_seq_len or seq_len, block_kv)
        kept = np.zeros(tq * tk, bool)
        pick = np.random.default_rng(seed).choice(tq * tk, round(density * tq * tk), False)
        kept[pick] = True
        return cls.from_array(kept.reshape(tq, tk), block_q, block_kv)

    @classmethod
    def local(
        cls,
        seq_len: int,
        width: int,
        *,
        global_blocks: int = 0,
        block_q: int = 128,
        block_kv: int = 128,
    ) -> BlockMask:
        """A band of key blocks ``|i - j| < width`` around each query block's diagonal, plus
        ``global_blocks`` leading key blocks every query sees and leading query blocks that
        see every key (Longformer's and BigBird's local and global blocks), for
        ``seq_len`` queries and as many keys, blocks compared by their first element."""
        if width < 1 or global_blocks < 0:
            raise ShapeError(
                f"BlockMask.local: width >= 1 and global_blocks >= 0, got {width}, {global_blocks}"
            )
        tq, tk = _blocks(seq_len, block_q), _blocks(seq_len, block_kv)
        qi = np.arange(tq)[:, None] * block_q // block_kv  # query block's diagonal key block
        kj = np.arange(tk)[None, :]
        kept = np.abs(qi - kj) < width
        kept[:, :global_blocks] = True
        kept[: global_blocks * block_kv // block_q, :] = True
        return cls.from_array(kept, block_q, block_kv)

    # -- views ----------------------------------------------------------------------------
    @property
    def array(self) -> np.ndarray:
        """The grid, (q_blocks, kv_blocks) booleans, read-only."""
        a = np.frombuffer(self.bits, np.uint8).reshape(self.q_blocks, self.kv_blocks)
        return a.astype(bool)

    @property
    def density(self) -> float:
        """Share of the blocks kept."""
        return sum(self.bits) / len(self.bits)

    def check_fits(self, seq_len: int, kv_seq_len: int) -> None:
        """ShapeError unless the grid covers ``seq_len`` queries and ``kv_seq_len`` keys
        exactly (its last block may be ragged)."""
        want = (_blocks(seq_len, self.block_q), _blocks(kv_seq_len, self.block_kv))
        if (self.q_blocks, self.kv_blocks) != want:
            raise ShapeError(
                f"block_mask is {self.q_blocks} x {self.kv_blocks} blocks of {self.block_q} x "
                f"{self.block_kv}; seq_len={seq_len} and kv_seq_len={kv_seq_len} need "
                f"{want[0]} x {want[1]}"
            )

    def describe(self) -> str:
        """``block_mask=128x128, 25.0% of 32x32 kept``."""
        return (
            f"block_mask={self.block_q}x{self.block_kv}, {100 * self.density:.1f}% of "
            f"{self.q_blocks}x{self.kv_blocks} kept"
        )

    def to_dict(self) -> dict:
        """JSON-able: the granularity and one string of 0s and 1s per query block."""
        rows = ["".join("1" if v else "0" for v in row) for row in self.array]
        return {"block_q": self.block_q, "block_kv": self.block_kv, "rows": rows}

    @classmethod
    def from_dict(cls, d: dict) -> BlockMask:
        """The inverse of :meth:`to_dict`."""
        try:
            rows = d["rows"]
            kept = [[c == "1" for c in row] for row in rows]
            if {c for row in rows for c in row} - {"0", "1"} or len({len(r) for r in rows}) != 1:
                raise ValueError
            return cls.from_array(np.array(kept), d["block_q"], d["block_kv"])
        except (KeyError, TypeError, ValueError):
            raise ShapeError(
                "a block_mask dict needs block_q, block_kv and rows (equal-length strings of "
                f"0 and 1), got {d!r:.120}"
            ) from None


def _blocks(n: int, b: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1 or b < 1:
        raise ShapeError(f"BlockMask: lengths and block sizes must be positive, got {n}, {b}")
    return math.ceil(n / b)


def parse_block_mask(
    text: str, seq_len: int, kv_seq_len: int | None = None, block: int = 128
) -> BlockMask:
    """A block mask from the command line's ``--block-mask`` text: ``random:DENSITY[:SEED]``,
    ``local:WIDTH[:GLOBAL]`` (blocks) or the path of a ``.npy`` file holding the boolean
    grid; blocks of ``block`` x ``block`` elements."""
    kind, _, rest = text.partition(":")
    args = rest.split(":") if rest else []
    try:
        if kind == "random" and 1 <= len(args) <= 2:
            seed = int(args[1]) if len(args) == 2 else 0
            return BlockMask.random(
                seq_len, float(args[0]), kv_seq_len=kv_seq_len, block_q=block,
                block_kv=block, seed=seed,
            )  # fmt: skip
        if kind == "local" and 1 <= len(args) <= 2:
            if kv_seq_len not in (None, seq_len):
                raise ShapeError("--block-mask local: needs kv_seq_len equal to seq_len")
            glob = int(args[1]) if len(args) == 2 else 0
            return BlockMask.local(
                seq_len, int(args[0]), global_blocks=glob, block_q=block, block_kv=block
            )
    except ShapeError:
        raise
    except ValueError:  # a number that does not parse
        pass
    else:
        if text.endswith(".npy"):
            try:
                grid = np.load(text, allow_pickle=False)
            except OSError as e:
                raise ShapeError(f"--block-mask {text}: {e.strerror or e}") from None
            return BlockMask.from_array(grid, block, block)
    raise ShapeError(
        f"--block-mask {text!r}: give random:DENSITY[:SEED] (e.g. random:0.25), "
        "local:WIDTH[:GLOBAL] (key blocks each side, leading global blocks) or a .npy grid"
    )
