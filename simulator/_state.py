"""The replay engine's state, laid out: the columns of its arrays and the named tuples that carry
them (numba passes namedtuples of arrays as they are). ``_engine`` replays with it, ``_requests``
serves memory requests with it, ``simulate`` fills it in."""

from __future__ import annotations

from collections import namedtuple

from flashio.simulator.trace import Op

LOAD, STORE, REDUCE, MMA, EW, EXP, SHARED, SYNC, ALLOC, FREE = (int(o) for o in Op)

# float configuration vector
(
    C_L2_BW,
    C_HBM_BW,
    C_L2_LAT,
    C_HBM_LAT,
    C_TENSOR,
    C_FP32,
    C_SFU,
    C_SMEM,
    C_OCCUPY,
    C_SYNC,
    C_SHARED_ISSUE,
    C_PREFETCH,
    C_SM_MEM_BW,
    C_DURATION,
    C_CTA_LEAD,
    C_CTA_TAIL,
    C_SM_RED_BW,
    C_RED_HOLD,
    C_STREAMS,
    C_PACED,
    C_FILLS,
    C_BULK_BW,
    C_BULK_L2_LAT,
    C_BULK_HBM_LAT,
    C_BULK_ST_BW,
    C_BULK_ST_LAT,
    C_CTA_GAP,
    C_STATIC,
) = range(28)
N_CFG = 28
# C_OCCUPY, C_DURATION: an arithmetic event of work w at rate R occupies its SM's pipe for
# w / R * C_OCCUPY and takes its CTA at least w / R * C_DURATION (docs/model.md)
# C_BULK_*: the requests of tensors the kernel moves by bulk copies (TMA; ``Memory.bulk``):
# the rates at which an SM's path sends the loads and the stores, what a load adds after the
# L2 and after HBM, what a store adds after the L2 (``GPUSpec.request_costs``)
# C_CTA_GAP: the block scheduler's turnaround, seconds: a slot whose CTA has ended takes the next
# one that much later (docs/model.md, "Kernels, CTAs and occupancy")
# C_STATIC: 1 where a persistent grid's tile scheduler is static: the slot whose CTA c has ended
# takes CTA c + slots (a grid of ``slots`` CTAs taking every slots-th tile), not the next in order
# C_CTA_LEAD, C_CTA_TAIL: seconds a CTA spends before its first event and after its last (its
# compiled prologue and epilogue, with the issue model; else 0)
# C_RED_HOLD: 1 where the kernel's loop sends its reductions after all its tensor-core work,
# so that its SM waits while they leave at C_SM_RED_BW (docs/model.md, "Reductions")
# C_STREAMS: 1 where requests stream into the L2 and HBM (docs/model.md, "Streamed requests")
# C_FILLS: 1 where a read that hits a line whose fill is in flight waits for it to land
# C_PACED: with CTA drift, the most CTAs the paces by age cover (0: no drift); the pace of the
# CTA with r older ones among the n computing on its SM is cfg[N_CFG + n (n - 1) / 2 + r] (in
# place of C_DURATION)
# C_PREFETCH: 0 none; PREFETCH_STEP: a step's first arithmetic issues the next step's loads;
# PREFETCH_STAGED: single-buffered K and V (FlashAttention-2's loop): the step's last matrix
# product issues the next step's loads but its last, which its step issues once the others
# have landed and which its first arithmetic other than a matrix product (the softmax) waits
# for, or else its last product (docs/model.md, "Model options"); PREFETCH_AT_PRODUCT: the
# step's last matrix product issues all the next step's loads (Triton's 2-stage loop commits
# its copies behind its asynchronous P V wgmma)
PREFETCH_STEP, PREFETCH_STAGED, PREFETCH_AT_PRODUCT = 1, 2, 3
# integer slot state columns; S_PF_* mark the LOADs of the next step issued early (prefetch),
# S_LATE the staged load its step issues later (its position; -1: none; LATE_IN_FLIGHT: issued,
# not yet waited for)
S_CTA, S_PTR, S_END, S_LIVE_SMEM, S_LIVE_REGS, S_STEP, S_PF_STEP, S_PF_LO, S_PF_HI = range(9)
# with streamed requests, the requests a CTA waits for, by what they are (its operands, the next
# step's prefetched operands, its stores, its staged load), each an (L2, HBM) pair of request
# ids, -1 for none: of each server's, the one whose stream ends last
S_REQ_READY, S_REQ_NEXT, S_REQ_STORES, S_REQ_LATE = 9, 11, 13, 15
S_LATE = 17
LATE_IN_FLIGHT = -2
N_SLOT_INT = 18
# float slot state columns; F_READY_NEXT: when the prefetched loads have arrived; F_FIN: when
# the CTA's own work ends (its epilogue), once it has reached its end (-1 before);
# F_READY_LATE: when the staged load has arrived
F_T, F_READY, F_STORES, F_START, F_READY_NEXT, F_FIN, F_READY_LATE = range(7)
N_SLOT_FLOAT = 7
# per-SM servers: the arithmetic pipes, then the SM's path to the memory system; with CTA drift,
# one queue clock per age follows from U_AGES (the work of the CTA with r older ones and theirs)
U_TENSOR, U_FP32, U_SFU, U_SMEM, U_SM_MEM = range(5)
N_UNITS = U_AGES = 5
# per-tensor counters
T_GLOBAL_READ, T_GLOBAL_WRITE, T_HBM_READ, T_HBM_WRITE = range(4)
# busy seconds of each resource (per-SM ones summed over SMs)
B_L2, B_HBM, B_TENSOR, B_FP32, B_SFU, B_SMEM, B_SM_MEM = range(7)
# scalar integer counters
(
    K_MMA_FLOPS,
    K_EW_FLOPS,
    K_EXPS,
    K_SHARED_BYTES,
    K_DIRTIED,
    K_PEAK_SMEM,
    K_PEAK_REGS,
    K_BAD_SMEM,
    K_SERVER_FULL,
) = range(9)
N_CNT = 9
# runner registers: next CTA to dispatch, slot waiting for a CTA outside the window (or -1),
# next checkpoint (index into Kernel.marks)
R_NEXT, R_PENDING, R_MARK = range(3)
N_REG = 3
# checkpoint columns (Kernel.snaps): the time a marked CTA is dispatched, the busy seconds then,
# the bytes the L2 holds and the dirty ones among them, then each tensor's HBM read and write
# bytes (2 columns a tensor)
SNAP_T, SNAP_BUSY, SNAP_HELD, SNAP_DIRTY, SNAP_HBM = 0, 1, 8, 9, 10

# The engine's state, named (numba passes namedtuples of arrays as they are).
# What the memory system keeps across kernels: the L2 (``l2_on`` false: no L2), the L2 and HBM
# servers' free times (or, streamed, their state ``sv``: _streams.Streams), the spill
# pseudo-tensor and each tensor's space, the tensors the kernel moves by bulk copies (1 each;
# set per kernel), and the counters.
Memory = namedtuple("Memory", "l2_on l2 srv sv local space bulk tstat busy cnt")
# One kernel: its CTA count, the SM count (slot s runs on SM s % sm_stride), the register spill
# bytes a CTA stores and loads back per step, the shared memory a CTA declares, when it ends so
# far, the per-CTA timeline, and the CTAs at whose dispatch the memory system is checkpointed
# (ascending; empty for none) with their checkpoints (simulator.sampled).
Kernel = namedtuple(
    "Kernel",
    "n_ctas sm_stride spill_first spill_store spill_load smem_limit kernel_end span marks snaps",
)
# The resident CTAs: integer and float slot state, the per-SM servers, the runner registers.
Slots = namedtuple("Slots", "si sf units reg")
# The heap of SMs: key time, key slot, SM, and its size (one-element array).
Heap = namedtuple("Heap", "ht hs hm hn")
