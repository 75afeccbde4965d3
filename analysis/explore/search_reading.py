"""A tile search's results in words: why each tiling is slower than the fastest, and what the
ranking says as a whole (``search_notes``); ``analysis.explore.search`` makes the results."""

from __future__ import annotations

from flashio.analysis.validation.families import PICK_WITHIN
from flashio.simulator import issue

__all__ = ["bound_only", "search_notes", "short_why", "why_slower"]


def why_slower(r, best, sm_count: int, kv_seq_len: int) -> str:
    """Where tiling ``r`` is worse than ``best`` (a ``TileResult`` each), in words."""
    spill = f"{r.regs_per_thread} regs/thread, {r.spilled_regs_per_thread} spilled to local memory"
    if issue.would_spill(r.priced_by):
        spill = (
            f"would need {r.regs_per_thread} regs/thread: a lower bound, the written program "
            "keeps them all"
        )
    if r is best:
        return "fastest" + (f"; {spill}" if r.spilled_regs_per_thread else "")
    out = ["no kernel: at the pipe rates, a lower bound"] if _piped(r) else []
    if r.resident_warps_per_sm < best.resident_warps_per_sm:
        causes = []
        if r.warps < best.warps:
            causes.append(f"{r.warps} warps/CTA")
        if r.ctas_per_sm < best.ctas_per_sm:
            causes.append(f"{r.ctas_per_sm} CTA/SM, limited by {r.limiter}")
        slots = r.ctas_per_sm * sm_count
        if r.ctas < slots:
            causes.append(f"grid of {r.ctas} CTAs fills {r.ctas / slots:.0%} of the {slots} slots")
        out.append(
            f"{r.resident_warps_per_sm:.1f} resident warps/SM vs {best.resident_warps_per_sm:.1f}"
            + (f" ({'; '.join(causes)})" if causes else "")
        )
    if r.spilled_regs_per_thread:
        out.append(spill)
    if r.global_bytes > best.global_bytes:
        out.append(f"global traffic x{r.global_bytes / best.global_bytes:.2f}")
    if r.hbm_bytes > best.hbm_bytes:
        out.append(f"HBM traffic x{r.hbm_bytes / best.hbm_bytes:.2f}")
    if r.waves > best.waves:
        out.append(f"{r.waves} waves vs {best.waves}")
    if out:
        return "; ".join(out)
    steps = -(-kv_seq_len // r.block_kv), -(-kv_seq_len // best.block_kv)
    alike = "no more traffic, as many resident warps"
    if steps[0] != steps[1]:
        return f"{alike}; {steps[0]} K/V steps per CTA vs {steps[1]}"
    if r.block_q != best.block_q:  # same steps, larger or smaller Q tiles per CTA
        tile = f"{r.block_q}x{r.block_kv} tiles vs {best.block_q}x{best.block_kv}"
        return f"{alike}; {tile} ({r.warps} warps vs {best.warps})"
    return f"{alike}, same tiles; {r.warps} warps per CTA vs {best.warps}"


# a ranking table's last column holds the first reasons that fit this many characters (--json
# has them all), so that a row stays readable in a terminal
WHY_WIDTH = 72


def short_why(why: str) -> str:
    """``why`` cut after the last of its reasons ("; "-separated, outside parentheses) that
    fits ``WHY_WIDTH``, saying how many more there are."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(why):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and why.startswith("; ", i):
            parts.append(why[start:i])
            start = i + 2
    parts.append(why[start:])
    shown = parts[0]
    for k, part in enumerate(parts[1:], start=1):
        if len(shown) + 2 + len(part) > WHY_WIDTH:
            return f"{shown}; +{len(parts) - k} more (--json)"
        shown += "; " + part
    return shown


def _piped(r) -> bool:
    """A rule's block that a compiled search simulated at the pipe rates (no kernel)."""
    return r.priced_by.startswith("pipe rates")


def bound_only(r) -> bool:
    """Whether ``r``'s time is only a lower bound: a written program that would spill, or, in
    a compiled search, a rule's block no kernel prices, simulated at the pipe rates."""
    return issue.would_spill(r.priced_by) or _piped(r)


# how close to the fastest a tiling's predicted time must be to count as a tie: the criterion
# the validation judges the model's pick by (docs/validation.md, "By implementation")
NEAR_BEST = PICK_WITHIN
NEAR_NAMED = 4  # the closest named; the rest counted


def _near_best(ok: list, best) -> list:
    """The priced tilings other than ``best`` predicted within ``NEAR_BEST`` of its time, in
    order (lower bounds left out: their times are not predictions; none where ``best`` is one)."""
    if bound_only(best):
        return []
    near = [
        r
        for r in ok
        if r is not best and not bound_only(r) and r.time_s <= (1 + NEAR_BEST) * best.time_s
    ]
    return sorted(near, key=lambda r: r.rank_time)


def _label(r) -> str:
    return f"{r.block_q} x {r.block_kv}, {r.warps} warps"


def search_notes(results: list) -> tuple[str, ...]:
    """Plain-language reading of a search: the best, where the rule lands, why big is slow."""
    ok = [r for r in results if r.feasible]
    bad = [r for r in results if not r.feasible]
    if not ok:
        first = bad[0].error if bad else "no candidates"
        return (f"No tiling fits: {first}",)
    best = min(ok, key=lambda r: r.rank_time)
    out = [f"Fastest: {_label(best)}, {best.time_s * 1e6:.1f} us, {best.bound}-bound."]
    near = _near_best(ok, best)
    if near:
        named = [f"{_label(r)} (+{r.time_s / best.time_s - 1:.1%})" for r in near[:NEAR_NAMED]]
        more = f" and {len(near) - NEAR_NAMED} more" if len(near) > NEAR_NAMED else ""
        out.append(
            f"Within {NEAR_BEST:.0%} of it: {', '.join(named)}{more}. That is closer than the "
            'model orders tilings reliably (docs/validation.md, "By implementation"): time them '
            "beside it on the GPU."
        )
    bounds = [r for r in ok if issue.would_spill(r.priced_by)]
    piped = [r for r in ok if _piped(r)]
    if piped:
        out.append(
            f"{len(piped)} of the rule's tilings {'has' if len(piped) == 1 else 'have'} no "
            "kernel the issue model prices "
            f"({', '.join(_label(r) for r in piped[:3])}{', ...' if len(piped) > 3 else ''}): "
            "they are simulated at the pipe rates, a lower bound (the kernels the issue model "
            "prices run 2-3x slower than their pipe rates), and ranked after every priced "
            "tiling."
        )
    if bounds:
        out.append(
            f"{len(bounds)} tilings are priced by written programs whose registers spill "
            "(regs(spill): the compiler's count and spill stores where the register table has "
            "the tiling, else the register line and its excess over the limit): their spills "
            "are not written, so their times are lower bounds, ranked after every priced "
            'tiling (docs/model.md, "An mma.sync forward at a tiling the census lacks").'
        )
    clean = [r for r in ok if not r.spilled_regs_per_thread]
    if best.spilled_regs_per_thread and clean and not bound_only(best):
        c = min(clean, key=lambda r: r.rank_time)
        how = (
            "its compiled loop's local loads and stores"
            if best.priced_by == "compiled"
            else "charged as local-memory traffic, a first-order model"
        )
        out.append(
            f"The fastest spills registers ({how}); the fastest without spills is {_label(c)} "
            f"(rank {c.rank_time}, {c.slowdown:.2f}x)."
        )
    least = min(ok, key=lambda r: r.rank_hbm)
    hbm = [r.hbm_bytes for r in ok]
    if max(hbm) <= 1.01 * min(hbm):
        out.append(
            f"HBM traffic is within 1% for every tiling ({min(hbm) / 1e6:,.1f} to "
            f"{max(hbm) / 1e6:,.1f} MB): the working set stays in L2, so only global (SM-side) "
            "traffic depends on the tiling."
        )
    else:
        out.append(
            f"Least HBM traffic: {_label(least)}, {least.hbm_bytes / 1e6:,.1f} MB "
            f"(global {least.global_bytes / 1e6:,.1f} MB), time rank {least.rank_time}."
        )
    for form in ("seed", "paper", "default"):
        mine = [r for r in ok if form in r.rule.split(", ")]
        if mine:
            r = min(mine, key=lambda r: r.rank_time)
            what = {
                "seed": "The seed's B = floor(M/(4d))",
                "paper": "The paper's Bc = ceil(M/(4d)), Br = min(Bc, d)",
                "default": "The project's default block (what flashio simulate picks: "
                + (
                    "flash-attn's split-KV tiles)"
                    if any(r.kernel.startswith("flash_decode") for r in results)
                    else "kernels.default_block, floor(M/(4d)) rounded down to a power of two "
                    "in [16, 128])"
                ),
            }[form]
            out.append(
                f"{what}, {_label(r)}: rank {r.rank_time} of {len(ok)}, "
                f"{r.slowdown:.2f}x the fastest time: {r.why}."
            )
    priced = [r for r in ok if not bound_only(r)] or ok
    biggest = max(priced, key=lambda r: (r.block_q * r.block_kv, -r.rank_time))
    if biggest is not best:
        out.append(
            f"Bigger is not always faster: the largest blocks that fit, {_label(biggest)}, are "
            f"{biggest.slowdown:.2f}x slower: {biggest.why}."
        )
    if bad:
        out.append(f"{len(bad)} tiling(s) do not fit; e.g. {_label(bad[-1])}: {bad[-1].error}")
    return tuple(out)
