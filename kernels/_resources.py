"""Per-thread register estimates for the kernels' launch descriptions.

A CTA's register tiles (accumulators, S/P fragments) are spread over its threads, 4 bytes per
register. On top of them each thread keeps addresses, loop counters, indices and operand
fragments; REGISTER_OVERHEAD is that fixed part. It is a modelling assumption: a FlashAttention-2
forward kernel with 128x64 tiles, d=128 and 4 warps holds 128*128*4 + 128*64*4 bytes of fp32
tiles, i.e. 192 registers per thread, and compiles to about 255 (flash-attention's kernel traits
are chosen so it fits), which leaves roughly 32-64 registers for everything else.
"""

from __future__ import annotations

import math

REGISTER_OVERHEAD = 40  # registers per thread outside the tiles (assumed, see above)


def regs_per_thread(register_tile_bytes: int, warps: int) -> int:
    threads = 32 * warps
    return math.ceil(register_tile_bytes / 4 / threads) + REGISTER_OVERHEAD
