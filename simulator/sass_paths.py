"""Which instructions a warp runs: a kernel's main loop, and the straight path through code.

A ``cuobjdump -sass`` listing (``simulator.sass.parse``) is code with branches. The replay
needs what one warp issues: one iteration of a kernel's main loop (``main_loop``, ``loops``)
along the path a full tile takes (``straight_path``), the code before and after it
(``parts``), or the path through a kernel without loops that the launch's parameters decide
(``taken_path``), each as a ``simulator.sass.WarpProgram``.
"""

from __future__ import annotations

import itertools
import re

from flashio.simulator.errors import FlashioError
from flashio.simulator.sass import Instruction, WarpProgram, immediate, parse

__all__ = [
    "copies_behind_product", "copies_overlap", "kernel_program", "loop_copies_behind_product",
    "loop_copies_overlap", "loops", "main_loop", "parts", "program", "straight_path", "taken_path",
]  # fmt: skip


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
        a, b = regs.get(ops[2]), immediate(ops[3])
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


def copies_behind_product(body) -> bool | None:
    """Whether a loop commits each of its cp.async groups while an asynchronous product is in
    flight: after a wgmma group (HGMMA ... ``gsb0``) that no ``WARPGROUP.DEPBAR`` has retired
    yet. Triton's 2-stage forward issues its P V wgmma, then the next step's copies, and waits
    for the product after the next Q K^T: its copies load while P V runs, though none overlaps
    a product issued after it (``copies_overlap`` False). None without cp.async groups or
    where some groups are and some are not."""
    groups = 0  # wgmma groups in flight (issued, not retired)
    behind: list[bool] = []
    for lap in range(2):  # the loop repeats: what is in flight at its top comes from its end
        for ins in body:
            if ins.klass == "hgmma" and "gsb0" in ins.operands:
                groups += 1
            elif ins.opcode.startswith("WARPGROUP.DEPBAR"):
                m = re.search(r"gsb0,\s*0x([0-9a-f]+)", ins.operands)
                groups = min(groups, int(m.group(1), 16) if m else 0)
            elif ins.opcode == "LDGDEPBAR" and lap:
                behind.append(groups > 0)
    if not behind or len(set(behind)) > 1:
        return None
    return behind[0]


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
    body = _loop_path(text, function, marker)
    return None if body is None else copies_overlap(body)


def loop_copies_behind_product(text: str, function: str, marker: str = "HMMA") -> bool | None:
    """``copies_behind_product`` of ``function``'s main loop in a ``cuobjdump -sass`` listing."""
    body = _loop_path(text, function, marker)
    return None if body is None else copies_behind_product(body)


def _loop_path(text: str, function: str, marker: str):
    code = _function(text, function)
    try:
        lo, hi = main_loop(code, marker)
    except FlashioError:
        return None
    return straight_path(code, lo, hi)


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
