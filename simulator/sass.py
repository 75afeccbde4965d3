"""SASS listings as warp programs: what one warp issues per iteration of a kernel's main loop.

``cuobjdump -sass`` prints each instruction of a Volta-or-later GPU as two 64-bit words. The
second word's top bits are the *control information* the compiler schedules with (decoded by
Jia et al., "Dissecting the NVIDIA Volta GPU Architecture via Microbenchmarking", 2018, sec. 2.1,
and unchanged through Hopper): the stall count (cycles before the warp's next instruction may
issue: how the compiler covers fixed-latency dependencies), a yield hint, the scoreboard a
variable-latency instruction releases when its result is written (write barrier) or when its
operands have been read (read barrier), and the scoreboards the instruction waits on.

``program(listing, function)`` turns one function's main loop into a ``WarpProgram``: per
instruction its class (``CLASSES``), stall count, barriers, wait mask and, for shared-memory
instructions, the bytes it moves. ``simulator.warp_replay`` replays such programs.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import numpy as np

from flashio.simulator.errors import FlashioError

__all__ = [
    "CLASSES", "Instruction", "WarpProgram", "classify", "kernel_program", "parse", "parts",
    "program", "taken_path",
]  # fmt: skip

# Instruction classes of the replay. Each runs on one pipe; shared-memory classes also move
# bytes through the SM's shared-memory port (MIO), which the SM's four sub-partitions share.
CLASSES = (
    "hmma",  # mma.sync on the tensor pipe
    "hgmma",  # wgmma (asynchronous, warpgroup-wide)
    "mufu",  # special functions (ex2, rcp) on the XU pipe
    "fma",  # FP32 FFMA/FADD/FMUL on the FMA pipe
    "imad",  # integer multiply-add: the FMA pipe at half rate
    "alu",  # integer, logic, compare, select, min/max, conversion packing on the ALU pipe
    "uniform",  # uniform datapath (U*, S2UR): one per warp, off the vector pipes
    "shfl",  # warp shuffles (MIO)
    "ldsm",  # ldmatrix (MIO)
    "lds",  # shared-memory loads (MIO)
    "sts",  # shared-memory stores (MIO)
    "ldgsts",  # cp.async global -> shared (MIO; its global side is the memory model's)
    "global",  # LDG/STG/RED/ATOM (LSU; the bytes are the memory model's)
    "local",  # LDL/STL: register spills, through L1
    "bar",  # CTA barrier
    "control",  # branches, convergence barriers, dependency barriers, nops
    "other",  # S2R, LDC, anything else
)
CLASS_ID = {c: i for i, c in enumerate(CLASSES)}
NO_BARRIER = 7  # the encoding of "no scoreboard" in the write/read barrier fields

_LINE = re.compile(
    r"/\*(?P<addr>[0-9a-f]{4,})\*/\s+(?P<text>[^;]*);\s*/\*\s*0x(?P<lo>[0-9a-f]{16})\s*\*/"
)
_HI = re.compile(r"^\s*/\*\s*0x(?P<hi>[0-9a-f]{16})\s*\*/\s*$")
_FUNC = re.compile(r"^\s*Function\s*:\s*(\S+)")
_PRED = re.compile(r"^@!?U?P[0-9T]\s+")


@dataclass(frozen=True, slots=True)
class Instruction:
    addr: int
    opcode: str  # with modifiers, e.g. "HMMA.16816.F32.BF16"
    operands: str
    predicated: bool
    stall: int
    yield_: bool
    write_barrier: int  # 0..5, or NO_BARRIER
    read_barrier: int
    wait_mask: int  # bit b: wait for scoreboard b
    guard: str = ""  # the predicate guard as printed, e.g. "@!P0" ("" where unguarded)

    @property
    def klass(self) -> str:
        if self.opcode.startswith("BAR.") and not _cta_barrier(self):
            return "control"
        return classify(self.opcode)


def _cta_barrier(ins: Instruction) -> bool:
    """Whether a ``BAR`` instruction waits for the whole CTA: a sync (or reduction) without a
    thread count. An arrive never waits, and a sync with a count is a named barrier between
    some of the CTA's warps (``named_barrier``)."""
    if ".ARV" in ins.opcode:
        return False
    return len([x for x in ins.operands.split(",") if x.strip()]) < 2


def named_barrier(ins: Instruction) -> tuple[int, int, int]:
    """(warps, id, arrives) of a ``BAR`` between some of the CTA's warps, a sync or an arrive
    with a thread count (two consumer warpgroups taking turns at the tensor cores:
    FlashAttention-3's ping-pong; consumers meeting): the count in warps, the barrier's
    immediate id or -1 where a register holds it, and 1 for an arrive (which does not wait).
    (0, 0, 0) for any other instruction."""
    if not ins.opcode.startswith("BAR.") or _cta_barrier(ins):
        return (0, 0, 0)
    ops = [x.strip() for x in ins.operands.split(",") if x.strip()]
    count = _immediate(ops[1]) if len(ops) == 2 else None
    if count is None:  # a thread count in a register: not a form these kernels use
        return (0, 0, 0)
    ident = _immediate(ops[0])
    return (count // 32, -1 if ident is None else ident, int(".ARV" in ins.opcode))


def parse(text: str) -> dict[str, tuple[Instruction, ...]]:
    """Every function of a ``cuobjdump -sass`` listing, by (mangled) name."""
    funcs: dict[str, list[Instruction]] = {}
    current = None
    pending = None
    for line in text.splitlines():
        m = _FUNC.match(line)
        if m:
            current = funcs.setdefault(m.group(1), [])
            pending = None
            continue
        m = _LINE.search(line)
        if m:
            pending = m
            continue
        h = _HI.match(line)
        if h and pending is not None and current is not None:
            current.append(_instruction(pending, int(h.group("hi"), 16)))
            pending = None
    return {k: tuple(v) for k, v in funcs.items()}


def _instruction(m, hi: int) -> Instruction:
    text = m.group("text").strip()
    guard = _PRED.match(text)
    text = _PRED.sub("", text)
    opcode, _, operands = text.partition(" ")
    ctrl = (hi >> 41) & 0x1FFFF
    return Instruction(
        addr=int(m.group("addr"), 16),
        opcode=opcode,
        operands=operands.strip(),
        predicated=bool(guard),
        stall=ctrl & 0xF,
        yield_=not (ctrl >> 4) & 1,
        write_barrier=(ctrl >> 5) & 7,
        read_barrier=(ctrl >> 8) & 7,
        wait_mask=(ctrl >> 11) & 0x3F,
        guard=guard.group(0).strip() if guard else "",
    )


_PREFIX = (
    ("HGMMA", "hgmma"),
    ("HMMA", "hmma"),
    ("MUFU", "mufu"),
    ("SHFL", "shfl"),
    ("LDSM", "ldsm"),
    ("LDGSTS", "ldgsts"),
    ("LDS", "lds"),
    ("STS", "sts"),
    ("BAR", "bar"),
)
_FMA = {"FFMA", "FADD", "FMUL", "HFMA2", "HADD2", "HMUL2", "FFMA2", "FADD2", "FMUL2"}
_GLOBAL = {"LDG", "STG", "RED", "ATOM", "ATOMG", "LD", "ST", "REDG", "UBLKCP"}
_CONTROL = {
    "BRA", "BSSY", "BSYNC", "EXIT", "WARPSYNC", "NOP", "YIELD", "DEPBAR", "LDGDEPBAR", "RET",
    "CALL", "BPT", "JMP", "BREAK", "WARPGROUP", "ELECT", "ACQBULK", "SYNCS", "ARRIVES",
}  # fmt: skip
_ALU = {
    "FMNMX", "FSEL", "FSETP", "ISETP", "LOP3", "IADD3", "SHF", "LEA", "SEL", "PLOP3", "VIADD",
    "VIMNMX", "IMNMX", "PRMT", "MOV", "CS2R", "F2FP", "IABS", "FCHK", "P2R", "R2P", "POPC", "FLO",
    "BREV", "IADD", "LOP", "SHL", "SHR", "ISCADD", "HSETP2", "HMNMX2", "FRND", "I2FP", "F2IP",
    "VHMNMX",
}  # fmt: skip
_XU = {"I2F", "F2I", "F2F", "RRO"}


def classify(opcode: str) -> str:
    """The replay class of a SASS opcode (with modifiers)."""
    base = opcode.split(".")[0]
    for prefix, klass in _PREFIX:
        if base.startswith(prefix):
            return klass
    if base.startswith("U") or base in ("S2UR", "R2UR"):
        return "uniform"
    if base in _FMA:
        return "fma"
    if base in ("IMAD", "IDP", "IMUL"):
        return "imad"
    if base in _ALU:
        return "alu"
    if base in _XU:
        return "mufu"
    if base in _GLOBAL:
        return "global"
    if base in ("LDL", "STL"):
        return "local"
    if base in _CONTROL:
        return "control"
    return "other"


def local_bytes(ins: Instruction) -> tuple[int, int]:
    """(stored, loaded) bytes of local memory (register spills) one warp moves with ``ins``."""
    base = ins.opcode.split(".")[0]
    if base not in ("STL", "LDL"):
        return 0, 0
    mods = ins.opcode.split(".")
    width = next((int(m) for m in mods[1:] if m in ("64", "128")), 32)
    nbytes = 32 * width // 8
    return (nbytes, 0) if base == "STL" else (0, nbytes)


_HGMMA_SHAPE = re.compile(r"HGMMA\.(\d+)x(\d+)x(\d+)")
_HMMA_SHAPE = re.compile(r"HMMA\.168(\d+)")  # m16 n8 and k: HMMA.16816, HMMA.1688


def tensor_flops(ins: Instruction) -> int:
    """FLOPs of one warp's share of a tensor-core instruction (0 for others)."""
    m = _HGMMA_SHAPE.match(ins.opcode)
    if m:  # a warpgroup instruction: each of its four warps does a quarter
        mm, n, k = (int(x) for x in m.groups())
        return 2 * mm * n * k // 4
    m = _HMMA_SHAPE.match(ins.opcode)
    if m:
        return 2 * 16 * 8 * int(m.group(1))
    return 0


def wgmma_group(ins: Instruction) -> int:
    """1: an HGMMA committing its group; -(n + 2): a wait for at most n pending groups."""
    if ins.klass == "hgmma":
        return 1 if "gsb0" in ins.operands else 0
    if ins.opcode.startswith("WARPGROUP.DEPBAR"):
        m = re.search(r"gsb0,\s*0x([0-9a-f]+)", ins.operands)
        return -(int(m.group(1), 16) + 2) if m else -2
    return 0


def shared_bytes(ins: Instruction) -> int:
    """Bytes one warp moves through the SM's shared-memory port with ``ins`` (0 if none).
    Spills (LDL, STL) hit L1, whose SRAM and data path shared memory shares on Hopper: they
    move their bytes through the same port (an assumption: not measured apart). A wgmma
    reads its operands in shared memory through the port too (data/gpu/probe/overlap.py:
    LDS.128 beside wgmma m64n128k16 with both operands in shared memory lose what those
    operands' bytes take, 4943 against 4104 cycles): B (N x K) and, when A is not in
    registers (``gdesc`` as its first source), A (64 x K), a quarter of them per warp."""
    k = ins.klass
    if k == "hgmma":
        m = _HGMMA_SHAPE.match(ins.opcode)
        if not m:
            return 0
        mm, n, kk = (int(x) for x in m.groups())
        elem = 1 if any(t in ins.opcode for t in (".E4M3", ".E5M2", ".S8", ".U8")) else 2
        elem = 4 if ".TF32" in ins.opcode else elem
        srcs = [o.strip() for o in ins.operands.split(",")]
        a_in_smem = len(srcs) > 1 and srcs[1].startswith("gdesc")
        return (n * kk + (mm * kk if a_in_smem else 0)) * elem // 4
    if k == "local":
        return sum(local_bytes(ins))
    mods = ins.opcode.split(".")
    if k == "ldsm":  # .M88.{1,2,4}: that many 8x8 matrices of 16-bit elements
        n = int(mods[-1]) if mods[-1].isdigit() else 1
        return 128 * n
    if k in ("lds", "sts"):
        width = next((int(m) for m in mods[1:] if m in ("8", "16", "32", "64", "128")), 32)
        if "U8" in mods or "S8" in mods:
            width = 8
        if "U16" in mods or "S16" in mods:
            width = 16
        return 32 * width // 8
    if k == "ldgsts":
        width = next((int(m) for m in mods[1:] if m in ("32", "64", "128")), 32)
        return 32 * width // 8
    if k == "shfl":
        return 128
    return 0


@dataclass(frozen=True)
class WarpProgram:
    """One warp's instructions for one step of a kernel's main loop, as arrays.

    Attributes
    ----------
    name : str
        Where it comes from (kernel and configuration).
    tensor_flops : numpy array
        Per instruction, the FLOPs one warp's share of a tensor-core instruction does: 4096 for
        an m16n8k16 HMMA, a quarter of 2 * 64 * N * K for a warpgroup's HGMMA.
    group : numpy array
        wgmma groups: 1 for an HGMMA that commits its group (``gsb0``), ``-(n + 2)`` for a
        ``WARPGROUP.DEPBAR.LE gsb0, n`` (wait until at most n committed groups are pending),
        else 0.
    spill_store_bytes, spill_load_bytes : int
        Local-memory (register spill) bytes one warp stores and loads per step.
    klass, stall, write_barrier, read_barrier, wait_mask, shared_bytes : numpy arrays
        Per instruction: ``CLASS_ID`` of its class, control information, bytes through the
        shared-memory port. Barriers use ``NO_BARRIER`` for none.
    """

    name: str
    klass: np.ndarray
    stall: np.ndarray
    write_barrier: np.ndarray
    read_barrier: np.ndarray
    wait_mask: np.ndarray
    shared_bytes: np.ndarray
    tensor_flops: np.ndarray | None = None
    group: np.ndarray | None = None
    spill_store_bytes: int = 0  # local-memory bytes one warp stores per step (STL)
    spill_load_bytes: int = 0  # and loads back (LDL)
    # 1 for an mma.sync that reads both A and B from the register file (neither operand
    # marked for the reuse cache)
    fresh: np.ndarray | None = None
    # per instruction (warps, id, arrives) of a named barrier (``named_barrier``): n x 3
    named: np.ndarray | None = None

    def __post_init__(self):
        n = len(self.klass)
        for f in ("tensor_flops", "group", "fresh"):
            if getattr(self, f) is None:
                object.__setattr__(self, f, np.zeros(n, np.int64))
        if self.named is None:
            object.__setattr__(self, "named", np.zeros((n, 3), np.int64))

    def __len__(self) -> int:
        return len(self.klass)

    def counts(self) -> dict[str, int]:
        """Instructions per class."""
        n = np.bincount(self.klass, minlength=len(CLASSES))
        return {c: int(n[i]) for i, c in enumerate(CLASSES) if n[i]}

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "class": [CLASSES[k] for k in self.klass],
            "stall": self.stall.tolist(),
            "write_barrier": self.write_barrier.tolist(),
            "read_barrier": self.read_barrier.tolist(),
            "wait_mask": self.wait_mask.tolist(),
            "shared_bytes": self.shared_bytes.tolist(),
            "tensor_flops": self.tensor_flops.tolist(),
            "group": self.group.tolist(),
            "spill_store_bytes": self.spill_store_bytes,
            "spill_load_bytes": self.spill_load_bytes,
            "fresh": self.fresh.tolist(),
        } | self._named_json()

    def _named_json(self) -> dict:
        """The named barriers as [index, warps, id, arrives] rows, where there are any."""
        at = np.flatnonzero(self.named[:, 0])
        if not len(at):
            return {}
        return {"named_barriers": [[int(i), *map(int, self.named[i])] for i in at]}

    @classmethod
    def from_json(cls, d: dict) -> WarpProgram:
        return cls(
            name=d["name"],
            klass=np.array([CLASS_ID[c] for c in d["class"]], np.int64),
            stall=np.array(d["stall"], np.int64),
            write_barrier=np.array(d["write_barrier"], np.int64),
            read_barrier=np.array(d["read_barrier"], np.int64),
            wait_mask=np.array(d["wait_mask"], np.int64),
            shared_bytes=np.array(d["shared_bytes"], np.int64),
            tensor_flops=np.array(d["tensor_flops"], np.int64) if "tensor_flops" in d else None,
            group=np.array(d["group"], np.int64) if "group" in d else None,
            spill_store_bytes=int(d.get("spill_store_bytes", 0)),
            spill_load_bytes=int(d.get("spill_load_bytes", 0)),
            fresh=np.array(d["fresh"], np.int64) if "fresh" in d else None,
            named=_named_rows(d.get("named_barriers", ()), len(d["class"])),
        )

    @classmethod
    def from_instructions(cls, name: str, body) -> WarpProgram:
        return cls(
            name=name,
            klass=np.array([CLASS_ID[i.klass] for i in body], np.int64),
            stall=np.array([i.stall for i in body], np.int64),
            write_barrier=np.array([i.write_barrier for i in body], np.int64),
            read_barrier=np.array([i.read_barrier for i in body], np.int64),
            wait_mask=np.array([i.wait_mask for i in body], np.int64),
            shared_bytes=np.array([shared_bytes(i) for i in body], np.int64),
            tensor_flops=np.array([tensor_flops(i) for i in body], np.int64),
            group=np.array([wgmma_group(i) for i in body], np.int64),
            spill_store_bytes=sum(local_bytes(i)[0] for i in body),
            spill_load_bytes=sum(local_bytes(i)[1] for i in body),
            fresh=np.array([fresh_operands(i) for i in body], np.int64),
            named=np.array([named_barrier(i) for i in body], np.int64).reshape(-1, 3),
        )


def _named_rows(rows, n: int) -> np.ndarray:
    named = np.zeros((n, 3), np.int64)
    for i, *fields in rows:
        named[i] = fields
    return named


def fresh_operands(ins: Instruction) -> int:
    """1 for an HMMA whose A and B operands both come from the register file: neither carries
    ptxas's ``.reuse`` mark for the operand reuse cache."""
    if ins.klass != "hmma":
        return 0
    srcs = [o.strip() for o in ins.operands.split(",")]
    return int(len(srcs) >= 3 and not any(".reuse" in o for o in srcs[1:3]))


def _branch_target(ins: Instruction) -> int | None:
    if ins.opcode.split(".")[0] != "BRA":
        return None
    m = re.search(r"0x([0-9a-f]+)\s*$", ins.operands)
    return int(m.group(1), 16) if m else None


def main_loop(code: tuple[Instruction, ...], marker: str = "HMMA") -> tuple[int, int]:
    """Index range [lo, hi] of the main loop: of the backward branches whose body holds the
    most ``marker`` instructions (HMMA or HGMMA), the innermost. A range holding an ``EXIT`` is
    no loop: the back edge of an out-of-line block placed after the kernel's end (an mbarrier
    wait's retry, jumping back into the code it left). Raises if there is none."""
    index = {ins.addr: i for i, ins in enumerate(code)}
    best = None
    for i, ins in enumerate(code):
        tgt = _branch_target(ins)
        if tgt is None or tgt > ins.addr or tgt not in index:
            continue
        lo = index[tgt]
        if any(c.opcode == "EXIT" and not c.predicated for c in code[lo:i]):
            continue
        n = sum(c.opcode.startswith(marker) for c in code[lo : i + 1])
        key = (n, -(i - lo))
        if n and (best is None or key > best[0]):
            best = (key, lo, i)
    if best is None:
        raise FlashioError(f"no loop with {marker} instructions in this function")
    return best[1], best[2]


def _masks(ins: Instruction) -> bool:
    """Whether ``ins`` is element masking: a select of minus infinity into a score."""
    return ins.opcode.startswith("FSEL") and "-INF" in ins.operands


def straight_path(
    code: tuple[Instruction, ...], lo: int, hi: int, until_exit: bool = False
) -> list[Instruction]:
    """The instructions one iteration of the loop [lo, hi] issues for a full (unmasked) tile:
    conditional branches fall through, except those that skip element masking (a block that
    selects minus infinity into scores: a partial tile's path) without leaving for code placed
    after the kernel's last ``EXIT`` (an mbarrier wait's out-of-line retry), and unconditional
    forward branches are taken; inner loops (backward branches) run once. Predicated-off
    instructions still issue, as on the GPU. With ``until_exit`` the path ends at the first
    unconditional ``EXIT``."""
    index = {ins.addr: i for i, ins in enumerate(code)}
    exits = [k for k, c in enumerate(code) if c.opcode == "EXIT" and not c.predicated]
    out_of_line = exits[-1] if exits else len(code)  # code placed after the kernel's end
    out = []
    i = lo
    while i <= hi:
        ins = code[i]
        out.append(ins)
        if until_exit and ins.opcode == "EXIT" and not ins.predicated:
            break
        tgt = _branch_target(ins)
        if tgt is not None and tgt > ins.addr and tgt in index:
            j = index[tgt]
            # a conditional branch to code placed after the kernel's end (an mbarrier wait's
            # out-of-line retry) falls through: the path stays where it was
            skips_masking = j < out_of_line and any(_masks(c) for c in code[i + 1 : j])
            if not ins.predicated or skips_masking:
                i = j
                continue
        i += 1
    return out


_PREDICATE = re.compile(r"P[0-6]")
_GUARD = re.compile(r"@(!?)(P[0-6])")
_CONST = re.compile(r"c\[0x0\]\[(0x[0-9a-f]+)\]")
_COMPARE = {"NE": lambda a, b: a != b, "EQ": lambda a, b: a == b}


def taken_path(code: tuple[Instruction, ...], constants: dict[int, int] | None = None):
    """The instructions one warp issues through a kernel without loops (an elementwise or row
    kernel) from its entry to its first unconditional ``EXIT``, every thread in bounds and the
    warp converged: guarded branches and exits fall through; ``BRA.DIV`` (taken only by a
    diverged warp) is not taken; a branch on a predicate ``FCHK`` set is taken where it skips
    the division's slow path (FCHK sets it only for operands the fast path cannot handle); and
    ``constants`` (kernel-parameter bytes ``c[0x0][offset]`` -> value) decide the branches
    that compare a register loaded from one with ``ISETP.NE``/``ISETP.EQ`` against an
    immediate (a loop unrolled up to a bound given at run time: PyTorch's OffsetCalculator
    over ``dims``). Raises on a loop or a call: such a kernel is not one straight path."""
    constants = constants or {}
    index = {ins.addr: i for i, ins in enumerate(code)}
    regs: dict[str, int] = {}  # registers holding a known kernel parameter
    preds: dict[str, bool] = {}  # predicates whose value on this path is known
    out: list[Instruction] = []
    i = 0
    while i < len(code) and len(out) <= 4 * len(code):
        ins = code[i]
        out.append(ins)
        base = ins.opcode.split(".")[0]
        ops = [o.strip() for o in ins.operands.split(",")]
        if base == "EXIT" and not ins.predicated:
            return out
        if base == "CALL":
            raise FlashioError(f"a call at {ins.addr:#x}: not a straight path")
        _track(base, ins, ops, regs, preds, constants)
        tgt = _branch_target(ins)
        if tgt is not None and not ins.opcode.startswith("BRA.DIV"):
            take = not ins.predicated
            g = _GUARD.fullmatch(ins.guard)
            if g and g.group(2) in preds:
                take = preds[g.group(2)] != bool(g.group(1))
            if take:
                if tgt <= ins.addr:
                    raise FlashioError(f"a backward branch at {ins.addr:#x}: a loop")
                i = index[tgt]
                continue
        i += 1
    raise FlashioError("the path does not reach an EXIT")


def _track(base, ins, ops, regs, preds, constants) -> None:
    """What ``taken_path`` knows after ``ins``: registers loaded from known kernel parameters,
    predicates it can evaluate; anything else the instruction writes becomes unknown."""
    dest = ops[0] if ops else ""
    if base == "FCHK":
        preds[dest] = False
    elif base == "ISETP" and _PREDICATE.fullmatch(dest) and len(ops) >= 4:
        cmp = ins.opcode.split(".")[1] if "." in ins.opcode else ""
        a, b = regs.get(ops[2]), _immediate(ops[3])
        plain = ops[1] == "PT" and ops[4:5] in ([], ["PT"]) and not ins.predicated
        if cmp in _COMPARE and a is not None and b is not None and plain:
            preds[dest] = _COMPARE[cmp](a, b)
        else:
            preds.pop(dest, None)
    elif _PREDICATE.fullmatch(dest):
        preds.pop(dest, None)
    elif base == "LDC" and (m := _CONST.search(ins.operands)) and not ins.predicated:
        regs.pop(dest, None)
        value = constants.get(int(m.group(1), 16))
        if value is not None:
            regs[dest] = value
    else:
        regs.pop(dest, None)


def _immediate(op: str) -> int | None:
    try:
        return int(op, 16) if op.startswith(("0x", "-0x")) else None
    except ValueError:
        return None


def copies_overlap(body) -> bool | None:
    """Whether a loop's cp.async groups stay in flight across tensor-core work before the
    loop waits for them: each group a ``LDGDEPBAR`` commits is retired by the first
    ``DEPBAR.LE SB0, n`` that leaves at most n pending, and overlaps if an HMMA or HGMMA
    issued in between (the loop repeats, so three passes). True where every group overlaps
    (the next step's tiles load while this one computes: a prefetch), False where none does
    (Triton's 2-stage forward commits them at the end of a step and waits for them at the top
    of the next), None without cp.async groups."""
    pending: list[bool] = []
    retired: list[bool] = []
    for lap in range(3):
        for ins in body:
            if ins.opcode == "LDGDEPBAR":
                pending.append(False)
            elif ins.opcode.startswith("DEPBAR") and "SB0" in ins.operands:
                m = re.search(r"SB0,\s*0x([0-9a-f]+)", ins.operands)
                allowed = int(m.group(1), 16) if m else 0
                while len(pending) > allowed:
                    done = pending.pop(0)
                    if lap:
                        retired.append(done)
            elif ins.klass in ("hmma", "hgmma"):
                pending = [True] * len(pending)
    if not retired or len(set(retired)) > 1:  # none, or some groups overlap and some not
        return None
    return retired[0]


def _function(text: str, function: str) -> tuple[Instruction, ...]:
    """The code of ``function`` in a ``cuobjdump -sass`` listing: the function of that name,
    else the first whose (mangled) name holds it."""
    funcs = parse(text)
    matches = [f for f in funcs if f == function] or [f for f in funcs if function in f]
    if not matches:
        raise FlashioError(f"no function {function!r} in the listing; it has {sorted(funcs)}")
    return funcs[matches[0]]


def loop_copies_overlap(text: str, function: str, marker: str = "HMMA") -> bool | None:
    """``copies_overlap`` of ``function``'s main loop in a ``cuobjdump -sass`` listing."""
    code = _function(text, function)
    try:
        lo, hi = main_loop(code, marker)
    except FlashioError:
        return None
    return copies_overlap(straight_path(code, lo, hi))


def program(
    text: str, function: str, name: str | None = None, marker: str = "HMMA"
) -> WarpProgram:
    """The warp program of ``function``'s main loop in a ``cuobjdump -sass`` listing."""
    return parts(text, function, name, marker)["loop"]


def kernel_program(
    text: str, function: str, name: str | None = None, constants: dict[int, int] | None = None
) -> WarpProgram:  # fmt: skip
    """The warp program of a whole kernel without loops (``taken_path``): one step that stands
    for a CTA's work, e.g. PyTorch's elementwise and row-softmax kernels."""
    code = _function(text, function)
    return WarpProgram.from_instructions(name or function, taken_path(code, constants))


def loops(code: tuple[Instruction, ...], marker: str) -> list[tuple[int, int]]:
    """Index ranges [lo, hi] of the innermost loops (backward branches) holding ``marker``
    instructions, in address order: a kernel that walks its work in several loops one after
    the other (standard attention's softmax: one pass over a row's chunks, then another)."""
    index = {ins.addr: i for i, ins in enumerate(code)}
    found = []
    for i, ins in enumerate(code):
        tgt = _branch_target(ins)
        if tgt is None or tgt > ins.addr or tgt not in index:
            continue
        if any(c.opcode.startswith(marker) for c in code[index[tgt] : i + 1]):
            found.append((index[tgt], i))
    inner = [a for a in found if not any(b != a and a[0] <= b[0] and b[1] <= a[1] for b in found)]
    return sorted(inner)


def parts(
    text: str, function: str, name: str | None = None, marker: str = "HMMA",
    every_loop: bool = False,
) -> dict[str, WarpProgram]:  # fmt: skip
    """``function``'s warp programs in a ``cuobjdump -sass`` listing: ``loop``, one step of its
    main loop; ``prologue``, what a warp runs from the kernel's entry to the loop; ``epilogue``,
    from the loop's exit to the kernel's ``EXIT`` (both on the straight path, as the loop).
    With ``every_loop``, ``loop`` is one iteration of each innermost loop holding ``marker``
    (``loops``), one after the other, and ``epilogue`` the code between and after them."""
    code = _function(text, function)
    name = name or function
    if every_loop:
        found = loops(code, marker)
        if not found:
            raise FlashioError(f"no loop with {marker} instructions in {function!r}")
        body = [ins for lo, hi in found for ins in straight_path(code, lo, hi)]
        gaps = [(hi + 1, lo - 1) for (_, hi), (lo, _) in itertools.pairwise(found)]
        rest = [ins for a, b in gaps for ins in straight_path(code, a, b)]
        rest += straight_path(code, found[-1][1] + 1, len(code) - 1, until_exit=True)
        return {
            "loop": WarpProgram.from_instructions(name, body),
            "prologue": WarpProgram.from_instructions(
                f"{name} prologue", straight_path(code, 0, found[0][0] - 1, until_exit=True)
            ),
            "epilogue": WarpProgram.from_instructions(f"{name} epilogue", rest),
        }
    try:
        lo, hi = main_loop(code, marker)
    except FlashioError:
        if not any(ins.opcode.startswith(marker) for ins in code):
            raise
        lo, hi = 0, len(code) - 1  # no loop: the whole kernel is one step
    return {
        "loop": WarpProgram.from_instructions(name, straight_path(code, lo, hi)),
        "prologue": WarpProgram.from_instructions(
            f"{name} prologue", straight_path(code, 0, lo - 1, until_exit=True)
        ),
        "epilogue": WarpProgram.from_instructions(
            f"{name} epilogue", straight_path(code, hi + 1, len(code) - 1, until_exit=True)
        ),
    }
