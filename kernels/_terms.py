"""The symbols of docs/io.md's closed forms, for one schedule: what each schedule module's
``traffic`` (exact global reads and writes per tensor) is written in."""

from __future__ import annotations

from dataclasses import dataclass

from flashio.kernels.mask import BlockSums, block_sums


@dataclass(frozen=True, slots=True)
class Terms:
    """N = ``n``, N_kv = ``nk``, d, element and accumulator bytes, BH = ``bh`` (batch x query
    heads), BK = ``bk`` (batch x kv heads), Tr, Tc, the softmax ``passes`` of the standard
    schedules, and the sums over visited blocks (``kernels.mask.BlockSums``)."""

    n: int
    nk: int
    d: int
    eb: int
    acc: int
    bh: int
    bk: int
    t_q: int
    t_kv: int
    passes: int
    bs: BlockSums

    @property
    def nd(self) -> int:
        return self.n * self.d

    @property
    def kd(self) -> int:
        return self.nk * self.d

    @property
    def nn(self) -> int:
        """Elements of one (batch, head) slice of S: N x N_kv."""
        return self.n * self.nk

    @property
    def rv(self) -> int:
        return self.bs.row_visits

    @property
    def cv(self) -> int:
        return self.bs.col_visits


def terms(s) -> Terms:
    """The Terms of schedule ``s``."""
    sh = s.shape
    return Terms(
        sh.seq_len, sh.n_kv, sh.head_dim, sh.elem_bytes, sh.acc_bytes,
        sh.batch * sh.heads, sh.batch * sh.n_kv_heads, s.t_q, s.t_kv,
        dict(s.options).get("softmax_passes", 1), block_sums(sh, s.block_q, s.block_kv),
    )  # fmt: skip
