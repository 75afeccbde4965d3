"""The replay engine's hot loop (jitted). docs/model.md states the model this code implements.

Requests reach every server in order of (issue time, slot), as if all resident CTAs advanced
together in simulated time. The engine keeps that order cheaply on two levels: a heap of SMs,
keyed by the (time, slot) of each SM's earliest CTA, and within the root SM a switch between its
few CTAs. A CTA replays its events until one needs an order it does not have: arithmetic needs
to come before its siblings' (the SM's pipes are theirs alone), memory requests and CTA ends
before every other CTA's (L2, HBM and the dispatcher are shared).

Servers are first-come-first-served virtual clocks: a request of w units on a server of rate R
issued at time t finishes at max(t, free) + w / R, and the server is then free from that time.
With C_STREAMS the L2 and HBM serve each request as a stream of bytes arriving over its SM
path's time, first come, first served (``_streams``): a CTA then waits for its loads until their
last bytes' departure is final, that is until no other CTA can still start a request before
their streams end. L2 and HBM are global servers; each SM's path to the memory system, and its
tensor, FP32, SFU and shared-memory pipes are per SM (the pipes: one arithmetic server per SM,
with ``ModelOptions.shared_issue``; with C_PACED, CTA drift, that server keeps a clock per CTA
age and serves the oldest CTA first).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from flashio.simulator._cpu_prefetch import prefetch_ahead
from flashio.simulator._l2 import HOT, held_bytes
from flashio.simulator._requests import landed, request, settle, track
from flashio.simulator._state import (
    ALLOC,
    B_TENSOR,
    C_CTA_GAP,
    C_CTA_LEAD,
    C_CTA_TAIL,
    C_DURATION,
    C_FP32,
    C_OCCUPY,
    C_PACED,
    C_PREFETCH,
    C_RED_HOLD,
    C_SFU,
    C_SHARED_ISSUE,
    C_SM_RED_BW,
    C_SMEM,
    C_STATIC,
    C_STREAMS,
    C_SYNC,
    C_TENSOR,
    EW,
    EXP,
    F_FIN,
    F_READY,
    F_READY_LATE,
    F_READY_NEXT,
    F_START,
    F_STORES,
    F_T,
    K_BAD_SMEM,
    K_EW_FLOPS,
    K_EXPS,
    K_MMA_FLOPS,
    K_PEAK_REGS,
    K_PEAK_SMEM,
    K_SHARED_BYTES,
    LATE_IN_FLIGHT,
    LOAD,
    MMA,
    N_CFG,
    PREFETCH_AT_PRODUCT,
    PREFETCH_STAGED,
    R_MARK,
    R_NEXT,
    R_PENDING,
    REDUCE,
    S_CTA,
    S_END,
    S_LATE,
    S_LIVE_REGS,
    S_LIVE_SMEM,
    S_PF_HI,
    S_PF_LO,
    S_PF_STEP,
    S_PTR,
    S_REQ_LATE,
    S_REQ_NEXT,
    S_REQ_READY,
    S_REQ_STORES,
    S_STEP,
    SHARED,
    SNAP_BUSY,
    SNAP_DIRTY,
    SNAP_HBM,
    SNAP_HELD,
    SNAP_T,
    STORE,
    SYNC,
    T_HBM_READ,
    T_HBM_WRITE,
    U_AGES,
    U_FP32,
    U_SFU,
    U_SM_MEM,
    U_SMEM,
    U_TENSOR,
)


@njit(inline="always", **HOT)
def _less(t1, s1, t2, s2):
    # bitwise, not short-circuit: no branch to mispredict (keys are in no predictable order)
    return (t1 < t2) | ((t1 == t2) & (s1 < s2))


ARITY = 4  # children per heap node: a shallower heap, fewer unpredictable branches per sink
NO_SLOT = 1 << 62  # slot number of an empty key (sorts after every slot)


@njit(inline="always", **HOT)
def _earlier(i, j, ht, hs):
    """Whichever of heap positions i and j holds the earlier key (a select, not a branch)."""
    return i if _less(ht[i], hs[i], ht[j], hs[j]) else j


@njit(**HOT)
def _sift_down(ht, hs, hm, n, i):
    """Restore the heap below position i after its key grew: the earliest child moves up into
    the hole until the sinking key is earlier than every child. Keys sink nearly to the bottom
    (3.4 of 3.5 levels, FA2 at N = 16k on 132 SMs): a full level's earliest child is found
    in two rounds of pairs, without branches. Positions are unsigned: an index that cannot be
    negative needs no wraparound (three instructions an access)."""
    i, n = np.uint64(i), np.uint64(n)
    one = np.uint64(1)
    t, s, sm = ht[i], hs[i], hm[i]
    while True:
        first = np.uint64(ARITY) * i + one
        if first + np.uint64(ARITY) <= n:
            two = first + np.uint64(2)
            m = _earlier(
                _earlier(first, first + one, ht, hs), _earlier(two, two + one, ht, hs), ht, hs
            )
        elif first < n:
            m = first
            c = first + one
            while c < n:
                m = _earlier(c, m, ht, hs)
                c += one
        else:
            break
        if not _less(ht[m], hs[m], t, s):
            break
        ht[i], hs[i], hm[i] = ht[m], hs[m], hm[m]
        i = m
    ht[i], hs[i], hm[i] = t, s, sm


@njit(inline="always", **HOT)
def _wait(ht, hs, hm, n, ev, si, sf, s, t, lt, ls):
    """CTA s stops at time t for an earlier CTA. If none is on its own SM (it stays the SM's
    earliest), the SM's key grows to (t, s) and it sinks in the heap."""
    sf[s, F_T] = t
    prefetch_ahead(ev, si[s, S_PTR], si[s, S_END])
    if _less(t, s, lt, ls):
        ht[0], hs[0] = t, s
        _sift_down(ht, hs, hm, n, 0)


@njit(inline="always", **HOT)
def _stop(si, sf, s, ptr, ready, stores):
    """Write back the state a running CTA keeps in locals."""
    si[s, S_PTR] = ptr
    sf[s, F_READY] = ready
    sf[s, F_STORES] = stores


@njit(**HOT)
def start_cta(s, c, t, si, sf, cta_off, win_c0, lead=0.0):
    """Slot s takes CTA c at time t; its first event issues ``lead`` later (its prologue)."""
    si[s, S_CTA] = c
    si[s, S_PTR] = cta_off[c - win_c0]
    si[s, S_END] = cta_off[c - win_c0 + 1]
    si[s, S_LIVE_SMEM] = 0
    si[s, S_LIVE_REGS] = 0
    si[s, S_STEP] = -1
    si[s, S_PF_STEP] = -1
    si[s, S_PF_LO] = -1
    si[s, S_PF_HI] = -1
    si[s, S_LATE] = -1
    sf[s, F_T] = t + lead
    sf[s, F_READY] = t + lead
    sf[s, F_STORES] = t + lead
    sf[s, F_START] = t
    sf[s, F_READY_NEXT] = t + lead
    sf[s, F_FIN] = -1.0
    sf[s, F_READY_LATE] = t + lead
    for col in range(S_REQ_READY, S_REQ_LATE + 2):
        si[s, col] = -1


@njit(inline="always", **HOT)
def _next_step_loads(ev, ptr, end, step):
    """The LOAD events that open the outer-loop step after ``step``: (lo, hi) indices into
    ``ev`` (hi == lo: none). The next step is that of the first later event whose step differs
    from ``step``; it must be >= 0, and its leading events must be LOADs."""
    i = ptr
    while i < end and ev[i].step == step:
        i += 1
    if i == end or ev[i].step < 0:
        return i, i
    nxt = ev[i].step
    j = i
    while j < end and ev[j].step == nxt and np.int64(ev[j].op) == LOAD:
        j += 1
    return i, j


@njit(inline="always", **HOT)
def _last_product(ev, ptr, end, step):
    """Whether the MMA event at ``ptr`` is its step's last (P V in a forward step)."""
    i = ptr + 1
    while i < end and ev[i].step == step:
        if np.int64(ev[i].op) == MMA:
            return False
        i += 1
    return True


@njit(**HOT)
def _sample_memory(mem, span, c):
    """The memory system as CTA ``c`` ends (timeline columns 3-5): HBM bytes moved so far in
    the run, bytes the L2 holds, and how many of them are dirty."""
    hbm = 0.0
    for tensor in range(mem.tstat.shape[0]):
        hbm += mem.tstat[tensor, T_HBM_READ] + mem.tstat[tensor, T_HBM_WRITE]
    span[c, 3] = hbm
    if mem.l2_on:
        span[c, 4], span[c, 5] = held_bytes(mem.l2)


@njit(**HOT)
def _dispatch(s, c, t, slots, cta_off, win_c0, cfg, kern, mem):
    """Slot s, free since time t, takes CTA c (the next in order, or the slot's own next with
    C_STATIC) the block scheduler's turnaround (C_CTA_GAP) later; if c is the next marked CTA,
    the memory system is checkpointed first."""
    si, sf, reg = slots.si, slots.sf, slots.reg
    t += cfg[C_CTA_GAP]
    marks, m = kern.marks, reg[R_MARK]
    if m < marks.shape[0] and c == marks[m]:
        snaps = kern.snaps
        snaps[m, SNAP_T] = t
        for b in range(mem.busy.shape[0]):
            snaps[m, SNAP_BUSY + b] = mem.busy[b]
        if mem.l2_on:
            snaps[m, SNAP_HELD], snaps[m, SNAP_DIRTY] = held_bytes(mem.l2)
        for tensor in range(mem.tstat.shape[0]):
            snaps[m, SNAP_HBM + 2 * tensor] = mem.tstat[tensor, T_HBM_READ]
            snaps[m, SNAP_HBM + 2 * tensor + 1] = mem.tstat[tensor, T_HBM_WRITE]
        reg[R_MARK] = m + 1
    start_cta(s, c, t, si, sf, cta_off, win_c0, cfg[C_CTA_LEAD])
    reg[R_NEXT] = c + 1


@njit(inline="always", **HOT)
def _ages(si, sf, sm, sm_stride, s, t):
    """Of the CTAs on slot ``s``'s SM: how many launched before it, and, of those computing at
    ``t`` (their operands have arrived), how many there are with it and how many of them
    launched before it (CTA drift: ``C_PACED``)."""
    older, n_on, older_on, me = 0, 1, 0, si[s, S_CTA]
    s2 = sm
    while s2 < si.shape[0]:
        c2 = si[s2, S_CTA]
        if s2 != s and c2 >= 0:
            older += c2 < me
            if sf[s2, F_READY] <= t:
                n_on += 1
                older_on += c2 < me
        s2 += sm_stride
    return older, n_on, older_on


@njit(cache=True, nogil=True, **HOT)
def run_window(ev, cta_off, win_c0, win_c1, kern, cfg, mem, slots, heap):
    """Replay until the kernel ends (returns 0) or a slot needs a CTA beyond the loaded window
    (returns 1; ``reg[R_PENDING]`` holds the slot, whose SM stays at the heap's root, and
    ``reg[R_NEXT]`` the CTA it needs).

    ``ev``, ``cta_off``: the window's events and each CTA's first event, for CTAs
    ``win_c0 <= c < win_c1``; ``kern``: a Kernel; ``mem``: Memory; ``slots``: Slots; ``heap``:
    Heap."""
    return _run(ev, cta_off, win_c0, win_c1, kern, cfg, mem, slots, heap, False)


@njit(cache=True, nogil=True, **HOT)
def run_window_plain(ev, cta_off, win_c0, win_c1, kern, cfg, mem, slots, heap):
    """``run_window`` for a kernel replayed without spills, prefetches, streamed requests or
    CTA drift (``plain``): compiled without their code, the loop keeps more of its state in
    registers."""
    return _run(ev, cta_off, win_c0, win_c1, kern, cfg, mem, slots, heap, True)


@njit(inline="always", **HOT)
def _run(ev, cta_off, win_c0, win_c1, kern, cfg, mem, slots, heap, plain):
    # the body of both: ``plain`` is a constant in each, so the compiler drops what it turns off
    n_ctas, sm_stride = kern.n_ctas, kern.sm_stride
    spill_first, spill_store, spill_load = kern.spill_first, kern.spill_store, kern.spill_load
    spill_region = 0 if plain else max(spill_first + spill_store, spill_load)
    smem_limit, kernel_end, span = kern.smem_limit, kern.kernel_end, kern.span
    local, space, busy, cnt = mem.local, mem.space, mem.busy, mem.cnt
    si, sf, units, reg = slots.si, slots.sf, slots.units, slots.reg
    ht, hs, hm, hn = heap.ht, heap.hs, heap.hm, heap.hn
    n = hn[0]
    n_slots = si.shape[0]
    occupy, duration = cfg[C_OCCUPY], cfg[C_DURATION]
    tail = cfg[C_CTA_TAIL]
    prefetch = False if plain else cfg[C_PREFETCH] > 0
    staged = False if plain else cfg[C_PREFETCH] == PREFETCH_STAGED
    # the step's last product issues the next step's loads (staged: all but the last)
    at_product = staged or (False if plain else cfg[C_PREFETCH] == PREFETCH_AT_PRODUCT)
    streams = False if plain else cfg[C_STREAMS] > 0
    paced = False if plain else cfg[C_PACED] > 0
    n_ages = units.shape[1] - U_AGES  # CTA drift's queue clocks, one per age
    if reg[R_PENDING] >= 0:  # resume: give the waiting slot its CTA
        s = reg[R_PENDING]
        reg[R_PENDING] = -1
        _dispatch(s, reg[R_NEXT], sf[s, F_T], slots, cta_off, win_c0, cfg, kern, mem)
    # Two levels of order. The heap holds the SMs, keyed by the (time, slot) of their earliest
    # CTA; the root SM is being replayed. Within it, its earliest CTA runs until it passes its
    # earliest sibling (a cheap switch within the SM) or, at an event that needs the global
    # order, the earliest CTA of another SM (the root sinks with its new key).
    root, ct, cs = -1, np.inf, NO_SLOT  # the root SM and the earliest key below it
    while n > 0:
        sm = hm[0]
        if sm != root:  # the heap below an unchanged root is unchanged
            root, ct, cs = sm, np.inf, NO_SLOT
            for c in range(1, min(ARITY + 1, n)):
                if _less(ht[c], hs[c], ct, cs):
                    ct, cs = ht[c], hs[c]
        # the SM's earliest CTA (s, t) and the earliest of the others (lt, ls)
        # (selects, not branches: which CTA is earliest is unpredictable)
        t, s, lt, ls = np.inf, NO_SLOT, np.inf, NO_SLOT
        s2 = sm
        while s2 < n_slots:
            live = si[s2, S_CTA] >= 0
            t2 = sf[s2, F_T] if live else np.inf
            k2 = s2 if live else NO_SLOT
            earliest, second = _less(t2, k2, t, s), _less(t2, k2, lt, ls)
            lt = t if earliest else (t2 if second else lt)
            ls = s if earliest else (k2 if second else ls)
            t = t2 if earliest else t
            s = k2 if earliest else s
            s2 += sm_stride
        if s == NO_SLOT:  # no CTA left on this SM: it leaves the heap
            n -= 1
            ht[0], hs[0], hm[0] = ht[n], hs[n], hm[n]
            _sift_down(ht, hs, hm, n, 0)
            root = -1
            continue
        # (gt, gs): the earliest CTA on any other SM or on this one, bar s
        gt, gs = (lt, ls) if _less(lt, ls, ct, cs) else (ct, cs)
        # the CTA's state in locals while it runs; written back when it stops
        ptr, end, ready, stores = si[s, S_PTR], si[s, S_END], sf[s, F_READY], sf[s, F_STORES]
        waits = False  # the CTA stops for an earlier one (one exit: one copy of the heap's code)
        while True:
            finished = ptr == end
            op = np.int64(ev[ptr].op) if not finished else -1
            step = ev[ptr].step if not finished else -1
            # Ordering gate: an event is replayed only once no other CTA could still issue an
            # earlier request to the resource it uses. Memory requests and CTA ends (dispatch)
            # share global state: the CTA must be the earliest of all, (t, s) < (gt, gs).
            # Arithmetic uses its own SM's pipes: it must be the earliest CTA on that SM,
            # (t, s) < (lt, ls). SYNC, ALLOC and FREE touch only the CTA.
            # register spills: each new step of the outer loop stores and reloads the registers
            # the kernel needs beyond the per-thread limit (local memory, through the L2)
            if spill_region > 0 and step >= 0 and step != si[s, S_STEP]:
                if not _less(t, s, gt, gs):
                    waits = True
                    break
                off = s * spill_region
                for o in (STORE, LOAD):
                    nb = spill_store if o == STORE else spill_load
                    if o == STORE and si[s, S_STEP] == -1:
                        nb += spill_first  # the CTA's first step: the stores outside the loop
                    if nb == 0:
                        continue
                    done, r_l2, r_hbm = request(
                        mem, cfg, units[sm, U_SM_MEM:], o, local, off, 1, nb, nb, nb, t
                    )
                    if o == STORE:
                        stores = max(stores, done)
                        track(mem, si, s, S_REQ_STORES, r_l2, r_hbm)
                    else:
                        ready = max(ready, done)
                        track(mem, si, s, S_REQ_READY, r_l2, r_hbm)
                si[s, S_STEP] = step
            if prefetch and ptr == si[s, S_PF_LO] and ptr < si[s, S_PF_HI]:
                # the step whose loads were prefetched begins: they are this step's operands
                # (once it is its SM's earliest CTA: its siblings' paces see its operands)
                if not _less(t, s, lt, ls):
                    waits = True
                    break
                ready = max(ready, sf[s, F_READY_NEXT])
                if streams:
                    track(mem, si, s, S_REQ_READY, si[s, S_REQ_NEXT], si[s, S_REQ_NEXT + 1])
                    si[s, S_REQ_NEXT] = si[s, S_REQ_NEXT + 1] = -1
            if prefetch and ptr >= si[s, S_PF_LO] and ptr < si[s, S_PF_HI]:
                ptr += 1  # issued already, at the prefetch
                continue
            # staged loads: the step's late load waits for its other operands; its first
            # arithmetic other than a product (the softmax), or else its last product (pv),
            # waits for the late load; pv issues the next step's loads
            late = staged and ptr == si[s, S_LATE]
            pv = (
                at_product
                and op == MMA
                and step >= 0
                and si[s, S_PF_STEP] != step
                and _last_product(ev, ptr, end, step)
            )
            awaits = (
                staged and si[s, S_LATE] == LATE_IN_FLIGHT and (pv or (op > MMA and op <= SHARED))
            )
            if awaits:
                if not _less(t, s, lt, ls):
                    waits = True
                    break
                ready = max(ready, sf[s, F_READY_LATE])
            needs = (op >= MMA and op <= SYNC) or late  # what waits for the operands
            if streams and needs:
                # streamed operands: known once no other CTA can still start a request before
                # their streams end, the earliest other at (gt, gs) (ties in the order of
                # (time, slot), as every request)
                for col in (S_REQ_READY, S_REQ_LATE):
                    if (col == S_REQ_LATE and not awaits) or (
                        si[s, col] < 0 and si[s, col + 1] < 0
                    ):
                        continue
                    done, known, end_by = landed(mem, cfg, si, s, col)
                    if not known:
                        if not _less(end_by, s, gt, gs):
                            t = max(t, end_by)
                            waits = True
                            break
                        done = settle(mem, cfg, si, s, col, end_by)
                    ready = max(ready, done)
                    si[s, col] = si[s, col + 1] = -1
                if waits:
                    break
            if needs and ready > t:
                t = ready  # operands still in flight: wait for them
            if awaits:
                si[s, S_LATE] = -1
            if late:  # issued now, awaited by the step's softmax or last product
                if not _less(t, s, gt, gs):
                    waits = True
                    break
                e = ev[ptr]
                done, r_l2, r_hbm = request(
                    mem, cfg, units[sm, U_SM_MEM:], LOAD, e.tensor, e.offset_bytes, e.rows,
                    e.row_bytes, e.row_stride_bytes, e.bytes, t,
                )  # fmt: skip
                sf[s, F_READY_LATE] = done
                track(mem, si, s, S_REQ_LATE, r_l2, r_hbm)
                si[s, S_LATE] = LATE_IN_FLIGHT
                ptr += 1
                continue
            # prefetch: at the first arithmetic event of a step (staged or at the product: at
            # its last product), the loads that open the next step are issued (cp.async); they
            # are memory requests
            issues = pv if at_product else op >= MMA and op <= SHARED
            if prefetch and issues and step >= 0 and si[s, S_PF_STEP] != step:
                if not _less(t, s, gt, gs):
                    waits = True
                    break
                si[s, S_PF_STEP] = step
                lo, hi = _next_step_loads(ev, ptr, end, step)
                if staged and hi - lo >= 2:  # the last of them waits for the others
                    hi -= 1
                    si[s, S_LATE] = hi
                si[s, S_PF_LO] = lo
                si[s, S_PF_HI] = hi
                sf[s, F_READY_NEXT] = t
                si[s, S_REQ_NEXT] = si[s, S_REQ_NEXT + 1] = -1
                for i in range(lo, hi):
                    e = ev[i]
                    done, r_l2, r_hbm = request(
                        mem, cfg, units[sm, U_SM_MEM:], LOAD, e.tensor, e.offset_bytes, e.rows,
                        e.row_bytes, e.row_stride_bytes, e.bytes, t,
                    )  # fmt: skip
                    sf[s, F_READY_NEXT] = max(sf[s, F_READY_NEXT], done)
                    track(mem, si, s, S_REQ_NEXT, r_l2, r_hbm)
            if finished or op <= REDUCE:
                first = _less(t, s, gt, gs)
            elif op <= SHARED:
                first = _less(t, s, lt, ls)
            else:
                first = True
            if not first:
                waits = True
                break
            if finished:  # the CTA is done once its epilogue ran and its loads and stores landed
                if sf[s, F_FIN] < 0:
                    sf[s, F_FIN] = t + tail
                if streams:
                    done, known, end_by = landed(mem, cfg, si, s, S_REQ_READY)
                    done2, known2, end_by2 = landed(mem, cfg, si, s, S_REQ_STORES)
                    if not (known and known2):
                        end_by = max(end_by, end_by2)
                        if not _less(end_by, s, gt, gs):
                            t = max(t, end_by)
                            waits = True
                            break
                        done = settle(mem, cfg, si, s, S_REQ_READY, end_by)
                        done2 = landed(mem, cfg, si, s, S_REQ_STORES)[0]
                    ready, stores = max(ready, done), max(stores, done2)
                fin = max(sf[s, F_FIN], ready, stores)
                kernel_end[0] = max(kernel_end[0], fin)
                if span.shape[0] > 0:  # timeline requested: start, end and SM of this CTA
                    c_done = si[s, S_CTA]
                    span[c_done, 0] = sf[s, F_START]
                    span[c_done, 1] = fin
                    span[c_done, 2] = sm
                    _sample_memory(mem, span, c_done)
                if paced:  # the younger CTAs move up an age: their clocks with them
                    older = _ages(si, sf, sm, sm_stride, s, t)[0]
                    for r in range(U_AGES + older, U_AGES + n_ages - 1):
                        units[sm, r] = units[sm, r + 1]
                # the next CTA in order, or with a static tile scheduler the slot's own next
                c = si[s, S_CTA] + n_slots if cfg[C_STATIC] > 0 else reg[R_NEXT]
                sf[s, F_T] = fin
                if c < n_ctas:
                    if c >= win_c1:
                        reg[R_PENDING] = s
                        reg[R_NEXT] = c
                        hn[0] = n
                        return 1
                    _dispatch(s, c, fin, slots, cta_off, win_c0, cfg, kern, mem)
                else:  # no CTA left for this slot
                    si[s, S_CTA] = -1
                break  # the SM's earliest CTA may have changed
            e = ev[ptr]
            if op <= REDUCE:  # LOAD, STORE, REDUCE
                done, r_l2, r_hbm = request(
                    mem, cfg, units[sm, U_SM_MEM:], op, e.tensor, e.offset_bytes, e.rows,
                    e.row_bytes, e.row_stride_bytes, e.bytes, t,
                )  # fmt: skip
                if op == LOAD:
                    ready = max(ready, done)
                    track(mem, si, s, S_REQ_READY, r_l2, r_hbm)
                else:
                    stores = max(stores, done)
                    track(mem, si, s, S_REQ_STORES, r_l2, r_hbm)
                if op == REDUCE and cfg[C_RED_HOLD] > 0:
                    # nothing of the step is left to run beside them: the CTA and the SM's
                    # arithmetic (one server with the issue model) wait while they leave
                    hold = e.bytes / cfg[C_SM_RED_BW]
                    units[sm, 0] = max(units[sm, 0], t) + hold
                    t = max(t + hold, units[sm, 0])
            elif op <= SHARED:  # MMA, ELEMENTWISE, EXP, SHARED
                if op == MMA:
                    u, rate, work = U_TENSOR, cfg[C_TENSOR], e.flops
                    cnt[K_MMA_FLOPS] += work
                elif op == EW:
                    u, rate, work = U_FP32, cfg[C_FP32], e.flops
                    cnt[K_EW_FLOPS] += work
                elif op == EXP:
                    u, rate, work = U_SFU, cfg[C_SFU], e.flops
                    cnt[K_EXPS] += work
                else:
                    u, rate, work = U_SMEM, cfg[C_SMEM], e.bytes
                    cnt[K_SHARED_BYTES] += work
                start = t  # operands have arrived (see above)
                # with shared issue, every kind of arithmetic queues at one server per SM
                q = 0 if cfg[C_SHARED_ISSUE] > 0 else u
                cost = work / rate
                busy[B_TENSOR + u] += cost * occupy
                if paced:
                    # CTA drift: the SM serves its CTAs oldest first (the work of a CTA with
                    # r older ones queues behind theirs and its own, at clock U_AGES + r),
                    # and a CTA steps no faster than its pace by age among those computing
                    older, n_on, older_on = _ages(si, sf, sm, sm_stride, s, t)
                    pace = cfg[N_CFG + n_on * (n_on - 1) // 2 + older_on]
                    start = max(start, units[sm, q])  # where a reduction holds the SM
                    for r in range(U_AGES + older, U_AGES + n_ages):
                        units[sm, r] = max(units[sm, r], start) + cost * occupy
                    t = max(start + cost * pace, units[sm, U_AGES + older])
                else:
                    units[sm, q] = max(units[sm, q], start) + cost * occupy
                    t = max(start + cost * duration, units[sm, q])
            elif op == SYNC:
                t = t + cfg[C_SYNC]
            else:  # ALLOC, FREE
                sign = 1 if op == ALLOC else -1
                col = S_LIVE_SMEM if space[e.tensor] == 1 else S_LIVE_REGS
                si[s, col] += sign * e.bytes
                if si[s, S_LIVE_SMEM] > cnt[K_PEAK_SMEM]:
                    cnt[K_PEAK_SMEM] = si[s, S_LIVE_SMEM]
                if si[s, S_LIVE_REGS] > cnt[K_PEAK_REGS]:
                    cnt[K_PEAK_REGS] = si[s, S_LIVE_REGS]
                if si[s, S_LIVE_SMEM] > smem_limit:
                    cnt[K_BAD_SMEM] += 1
            ptr += 1
        if waits:
            _stop(si, sf, s, ptr, ready, stores)
            _wait(ht, hs, hm, n, ev, si, sf, s, t, lt, ls)
    hn[0] = n
    return 0
