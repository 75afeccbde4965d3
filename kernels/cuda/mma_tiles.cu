// Shared device helpers of flash2_fwd.cu, flash2_bwd.cu and standard.cu (included by each).
//
// Element type: 16-bit storage (u16) holding fp16 or bf16 bits, chosen by DTYPE_BF16 (0 or 1).
// No CUDA header is included, so NVRTC needs no include path: conversions are PTX cvt (round to
// nearest even, as kernels/_numerics.to_dtype rounds), matrix products are mma.sync.m16n8k16
// with fp32 accumulation, and tiles move HBM -> shared memory with 16-byte cp.async.
//
// Tile layout in shared memory: row-major, COLS elements per row, in 16-byte chunks of 8
// elements; chunk c of row r lives at chunk position c ^ (r & SWZ), SWZ = min(COLS / 8, 8) - 1.
// The XOR swizzle keeps the tile at exactly ROWS * COLS * 2 bytes (what the schedules count)
// while the 8 row addresses of one ldmatrix phase land in 8 different bank groups.
#pragma once

#ifndef DTYPE_BF16
#error "DTYPE_BF16 must be defined (0: fp16, 1: bf16) by the runner"
#endif

typedef unsigned short u16;
typedef unsigned int u32;

#define NEG_INF (-__int_as_float(0x7f800000))
#define POS_INF (__int_as_float(0x7f800000))
#define LOG2E 1.4426950408889634f

// -- conversions -------------------------------------------------------------------------------
__device__ __forceinline__ u32 pack2(float lo, float hi) {
    u32 r;  // cvt packs its first source into the upper half
#if DTYPE_BF16
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#endif
    return r;
}

__device__ __forceinline__ u16 to_elem(float x) {
    u16 r;
#if DTYPE_BF16
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(x));
#else
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x));
#endif
    return r;
}

__device__ __forceinline__ float to_float(u16 x) {
#if DTYPE_BF16
    return __uint_as_float(((u32)x) << 16);  // bf16 is the upper half of an fp32: exact
#else
    float r;
    asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(x));
    return r;
#endif
}

// -- shared-memory tiles -----------------------------------------------------------------------
template <int COLS>
__device__ __forceinline__ int swz(int row, int chunk) {
    constexpr int CH = COLS / 8;
    constexpr int SWZ = CH % 8 == 0 ? 7 : CH % 4 == 0 ? 3 : CH % 2 == 0 ? 1 : 0;
    return row * COLS + ((chunk ^ (row & SWZ)) << 3);
}

__device__ __forceinline__ u32 smem_addr(const void* p) {
    return (u32)__cvta_generic_to_shared(p);
}

// 16 bytes HBM -> shared memory, bypassing L1; src_bytes = 0 writes zeros (rows past N).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// One fp32 from global memory through L2 only (not cached in L1).
__device__ __forceinline__ float ld_cg(const float* p) {
    float x;
    asm volatile("ld.global.cg.f32 %0, [%1];\n" : "=f"(x) : "l"(p));
    return x;
}

// Two consecutive fp32 added atomically at L2 (one 8-byte vector reduction, sm_90): the four
// lanes of a quad then update one whole 32-byte sector per row, not half of two.
__device__ __forceinline__ void red_add_v2(float* p, float a, float b) {
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
}

// ROWS x COLS tile of a row-major matrix (row stride ld elements, 16-byte aligned rows) into
// swizzled shared memory; rows >= rows_valid are zero-filled and read nothing from HBM.
template <int ROWS, int COLS, int NT>
__device__ __forceinline__ void load_tile(u16* s, const u16* g, long ld, int rows_valid, int tid) {
    constexpr int CH = COLS / 8, CHUNKS = ROWS * CH;
    // a trip count known at compile time, so the loop unrolls into straight-line code
#pragma unroll
    for (int it = 0; it < (CHUNKS + NT - 1) / NT; ++it) {
        const int idx = tid + it * NT;
        if (CHUNKS % NT != 0 && idx >= CHUNKS) break;
        int r = idx / CH, c = idx % CH;
        bool ok = r < rows_valid;
        cp_async16(s + swz<COLS>(r, c), ok ? g + r * ld + c * 8 : g, ok ? 16 : 0);
    }
}

// The same for a tile whose columns may also be ragged (cols_valid < COLS) and whose rows may
// be misaligned (standard attention's S and P, row stride N): 16-byte copies where a chunk is
// whole and aligned, element by element otherwise; zeros past the valid region.
template <int ROWS, int COLS, int NT>
__device__ __forceinline__ void load_tile_2d(u16* s, const u16* g, long ld, int rows_valid,
                                             int cols_valid, bool aligned, int tid) {
    constexpr int CH = COLS / 8;
    for (int idx = tid; idx < ROWS * CH; idx += NT) {
        int r = idx / CH, c = idx % CH;
        u16* dst = s + swz<COLS>(r, c);
        int cols = r < rows_valid ? min(8, cols_valid - c * 8) : 0;
        if (aligned && (cols == 8 || cols <= 0)) {
            cp_async16(dst, cols == 8 ? g + r * ld + c * 8 : g, cols == 8 ? 16 : 0);
        } else {
#pragma unroll
            for (int e = 0; e < 8; ++e) dst[e] = e < cols ? g[r * ld + c * 8 + e] : (u16)0;
        }
    }
}

// -- tensor cores --------------------------------------------------------------------------------
__device__ __forceinline__ void ldsm_x4(u32* r, const u16* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p))
                 : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(u32* r, const u16* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p))
                 : "memory");
}

// c (16x8 fp32) += a (16x16, row-major fragment) * b (16x8, column-major fragment).
// Fragment layout (PTX ISA, mma.m16n8k16), g = lane / 4, t = lane % 4:
//   a[0] (g, 2t..2t+1), a[1] (g+8, 2t..), a[2] (g, 2t+8..), a[3] (g+8, 2t+8..)
//   b[0] (k 2t..2t+1, n g), b[1] (k 2t+8.., n g)
//   c[0], c[1] (g, 2t..2t+1), c[2], c[3] (g+8, 2t..2t+1)
__device__ __forceinline__ void mma16816(float* c, const u32* a, const u32* b) {
#if DTYPE_BF16
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
#else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
#endif
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// A fragment (16 rows x 16 k) at (row0, k0) of a swizzled tile stored [row][k].
template <int COLS>
__device__ __forceinline__ void frag_a(u32* a, const u16* s, int row0, int k0, int lane) {
    ldsm_x4(a, s + swz<COLS>(row0 + (lane & 15), (k0 >> 3) + (lane >> 4)));
}

// A fragment (16 rows x 16 k) at (row0, k0) of a tile stored transposed, [k][row].
template <int COLS>
__device__ __forceinline__ void frag_a_t(u32* a, const u16* s, int row0, int k0, int lane) {
    const int row = k0 + ((lane >> 4) << 3) + (lane & 7);
    ldsm_x4_t(a, s + swz<COLS>(row, (row0 >> 3) + ((lane >> 3) & 1)));
}

// B fragments of two n-tiles (n0..n0+7 -> b[0..1], n0+8..n0+15 -> b[2..3]) for k0..k0+15, from a
// tile stored [n][k] (K in S = Q K^T).
template <int COLS>
__device__ __forceinline__ void frag_b(u32* b, const u16* s, int n0, int k0, int lane) {
    ldsm_x4(b, s + swz<COLS>(n0 + ((lane >> 4) << 3) + (lane & 7), (k0 >> 3) + ((lane >> 3) & 1)));
}

// The same from a tile stored [k][n] (V in O = P V).
template <int COLS>
__device__ __forceinline__ void frag_b_t(u32* b, const u16* s, int n0, int k0, int lane) {
    const int row = k0 + (((lane >> 3) & 1) << 3) + (lane & 7);
    ldsm_x4_t(b, s + swz<COLS>(row, (n0 >> 3) + (lane >> 4)));
}

// Accumulator tiles c[2j], c[2j+1] (16 x 8 fp32 each) rounded into the A fragment of k-step j.
__device__ __forceinline__ void acc_to_a(u32* a, const float* c0, const float* c1) {
    a[0] = pack2(c0[0], c0[1]);
    a[1] = pack2(c0[2], c0[3]);
    a[2] = pack2(c1[0], c1[1]);
    a[3] = pack2(c1[2], c1[3]);
}

__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
