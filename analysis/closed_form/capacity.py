"""What Algorithm 1 of FlashAttention(-2) keeps resident on chip, counted against M.

M is the on-chip memory in *elements* of the working dtype (the FlashAttention paper's unit); a
GPU spec stores bytes, so M = sram_bytes // elem_bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from flashio import kernels
from flashio.kernels.schedules import DEFAULT_SRAM_BYTES
from flashio.simulator.errors import ShapeError, TilingError

__all__ = ["ALGORITHMS", "Capacity", "Tile", "tile_capacity"]

MAX_SRAM_BYTES = 2**30  # a sanity bound: blocks of M/(4d) rows must be a valid tiling

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
        raise ShapeError(f"dtype must be one of {', '.join(kernels.DTYPES)}, got {dtype!r}")
    if isinstance(sram_bytes, bool) or not isinstance(sram_bytes, int) or sram_bytes < 1:
        raise TilingError(f"sram_bytes must be a positive integer (bytes), got {sram_bytes!r}")
    if sram_bytes > MAX_SRAM_BYTES:
        raise TilingError(
            f"sram_bytes={sram_bytes:,} is more than {MAX_SRAM_BYTES:,} B (1 GiB) of on-chip "
            "memory per CTA; give the shared memory of one CTA, in bytes"
        )
    eb = kernels.DTYPES[dtype][0]
    return sram_bytes // eb, eb


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TilingError(f"{name} must be a positive integer, got {value!r}")
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
        raise TilingError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
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
