"""SASS listings as warp programs: what one warp issues per iteration of a kernel's main loop.

``cuobjdump -sass`` prints each instruction of a Volta-or-later GPU as two 64-bit words. The
second word's top bits are the *control information* the compiler schedules with (decoded by
Jia et al., "Dissecting the NVIDIA Volta GPU Architecture via Microbenchmarking", 2018, sec. 2.1,
and unchanged through Hopper): the stall count (cycles before the warp's next instruction may
issue: how the compiler covers fixed-latency dependencies), a yield hint, the scoreboard a
variable-latency instruction releases when its result is written (write barrier) or when its
operands have been read (read barrier), and the scoreboards the instruction waits on.

A ``WarpProgram`` holds, per instruction, its class (``CLASSES``), stall count, barriers,
wait mask and, for shared-memory instructions, the bytes it moves; ``simulator.warp_replay``
replays such programs. Which instructions a warp runs (a kernel's main loop, the path through
code without loops) is ``simulator.sass_paths``'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

__all__ = ["CLASSES", "Instruction", "WarpProgram", "classify", "immediate", "parse"]

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
    count = immediate(ops[1]) if len(ops) == 2 else None
    if count is None:  # a thread count in a register: not a form these kernels use
        return (0, 0, 0)
    ident = immediate(ops[0])
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


def immediate(op: str) -> int | None:
    """The value of a hexadecimal immediate operand (``0x100``), else None."""
    try:
        return int(op, 16) if op.startswith(("0x", "-0x")) else None
    except ValueError:
        return None
