// FlashAttention forward for Hopper (sm_90a): TMA copies, wgmma, warp specialization.
//
// The loop order of kernels/flash2.py (FlashAttention-2's Algorithm 1): a tile per (batch,
// head, Q block i), tile = (b * H + h) * Tr + i, the schedule's CTA index. A CTA works through
// the tiles blockIdx.x, blockIdx.x + gridDim.x, ... when built PERSISTENT (launched with a CTA
// per SM), else the one tile blockIdx.x (a CTA per tile). What differs from flash2_fwd.cu is
// how the tiles are moved and multiplied (the design of FlashAttention-3, Shah et al. 2024,
// Sec. 3.1):
// - Warpgroup 0 is the producer: one thread issues TMA copies of Q_i and of K_j, V_j into
//   STAGES buffers each, and the copies complete on mbarriers (`*_full`). The consumers free a
//   buffer by arriving on its `*_empty` barrier when their wgmma have read it.
// - Warpgroups 1..CONSUMERS each own 64 rows of Q_i (BLOCK_Q = 64 * CONSUMERS). Per key block:
//   S = Q K_j^T by wgmma from shared memory (m64 n BLOCK_KV k16), the online softmax in
//   registers, then O += P V_j by wgmma with P from registers (m64 n HEAD_DIM k16).
// - setmaxnreg moves registers from the producer (24) to the consumers (240; with three
//   consumer warpgroups 32 and 160, as FlashAttention-3's kernel does).
// - PINGPONG = 1: the consumers take turns issuing their matrix products (two named barriers;
//   a turn is one S = Q K^T or one O += P V), so one warpgroup's softmax runs while the other's
//   products do (FlashAttention-3 Sec. 3.1).
// - INTRA = 1: within a warpgroup, S_j = Q K_j^T is issued together with O += P_{j-1} V_{j-1},
//   so the softmax of block j runs while the tensor cores multiply block j - 1
//   (FlashAttention-3 Sec. 3.2); P_{j-1} stays in registers until that product is done.
//
// Output: each consumer warpgroup stages its 64 rows of O in its rows of the Q buffer and
// writes them with TMA (whole 128-byte rows); L is stored directly, 4 bytes a row. Once the
// copy has read them, the warpgroup frees the Q buffer (`q_empty`) for the CTA's next tile;
// the producer may already be loading that tile's first K and V blocks.
//
// Shared memory: Q_i, then STAGES K buffers and STAGES V buffers, each a tile of 128-byte
// swizzled rows (kernels/cuda/wgmma.cu), 1024-byte aligned: (BLOCK_Q + 2 * STAGES * BLOCK_KV)
// * HEAD_DIM * 2 bytes of tiles, plus 2 + 4 * STAGES barriers and 1 KiB of alignment slack.
//
// Masks: full and causal attention of equal lengths; a ragged last block reads zeros past N
// (TMA fills them) and masks those keys. Rows of a causal tile see keys up to their own.
//
// Compile-time parameters (kernels/hopper.py): BLOCK_Q, BLOCK_KV, HEAD_DIM, DTYPE_BF16,
// STAGES, PINGPONG, INTRA, PERSISTENT.
#include "mma_tiles.cu"
#include "wgmma.cu"

#ifndef STAGES
#define STAGES 2
#endif
#ifndef PINGPONG
#define PINGPONG 0
#endif
#ifndef INTRA
#define INTRA 0
#endif
#ifndef SKELETON  // 1: the consumers wait for each K/V block and free it, doing no arithmetic
#define SKELETON 0  // (data/gpu/probe/hopper_cycles.py --skeleton: a CTA's fixed costs)
#endif
#if SKELETON && (PINGPONG || INTRA)
#error "SKELETON builds have no softmax overlap"
#endif
#ifndef PERSISTENT
#define PERSISTENT 0
#endif
#ifndef STEP_CLOCK  // 1: the consumers stamp %clock64 at four points of each step
#define STEP_CLOCK 0  // (data/gpu/probe/hopper_phase.py: the warpgroups' phase on the GPU)
#endif
#if STEP_CLOCK && (SKELETON || PERSISTENT)
#error "STEP_CLOCK builds are of the forward's loop, one tile a CTA"
#endif
#ifndef CTA_CLOCK  // 1: each CTA records its SM and the global timer at four points
#define CTA_CLOCK 0  // (data/gpu/probe/hopper_rounds.py: the rounds of CTAs on the GPU)
#endif
#if CTA_CLOCK && (STEP_CLOCK || PERSISTENT)
#error "CTA_CLOCK builds take one tile a CTA and no step stamps"
#endif

// The tiles of this CTA, k counting them: with PERSISTENT, blockIdx.x, blockIdx.x + gridDim.x,
// ... (a grid of fewer CTAs than tiles); without, the one tile blockIdx.x (a CTA per tile, and
// no loop in the code).
#if PERSISTENT
#define TILE_LOOP(tile, k) for (int tile = blockIdx.x, k = 0; tile < tiles; tile += gridDim.x, ++k)
#else
#define TILE_LOOP(tile, k) for (int tile = blockIdx.x, k = 0; k < 1; ++k)
#endif

constexpr int CONSUMERS = BLOCK_Q / 64;
constexpr int NT = (CONSUMERS + 1) * 128;
constexpr int CB = HEAD_DIM / 64;  // column blocks of 64 elements (128 bytes)
constexpr int Q_BYTES = BLOCK_Q * HEAD_DIM * 2;
constexpr int KV_BYTES = BLOCK_KV * HEAD_DIM * 2;
constexpr int NS = BLOCK_KV / 2;   // S accumulators a thread (64 x BLOCK_KV over 128 threads)
constexpr int NO = HEAD_DIM / 2;   // O accumulators a thread
// registers a thread after setmaxnreg; the CTA's 65536 hold 128 producer threads and the rest
constexpr int PRODUCER_REGS = CONSUMERS == 3 ? 32 : 24;
constexpr int CONSUMER_REGS = CONSUMERS == 3 ? 160 : 240;
static_assert(128 * PRODUCER_REGS + 128 * CONSUMERS * CONSUMER_REGS <= 65536, "register file");
static_assert(BLOCK_Q % 64 == 0 && CONSUMERS >= 1 && CONSUMERS <= 3, "BLOCK_Q: 64, 128 or 192");
static_assert(HEAD_DIM % 64 == 0 && HEAD_DIM <= 256, "HEAD_DIM: 64, 128, 192 or 256");
static_assert(BLOCK_KV == 64 || BLOCK_KV == 128 || BLOCK_KV == 176 || BLOCK_KV == 192 ||
                  BLOCK_KV == 256, "BLOCK_KV: a wgmma N of wgmma.cu");
static_assert(!PINGPONG || CONSUMERS == 2, "PINGPONG takes two consumer warpgroups");

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define WGMMA_S CAT(wgmma_ss_n, BLOCK_KV)
#define WGMMA_O CAT(CAT(wgmma_rs_n, HEAD_DIM), _tb)

// STEP_CLOCK = 1: warp 0 of each consumer warpgroup (all on sub-partition 0) stamps the SM's
// clock at four points of key block j: 0 its K block has arrived, 1 S is done, 2 the softmax
// is done (P packed), 3 O += P V is done; in the first STAMP_CTAS CTAs, first STAMP_STEPS
// blocks. Each stamp's memory clobber keeps the code on its side: the stamped build is its
// own kernel (hopper_phase.py times it beside the plain one and replays its own SASS).
#if STEP_CLOCK
constexpr int STAMP_CTAS = 132, STAMP_STEPS = 128, STAMP_POINTS = 4;
extern "C" {  // unmangled: the host reads it by name
__device__ unsigned long long hopper_stamps[STAMP_CTAS * (BLOCK_Q / 64) * STAMP_STEPS * STAMP_POINTS];
}
#endif
__device__ __forceinline__ void stamp(int c, int j, int point) {
#if STEP_CLOCK
    unsigned long long t;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)::"memory");
    if ((threadIdx.x & 127) == 0 && blockIdx.x < STAMP_CTAS && j < STAMP_STEPS)
        hopper_stamps[((blockIdx.x * (BLOCK_Q / 64) + c) * STAMP_STEPS + j) * STAMP_POINTS + point] = t;
#endif
}

// CTA_CLOCK = 1: each of the first CLOCK_CTAS CTAs records its %smid and %globaltimer (ns, one
// timer for the whole chip) at 0 its start, 1 its Q tile arrived (consumer warpgroup 0), 2 its
// last key block done (warpgroup 0), 3 warpgroup 0's rows of O stored (the copy has read them).
#if CTA_CLOCK
constexpr int CLOCK_CTAS = 4096, CLOCK_FIELDS = 5;  // %smid, then the four times
extern "C" {  // unmangled: the host reads it by name
__device__ unsigned long long hopper_cta_clock[CLOCK_CTAS * CLOCK_FIELDS];
}
#endif
__device__ __forceinline__ void cta_clock(int point) {
#if CTA_CLOCK
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
    if (blockIdx.x >= CLOCK_CTAS) return;
    hopper_cta_clock[blockIdx.x * CLOCK_FIELDS + 1 + point] = t;
    if (point == 0) {
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        hopper_cta_clock[blockIdx.x * CLOCK_FIELDS] = sm;
    }
#endif
}

// Named barriers 1 and 2 (0 is __syncthreads): warpgroup c waits on its own before its matrix
// products and, once they are issued, arrives on the other's, handing it the tensor cores.
__device__ __forceinline__ void named_sync(int id) {
    asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory");
}
__device__ __forceinline__ void named_arrive(int id) {
    asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory");
}

// Ping-pong turns (PINGPONG = 1): warpgroup c waits for its turn on named barrier 1 + c and,
// once its products are issued, hands the turn to the other on 2 - c.
__device__ __forceinline__ void turn_begin(int c) {
#if PINGPONG
    named_sync(1 + c);
#endif
}
__device__ __forceinline__ void turn_end(int c) {
#if PINGPONG
    named_arrive(2 - c);
#endif
}

// S (64 x BLOCK_KV) = Q rows of this warpgroup (at q_base) times the K buffer at k_base^T.
__device__ __forceinline__ void issue_s(float* acc_s, u32 q_base, u32 k_base) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
        const u32 qa = kmajor_step(q_base, BLOCK_Q, kk), ka = kmajor_step(k_base, BLOCK_KV, kk);
        WGMMA_S(acc_s, sw128_desc(qa, 16), sw128_desc(ka, 16), kk > 0);
    }
}

// O += P (registers) times the V buffer at v_base (N-major: head_dim contiguous).
__device__ __forceinline__ void issue_o(float* acc_o, u32 (*pa)[4], u32 v_base) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BLOCK_KV / 16; ++kk)
        WGMMA_O(acc_o, pa[kk], sw128_desc(v_base + kk * 16 * 128, BLOCK_KV * 128), 1);
}

__device__ __forceinline__ void pack_p(u32 (*pa)[4], const float* acc_s) {
#pragma unroll
    for (int kk = 0; kk < BLOCK_KV / 16; ++kk) acc_to_a(pa[kk], acc_s + 8 * kk, acc_s + 8 * kk + 4);
}

// Keeps P's registers allocated (and unchanged) until the product that reads them is done.
__device__ __forceinline__ void fence_p(u32 (*pa)[4]) {
#pragma unroll
    for (int kk = 0; kk < BLOCK_KV / 16; ++kk)
#pragma unroll
        for (int x = 0; x < 4; ++x) asm volatile("" : "+r"(pa[kk][x]) : : "memory");
}

__device__ __forceinline__ void rescale(float* acc_o, const float* alpha) {
#pragma unroll
    for (int x = 0; x < NO; ++x) acc_o[x] *= alpha[(x >> 1) & 1];
}

// A consumer thread's place: rows row0 and row0 + 8, columns 2 tq, 2 tq + 1 of each n8 tile.
struct Consumer {
    int c, row0, tq, first_row, n, causal;
    float sl2;  // softmax scale x log2(e): scores in log2 units

    // Online softmax of key block j: masks keys past N (and past the row when causal),
    // turns S into P = exp2(S sl2 - m) in place, updates m and l, and gives alpha, the factor
    // that rescales the rows of O from the old maximum to the new.
    __device__ __forceinline__ void softmax(float* acc_s, int j, float* m, float* l,
                                            float* alpha) const {
        const bool edge = (j + 1) * BLOCK_KV > n || (causal && (j + 1) * BLOCK_KV - 1 > first_row);
        if (edge) {
#pragma unroll
            for (int x = 0; x < NS; ++x) {
                const int col = j * BLOCK_KV + 8 * (x / 4) + 2 * tq + (x & 1);
                const int row = row0 + ((x & 2) ? 8 : 0);
                if (col >= n || (causal && col > row)) acc_s[x] = NEG_INF;
            }
        }
        float mx[2] = {NEG_INF, NEG_INF}, mb[2];
#pragma unroll
        for (int x = 0; x < NS; ++x) mx[(x >> 1) & 1] = fmaxf(mx[(x >> 1) & 1], acc_s[x]);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float m_new = fmaxf(m[r], quad_max(mx[r]) * sl2);
            mb[r] = m_new == NEG_INF ? 0.f : m_new;  // a row that has seen no key yet
            alpha[r] = exp2f(m[r] - mb[r]);
            m[r] = m_new;
            l[r] *= alpha[r];
        }
#pragma unroll
        for (int x = 0; x < NS; ++x) {
            const int r = (x >> 1) & 1;
            acc_s[x] = exp2f(fmaf(acc_s[x], sl2, -mb[r]));
            l[r] += acc_s[x];
        }
    }
};

// One tile: Q block i of (batch x head) bh, its key/value head, and the key blocks it visits.
struct Tile {
    int i, bh, bkv, nblocks;
};

__device__ __forceinline__ Tile tile_of(int tile, int tr, int n, int heads, int kv_heads,
                                        int causal) {
    Tile w;
    w.i = tile % tr;
    w.bh = tile / tr;
    const int b = w.bh / heads, h = w.bh % heads;
    w.bkv = b * kv_heads + h / (heads / kv_heads);
    const int tc = (n + BLOCK_KV - 1) / BLOCK_KV, last_q = min(n, (w.i + 1) * BLOCK_Q) - 1;
    w.nblocks = causal ? min(tc, last_q / BLOCK_KV + 1) : tc;
    return w;
}

__device__ __forceinline__ void consume(const Tile& w, int k, int it0, int t, int c, int n,
                                        int causal, float scale, u32 sq, u32 sk, u32 sv, u32 bars,
                                        const void* tm_o, float* lse);

extern "C" __global__ void __launch_bounds__(NT, 1)
    hopper_fwd(const void* __restrict__ tm_q, const void* __restrict__ tm_k,
               const void* __restrict__ tm_v, const void* __restrict__ tm_o, float* __restrict__ lse,
               int batch, int heads, int kv_heads, int n, float scale, int causal) {
    extern __shared__ unsigned char smem_raw[];
    const u32 base = (smem_addr(smem_raw) + 1023u) & ~1023u;
    const u32 sq = base;
    const u32 sk = sq + Q_BYTES;                    // STAGES K buffers
    const u32 sv = sk + STAGES * KV_BYTES;          // STAGES V buffers
    const u32 bars = sv + STAGES * KV_BYTES;        // 8 bytes each:
    const u32 q_full = bars;                        // Q_i arrived
    const u32 k_full = bars + 8;                    // K buffer s arrived: k_full + 8 s
    const u32 v_full = k_full + 8 * STAGES;
    const u32 k_empty = v_full + 8 * STAGES;        // K buffer s read by every consumer
    const u32 v_empty = k_empty + 8 * STAGES;
    const u32 q_empty = v_empty + 8 * STAGES;       // Q buffer (and O staged in it) read

    const int tr = (n + BLOCK_Q - 1) / BLOCK_Q;
    const int tiles = tr * batch * heads;
    const int wg = threadIdx.x / 128, t = threadIdx.x % 128;

    if (threadIdx.x == 0) {
        cta_clock(0);
        mbar_init(q_full, 1);
        mbar_init(q_empty, CONSUMERS);
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(k_full + 8 * s, 1);
            mbar_init(v_full + 8 * s, 1);
            mbar_init(k_empty + 8 * s, 128 * CONSUMERS);
            mbar_init(v_empty + 8 * s, 128 * CONSUMERS);
        }
        mbar_fence_init();
    }
    __syncthreads();

    if (wg == 0) {  // producer
        setmaxnreg_dec<PRODUCER_REGS>();
        if (t != 0) return;
        tma_prefetch_map(tm_q);
        tma_prefetch_map(tm_k);
        tma_prefetch_map(tm_v);
        int it = 0;  // K/V blocks this CTA has loaded: buffer it % STAGES, round it / STAGES
        TILE_LOOP(tile, k) {
            const Tile w = tile_of(tile, tr, n, heads, kv_heads, causal);
            if (k > 0) mbar_wait(q_empty, (k - 1) & 1);  // the last tile's O has been copied out
            mbar_expect_tx(q_full, Q_BYTES);
            for (int c = 0; c < CB; ++c)
                tma_load_3d(sq + c * BLOCK_Q * 128, tm_q, 64 * c, w.i * BLOCK_Q, w.bh, q_full);
            for (int j = 0; j < w.nblocks; ++j, ++it) {
                const int s = it % STAGES;
                const u32 free_parity = ((it / STAGES) + 1) & 1;  // the round before this one
                if (it >= STAGES) mbar_wait(k_empty + 8 * s, free_parity);
                mbar_expect_tx(k_full + 8 * s, KV_BYTES);
                for (int c = 0; c < CB; ++c)
                    tma_load_3d(sk + s * KV_BYTES + c * BLOCK_KV * 128, tm_k, 64 * c, j * BLOCK_KV,
                                w.bkv, k_full + 8 * s);
                if (it >= STAGES) mbar_wait(v_empty + 8 * s, free_parity);
                mbar_expect_tx(v_full + 8 * s, KV_BYTES);
                for (int c = 0; c < CB; ++c)
                    tma_load_3d(sv + s * KV_BYTES + c * BLOCK_KV * 128, tm_v, 64 * c, j * BLOCK_KV,
                                w.bkv, v_full + 8 * s);
            }
        }
        return;
    }

    // consumers: warpgroup c = wg - 1 owns rows 64 c .. 64 c + 63 of Q_i
    setmaxnreg_inc<CONSUMER_REGS>();
    int it = 0;  // K/V blocks this CTA has used, as the producer counts them
    TILE_LOOP(tile, k) {
        const Tile w = tile_of(tile, tr, n, heads, kv_heads, causal);
        consume(w, k, it, t, wg - 1, n, causal, scale, sq, sk, sv, bars, tm_o, lse);
        it += w.nblocks;
    }
}

// One tile of a consumer warpgroup: its 64 rows of O and L. ``k``: the CTA's tiles before this
// one (the Q buffer's round); ``it0``: the K/V blocks before it (the buffers' rounds).
__device__ __forceinline__ void consume(const Tile& w, int k, int it0, int t, int c, int n,
                                        int causal, float scale, u32 sq, u32 sk, u32 sv, u32 bars,
                                        const void* tm_o, float* lse) {
    const u32 q_full = bars, k_full = bars + 8, v_full = k_full + 8 * STAGES;
    const u32 k_empty = v_full + 8 * STAGES, v_empty = k_empty + 8 * STAGES;
    const u32 q_empty = v_empty + 8 * STAGES;
    const int i = w.i, bh = w.bh, nblocks = w.nblocks;
    Consumer u;
    u.c = c;
    u.row0 = i * BLOCK_Q + 64 * u.c + 16 * (t / 32) + (t % 32) / 4;
    u.tq = t % 4;
    u.first_row = i * BLOCK_Q + 64 * u.c;
    u.n = n;
    u.causal = causal;
    u.sl2 = scale * LOG2E;
    float acc_o[NO], acc_s[NS], m[2] = {NEG_INF, NEG_INF}, l[2] = {0.f, 0.f}, alpha[2];
    u32 pa[BLOCK_KV / 16][4];  // P as the A operand of k-step kk: S's n8 tiles 2 kk, 2 kk + 1
#pragma unroll
    for (int x = 0; x < NO; ++x) acc_o[x] = 0.f;
    const u32 q_base = sq + c * 64 * 128;

#if PINGPONG
    if (c == 1) named_arrive(1);  // warpgroup 0 takes the tensor cores first
#endif
    mbar_wait(q_full, k & 1);
    if (c == 0 && t == 0) cta_clock(1);
#if !INTRA
    for (int j = 0; j < nblocks; ++j) {
        const int s = (it0 + j) % STAGES;
        const u32 parity = ((it0 + j) / STAGES) & 1;
        mbar_wait(k_full + 8 * s, parity);
#if SKELETON
        mbar_arrive(k_empty + 8 * s);
        mbar_wait(v_full + 8 * s, parity);
        mbar_arrive(v_empty + 8 * s);
#else
        stamp(c, j, 0);
        turn_begin(c);
        issue_s(acc_s, q_base, sk + s * KV_BYTES);
        wgmma_commit();
        turn_end(c);
        wgmma_wait<0>();
        fence_regs<NS>(acc_s);
        stamp(c, j, 1);
        mbar_arrive(k_empty + 8 * s);
        u.softmax(acc_s, j, m, l, alpha);
        rescale(acc_o, alpha);
        pack_p(pa, acc_s);
        stamp(c, j, 2);
        mbar_wait(v_full + 8 * s, parity);
        turn_begin(c);
        issue_o(acc_o, pa, sv + s * KV_BYTES);
        wgmma_commit();
        turn_end(c);
        wgmma_wait<0>();
        fence_regs<NO>(acc_o);
        stamp(c, j, 3);
        mbar_arrive(v_empty + 8 * s);
#endif
    }
#else
    // S_j = Q K_j^T is issued with O += P_{j-1} V_{j-1}; the softmax of S_j runs while the
    // latter executes (FlashAttention-3 Sec. 3.2). O is rescaled by block j - 1's factor
    // between the two issues, when no product writes it, so that nothing but converting P
    // waits for the product (ptxas hoists a wait above the softmax when more work follows it).
    const int s0 = it0 % STAGES;
    mbar_wait(k_full + 8 * s0, (it0 / STAGES) & 1);
    turn_begin(c);
    issue_s(acc_s, q_base, sk + s0 * KV_BYTES);
    wgmma_commit();
    turn_end(c);
    wgmma_wait<0>();
    fence_regs<NS>(acc_s);
    mbar_arrive(k_empty + 8 * s0);
    u.softmax(acc_s, 0, m, l, alpha);
    pack_p(pa, acc_s);
    for (int j = 1; j < nblocks; ++j) {
        const int s = (it0 + j) % STAGES, sp = (it0 + j - 1) % STAGES;
        mbar_wait(k_full + 8 * s, ((it0 + j) / STAGES) & 1);
        stamp(c, j, 0);
        turn_begin(c);
        issue_s(acc_s, q_base, sk + s * KV_BYTES);
        wgmma_commit();
        rescale(acc_o, alpha);
        mbar_wait(v_full + 8 * sp, ((it0 + j - 1) / STAGES) & 1);
        issue_o(acc_o, pa, sv + sp * KV_BYTES);
        wgmma_commit();
        turn_end(c);
        wgmma_wait<1>();  // S_j done, P_{j-1} V_{j-1} may still run
        fence_regs<NS>(acc_s);
        stamp(c, j, 1);
        mbar_arrive(k_empty + 8 * s);
        u.softmax(acc_s, j, m, l, alpha);
        stamp(c, j, 2);
        wgmma_wait<0>();
        fence_regs<NO>(acc_o);
        stamp(c, j, 3);  // here O += P_{j-1} V_{j-1}
        fence_p(pa);  // the product read P_{j-1} from these registers until now
        mbar_arrive(v_empty + 8 * sp);
        pack_p(pa, acc_s);
    }
    const int sl = (it0 + nblocks - 1) % STAGES;
    rescale(acc_o, alpha);
    mbar_wait(v_full + 8 * sl, ((it0 + nblocks - 1) / STAGES) & 1);
    turn_begin(c);
    issue_o(acc_o, pa, sv + sl * KV_BYTES);
    wgmma_commit();
    turn_end(c);
    wgmma_wait<0>();
    fence_regs<NO>(acc_o);
    fence_p(pa);
    mbar_arrive(v_empty + 8 * sl);
#endif
#if PINGPONG
    if (c == 0) named_sync(1);  // balance warpgroup 1's last hand-over
#endif
    if (c == 0 && t == 0) cta_clock(2);
    const int row0 = u.row0, tq = u.tq;

    // O = acc / l, staged in this warpgroup's rows of the Q buffer (no product reads them any
    // more) in the copies' swizzled layout and written by TMA, whole 128-byte rows, rows past N
    // left out by the copy; L = m + log l (natural log of the scaled scores), 4 bytes a row
    const int r_wg = row0 - (i * BLOCK_Q + 64 * c);  // row within the warpgroup's 64
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float lr = quad_sum(l[r]);
        const int row = row0 + 8 * r, rr = r_wg + 8 * r;
        const float inv = lr > 0.f ? 1.f / lr : 0.f;
#pragma unroll
        for (int nb = 0; nb < HEAD_DIM / 8; ++nb) {
            const float* a = acc_o + 4 * nb + 2 * r;
            const u32 at = q_base + (nb / 8) * BLOCK_Q * 128 + rr * 128 + (((nb % 8) ^ (rr % 8)) << 4) + 4 * tq;
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(pack2(a[0] * inv, a[1] * inv)) : "memory");
        }
        if (row < n && tq == 0) lse[(long)bh * n + row] = lr > 0.f ? (m[r] + log2f(lr)) * 0.6931471805599453f : POS_INF;
    }
    fence_proxy_async();  // these stores, then the copy engine's reads of them
    asm volatile("bar.sync %0, 128;\n" ::"r"(3 + c) : "memory");
    const int wg_row = i * BLOCK_Q + 64 * c;
    if (t == 0) {
        if (wg_row < n) {
            for (int cb = 0; cb < CB; ++cb) tma_store_3d(tm_o, 64 * cb, wg_row, bh, q_base + cb * BLOCK_Q * 128);
            tma_store_commit_and_wait();  // the copy has read the staged rows
        }
        if (c == 0) cta_clock(3);
        mbar_arrive(q_empty);
    }
}
