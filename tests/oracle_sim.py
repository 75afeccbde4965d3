"""A slow, obviously correct second implementation of docs/model.md: the oracle for simulate().

Written from the specification alone (not from ``simulator/_engine.py`` or ``simulator/_l2.py``),
in plain Python: a ``heapq`` of ``(t, slot)`` for the resident CTAs, an ``OrderedDict`` of
granules for the L2 LRU, and plain floats for the servers. Comments quote docs/model.md where
they help. It is meant for traces of a few thousand events.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import OrderedDict

from flashio.simulator._state import PREFETCH_AT_PRODUCT, PREFETCH_STAGED
from flashio.simulator.gpu import GPUSpec
from flashio.simulator.occupancy import CapacityError, occupancy
from flashio.simulator.simulate import (
    ModelOptions,
    arithmetic_cost,
    as_compiled,
    compiled_kernels,
    holds_reductions,
    launched,
    prefetches,
    spill_bytes,
    static_tiles,
    turnaround,
)
from flashio.simulator.trace import Op, Space, Trace

__all__ = ["simulate_oracle"]

LINES_PER_GRANULE = 64  # "granules of 64 lines (8 KiB with 128-byte lines)"
PIPES = ("tensor", "fp32", "sfu", "smem")  # per-SM arithmetic servers
PIPE_OF = {Op.MMA: "tensor", Op.ELEMENTWISE: "fp32", Op.EXP: "sfu", Op.SHARED: "smem"}


class Server:
    """First come, first served: w units issued at t finish at max(t, free) + w / rate."""

    def __init__(self, rate: float):
        self.rate = rate
        self.free = 0.0
        self.busy = 0.0  # seconds of work served

    def serve(self, t: float, w: float, rate: float | None = None) -> float:
        """``rate``: this request's own, where it differs (an SM's path sends reductions at
        theirs)."""
        finish = max(t, self.free) + w / (rate or self.rate)
        self.free = finish
        self.busy += w / (rate or self.rate)
        return finish


class Request:
    """A request streaming into a server from ``start`` to ``end`` (its SM path's time)."""

    def __init__(self, server: StreamServer, start: float, end: float, nbytes: float):
        self.server, self.start, self.end, self.nbytes = server, start, end, nbytes
        self.latency = server.latency


class StreamServer:
    """ "they serve bytes first come, first served": a fluid queue fed by every request's
    stream. The backlog when a stream ends is Reich's formula over all streams so far,
    Q(e) = max(0, max over x <= e of A(e) - A(x) - R (e - x)), with A the bytes that arrived
    by x (the maximum is at a stream's start or end), and its last byte leaves at
    e + Q(e) / R."""

    def __init__(self, rate: float, latency: float):
        self.rate, self.latency = rate, latency
        self.requests: list[Request] = []
        self.busy = 0.0

    def serve(self, start: float, end: float, w: float) -> Request:
        req = Request(self, start, end, w)
        self.requests.append(req)
        self.busy += w / self.rate
        return req

    def through(self, req: Request) -> float:
        """When ``req``'s last byte leaves: final once no stream can start before req.end."""
        e = req.end
        # A(x) at every stream's start and end up to e, by a sweep over the arrival rate
        changes = sorted(
            (p, d)
            for r in self.requests
            if r.start < e
            for p, d in (
                (r.start, r.nbytes / (r.end - r.start)),
                (r.end, -r.nbytes / (r.end - r.start)),
            )
            if p <= e
        )
        arrived, flow, at = 0.0, 0.0, -math.inf
        best = -math.inf  # max over x of R x - A(x)
        for p, d in changes:
            if at > -math.inf:
                arrived += flow * (p - at)
            at = p
            best = max(best, self.rate * p - arrived)
            flow += d
        if at == -math.inf:
            return e
        arrived += flow * (e - at)
        backlog = arrived - self.rate * e + max(best, self.rate * e - arrived)
        return e + max(0.0, backlog) / self.rate


def _landed(reqs: list) -> tuple[float, float]:
    """When streamed requests land (last byte through plus latency), and the last stream end:
    the landing is known once no request can start before it."""
    done = max((r.server.through(r) + r.latency for r in reqs), default=-math.inf)
    return done, max((r.end for r in reqs), default=-math.inf)


class Granule:
    """64 lines of one tensor, each with a present bit and a dirty bit (sets of line indices)."""

    def __init__(self, tensor: int):
        self.tensor = tensor
        self.present: set[int] = set()
        self.dirty: set[int] = set()
        # pending fills: the lines whose fill lands at fill_at, and those the current read misses
        self.filling: set[int] = set()
        self.fill_at = 0.0
        self.missed: set[int] = set()


class L2:
    """Fully associative LRU of granules keyed by (tensor, offset // granule bytes)."""

    def __init__(self, l2_bytes: int, line_bytes: int):
        self.line = line_bytes
        self.granule_bytes = LINES_PER_GRANULE * line_bytes
        self.capacity = l2_bytes // self.granule_bytes
        if self.capacity < 1:
            # docs/model.md does not say what an L2 smaller than one granule does.
            raise ValueError(f"l2_bytes={l2_bytes} holds no whole granule; the spec is silent")
        self.granules: OrderedDict[tuple[int, int], Granule] = OrderedDict()  # LRU first
        self.track_fills = False  # ModelOptions.pending_fills
        self.wait = -math.inf

    def access(self, op: int, tensor: int, start: int, end: int, written_back: dict) -> int:
        """Access bytes [start, end) of ``tensor``; return missed bytes, add write-backs per
        tensor into ``written_back``. The latest landing of a fill in flight that a present
        line read waits for goes to ``self.wait``."""
        miss = 0
        if end <= start:
            return 0
        for g in range(start // self.granule_bytes, (end - 1) // self.granule_bytes + 1):
            key = (tensor, g)
            if key in self.granules:
                self.granules.move_to_end(key)  # becomes the most recently used
            else:
                if len(self.granules) >= self.capacity:  # full: evict the least recently used
                    _, old = self.granules.popitem(last=False)
                    wb = len(old.dirty) * self.line  # its dirty lines go back to HBM
                    written_back[old.tensor] = written_back.get(old.tensor, 0) + wb
                self.granules[key] = Granule(tensor)  # inserted with no line present, MRU
            gran = self.granules[key]
            lo = max(start, g * self.granule_bytes)
            hi = min(end, (g + 1) * self.granule_bytes)
            for line in range(lo // self.line, (hi - 1) // self.line + 1):
                reads = op in (Op.LOAD, Op.REDUCE)
                if reads and line not in gran.present:
                    miss += min(hi, (line + 1) * self.line) - max(lo, line * self.line)
                    if self.track_fills:
                        gran.missed.add(line)
                elif reads and line in gran.filling:  # "waits for it to land"
                    self.wait = max(self.wait, gran.fill_at)
                elif op == Op.STORE:  # a written line needs no fill
                    gran.filling.discard(line)
                gran.present.add(line)
                if op in (Op.STORE, Op.REDUCE):
                    gran.dirty.add(line)  # writes allocate without reading
        return miss

    def landed(self, tensor: int, start: int, end: int, t: float, landing: float) -> None:
        """The lines a read issued at ``t`` missed in [start, end) land at ``landing``; fills
        of a granule still in flight at ``t`` merge with it (the latest landing), earlier ones
        are forgotten."""
        for g in range(start // self.granule_bytes, (end - 1) // self.granule_bytes + 1):
            gran = self.granules.get((tensor, g))
            if gran is None or not gran.missed:
                continue
            if gran.fill_at > t and gran.filling:
                gran.fill_at = max(gran.fill_at, landing)
            else:
                gran.filling, gran.fill_at = set(), landing
            gran.filling |= gran.missed
            gran.missed = set()

    def dirty_bytes(self) -> int:
        return sum(len(g.dirty) for g in self.granules.values()) * self.line


class Cta:
    """A resident CTA: its events, position, clock t, ready and stores, live on-chip bytes."""

    def __init__(self, events: list, t: float, index: int = 0):
        self.events = events
        self.index = index  # launch order: the grid's CTA number
        self.done = False  # it has ended and left its SM
        self.pos = 0
        self.t = t
        self.ready = t
        self.stores = t
        self.smem = 0
        self.regs = 0
        self.last_step = -1  # the outer-loop step whose spilled registers are loaded
        # prefetch (docs/model.md "Model options"): the step whose arithmetic issued the next
        # step's loads, their positions [pf_lo, pf_hi), and when they have all arrived
        self.pf_step = -1
        self.pf_lo = self.pf_hi = -1
        self.ready_next = t
        # staged loads (docs/model.md "Model options"): the position of the load its step
        # issues once its other operands have landed, whether it is in flight and not yet
        # waited for, and when it has arrived
        self.late_pos = -1
        self.late_in_flight = False
        self.ready_late = t
        # streamed requests in flight: operands, the next step's operands, stores, staged load
        self.waits: list = []
        self.waits_next: list = []
        self.waits_stores: list = []
        self.waits_late: list = []
        self.end: float | None = None  # t + tail, once the events are done


def _events_by_cta(trace: Trace, kernel: int, ctas: int) -> list[list[dict]]:
    names = trace.events.dtype.names
    out: list[list[dict]] = [[] for _ in range(ctas)]
    for row in trace.events[trace.events["kernel"] == kernel].tolist():
        e = dict(zip(names, row, strict=True))
        out[e["cta"]].append(e)
    return out


def _make_request(l2, l2_server, hbm_server, traffic, reduce_rate, fills=False):
    """A LOAD/STORE/REDUCE of byte ranges of one tensor, issued at the CTA's clock by an SM
    whose path to the memory system is the server ``port``, at the rates and latencies of
    ``request.plain`` or, for the tensors ``request.bulk`` (the kernel's bulk copies, set per
    kernel), ``request.costs`` (``GPUSpec.request_costs``). ``fills``: pending fills
    (ModelOptions.pending_fills)."""

    def request(cta, port, op, tensor, ranges, b, early=False, late=False):
        traffic[tensor][0 if op == Op.LOAD else 1] += b
        written_back: dict[int, int] = {}
        # every request passes the SM's own memory path, in parallel with the chip's servers;
        # "it sends reductions at their own rate"; a tensor the kernel moves by bulk copies
        # (request.bulk, set per kernel) at the bulk copies' rates and latencies (a store's
        # written-back lines at HBM's plain latency)
        costs = request.costs if tensor in request.bulk else request.plain
        if op == Op.REDUCE:
            costs = request.plain
            rate, l2_latency = reduce_rate, costs.l2_latency_s
        elif op == Op.LOAD:
            rate, l2_latency = costs.load_bytes_per_s, costs.l2_latency_s
        else:
            rate, l2_latency = costs.store_bytes_per_s, costs.store_latency_s
        # a store's written-back lines leave at HBM's plain latency
        hbm_latency = (costs if op == Op.LOAD else request.plain).hbm_latency_s
        sent_from = max(port.free, cta.t)  # the SM path sends the bytes until through_sm
        through_sm = port.serve(cta.t, b, rate)
        shared = []  # streamed: the requests that say when the rest lands
        wait = -math.inf
        if l2 is not None:
            l2.wait = -math.inf
            miss = sum(l2.access(op, tensor, lo, hi, written_back) for lo, hi in ranges)
            if fills:
                wait = l2.wait
            # "done = max(finish_L2, finish_SM) + l2_latency"
            if isinstance(l2_server, StreamServer):
                # streamed, the L2 and HBM parts land at the plain latencies, bulk copies' too
                shared.append(l2_server.serve(sent_from, through_sm, b))
                done = through_sm + l2_latency
            else:
                done = max(l2_server.serve(cta.t, b), through_sm) + l2_latency
        else:  # no L2: loads miss, stores and atomics write through
            miss = b if op == Op.LOAD else 0
            if op != Op.LOAD:
                written_back[tensor] = b
            done = through_sm  # the HBM request below still goes out at the CTA's clock
        wb = sum(written_back.values())
        if op == Op.LOAD and tensor in request.bulk and miss > 0:
            # "a bulk copy ... after HBM's latency": its bytes stream in at the SM's rate
            done = max(done, through_sm + hbm_latency)
        traffic[tensor][2] += miss
        for owner, nbytes in written_back.items():
            traffic[owner][3] += nbytes
        if miss + wb > 0 and isinstance(hbm_server, StreamServer):
            shared.append(hbm_server.serve(sent_from, through_sm, miss + wb))
        elif miss + wb > 0:
            landing = hbm_server.serve(cta.t, miss + wb) + hbm_latency
            done = max(done, landing)
            if fills and miss > 0 and l2 is not None:
                for lo, hi in ranges:
                    l2.landed(tensor, lo, hi, cta.t, landing)
        done = max(done, wait)
        if op == Op.LOAD and early:  # a prefetched load: an operand of the next step
            cta.ready_next = max(cta.ready_next, done)
            cta.waits_next += shared
        elif op == Op.LOAD and late:  # a staged load: an operand of its step's softmax
            cta.ready_late = done
            cta.waits_late = shared
        elif op == Op.LOAD:
            cta.ready = max(cta.ready, done)
            cta.waits += shared
        else:
            cta.stores = max(cta.stores, done)
            cta.waits_stores += shared

    return request


def _ranges(e: dict) -> list[tuple[int, int]]:
    """Byte ranges of a memory event: one when contiguous, else row by row, rows in order."""
    if e["rows"] == 1 or e["row_bytes"] == e["row_stride_bytes"]:
        first = e["offset_bytes"]
        return [(first, first + e["rows"] * e["row_bytes"])]
    return [
        (
            e["offset_bytes"] + r * e["row_stride_bytes"],
            e["offset_bytes"] + r * e["row_stride_bytes"] + e["row_bytes"],
        )
        for r in range(e["rows"])
    ]


def _next_step_loads(events: list, pos: int) -> tuple[int, int]:
    """Positions [lo, hi) of the LOADs that open the step after events[pos]'s step: the next
    step is that of the first later event with another step; it must be >= 0 and its leading
    events must be LOADs (docs/model.md "Model options")."""
    step = events[pos]["step"]
    i = pos
    while i < len(events) and events[i]["step"] == step:
        i += 1
    if i == len(events) or events[i]["step"] < 0:
        return i, i
    j = i
    while (
        j < len(events) and events[j]["step"] == events[i]["step"] and events[j]["op"] == Op.LOAD
    ):
        j += 1
    return i, j


def _last_product(events: list, pos: int) -> bool:
    """Whether the MMA at events[pos] is the last of its step."""
    step = events[pos]["step"]
    rest = itertools.takewhile(lambda e: e["step"] == step, events[pos + 1 :])
    return all(e["op"] != Op.MMA for e in rest)


def simulate_oracle(trace: Trace, gpu: GPUSpec, options: ModelOptions | None = None) -> dict:
    """Replay ``trace`` on ``gpu`` as docs/model.md says; return SimResult's quantities.

    ``options`` (simulator.simulate.ModelOptions) switches on the model options of
    docs/model.md: one arithmetic server per SM, prefetching kernels.

    Returns
    -------
    dict
        ``global_read_bytes``, ``global_write_bytes``, ``hbm_read_bytes``, ``hbm_write_bytes``,
        ``l2_dirty_bytes_at_end``, ``tensors`` ({name: (global read, global write, hbm read,
        hbm write)} for GLOBAL tensors), ``kernels`` (list of dicts: name, waves, start_s,
        time_s, smem_peak_bytes, reg_tile_peak_bytes and the four byte counts),
        ``sram_peak_bytes``, ``mma_flops``, ``elementwise_flops``, ``exps``,
        ``shared_exchange_bytes``, ``time_s``, ``cycles``, ``breakdown`` and ``utilization``.

    Raises
    ------
    CapacityError
        Like simulate: tiles above the per-CTA limit, or live shared memory above a kernel's
        declared ``smem_bytes``.
    """
    options = options or ModelOptions()
    meta = trace.meta
    dtype = str(meta.params.get("dtype", "fp16"))
    sms = gpu.sm_count
    buffers = tuple(t for t in meta.tensors if t.space != Space.GLOBAL)
    # The census's compiled registers and spills, and (below) the per-kernel arithmetic cost,
    # are inputs this oracle shares with simulate(): it re-derives the event replay from them.
    # The warp replay behind the cost has its own tests (tests/test_issue_model.py).
    comps = compiled_kernels(meta, options or ModelOptions())
    kinfos = [
        as_compiled(launched(k, meta.params), c) for k, c in zip(meta.kernels, comps, strict=True)
    ]
    occs = [occupancy(k, gpu, buffers) for k in kinfos]

    l2 = L2(gpu.l2_bytes, gpu.l2_line_bytes) if gpu.l2_bytes > 0 else None
    if l2 is not None:
        l2.track_fills = options.pending_fills
    l2_latency = gpu.l2_latency_cycles / gpu.clock_hz
    hbm_latency = gpu.hbm_latency_cycles / gpu.clock_hz
    hbm_rate = gpu.hbm_bandwidth_bytes_per_s * gpu.hbm_efficiency
    if options.streamed_requests:  # "serve bytes first come, first served"
        l2_server = StreamServer(gpu.l2_bandwidth_bytes_per_s, l2_latency)
        hbm_server = StreamServer(hbm_rate, hbm_latency)
    else:
        l2_server, hbm_server = Server(gpu.l2_bandwidth_bytes_per_s), Server(hbm_rate)
    # per-SM rates: one SM's per-cycle rate at the SM clock, whatever sm_count is
    fp32 = gpu.fp64_flops_per_cycle_per_sm if dtype == "fp64" else gpu.fp32_flops_per_cycle_per_sm
    rates = {
        "tensor": gpu.mma_flops_per_cycle_per_sm(dtype) * gpu.clock_hz,
        "fp32": fp32 * gpu.clock_hz,
        "sfu": gpu.sfu_ops_per_cycle_per_sm * gpu.clock_hz,
        "smem": gpu.smem_bandwidth_bytes_per_cycle_per_sm * gpu.clock_hz,
    }
    pipe_busy = dict.fromkeys(PIPES, 0.0)  # summed over SMs and kernels
    sm_memory_busy = 0.0  # the SMs' memory paths, summed over SMs and kernels

    n_t = len(meta.tensors)
    local = n_t  # pseudo-tensor of register spills (docs/model.md)
    traffic = [[0, 0, 0, 0] for _ in range(n_t + 1)]  # global read, write, hbm read, write
    counts = {Op.MMA: 0, Op.ELEMENTWISE: 0, Op.EXP: 0, Op.SHARED: 0}
    request = _make_request(l2, l2_server, hbm_server, traffic,
                            gpu.sm_reduce_bandwidth_bytes_per_s,
                            options.pending_fills)  # fmt: skip
    request.plain, request.costs = gpu.request_costs(), gpu.request_costs(bulk=True)
    names = [t.name for t in meta.tensors]
    kernel_results = []
    t_now = 0.0

    for k, (kinfo, occ, comp) in enumerate(zip(kinfos, occs, comps, strict=True)):
        before = [sum(row[i] for row in traffic) for i in range(4)]
        start = t_now + gpu.kernel_launch_s  # "starts kernel_launch_s after" the previous one
        # the tensors the kernel moves by bulk copies: "the matrices" of its trace's list
        bulk = meta.params.get("bulk_copies", {}).get(kinfo.name, ())
        request.bulk = {names.index(name) for name in bulk}
        for srv in (l2_server, hbm_server):  # free times raised to the kernel's start
            if isinstance(srv, Server):
                srv.free = max(srv.free, start)
        # how arithmetic is charged: "occupies ... w / R * occupy", "at least w / R * duration"
        cost = arithmetic_cost(trace, k, kinfo, occ, gpu, options, comp)
        # "one arithmetic server per SM", each op at its own rate
        if options.shared_issue or cost.step is not None:
            pipes = []
            for _ in range(sms):
                one = Server(1.0)
                pipes.append(dict.fromkeys(PIPES, one))
        else:
            pipes = [{p: Server(1.0) for p in PIPES} for _ in range(sms)]
        for per_sm in pipes:
            for srv in per_sm.values():
                srv.free = start
        # CTA drift: per SM, one queue clock per age (the work of the CTA with r older ones
        # beside it and of those)
        ages = [[start] * len(cost.paces) for _ in range(sms)]
        # each SM's path to the memory system (L2 and HBM), free from the kernel's start
        ports = [Server(gpu.sm_memory_bandwidth_bytes_per_s) for _ in range(sms)]
        for port in ports:
            port.free = start
        prefetch = prefetches(kinfo, options, comp, trace.meta.params)
        staged = prefetch == PREFETCH_STAGED
        # "the step's last matrix product issues the next step's loads" (staged: all but one)
        at_product = staged or prefetch == PREFETCH_AT_PRODUCT
        shared = options.shared_issue or cost.step is not None
        # reductions "hold the SM for h = B / sm_reduce_bandwidth_bytes_per_s" where the loop
        # sends them after all its tensor-core work
        hold = holds_reductions(comp, shared)
        spill_first, spill_store, spill_load = spill_bytes(kinfo, occ, gpu, comp)
        spill = max(spill_first + spill_store, spill_load)
        slots = min(kinfo.ctas, occ.ctas_per_sm * sms)
        static = static_tiles(trace.meta, kinfo)
        cta_events = _events_by_cta(trace, k, kinfo.ctas)
        # "first event ... after its prologue", "done ... after its epilogue" (the issue model)
        lead = cost.step.lead_s if cost.step is not None else 0.0
        tail = cost.step.tail_s if cost.step is not None else 0.0
        resident = [Cta(cta_events[s], start + lead, s) for s in range(slots)]  # CTA c in slot c
        heap = [(start + lead, s) for s in range(slots)]
        heapq.heapify(heap)
        next_cta = slots
        kernel_end = start
        smem_peak = regs_peak = 0

        while heap:
            _, s = heapq.heappop(heap)  # the CTA with the smallest (t, slot)
            cta = resident[s]
            sm = s % sms
            while True:
                if cta.pos == len(cta.events):  # finished: max(t + tail, ready, stores)
                    if cta.end is None:
                        cta.end = cta.t + tail
                    if cta.waits or cta.waits_stores:  # they land once through the servers
                        done, end = _landed(cta.waits)
                        done_stores, end_stores = _landed(cta.waits_stores)
                        if max(end, end_stores) > cta.t:
                            cta.t = max(end, end_stores)
                            if heap and (cta.t, s) > heap[0]:
                                heapq.heappush(heap, (cta.t, s))
                                break
                            continue
                        cta.ready = max(cta.ready, done)
                        cta.stores = max(cta.stores, done_stores)
                        cta.waits, cta.waits_stores = [], []
                    finish = max(cta.end, cta.ready, cta.stores)
                    kernel_end = max(kernel_end, finish)
                    if cost.paces:  # the younger ones move up an age, their clocks with them
                        older = sum(c.index < cta.index for c in resident[sm::sms] if not c.done)
                        clocks = ages[sm]
                        clocks[older:] = clocks[older + 1 :] + clocks[-1:]
                    cta.done = True
                    # "the next CTA in order", or with a static tile scheduler "CTA c + slots"
                    nxt = cta.index + slots if static else next_cta
                    if nxt < kinfo.ctas:  # in this slot, a turnaround later
                        begin = finish + turnaround(trace.meta, kinfo, gpu)
                        resident[s] = Cta(cta_events[nxt], begin + lead, nxt)
                        next_cta += 1
                        heapq.heappush(heap, (begin + lead, s))
                    break
                e = cta.events[cta.pos]
                op = e["op"]
                if spill and e["step"] >= 0 and e["step"] != cta.last_step:
                    # a new outer-loop step: store and reload the spilled registers
                    first = spill_first if cta.last_step == -1 else 0
                    for o, nb in ((Op.STORE, first + spill_store), (Op.LOAD, spill_load)):
                        if nb:
                            request(cta, ports[sm], o, local, [(s * spill, s * spill + nb)], nb)
                    cta.last_step = e["step"]
                if cta.pf_lo <= cta.pos < cta.pf_hi:
                    if cta.pos == cta.pf_lo:  # the prefetched step begins: its operands
                        cta.ready = max(cta.ready, cta.ready_next)
                        cta.waits += cta.waits_next
                        cta.waits_next = []
                    cta.pos += 1  # issued already
                    continue
                # staged loads: "the step issues its last tile once the others have landed;
                # its first arithmetic other than a matrix product, or else its last product,
                # waits for it"
                late = staged and cta.pos == cta.late_pos
                pv = (
                    at_product
                    and op == Op.MMA
                    and e["step"] >= 0
                    and cta.pf_step != e["step"]
                    and _last_product(cta.events, cta.pos)
                )
                if cta.late_in_flight and (pv or (op in PIPE_OF and op != Op.MMA)):
                    cta.ready = max(cta.ready, cta.ready_late)
                    cta.waits += cta.waits_late
                    cta.waits_late = []
                    cta.late_in_flight = False
                needs = op in PIPE_OF or op == Op.SYNC or late
                if needs and cta.waits:
                    # streamed operands are known once no CTA can start a request before their
                    # streams end: this CTA is the earliest of all at cta.t >= their ends
                    done, end = _landed(cta.waits)
                    if end > cta.t:
                        cta.t = end
                        if heap and (cta.t, s) > heap[0]:
                            heapq.heappush(heap, (cta.t, s))
                            break
                        continue
                    cta.ready = max(cta.ready, done)
                    cta.waits = []
                if needs and cta.ready > cta.t:
                    # operands still in flight: wait for them, then queue in time order
                    cta.t = cta.ready
                    if heap and (cta.t, s) > heap[0]:
                        heapq.heappush(heap, (cta.t, s))
                        break
                if late:
                    b = e["rows"] * e["row_bytes"]
                    request(cta, ports[sm], Op.LOAD, e["tensor"], _ranges(e), b, late=True)
                    cta.late_pos = -1
                    cta.late_in_flight = True
                    cta.pos += 1
                    continue
                issues = pv if at_product else op in PIPE_OF
                if prefetch and issues and e["step"] >= 0 and cta.pf_step != e["step"]:
                    # the first arithmetic of a step (at the product: its last) issues the
                    # loads that open the next one
                    cta.pf_step = e["step"]
                    cta.pf_lo, cta.pf_hi = _next_step_loads(cta.events, cta.pos)
                    if staged and cta.pf_hi - cta.pf_lo >= 2:  # the last waits for the others
                        cta.pf_hi -= 1
                        cta.late_pos = cta.pf_hi
                    cta.ready_next = cta.t
                    cta.waits_next = []
                    for nxt in cta.events[cta.pf_lo : cta.pf_hi]:
                        b = nxt["rows"] * nxt["row_bytes"]
                        request(
                            cta, ports[sm], Op.LOAD, nxt["tensor"], _ranges(nxt), b, early=True
                        )
                cta.pos += 1
                if op in (Op.LOAD, Op.STORE, Op.REDUCE):
                    b = e["rows"] * e["row_bytes"]
                    request(cta, ports[sm], op, e["tensor"], _ranges(e), b)
                    if op == Op.REDUCE and hold:
                        # "the SM's one arithmetic server ... becomes max(free, t) + h and the
                        # CTA's clock max(t + h, free)"
                        h = b / gpu.sm_reduce_bandwidth_bytes_per_s
                        server = pipes[sm]["tensor"]
                        server.free = max(server.free, cta.t) + h
                        cta.t = max(cta.t + h, server.free)
                elif op in PIPE_OF:
                    w = e["bytes"] if op == Op.SHARED else e["flops"]
                    counts[op] += w
                    pipe = pipes[sm][PIPE_OF[op]]
                    rate = rates[PIPE_OF[op]]
                    begin = max(cta.t, cta.ready)  # operands must have arrived
                    pipe_busy[PIPE_OF[op]] += w / rate * cost.occupy
                    if cost.paces:
                        # "CTA drift": served oldest first, "no faster than its pace by age
                        # among those computing"; the pipe only marks a reduction's hold
                        here = [c for c in resident[sm::sms] if c is not cta and not c.done]
                        older = sum(c.index < cta.index for c in here)
                        on = [c for c in here if c.ready <= cta.t]
                        pace = cost.paces[len(on)][sum(c.index < cta.index for c in on)]
                        begin = max(begin, pipe.free)
                        clocks = ages[sm]
                        for r in range(older, len(clocks)):
                            clocks[r] = max(clocks[r], begin) + w / rate * cost.occupy
                        cta.t = max(begin + w / rate * pace, clocks[older])
                    else:
                        pipe.free = max(pipe.free, begin) + w / rate * cost.occupy
                        cta.t = max(begin + w / rate * cost.duration, pipe.free)
                elif op == Op.SYNC:
                    cta.t = max(cta.t, cta.ready) + cost.sync_s
                elif op in (Op.ALLOC, Op.FREE):
                    sign = 1 if op == Op.ALLOC else -1
                    space = meta.tensors[e["tensor"]].space
                    if space == Space.SHARED:
                        cta.smem += sign * e["bytes"]
                        smem_peak = max(smem_peak, cta.smem)
                    elif space == Space.REGISTERS:
                        cta.regs += sign * e["bytes"]
                        regs_peak = max(regs_peak, cta.regs)
                if heap and (cta.t, s) > heap[0]:  # no longer the smallest: yield
                    heapq.heappush(heap, (cta.t, s))
                    break

        if smem_peak > kinfo.smem_bytes:
            raise CapacityError(
                f"kernel {kinfo.name!r}: live shared memory {smem_peak} > {kinfo.smem_bytes}"
            )
        moved = [sum(row[i] for row in traffic) - before[i] for i in range(4)]
        sm_memory_busy += sum(port.busy for port in ports)
        kernel_results.append(
            {
                "name": kinfo.name,
                "waves": math.ceil(kinfo.ctas / (occ.ctas_per_sm * sms)),
                "start_s": t_now,
                "time_s": kernel_end - t_now,
                "smem_peak_bytes": smem_peak,
                "reg_tile_peak_bytes": regs_peak,
                "global_read_bytes": moved[0],
                "global_write_bytes": moved[1],
                "hbm_read_bytes": moved[2],
                "hbm_write_bytes": moved[3],
            }
        )
        t_now = kernel_end

    breakdown = {
        "launch_s": gpu.kernel_launch_s * len(meta.kernels),
        "l2_busy_s": l2_server.busy,
        **{f"{p}_busy_s": pipe_busy[p] / sms for p in PIPES},
        "hbm_busy_s": hbm_server.busy,
        "sm_memory_busy_s": sm_memory_busy / sms,
    }
    totals = [sum(row[i] for row in traffic) for i in range(4)]
    return {
        "global_read_bytes": totals[0],
        "global_write_bytes": totals[1],
        "hbm_read_bytes": totals[2],
        "hbm_write_bytes": totals[3],
        "l2_dirty_bytes_at_end": l2.dirty_bytes() if l2 is not None else 0,
        "tensors": {
            **{
                t.name: tuple(traffic[i])
                for i, t in enumerate(meta.tensors)
                if t.space == Space.GLOBAL
            },
            **({"local (register spills)": tuple(traffic[local])} if any(traffic[local]) else {}),
        },
        "kernels": kernel_results,
        "sram_peak_bytes": max(kr["smem_peak_bytes"] for kr in kernel_results),
        "mma_flops": counts[Op.MMA],
        "elementwise_flops": counts[Op.ELEMENTWISE],
        "exps": counts[Op.EXP],
        "shared_exchange_bytes": counts[Op.SHARED],
        "time_s": t_now,
        "cycles": t_now * gpu.clock_hz,
        "breakdown": breakdown,
        "utilization": {
            key[: -len("_busy_s")]: v / t_now for key, v in breakdown.items() if "busy" in key
        },
    }
