"""Replay warp programs on one SM sub-partition: cycles per main-loop step.

A kernel's CTAs on one SM spread their warps over the SM's sub-partitions (SMSPs), each with
one warp scheduler that issues at most one instruction per cycle. ``replay`` runs, on one SMSP,
the warps that land there (``ceil(ctas * warps_per_cta / sub_partitions)`` on the busiest:
the SM numbers its warp slots CTA after CTA and deals them out in turn), each executing a
``simulator.sass.WarpProgram`` for a few steps, and reports the cycles per step in steady
state. It models, per instruction:

- the **issue slot**: one instruction per cycle per SMSP; of the warps that can issue, the one
  that issued last goes on (greedy), else the one that has waited longest
  (``IssueModel.issue_order``);
- the **stall count** the compiler scheduled (fixed-latency dependencies: the warp's next
  instruction issues that many cycles later, at least one);
- **scoreboards**: a variable-latency instruction (MUFU, shared memory, shuffles) releases its
  write barrier ``latency`` cycles after issue (``latency_jitter`` early or late) and its read
  barrier ``read_latency`` cycles after (per class: ``read_latency_of``); an instruction waits
  for the scoreboards in its wait mask;
- **pipes**: each class occupies its pipe for ``interval`` cycles per warp instruction (the
  reciprocal of the pipe's per-SMSP throughput); a pipe that frees up during a cycle takes
  the next instruction in that cycle, so fractional intervals average out; shared-memory
  instructions (and spills, whose L1 is the same SRAM) hold the SMSP's link to the port for
  their bytes at the SM's bandwidth, wait in an MIO queue of ``mio_queue`` entries, and
  occupy the SM's shared-memory port at a quarter of its bandwidth (the four SMSPs are
  symmetric, so each sees a quarter of the port); their latency runs from when the port
  takes them;
- **wgmma** (HGMMA): asynchronous. Issuing one takes an issue slot; it then queues at the
  tensor pipe, which it holds ``tensor_flops / rate`` cycles; the group it commits completes
  ``latency["hgmma"]`` cycles after the pipe finishes it, and ``WARPGROUP.DEPBAR`` waits for
  the groups it names; its operands in shared memory take the port's time as it issues;
- **tensor-pipe interference**: while an SMSP's tensor pipe runs an HMMA or HGMMA, other
  instructions of class c hold their pipes ``1 / tensor_overlap[t/c]`` times as long (t the
  tensor instruction's class; ``t/c/own`` where the tensor instruction is the same warp's
  and the rate differs), and a class of rate 0 waits until the pipe is done, as measured on
  the H200 (data/gpu/probe/overlap.py: MUFU runs nearly at full rate, FFMA barely beside
  wgmma and not at all beside another warp's mma.sync);
- **CTA barriers**: a warp at ``BAR.SYNC`` waits until every warp of its CTA on this SMSP has
  arrived (the other SMSPs run the same warps of the CTA in lockstep by symmetry), then all go on
  ``bar_latency + bar_latency_per_warp * warps`` cycles later;
- **named barriers** (``BAR.SYNC id, count`` and ``BAR.ARV id, count``): a barrier completes
  when this SMSP's share of its count has arrived (a quarter of its warps, at least one),
  releasing the warps that wait at it as a CTA barrier does; an arrive does not wait. Where a
  register holds the id, a sync waits at its own warpgroup's barrier and an arrive goes to the
  other's: FlashAttention-3's ping-pong, where each consumer warpgroup waits for its turn at
  the tensor cores and hands the turn over once its products are issued (the convention of
  kernels/cuda/hopper_fwd.cu and FlashAttention-3's); warpgroup 0 takes the first turn
  (``first_turn``).

Global loads and cp.async waits cost nothing here: the event engine (``simulator._engine``)
brings the tiles and holds a CTA until they have arrived. The replay's answer, cycles per step
for one CTA alone and for ``ctas`` together, is what the engine charges for a step's
arithmetic (docs/model.md, "Issue model").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from flashio.simulator.errors import FlashioError
from flashio.simulator.sass import CLASS_ID, CLASSES, NO_BARRIER, WarpProgram

__all__ = [
    "IssueModel",
    "StepTime",
    "execute_roles",
    "first_turn",
    "pc_cycles",
    "rank_paces",
    "replay",
    "smsp_warps",
]

ISSUE_ORDERS = ("greedy", "round-robin")  # IssueModel.issue_order
WARPGROUP_STARTS = ("together", "spread")  # IssueModel.warpgroup_start
# pipes of an SMSP; the shared-memory port is accounted separately (bytes)
PIPES = ("tensor", "xu", "fma", "alu", "mio", "uniform", "control", "lsu")
_PIPE_OF = {
    "hmma": "tensor",
    "hgmma": "tensor",
    "mufu": "xu",
    "fma": "fma",
    "imad": "fma",
    "alu": "alu",
    "uniform": "uniform",
    "shfl": "mio",
    "ldsm": "mio",
    "lds": "mio",
    "sts": "mio",
    "ldgsts": "mio",
    "global": "lsu",
    "local": "lsu",
    "bar": "control",
    "control": "control",
    "other": "alu",
}


@dataclass(frozen=True)
class IssueModel:
    """Per-SMSP instruction timing of one GPU (cycles of the SM clock).

    Attributes
    ----------
    interval : mapping class -> float
        Cycles one warp instruction of the class occupies its pipe on one SMSP (1 if absent).
    latency : mapping class -> float
        Cycles from issue until a variable-latency result is written (write barrier released).
        Both are stored as sorted pairs, so that the model is hashable. For wgmma ("hgmma")
        the latency is the tail from the tensor pipe finishing a group to its results.
    tensor_flops_per_cycle : mapping class -> float
        FLOPs per cycle one SMSP's tensor pipe does with ``hmma`` and with ``hgmma``: a
        tensor instruction holds the pipe ``tensor_flops / rate`` cycles (WarpProgram).
    read_latency : float
        Cycles from issue until a variable-latency instruction has read its operands.
    smem_bytes_per_cycle_per_sm : float
        The SM's shared-memory port.
    bar_latency, bar_latency_per_warp : float
        Cycles from the last warp's arrival at a CTA barrier until the warps go on: the first
        plus the second times the CTA's warps.
    mio_queue : int
        Shared-memory instructions an SMSP can have issued and waiting for the port: a warp
        issues one without waiting for the port while fewer are queued, and its latency runs
        from when the port takes it. 0: no queue (an instruction issues when the port is free).
    sub_partitions : int
    tensor_overlap : mapping key -> float
        The fraction of its rate class c keeps while the SMSP's tensor pipe runs class t:
        ``"t/c"`` for any warp's tensor instruction, ``"t/c/own"`` for the same warp's where
        it differs, ``"hmma_fresh/..."`` for an HMMA without operand reuse (else ``hmma``'s);
        0: the instruction waits until the pipe is done. 1 where absent.
    latency_jitter : float
        Cycles by which each result of a variable-latency instruction lands early or late
        (which, a fixed hash of the issue's number decides: deterministic, zero on average).
        0: every result on the dot; the warps of two warpgroups can then lock into an orbit
        that any perturbation breaks (docs/model.md, "Ties and phase locking").
    read_latency_of : mapping class -> float
        ``read_latency`` for the classes named (stored as sorted pairs); the others take
        ``read_latency``.
    source : str
        Where the numbers come from.
    issue_order : str
        Which ready warp a sub-partition issues: ``"greedy"``, the one that issued last if it
        can, else the one waiting longest (the replay's); ``"round-robin"``, the first ready
        one after the one that issued last (an alternative, measured in docs/model.md,
        "Warpgroups started apart").
    warpgroup_start : str
        Where ``replay`` starts the wgmma warpgroups of a CTA that do not take turns:
        ``"together"`` (every warp at cycle 0) or ``"spread"`` (warpgroup g of G after g / G of
        the step replayed together: G warpgroups evenly apart, the phase the GPU's run at:
        data/gpu/probe/hopper_phase.py; ``HOPPER_ISA``'s). Warpgroups that take turns settle
        alike either way; warps without wgmma start together.
    """

    interval: tuple
    latency: tuple
    read_latency: float
    smem_bytes_per_cycle_per_sm: float
    bar_latency: float
    tensor_flops_per_cycle: tuple = ()
    bar_latency_per_warp: float = 0.0
    sub_partitions: int = 4
    mio_queue: int = 0
    tensor_overlap: tuple = ()
    latency_jitter: float = 0.0
    read_latency_of: tuple = ()
    source: str = ""
    issue_order: str = "greedy"
    warpgroup_start: str = "together"

    def __post_init__(self):
        if self.issue_order not in ISSUE_ORDERS:
            raise ValueError(
                f"IssueModel.issue_order must be one of {ISSUE_ORDERS}, got {self.issue_order!r}"
            )
        if self.warpgroup_start not in WARPGROUP_STARTS:
            raise ValueError(
                f"IssueModel.warpgroup_start must be one of {WARPGROUP_STARTS}, "
                f"got {self.warpgroup_start!r}"
            )
        fields = ("interval", "latency", "tensor_flops_per_cycle", "tensor_overlap",
                  "read_latency_of")  # fmt: skip
        for f in fields:
            v = getattr(self, f)
            pairs = sorted(v.items() if isinstance(v, dict) else v)
            object.__setattr__(self, f, tuple((str(k), float(x)) for k, x in pairs))

    def arrays(self):
        interval, latency = dict(self.interval), dict(self.latency)
        rate = dict(self.tensor_flops_per_cycle)
        # [other warp's, own warp's tensor instruction] x (a row per tensor class and a last
        # one for an HMMA with fresh operands) x class: "t/c" sets both layers, "t/c/own" the
        # own warp's; "hmma_fresh/..." keys override the fresh row, which else copies "hmma"
        overlap = np.ones((2, len(CLASSES) + 1, len(CLASSES)))
        fresh_row = len(CLASSES)

        def order(kr):
            t, _, *own = kr[0].split("/")
            return (t == "hmma_fresh", bool(own))

        for key, r in sorted(self.tensor_overlap, key=order):
            t, c, *own = key.split("/")
            layers = [1] if own else [0, 1]
            row = fresh_row if t == "hmma_fresh" else CLASSES.index(t)
            overlap[layers, row, CLASSES.index(c)] = r
            if t == "hmma":
                overlap[layers, fresh_row, CLASSES.index(c)] = r
        pipe = np.array([PIPES.index(_PIPE_OF[c]) for c in CLASSES], np.int64)
        return (
            pipe,
            np.array([interval.get(c, 1.0) for c in CLASSES]),
            np.array([latency.get(c, 0.0) for c in CLASSES]),
            np.array([rate.get(c, 1.0) for c in CLASSES]),
            overlap,
            np.array([dict(self.read_latency_of).get(c, self.read_latency) for c in CLASSES]),
        )


@dataclass(frozen=True)
class StepTime:
    """Cycles per main-loop step on one SM.

    ``alone``: one CTA resident (its latency); ``together``: ``ctas`` CTAs resident, each doing
    one step (so ``together / ctas`` is the SM time a step occupies at that occupancy);
    ``pipe_busy``: each pipe's busy fraction at ``ctas``; ``issue_busy``: issue slots used."""

    alone: float
    together: float
    ctas: int
    pipe_busy: dict
    issue_busy: float


@njit(inline="always")
def _late(k):
    """Whether variable-latency result number ``k`` lands late rather than early: the top bit
    of splitmix64's finalizer of ``k``, the same on every machine."""
    x = np.uint64(k) + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(63)) == np.uint64(1)


@njit(cache=True, _nrt=True)
def _run(
    klass, stall, wbar, rbar, wait, sbytes, flops, group, fresh, pipe_of, interval, latency,
    rate, read_lat, port_rate, link_rate, bar_lat, cta_of, slot_of, first, end, steps, bar_class,
    async_class, mio_queue, overlap, named, group_of, turns, jitter, age_first, at_pc, stagger,
    round_robin, mark_of, n_marks,
):  # fmt: skip
    # the instructions are the programs of a CTA's warps on this SMSP, one after the other:
    # the warp in slot j runs [first[j], end[j]); warp w on this SMSP is of CTA cta_of[w] and
    # warpgroup group_of[w], and runs the program of slot slot_of[w]. named[i]: (arrivals
    # that complete instruction i's named barrier on this SMSP, its id or -1, arrives)
    n_w = cta_of.shape[0]
    n_ctas = cta_of.max() + 1
    cta_size = np.bincount(cta_of)  # each CTA's warps on this SMSP
    # at_pc[i] (where it has room): cycles warps spent at instruction i, from their previous
    # issue to its own, summed
    # named barriers per CTA: ids 0-15, then one a warpgroup where a register holds the id
    named_arrived = np.zeros((n_ctas, NAMED_SLOTS), np.int64)
    named_arrived[:, REGISTER_IDS] = turns  # warpgroup 0's turn barrier
    waits_at = np.full(n_w, -1)  # the named barrier a warp waits at
    pc = np.zeros(n_w, np.int64)
    total = 0
    for w in range(n_w):
        pc[w] = first[slot_of[w]]
        total += steps * (end[slot_of[w]] - first[slot_of[w]])
    step = np.zeros(n_w, np.int64)
    # next cycle the warp may issue (stall counts, barrier release): warpgroup g's warps
    # first at g * stagger
    ready = stagger * group_of.astype(np.float64)
    sb = np.zeros((n_w, 6))  # when each scoreboard is released
    at_bar = np.zeros(n_w, np.bool_)
    arrived = np.zeros(n_ctas, np.int64)
    last_issue = np.zeros(n_w)  # for the oldest-first tie break
    # committed wgmma groups per warp, oldest first: when each completes
    groups = np.zeros((n_w, 16))
    n_groups = np.zeros(n_w, np.int64)
    tensor = pipe_of[async_class]
    tensor_until = 0.0  # when the tensor pipe finishes the last instruction queued on it
    tensor_class = async_class  # and that instruction's class
    tensor_warp = -1  # and the warp that issued it
    step_end = np.zeros((n_w, steps))  # when each warp issued the last instruction of a step
    # when each warp issued each marked instruction of each step (mark_of[i] >= 0: its mark)
    mark_at = np.zeros((n_w if n_marks else 0, steps, n_marks))
    pipe_free = np.zeros(len(interval))
    pipe_busy = np.zeros(len(interval))
    port_free = 0.0
    # when the port took each of the last mio_queue shared-memory instructions (a ring)
    port_taken = np.full(max(mio_queue, 1), -1.0)
    n_port = 0
    now = 0.0
    greedy = 0
    issued = 0
    while issued < total:
        best = -1
        soonest = np.inf
        # greedy: the warp that issued last goes on if it can; else the one waiting longest
        # (round-robin: the first ready one after it)
        for k in range(n_w):
            w = (greedy + k + round_robin) % n_w
            if step[w] >= steps or at_bar[w]:
                continue
            i = pc[w]
            t = ready[w]
            m = wait[i]
            b = 0
            while m:
                if m & 1:
                    t = max(t, sb[w, b])
                m >>= 1
                b += 1
            c = klass[i]
            p = pipe_of[c]
            if overlap[int(w == tensor_warp), tensor_class, c] == 0.0:
                # a class that cannot run beside the tensor instruction waits for it
                t = max(t, tensor_until - 1.0 + 1e-9)
            if c != async_class:  # wgmma queues at the tensor pipe instead of waiting
                # a pipe that frees up during a cycle takes the instruction in that cycle, so
                # that a fractional interval (FFMA 1.048, HMMA 6.007) averages out
                t = max(t, pipe_free[p] - 1.0 + 1e-9)
            if sbytes[i] > 0 and c != async_class:  # the port is free, or the queue has room
                t = max(t, port_free if mio_queue == 0 else port_taken[n_port % mio_queue])
            if group[i] < -1:  # wait until at most -(group + 2) groups are pending
                done = n_groups[w] - (-group[i] - 2)  # groups that must have completed
                if done > 0:
                    t = max(t, groups[w, done - 1])
            if t <= now:
                # the warp waiting longest; with ``age_first``, of the oldest CTA first
                older = age_first and cta_of[w] < cta_of[best]
                same = not age_first or cta_of[w] == cta_of[best]
                if round_robin:  # the first ready after the last issued (oldest CTA first)
                    if best < 0 or older:
                        best = w
                        if not age_first:
                            break
                elif best < 0 or k == 0 or older or (same and last_issue[w] < last_issue[best]):
                    best = w
                    if k == 0:
                        break
            elif t < soonest:
                soonest = t
        if best < 0:
            if soonest == np.inf:  # every warp waits at a barrier: cannot happen
                return np.inf, pipe_busy, step_end, mark_at
            now = max(now + 1.0, math.ceil(soonest))
            continue
        w = best
        i = pc[w]
        c = klass[i]
        p = pipe_of[c]
        busy = flops[i] / rate[c] if flops[i] > 0 else interval[c]
        r = overlap[int(w == tensor_warp), tensor_class, c]
        if p != tensor and tensor_until > now and r > 0.0:  # the tensor pipe is at work (a
            busy /= r  # class of rate 0 waited for it above, to within this cycle)
        if sbytes[i] > 0 and c != async_class:  # the SMSP's link carries link_rate B a cycle
            busy = max(busy, sbytes[i] / link_rate)
        begin = max(now, pipe_free[p])
        pipe_free[p] = begin + busy
        pipe_busy[p] += busy
        if p == tensor:
            tensor_until = pipe_free[p]
            tensor_class = overlap.shape[1] - 1 if fresh[i] else c
            tensor_warp = w
        if c == async_class and group[i] == 1 and n_groups[w] < groups.shape[1]:
            groups[w, n_groups[w]] = pipe_free[p] + latency[c]  # the group's results land
            n_groups[w] += 1
        if group[i] < -1:  # the wait is over: forget the groups that have completed
            keep = min(n_groups[w], -group[i] - 2)
            groups[w, :keep] = groups[w, n_groups[w] - keep : n_groups[w]].copy()
            n_groups[w] = keep
        start = now  # when the instruction's latency starts: the port may take it later
        if sbytes[i] > 0 and c == async_class:  # a wgmma's operands, booked as it issues
            port_free = max(port_free, now) + sbytes[i] / port_rate
        elif sbytes[i] > 0:
            start = max(port_free, now)
            port_free = start + sbytes[i] / port_rate
            if mio_queue > 0:
                port_taken[n_port % mio_queue] = start
                n_port += 1
        ready[w] = now + max(1, stall[i])
        if wbar[i] != 7:
            lat = latency[c]
            if lat > jitter:  # early or late, as the issue's number hashes
                lat += jitter if _late(issued) else -jitter
            sb[w, wbar[i]] = max(sb[w, wbar[i]], start + lat)
        if rbar[i] != 7:
            sb[w, rbar[i]] = max(sb[w, rbar[i]], start + read_lat[c])
        if i < at_pc.shape[0]:
            at_pc[i] += now - last_issue[w]
        if n_marks and mark_of[i] >= 0:
            mark_at[w, step[w], mark_of[i]] = now
        last_issue[w] = now
        issued += 1
        greedy = w
        if c == bar_class:  # wait for the CTA's other warps on this SMSP
            cta = cta_of[w]
            at_bar[w] = True
            arrived[cta] += 1
            if arrived[cta] == cta_size[cta]:
                arrived[cta] = 0
                for v in range(n_w):
                    if cta_of[v] == cta:
                        at_bar[v] = False
                        ready[v] = max(ready[v], now + bar_lat)
        elif named[i, 0] > 0:
            cta, arrives = cta_of[w], named[i, 2]
            b = named[i, 1]
            if b < 0:  # the id in a register: a sync's own warpgroup's, an arrive's the other's
                b = REGISTER_IDS + (group_of[w] ^ arrives)
            named_arrived[cta, b] += 1
            if named_arrived[cta, b] >= named[i, 0]:
                named_arrived[cta, b] = 0
                for v in range(n_w):  # the warps waiting there, and this one if it syncs
                    if cta_of[v] == cta and (waits_at[v] == b or (v == w and arrives == 0)):
                        at_bar[v] = False
                        waits_at[v] = -1
                        ready[v] = max(ready[v], now + bar_lat)
            elif arrives == 0:
                at_bar[w] = True
                waits_at[w] = b
        pc[w] += 1
        if pc[w] == end[slot_of[w]]:
            pc[w] = first[slot_of[w]]
            step_end[w, step[w]] = now + 1.0
            step[w] += 1
        now += 1.0
    return now, pipe_busy, step_end, mark_at


# the replay's named barriers: ids 0-15, then one a warpgroup for ids held in registers
REGISTER_IDS = 16
NAMED_SLOTS = REGISTER_IDS + 4


def smsp_warps(warps_per_cta: int, ctas: int, sub_partitions: int) -> np.ndarray:
    """The CTA of each warp on the busiest sub-partition when ``ctas`` CTAs of
    ``warps_per_cta`` warps are resident: the SM numbers its warp slots CTA after CTA and
    sub-partition s takes the slots s, s + 4, ... (so two 6-warp CTAs put three warps on
    each, not four on two of them); sub-partition 0 has the most."""
    return warp_layout(warps_per_cta, ctas, sub_partitions)[0]


def warp_layout(warps_per_cta: int, ctas: int, sub_partitions: int, s: int = 0):
    """(the CTA of each warp, its warpgroup in its CTA) on sub-partition ``s``, which takes the
    SM's warp slots s, s + sub_partitions, ... (``smsp_warps``)."""
    slots = np.arange(s, ctas * warps_per_cta, sub_partitions)
    cta_of = (slots // warps_per_cta).astype(np.int64)
    return cta_of, ((slots % warps_per_cta) // WARPGROUP).astype(np.int64)


def _execute(
    prog: WarpProgram, model: IssueModel, warps_per_cta: int, ctas: int, steps: int,
    turns: int = 0, age_first: bool = False, stagger: float = 0.0,
):  # fmt: skip
    """(end cycle, pipe busy cycles, each warp's step ends) of ``ctas`` CTAs each running
    ``prog`` ``steps`` times, on the busiest sub-partition (``smsp_warps``)."""
    cta_of, group_of = warp_layout(warps_per_cta, ctas, model.sub_partitions)
    return execute_roles(
        [prog], model, warps_per_cta, ctas, steps, cta_of, group_of, turns, True, age_first,
        stagger=stagger,
    )  # fmt: skip


WARPGROUP = 4  # warps


def first_turn(loop: WarpProgram) -> int:
    """1 where warpgroups take turns in ``loop``: it waits at its own warpgroup's named
    barrier and arrives at the other's (ids in registers, a count of two warpgroups). A kernel
    that does so must give one warpgroup its first turn before the loop, or it would not run
    (kernels/cuda/hopper_fwd.cu: warpgroup 1 arrives at warpgroup 0's barrier); by symmetry
    the replay gives it to warpgroup 0. Else 0."""
    turns = (loop.named[:, 0] == 2 * WARPGROUP) & (loop.named[:, 1] < 0)
    arrives = loop.named[:, 2] == 1
    return int(bool((turns & arrives).any() and (turns & ~arrives).any()))


def execute_roles(
    progs: list[WarpProgram], model: IssueModel, warps_per_cta: int, ctas: int, steps: int,
    cta_of: np.ndarray | None = None, group_of: np.ndarray | None = None, turns: int = 0,
    step_ends: bool = False, age_first: bool = False, at_pc: np.ndarray | None = None,
    stagger: float = 0.0, marks: np.ndarray | None = None,
):  # fmt: skip
    """(end cycle, pipe busy cycles[, the cycle each warp ended each step, where
    ``step_ends``]) of ``ctas`` CTAs whose warps on one SMSP run ``progs``, one program per
    warp (warp roles: a producer beside consumers, or warpgroups doing different work), each
    ``steps`` times;
    ``warps_per_cta`` counts all of the CTA's warps (for its barriers). ``cta_of``: the CTA of
    each warp on the SMSP, all running ``progs[0]`` (``smsp_warps``), and ``group_of`` each
    one's warpgroup (default 0); by default each CTA has one warp per program. ``turns``:
    arrivals on warpgroup 0's turn barrier before the first step (``first_turn``).
    ``age_first``: a sub-partition's scheduler picks among its ready warps those of the
    oldest CTA first (``rank_paces``), else the warp waiting longest. ``at_pc``: a float
    array per instruction of ``progs`` (concatenated) to which each warp's cycles from its
    previous issue to that instruction's are added (``pc_cycles``). ``stagger``: cycles by
    which each warpgroup's warps start after the previous warpgroup's (0: all together).
    ``marks``: an int array per instruction of ``progs`` (concatenated), a mark's number or
    -1; then the cycle each warp issued each marked instruction in each step is returned last
    (warps x steps x marks), as a kernel's ``%clock64`` stamps are read
    (data/gpu/probe/hopper_phase.py)."""
    pipe_of, interval, latency, rate, overlap, read_lat = model.arrays()
    port = model.smem_bytes_per_cycle_per_sm / model.sub_partitions
    ends = np.cumsum([len(p) for p in progs])
    first, end = np.concatenate(([0], ends[:-1])).astype(np.int64), ends.astype(np.int64)
    if cta_of is None:
        cta_of = np.repeat(np.arange(ctas, dtype=np.int64), len(progs))
        slot_of = np.tile(np.arange(len(progs), dtype=np.int64), ctas)
    else:
        slot_of = np.zeros(len(cta_of), np.int64)
    if group_of is None:
        group_of = np.zeros(len(cta_of), np.int64)

    def cat(field):
        return np.concatenate([getattr(p, field) for p in progs])

    named = cat("named").reshape(-1, 3).copy()
    # a named barrier completes on this SMSP when its share of the count has arrived
    named[:, 0] = np.where(named[:, 0] > 0, np.maximum(1, named[:, 0] // model.sub_partitions), 0)
    out = _run(
        cat("klass"), cat("stall"), cat("write_barrier"), cat("read_barrier"), cat("wait_mask"),
        cat("shared_bytes"), cat("tensor_flops"), cat("group"), cat("fresh"), pipe_of, interval,
        latency, rate, read_lat, port, model.smem_bytes_per_cycle_per_sm,
        model.bar_latency + model.bar_latency_per_warp * warps_per_cta, cta_of, slot_of, first,
        end, steps, CLASS_ID["bar"], CLASS_ID["hgmma"], int(model.mio_queue), overlap, named,
        group_of.astype(np.int64), int(turns), float(model.latency_jitter), bool(age_first),
        np.zeros(0) if at_pc is None else at_pc, float(stagger),
        int(model.issue_order == "round-robin"),
        np.full(0, -1, np.int64) if marks is None else np.asarray(marks, np.int64),
        0 if marks is None else int(np.max(marks, initial=-1)) + 1,
    )  # fmt: skip
    out = out if marks is not None else out[:3]
    return out if step_ends else out[:2] + out[3:]


def pc_cycles(
    prog: WarpProgram, model: IssueModel, warps_per_cta: int, ctas: int = 1, steps: int = 4,
    turns: int = 0,
) -> np.ndarray:  # fmt: skip
    """Cycles a warp spends at each instruction of ``prog`` in a step (from its previous
    issue to that instruction's), in steady state (``2 * steps`` steps less ``steps``, as
    ``replay``), averaged over the warps on the busiest sub-partition: what a profiler's
    program-counter sampling attributes to each instruction (Nsight Compute's warp-state
    samples per SASS instruction). Their sum is a warp's step."""
    cta_of, group_of = warp_layout(warps_per_cta, ctas, model.sub_partitions)
    lag = start_stagger(prog, model, warps_per_cta, steps, turns)
    runs = []
    for k in (steps, 2 * steps):
        at_pc = np.zeros(len(prog))
        execute_roles([prog], model, warps_per_cta, ctas, k, cta_of, group_of, turns,
                      at_pc=at_pc, stagger=lag)  # fmt: skip
        runs.append(at_pc)
    return (runs[1] - runs[0]) / (steps * len(cta_of))


def _spreads(prog: WarpProgram, model: IssueModel, warps_per_cta: int, turns: int) -> bool:
    """Whether ``model`` starts the warpgroups of a CTA running ``prog`` apart: several
    warpgroups issuing wgmma that nothing makes take turns (the phase was measured on such
    warpgroups; warps without wgmma start together, as a CTA's warps do)."""
    return (
        model.warpgroup_start == "spread"
        and warps_per_cta // WARPGROUP > 1
        and not turns
        and bool((prog.klass == CLASS_ID["hgmma"]).any())
    )


def start_stagger(
    prog: WarpProgram, model: IssueModel, warps_per_cta: int, steps: int = 4, turns: int = 0
) -> float:
    """Cycles by which ``model`` starts each warpgroup of a CTA after the one before
    (``IssueModel.warpgroup_start``): 0, or, where it spreads them, the step of one CTA's
    warpgroups started together over their number."""
    if not _spreads(prog, model, warps_per_cta, turns):
        return 0.0
    together = replay(prog, model, warps_per_cta, 1, steps, turns, stagger=0.0).alone
    return together / (warps_per_cta // WARPGROUP)


def replay(
    prog: WarpProgram, model: IssueModel, warps_per_cta: int, ctas: int = 1, steps: int = 4,
    turns: int = 0, stagger: float | None = None,
) -> StepTime:  # fmt: skip
    """Cycles per step of ``prog`` on one SM with ``ctas`` resident CTAs of ``warps_per_cta``
    warps (their warps spread over the sub-partitions as the SM's warp slots are:
    ``smsp_warps``; the busiest sub-partition is replayed).

    Steady state: the replay runs every warp for ``steps`` steps and for ``2 * steps``; the
    difference of the two end times over ``steps`` is the time per step, free of the first
    steps' warm-up and the last ones' drain, whatever order the warps' steps interleave in.
    ``turns``: arrivals on warpgroup 0's turn barrier before the first step (``first_turn``).
    ``stagger``: cycles by which each warpgroup starts after the one before (0: together;
    None: as ``model.warpgroup_start`` says; warpgroups that nothing makes take turns may
    settle in another phase from another start: docs/model.md, "Warpgroups started
    apart")."""
    here = len(smsp_warps(warps_per_cta, ctas, model.sub_partitions))

    def run(n, k, lag):
        return _execute(prog, model, warps_per_cta, n, k, turns, stagger=lag)[:2]

    def per_step(n, lag):
        end_short, _ = run(n, steps, lag)
        end_long, busy = run(n, 2 * steps, lag)
        return (end_long - end_short) / steps, busy, end_long

    alone, _, _ = per_step(1, 0.0 if stagger is None else stagger)
    if stagger is None:
        stagger = 0.0
        if _spreads(prog, model, warps_per_cta, turns):
            stagger = alone / (warps_per_cta // WARPGROUP)  # evenly apart over their step
            alone, _, _ = per_step(1, stagger)
    together, busy, end = per_step(ctas, stagger)
    if not np.isfinite(end):
        raise FlashioError(
            f"{prog.name}: every warp waits at a barrier that never completes (a named barrier "
            "whose turns the replay was not told how to start: replay(..., turns=1))"
        )
    span = max(end, 1.0)
    issued = here * 2 * steps * len(prog)
    return StepTime(
        alone=float(alone),
        together=float(together),
        ctas=ctas,
        pipe_busy={p: float(busy[k] / span) for k, p in enumerate(PIPES)},
        issue_busy=issued / span,
    )


def rank_paces(
    prog: WarpProgram, model: IssueModel, warps_per_cta: int, ctas: int, turns: int = 0,
    steps: int = 12,
) -> tuple[tuple[float, ...], ...]:  # fmt: skip
    """Cycles per step of each resident CTA by age when the SM's schedulers serve the oldest
    CTA's ready warps first (``execute_roles(..., age_first=True)``): row n - 1 holds, for
    n = 1 .. ``ctas`` CTAs resident, the pace of the oldest, the next, ... the youngest. That
    rule splits an SM among CTAs of equal work as the H200 does (data/gpu/probe/cta_dispatch.py,
    tests/test_cta_drift.py), and the engine charges each CTA its age's pace
    (``ModelOptions.cta_drift``; docs/model.md, "CTA drift").

    Steady state while all ``n`` run: each CTA runs ``steps`` steps; a CTA's pace is the slope
    of its step ends over the later half of the steps it completed before the first CTA ended
    (the first step, the warm-up, never counts). Where a young CTA completes fewer than four
    steps by then, the replay runs again with twice the steps, up to eight times as many; a
    CTA still starved then is given the span per step it completed (or the span, for none).
    Each distinct sub-partition is replayed (CTAs of fewer or other than four warps put
    different CTAs on each: ``smsp_warps``), and a CTA steps at the pace of its slowest."""
    rows = []
    for n in range(1, ctas + 1):
        pace = np.zeros(n)
        for cta_of, group_of in _sub_partitions(warps_per_cta, n, model.sub_partitions):
            pace = np.maximum(pace, _paces_on(prog, model, warps_per_cta, n, cta_of, group_of,
                                              turns, steps))  # fmt: skip
        rows.append(tuple(float(p) for p in pace))
    return tuple(rows)


def _sub_partitions(warps_per_cta: int, ctas: int, sub_partitions: int):
    """The distinct sub-partitions of an SM with ``ctas`` CTAs: (CTA of each warp, its
    warpgroup), for the warp slots s, s + sub_partitions, ... of each."""
    seen = set()
    for s in range(sub_partitions):
        cta_of, group_of = warp_layout(warps_per_cta, ctas, sub_partitions, s)
        key = (tuple(cta_of), tuple(group_of))
        if len(cta_of) and key not in seen:
            seen.add(key)
            yield cta_of, group_of


def _paces_on(prog, model, warps_per_cta, n, cta_of, group_of, turns, steps) -> np.ndarray:
    """Each of the ``n`` CTAs' pace on one sub-partition (``rank_paces``); 0 for a CTA with no
    warp there."""
    present = np.unique(cta_of)
    k = steps
    while True:
        _, _, ends = execute_roles(
            [prog], model, warps_per_cta, n, k, cta_of, group_of, turns, True, True
        )
        # a CTA's step ends when the last of its warps on this sub-partition ends it
        done = np.array([ends[cta_of == c].max(axis=0) for c in present])
        cut = done[:, -1].min()
        if not np.isfinite(cut):
            raise FlashioError(f"{prog.name}: every warp waits at a barrier that never completes")
        last = (done <= cut).sum(axis=1) - 1  # each CTA's last step ended by the cut
        if last.min() >= 3 or k >= 8 * steps:
            break
        k *= 2
    pace = np.zeros(n)
    for i, c in enumerate(present):
        hi = int(last[i])
        lo = max(1, hi // 2)
        if hi - lo >= 1:
            pace[c] = (done[i, hi] - done[i, lo]) / (hi - lo)
        else:  # starved while the oldest ran: at least the span per step it finished
            pace[c] = cut / max(hi + 1, 1)
    return pace


def once(prog: WarpProgram, model: IssueModel, warps_per_cta: int) -> float:
    """Cycles one CTA alone on an SM takes to run ``prog`` once (a prologue or an epilogue:
    straight-line code, so no steady state), from its first issue to one cycle after its last."""
    if not len(prog):
        return 0.0
    end = float(_execute(prog, model, warps_per_cta, 1, 1)[0])
    if not np.isfinite(end):
        raise FlashioError(f"{prog.name}: every warp waits at a barrier that never completes")
    return end


__all__ += ["NO_BARRIER", "PIPES", "once"]
