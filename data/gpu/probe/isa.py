"""Per-instruction latency and throughput of the SASS classes FlashAttention kernels execute.

Microbenchmarks of the H200 (sm_90a, 132 SMs, 4 SMSPs per SM) for the warp-level replay model:
for each instruction class, written in PTX and checked in the machine code to become the SASS
opcode named below,

latency_cycles
    cycles from the issue of an instruction to the issue of a dependent one: one warp (one
    warpgroup for wgmma) runs a dependent chain of U instructions per loop iteration, timed with
    %clock64 around the loop; the median over repetitions of cycles per iteration, at two chain
    lengths U_LO and U_HI, and the slope between them (which removes the loop overhead):
    (cycles(U_HI) - cycles(U_LO)) / (n(U_HI) - n(U_LO)), n the count of the target opcode in
    the loop's machine code (cuobjdump), or U where cuobjdump is not found;
issue_cycles_per_smsp
    reciprocal throughput: cycles per warp-instruction per SMSP with many warps (1 to 16 per
    SMSP, as registers allow) each running NCH = 4 or 8 independent chains; every configuration
    is recorded raw, and the saturated value is the smallest over the configurations whose
    CTAs all ran at once. Per-SM figures (cycles per warp-instruction per SM, thread ops and
    FLOP per cycle per SM) come with it.

Classes (PTX -> SASS): mma.sync m16n8k16 bf16 and f16 (HMMA.16816.F32[.BF16]); wgmma m64nNk16
bf16 SS, N = 64, 128, 256 (HGMMA; 1 to 4 warpgroups per SM; latency = issue -> wait_group 0);
ex2.approx.ftz (MUFU.EX2); fma/add/mul/max.f32 (FFMA, FADD, FMUL, FMNMX); mad.lo.s32 (IMAD);
add (IADD3); lop3 (LOP3.LUT); shfl.sync.bfly (SHFL.BFLY); ldmatrix x4 and x4.trans (LDSM.16.M88.4,
LDSM.16.MT88.4); ld/st.shared.v4 (LDS.128, STS.128; conflict-free); cvt.rn.bf16x2.f32
(F2FP.BF16.F32.PACK_AB); bar.sync 0 with 4, 8, 12 warps per CTA (cycles per barrier, all warps
arriving together); cp.async.cg 16 B from an L2-resident buffer (LDGSTS: issue -> wait round
trip, and sustained issue rate and bytes per cycle per SM).

Shared-memory latency chains are pointer chases (each load returns its own address), checked
on the device by one load per chain before any chain runs. STS.128 latency is a store followed
by a load of the same address, less the LDS.128 latency. Every chain's result feeds a global
store guarded by a runtime flag (never set), so the compiler keeps the chains.

The SM clock of each test is recorded as clock64 cycles / CUDA-event seconds (kernel time,
launch included) and as clock64 / %globaltimer inside the timed region. GPU clocks are never
changed; nvidia-smi is read before and after.

Modes
-----
time (default)
    NVRTC (--gpu-architecture=sm_90a) builds one cubin per class; CuPy RawModule loads it; the
    loop opcode census is taken from that cubin with cuobjdump when found. Writes isa.json
    (provenance, build report, census, raw rows, per-class results) to --out after each
    class, and prints one summary line per class; sized to finish in under 90 s.
sass
    Builds every module (NVRTC when CuPy is importable, else nvcc; --compiler picks) and writes
    isa_sass.txt (each probe kernel's innermost loop, disassembled, and its opcode census) and
    isa_sass.json (census, registers, stack, spills, ptxas warnings) to --out.
source
    Writes each module's CUDA source, defines included, to --out/isa_src/NAME.cu, and
    build.sh: nvcc -cubin -gencode=arch=compute_90a,code=sm_90a for each, for checking the
    machine code with cuobjdump without a GPU.

    python3 data/gpu/probe/isa.py --out DIR [--only ffma,hmma_bf16]
    python3 data/gpu/probe/isa.py --mode sass --out DIR [--compiler nvcc]
    python3 data/gpu/probe/isa.py --mode source --out DIR
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

SMS = 132
SMSP_PER_SM = 4
ARCH = "sm_90a"
NVRTC_OPTIONS = ("-std=c++17", f"--gpu-architecture={ARCH}", "--ptxas-options=-v")
NVCC_ARCH = "-gencode=arch=compute_90a,code=sm_90a"
MAX_WARPS_PER_SM = 64
REGS_PER_SM = 65536
SMEM_PER_SM = 228 * 1024
L2_REGION = 8 << 20  # cp.async source: an L2-resident 8 MiB buffer
PA, PB, PI, PJ = 0.99999994, 1.0e-7, 0x9E3779B1, 0x7F4A7C15  # runtime operands of the chains

# ---------------------------------------------------------------------------------------------
# CUDA source
# ---------------------------------------------------------------------------------------------

COMMON = r"""
#pragma nv_diag_suppress 177
#pragma nv_diag_suppress 550
typedef unsigned int u32;
typedef unsigned short u16;
typedef long long i64;
typedef unsigned long long u64;

__device__ __forceinline__ i64 clk() {
    i64 t;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)::"memory");
    return t;
}
__device__ __forceinline__ i64 gtime() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
    return (i64)t;
}
__device__ __forceinline__ u32 smid() {
    u32 s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}
__device__ __forceinline__ u32 hash(u32 x) {
    x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
    return x;
}
__device__ __forceinline__ float u2f(u32 u) {
    float f;
    asm("mov.b32 %0, %1;" : "=f"(f) : "r"(u));
    return f;
}
__device__ __forceinline__ u32 f2u(float f) {
    u32 u;
    asm("mov.b32 %0, %1;" : "=r"(u) : "f"(f));
    return u;
}
__device__ __forceinline__ u32 saddr(const void* p) { return (u32)__cvta_generic_to_shared(p); }
// two bf16 (f16) values of magnitude in [0.5, 1), random sign and mantissa
__device__ __forceinline__ u32 rnd_bf16x2(u32 s) { return (hash(s) & 0x807f807fU) | 0x3f003f00U; }
__device__ __forceinline__ u32 rnd_f16x2(u32 s) { return (hash(s) & 0x83ff83ffU) | 0x38003800U; }

// every kernel takes the same arguments; each uses the ones it needs
#define SIG i64* __restrict__ rec, i64* __restrict__ cyc, u32* __restrict__ out, \
    const char* __restrict__ gsrc, i64 gmask, int iters, int reps, u32 seed, float pa, \
    float pb, u32 pi, u32 pj, int flag

// per CTA: clock64 and globaltimer at the start and end of the timed region, and the SM
#define REC_START() \
    __syncthreads(); \
    const i64 rc0_ = clk(); \
    const i64 rg0_ = gtime();
#define REC_END() \
    __syncthreads(); \
    { \
        const i64 rc1_ = clk(); \
        const i64 rg1_ = gtime(); \
        if (threadIdx.x == 0) { \
            i64* r_ = rec + 8 * blockIdx.x; \
            r_[0] = rc0_; r_[1] = rc1_; r_[2] = rg0_; r_[3] = rg1_; r_[4] = smid(); \
        } \
    }
#define SINK(h) \
    if (flag) out[blockIdx.x * blockDim.x + threadIdx.x] = (h);
"""

LAT_KERNEL = r"""
// latency: one chain of @U@ dependent instructions per iteration, cycles per repetition in cyc
extern "C" __global__ void __launch_bounds__(@LB@) @NAME@(SIG) {
    const u32 tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    (void)lane; (void)warp;
    constexpr int NCH = 1;
@PRE@
@DECL@
    REC_START();
#pragma unroll 1
    for (int r = 0; r < reps; ++r) {
        const i64 t0 = clk();
#pragma unroll 1
        for (int it = 0; it < iters; ++it) {
@ITER_PRE@
#pragma unroll
            for (int s = 0; s < @U@; ++s) {
                constexpr int k = 0;
@STEP@
            }
@ITER_POST@
        }
        const i64 t1 = clk();
        if (tid == 0) cyc[r] = t1 - t0;
    }
    REC_END();
@SINK@
    SINK(h_);
}
"""

TP_KERNEL = r"""
// throughput: @NCH@ independent chains, @UT@ steps of each per iteration
extern "C" __global__ void __launch_bounds__(@LB@) @NAME@(SIG) {
    const u32 tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    (void)lane; (void)warp;
    constexpr int NCH = @NCH@;
@PRE@
@DECL@
    REC_START();
#pragma unroll 1
    for (int it = 0; it < iters; ++it) {
@ITER_PRE@
#pragma unroll
        for (int s = 0; s < @UT@; ++s) {
#pragma unroll
            for (int k = 0; k < NCH; ++k) {
@STEP@
            }
        }
@ITER_POST@
    }
    REC_END();
@TP_POST@
@SINK@
    SINK(h_);
}
"""

CHECK_KERNEL = r"""
// one step of each of 8 chains from their start: a pointer chase must return its own address
extern "C" __global__ void @NAME@(SIG) {
    const u32 tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    (void)lane; (void)warp;
    constexpr int NCH = 8;
@PRE@
@DECL@
    __syncthreads();
    u32 x0_[NCH];
#pragma unroll
    for (int k = 0; k < NCH; ++k) x0_[k] = x[k];
#pragma unroll
    for (int k = 0; k < NCH; ++k) {
        constexpr int s = 0;
@STEP@
    }
#pragma unroll
    for (int k = 0; k < NCH; ++k) out[tid * NCH + k] = x[k] ^ x0_[k];
}
"""

# -- pieces shared by several classes ---------------------------------------------------------

FLOAT_DECL = r"""
    float x[NCH];
#pragma unroll
    for (int k = 0; k < NCH; ++k)
        x[k] = 0.25f + (float)(hash(seed ^ (tid * NCH + k)) & 255) * (1.f / 512.f);
"""
FLOAT_SINK = r"""
    u32 h_ = 0;
#pragma unroll
    for (int k = 0; k < NCH; ++k) h_ ^= f2u(x[k]);
"""
INT_DECL = r"""
    u32 x[NCH], ya[8], yb[8];
#pragma unroll
    for (int k = 0; k < NCH; ++k) x[k] = hash(seed + tid * NCH + k);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        ya[j] = hash(pi + j);
        yb[j] = hash(pj + 3 * j);
    }
"""
INT_SINK = r"""
    u32 h_ = 0;
#pragma unroll
    for (int k = 0; k < NCH; ++k) h_ ^= x[k];
"""
MMA_DECL = r"""
    const u32 a0 = @RND@(seed ^ tid), a1 = @RND@(seed ^ (tid + 1001u)),
              a2 = @RND@(seed ^ (tid + 2002u)), a3 = @RND@(seed ^ (tid + 3003u)),
              b0 = @RND@(seed ^ (tid + 4004u)), b1 = @RND@(seed ^ (tid + 5005u));
    float c[NCH][4];
#pragma unroll
    for (int k = 0; k < NCH; ++k) c[k][0] = c[k][1] = c[k][2] = c[k][3] = 0.f;
"""
MMA_STEP = r"""
                asm volatile(
                    "mma.sync.aligned.m16n8k16.row.col.f32.@T@.@T@.f32 {%0,%1,%2,%3}, "
                    "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                    : "+f"(c[k][0]), "+f"(c[k][1]), "+f"(c[k][2]), "+f"(c[k][3])
                    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
"""
MMA_SINK = r"""
    float acc_ = 0.f;
#pragma unroll
    for (int k = 0; k < NCH; ++k) acc_ += c[k][0] + c[k][1] + c[k][2] + c[k][3];
    const u32 h_ = f2u(acc_);
"""
# shared memory of the pointer chases: 8 regions of 512 B (one per chain); a thread of lane t
# starts at region + 16 t, the address of row t of the 4 matrices of an ldmatrix.x4 (and of
# thread t's 16 B of an LDS.128), and every load returns that same address
SMEM_CHASE_PRE = r"""
    __shared__ __align__(128) u32 sbuf[@WORDS@];
    {
        const u32 base = saddr(sbuf);
        for (u32 w = tid; w < @WORDS@u; w += blockDim.x) {
            const u32 reg = base + (w / 128u) * 512u, wi = w % 128u;
@FILL@
        }
    }
"""
FILL_LDS = "            sbuf[w] = reg + 16u * (wi / 4u);  // word 4t of a region: row t\n"
# ldmatrix (no .trans): thread t's first register is word t of matrix 0 (row t/4, word t%4)
FILL_LDSM = "            sbuf[w] = reg + 16u * (wi % 32u);\n"
# ldmatrix .trans: thread t's first register holds elements (row 2(t%4), col t/4) and
# (row 2(t%4)+1, col t/4) of matrix 0, low half first; one 32-bit word holds two elements of a row
FILL_LDSM_T = r"""
            // word wi of a region: elements e = 2 wi (low half) and 2 wi + 1 of the region;
            // element e of matrix m = e / 64 lies at row r = (e % 64) / 8, col c = e % 8
            u32 v = 0;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const u32 e = 2u * wi + h, r = (e % 64u) / 8u, c = e % 8u, t = 4u * c + r / 2u;
                const u32 a = reg + 16u * t;
                const u32 half = (r & 1u) ? (a >> 16) : (a & 0xffffu);
                v |= half << (16 * h);
            }
            sbuf[w] = v;
"""
CHASE_DECL = r"""
    u32 x[NCH];
#pragma unroll
    for (int k = 0; k < NCH; ++k) x[k] = saddr(sbuf) + 512u * k + 16u * lane;
"""


def _wgmma_step(n: int) -> str:
    acc = n // 2
    regs = ", ".join(f"%{i}" for i in range(acc))
    outs = ",\n                      ".join(
        ", ".join(f'"+f"(d[{j}])' for j in range(i, min(acc, i + 8))) for i in range(0, acc, 8)
    )
    return (
        "                asm volatile(\n"
        '                    "{\\n.reg .pred p;\\n"\n'
        f'                    "setp.ne.b32 p, %{acc + 2}, 0;\\n"\n'
        f'                    "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 "\n'
        f'                    "{{{regs}}}, "\n'
        f'                    "%{acc}, %{acc + 1}, p, 1, 1, 0, 0;\\n}}\\n"\n'
        f"                    : {outs}\n"
        '                    : "l"(descA), "l"(descB), "r"(sc));\n'
    )


WGMMA_PRE = r"""
    // A (64x16 bf16) at 0, B (up to 256x16) at 4 KiB; no swizzle, K-major core matrices of
    // 8 rows x 16 B; leading byte offset 128, stride byte offset 256. The values are random
    // bf16 in [-1, 1): only the timing matters, but no NaN or zero-skipping is invited.
    __shared__ __align__(1024) u16 wsm[10240];
    for (u32 i = tid; i < 10240u; i += blockDim.x)
        wsm[i] = (u16)((hash(i ^ seed) & 0x807fu) | 0x3f00u);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
"""
WGMMA_DECL = r"""
    const u32 sb_ = saddr(wsm);
    const u64 dbits_ = ((u64)(128u >> 4) << 16) | ((u64)(256u >> 4) << 32);
    const u64 descA = (u64)((sb_ & 0x3FFFFu) >> 4) | dbits_;
    const u64 descB = (u64)(((sb_ + 4096u) & 0x3FFFFu) >> 4) | dbits_;
    const int sc = 1;
    float d[@ACC@];
#pragma unroll
    for (int i = 0; i < @ACC@; ++i) d[i] = 0.f;
"""
WGMMA_SINK = r"""
#pragma unroll
    for (int i = 0; i < @ACC@; ++i) asm volatile("" : "+f"(d[i])::"memory");
    float acc_ = 0.f;
#pragma unroll
    for (int i = 0; i < @ACC@; ++i) acc_ += d[i];
    const u32 h_ = f2u(acc_);
"""
WG_FENCE = '        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");\n'
WG_COMMIT_WAIT = (
    '        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");\n'
    '        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");\n'
)

CP_ASYNC = (
    'asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst + @OFF@), '
    '"l"(src + @OFF@) : "memory");'
)
CP_COMMIT_WAIT = (
    'asm volatile("cp.async.commit_group;" ::: "memory"); '
    'asm volatile("cp.async.wait_group 0;" ::: "memory");'
)


# ---------------------------------------------------------------------------------------------
# Probe classes
# ---------------------------------------------------------------------------------------------


@dataclass
class Probe:
    name: str
    ptx: str
    sass: str  # the target opcode, a regular expression matched against whole SASS opcodes
    decl: str
    step: str
    sink: str
    pre: str = ""
    lat_step: str | None = None  # default: step
    iter_pre: str = ""
    iter_post: str = ""
    lat_iter_pre: str | None = None
    lat_iter_post: str | None = None
    tp_post: str = ""
    u_lo: int = 32
    u_hi: int = 64
    body: int = 64  # target instructions per throughput iteration (ut = body // nch)
    ut: int | None = None  # fixed steps per chain per throughput iteration
    nchs: tuple[int, ...] = (4, 8)
    tp_warps: tuple[int, ...] = (4, 8, 16, 32, 64)  # warps per SM
    work: int = 4096  # throughput iterations x warps per SMSP
    lat_iters: int = 64
    lat_reps: int = 16
    lat_threads: int = 32
    lat_lb: int = 32
    tp_lb: int = 1024
    flop: int = 0  # FLOP per warp-instruction of the target opcode
    check: bool = False  # pointer chase: run the check kernel first
    kind: str = "alu"
    extra: dict = field(default_factory=dict)

    def ut_for(self, nch: int) -> int:
        return self.ut if self.ut is not None else max(1, self.body // nch)


def _asm(s: str) -> str:
    return "                " + s.strip() + "\n"


def probes() -> list[Probe]:
    fl = dict(decl=FLOAT_DECL, sink=FLOAT_SINK)
    it = dict(decl=INT_DECL, sink=INT_SINK)
    P = Probe
    out = [
        P(
            "ffma",
            "fma.rn.f32",
            r"FFMA(\.FTZ)?",
            step=_asm(
                'asm volatile("fma.rn.f32 %0, %0, %1, %2;" : "+f"(x[k]) : "f"(pa), "f"(pb));'
            ),
            **fl,
        ),
        P(
            "fadd",
            "add.f32",
            r"FADD(\.FTZ)?",
            step=_asm('asm volatile("add.f32 %0, %0, %1;" : "+f"(x[k]) : "f"(pb));'),
            **fl,
        ),
        P(
            "fmul",
            "mul.f32",
            r"FMUL(\.FTZ)?",
            step=_asm('asm volatile("mul.f32 %0, %0, %1;" : "+f"(x[k]) : "f"(pa));'),
            **fl,
        ),
        P(
            "fmnmx",
            "max.f32",
            r"FMNMX(\.FTZ)?",
            step=_asm('asm volatile("max.f32 %0, %0, %1;" : "+f"(x[k]) : "f"(pb));'),
            **fl,
        ),
        P(
            "mufu_ex2",
            "ex2.approx.ftz.f32",
            r"MUFU\.EX2",
            work=2048,
            step=_asm(
                'asm volatile("{ .reg .f32 t; neg.f32 t, %0; ex2.approx.ftz.f32 %0, t; }" '
                ': "+f"(x[k]));'
            ),
            **fl,
        ),
        P(
            "imad",
            "mad.lo.s32",
            "IMAD",
            step=_asm(
                'asm volatile("mad.lo.s32 %0, %0, %1, %2;" : "+r"(x[k]) '
                ': "r"(ya[s & 7]), "r"(yb[s & 7]));'
            ),
            **it,
        ),
        # two PTX adds with distinct operands: ptxas makes one three-input IADD3 of them
        P(
            "iadd3",
            "add.s32 (x + a + b)",
            "IADD3",
            step=_asm(
                'asm volatile("{ .reg .u32 t; add.s32 t, %0, %1; add.s32 %0, t, %2; }" '
                ': "+r"(x[k]) : "r"(ya[s & 7]), "r"(yb[s & 7]));'
            ),
            **it,
        ),
        P(
            "lop3",
            "lop3.b32 (a & b) ^ c",
            r"LOP3\.LUT",
            step=_asm(
                'asm volatile("lop3.b32 %0, %0, %1, %2, 0x6a;" : "+r"(x[k]) '
                ': "r"(ya[s & 7]), "r"(yb[s & 7]));'
            ),
            **it,
        ),
        P(
            "shfl_bfly",
            "shfl.sync.bfly.b32",
            r"SHFL\.BFLY",
            work=2048,
            step=_asm(
                'asm volatile("shfl.sync.bfly.b32 %0, %0, 1, 0x1f, 0xffffffff;" : "+r"(x[k]));'
            ),
            **it,
        ),
        P(
            "f2fp_bf16",
            "cvt.rn.bf16x2.f32",
            r"F2FP\.BF16\.F32\.PACK_AB",
            decl=r"""
    u32 x[NCH];
#pragma unroll
    for (int k = 0; k < NCH; ++k) x[k] = f2u(0.25f + (float)(hash(seed ^ (tid * NCH + k)) & 255));
""",
            step=_asm(
                'asm volatile("{ .reg .f32 t; mov.b32 t, %0; cvt.rn.bf16x2.f32 %0, t, %1; }" '
                ': "+r"(x[k]) : "f"(pb));'
            ),
            sink=INT_SINK,
        ),
    ]
    for t, rnd, sass in (
        ("bf16", "rnd_bf16x2", r"HMMA\.16816\.F32\.BF16"),
        ("f16", "rnd_f16x2", r"HMMA\.16816\.F32"),
    ):
        out.append(
            P(
                f"hmma_{t}",
                f"mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32",
                sass,
                decl=MMA_DECL.replace("@RND@", rnd),
                step=MMA_STEP.replace("@T@", t),
                sink=MMA_SINK,
                u_lo=16,
                u_hi=32,
                body=32,
                work=2048,
                flop=4096,
                kind="mma",
            )
        )
    chase = dict(
        decl=CHASE_DECL,
        sink=INT_SINK,
        u_lo=16,
        u_hi=32,
        body=32,
        work=1024,
        check=True,
        kind="smem",
    )
    for name, ptx, sass, fill in (
        ("ldsm_x4", "ldmatrix.sync.aligned.m8n8.x4.shared.b16", r"LDSM\.16\.M88\.4", FILL_LDSM),
        (
            "ldsm_x4_trans",
            "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
            r"LDSM\.16\.MT88\.4",
            FILL_LDSM_T,
        ),
    ):
        out.append(
            P(
                name,
                ptx,
                sass,
                pre=SMEM_CHASE_PRE.replace("@WORDS@", "1024").replace("@FILL@", fill),
                step=_asm(
                    f'{{ u32 b_, c_, d_; asm volatile("{ptx} {{%0,%1,%2,%3}}, [%0];" '
                    ': "+r"(x[k]), "=r"(b_), "=r"(c_), "=r"(d_)); }'
                ),
                **chase,
            )
        )
    # volatile: ptxas narrows a v4 load whose other three words are unused to LDS.32
    lds_step = _asm(
        '{ u32 b_, c_, d_; asm volatile("ld.volatile.shared.v4.b32 {%0,%1,%2,%3}, '
        '[%0];" : "+r"(x[k]), "=r"(b_), "=r"(c_), "=r"(d_)); }'
    )
    out.append(
        P(
            "lds128",
            "ld.volatile.shared.v4.b32",
            r"LDS\.128",
            pre=SMEM_CHASE_PRE.replace("@WORDS@", "1024").replace("@FILL@", FILL_LDS),
            step=lds_step,
            **chase,
        )
    )
    out.append(
        P(
            "sts128",
            "st.volatile.shared.v4.b32",
            r"STS\.128",
            pre=SMEM_CHASE_PRE.replace("@WORDS@", "4096").replace("@FILL@", FILL_LDS),
            decl=CHASE_DECL
            + r"""
    u32 yb_[NCH], yc_[NCH], yd_[NCH];
#pragma unroll
    for (int k = 0; k < NCH; ++k) { yb_[k] = tid; yc_[k] = seed; yd_[k] = pi; }
    const u32 a0_ = saddr(sbuf) + 16u * lane;
    const u32 v0_ = hash(seed ^ tid), v1_ = v0_ + 1u, v2_ = v0_ + 2u, v3_ = v0_ + 3u;
""",
            # throughput: NCH x UT distinct conflict-free 512 B rows (16 KiB) per iteration
            step=_asm(
                'asm volatile("st.volatile.shared.v4.b32 [%0], {%1,%2,%3,%4};" :: '
                '"r"(a0_ + 512u * (s * NCH + k)), "r"(v0_), "r"(v1_), "r"(v2_), "r"(v3_) '
                ': "memory");'
            ),
            # latency: store to the chain's address, then load it back (a chase through memory)
            lat_step=_asm(
                'asm volatile("st.volatile.shared.v4.b32 [%0], {%0,%1,%2,%3};\\n\\t"'
                '"ld.volatile.shared.v4.b32 {%0,%1,%2,%3}, [%0];" : "+r"(x[k]), '
                '"+r"(yb_[k]), "+r"(yc_[k]), "+r"(yd_[k]) :: "memory");'
            ),
            sink=INT_SINK.replace("h_ ^= x[k];", "h_ ^= x[k] ^ yb_[k] ^ yc_[k] ^ yd_[k];"),
            **{k: v for k, v in chase.items() if k not in ("decl", "sink")},
        )
    )
    out.append(
        P(
            "bar_sync",
            "bar.sync 0",
            r"BAR\.SYNC.*",
            decl="    u32 x[NCH] = {tid};\n",
            step=_asm('asm volatile("bar.sync 0;" ::: "memory");'),
            sink=INT_SINK,
            u_lo=16,
            u_hi=32,
            nchs=(),
            lat_threads=128,
            lat_lb=1024,
            kind="bar",
            extra=dict(warps_per_cta=(4, 8, 12), grids=(1, SMS)),
        )
    )
    cp_pre = r"""
    __shared__ __align__(128) u32 sbuf[4096];
    const u32 gw = blockIdx.x * (blockDim.x >> 5) + warp;
    i64 goff = ((i64)(hash(gw + seed) & 0xffffu) * 512) & gmask;
    const u32 dst = saddr(sbuf) + (warp & 3u) * (NCH * 512u) + 16u * lane;
    i64 iss = 0;
"""
    out.append(
        P(
            "ldgsts",
            "cp.async.cg.shared.global 16 B (L2-resident source)",
            r"LDGSTS.*",
            decl=cp_pre + "    u32 x[NCH] = {tid};\n    const char* src = gsrc + 16 * lane;\n",
            # throughput: NCH copies (one per chain) issued back to back, then commit and wait
            step=_asm(CP_ASYNC.replace("@OFF@", "512u * k").replace("src +", "src + goff +")),
            iter_pre="        const i64 ta_ = clk();\n",
            iter_post=(
                "        const i64 tb_ = clk();\n        iss += tb_ - ta_;\n        "
                + CP_COMMIT_WAIT
                + "\n        goff = (goff + NCH * 512) & gmask;\n"
            ),
            tp_post="    if (lane == 0) cyc[gw] = iss;\n",
            # latency: issue one copy, commit, wait: U round trips per iteration
            lat_step=_asm(
                CP_ASYNC.replace("@OFF@", "512u * s").replace("src +", "src + goff +")
                + " "
                + CP_COMMIT_WAIT
            ),
            lat_iter_pre="",
            lat_iter_post="        goff = (goff + 1024) & gmask;\n",
            sink="    const u32 h_ = sbuf[tid] ^ (u32)iss ^ x[0];\n",
            u_lo=1,
            u_hi=2,
            ut=1,
            tp_warps=(4, 8, 16, 32),
            work=256,
            lat_iters=32,
            lat_reps=8,
            kind="ldgsts",
        )
    )
    for n in (64, 128, 256):
        acc = n // 2
        out.append(
            P(
                f"wgmma_n{n}",
                f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 (SS)",
                rf"HGMMA\.64x{n}x16\.F32\.BF16",
                pre=WGMMA_PRE,
                decl=WGMMA_DECL.replace("@ACC@", str(acc)),
                step=_wgmma_step(n),
                sink=WGMMA_SINK.replace("@ACC@", str(acc)),
                iter_pre=WG_FENCE,
                iter_post=WG_COMMIT_WAIT,
                lat_step=_wgmma_step(n) + WG_COMMIT_WAIT,
                lat_iter_pre=WG_FENCE,
                lat_iter_post="",
                u_lo=1,
                u_hi=2,
                nchs=(1,),
                ut=16 if n < 256 else 8,
                tp_warps=(4, 8, 12, 16) if n < 256 else (4, 8, 12),
                work={64: 256, 128: 128, 256: 128}[n],
                lat_iters=32,
                lat_reps=8,
                lat_threads=128,
                lat_lb=128,
                tp_lb=512 if n < 256 else 384,
                flop=2 * 64 * n * 16 // 4,
                kind="wgmma",
                extra=dict(n=n),
            )
        )
    return out


def _fill(tmpl: str, **kw) -> str:
    for k, v in kw.items():
        tmpl = tmpl.replace(f"@{k}@", str(v))
    assert "@" not in re.sub(r"\"[^\"]*\"", "", tmpl), tmpl[:2000]
    return tmpl


def kernel_names(p: Probe) -> list[str]:
    names = [f"{p.name}_lat_lo", f"{p.name}_lat_hi"]
    names += [f"{p.name}_tp{n}" for n in p.nchs]
    if p.check:
        names.append(f"{p.name}_check")
    return names


def module_source(p: Probe) -> str:
    """The CUDA source of one class's module: its defines, the common header, its kernels."""
    head = [
        f"// {p.name}: {p.ptx} -> SASS {p.sass}",
        "// built by data/gpu/probe/isa.py; standalone: "
        f"nvcc -cubin {NVCC_ARCH} -std=c++17 {p.name}.cu",
        f"#define U_LO {p.u_lo}",
        f"#define U_HI {p.u_hi}",
    ]
    head += [f"#define UT_NCH{n} {p.ut_for(n)}" for n in p.nchs]
    src = "\n".join(head) + "\n" + COMMON
    lstep = p.lat_step if p.lat_step is not None else p.step
    lpre = p.lat_iter_pre if p.lat_iter_pre is not None else p.iter_pre
    lpost = p.lat_iter_post if p.lat_iter_post is not None else p.iter_post
    for tag, u in (("lo", "U_LO"), ("hi", "U_HI")):
        src += _fill(
            LAT_KERNEL,
            NAME=f"{p.name}_lat_{tag}",
            LB=p.lat_lb,
            U=u,
            PRE=p.pre,
            DECL=p.decl,
            STEP=lstep,
            ITER_PRE=lpre,
            ITER_POST=lpost,
            SINK=p.sink,
        )
    for n in p.nchs:
        src += _fill(
            TP_KERNEL,
            NAME=f"{p.name}_tp{n}",
            LB=p.tp_lb,
            NCH=n,
            UT=f"UT_NCH{n}",
            PRE=p.pre,
            DECL=p.decl,
            STEP=p.step,
            ITER_PRE=p.iter_pre,
            ITER_POST=p.iter_post,
            TP_POST=p.tp_post,
            SINK=p.sink,
        )
    if p.check:
        src += _fill(
            CHECK_KERNEL,
            NAME=f"{p.name}_check",
            PRE=p.pre,
            DECL=p.decl,
            STEP=p.step if p.lat_step is None else lstep,
        )
    return src


def nominal_targets(p: Probe, kernel: str) -> int:
    """Target instructions per loop iteration the source asks for."""
    if kernel.endswith("_lat_lo"):
        return p.u_lo
    if kernel.endswith("_lat_hi"):
        return p.u_hi
    n = int(kernel.rsplit("_tp", 1)[1])
    return n * p.ut_for(n)


# ---------------------------------------------------------------------------------------------
# Building and machine code
# ---------------------------------------------------------------------------------------------


def find_tool(name: str) -> str | None:
    """A CUDA binary utility: PATH, $CUDA_HOME/bin, or a pip nvidia package."""
    p = shutil.which(name)
    if p:
        return p
    home = os.environ.get("CUDA_HOME")
    cands = [Path(home) / "bin" / name] if home else []
    for d in sys.path:
        for sub in ("nvidia/cu13/bin", "nvidia/cuda_cuobjdump/bin", "nvidia/cuda_nvcc/bin"):
            cands.append(Path(d) / sub / name)
    for c in cands:
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    return None


def parse_ptxas(log: str) -> dict:
    """Registers, stack and spills per function (benchmarks.ptxas), and the warnings, from a
    ptxas -v log."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from benchmarks.ptxas import parse_ptxas as per_function

    warnings = [ln.strip() for ln in log.splitlines() if "warning" in ln.lower()]
    return {"functions": per_function(log), "warnings": warnings}


def elf_complete(b: bytes) -> bytes:
    """CuPy's nvrtc.getCUBIN drops the image's last byte (as for PTX, whose last byte is its
    NUL); the driver loads the image anyway, but cuobjdump rejects it. Pad an ELF64 image with
    zeros to the end of its section and program header tables."""
    if len(b) < 64 or b[:4] != b"\x7fELF" or b[4] != 2:
        return b
    phoff, shoff = struct.unpack_from("<QQ", b, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", b, 0x36)
    end = max(phoff + phnum * phentsize, shoff + shnum * shentsize)
    return b + b"\0" * (end - len(b)) if end > len(b) else b


def build_nvrtc(p: Probe) -> dict:
    from cupy_backends.cuda.libs import nvrtc

    t0 = time.monotonic()
    prog = nvrtc.createProgram(module_source(p), f"{p.name}.cu", (), ())
    try:
        try:
            nvrtc.compileProgram(prog, list(NVRTC_OPTIONS))
        except Exception as e:
            raise RuntimeError(f"NVRTC: {e}\n{nvrtc.getProgramLog(prog)}") from e
        log = nvrtc.getProgramLog(prog)
        cubin = elf_complete(nvrtc.getCUBIN(prog))
    finally:
        nvrtc.destroyProgram(prog)
    return dict(
        cubin=cubin,
        log=log,
        seconds=time.monotonic() - t0,
        compiler="nvrtc",
        options=list(NVRTC_OPTIONS),
    )


def build_nvcc(p: Probe, tmp: Path) -> dict:
    t0 = time.monotonic()
    cu, cub = tmp / f"{p.name}.cu", tmp / f"{p.name}.cubin"
    cu.write_text(module_source(p))
    cmd = ["nvcc", "-cubin", NVCC_ARCH, "-std=c++17", "-Xptxas", "-v", "-o", str(cub), str(cu)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"nvcc failed:\n{r.stderr[-4000:]}")
    return dict(
        cubin=cub.read_bytes(),
        log=r.stderr,
        seconds=time.monotonic() - t0,
        compiler="nvcc",
        options=cmd[1:-3],
    )


def build_all(ps: list[Probe], compiler: str, tmp: Path) -> dict[str, dict]:
    def one(p):
        try:
            return p.name, (build_nvrtc(p) if compiler == "nvrtc" else build_nvcc(p, tmp))
        except Exception as e:
            return p.name, {"error": f"{type(e).__name__}: {e}"}

    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 4)) as ex:
        return dict(ex.map(one, ps))


INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Za-z0-9_.]*)([^;]*);")


def parse_sass(text: str) -> dict[str, list[tuple[int, str, str, str]]]:
    """cuobjdump -sass text -> {function: [(address, predicate, opcode, operands)]}."""
    funcs, cur = {}, None
    for line in text.splitlines():
        if m := re.match(r"\s*Function : (\S+)", line):
            cur = funcs.setdefault(m[1], [])
        elif cur is not None and (m := INSTR.search(line)):
            cur.append((int(m[1], 16), (m[2] or "").strip(), m[3], m[4].strip()))
    return funcs


def loop_of(instrs, target: str):
    """The innermost loop (a backward branch's range) that holds the target opcode: its
    instructions, or None. Without a loop holding the target, the innermost loop."""
    loops = []
    for addr, _, op, ops in instrs:
        if op.startswith("BRA") and (m := re.search(r"0x([0-9a-f]+)", ops)):
            tgt = int(m[1], 16)
            if tgt < addr:
                loops.append((tgt, addr))
    if not loops:
        return None
    rx = re.compile(target)
    bodies = [[i for i in instrs if lo <= i[0] <= hi] for lo, hi in loops]
    with_t = [b for b in bodies if any(rx.fullmatch(i[2]) for i in b)]
    return min(with_t or bodies, key=len)


def census_all(ps, built, cuobjdump, tmp) -> dict[str, dict]:
    def one(p):
        try:
            return p.name, census(built[p.name]["cubin"], p, cuobjdump, tmp)
        except Exception as e:
            return p.name, {"error": f"{type(e).__name__}: {e}"}

    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 4)) as ex:
        return dict(ex.map(one, ps))


def census(cubin: bytes, p: Probe, cuobjdump: str, tmp: Path) -> dict:
    """Per kernel: the innermost loop's opcode counts, its target count, and its text."""
    path = tmp / f"{p.name}.census.cubin"
    path.write_bytes(cubin)
    sass = subprocess.run(
        [cuobjdump, "-sass", str(path)], capture_output=True, text=True, check=True
    ).stdout
    res = subprocess.run(
        [cuobjdump, "-res-usage", str(path)], capture_output=True, text=True
    ).stdout
    usage, fn = {}, None
    for line in res.splitlines():
        if m := re.search(r"Function (\w+):", line):
            fn = m[1]
        elif fn and "REG:" in line:
            usage[fn] = {k: int(v) for k, v in re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", line)}
    funcs = parse_sass(sass)
    rx = re.compile(p.sass)
    out = {}
    for name in kernel_names(p):
        instrs = funcs.get(name, [])
        if name.endswith("_check"):
            out[name] = dict(
                resources=usage.get(name, {}),
                target_in_kernel=sum(1 for i in instrs if rx.fullmatch(i[2])),
            )
            continue
        body = loop_of(instrs, p.sass) or []
        # instructions predicated off (@!PT: ptxas's scoreboard padding) are counted apart
        ops = Counter(i[2] + (" (@!PT)" if i[1] == "@!PT" else "") for i in body)
        entry = dict(
            loop_opcodes=dict(sorted(ops.items())),
            loop_instructions=len(body),
            target_in_loop=sum(v for k, v in ops.items() if rx.fullmatch(k)),
            target_in_kernel=sum(1 for i in instrs if rx.fullmatch(i[2])),
            resources=usage.get(name, {}),
            loop_text="\n".join(
                f"/*{a:04x}*/ {(pr + ' ') if pr else ''}{op} {o};" for a, pr, op, o in body
            ),
        )
        if not name.endswith("_check"):
            entry["target_nominal"] = nominal_targets(p, name)
        out[name] = entry
    return out


# ---------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------


def command_line() -> str:
    """benchmarks._common's: the script repo-relative, the device's output folder as $OUT."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from benchmarks._common import command_line as common

    return common()


def nvidia_smi() -> str:
    try:
        return subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,"
                "clocks.mem,power.draw,power.limit,temperature.gpu",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"unavailable: {e}"


def provenance() -> dict:
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"]
    return {
        "gpu": name.decode() if isinstance(name, bytes) else name,
        "sm_count": props["multiProcessorCount"],
        "compute_capability": f"{props['major']}.{props['minor']}",
        "clock_rate_khz": props.get("clockRate"),
        "cuda_driver_version": cupy.cuda.runtime.driverGetVersion(),
        "cuda_runtime_version": cupy.cuda.runtime.runtimeGetVersion(),
        "nvrtc_version": list(cupy.cuda.nvrtc.getVersion()),
        "cupy": cupy.__version__,
        "python": sys.version.split()[0],
        "command": command_line(),
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "nvidia_smi_before": nvidia_smi(),
    }


class Runner:
    """Launches probe kernels and turns their clock records into numbers."""

    def __init__(self):
        import cupy
        import numpy as np

        self.cp, self.np = cupy, np
        self.rec = cupy.zeros(8 * 1024, cupy.int64)
        self.cyc = cupy.zeros(1 << 15, cupy.int64)
        self.out = cupy.zeros(1 << 20, cupy.uint32)
        self.gsrc = cupy.ones(L2_REGION // 4 + (1 << 16), cupy.uint32)  # + slack past the mask
        self.seed = 12345

    def args(self, iters, reps, flag=0):
        np = self.np
        return (
            self.rec,
            self.cyc,
            self.out,
            self.gsrc,
            np.int64(L2_REGION - 1),
            np.int32(iters),
            np.int32(reps),
            np.uint32(self.seed),
            np.float32(PA),
            np.float32(PB),
            np.uint32(PI),
            np.uint32(PJ),
            np.int32(flag),
        )

    def launch(self, fn, grid, block, iters, reps=1, launches=3, warmup=1, ncyc=0):
        """Event-timed launches; per launch the ms, the CTA records and cyc[:ncyc]."""
        cp = self.cp
        a = self.args(iters, reps)
        for _ in range(warmup):
            fn((grid,), (block,), a)
        cp.cuda.get_current_stream().synchronize()
        runs = []
        for _ in range(launches):
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record()
            fn((grid,), (block,), a)
            e1.record()
            e1.synchronize()
            runs.append(
                dict(
                    ms=cp.cuda.get_elapsed_time(e0, e1),
                    rec=self.rec[: 8 * grid].get().reshape(grid, 8),
                    cyc=self.cyc[:ncyc].get() if ncyc else None,
                )
            )
        return runs

    def summarize(self, runs):
        """Cycles of the timed region (median over launches of the median over SMs of the
        span from the first CTA's start to the last one's end on that SM), clocks, and
        whether all CTAs were resident together."""
        np = self.np
        spans, clk_ev, clk_gt, cores, per_sm = [], [], [], [], []
        for r in runs:
            rec = r["rec"]
            sm = rec[:, 4]
            s = [int(rec[sm == i, 1].max() - rec[sm == i, 0].min()) for i in np.unique(sm)]
            span = float(np.median(s))
            spans.append(span)
            clk_ev.append(span / (r["ms"] * 1e-3))
            dt = (rec[:, 3] - rec[:, 2]).astype(np.float64)
            ok = dt > 0
            clk_gt.append(
                float(np.median((rec[ok, 1] - rec[ok, 0]) / (dt[ok] * 1e-9))) if ok.any() else None
            )
            cores.append(bool(rec[:, 2].max() < rec[:, 3].min()))
            per_sm.append(int(np.bincount(sm.astype(np.int64)).max()))
        return dict(
            cycles=float(statistics.median(spans)),
            cycles_all=spans,
            event_ms=[r["ms"] for r in runs],
            clock_hz_event=float(statistics.median(clk_ev)),
            clock_hz_globaltimer=(
                float(statistics.median([c for c in clk_gt if c])) if any(clk_gt) else None
            ),
            coresident=all(cores),
            sms_used=len(np.unique(runs[-1]["rec"][:, 4])),
            max_ctas_per_sm=max(per_sm),
        )


def fits(fn, warps_per_sm, ctas_per_sm):
    """Whether the CTAs of a configuration can all be resident on one SM (registers, smem)."""
    regs = int(getattr(fn, "num_regs", 0) or 0)
    smem = int(getattr(fn, "shared_size_bytes", 0) or 0)
    regs_per_warp = -(-regs * 32 // 256) * 256
    ok_regs = regs_per_warp * warps_per_sm <= REGS_PER_SM
    ok_smem = (smem + 1024) * ctas_per_sm <= SMEM_PER_SM
    return ok_regs and ok_smem and warps_per_sm <= MAX_WARPS_PER_SM, regs, smem


def targets(cen, kernel, p):
    """Target instructions per loop iteration: the census of the cubin that ran, if taken."""
    c = (cen or {}).get(kernel)
    if c and c.get("target_in_loop"):
        return c["target_in_loop"], "census"
    return nominal_targets(p, kernel), "nominal"


def measure_latency(run, p, fns, cen, threads=None, grid=1):
    np = run.np
    threads = threads or p.lat_threads
    rows = {}
    for tag in ("lo", "hi"):
        k = f"{p.name}_lat_{tag}"
        runs = run.launch(fns[k], grid, threads, p.lat_iters, p.lat_reps, ncyc=p.lat_reps)
        per_iter = np.concatenate([r["cyc"] for r in runs]) / p.lat_iters
        n, src = targets(cen, k, p)
        rows[tag] = dict(
            kernel=k,
            chain=n,
            chain_count_from=src,
            iters=p.lat_iters,
            reps=p.lat_reps,
            cycles_per_iter_median=float(np.median(per_iter)),
            cycles_per_iter_min=float(per_iter.min()),
            cycles_per_iter_max=float(per_iter.max()),
            **{
                k2: v
                for k2, v in run.summarize(runs).items()
                if k2 in ("clock_hz_event", "clock_hz_globaltimer", "event_ms")
            },
        )
    lo, hi = rows["lo"], rows["hi"]
    d_cyc = hi["cycles_per_iter_median"] - lo["cycles_per_iter_median"]
    lat = d_cyc / (hi["chain"] - lo["chain"])
    return dict(
        threads=threads,
        grid=grid,
        lo=lo,
        hi=hi,
        latency_cycles=lat,
        cycles_per_instr_hi_raw=hi["cycles_per_iter_median"] / hi["chain"],
    )


def measure_throughput(run, p, fns, cen):
    rows = []
    for nch in p.nchs:
        k = f"{p.name}_tp{nch}"
        fn = fns[k]
        n_iter, src = targets(cen, k, p)
        for w in p.tp_warps:
            if p.kind == "wgmma":
                ctas_per_sm, threads = 1, 32 * w
            else:
                ctas_per_sm = max(1, w // 32)
                threads = 32 * w // ctas_per_sm
            ok, regs, smem = fits(fn, w, ctas_per_sm)
            row = dict(
                kernel=k,
                nch=nch,
                warps_per_sm=w,
                warps_per_smsp=w / SMSP_PER_SM,
                ctas_per_sm=ctas_per_sm,
                threads_per_cta=threads,
                registers=regs,
                static_smem=smem,
            )
            if not ok:
                rows.append(dict(row, skipped="does not fit on one SM (registers or smem)"))
                continue
            iters = max(8, round(p.work / (w / SMSP_PER_SM)))
            grid = SMS * ctas_per_sm
            ncyc = grid * threads // 32 if p.kind == "ldgsts" else 0
            runs = run.launch(fn, grid, threads, iters, ncyc=ncyc)
            s = run.summarize(runs)
            instr_sm = w * iters * n_iter  # warp-instructions of the target opcode per SM
            cyc = s["cycles"]
            row.update(
                iters=iters,
                target_per_iter=n_iter,
                target_count_from=src,
                warp_instrs_per_sm=instr_sm,
                **s,
                issue_cycles_per_smsp=cyc / (instr_sm / SMSP_PER_SM),
                cycles_per_warp_instr_per_sm=cyc / instr_sm,
                thread_ops_per_cycle_per_sm=32 * instr_sm / cyc,
            )
            if p.flop:
                row["flop_per_cycle_per_sm"] = p.flop * instr_sm / cyc
                row["flop_per_s_total"] = p.flop * instr_sm * SMS / (cyc / s["clock_hz_event"])
            if p.kind == "wgmma":
                row["cycles_per_wgmma_per_sm"] = cyc / (w / 4 * iters * n_iter)
            if p.kind == "ldgsts":
                iss = run.np.concatenate([r["cyc"] for r in runs]).astype(float)
                row["bytes_per_cycle_per_sm"] = 512 * instr_sm / cyc
                row["issue_only_cycles_per_instr_per_warp"] = float(
                    run.np.median(iss) / (iters * n_iter)
                )
            rows.append(row)
            print(
                f"  tp {k} warps/SM={w} nch={nch} iters={iters}: "
                f"{row['issue_cycles_per_smsp']:.3f} cyc/instr/SMSP, "
                f"{s['clock_hz_event'] / 1e6:.0f} MHz (event), coresident={s['coresident']}",
                flush=True,
            )
    return rows


def check_chase(run, p, fns):
    fn = fns[f"{p.name}_check"]
    run.out[:256].fill(0xFFFFFFFF)
    fn((1,), (32,), run.args(1, 1))
    run.cp.cuda.get_current_stream().synchronize()
    bad = int((run.out[:256].get() != 0).sum())
    return bad


def run_probe(run, p, fns, cen):
    res = dict(
        ptx=p.ptx,
        sass=p.sass,
        kind=p.kind,
        u_lo=p.u_lo,
        u_hi=p.u_hi,
        lat_iters=p.lat_iters,
        lat_reps=p.lat_reps,
    )
    if cen:
        res["census_matches_nominal"] = all(
            v.get("target_in_loop") == v["target_nominal"]
            for v in cen.values()
            if "target_nominal" in v
        )
    if p.check:
        bad = check_chase(run, p, fns)
        res["chase_check_mismatches"] = bad
        if bad:
            raise RuntimeError(f"{p.name}: {bad} of 256 chase loads did not return their address")
    if p.kind == "bar":
        res["latency"], res["by_warps"] = [], {}
        for wpc in p.extra["warps_per_cta"]:
            for grid in p.extra["grids"]:
                lat = measure_latency(run, p, fns, cen, threads=32 * wpc, grid=grid)
                lat["warps_per_cta"] = wpc
                res["latency"].append(lat)
                print(
                    f"  bar.sync warps={wpc} grid={grid}: {lat['latency_cycles']:.2f} cyc",
                    flush=True,
                )
                if grid == 1:
                    res["by_warps"][wpc] = dict(cycles_per_barrier=lat["latency_cycles"])
                else:
                    res["by_warps"][wpc]["cycles_per_barrier_all_sms"] = lat["latency_cycles"]
                    res["by_warps"][wpc]["issue_cycles_per_smsp"] = lat["latency_cycles"] / (
                        wpc / SMSP_PER_SM
                    )
        return res
    res["latency"] = measure_latency(run, p, fns, cen)
    res["latency_cycles"] = res["latency"]["latency_cycles"]
    print(
        f"  lat {p.name}: {res['latency_cycles']:.2f} cyc "
        f"({res['latency']['hi']['clock_hz_event'] / 1e6:.0f} MHz event)",
        flush=True,
    )
    tp = measure_throughput(run, p, fns, cen)
    res["throughput"] = tp
    good = [r for r in tp if "skipped" not in r and r["coresident"]]
    if good:
        best = min(good, key=lambda r: r["issue_cycles_per_smsp"])
        res["saturated"] = {
            k: best[k]
            for k in (
                "kernel",
                "nch",
                "warps_per_sm",
                "ctas_per_sm",
                "iters",
                "clock_hz_event",
                "clock_hz_globaltimer",
            )
            if k in best
        }
        res["issue_cycles_per_smsp"] = best["issue_cycles_per_smsp"]
        res["cycles_per_warp_instr_per_sm"] = best["cycles_per_warp_instr_per_sm"]
        res["thread_ops_per_cycle_per_sm"] = best["thread_ops_per_cycle_per_sm"]
        for k in (
            "flop_per_cycle_per_sm",
            "cycles_per_wgmma_per_sm",
            "bytes_per_cycle_per_sm",
            "issue_only_cycles_per_instr_per_warp",
        ):
            if k in best:
                res[k] = best[k]
    return res


def summary_line(name, r) -> str:
    if "error" in r:
        return f"{name:14s} ERROR {r['error'][:100]}"
    if r.get("kind") == "bar":
        parts = [
            f"{w} warps: {v['cycles_per_barrier']:.1f} cyc/barrier (1 CTA), "
            f"{v.get('cycles_per_barrier_all_sms', float('nan')):.1f} (132 CTAs)"
            for w, v in r["by_warps"].items()
        ]
        return f"{name:14s} " + "; ".join(parts)
    s = f"{name:14s} latency {r.get('latency_cycles', float('nan')):7.2f} cyc"
    if "issue_cycles_per_smsp" in r:
        sat = r["saturated"]
        s += (
            f" | issue {r['issue_cycles_per_smsp']:6.3f} cyc/warp-instr/SMSP "
            f"({r['cycles_per_warp_instr_per_sm']:.3f}/SM) at {sat['warps_per_sm']} warps/SM,"
            f" nch {sat['nch']}"
        )
    if "flop_per_cycle_per_sm" in r:
        s += f" | {r['flop_per_cycle_per_sm']:.0f} FLOP/cycle/SM"
    if "bytes_per_cycle_per_sm" in r:
        s += (
            f" | {r['bytes_per_cycle_per_sm']:.1f} B/cycle/SM, issue-only "
            f"{r['issue_only_cycles_per_instr_per_warp']:.2f} cyc/instr/warp"
        )
    if "sts_latency_cycles" in r:
        s += f" (store->load {r['store_load_pair_cycles']:.2f} less LDS.128)"
    return s


def select(ps: list[Probe], only: str | None) -> list[Probe]:
    if not only:
        return ps
    want = set(only.split(","))
    unknown = want - {p.name for p in ps}
    if unknown:
        raise SystemExit(f"unknown classes: {sorted(unknown)}; known: {[p.name for p in ps]}")
    return [p for p in ps if p.name in want]


def main_time(args):
    import cupy

    t_start = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ps = select(probes(), args.only)
    res = {
        "provenance": provenance(),
        "errors": [],
        "classes": {},
        "build": {},
        "census": {},
        "config": dict(
            sms=SMS,
            smsp_per_sm=SMSP_PER_SM,
            arch=ARCH,
            nvrtc_options=list(NVRTC_OPTIONS),
            l2_region_bytes=L2_REGION,
            operands=dict(pa=PA, pb=PB, pi=PI, pj=PJ),
            saturated_rule="smallest issue_cycles_per_smsp over the throughput "
            "rows whose CTAs were all resident together",
        ),
    }
    path = out / "isa.json"

    def save():
        res["wall_s"] = time.monotonic() - t_start
        path.write_text(json.dumps(res, indent=1, default=str))

    cuobjdump = find_tool("cuobjdump")
    res["config"]["cuobjdump"] = cuobjdump
    cubin_dir = out / "isa_cubin"
    cubin_dir.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        t0 = time.monotonic()
        built = build_all(ps, "nvrtc", tmp)
        res["build_wall_s"] = time.monotonic() - t0
        print(
            f"built {len(built)} modules in {res['build_wall_s']:.1f} s (NVRTC, {ARCH})",
            flush=True,
        )
        fns, cens = {}, {}
        for p in ps:
            b = built[p.name]
            if "error" in b:
                res["build"][p.name] = b
                res["errors"].append(f"build {p.name}: {b['error'][:2000]}")
                print("ERROR", res["errors"][-1][:400], flush=True)
                # fallback: CuPy's own NVRTC path (it appends -arch=sm_90 to the options; NVRTC
                # 13.0 was seen to build sm_90a when both are given); no census then
                try:
                    mod = cupy.RawModule(
                        code=module_source(p),
                        options=NVRTC_OPTIONS[:2],
                        backend="nvrtc",
                        jitify=False,
                    )
                    for k in kernel_names(p):
                        fns[k] = mod.get_function(k)
                    res["build"][p.name]["fallback"] = "cupy.RawModule(code=...)"
                except Exception as e:
                    res["errors"].append(f"fallback {p.name}: {type(e).__name__}: {e}")
                continue
            rep = parse_ptxas(b["log"])
            res["build"][p.name] = dict(seconds=b["seconds"], compiler=b["compiler"], **rep)
            for w in rep["warnings"]:
                print(f"ptxas {p.name}: {w}", flush=True)
            cub = cubin_dir / f"{p.name}.cubin"
            cub.write_bytes(b["cubin"])
            try:
                mod = cupy.RawModule(path=str(cub))
                for k in kernel_names(p):
                    fns[k] = mod.get_function(k)
            except Exception as e:
                res["errors"].append(f"load {p.name}: {type(e).__name__}: {e}")
                print("ERROR", res["errors"][-1], flush=True)
        if cuobjdump:
            for name, c in census_all(
                [p for p in ps if "cubin" in built[p.name]], built, cuobjdump, tmp
            ).items():
                if "error" in c:
                    res["errors"].append(f"census {name}: {c['error']}")
                    continue
                cens[name] = c
                res["census"][name] = {
                    k: {kk: vv for kk, vv in v.items() if kk != "loop_text"} for k, v in c.items()
                }
    save()
    run = Runner()
    # bring the SM clock up (it idles low) with ~0.3 s of FFMA work, and record it
    if "ffma_tp8" in fns:
        t0, warm = time.monotonic(), []
        while time.monotonic() - t0 < 0.3:
            r = run.summarize(run.launch(fns["ffma_tp8"], SMS, 1024, 2000, launches=1, warmup=0))
            warm.append(r["clock_hz_event"])
        res["clock_warmup_hz_event"] = warm[:: max(1, len(warm) // 30)] + warm[-1:]
        print(
            f"warm-up: clock {warm[-1] / 1e6:.0f} MHz (event) after {len(warm)} launches",
            flush=True,
        )
    order = sorted(ps, key=lambda p: p.kind == "wgmma")  # wgmma last
    for p in order:
        if not all(k in fns for k in kernel_names(p)):
            continue
        print(f"{p.name}: {p.ptx} -> {p.sass}", flush=True)
        try:
            res["classes"][p.name] = run_probe(run, p, fns, cens.get(p.name))
        except Exception as e:
            res["classes"][p.name] = {"error": f"{type(e).__name__}: {e}"}
            res["errors"].append(f"{p.name}: {type(e).__name__}: {e}")
            print("ERROR", res["errors"][-1], flush=True)
        save()
    c = res["classes"]
    if (
        "sts128" in c
        and "lds128" in c
        and "latency_cycles" in c["sts128"]
        and "latency_cycles" in c["lds128"]
    ):
        pair = c["sts128"]["latency_cycles"]
        c["sts128"]["store_load_pair_cycles"] = pair
        c["sts128"]["sts_latency_cycles"] = pair - c["lds128"]["latency_cycles"]
        c["sts128"]["latency_cycles"] = c["sts128"]["sts_latency_cycles"]
        c["sts128"]["latency_note"] = (
            "store then dependent load of the same address, less the LDS.128 latency"
        )
    res["provenance"]["nvidia_smi_after"] = nvidia_smi()
    save()
    print("\nsummary (cycles of the SM clock; issue = reciprocal throughput at saturation)")
    for name, r in c.items():
        print(summary_line(name, r))
    if res["errors"]:
        print(f"{len(res['errors'])} errors; see isa.json")
    print(f"wall {time.monotonic() - t_start:.1f} s")


def main_sass(args):
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ps = select(probes(), args.only)
    compiler = args.compiler
    if compiler == "auto":
        try:
            import cupy  # noqa: F401

            compiler = "nvrtc"
        except ImportError:
            compiler = "nvcc"
    cuobjdump = find_tool("cuobjdump")
    if not cuobjdump:
        raise SystemExit("cuobjdump not found (PATH, CUDA_HOME, pip nvidia packages)")
    text, js = [], {"compiler": compiler, "arch": ARCH, "command": command_line(), "modules": {}}
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        built = build_all(ps, compiler, tmp)
        cens = census_all([p for p in ps if "cubin" in built[p.name]], built, cuobjdump, tmp)
        for p in ps:
            b = built[p.name]
            if "error" in b or "error" in cens.get(p.name, {}):
                err = b.get("error") or cens[p.name]["error"]
                print(f"sass {p.name}: ERROR {err[:2000]}")
                js["modules"][p.name] = {"error": err}
                continue
            rep = parse_ptxas(b["log"])
            cen = cens[p.name]
            js["modules"][p.name] = dict(
                ptx=p.ptx,
                target=p.sass,
                ptxas=rep,
                kernels={
                    k: {kk: vv for kk, vv in v.items() if kk != "loop_text"}
                    for k, v in cen.items()
                },
            )
            for w in rep["warnings"]:
                print(f"ptxas {p.name}: {w}")
            text.append(f"==== {p.name}: {p.ptx} -> {p.sass} ({compiler}) ====")
            for k, v in cen.items():
                if k.endswith("_check"):
                    continue
                f = rep["functions"].get(k, {})
                line = (
                    f"sass {k}: target {v['target_in_loop']} in loop"
                    + (f" (nominal {v['target_nominal']})" if "target_nominal" in v else "")
                    + f", {v['loop_instructions']} loop instrs, regs "
                    f"{f.get('registers', v['resources'].get('REG'))}, spill "
                    f"{f.get('spill_store_bytes', '?')}/{f.get('spill_load_bytes', '?')} B,"
                    f" local {v['resources'].get('LOCAL', '?')}: {v['loop_opcodes']}"
                )
                print(line)
                text.append(line)
                text.append(v["loop_text"])
                text.append("")
    (out / "isa_sass.txt").write_text("\n".join(text) + "\n")
    (out / "isa_sass.json").write_text(json.dumps(js, indent=1))


def main_source(args):
    out = Path(args.out) / "isa_src"
    out.mkdir(parents=True, exist_ok=True)
    ps = select(probes(), args.only)
    lines = [
        "#!/bin/sh",
        "# cubins of the isa.py probe modules; check with cuobjdump -sass",
        "set -e",
        'cd "$(dirname "$0")"',
    ]
    for p in ps:
        (out / f"{p.name}.cu").write_text(module_source(p))
        lines.append(
            f"nvcc -cubin {NVCC_ARCH} -std=c++17 -Xptxas -v -o {p.name}.cubin {p.name}.cu"
        )
    (out / "build.sh").write_text("\n".join(lines) + "\n")
    print(f"wrote {len(ps)} modules and build.sh to {out}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("time", "sass", "source"), default="time")
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", help="comma-separated class names (default: all)")
    ap.add_argument(
        "--compiler",
        choices=("auto", "nvrtc", "nvcc"),
        default="auto",
        help="sass mode: the compiler of the cubins (auto: NVRTC if CuPy imports)",
    )
    args = ap.parse_args(argv)
    {"time": main_time, "sass": main_sass, "source": main_source}[args.mode](args)


if __name__ == "__main__":
    main()
