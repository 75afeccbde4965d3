"""The warp replay against overlap.py's runs: which loops one sub-partition's warps run in
each probe kernel, their replayed cycles, and the tensor-pipe interference rates of
simulator.hopper_isa.HOPPER_ISA fitted to the measured mixes (``python data/gpu/probe/overlap.py
--fit DIR``; tests/test_issue_model.py checks them)."""

from __future__ import annotations

import json
from pathlib import Path

# tensor_overlap key ("t/c": tensor class t, census class c of the kind; "t/c/own": the rate
# while the tensor instruction is the same warp's): the mixes each rate of the replay is fitted
# on. The split kernels run the tensor work and the kind in different warps, the "same"
# kernels in the same warps; they give one rate for every class but FFMA beside mma.sync,
# which keeps more than half its rate beside its own warp's HMMA and none beside another
# warp's (docs/model.md, "Tensor-pipe interference"). The mixes of both (hboth_*) are left
# to the checks.
FITS = {
    "hgmma/mufu": ["split_mufu"],
    "hgmma/alu": ["split_fmnmx", "split_f2fp"],
    "hgmma/imad": ["split_imad"],
    "hmma/mufu": ["hsplit_mufu"],
    "hmma/fma/own": ["hsame_ffma"],
    "hmma/alu": ["hsplit_fmnmx", "hsplit_f2fp"],
    "hmma/imad": ["hsplit_imad"],
    # mma.sync reading both operands from the register file (no reuse mark), with FFMA
    "hmma_fresh/fma/own": ["hsamed_ffma"],
    # FFMA beside its own warp's wgmma (run 7): it keeps more than beside another's, where
    # MUFU and FMNMX keep what they keep beside another's (intra_mufu, intra_fmnmx: CHECKS)
    "hgmma/fma/own": ["intra_ffma"],
}
# Rate 0: the class waits until the SMSP's tensor pipe has finished. FFMA beside another
# warp's mma.sync: hsplit_ffma takes the sum of its parts alone (2078 cycles against 1049 +
# 1060). A rate fitted there (0.03) would make an FFMA that issues as the 6-cycle HMMA ends
# hold the FMA pipe 35 cycles; waiting for the HMMA is the limit it stands for. (Beside
# wgmma, whose instructions queue at the pipe for hundreds of cycles, FFMA keeps a rate.)
EXCLUSIVE = ("hmma/fma",)
CHECKS = ("both_mufu", "both_ffma", "both_fmnmx", "hboth_mufu", "hboth_ffma", "hboth_fmnmx",
          "hboth_lds", "hsame_mufu", "hsame_fmnmx", "hsame_lds", "hsplit_ffma", "intra_mufu",
          "intra_fmnmx")  # fmt: skip
# the runs the rates come from: run 5 (overlap.json) and, for the kernels it lacks, runs 7-9
RUNS = ("overlap.json", "overlap_run7.json", "overlap_run8.json", "overlap_run9.json")


def load_runs(probe_dir: Path) -> dict:
    """Run 5's document with the results and kernels of the later ``RUNS`` that it lacks."""
    doc = json.loads((probe_dir / RUNS[0]).read_text())
    for name in RUNS[1:]:
        later = json.loads((probe_dir / name).read_text())
        for k, v in later["results"].items():
            doc["results"].setdefault(k, v)
        for group in ("kernels", "rs_kernels"):
            for k, v in later["config"].get(group, {}).items():
                doc["config"].setdefault(group, {}).setdefault(k, v)
    return doc


def roles(name: str, doc: dict) -> list[str]:
    """The loops (overlap_sass.json names) one SMSP's two warps run in kernel ``name``: the
    mma warpgroup's and the alu warpgroup's (a split kernel), or its own loop twice."""
    kernels = {**doc["config"]["kernels"], **doc["config"]["hmma_kernels"],
               **doc["config"].get("rs_kernels", {})}  # fmt: skip
    mma, alu, kind, *g = kernels[name]
    if mma and alu and mma != alu:
        dense = "mma_1wg" if not g or g[0] == doc["config"]["g"] else f"mma_1wg_g{g[0]}"
        tensor = {"h": "hmma_1wg", "r": "rmma_1wg"}.get(name[0], dense)
        return [tensor] + [f"{kind}_1wg"] * len(alu)
    return [name] * len(set(mma) | set(alu))


def replayed(name: str, doc: dict, programs: dict, model) -> float:
    """Cycles per iteration of kernel ``name`` in the warp replay under ``model``."""
    from flashio.simulator.warp_replay import execute_roles

    progs = [programs[k] for k in roles(name, doc)]
    warps = 4 * len(progs)
    short, _ = execute_roles(progs, model, warps, 1, 4)
    long, _ = execute_roles(progs, model, warps, 1, 8)
    return (long - short) / 4


def spans(name: str, doc: dict, programs: dict, model, iters: int | None = None) -> list[float]:
    """Cycles per iteration of each of kernel ``name``'s warps on one SMSP (a warpgroup
    each) in the warp replay under ``model``, run as the probe runs them: ``iters``
    iterations (the run's, by default) from the start, each warp ending when its own are
    done."""
    from flashio.simulator.warp_replay import execute_roles

    iters = iters or doc["config"]["iters"]
    progs = [programs[k] for k in roles(name, doc)]
    _, _, ends = execute_roles(progs, model, 4 * len(progs), 1, iters, step_ends=True)
    return [float(e) / iters for e in ends[:, -1]]


def _rate(cycles, target: float) -> float:
    """The interference rate (bisection over 0.001..1, to 1e-4) at which ``cycles(rate)``, a
    replay that takes longer the smaller the rate, gives ``target`` cycles."""
    lo, hi = 0.001, 1.0
    while hi - lo > 1e-4:
        r = (lo + hi) / 2
        lo, hi = (r, hi) if cycles(r) > target else (lo, r)
    return (lo + hi) / 2


def _with_rate(model, key: str, rate: float, others: bool):
    """``model`` with interference rate ``key`` set (``others``: keeping its other rates)."""
    import dataclasses

    kept = dict(model.tensor_overlap) if others else {}
    return dataclasses.replace(model, tensor_overlap={**kept, key: rate})


def programs_of(sass_doc: dict) -> dict:
    """The loops of overlap_sass.json as warp programs, by kernel name."""
    from flashio.simulator.sass import WarpProgram

    return {k: WarpProgram.from_json(v["loop"]) for k, v in sass_doc.items() if "loop" in v}


def fit(doc: dict, sass_doc: dict, model) -> dict:
    """Each ``FITS`` rate: the one with which the replay under ``model`` (its other
    interference rates off) gives the measured cycles per iteration of the mixes named,
    averaged over them, to 0.001; and 0 for each ``EXCLUSIVE`` key."""
    programs = programs_of(sass_doc)
    measured = {k: v["median_cycles_per_iter"] for k, v in doc["results"].items()}
    out = {}
    for key, names in FITS.items():
        rates = [
            _rate(lambda r, n=n, k=key: replayed(n, doc, programs, _with_rate(model, k, r, False)),
                  measured[n])
            for n in names
        ]  # fmt: skip
        out[key] = round(sum(rates) / len(rates), 3)
    return {**out, **dict.fromkeys(EXCLUSIVE, 0.0)}


# Run 11 times each warpgroup apart: FFMA in one to three chains beside another warp's wgmma
# is what slows (the wgmma warpgroup within 6% of alone), so its rate is fitted on the FFMA
# warpgroup's own span (role 1) rather than on the CTA's time. (The dense stream, split_ffma,
# slows the wgmma warpgroup instead: a rate fitted on its CTA time charges the wrong side.)
ROLE_FITS = {"hgmma/fma": (("split_ffma_c1", "split_ffma_c2", "split_ffma_c3"), 1)}
ROLE_RUN = "overlap_run11.json"


def fit_roles(doc: dict, programs: dict, model) -> dict:
    """Each ``ROLE_FITS`` rate: the one with which the replay under ``model`` gives the
    measured span of the named warpgroup (``spans``; ``doc``: a run with
    ``warpgroup_median_cycles_per_iter``), averaged over the kernels, to 0.001."""
    out = {}
    for key, (names, role) in ROLE_FITS.items():
        rates = [
            _rate(lambda r, n=n, k=key, w=role: spans(n, doc, programs,
                                                      _with_rate(model, k, r, True))[w],
                  doc["results"][n]["warpgroup_median_cycles_per_iter"][role])
            for n in names
        ]  # fmt: skip
        out[key] = round(sum(rates) / len(rates), 3)
    return out


def fit_all(probe_dir: Path, model) -> dict:
    """HOPPER_ISA's interference rates: ``fit`` on the CTA times of ``RUNS``, then
    ``fit_roles`` on run 11's warpgroup spans with those rates in place."""
    import dataclasses

    sass_doc = json.loads((probe_dir / "overlap_sass.json").read_text())
    rates = fit(load_runs(probe_dir), sass_doc, model)
    programs = programs_of(sass_doc)
    with_rates = dataclasses.replace(model, tensor_overlap=rates)
    roles = fit_roles(json.loads((probe_dir / ROLE_RUN).read_text()), programs, with_rates)
    return {**rates, **roles}
