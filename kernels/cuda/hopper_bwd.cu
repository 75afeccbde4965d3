// FlashAttention backward for Hopper (sm_90a): the main kernel of kernels/flash2_bwd.py's three
// (the first and last, D = rowsum(dO * O) with dQ_acc zeroed and dQ rounded from dQ_acc, are
// flash2_bwd.cu's flash2_bwd_pre and flash2_bwd_post).
//
// The loop order of kernels/flash2_bwd.py: one CTA per (batch, key/value head, K/V block j),
// blockIdx.x = (b * KH + kh) * Tc + j; K_j and V_j are read once, dK_j and dV_j accumulate on
// chip, and for every query head of the group and every Q block i (causal: from the block that
// holds key j * BLOCK_KV on) the CTA reads Q_i, dO_i, L_i and D_i and adds dS K_j into the fp32
// dQ accumulator with atomic adds at L2. What differs from flash2_bwd.cu is how the tiles are
// moved and multiplied (the design of FlashAttention-3's backward, Shah et al. 2024, Sec. 3 and
// Appendix B: products transposed so that P^T and dS^T are operands in registers, dQ through
// shared memory):
// - Warpgroup 0 is the producer: one thread issues TMA copies of K_j and V_j once, and of Q_i
//   and dO_i into STAGES buffers each (mbarriers `*_full`); the lanes of its warp 1 copy L_i and
//   D_i (4-byte rows: a TMA box must start 16-byte aligned, which a ragged N breaks) and arrive
//   on the same barriers. The consumers free a stage by arriving on `q_empty` when their
//   products have read it.
// - Warpgroups 1..CONSUMERS each own 64 keys of the block (BLOCK_KV = 64 * CONSUMERS). Per Q
//   block: S^T = K_c Q_i^T and dP^T = V_c dO_i^T by wgmma from shared memory (m64 n BLOCK_Q k16),
//   P^T = exp(scale S^T - L) and dS^T = scale P^T (dP^T - D) in registers, then
//   dV_c += P^T dO_i and dK_c += dS^T Q_i by wgmma with the A operand from registers
//   (m64 n HEAD_DIM k16; Q_i and dO_i N-major, the transpose bit set).
// - dQ_i = dS K_j needs every key of the block for a query row: each warpgroup stores its dS^T
//   rows (16-bit) in shared memory (two buffers, alternating by Q block), the consumers meet at
//   a named barrier, and each multiplies 64 x 64 tiles of dQ_i from the whole dS and K_j
//   (m64 n64 k16, both operands transposed), then adds them into dQ_acc with 8-byte fp32
//   reductions (red.global.add.v2.f32). The barrier also orders the buffers: a warpgroup that
//   passed the barrier of Q block it - 1 knows every consumer finished block it - 2's products.
// - setmaxnreg moves registers from the producer (24) to the consumers (240).
//
// Output: dK_c and dV_c rounded to 16 bits, staged in the warpgroup's rows of the K and V
// buffers (K once every consumer's last dQ product is done) and written by TMA.
//
// Shared memory: K_j, V_j, STAGES Q and dO buffers, two dS^T buffers (BLOCK_KV x BLOCK_Q), each
// a tile of 128-byte swizzled rows (kernels/cuda/wgmma.cu), 1024-byte aligned; STAGES L and D
// rows (BLOCK_Q fp32 each); the barriers; 1 KiB of alignment slack.
//
// Masks: full and causal attention of equal lengths; ragged N: the copies read zeros past N,
// and elements of a key or query past N (or a key after its query, causal) are masked.
//
// Compile-time parameters (kernels/hopper.py): BLOCK_Q, BLOCK_KV, HEAD_DIM, DTYPE_BF16, STAGES.
#include "mma_tiles.cu"
#include "wgmma.cu"

#ifndef STAGES
#define STAGES 2
#endif

constexpr int CONSUMERS = BLOCK_KV / 64;
constexpr int NT = (CONSUMERS + 1) * 128;
constexpr int CB = HEAD_DIM / 64;  // column blocks of 64 elements (128 bytes)
constexpr int Q_BYTES = BLOCK_Q * HEAD_DIM * 2;  // a Q_i or dO_i buffer
constexpr int KV_BYTES = BLOCK_KV * HEAD_DIM * 2;
constexpr int DS_BYTES = BLOCK_KV * BLOCK_Q * 2;
constexpr int ROW_BYTES = BLOCK_Q * 4;  // an L_i or D_i buffer
constexpr int NS = BLOCK_Q / 2;         // S^T, dP^T accumulators a thread (64 x BLOCK_Q)
constexpr int NKV = HEAD_DIM / 2;       // dK, dV accumulators a thread (64 x HEAD_DIM)
constexpr int DQ_TILES = (BLOCK_Q / 64) * CB / CONSUMERS;  // 64 x 64 dQ tiles a warpgroup
constexpr int PRODUCER_REGS = 24;
constexpr int CONSUMER_REGS = 240;
static_assert(128 * PRODUCER_REGS + 128 * CONSUMERS * CONSUMER_REGS <= 65536, "register file");
static_assert(BLOCK_KV == 64 || BLOCK_KV == 128, "BLOCK_KV: 64 keys per consumer warpgroup, 1 or 2");
static_assert(BLOCK_Q == 64 || BLOCK_Q == 128, "BLOCK_Q: a wgmma N of wgmma.cu (64 or 128)");
static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "HEAD_DIM: 64 or 128");
static_assert((BLOCK_Q / 64) * CB % CONSUMERS == 0, "dQ tiles must split evenly");

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define WGMMA_ST CAT(wgmma_ss_n, BLOCK_Q)
#define WGMMA_KV CAT(CAT(wgmma_rs_n, HEAD_DIM), _tb)

// Named barrier 1: the consumer warpgroups (0 is __syncthreads; 2 + c: warpgroup c alone).
__device__ __forceinline__ void consumers_sync() {
    asm volatile("bar.sync 1, %0;\n" ::"n"(128 * CONSUMERS) : "memory");
}

// A^T (64 x BLOCK_Q) = rows of the K or V buffer at a_base (64 of this warpgroup) times the Q or
// dO buffer at b_base, transposed: S^T = K_c Q_i^T, dP^T = V_c dO_i^T.
__device__ __forceinline__ void issue_t(float* acc, u32 a_base, u32 b_base) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
        const u32 a = kmajor_step(a_base, BLOCK_KV, kk), b = kmajor_step(b_base, BLOCK_Q, kk);
        WGMMA_ST(acc, sw128_desc(a, 16), sw128_desc(b, 16), kk > 0);
    }
}

// acc (64 x HEAD_DIM) += X (registers, 64 x BLOCK_Q) times the Q or dO buffer at b_base
// (N-major: head_dim contiguous): dV += P^T dO_i, dK += dS^T Q_i.
__device__ __forceinline__ void issue_kv(float* acc, u32 (*xa)[4], u32 b_base) {
#pragma unroll
    for (int kk = 0; kk < BLOCK_Q / 16; ++kk)
        WGMMA_KV(acc, xa[kk], sw128_desc(b_base + kk * 16 * 128, BLOCK_Q * 128), 1);
}

// dQ tile (rows 64 rb, columns 64 cb) = dS (from the dS^T buffer at ds, M-major) times K_j
// (N-major), both operands transposed, over the block's BLOCK_KV keys.
__device__ __forceinline__ void issue_dq(float* acc, u32 ds, int rb, int cb, u32 sk) {
#pragma unroll
    for (int kk = 0; kk < BLOCK_KV / 16; ++kk) {
        const u32 a = ds + rb * BLOCK_KV * 128 + kk * 16 * 128;
        const u32 b = sk + cb * BLOCK_KV * 128 + kk * 16 * 128;
        wgmma_ss_n64_tt(acc, sw128_desc(a, BLOCK_KV * 128), sw128_desc(b, BLOCK_KV * 128), kk > 0);
    }
}

__device__ __forceinline__ void pack(u32 (*xa)[4], const float* acc) {
#pragma unroll
    for (int kk = 0; kk < BLOCK_Q / 16; ++kk) acc_to_a(xa[kk], acc + 8 * kk, acc + 8 * kk + 4);
}

// Keeps X's registers allocated (and unchanged) until the product that reads them is done.
__device__ __forceinline__ void fence_x(u32 (*xa)[4]) {
#pragma unroll
    for (int kk = 0; kk < BLOCK_Q / 16; ++kk)
#pragma unroll
        for (int x = 0; x < 4; ++x) asm volatile("" : "+r"(xa[kk][x]) : : "memory");
}

__device__ __forceinline__ float2 lds_f2(u32 at) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(at));
    return v;
}
__device__ __forceinline__ void sts_b32(u32 at, u32 v) {
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(v) : "memory");
}

// P^T = exp2(S^T scale log2(e) - L log2(e)) in place, L (log2 units) of a thread's columns 2 tq,
// 2 tq + 1 of n8 tile t at l_s + 32 t.
__device__ __forceinline__ void probabilities(float* acc_s, u32 l_s, float sl2) {
#pragma unroll
    for (int x = 0; x < NS; x += 2) {
        const float2 lq = lds_f2(l_s + 32 * (x / 4));
        acc_s[x] = exp2f(fmaf(acc_s[x], sl2, -lq.x));
        acc_s[x + 1] = exp2f(fmaf(acc_s[x + 1], sl2, -lq.y));
    }
}

// Sets to -inf (P = 0) the scores of a key or query past N, or of a key after its query. A
// thread's element x is key key0 + 8 ((x >> 1) & 1) and query q0 + 8 (x / 4) + 2 tq + (x & 1),
// given relative to its first query: key_rel = key0 - q0 - 2 tq, q_end = n - q0 - 2 tq,
// k_end = n - key0.
__device__ __forceinline__ void mask(float* acc_s, int key_rel, int q_end, int k_end, int causal) {
#pragma unroll
    for (int x = 0; x < NS; ++x) {
        const int dk = (x & 2) ? 8 : 0, qc = 8 * (x / 4) + (x & 1);  // key and query offsets
        if (dk >= k_end || qc >= q_end || (causal && key_rel + dk > qc)) acc_s[x] = NEG_INF;
    }
}

// The 16-bit pair (lo, hi) at (row, column col) of a swizzled tile of `rows` rows starting at
// `tile` (column blocks of 64 elements, each rows x 128 bytes), col even.
__device__ __forceinline__ void st_pair(u32 tile, int rows, int row, int col, u32 pair) {
    const u32 at = tile + (col / 64) * rows * 128 + row * 128 + ((((col % 64) / 8) ^ (row % 8)) << 4) +
                   (col % 8) * 2;
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(pair) : "memory");
}

// The (query head, Q block) of step it, advanced one step at a time (no division in the loop):
// the group's heads in turn, each over Q blocks lo .. tr - 1.
struct Step {
    int i, bh, lo, tr;
    __device__ __forceinline__ void next() {
        if (++i == tr) {
            i = lo;
            ++bh;
        }
    }
};

extern "C" __global__ void __launch_bounds__(NT, 1)
    hopper_bwd(const void* __restrict__ tm_q, const void* __restrict__ tm_k,
               const void* __restrict__ tm_v, const void* __restrict__ tm_do,
               const float* __restrict__ lse, const float* __restrict__ dvec,
               const void* __restrict__ tm_dk, const void* __restrict__ tm_dv,
               float* __restrict__ dq_acc, int heads, int kv_heads, int n, float scale,
               int causal) {
    extern __shared__ unsigned char smem_raw[];
    const u32 base = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const u32 sk = base, sv = sk + KV_BYTES;
    const u32 sq = sv + KV_BYTES;               // STAGES Q buffers
    const u32 sdo = sq + STAGES * Q_BYTES;      // STAGES dO buffers
    const u32 sds = sdo + STAGES * Q_BYTES;     // two dS^T buffers
    const u32 sl = sds + 2 * DS_BYTES;          // STAGES L rows
    const u32 sd = sl + STAGES * ROW_BYTES;     // STAGES D rows
    const u32 bars = sd + STAGES * ROW_BYTES;   // 8 bytes each:
    const u32 kv_full = bars;                   // K_j and V_j arrived
    const u32 q_full = bars + 8;                // Q_i, L_i in stage s: q_full + 8 s
    const u32 do_full = q_full + 8 * STAGES;    // dO_i, D_i in stage s
    const u32 q_empty = do_full + 8 * STAGES;   // stage s read by every consumer

    const int tr = (n + BLOCK_Q - 1) / BLOCK_Q, tc = (n + BLOCK_KV - 1) / BLOCK_KV;
    const int j = blockIdx.x % tc, bkh = blockIdx.x / tc;
    const int b = bkh / kv_heads, kvh = bkh % kv_heads, grp = heads / kv_heads;
    const int k0 = j * BLOCK_KV;
    const int lo = causal ? k0 / BLOCK_Q : 0;  // the first Q block with a row >= k0
    const int steps = grp * (tr - lo);
    const int wg = threadIdx.x / 128, t = threadIdx.x % 128;

    if (threadIdx.x == 0) {
        mbar_init(kv_full, 1);
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(q_full + 8 * s, 1 + 32);  // the copying thread and warp 1's lanes
            mbar_init(do_full + 8 * s, 1 + 32);
            mbar_init(q_empty + 8 * s, 128 * CONSUMERS);
        }
        mbar_fence_init();
    }
    __syncthreads();

    if (wg == 0) {  // producer
        setmaxnreg_dec<PRODUCER_REGS>();
        if (steps == 0) return;
        if (t / 32 == 1) {  // warp 1: L_i (log2 units) and D_i into stage s, rows past N 0 (masked)
            Step st{lo, b * heads + kvh * grp, lo, tr};
            for (int it = 0; it < steps; ++it, st.next()) {
                const int s = it % STAGES, i = st.i;
                const long row0 = (long)st.bh * n;
                if (it >= STAGES) mbar_wait(q_empty + 8 * s, ((it / STAGES) + 1) & 1);
                for (int r = t % 32; r < BLOCK_Q; r += 32) {
                    const int row = i * BLOCK_Q + r;
                    const float lv = row < n ? lse[row0 + row] * LOG2E : 0.f;
                    const float dv = row < n ? dvec[row0 + row] : 0.f;
                    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(sl + s * ROW_BYTES + 4 * r), "f"(lv));
                    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(sd + s * ROW_BYTES + 4 * r), "f"(dv));
                }
                mbar_arrive(q_full + 8 * s);  // release: the rows, to whoever waits on it
                mbar_arrive(do_full + 8 * s);
            }
            return;
        }
        if (t != 0) return;
        tma_prefetch_map(tm_q);
        tma_prefetch_map(tm_k);
        tma_prefetch_map(tm_v);
        tma_prefetch_map(tm_do);
        mbar_expect_tx(kv_full, 2 * KV_BYTES);
        for (int c = 0; c < CB; ++c) {
            tma_load_3d(sk + c * BLOCK_KV * 128, tm_k, 64 * c, k0, bkh, kv_full);
            tma_load_3d(sv + c * BLOCK_KV * 128, tm_v, 64 * c, k0, bkh, kv_full);
        }
        Step st{lo, b * heads + kvh * grp, lo, tr};
        for (int it = 0; it < steps; ++it, st.next()) {
            const int s = it % STAGES, i = st.i, bh = st.bh;
            if (it >= STAGES) mbar_wait(q_empty + 8 * s, ((it / STAGES) + 1) & 1);
            mbar_expect_tx(q_full + 8 * s, Q_BYTES);
            for (int c = 0; c < CB; ++c)
                tma_load_3d(sq + s * Q_BYTES + c * BLOCK_Q * 128, tm_q, 64 * c, i * BLOCK_Q, bh,
                            q_full + 8 * s);
            mbar_expect_tx(do_full + 8 * s, Q_BYTES);
            for (int c = 0; c < CB; ++c)
                tma_load_3d(sdo + s * Q_BYTES + c * BLOCK_Q * 128, tm_do, 64 * c, i * BLOCK_Q, bh,
                            do_full + 8 * s);
        }
        return;
    }

    // consumers: warpgroup c = wg - 1 owns keys k0 + 64 c .. + 63 of the block
    setmaxnreg_inc<CONSUMER_REGS>();
    const int c = wg - 1;
    const int r_wg = 16 * (t / 32) + (t % 32) / 4, tq = t % 4;  // rows r_wg, r_wg + 8
    const int key0 = k0 + 64 * c + r_wg;
    const float sl2 = scale * LOG2E;
    const u32 k_rows = sk + c * 64 * 128, v_rows = sv + c * 64 * 128;
    float acc_dk[NKV], acc_dv[NKV];
#pragma unroll
    for (int x = 0; x < NKV; ++x) acc_dk[x] = acc_dv[x] = 0.f;

    if (steps > 0) mbar_wait(kv_full, 0);
    Step st{lo, b * heads + kvh * grp, lo, tr};
    for (int it = 0; it < steps; ++it, st.next()) {
        const int s = it % STAGES, i = st.i, bh = st.bh;
        const u32 parity = (it / STAGES) & 1;
        const u32 q_s = sq + s * Q_BYTES, do_s = sdo + s * Q_BYTES;
        const u32 ds = sds + (it & 1) * DS_BYTES;
        float acc_s[NS], acc_dp[NS];
        mbar_wait(q_full + 8 * s, parity);
        issue_t(acc_s, k_rows, q_s);
        wgmma_commit();
        mbar_wait(do_full + 8 * s, parity);
        issue_t(acc_dp, v_rows, do_s);
        wgmma_commit();

        // P^T = exp(scale S^T - L) while dP^T is multiplied; masked scores -inf, so P = 0
        wgmma_wait<1>();
        fence_regs<NS>(acc_s);
        const int q0 = i * BLOCK_Q;
        const u32 l_s = sl + s * ROW_BYTES + 8 * tq;  // L (log2 units) of this thread's columns
        if (q0 + BLOCK_Q > n || k0 + BLOCK_KV > n || (causal && k0 + BLOCK_KV - 1 > q0))
            mask(acc_s, key0 - q0 - 2 * tq, n - q0 - 2 * tq, n - key0, causal);
        probabilities(acc_s, l_s, sl2);
        // dS^T = scale P^T (dP^T - D)
        wgmma_wait<0>();
        fence_regs<NS>(acc_dp);
        const u32 d_s = sd + s * ROW_BYTES + 8 * tq;
#pragma unroll
        for (int x = 0; x < NS; x += 2) {
            const float2 dv = lds_f2(d_s + 32 * (x / 4));
            acc_dp[x] = scale * acc_s[x] * (acc_dp[x] - dv.x);
            acc_dp[x + 1] = scale * acc_s[x + 1] * (acc_dp[x + 1] - dv.y);
        }
        u32 pa[BLOCK_Q / 16][4], dsa[BLOCK_Q / 16][4];
        pack(pa, acc_s);
        pack(dsa, acc_dp);
        // dS^T rows of this warpgroup into the shared buffer, for dQ = dS K_j: the chunk of n8
        // tile nt of a row is the row's chunk 0 address XOR (nt % 8) << 4 (the swizzle)
        const u32 ds_row = ds + (64 * c + r_wg) * 128 + ((r_wg % 8) << 4) + 4 * tq;
#pragma unroll
        for (int nt = 0; nt < BLOCK_Q / 8; ++nt) {
            const u32 at = (ds_row ^ ((nt % 8) << 4)) + (nt / 8) * BLOCK_KV * 128;
            sts_b32(at, dsa[nt / 2][(nt % 2) * 2]);
            sts_b32(at + 8 * 128, dsa[nt / 2][(nt % 2) * 2 + 1]);  // row + 8
        }
        fence_proxy_async();  // these stores, then the tensor cores' reads of them
        float acc_dq[DQ_TILES][32];
        consumers_sync();
        // dQ tiles first (their reductions run while dV and dK are multiplied)
        wgmma_fence();
#pragma unroll
        for (int u = 0; u < DQ_TILES; ++u) {
            const int tile = c + CONSUMERS * u;
            issue_dq(acc_dq[u], ds, tile / CB, tile % CB, sk);
        }
        wgmma_commit();
        issue_kv(acc_dv, pa, do_s);
        issue_kv(acc_dk, dsa, q_s);
        wgmma_commit();
        wgmma_wait<1>();
#pragma unroll
        for (int u = 0; u < DQ_TILES; ++u) {
            fence_regs<32>(acc_dq[u]);
            const int tile = c + CONSUMERS * u;
            const int row = q0 + 64 * (tile / CB) + r_wg, col = 64 * (tile % CB) + 2 * tq;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                if (row + 8 * h >= n) continue;
                float* dst = dq_acc + ((long)bh * n + row + 8 * h) * HEAD_DIM + col;
#pragma unroll
                for (int nb = 0; nb < 8; ++nb)
                    red_add_v2(dst + 8 * nb, acc_dq[u][4 * nb + 2 * h], acc_dq[u][4 * nb + 2 * h + 1]);
            }
        }
        wgmma_wait<0>();
        fence_regs<NKV>(acc_dv);
        fence_regs<NKV>(acc_dk);
        fence_x(pa);
        fence_x(dsa);
        mbar_arrive(q_empty + 8 * s);
    }

    // dK_c, dV_c rounded and staged in this warpgroup's rows of the K and V buffers (K once no
    // consumer's dQ product reads it any more), then written by TMA, rows past N left out
    consumers_sync();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = r_wg + 8 * h;
#pragma unroll
        for (int nb = 0; nb < HEAD_DIM / 8; ++nb) {
            const int x = 4 * nb + 2 * h, col = 8 * nb + 2 * tq;
            st_pair(k_rows, BLOCK_KV, row, col, pack2(acc_dk[x], acc_dk[x + 1]));
            st_pair(v_rows, BLOCK_KV, row, col, pack2(acc_dv[x], acc_dv[x + 1]));
        }
    }
    fence_proxy_async();
    asm volatile("bar.sync %0, 128;\n" ::"r"(2 + c) : "memory");
    if (t == 0 && k0 + 64 * c < n) {
        for (int cb = 0; cb < CB; ++cb) {
            tma_store_3d(tm_dk, 64 * cb, k0 + 64 * c, bkh, k_rows + cb * BLOCK_KV * 128);
            tma_store_3d(tm_dv, 64 * cb, k0 + 64 * c, bkh, v_rows + cb * BLOCK_KV * 128);
        }
        tma_store_commit_and_wait();
    }
}
