"""Warp programs for kernels whose machine code is not in the census, from their description.

A Hopper-native FlashAttention forward (FlashAttention-3's design: a producer warp issuing TMA
beside consumer warpgroups issuing wgmma) is described by its implementation (warp roles,
softmax overlap: ``kernels.Implementation``) but its machine code is not known here. This
module writes the instructions one consumer warp issues for one K/V block, from the algorithm
(Shah et al. 2024, arXiv 2407.08608, Algorithm 1 and Sec. 3.2) and the instruction counts a
compiled kernel of that design executes, so that the warp replay (``simulator.warp_replay``)
prices its step as it prices compiled code. Per consumer warpgroup of 64 query rows, a tile of
``block_kv`` keys and head dim d, 16-bit operands:

- S = Q K^T: d / 16 wgmma m64 n``block_kv`` k16, both operands in shared memory;
- the online softmax, per thread (block_kv / 2 scores, 2 rows): a row max (FMNMX per score, two
  shuffle rounds per row), the new max and the rescale factor (two MUFU), exp2 of the scaled,
  shifted score (FFMA and MUFU.EX2 per score), the row sum (FADD per score), the packing of P to
  16 bits (one F2FP per two scores) and the rescale of O (FMUL per accumulator, d / 2);
- O += P V: block_kv / 16 wgmma m64 n``d`` k16, P in registers, V in shared memory;
- two uniform-datapath instructions per wgmma (descriptor arithmetic) and the loop's branch.

These counts are what cuDNN's Hopper SDPA forward executes per score (Nsight Compute,
data/impl/cudnn/cudnn_sass.csv.gz: one MUFU, one FMNMX, half an F2FP per score, its FP32
arithmetic in FADD and FMUL rather than FFMA). Without intra-warpgroup overlap a warp issues
S, waits for it, runs the softmax, issues PV and waits for it. With it (FlashAttention-3's
``IntraWGOverlap``), a warp issues S of this block and PV of the previous one, waits for S
only, runs this block's softmax, then waits for PV before rescaling O. Ping-pong between
warpgroups is not scheduled by named barriers here: the replay interleaves the consumer
warps of a sub-partition as its issue rule does. (Written with the turns of compiled
ping-pong code, BAR.SYNC before the products and BAR.ARV after, these programs came out
0.7-23% slower, the most at d = 64, and cuDNN's forward, priced by them, 13.0% off where
it is 7.5% without: the turns are kept for machine code that has them.) Dependencies between
instructions are the ones the algorithm has; their stall counts are the minimum (one cycle)
where enough independent work separates them, as a compiler schedules.
"""

from __future__ import annotations

import numpy as np

from flashio.simulator.sass import CLASS_ID, NO_BARRIER, WarpProgram

__all__ = ["OVERLAPPING", "flash_forward_program"]

# softmax_overlap values with intra-warpgroup overlap
OVERLAPPING = ("intra-warpgroup", "both")
UNIFORM_PER_WGMMA = 2  # descriptor arithmetic (an assumption: cuDNN's loop has 4.5)
_MUFU_SB, _SHFL_SB, _ALPHA_SB = 0, 1, 2  # scoreboards


class _Writer:
    def __init__(self):
        self.rows = []

    def add(self, klass, n=1, stall=1, wbar=NO_BARRIER, wait=0, sbytes=0, flops=0, group=0):
        for i in range(n):
            self.rows.append(
                (CLASS_ID[klass], stall, wbar, NO_BARRIER, wait if i == 0 else 0, sbytes,
                 flops, group if i == n - 1 else 0)
            )  # fmt: skip

    def wgmma(self, count: int, n: int, k_bytes_a: int, k_bytes_b: int):
        """``count`` wgmma m64 nN k16 committed as one group: each warp's quarter of the FLOPs
        and of the shared-memory operand bytes."""
        for i in range(count):
            self.add("uniform", UNIFORM_PER_WGMMA)
            self.add("hgmma", flops=2 * 64 * n * 16 // 4, sbytes=(k_bytes_a + k_bytes_b) // 4,
                     group=1 if i == count - 1 else 0)  # fmt: skip

    def program(self, name: str) -> WarpProgram:
        a = np.array(self.rows, np.int64).reshape(-1, 8)
        return WarpProgram(name, *(a[:, j] for j in range(6)), a[:, 6], a[:, 7])


def flash_forward_program(
    block_kv: int, head_dim: int, elem_bytes: int = 2, softmax_overlap: str = "none"
) -> WarpProgram:  # fmt: skip
    """One consumer warp's instructions for one K/V block of a wgmma FlashAttention forward
    (module docstring)."""
    if block_kv % 16 or head_dim % 16:
        raise ValueError(f"block_kv and head_dim must be multiples of 16: {block_kv}, {head_dim}")
    w = _Writer()
    scores, acc = block_kv // 2, head_dim // 2  # per thread
    s_bytes = (64 * 16 * elem_bytes, block_kv * 16 * elem_bytes)  # A = Q, B = K (shared)
    pv_bytes = (0, head_dim * 16 * elem_bytes)  # A = P in registers, B = V (shared)
    overlap = softmax_overlap in OVERLAPPING
    w.wgmma(head_dim // 16, block_kv, *s_bytes)  # S = Q K^T
    if overlap:  # PV of the previous block, then wait for S only
        w.wgmma(block_kv // 16, head_dim, *pv_bytes)
    w.add("control", group=-3 if overlap else -2)  # WARPGROUP.DEPBAR.LE gsb0, 1 (or 0)
    # row max: per score, then across the quad of threads sharing a row (2 rows, 2 rounds)
    w.add("alu", scores)
    for _ in range(2):
        w.add("shfl", 2, wbar=_SHFL_SB, sbytes=128)
        w.add("alu", 2, stall=4, wait=1 << _SHFL_SB)
    # new max and the factor exp2(m_old - m_new) for O and l
    w.add("alu", 2, stall=4)
    w.add("fma", 2, stall=4)
    w.add("mufu", 2, wbar=_ALPHA_SB)
    # P = exp2(S * scale - m * scale), its row sum, P packed to 16 bits
    w.add("fma", scores)
    w.add("mufu", scores, wbar=_MUFU_SB)
    w.add("fma", scores, wait=1 << _MUFU_SB)
    w.add("fma", 2, stall=4, wait=1 << _ALPHA_SB)  # l = l * alpha + row sum
    w.add("alu", scores // 2)
    if overlap:
        w.add("control", group=-2)  # PV of the previous block done
    w.add("fma", acc, wait=1 << _ALPHA_SB)  # O *= alpha
    if not overlap:
        w.wgmma(block_kv // 16, head_dim, *pv_bytes)  # O += P V
        w.add("control", group=-2)
    w.add("alu", 2)  # loop counter and compare
    w.add("control", stall=4)  # branch
    return w.program(f"synthetic wgmma forward {block_kv}x{head_dim} {softmax_overlap}")
