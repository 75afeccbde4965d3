// Standard attention forward (FlashAttention paper, Algorithm 0), the three kernels of
// kernels/standard.py, S and P making a round trip through HBM in the input dtype.
//
// 1. std_qk: one CTA per tile (b, h, i, j) of S, blockIdx.x = ((b * H + h) * Tr + i) * Tc + j:
//    Q_i, K_j -> shared memory, S_ij = (Q_i K_j^T) * scale in fp32 registers, stored rounded
//    to the input dtype. Shared memory: (BLOCK_Q + BLOCK_KV) * HEAD_DIM * 2 bytes, the
//    schedule's Q_i and K_j (the S tile is staged in the same bytes on its way out).
// 2. std_softmax: one CTA per (b, h, block of SOFTMAX_ROWS rows), blockIdx.x = (b * H + h) *
//    ceil(N / SOFTMAX_ROWS) + row block; warp w handles rows w, w + WARPS, ..., in chunks of
//    BLOCK_KV columns: pass 1 keeps a running max and sum, pass 2 writes P. SOFTMAX_PASSES 1:
//    the row block (SOFTMAX_ROWS * N * 2 bytes) is resident in shared memory; each element of
//    S is read once and each of P written once. 2: each pass reads the chunks (SOFTMAX_ROWS *
//    BLOCK_KV * 2 bytes) from HBM, so S is read twice. Causal: keys after the query get P = 0.
// 3. std_pv: one CTA per (b, h, i), blockIdx.x = (b * H + h) * Tr + i: for every j, P_ij and
//    V_j -> shared memory (BLOCK_Q * BLOCK_KV * 2 + BLOCK_KV * HEAD_DIM * 2 bytes), O_i += P_ij
//    V_j in fp32 registers; O_i stored once. Causal reads the zero tiles too, as the schedule.
//
// Compile-time parameters (defines injected by kernels/gpu.py): BLOCK_Q, BLOCK_KV, HEAD_DIM,
// WARPS, SOFTMAX_ROWS, SOFTMAX_PASSES, SOFTMAX_CHUNK, ROWS_ALIGNED (N % 8 == 0), DTYPE_BF16.
#include "mma_tiles.cu"

constexpr int NT = WARPS * 32;
constexpr int WM = BLOCK_Q / WARPS;  // rows of Q (and of S, O) per warp
constexpr int MT = WM / 16;
constexpr int NS = BLOCK_KV / 8;
constexpr int ND = HEAD_DIM / 8;
constexpr int RPW = (SOFTMAX_ROWS + WARPS - 1) / WARPS;  // softmax rows per warp
constexpr long long QK_SMEM_BYTES = (BLOCK_Q + (long long)BLOCK_KV) * HEAD_DIM * 2;
constexpr long long PV_SMEM_BYTES =
    ((long long)BLOCK_Q * BLOCK_KV + (long long)BLOCK_KV * HEAD_DIM) * 2;
// S_ij leaves through the Q_i/K_j bytes when it fits there, else straight from registers
constexpr bool QK_STAGE = (BLOCK_Q + BLOCK_KV) * HEAD_DIM >= BLOCK_Q * BLOCK_KV;
// O_i leaves through the P_ij/V_j bytes when it fits there, else straight from registers
constexpr bool PV_STAGE = (BLOCK_Q + HEAD_DIM) * BLOCK_KV >= BLOCK_Q * HEAD_DIM;

static_assert(WARPS >= 1 && WARPS <= 32, "warps * 32 threads must be 32..1024");
static_assert(BLOCK_Q % (16 * WARPS) == 0,
              "BLOCK_Q must be a multiple of 16 * WARPS (m16 tiles per warp)");
static_assert(BLOCK_KV % 16 == 0, "BLOCK_KV must be a multiple of 16");
static_assert(HEAD_DIM % 16 == 0 && HEAD_DIM <= 256,
              "HEAD_DIM must be a multiple of 16, at most 256");
static_assert(QK_SMEM_BYTES <= 227 * 1024,
              "Q_i, K_j tiles exceed 227 KiB of shared memory per CTA");
static_assert(PV_SMEM_BYTES <= 227 * 1024,
              "P_ij, V_j tiles exceed 227 KiB of shared memory per CTA");
static_assert(SOFTMAX_PASSES == 1 || SOFTMAX_PASSES == 2, "SOFTMAX_PASSES must be 1 or 2");
static_assert(SOFTMAX_ROWS >= 1, "SOFTMAX_ROWS must be positive");
static_assert(SOFTMAX_PASSES == 1 || (long long)SOFTMAX_ROWS * BLOCK_KV * 2 <= 227 * 1024,
              "softmax chunk exceeds 227 KiB of shared memory per CTA");

__host__ __device__ constexpr long long softmax_smem_bytes(int n) {
    return (long long)SOFTMAX_ROWS * (SOFTMAX_PASSES == 1 ? n : BLOCK_KV) * 2;
}

extern "C" __global__ void std_smem_bytes(long long* out, int n) {
    out[0] = QK_SMEM_BYTES;
    out[1] = softmax_smem_bytes(n);
    out[2] = PV_SMEM_BYTES;
}

extern "C" __global__ void __launch_bounds__(NT)
    std_qk(const u16* __restrict__ Q, const u16* __restrict__ K, u16* __restrict__ S, int heads,
           int kv_heads, int n, float scale) {
    extern __shared__ __align__(128) unsigned char smem[];
    u16* sQ = reinterpret_cast<u16*>(smem);
    u16* sK = sQ + BLOCK_Q * HEAD_DIM;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int t_q = (n + BLOCK_Q - 1) / BLOCK_Q, t_kv = (n + BLOCK_KV - 1) / BLOCK_KV;
    const int j = blockIdx.x % t_kv, bhi = blockIdx.x / t_kv;
    const int i = bhi % t_q, bh = bhi / t_q;
    const int b = bh / heads, h = bh % heads, kvh = h / (heads / kv_heads);
    const int q0 = i * BLOCK_Q, k0 = j * BLOCK_KV;
    const int r = min(BLOCK_Q, n - q0), c = min(BLOCK_KV, n - k0);

    // Q_i and K_j: HBM -> SRAM, once per tile of S
    load_tile<BLOCK_Q, HEAD_DIM, NT>(sQ, Q + ((long)bh * n + q0) * HEAD_DIM, HEAD_DIM, r, tid);
    load_tile<BLOCK_KV, HEAD_DIM, NT>(sK, K + ((long)(b * kv_heads + kvh) * n + k0) * HEAD_DIM,
                                      HEAD_DIM, c, tid);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();

    const int wr = warp * WM;
    float s[MT][NS][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int ns = 0; ns < NS; ++ns)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[mt][ns][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < HEAD_DIM; kk += 16) {
        u32 a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) frag_a<HEAD_DIM>(a[mt], sQ, wr + mt * 16, kk, lane);
#pragma unroll
        for (int np = 0; np < NS / 2; ++np) {
            u32 bf[4];
            frag_b<HEAD_DIM>(bf, sK, np * 16, kk, lane);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                mma16816(s[mt][2 * np], a[mt], bf);
                mma16816(s[mt][2 * np + 1], a[mt], bf + 2);
            }
        }
    }

    // S_ij: registers -> HBM in the input dtype
    u16* gS = S + ((long)bh * n + q0) * n + k0;
    if (QK_STAGE) {
        __syncthreads();  // every warp is done with Q_i and K_j: their bytes hold the S tile
        u16* sS = sQ;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int ns = 0; ns < NS; ++ns)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int row = wr + mt * 16 + (lane >> 2) + 8 * hf;
                    *reinterpret_cast<u32*>(sS + swz<BLOCK_KV>(row, ns) + 2 * (lane & 3)) =
                        pack2(s[mt][ns][2 * hf] * scale, s[mt][ns][2 * hf + 1] * scale);
                }
        __syncthreads();
        constexpr int CH = BLOCK_KV / 8;
        const bool aligned = (n & 7) == 0;
        for (int idx = tid; idx < BLOCK_Q * CH; idx += NT) {
            const int row = idx / CH, ch = idx % CH;
            const int cols = min(8, c - ch * 8);
            if (row >= r || cols <= 0) continue;
            const u16* src = sS + swz<BLOCK_KV>(row, ch);
            u16* dst = gS + (long)row * n + ch * 8;
            if (aligned && cols == 8) {
                *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
            } else {
                for (int e = 0; e < cols; ++e) dst[e] = src[e];
            }
        }
    } else {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int ns = 0; ns < NS; ++ns)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int row = wr + mt * 16 + (lane >> 2) + (e >= 2 ? 8 : 0);
                    const int col = ns * 8 + 2 * (lane & 3) + (e & 1);
                    if (row < r && col < c)
                        gS[(long)row * n + col] = to_elem(s[mt][ns][e] * scale);
                }
    }
}

// -- std_softmax -------------------------------------------------------------------------------
// Each warp owns rows w, w + WARPS, ... of the CTA's row block and walks them in chunks of
// SOFTMAX_CHUNK columns (BLOCK_KV with two passes, the chunk in shared memory; at least 256
// with one, the row block resident); lane l of a chunk row holds columns l, l + 32, ... (EPL
// of them), so every chunk is straight-line code. Pass 1 keeps a running (max, sum of exp)
// per lane, merged over the warp once per row; pass 2 writes P. Keys after the query
// (causal) get P = 0.
static_assert(SOFTMAX_PASSES == 1 || SOFTMAX_CHUNK == BLOCK_KV,
              "two passes read S in chunks of BLOCK_KV columns");
constexpr int EPL = (SOFTMAX_CHUNK + 31) / 32;  // elements of a chunk row per lane

// pass 1 on one chunk row (c columns from key k0; keys >= limit masked): the lane's (m, l)
__device__ __forceinline__ void online_chunk(const u16* row, int c, int k0, int limit, float& m,
                                             float& l, int lane) {
    float x[EPL];
    float cm = m;
#pragma unroll
    for (int e = 0; e < EPL; ++e) {
        const int cc = lane + 32 * e;
        x[e] = cc < c && k0 + cc < limit ? to_float(row[cc]) : NEG_INF;
        cm = fmaxf(cm, x[e]);
    }
    const float mu = cm == NEG_INF ? 0.f : cm;
    float sum = l * exp2f((m - mu) * LOG2E);
#pragma unroll
    for (int e = 0; e < EPL; ++e) sum += exp2f((x[e] - mu) * LOG2E);
    m = cm;
    l = sum;
}

// pass 2 on one chunk row: P = exp(S - m) * inv_l, 0 for masked keys
__device__ __forceinline__ void write_chunk(u16* p, const u16* row, int c, int k0, int limit,
                                            float m, float inv_l, int lane) {
#pragma unroll
    for (int e = 0; e < EPL; ++e) {
        const int cc = lane + 32 * e;
        if (cc < c) {
            const float x = to_float(row[cc]);
            p[cc] = k0 + cc < limit ? to_elem(exp2f((x - m) * LOG2E) * inv_l) : (u16)0;
        }
    }
}

__device__ __forceinline__ void warp_max_sum(float& m, float& l, int lane) {
    // merge the lanes' (max, sum of exp(x - max)) pairs
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        const float l2 = __shfl_xor_sync(0xffffffffu, l, off);
        const float mn = fmaxf(m, m2);
        const float mu = mn == NEG_INF ? 0.f : mn;
        l = l * exp2f((m - mu) * LOG2E) + l2 * exp2f((m2 - mu) * LOG2E);
        m = mn;
    }
}

// rows x cols of S (row stride n) -> shared memory rows of `stride` elements: 16-byte cp.async
// where the rows are aligned (a compile-time choice, so a chunk is straight-line code), else
// element by element. Waits for the copies.
template <int MAX_COLS>
__device__ __forceinline__ void load_rows(u16* dst, const u16* src, long n, int rows, int cols,
                                          int stride, int tid) {
    if (ROWS_ALIGNED) {  // N % 8 == 0: every row of S starts 16-byte aligned
        const int ch = (cols + 7) / 8;
        if (MAX_COLS > 0) {  // a chunk: a trip count known at compile time, unrolled
            constexpr int CH = MAX_COLS / 8, COPIES = SOFTMAX_ROWS * (MAX_COLS / 8);
#pragma unroll
            for (int it = 0; it < (COPIES + NT - 1) / NT; ++it) {
                const int idx = tid + it * NT, rr = idx / CH, cc = idx % CH;
                if (idx < COPIES && rr < rows && cc < ch)
                    cp_async16(dst + rr * stride + cc * 8, src + rr * n + cc * 8,
                               min(16, 2 * (cols - cc * 8)));
            }
        } else {
            for (int idx = tid; idx < rows * ch; idx += NT) {
                const int rr = idx / ch, cc = idx % ch;
                cp_async16(dst + rr * stride + cc * 8, src + rr * n + cc * 8,
                           min(16, 2 * (cols - cc * 8)));
            }
        }
        cp_async_commit();
        cp_async_wait<0>();
    } else {
        for (int idx = tid; idx < rows * cols; idx += NT) {
            const int rr = idx / cols, cc = idx % cols;
            dst[rr * stride + cc] = src[rr * n + cc];
        }
    }
}

extern "C" __global__ void __launch_bounds__(NT)
    std_softmax(const u16* __restrict__ S, u16* __restrict__ P, int n, int causal) {
    extern __shared__ __align__(128) unsigned char smem[];
    u16* sS = reinterpret_cast<u16*>(smem);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int t_r = (n + SOFTMAX_ROWS - 1) / SOFTMAX_ROWS;
    const int chunks = (n + SOFTMAX_CHUNK - 1) / SOFTMAX_CHUNK;
    const int bh = blockIdx.x / t_r, r0 = (blockIdx.x % t_r) * SOFTMAX_ROWS;
    const int r = min(SOFTMAX_ROWS, n - r0);
    const long base = ((long)bh * n + r0) * n;  // element (b, h, r0, 0) of S and P
    // one pass: the row block is resident (row stride n); two: one chunk at a time
    constexpr bool RESIDENT = SOFTMAX_PASSES == 1;
    const int stride = RESIDENT ? n : BLOCK_KV;

    float m[RPW], l[RPW];
#pragma unroll
    for (int k = 0; k < RPW; ++k) m[k] = NEG_INF, l[k] = 0.f;
    if (RESIDENT) {  // the row block: HBM -> SRAM once
        load_rows<0>(sS, S + base, n, r, n, n, tid);
        __syncthreads();
    }
    // the chunk loops stay loops (one chunk a step: the instruction census's program)
#pragma unroll 1
    for (int jc = 0; jc < chunks; ++jc) {  // pass 1: running max and sum
        const int k0 = jc * SOFTMAX_CHUNK, c = min(SOFTMAX_CHUNK, n - k0);
        if (!RESIDENT) {  // S chunk: HBM -> SRAM
            __syncthreads();  // every warp is done with the previous chunk
            load_rows<BLOCK_KV>(sS, S + base + k0, n, r, c, BLOCK_KV, tid);
            __syncthreads();
        }
        const u16* chunk = sS + (RESIDENT ? k0 : 0);
#pragma unroll
        for (int k = 0; k < RPW; ++k) {
            const int rr = warp + k * WARPS;
            if (rr < r)
                online_chunk(chunk + rr * stride, c, k0, causal ? r0 + rr + 1 : n, m[k], l[k],
                             lane);
        }
    }
    float inv_l[RPW];
#pragma unroll
    for (int k = 0; k < RPW; ++k) {
        warp_max_sum(m[k], l[k], lane);
        inv_l[k] = 1.f / l[k];
    }
#pragma unroll 1
    for (int jc = 0; jc < chunks; ++jc) {  // pass 2: P chunk: SRAM -> HBM
        const int k0 = jc * SOFTMAX_CHUNK, c = min(SOFTMAX_CHUNK, n - k0);
        if (!RESIDENT) {  // S chunk again: HBM -> SRAM
            __syncthreads();
            load_rows<BLOCK_KV>(sS, S + base + k0, n, r, c, BLOCK_KV, tid);
            __syncthreads();
        }
        const u16* chunk = sS + (RESIDENT ? k0 : 0);
#pragma unroll
        for (int k = 0; k < RPW; ++k) {
            const int rr = warp + k * WARPS;
            if (rr < r)
                write_chunk(P + base + (long)rr * n + k0, chunk + rr * stride, c, k0,
                            causal ? r0 + rr + 1 : n, m[k], inv_l[k], lane);
        }
    }
}

extern "C" __global__ void __launch_bounds__(NT)
    std_pv(const u16* __restrict__ P, const u16* __restrict__ V, u16* __restrict__ O, int heads,
           int kv_heads, int n) {
    extern __shared__ __align__(128) unsigned char smem[];
    u16* sP = reinterpret_cast<u16*>(smem);
    u16* sV = sP + BLOCK_Q * BLOCK_KV;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int t_q = (n + BLOCK_Q - 1) / BLOCK_Q, t_kv = (n + BLOCK_KV - 1) / BLOCK_KV;
    const int bh = blockIdx.x / t_q, i = blockIdx.x % t_q;
    const int b = bh / heads, h = bh % heads, kvh = h / (heads / kv_heads);
    const int q0 = i * BLOCK_Q, r = min(BLOCK_Q, n - q0);
    const u16* gP = P + ((long)bh * n + q0) * n;
    const u16* gV = V + (long)(b * kv_heads + kvh) * n * HEAD_DIM;
    const bool aligned = (n & 7) == 0;
    const int wr = warp * WM;

    float o[MT][ND][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nd = 0; nd < ND; ++nd)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[mt][nd][e] = 0.f;

    for (int j = 0; j < t_kv; ++j) {
        const int k0 = j * BLOCK_KV;
        __syncthreads();  // every warp is done with P_{i,j-1} and V_{j-1}
        // P_ij and V_j: HBM -> SRAM once per (i, j)
        load_tile_2d<BLOCK_Q, BLOCK_KV, NT>(sP, gP + k0, n, r, n - k0, aligned, tid);
        load_tile<BLOCK_KV, HEAD_DIM, NT>(sV, gV + (long)k0 * HEAD_DIM, HEAD_DIM, n - k0, tid);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
#pragma unroll
        for (int kt = 0; kt < BLOCK_KV / 16; ++kt) {
            u32 a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                frag_a<BLOCK_KV>(a[mt], sP, wr + mt * 16, kt * 16, lane);
#pragma unroll
            for (int dp = 0; dp < ND / 2; ++dp) {
                u32 bf[4];
                frag_b_t<HEAD_DIM>(bf, sV, dp * 16, kt * 16, lane);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma16816(o[mt][2 * dp], a[mt], bf);
                    mma16816(o[mt][2 * dp + 1], a[mt], bf + 2);
                }
            }
        }
    }

    // O_i: registers -> HBM once per CTA, staged through this warp's rows of the P_ij/V_j bytes
    // for 16-byte stores where the O tile fits there
    u16* gO = O + ((long)bh * n + q0) * HEAD_DIM;
    if (PV_STAGE) {
        __syncthreads();  // every warp is done with the last P_ij and V_j
        u16* sO = sP;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int row = wr + mt * 16 + (lane >> 2) + 8 * hf;
#pragma unroll
                for (int nd = 0; nd < ND; ++nd)
                    *reinterpret_cast<u32*>(sO + swz<HEAD_DIM>(row, nd) + 2 * (lane & 3)) =
                        pack2(o[mt][nd][2 * hf], o[mt][nd][2 * hf + 1]);
            }
        __syncwarp();
        constexpr int CH = HEAD_DIM / 8;
        for (int idx = lane; idx < WM * CH; idx += 32) {
            const int rr = wr + idx / CH, c = idx % CH;
            if (rr < r)
                *reinterpret_cast<uint4*>(gO + (long)rr * HEAD_DIM + c * 8) =
                    *reinterpret_cast<const uint4*>(sO + swz<HEAD_DIM>(rr, c));
        }
    } else {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int row = wr + mt * 16 + (lane >> 2) + 8 * hf;
                if (row < r) {
                    u16* dst = gO + (long)row * HEAD_DIM + 2 * (lane & 3);
#pragma unroll
                    for (int nd = 0; nd < ND; ++nd)
                        *reinterpret_cast<u32*>(dst + nd * 8) =
                            pack2(o[mt][nd][2 * hf], o[mt][nd][2 * hf + 1]);
                }
            }
    }
}
