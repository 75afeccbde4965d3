"""Does an H200 SM run wgmma while its warps issue MUFU.EX2 or FFMA? Tensor-pipe overlap.

FlashAttention kernels on Hopper hide the softmax under the matrix products by issuing
``wgmma.mma_async`` and doing other work before waiting for it, in the same warpgroup
(FlashAttention-3's intra-warpgroup overlap) or in another one (its ping-pong schedule). The
warp replay (simulator/warp_replay.py) assumes the tensor pipe and the other pipes work at once.
This probe measures it. One CTA per SM, two warpgroups (256 threads); each loop iteration:

- a warpgroup with the ``mma`` role issues G wgmma m64n128k16 bf16 (SS, the operands in shared
  memory, as isa.py's wgmma_n128), commits them and, at the end of the iteration, waits;
- a warpgroup with the ``alu`` role issues, per warp, E instructions of the kind (MUFU.EX2
  from ``ex2.approx.ftz`` of a negated operand, FFMA, FADD, FMUL, FMNMX, ...) in 8
  independent chains, between the commit and the wait.

Kernels (mma roles, alu roles, kind): one warpgroup doing one thing (the times alone), the
other warpgroup doing the other (``split``: ping-pong), one warpgroup doing both (``same``:
intra-warpgroup), and both warpgroups doing both. G = 16 and E = 128 (MUFU) or 1024 (FFMA)
make each part about 1000 cycles alone (16 x 64 cycles of the tensor pipe; 128 x 8 cycles of
MUFU, 1024 x ~1 of FFMA, per sub-partition). Overlapped, the mixed kernels take about the
longer part; serialized, the sum. The ``h*`` kernels do the same with mma.sync, the ``r*``
ones with wgmma reading A from registers (RS, as a forward's P x V product does).

Timed with %clock64 around the loop, per warp; the CTA's time is its slowest warp's. Every
result feeds a global store guarded by a runtime flag (never set). The machine code is checked
(--sass): the loop's HGMMA, MUFU.EX2 and FFMA counts. GPU clocks are never changed.

    python data/gpu/probe/overlap.py --out DIR [--only KERNEL ...]   # on the GPU: DIR/overlap.json
    python data/gpu/probe/overlap.py --sass DIR    # anywhere with NVRTC: DIR/overlap_sass.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from overlap_fit import (  # noqa: F401 (the replay's side; tests read it from here)
    CHECKS,
    EXCLUSIVE,
    FITS,
    ROLE_FITS,
    RUNS,
    fit,
    fit_all,
    fit_roles,
    load_runs,
    programs_of,
    replayed,
    roles,
    spans,
)

ITERS = 32
LAUNCHES = 5
G = 16  # wgmma per iteration of an mma warpgroup
# instructions per warp per iteration of an alu warpgroup: about 1000 cycles each alone
E = {"mufu": 128, "ffma": 1024, "fmnmx": 512, "imad": 512, "f2fp": 512, "lds": 256,
     "shfl": 512, "fadd": 1024, "fmul": 1024, "ffma_c1": 256, "ffma_c2": 512, "ffma_c3": 768,
     "fmnmx_c1": 256, "imad_c1": 256, "mufu_c1": 64, "soft": 128, "soft_nomax": 128,
     "soft_noadd": 128, "exp": 128, "ex2_add": 128, "soft_ind": 128}  # fmt: skip
SASS = {"mufu": "MUFU.EX2", "ffma": "FFMA", "fmnmx": "FMNMX", "imad": "IMAD", "f2fp": "F2FP",
        "lds": "LDS", "shfl": "SHFL", "fadd": "FADD", "fmul": "FMUL", "ffma_c1": "FFMA",
        "ffma_c2": "FFMA", "ffma_c3": "FFMA", "fmnmx_c1": "FMNMX", "imad_c1": "IMAD",
        "mufu_c1": "MUFU.EX2", "soft": "MUFU.EX2",
        "soft_nomax": "MUFU.EX2", "soft_noadd": "MUFU.EX2", "exp": "MUFU.EX2",
        "ex2_add": "MUFU.EX2", "soft_ind": "MUFU.EX2"}  # fmt: skip
OPTIONS = ("-std=c++17", "-arch=sm_90a")
THREADS = 256  # a CTA's threads, or 384 where a kernel's roles name a third warpgroup
MAX_THREADS = 384


def threads(mma, alu) -> int:
    """A kernel's threads: two warpgroups, or three where its roles name warpgroup 2."""
    return MAX_THREADS if 2 in (*mma, *alu) else THREADS


# name: (warpgroups with the mma role, warpgroups with the alu role, alu kind[, G])
KERNELS = {
    "mma_1wg": ((0,), (), None),
    "mma_2wg": ((0, 1), (), None),
    "mufu_1wg": ((), (1,), "mufu"),
    "mufu_2wg": ((), (0, 1), "mufu"),
    "ffma_1wg": ((), (1,), "ffma"),
    "ffma_2wg": ((), (0, 1), "ffma"),
    "split_mufu": ((0,), (1,), "mufu"),
    "split_ffma": ((0,), (1,), "ffma"),
    "same_mufu": ((0,), (0,), "mufu"),
    "same_ffma": ((0,), (0,), "ffma"),
    "both_mufu": ((0, 1), (0, 1), "mufu"),
    "both_ffma": ((0, 1), (0, 1), "ffma"),
    "fmnmx_1wg": ((), (1,), "fmnmx"),
    "split_fmnmx": ((0,), (1,), "fmnmx"),
    "imad_1wg": ((), (1,), "imad"),
    "split_imad": ((0,), (1,), "imad"),
    "f2fp_1wg": ((), (1,), "f2fp"),
    "split_f2fp": ((0,), (1,), "f2fp"),
    # fewer wgmma: does the warp wait for its wgmma to start, or to finish, before going on?
    "lds_1wg": ((), (1,), "lds"),
    "split_lds": ((0,), (1,), "lds"),
    "shfl_1wg": ((), (1,), "shfl"),
    "split_shfl": ((0,), (1,), "shfl"),
    "both_fmnmx": ((0, 1), (0, 1), "fmnmx"),
    "mma_1wg_g4": ((0,), (), None, 4),
    "same_mufu_g4": ((0,), (0,), "mufu", 4),
    "same_ffma_g4": ((0,), (0,), "ffma", 4),
    # FADD and FMUL (two source operands; the softmax's row sums and rescales) beside wgmma
    "fadd_1wg": ((), (1,), "fadd"),
    "split_fadd": ((0,), (1,), "fadd"),
    "both_fadd": ((0, 1), (0, 1), "fadd"),
    "fmul_1wg": ((), (1,), "fmul"),
    "split_fmul": ((0,), (1,), "fmul"),
    "both_fmul": ((0, 1), (0, 1), "fmul"),
    # one warpgroup doing both with nothing between the commit and the work (ISSUE_FREE):
    # ptxas then interleaves the work with the wgmma issue and waits once at the end, as the
    # kernels' intra-warpgroup overlap does, where the same_* kernels' clock read lets it
    # place the wait first (they time the parts one after the other)
    "intra_ffma": ((0,), (0,), "ffma"),
    "intra_mufu": ((0,), (0,), "mufu"),
    "intra_fmnmx": ((0,), (0,), "fmnmx"),
    # FFMA in one or two dependent chains (a quarter or half of the issue rate, latency-bound)
    # beside another warp's wgmma: does a sparser stream keep more of its rate?
    "ffma_c1_1wg": ((), (1,), "ffma_c1"),
    "split_ffma_c1": ((0,), (1,), "ffma_c1"),
    "ffma_c2_1wg": ((), (1,), "ffma_c2"),
    "split_ffma_c2": ((0,), (1,), "ffma_c2"),
    "ffma_c3_1wg": ((), (1,), "ffma_c3"),
    "split_ffma_c3": ((0,), (1,), "ffma_c3"),
    # one dependent chain of the other classes: an instruction every latency
    "fmnmx_c1_1wg": ((), (1,), "fmnmx_c1"),
    "split_fmnmx_c1": ((0,), (1,), "fmnmx_c1"),
    "imad_c1_1wg": ((), (1,), "imad_c1"),
    "split_imad_c1": ((0,), (1,), "imad_c1"),
    "mufu_c1_1wg": ((), (1,), "mufu_c1"),
    "split_mufu_c1": ((0,), (1,), "mufu_c1"),
    # FFMA in two chains interleaved with its own warp's wgmma: does intra-warpgroup overlap
    # keep more of a sparser stream's rate too?
    "intra_ffma_c2": ((0,), (0,), "ffma_c2"),
    # a softmax's mix, a check no rate is fitted on: per element a running max (FMNMX), the
    # scaled exponent (FFMA), its exponential (MUFU.EX2) and the row sum (FADD)
    "soft_1wg": ((), (1,), "soft"),
    "split_soft": ((0,), (1,), "soft"),
    "intra_soft": ((0,), (0,), "soft"),
    "both_soft": ((0, 1), (0, 1), "soft"),
    # the softmax mix taken apart (alone): which of its dependencies costs more than the
    # replay gives; and a softmax whose exponentials are independent (a running max and a
    # running sum per chain, as a row's are), alone and beside wgmma
    "soft_nomax_1wg": ((), (1,), "soft_nomax"),
    "soft_noadd_1wg": ((), (1,), "soft_noadd"),
    "exp_1wg": ((), (1,), "exp"),
    "ex2_add_1wg": ((), (1,), "ex2_add"),
    "soft_ind_1wg": ((), (1,), "soft_ind"),
    "split_soft_ind": ((0,), (1,), "soft_ind"),
    "intra_soft_ind": ((0,), (0,), "soft_ind"),
    "both_soft_ind": ((0, 1), (0, 1), "soft_ind"),
    # run 16, three warpgroups (384 threads): two warps of work beside one warp's wgmma on
    # each SMSP, against one (split_*) and against the two alone. Does a math instruction
    # beside wgmma hold back only its own warp's next one, or every warp's on the SMSP?
    "ffma_c1_2wg": ((), (1, 2), "ffma_c1"),
    "split2_ffma_c1": ((0,), (1, 2), "ffma_c1"),
    "split2_ffma_c2": ((0,), (1, 2), "ffma_c2"),
    "ffma_c3_2wg": ((), (1, 2), "ffma_c3"),
    "split2_ffma_c3": ((0,), (1, 2), "ffma_c3"),
    # twice the wgmma, so that the tensor pipe outlasts the FFMAs of one warp or of two
    "mma_1wg_g32": ((0,), (), None, 32),
    "split_ffma_c3_g32": ((0,), (1,), "ffma_c3", 32),
    "split2_ffma_c3_g32": ((0,), (1, 2), "ffma_c3", 32),
    "fmnmx_c1_2wg": ((), (1, 2), "fmnmx_c1"),
    "split2_fmnmx_c1": ((0,), (1, 2), "fmnmx_c1"),
    "soft_2wg": ((), (1, 2), "soft"),
    "split2_soft": ((0,), (1, 2), "soft"),
}
# only the RS kernels declare their A fragments (the other kernels compile as in runs 1-9)
RS_DECL = """\
    u32 ra[8][4];  // RS wgmma's A fragments (bf16 pairs in [-1, 1))
#pragma unroll
    for (int k = 0; k < 32; ++k)
        ra[k / 4][k % 4] = (hash(seed ^ (tid * 32 + k + 501)) & 0x807f807fu) | 0x3f003f00u;
"""
RS_SINK = " + (float)(ra[k][0] & 1u)"
# the same with wgmma reading A from registers (RS: the P x V product of every Hopper forward,
# whose P is the softmax's output in registers), B in shared memory; 8 A fragments in turn
RKERNELS = {
    "rmma_1wg": ((0,), (), None),
    "rmma_2wg": ((0, 1), (), None),
    "rsplit_ffma": ((0,), (1,), "ffma"),
    "rsplit_ffma_c1": ((0,), (1,), "ffma_c1"),
    "rsplit_ffma_c2": ((0,), (1,), "ffma_c2"),
    "rsplit_mufu": ((0,), (1,), "mufu"),
    "rsplit_fmnmx": ((0,), (1,), "fmnmx"),
    "rintra_ffma": ((0,), (0,), "ffma"),
    "rintra_ffma_c2": ((0,), (0,), "ffma_c2"),
    "rintra_mufu": ((0,), (0,), "mufu"),
}
# the same with mma.sync m16n8k16 bf16 (HMMA, synchronous: each warp of the mma warpgroups
# issues H in 8 independent chains per iteration, about 1000 cycles of its tensor pipe)
H = 168
HKERNELS = {
    "hmma_1wg": ((0,), (), None),
    "hmma_2wg": ((0, 1), (), None),
    "hsplit_mufu": ((0,), (1,), "mufu"),
    "hsplit_ffma": ((0,), (1,), "ffma"),
    "hsplit_fmnmx": ((0,), (1,), "fmnmx"),
    "hsplit_imad": ((0,), (1,), "imad"),
    "hsplit_f2fp": ((0,), (1,), "f2fp"),
    "hboth_mufu": ((0, 1), (0, 1), "mufu"),
    "hboth_ffma": ((0, 1), (0, 1), "ffma"),
    "hsplit_lds": ((0,), (1,), "lds"),
    "hsplit_shfl": ((0,), (1,), "shfl"),
    "hboth_lds": ((0, 1), (0, 1), "lds"),
    "hboth_fmnmx": ((0, 1), (0, 1), "fmnmx"),
    # one warp per SMSP interleaving mma.sync with the other work (flash-attn 2's 4-warp CTAs)
    "hsame_mufu": ((0,), (0,), "mufu"),
    "hsame_ffma": ((0,), (0,), "ffma"),
    "hsame_fmnmx": ((0,), (0,), "fmnmx"),
    "hsame_lds": ((0,), (0,), "lds"),
    # operands that change from one mma.sync to the next (no operand reuse)
    "hmmad_1wg": ((0,), (), None),
    "hmmad_2wg": ((0, 1), (), None),
    "hsamed_ffma": ((0,), (0,), "ffma"),
    "hsplit_fadd": ((0,), (1,), "fadd"),
    "hsplit_fmul": ((0,), (1,), "fmul"),
    # FFMA in one to three dependent chains beside another warp's mma.sync (run 8 asked the
    # same beside wgmma): does sparse FP32 work run under the HMMAs that dense FFMA waits for?
    "hsplit_ffma_c1": ((0,), (1,), "ffma_c1"),
    "hsplit_ffma_c2": ((0,), (1,), "ffma_c2"),
    "hsplit_ffma_c3": ((0,), (1,), "ffma_c3"),
}

ISSUE = """\
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
            for (int g = 0; g < @G@; ++g) {
@WGMMA@
            }
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
            // ptxas does not move instructions across a clock read: what follows stays after
            asm volatile("mov.u64 %0, %%clock64;" : "=l"(tm) :: "memory");"""
ALU_WORK = """\
#pragma unroll
            for (int e = 0; e < @E@ / @CHAINS@; ++e)
#pragma unroll
                for (int k = 0; k < @CHAINS@; ++k) @ALU@"""
ISSUE_FREE = ISSUE[: ISSUE.index("            // ptxas does not move")].rstrip("\n")
WAIT = '            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");'
HMMA_ISSUE = """\
#pragma unroll
            for (int h = 0; h < @H@ / 8; ++h)
#pragma unroll
                for (int k = 0; k < 8; ++k)
                    asm volatile(
                        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                        "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                        : "+f"(c[k][0]), "+f"(c[k][1]), "+f"(c[k][2]), "+f"(c[k][3])
                        : "r"(ab[0]), "r"(ab[1]), "r"(ab[2]), "r"(ab[3]),
                          "r"(ab[4]), "r"(ab[5]));"""
# the same with other A and B registers for each chain, so that consecutive mma.sync share
# no operand and ptxas marks none for the operand reuse cache (attention kernels' fragments
# change from one mma to the next)
HMMA_ISSUE_DISTINCT = HMMA_ISSUE.replace("ab[", "abk[k][")

# independent chains a warp runs (else 8)
CHAINS = {"ffma_c1": 1, "ffma_c2": 2, "ffma_c3": 3, "fmnmx_c1": 1, "imad_c1": 1, "mufu_c1": 1}
ALU_STEP = {
    "mufu": 'asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(x[k]) : "f"(-x[k]));',
    "ffma": 'asm volatile("fma.rn.f32 %0, %0, %1, %2;" : "+f"(x[k]) : "f"(0.9999f), "f"(1e-4f));',
    "fmnmx": 'asm volatile("max.f32 %0, %0, %1;" : "+f"(x[k]) : "f"(1e-7f));',
    "fadd": 'asm volatile("add.rn.f32 %0, %0, %1;" : "+f"(x[k]) : "f"(1e-7f));',
    "fmul": 'asm volatile("mul.rn.f32 %0, %0, %1;" : "+f"(x[k]) : "f"(0.99999f));',
    "imad": 'asm volatile("mad.lo.s32 %0, %0, %1, %2;" : "+r"(y[k]) : "r"(ya), "r"(yb));',
    "f2fp": (
        'asm volatile("{ .reg .f32 t; mov.b32 t, %0; cvt.rn.bf16x2.f32 %0, t, %1; }" '
        ': "+r"(y[k]) : "f"(0.5f));'
    ),
    # conflict-free: lane t reads 16 B at row t of region k (512 B apart); volatile, so
    # that ptxas keeps every load of the same address
    "lds": (
        'asm volatile("ld.volatile.shared.v4.b32 {%0,%1,%2,%3}, [%4];" '
        ': "=r"(z[k][0]), "=r"(z[k][1]), "=r"(z[k][2]), "=r"(z[k][3]) : "r"(zb + 512u * k));'
    ),
    "shfl": 'asm volatile("shfl.sync.bfly.b32 %0, %0, 1, 0x1f, 0xffffffff;" : "+r"(y[k]));',
    "soft": (
        'asm volatile("{ .reg .f32 t; max.f32 %0, %0, %1; fma.rn.f32 t, %0, %2, %3; '
        'ex2.approx.ftz.f32 t, t; add.rn.f32 %0, %0, t; }" '
        ': "+f"(x[k]) : "f"(1e-7f), "f"(0.9999f), "f"(-8.0f));'
    ),
}
ALU_STEP["soft_nomax"] = (
    'asm volatile("{ .reg .f32 t; fma.rn.f32 t, %0, %1, %2; ex2.approx.ftz.f32 t, t; '
    'add.rn.f32 %0, %0, t; }" : "+f"(x[k]) : "f"(0.9999f), "f"(-8.0f));'
)
ALU_STEP["soft_noadd"] = (
    'asm volatile("{ .reg .f32 t; max.f32 %0, %0, %1; fma.rn.f32 t, %0, %2, %3; '
    'ex2.approx.ftz.f32 %0, t; }" : "+f"(x[k]) : "f"(1e-7f), "f"(-0.9999f), "f"(0.001f));'
)
ALU_STEP["exp"] = (
    'asm volatile("{ .reg .f32 t; fma.rn.f32 t, %0, %1, %2; ex2.approx.ftz.f32 %0, t; }" '
    ': "+f"(x[k]) : "f"(-0.9999f), "f"(0.001f));'
)
ALU_STEP["ex2_add"] = (
    'asm volatile("{ .reg .f32 t; ex2.approx.ftz.f32 t, %1; add.rn.f32 %0, %0, t; }" '
    ': "+f"(x[k]) : "f"(-x[k]));'
)
ALU_STEP["soft_ind"] = (  # the exponent reads the running max, so ptxas cannot hoist it
    'asm volatile("{ .reg .f32 t; max.f32 %1, %1, %0; fma.rn.f32 t, %1, %3, %0; '
    'ex2.approx.ftz.f32 t, t; add.rn.f32 %2, %2, t; }" '
    ': "+f"(x[k]), "+f"(c[k][0]), "+f"(c[k][3]) : "f"(-0.9999f));'
)
# MUFU.EX2 beside independent FFMA, FMNMX or FADD (no dependency between them): does
# interleaving other instructions cost the exponentials' rate, or only depending on them?
ALU_STEP["ex2_ind_ffma"] = (
    'asm volatile("{ ex2.approx.ftz.f32 %0, %2; fma.rn.f32 %1, %1, %3, %4; }" '
    ': "+f"(x[k]), "+f"(c[k][0]) : "f"(-x[k]), "f"(0.9999f), "f"(1e-4f));'
)
ALU_STEP["ex2_ind_fmnmx"] = (
    'asm volatile("{ ex2.approx.ftz.f32 %0, %2; max.f32 %1, %1, %3; }" '
    ': "+f"(x[k]), "+f"(c[k][0]) : "f"(-x[k]), "f"(1e-7f));'
)
ALU_STEP["ex2_ind_three"] = (
    'asm volatile("{ ex2.approx.ftz.f32 %0, %3; fma.rn.f32 %1, %1, %4, %5; '
    'max.f32 %2, %2, %6; }" : "+f"(x[k]), "+f"(c[k][0]), "+f"(c[k][3]) '
    ': "f"(-x[k]), "f"(0.9999f), "f"(1e-4f), "f"(1e-7f));'
)
# an exponential whose source the next instruction overwrites (x = x * a + b after ex2(x)):
# where ptxas keeps x in one register, the FFMA waits on the MUFU's read barrier, so one
# chain times that barrier's release with the XU mostly idle (run 15)
ALU_STEP["ex2_war"] = (
    'asm volatile("{ .reg .f32 t; ex2.approx.ftz.f32 t, %0; fma.rn.f32 %0, %0, %2, %3; '
    'add.rn.f32 %1, %1, t; }" : "+f"(x[k]), "+f"(c[k][0]) : "f"(0.9999f), "f"(1e-4f));'
)
# and with a second FFMA on x, so that one chain's step (the read barrier, then two FFMA)
# takes longer than the XU needs for its exponential: the barrier's release at low load
ALU_STEP["ex2_war2"] = (
    'asm volatile("{ .reg .f32 t; ex2.approx.ftz.f32 t, %0; fma.rn.f32 %0, %0, %2, %3; '
    'fma.rn.f32 %0, %0, %2, %3; add.rn.f32 %1, %1, t; }" '
    ': "+f"(x[k]), "+f"(c[k][0]) : "f"(0.9999f), "f"(1e-4f));'
)
for _w, _cs in (("ex2_war", (1, 2, 4, 8)), ("ex2_war2", (1, 2))):
    for _c in _cs:
        _m = f"{_w}_n{_c}"
        ALU_STEP[_m], CHAINS[_m], E[_m], SASS[_m] = ALU_STEP[_w], _c, 128, "MUFU.EX2"
        KERNELS[f"{_m}_1wg"] = ((), (1,), _m)
for _m in ("ex2_ind_ffma", "ex2_ind_fmnmx", "ex2_ind_three"):
    E[_m], SASS[_m] = 128, "MUFU.EX2"
    KERNELS[f"{_m}_1wg"] = ((), (1,), _m)
# the same mixes in 1, 2 and 4 chains: a chain's latency (1) against the pipes' rate (8)
MIXES = ("soft", "soft_nomax", "soft_noadd", "exp", "ex2_add", "mufu")
for _m in MIXES:
    for _c in (1, 2, 4):
        ALU_STEP[f"{_m}_n{_c}"] = ALU_STEP[_m]
        CHAINS[f"{_m}_n{_c}"] = _c
        E[f"{_m}_n{_c}"] = E[_m]
        SASS[f"{_m}_n{_c}"] = "MUFU.EX2"
        KERNELS[f"{_m}_n{_c}_1wg"] = ((), (1,), f"{_m}_n{_c}")
# run 17: two warpgroups each doing both parts, as a warp-specialized forward's consumers do
# without softmax overlap (wgmma, wait, softmax), at the parts' lengths of its step: G wgmma
# and E softmax steps of 300 (G = 4) or 600 (G = 8) cycles each alone; with one warpgroup
# doing both (the parts' sum), and the softmax alone
for _g, _e in ((4, 32), (8, 64)):
    _m = f"soft_e{_e}"
    ALU_STEP[_m], E[_m], SASS[_m] = ALU_STEP["soft"], _e, "MUFU.EX2"
    KERNELS[f"{_m}_1wg"] = ((), (1,), _m)
    KERNELS[f"same_soft_g{_g}"] = ((0,), (0,), _m, _g)
    KERNELS[f"both_soft_g{_g}"] = ((0, 1), (0, 1), _m, _g)
KERNELS["mma_1wg_g8"] = ((0,), (), None, 8)
# power.py's dense wgmma on operands that change from one wgmma to the next (A at one of two
# 2 KiB tiles, B at one of four 4 KiB tiles of the random shared data, as an attention loop's
# fresh K and V tiles are), where mma_2wg reads the same A and B every time
KERNELS["mma_2wg_fresh"] = ((0, 1), (), None)
FRESH_DESCRIPTORS = '"l"(descA + (u64)((g & 1) * 128)), "l"(descB + (u64)((g & 3) * 256))'
ALU_STEP["ffma_c1"] = ALU_STEP["ffma_c2"] = ALU_STEP["ffma_c3"] = ALU_STEP["ffma"]
ALU_STEP["fmnmx_c1"], ALU_STEP["imad_c1"] = ALU_STEP["fmnmx"], ALU_STEP["imad"]
ALU_STEP["mufu_c1"] = ALU_STEP["mufu"]

KERNEL = r"""
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ u32 saddr(const void* p) {
    return (u32)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ u32 hash(u32 x) {
    x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
    return x;
}

extern "C" __global__ void __launch_bounds__(@THREADS@, 1)
    @NAME@(u64* cyc, float* sink, int flag, u32 seed) {
    // A (64x16 bf16) at 0, B (128x16) at 4 KiB; no swizzle, K-major core matrices of
    // 8 rows x 16 B; leading byte offset 128, stride byte offset 256 (isa.py's wgmma layout)
    __shared__ __align__(1024) u16 wsm[10240];
    const u32 tid = threadIdx.x;
    const int warp = tid >> 5, wg = warp >> 2;
    for (u32 i = tid; i < 10240u; i += blockDim.x)
        wsm[i] = (u16)((hash(i ^ seed) & 0x807fu) | 0x3f00u);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    const u32 sb_ = saddr(wsm);
    const u64 dbits_ = ((u64)(128u >> 4) << 16) | ((u64)(256u >> 4) << 32);
    const u64 descA = (u64)((sb_ & 0x3FFFFu) >> 4) | dbits_;
    const u64 descB = (u64)(((sb_ + 4096u) & 0x3FFFFu) >> 4) | dbits_;
    const bool mma = (@MMA_MASK@ >> wg) & 1, alu = (@ALU_MASK@ >> wg) & 1;
    float d[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) d[i] = 0.f;
    float x[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) x[k] = (float)((tid * 8 + k) & 255) * (1.f / 256.f);
    float c[8][4];
#pragma unroll
    for (int k = 0; k < 8; ++k) c[k][0] = c[k][1] = c[k][2] = c[k][3] = 0.f;
    u32 ab[6];
#pragma unroll
    for (int k = 0; k < 6; ++k) ab[k] = (hash(seed ^ (tid * 6 + k)) & 0x807f807fu) | 0x3f003f00u;
    u32 abk[8][6];
#pragma unroll
    for (int k = 0; k < 48; ++k)
        abk[k / 6][k % 6] = (hash(seed ^ (tid * 48 + k + 7)) & 0x807f807fu) | 0x3f003f00u;
@RS_DECL@    u32 z[8][4];
    const u32 zb = saddr(wsm) + 16u * (tid & 31u);
#pragma unroll
    for (int k = 0; k < 8; ++k) z[k][0] = z[k][1] = z[k][2] = z[k][3] = 0u;
    u32 y[8];
    const u32 ya = 2654435761u ^ seed, yb = seed * 3u;
    (void)ya, (void)yb;
#pragma unroll
    for (int k = 0; k < 8; ++k) y[k] = hash(tid * 8 + k);
    __syncthreads();
    u64 t0, t1, tm = 0;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t0) :: "memory");
    // one loop per role, so that each is straight code: ptxas serializes wgmma (a wait after
    // each) when a branch separates the issue from the wait
    if (mma && alu) {
#pragma unroll 1
        for (int it = 0; it < @ITERS@; ++it) {
            @ISSUE@
            @ALU_WORK@
            @WAIT@
        }
    } else if (mma) {
#pragma unroll 1
        for (int it = 0; it < @ITERS@; ++it) {
            @ISSUE@
            @WAIT@
        }
    } else if (alu) {
#pragma unroll 1
        for (int it = 0; it < @ITERS@; ++it) {
            @ALU_WORK@
        }
    }
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t1) :: "memory");
    if ((tid & 31) == 0) {
        cyc[2 * (blockIdx.x * @WARPS@ + warp)] = t0;
        cyc[2 * (blockIdx.x * @WARPS@ + warp) + 1] = t1;
    }
#pragma unroll
    for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < 64; ++i) acc += d[i];
#pragma unroll
    for (int k = 0; k < 8; ++k)
        acc += x[k] + (float)((y[k] ^ z[k][0] ^ z[k][1] ^ z[k][2] ^ z[k][3]) & 1023u)
               + c[k][0] + c[k][3] + (float)(abk[k][0] & 1u)@RS_SINK@;
    if (flag) sink[blockIdx.x * blockDim.x + tid] = acc + (float)tm;
}
"""


def _mask(wgs) -> str:
    return str(sum(1 << w for w in wgs))


def _wgmma_rs_step(n: int = 128) -> str:
    """One wgmma m64nNk16 with A from registers (fragment ``ra[g & 7]``), B in shared memory."""
    acc = n // 2
    regs = ", ".join(f"%{i}" for i in range(acc))
    outs = ",\n                      ".join(
        ", ".join(f'"+f"(d[{j}])' for j in range(i, min(acc, i + 8))) for i in range(0, acc, 8)
    )
    a = ", ".join(f"%{acc + j}" for j in range(4))
    return (
        "                asm volatile(\n"
        '                    "{\\n.reg .pred p;\\n"\n'
        f'                    "setp.ne.b32 p, %{acc + 5}, 0;\\n"\n'
        f'                    "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 "\n'
        f'                    "{{{regs}}}, {{{a}}}, "\n'
        f'                    "%{acc + 4}, p, 1, 1, 0;\\n}}\\n"\n'
        f"                    : {outs}\n"
        '                    : "r"(ra[g & 7][0]), "r"(ra[g & 7][1]), "r"(ra[g & 7][2]), '
        '"r"(ra[g & 7][3]), "l"(descB), "r"(1));\n'
    )


def sources(only=None) -> dict[str, str]:
    """Each kernel's CUDA source (``only``: those named)."""
    from isa import _wgmma_step

    wgmma = _wgmma_step(128).replace('"r"(sc)', '"r"(1)')
    fresh = wgmma.replace('"l"(descA), "l"(descB)', FRESH_DESCRIPTORS)
    out = {}
    for name, (mma, alu, kind, *g) in {**KERNELS, **HKERNELS, **RKERNELS}.items():
        if only and name not in only:
            continue
        hmma = name in HKERNELS
        issue = (
            (HMMA_ISSUE_DISTINCT if "mmad" in name or "samed" in name else HMMA_ISSUE)
            if hmma
            else ISSUE_FREE
            if name.startswith(("intra_", "rintra_"))
            else ISSUE
        )
        out[name] = (
            KERNEL.replace("@ISSUE@", issue)
            .replace("@ALU_WORK@", ALU_WORK).replace("@WAIT@", "" if hmma else WAIT)
            .replace("@H@", str(H)).replace("@NAME@", name)
            .replace("@THREADS@", str(threads(mma, alu)))
            .replace("@WARPS@", str(threads(mma, alu) // 32)).replace("@ITERS@", str(ITERS))
            .replace("@G@", str(g[0] if g else G)).replace("@E@", str(E.get(kind, 8)))
            .replace("@MMA_MASK@", _mask(mma)).replace("@ALU_MASK@", _mask(alu))
            .replace("@WGMMA@", _wgmma_rs_step() if name in RKERNELS
                     else fresh if name.endswith("_fresh") else wgmma)
            .replace("@RS_DECL@", RS_DECL if name in RKERNELS else "")
            .replace("@RS_SINK@", RS_SINK if name in RKERNELS else "")
            .replace("@ALU@", ALU_STEP.get(kind or "ffma"))
            .replace("@CHAINS@", str(CHAINS.get(kind, 8)))
        )  # fmt: skip
    return out


def build(only=None) -> dict[str, bytes]:
    from benchmarks import nvrtc

    return {name: nvrtc.compile_cubin(src, OPTIONS)[0] for name, src in sources(only).items()}


def check_sass(cubins: dict[str, bytes]) -> dict:
    """Per kernel, the timed region's count of HGMMA and of its alu kind's opcode, and (for
    the kernels whose busy warps all run one loop: not the split ones) that loop's warp
    program, which tests/test_issue_model.py replays against the measured times."""
    from mio import disassemble

    from flashio.simulator import sass, sass_paths

    out = {}
    for name, code in disassemble(cubins).items():
        clocks = [i for i, c in enumerate(code) if "SR_CLOCKLO" in c.operands]
        region = code[clocks[0] + 1 : clocks[-1] + 1] if len(clocks) >= 2 else []
        mma, alu, kind = {**KERNELS, **HKERNELS, **RKERNELS}[name][:3]
        out[name] = {
            "instructions": len(region),
            "hgmma": sum(c.opcode.startswith("HGMMA") for c in region),
            "alu": sum(c.opcode.startswith(SASS[kind]) for c in region) if kind else 0,
            "hmma": sum(c.opcode.startswith("HMMA") for c in region),
        }
        if not mma or not alu or mma == alu:
            marker = ("HMMA" if name in HKERNELS else "HGMMA") if mma else SASS[kind]
            lo, hi = sass_paths.main_loop(code, marker)
            prog = sass.WarpProgram.from_instructions(name, sass_paths.straight_path(code, lo, hi))
            out[name]["loop"] = prog.to_json()
    return out


def run(out_dir: Path, only=None) -> dict:
    import cupy
    import numpy as np
    from isa import nvidia_smi, provenance

    prov = provenance()
    census = check_sass(build(only))
    sms = cupy.cuda.runtime.getDeviceProperties(0)["multiProcessorCount"]
    kernels = {**KERNELS, **HKERNELS, **RKERNELS}
    cyc = cupy.zeros(2 * sms * MAX_THREADS // 32, cupy.uint64)
    sink = cupy.zeros(sms * MAX_THREADS, cupy.float32)
    rows, results = [], {}
    for name, src in sources(only).items():
        fn = cupy.RawModule(code=src, options=OPTIONS).get_function(name)
        n_threads = threads(*kernels[name][:2])
        warps = n_threads // 32
        per_launch, per_wg = [], []
        for launch in range(LAUNCHES):
            fn((sms,), (n_threads,), (cyc, sink, cupy.int32(0), cupy.uint32(launch + 1)))
            c = cyc.get()[: 2 * sms * warps].reshape(sms, warps, 2).astype("int64")
            per_cta = (c[:, :, 1].max(axis=1) - c[:, :, 0].min(axis=1)) / ITERS
            per_launch.append([float(v) for v in per_cta])
            # each warpgroup's own span: which role the other slows (the CTA's time is the
            # slower role's; the roles share no barrier in the loop)
            wgs = c.reshape(sms, warps // 4, 4, 2)
            per_wg.append((wgs[..., 1].max(axis=2) - wgs[..., 0].min(axis=2)) / ITERS)
        rows.append(
            {
                "kernel": name,
                "cycles_per_iter": per_launch,
                "warpgroup_cycles_per_iter": [w.tolist() for w in per_wg],
            }
        )
        flat = [v for launch in per_launch[1:] for v in launch]  # the first warms up
        wg_flat = np.concatenate(per_wg[1:])
        results[name] = {"median_cycles_per_iter": statistics.median(flat),
                         "min": min(flat), "max": max(flat),
                         "warpgroup_median_cycles_per_iter":
                             [float(v) for v in np.median(wg_flat, axis=0)]}  # fmt: skip
        print(name, results[name], flush=True)
    prov["nvidia_smi_after"] = nvidia_smi()
    doc = {
        "provenance": prov,
        "config": {"iters": ITERS, "launches": LAUNCHES, "g": G, "e": E, "threads": THREADS,
                   "threads_third_warpgroup": MAX_THREADS,
                   "kernels": {k: [list(v[0]), list(v[1]), v[2], v[3] if len(v) > 3 else G]
                               for k, v in KERNELS.items()},
                   "h": H, "hmma_kernels": {k: [list(v[0]), list(v[1]), v[2]]
                                            for k, v in HKERNELS.items()},
                   "rs_kernels": {k: [list(v[0]), list(v[1]), v[2]] for k, v in RKERNELS.items()},
                   "options": OPTIONS},
        "sass": census,
        "rows": rows,
        "results": results,
    }  # fmt: skip
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "overlap.json").write_text(json.dumps(doc, indent=1))
    return doc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--out", type=Path, help="run on the GPU; write OUT/overlap.json")
    g.add_argument("--sass", type=Path, help="compile only; write SASS/overlap_sass.json")
    g.add_argument(
        "--fit", type=Path, metavar="DIR",
        help="fit the replay's interference rates to DIR/overlap.json and overlap_sass.json",
    )  # fmt: skip
    ap.add_argument("--only", nargs="+", metavar="KERNEL", help="with --out: only these kernels")
    args = ap.parse_args(argv)
    if args.fit:
        import dataclasses

        from flashio import simulator
        from flashio.simulator.issue import issue_model

        doc = load_runs(args.fit)
        sass_doc = json.loads((args.fit / "overlap_sass.json").read_text())
        base = dataclasses.replace(issue_model(simulator.load_gpu("h200-measured")),
                                   tensor_overlap=())  # fmt: skip
        rates = fit_all(args.fit, base)
        print(json.dumps(rates, indent=1))
        programs = programs_of(sass_doc)
        fitted = dataclasses.replace(base, tensor_overlap=rates)
        for name in CHECKS:
            meas = doc["results"][name]["median_cycles_per_iter"]
            got = replayed(name, doc, programs, fitted)
            print(f"{name:12s} measured {meas:7.1f}  replayed {got:7.1f}  {got / meas - 1:+.1%}")
        return 0
    if args.sass:
        census = check_sass(build())
        args.sass.mkdir(parents=True, exist_ok=True)
        (args.sass / "overlap_sass.json").write_text(json.dumps(census, separators=(",", ":")))
        for k, v in census.items():
            print(k, {f: x for f, x in v.items() if f != "loop"})
        return 0
    run(args.out, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
