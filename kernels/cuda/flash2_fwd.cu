// FlashAttention-2 forward (Dao 2023, Algorithm 1), the loop order of kernels/flash2.py.
//
// One CTA per (batch, head, Q block i), blockIdx.x = (b * H + h) * Tr + i, the schedule's CTA
// index. Q_i is loaded once; the CTA streams K_j, V_j (j < Tc, or up to the diagonal when
// causal), keeps S_ij, P_ij, O_i, m_i and l_i in registers, and writes O_i (input dtype) and the
// logsumexp L_i = m_i + log(l_i) (fp32) once. Warps split the Q rows (split-Q): warp w owns rows
// w * BLOCK_Q / WARPS .. +BLOCK_Q / WARPS and never exchanges partial results.
//
// Shared memory: Q_i, K_j, V_j tiles, (BLOCK_Q + 2 * BLOCK_KV) * HEAD_DIM * 2 bytes: exactly
// kernels/flash2.py's smem_bytes. K_{j+1} is fetched while P_ij V_j runs and V_j while S_ij is
// computed (one buffer each; two barriers per step order the overwrites).
//
// Compile-time parameters (defines injected by kernels/gpu.py): BLOCK_Q, BLOCK_KV, HEAD_DIM,
// WARPS, DTYPE_BF16, MASKED.
//
// MASKED = 1 builds the kernel for the masks of kernels/mask.py beyond full and causal
// attention of equal lengths: nk keys (queries aligned to their end), a window of `left` keys
// before and `right` after the query's position (-1: none), and packed segments (their
// cumulative ends; n_segs = 0: one sequence). Each query sees one interval of keys, so a CTA
// visits the key blocks from its first seeing row's first key to its last row's last key,
// masks the partial ones element by element, and a row that sees no key gets O = 0 and
// L = +inf. MASKED = 0 (full and causal) compiles to the code it always did.
//
// BLOCK_SPARSE = 1 (with MASKED = 1) adds a block mask (kernels/block_mask.py): `tiles`, the
// schedule's Tr x Tc tile states (kernels.mask.tile_states: 0 skipped, 1 partial, 2 full),
// and the CTA walks only the key blocks of its row that are not skipped, prefetching the next
// one. The mask's blocks hold whole tiles (kernels/gpu.py checks), so a partial tile is
// partial by the rows' intervals alone and is masked as above.
//
// SPLIT_KV = 1 (with MASKED = 1) builds FlashDecoding (kernels/flash_decode.py) from the same
// loop: `flash_decode`, one CTA per (unit, Q block, split) as the schedule numbers them, walks
// its split's share of the key blocks and writes a normalized partial output and its
// logsumexp in fp32 (O_accum, LSE_accum; a split that sees no key writes 0 and -inf), or, with
// one split, O and L as the forward does; a unit is a (batch, query head), or with the group
// packed (one query, several query heads per kv head) a (batch, kv head) whose tile rows are
// the group's query heads, all at the query's position. `flash_decode_combine` then merges
// the splits of each row: L = log sum_s exp(LSE_s), O = sum_s exp(LSE_s - L) O_s (a row that
// sees no key: O = 0, L = +inf).
//
// PAGED = 1 (with SPLIT_KV = 1) reads K and V from a paged cache (kernels/paged_kv.py): pools
// of (pages, kv_heads, PAGE_SIZE, HEAD_DIM) and `table`, each sequence's page ids
// (pages_per_seq a row, int32). A key block spans PAGE_SLOTS pages at most (PAGE_SIZE divides
// BLOCK_KV or is a multiple of it); warp 0 reads the ids of block j + 1 from L2 while block j
// is computed and puts them in shared memory (two slots of PAGE_SLOTS ints after V); each
// thread copies its rows of a page from one look-up of that page (load_tile_paged).
#include "mma_tiles.cu"

#ifndef MASKED
#define MASKED 0
#endif
#ifndef SPLIT_KV
#define SPLIT_KV 0
#endif
#ifndef BLOCK_SPARSE
#define BLOCK_SPARSE 0
#endif
#ifndef PAGED
#define PAGED 0
#endif
// RECORD_CTAS (data/gpu/probe/cta_placement.py only; the kernel builds without it): thread 0
// of each CTA writes its SM (%smid) and %globaltimer at its start and end to cta_log, three
// 64-bit words a CTA
#ifndef RECORD_CTAS
#define RECORD_CTAS 0
#endif
#if SPLIT_KV && !MASKED
#error "SPLIT_KV needs MASKED = 1 (a decoding step's queries sit at the end of its keys)"
#endif
#if BLOCK_SPARSE && (!MASKED || SPLIT_KV)
#error "BLOCK_SPARSE needs MASKED = 1 and no SPLIT_KV"
#endif
#if PAGED && !SPLIT_KV
#error "PAGED needs SPLIT_KV = 1 (flash_decode reads the paged cache)"
#endif
#if SPLIT_KV
#define FWD_KERNEL flash_decode
#define ROWPOS(row) ((row) * pos_mul)  // a packed group's rows all sit at query 0
#else
#define FWD_KERNEL flash2_fwd
#define ROWPOS(row) (row)
#endif

constexpr int NT = WARPS * 32;
constexpr int WM = BLOCK_Q / WARPS;  // Q rows per warp
constexpr int MT = WM / 16;          // m16 tiles per warp
constexpr int NS = BLOCK_KV / 8;     // n8 tiles of S per m-tile
constexpr int ND = HEAD_DIM / 8;     // n8 tiles of O per m-tile
#if PAGED
static_assert(BLOCK_KV % PAGE_SIZE == 0 || PAGE_SIZE % BLOCK_KV == 0,
              "PAGE_SIZE must divide BLOCK_KV or be a multiple of it");
constexpr int PAGE_SLOTS = BLOCK_KV % PAGE_SIZE == 0 ? BLOCK_KV / PAGE_SIZE : 1;
static_assert(PAGE_SLOTS <= 32, "a key block's page ids are read by one warp: at most 32");
constexpr long long SMEM_BYTES = (BLOCK_Q + 2LL * BLOCK_KV) * HEAD_DIM * 2 + 2LL * PAGE_SLOTS * 4;
#else
constexpr long long SMEM_BYTES = (BLOCK_Q + 2LL * BLOCK_KV) * HEAD_DIM * 2;
#endif

static_assert(WARPS >= 1 && WARPS <= 32, "warps * 32 threads must be 32..1024");
static_assert(BLOCK_Q % (16 * WARPS) == 0,
              "BLOCK_Q must be a multiple of 16 * WARPS (m16 tiles per warp)");
static_assert(BLOCK_KV % 16 == 0, "BLOCK_KV must be a multiple of 16 (k16 steps of P V)");
static_assert(HEAD_DIM % 16 == 0 && HEAD_DIM <= 256,
              "HEAD_DIM must be a multiple of 16, at most 256");
static_assert(SMEM_BYTES <= 227 * 1024, "Q, K, V tiles exceed 227 KiB of shared memory per CTA");

extern "C" __global__ void flash2_fwd_smem_bytes(long long* out) { out[0] = SMEM_BYTES; }

#if MASKED
#include "key_range.cu"
#endif
#if PAGED
// the page id of the tid-th page key block j spans (row `ids` of the table), from L2; -1 for
// a thread past the block's pages
__device__ __forceinline__ int page_id(const int* ids, int j, int nk, int tid) {
    const int k0 = j * BLOCK_KV, first = k0 / PAGE_SIZE;
    const int span = (min(k0 + BLOCK_KV, nk) - 1) / PAGE_SIZE - first + 1;
    int id = -1;
    if (tid < span) asm volatile("ld.global.cg.s32 %0, [%1];\n" : "=r"(id) : "l"(ids + first + tid));
    return id;
}

// load_tile for key rows k0.. of one head from a paged pool: `head`, the head's first row in
// page 0; `pg`, the ids of the pages the block spans; pages `page_stride` elements apart. A
// thread copies chunk c of rows rt, rt + RPI, ...: where a page holds whole passes of RPI
// rows, the thread looks each page up once and copies its rows at fixed offsets from there,
// as load_tile does; smaller pages look the page up per chunk.
template <int ROWS, int COLS>
__device__ __forceinline__ void load_tile_paged(u16* s, const u16* head, long page_stride,
                                                const int* pg, int k0, int rows_valid, int tid) {
    constexpr int CH = COLS / 8, RPI = NT / CH;  // 16-byte chunks a row, rows a pass
    static_assert(NT % CH == 0 && ROWS % RPI == 0, "a pass of the threads copies whole rows");
    const int rt = tid / CH, c = tid % CH;
    if constexpr (PAGE_SIZE % RPI == 0) {
        constexpr int PER_PAGE = PAGE_SIZE < ROWS ? PAGE_SIZE : ROWS;  // tile rows a page
        const int in_page = k0 % PAGE_SIZE;  // 0 unless one page holds several tiles
#pragma unroll
        for (int pi = 0; pi < ROWS / PER_PAGE; ++pi) {
            const int id = max(pg[pi], 0);  // -1: a page past the keys, none of its rows copied
            const u16* base = head + id * page_stride + (long)(in_page + rt) * COLS + c * 8;
#pragma unroll
            for (int i = 0; i < PER_PAGE / RPI; ++i) {
                const int r = pi * PER_PAGE + i * RPI + rt;
                const bool ok = r < rows_valid;
                cp_async16(s + swz<COLS>(r, c), ok ? base + i * RPI * COLS : head, ok ? 16 : 0);
            }
        }
    } else {
        const int first = k0 / PAGE_SIZE;
#pragma unroll 4
        for (int it = 0; it < ROWS / RPI; ++it) {
            const int r = rt + it * RPI, t = k0 + r;
            const bool ok = r < rows_valid;
            const u16* src =
                ok ? head + pg[t / PAGE_SIZE - first] * page_stride + (t % PAGE_SIZE) * COLS + c * 8
                   : head;
            cp_async16(s + swz<COLS>(r, c), src, ok ? 16 : 0);
        }
    }
}
#endif
#if BLOCK_SPARSE
// the first tile after j in this row of tile states that is not skipped, or `last`
__device__ __forceinline__ int next_tile(const unsigned char* row, int j, int last) {
    do ++j;
    while (j < last && row[j] == 0);
    return j;
}
#endif

extern "C" __global__ void __launch_bounds__(NT)
    FWD_KERNEL(const u16* __restrict__ Q, const u16* __restrict__ K, const u16* __restrict__ V,
               u16* __restrict__ O, float* __restrict__ L,
#if SPLIT_KV
               float* __restrict__ O_accum, float* __restrict__ LSE_accum,
#endif
               int heads, int kv_heads, int n, float scale, int causal
#if MASKED
               , int nk, int left, int right, const int* __restrict__ seg_ends, int n_segs
#endif
#if SPLIT_KV
               , int num_splits, int packed
#endif
#if BLOCK_SPARSE
               , const unsigned char* __restrict__ tiles
#endif
#if PAGED
               , const int* __restrict__ table, int pages_per_seq
#endif
#if RECORD_CTAS
               , unsigned long long* __restrict__ cta_log
#endif
               ) {
#if RECORD_CTAS
    unsigned long long t_start = 0;
    if (threadIdx.x == 0) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_start));
#endif
    extern __shared__ __align__(128) unsigned char smem[];
    u16* sQ = reinterpret_cast<u16*>(smem);
    u16* sK = sQ + BLOCK_Q * HEAD_DIM;
    u16* sV = sK + BLOCK_KV * HEAD_DIM;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
#if !SPLIT_KV
    const int t_q = (n + BLOCK_Q - 1) / BLOCK_Q;
#endif
#if !MASKED
    const int nk = n;
    const int t_kv = (nk + BLOCK_KV - 1) / BLOCK_KV;
#endif
#if SPLIT_KV
    // (unit, Q block, split) as kernels/flash_decode.py numbers the CTAs; `first`: the tile's
    // first row in (batch, head, query) space, whose rows are HEAD_DIM apart either way
    const int grp = heads / kv_heads, rows = packed ? grp : n, pos_mul = packed ? 0 : 1;
    const int t_m = (rows + BLOCK_Q - 1) / BLOCK_Q, per_unit = t_m * num_splits;
    const int unit = blockIdx.x / per_unit, mi = blockIdx.x % per_unit / num_splits;
    const int sp = blockIdx.x % num_splits;
    const int b = packed ? unit / kv_heads : unit / heads;
    const int kvh = packed ? unit % kv_heads : unit % heads / grp;
    const int q0 = mi * BLOCK_Q, r = min(BLOCK_Q, rows - q0);
    const long first = packed ? (long)b * heads + kvh * grp + q0 : (long)unit * n + q0;
    const u16* gQ = Q + first * HEAD_DIM;
#else
    const int bh = blockIdx.x / t_q, i = blockIdx.x % t_q;
    const int b = bh / heads, h = bh % heads, kvh = h / (heads / kv_heads);
    const int q0 = i * BLOCK_Q, r = min(BLOCK_Q, n - q0);
    const u16* gQ = Q + ((long)bh * n + q0) * HEAD_DIM;
#endif
#if PAGED
    // the head's row 0 in page 0; this sequence's page ids; two slots of a block's page ids
    const u16* gK = K + (long)kvh * PAGE_SIZE * HEAD_DIM;
    const u16* gV = V + (long)kvh * PAGE_SIZE * HEAD_DIM;
    const long page_stride = (long)kv_heads * PAGE_SIZE * HEAD_DIM;
    const int* ids = table + (long)b * pages_per_seq;
    int* pg = reinterpret_cast<int*>(sV + BLOCK_KV * HEAD_DIM);
#else
    const u16* gK = K + (long)(b * kv_heads + kvh) * nk * HEAD_DIM;
    const u16* gV = V + (long)(b * kv_heads + kvh) * nk * HEAD_DIM;
#endif
#if MASKED
    // the key blocks this CTA's rows see: from the first row that sees a key (rows that see
    // none are a prefix) to the last row's last key
    int seeing = q0;
    while (seeing < q0 + r &&
           key_range(ROWPOS(seeing), n, nk, causal, left, right, seg_ends, n_segs).hi < 0)
        ++seeing;
    const KeyRange first_kr = key_range(ROWPOS(min(seeing, q0 + r - 1)), n, nk, causal, left,
                                        right, seg_ends, n_segs);
    const KeyRange last_kr =
        key_range(ROWPOS(q0 + r - 1), n, nk, causal, left, right, seg_ends, n_segs);
    const KeyRange top_kr = key_range(ROWPOS(q0), n, nk, causal, left, right, seg_ends, n_segs);
#if SPLIT_KV
    // this split's share of the key blocks: ceil(Tc / splits) each, in order
    const int t_kv = (nk + BLOCK_KV - 1) / BLOCK_KV;
    const int per_split = (t_kv + num_splits - 1) / num_splits;
    const int j_lo = max(seeing < q0 + r ? first_kr.lo / BLOCK_KV : 0, sp * per_split);
    const int last = min(seeing < q0 + r ? last_kr.hi / BLOCK_KV + 1 : 0, (sp + 1) * per_split);
#elif BLOCK_SPARSE
    // the interval's key blocks narrowed to the first and last the block mask keeps
    const unsigned char* tile_row = tiles + (long)i * ((nk + BLOCK_KV - 1) / BLOCK_KV);
    int j_lo = seeing < q0 + r ? first_kr.lo / BLOCK_KV : 0;
    int last = seeing < q0 + r ? last_kr.hi / BLOCK_KV + 1 : 0;
    while (j_lo < last && tile_row[j_lo] == 0) ++j_lo;
    while (last > j_lo && tile_row[last - 1] == 0) --last;
#else
    const int j_lo = seeing < q0 + r ? first_kr.lo / BLOCK_KV : 0;
    const int last = seeing < q0 + r ? last_kr.hi / BLOCK_KV + 1 : 0;
#endif
#else
    const int j_lo = 0;
    const int last = causal ? min(t_kv, (q0 + r - 1) / BLOCK_KV + 1) : t_kv;
#endif
    const float sl2 = scale * LOG2E;  // exp(x * scale) = exp2(x * sl2)

    // Q_i: HBM -> SRAM once per CTA (masked: one that visits a key block); its first K
    // block with it
#if MASKED
    if (j_lo < last) {
        load_tile<BLOCK_Q, HEAD_DIM, NT>(sQ, gQ, HEAD_DIM, r, tid);
        const int k_first = j_lo * BLOCK_KV;
#if PAGED
        const int id = page_id(ids, j_lo, nk, tid);
        if (tid < PAGE_SLOTS) pg[(j_lo & 1) * PAGE_SLOTS + tid] = id;
        __syncthreads();
        load_tile_paged<BLOCK_KV, HEAD_DIM>(sK, gK, page_stride, pg + (j_lo & 1) * PAGE_SLOTS,
                                            k_first, min(BLOCK_KV, nk - k_first), tid);
#else
        load_tile<BLOCK_KV, HEAD_DIM, NT>(sK, gK + (long)k_first * HEAD_DIM, HEAD_DIM,
                                          min(BLOCK_KV, nk - k_first), tid);
#endif
        cp_async_commit();
    }
#else
    load_tile<BLOCK_Q, HEAD_DIM, NT>(sQ, gQ, HEAD_DIM, r, tid);
    load_tile<BLOCK_KV, HEAD_DIM, NT>(sK, gK, HEAD_DIM, min(BLOCK_KV, n), tid);
    cp_async_commit();
#endif

    float o[MT][ND][4];
    float m[MT][2], l[MT][2];  // running max (log2 units, scaled) and this thread's partial sum
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int nd = 0; nd < ND; ++nd)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[mt][nd][e] = 0.f;
        m[mt][0] = m[mt][1] = NEG_INF;
        l[mt][0] = l[mt][1] = 0.f;
    }
    const int wr = warp * WM;  // first row of this warp within the block

#if BLOCK_SPARSE
    for (int j = j_lo; j < last; j = next_tile(tile_row, j, last)) {
#else
    for (int j = j_lo; j < last; ++j) {
#endif
        const int k0 = j * BLOCK_KV;
        cp_async_wait<0>();
        __syncthreads();  // K_j (and Q_i) landed; every warp is done with V_{j-1}
        // V_j: HBM -> SRAM, overlapping S = Q K^T
#if PAGED
        load_tile_paged<BLOCK_KV, HEAD_DIM>(sV, gV, page_stride, pg + (j & 1) * PAGE_SLOTS, k0,
                                            nk - k0, tid);
        // the next block's page ids, from L2 while this block is computed
        const int next_id = j + 1 < last ? page_id(ids, j + 1, nk, tid) : -1;
#else
        load_tile<BLOCK_KV, HEAD_DIM, NT>(sV, gV + (long)k0 * HEAD_DIM, HEAD_DIM, nk - k0, tid);
#endif
        cp_async_commit();

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

#if MASKED
        // a partial block: some query of the tile does not see some key of it
        const bool full = last_kr.lo <= k0 && top_kr.hi >= k0 + BLOCK_KV - 1 && k0 + BLOCK_KV <= nk;
        if (!full) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                    const int row = q0 + wr + mt * 16 + (lane >> 2) + 8 * hf;
                    const KeyRange kr =
                        key_range(ROWPOS(row), n, nk, causal, left, right, seg_ends, n_segs);
#pragma unroll
                    for (int ns = 0; ns < NS; ++ns)
#pragma unroll
                        for (int e = 2 * hf; e < 2 * hf + 2; ++e) {
                            const int col = k0 + ns * 8 + 2 * (lane & 3) + (e & 1);
                            if (col >= nk || col < kr.lo || col > kr.hi) s[mt][ns][e] = NEG_INF;
                        }
                }
        }
#else
        // mask keys past N (last block) and above the diagonal (causal)
        const bool ragged = k0 + BLOCK_KV > n;
        if (ragged || (causal && k0 + BLOCK_KV - 1 > q0)) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int ns = 0; ns < NS; ++ns)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        int row = q0 + wr + mt * 16 + (lane >> 2) + (e >= 2 ? 8 : 0);
                        int col = k0 + ns * 8 + 2 * (lane & 3) + (e & 1);
                        if (col >= n || (causal && col > row)) s[mt][ns][e] = NEG_INF;
                    }
        }
#endif

        // online softmax: m_new = max(m, rowmax S), O and l rescaled by exp(m - m_new)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                float mx = NEG_INF;
#pragma unroll
                for (int ns = 0; ns < NS; ++ns)
                    mx = fmaxf(mx, fmaxf(s[mt][ns][2 * hf], s[mt][ns][2 * hf + 1]));
                mx = quad_max(mx) * sl2;
                const float m_new = fmaxf(m[mt][hf], mx);
                const float m_use = m_new == NEG_INF ? 0.f : m_new;  // a row with no key yet
                const float alpha = exp2f(m[mt][hf] - m_use);
                m[mt][hf] = m_new;
                float sum = 0.f;
#pragma unroll
                for (int ns = 0; ns < NS; ++ns)
#pragma unroll
                    for (int e = 2 * hf; e < 2 * hf + 2; ++e) {
                        float p = exp2f(fmaf(s[mt][ns][e], sl2, -m_use));
                        s[mt][ns][e] = p;
                        sum += p;
                    }
                l[mt][hf] = l[mt][hf] * alpha + sum;
#pragma unroll
                for (int nd = 0; nd < ND; ++nd) {
                    o[mt][nd][2 * hf] *= alpha;
                    o[mt][nd][2 * hf + 1] *= alpha;
                }
            }
        }

        cp_async_wait<0>();
#if PAGED
        if (tid < PAGE_SLOTS) pg[((j + 1) & 1) * PAGE_SLOTS + tid] = next_id;
#endif
        __syncthreads();  // V_j landed; every warp is done with K_j
#if BLOCK_SPARSE
        const int jn = next_tile(tile_row, j, last);
        if (jn < last) {  // the next kept K block: HBM -> SRAM, overlapping P V
            const int k1 = jn * BLOCK_KV;
#else
        if (j + 1 < last) {  // K_{j+1}: HBM -> SRAM, overlapping P V
            const int k1 = k0 + BLOCK_KV;
#endif
#if PAGED
            load_tile_paged<BLOCK_KV, HEAD_DIM>(sK, gK, page_stride,
                                                pg + ((j + 1) & 1) * PAGE_SLOTS, k1, nk - k1, tid);
#else
            load_tile<BLOCK_KV, HEAD_DIM, NT>(sK, gK + (long)k1 * HEAD_DIM, HEAD_DIM, nk - k1, tid);
#endif
            cp_async_commit();
        }

        // O += P V, P rounded to the input dtype as the tensor cores take it
#pragma unroll
        for (int kt = 0; kt < BLOCK_KV / 16; ++kt) {
            u32 pa[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) acc_to_a(pa[mt], s[mt][2 * kt], s[mt][2 * kt + 1]);
#pragma unroll
            for (int dp = 0; dp < ND / 2; ++dp) {
                u32 bf[4];
                frag_b_t<HEAD_DIM>(bf, sV, dp * 16, kt * 16, lane);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma16816(o[mt][2 * dp], pa[mt], bf);
                    mma16816(o[mt][2 * dp + 1], pa[mt], bf + 2);
                }
            }
        }
    }

#if SPLIT_KV
    // one split: O and L as the forward writes them (through the staging below); several: this
    // split's normalized partial output and logsumexp in fp32, straight from the registers (a
    // split that sees no key: O_s = 0, LSE_s = -inf)
    if (num_splits > 1) {
        // rows of (batch, head, query) space: units / (units per batch) batches (packed: n = 1)
        const long total = (long)heads * n * (gridDim.x / per_unit / (packed ? kv_heads : heads));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const float lsum = quad_sum(l[mt][hf]);
                const float inv = lsum > 0.f ? 1.f / lsum : 0.f;
                const int row = wr + mt * 16 + (lane >> 2) + 8 * hf;
                if (row >= r) continue;
                const long at = (long)sp * total + first + row;
                float* dst = O_accum + at * HEAD_DIM + 2 * (lane & 3);
#pragma unroll
                for (int nd = 0; nd < ND; ++nd)
                    *reinterpret_cast<float2*>(dst + nd * 8) =
                        make_float2(o[mt][nd][2 * hf] * inv, o[mt][nd][2 * hf + 1] * inv);
                if ((lane & 3) == 0)
                    LSE_accum[at] = lsum > 0.f ? m[mt][hf] / LOG2E + logf(lsum) : NEG_INF;
            }
        return;
    }
// the O and L row of tile row `row`, and whether it is a real row
#define OUT_ROW(row) (first + (row))
#define ROW_OK(row) ((row) < r)
#else
#define OUT_ROW(row) ((long)bh * n + q0 + row)  // unparenthesized: the expressions as
#define ROW_OK(row) (q0 + row < n)              // they were before SPLIT_KV, the same code
#endif
    // O_i /= l_i, staged through this warp's own rows of the Q tile for 16-byte stores;
    // L_i = m_i + log(l_i) in natural-log units
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const float lsum = quad_sum(l[mt][hf]);
#if MASKED
            const float inv = lsum > 0.f ? 1.f / lsum : 0.f;  // a row that sees no key: O = 0
#else
            const float inv = 1.f / lsum;
#endif
            const int row = wr + mt * 16 + (lane >> 2) + 8 * hf;
#pragma unroll
            for (int nd = 0; nd < ND; ++nd) {
                u32 v2 = pack2(o[mt][nd][2 * hf] * inv, o[mt][nd][2 * hf + 1] * inv);
                *reinterpret_cast<u32*>(sQ + swz<HEAD_DIM>(row, nd) + 2 * (lane & 3)) = v2;
            }
            if ((lane & 3) == 0 && ROW_OK(row))
#if MASKED
                L[OUT_ROW(row)] =
                    lsum > 0.f ? m[mt][hf] / LOG2E + logf(lsum) : __int_as_float(0x7f800000);  // +inf
#else
                L[OUT_ROW(row)] = m[mt][hf] / LOG2E + logf(lsum);
#endif
        }
    }
    __syncwarp();
    constexpr int CH = HEAD_DIM / 8;
    u16* gO = O + OUT_ROW(wr) * HEAD_DIM;
    for (int idx = lane; idx < WM * CH; idx += 32) {
        const int rr = idx / CH, c = idx % CH;
        if (ROW_OK(wr + rr))
            *reinterpret_cast<uint4*>(gO + rr * HEAD_DIM + c * 8) =
                *reinterpret_cast<const uint4*>(sQ + swz<HEAD_DIM>(wr + rr, c));
    }
#if RECORD_CTAS
    if (threadIdx.x == 0) {
        unsigned int sm;
        unsigned long long t_end;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_end));
        cta_log[3 * blockIdx.x] = sm;
        cta_log[3 * blockIdx.x + 1] = t_start;
        cta_log[3 * blockIdx.x + 2] = t_end;
    }
#endif
}

#if SPLIT_KV
// rows per combine CTA: flash-attn's kBlockM of its combine kernel (kernels/flash_decode.py's
// combine_rows); flash-attn allows at most 128 splits
constexpr int COMBINE_ROWS = HEAD_DIM % 128 == 0 ? 4 : HEAD_DIM % 64 == 0 ? 8 : 16;
constexpr int MAX_SPLITS = 128;

// One CTA per COMBINE_ROWS rows of (batch, head, query) space, `total` rows in all: a warp per
// row weighs the splits, w_s = exp(LSE_s - L) with L = log sum_s exp(LSE_s) (in shared
// memory), then every thread sums w_s O_s for pairs of columns of the CTA's rows.
extern "C" __global__ void __launch_bounds__(NT)
    flash_decode_combine(const float* __restrict__ O_accum, const float* __restrict__ LSE_accum,
                         u16* __restrict__ O, float* __restrict__ L, long long total,
                         int num_splits) {
    __shared__ float weight[COMBINE_ROWS][MAX_SPLITS];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const long long r0 = (long long)blockIdx.x * COMBINE_ROWS;
    const int r = (int)min((long long)COMBINE_ROWS, total - r0);
    for (int row = warp; row < r; row += WARPS) {
        const float* lse = LSE_accum + r0 + row;
        float mx = NEG_INF;
        for (int sp = lane; sp < num_splits; sp += 32) mx = fmaxf(mx, lse[sp * total]);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        float sum = 0.f;
        if (mx != NEG_INF)
            for (int sp = lane; sp < num_splits; sp += 32) sum += exp2f((lse[sp * total] - mx) * LOG2E);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
        const float all = mx == NEG_INF ? NEG_INF : mx + logf(sum);  // -inf: no split saw a key
        for (int sp = lane; sp < num_splits; sp += 32)
            weight[row][sp] = all == NEG_INF ? 0.f : exp2f((lse[sp * total] - all) * LOG2E);
        if (lane == 0) L[r0 + row] = all == NEG_INF ? POS_INF : all;
    }
    __syncthreads();
    constexpr int PAIRS = HEAD_DIM / 2;
    for (int idx = tid; idx < r * PAIRS; idx += NT) {
        const int row = idx / PAIRS, c = idx % PAIRS;
        const float* src = O_accum + (r0 + row) * HEAD_DIM + 2 * c;
        float a = 0.f, bsum = 0.f;
        for (int sp = 0; sp < num_splits; ++sp) {
            const float2 x = *reinterpret_cast<const float2*>(src + sp * total * HEAD_DIM);
            a = fmaf(weight[row][sp], x.x, a);
            bsum = fmaf(weight[row][sp], x.y, bsum);
        }
        *reinterpret_cast<u32*>(O + (r0 + row) * HEAD_DIM + 2 * c) = pack2(a, bsum);
    }
}
#endif
