"""The Hopper forward's consumer warpgroups step by step on the GPU, against the warp replay.

Without softmax overlap, nothing makes the two or three consumer warpgroups of a CTA take turns:
the step they settle into depends on their phase, one's softmax beside another's matrix
products or all in step. The replay starts them together and, at d = 64, keeps them near step,
where the GPU runs these builds 7-9% faster than the replay and the builds with both overlaps
4-5% slower (docs/validation.md, "flashio-hopper"). This probe reads the phase off the GPU.

Each build is compiled twice: as it runs, and with ``STEP_CLOCK=1`` (kernels/cuda/hopper_fwd.cu),
where warp 0 of each consumer warpgroup (all on sub-partition 0) stamps the SM's clock at
four points of each key block: 0 its K block has arrived, 1 S = Q K^T is done, 2 the
softmax is done, 3 O += P V is done (with intra-warpgroup overlap, the previous block's). The
stamps' memory clobbers pin the code around them, so the stamped build is a kernel of its
own: both are timed (CUDA events, the median of ``LAUNCHES``), and the replay replays the
stamped build's own loop, marking the same four clock reads (``warp_replay.execute_roles(...,
marks=)``). B = 1, H = 16, N = 16384, bf16, non-causal; the first 132 CTAs (the first round)
are stamped, every key block.

    python data/gpu/probe/hopper_phase.py --out DIR     # on the GPU: DIR/hopper_phase.json,
                                                        # DIR/hopper_phase_stamps.json.gz
    python data/gpu/probe/hopper_phase.py --sass DIR    # with NVRTC: DIR/hopper_phase_sass.json
    python data/gpu/probe/hopper_phase.py --report DIR  # the GPU's stamps beside the replay's
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from flashio import kernels, simulator
from flashio.kernels import gpu, hopper
from flashio.simulator import issue, sass, sass_paths
from flashio.simulator.warp_replay import execute_roles, first_turn, start_stagger, warp_layout

# (head dim, block_q, block_kv, softmax overlap, K/V stages): every d = 64 build of the
# validation (the ranking misses) and three d = 128 ones (ranked right: the control)
BUILDS = (
    (64, 128, 128, "none", 2),
    (64, 128, 128, "none", 3),
    (64, 192, 128, "none", 2),
    (64, 192, 128, "intra-warpgroup", 2),
    (64, 128, 128, "both", 2),
    (64, 128, 176, "both", 2),
    (128, 128, 128, "none", 2),
    (128, 128, 128, "both", 2),
    (128, 128, 176, "both", 2),
)
SEQ_LEN, HEADS = 16384, 16
STAMP_CTAS, STAMP_STEPS, POINTS = 132, 128, 4  # as hopper_fwd.cu's STEP_CLOCK block
LAUNCHES = 10  # timed launches of each kernel, after two that warm up
REPLAY_STEPS = 32
SETTLED = 16  # steps left out of the phase statistics: the start


def label(build) -> str:
    d, bq, bkv, overlap, stages = build
    return f"d={d} {bq}x{bkv} {overlap} s{stages}"


def schedule(build) -> kernels.Schedule:
    d, bq, bkv, overlap, stages = build
    sh = kernels.AttentionShape(1, HEADS, SEQ_LEN, d, "bf16")
    impl = hopper.description(bq, overlap, stages, False)
    return kernels.Schedule("flash2", sh, bq, bkv, 4 * (bq // 64 + 1), impl=impl)


def stamped_options(sched) -> tuple[str, ...]:
    return hopper.compile_options((*hopper.defines(sched), ("STEP_CLOCK", 1)))


def stamped_program(build) -> tuple[sass.WarpProgram, np.ndarray]:
    """The stamped build's consumer loop as the replay runs it, and each instruction's mark
    (the n-th clock read of the step: n; else -1)."""
    from benchmarks.sass_census import compile_sass

    with tempfile.TemporaryDirectory() as tmp:
        text, _ = compile_sass(schedule(build), Path(tmp), extra=(("STEP_CLOCK", 1),))
    listing = sass.parse(text)["hopper_fwd"]
    lo, hi = sass_paths.main_loop(listing, "HGMMA")
    body = sass_paths.straight_path(listing, lo, hi)
    clocks = [k for k, ins in enumerate(body) if "SR_CLOCKLO" in ins.operands]
    if len(clocks) != POINTS:
        raise RuntimeError(f"{label(build)}: {len(clocks)} clock reads in the loop, not {POINTS}")
    marks = np.full(len(body), -1, np.int64)
    marks[clocks] = np.arange(POINTS)
    return sass.WarpProgram.from_instructions(label(build), body), marks


def stamped_programs() -> dict:
    """Every build's stamped loop and marks, as hopper_phase_sass.json stores them."""
    out = {}
    for build in BUILDS:
        prog, marks = stamped_program(build)
        out[label(build)] = {"loop": prog.to_json(), "marks": marks.tolist()}
    return out


def replayed_stamps(build, programs: dict, model=None) -> np.ndarray:
    """The replay's stamps of one CTA: (consumer warpgroups, steps, points) cycles, the warp
    of each warpgroup on sub-partition 0 (``programs``: hopper_phase_sass.json's), its
    warpgroups started as ``model`` starts them (``IssueModel.warpgroup_start``)."""
    entry = programs[label(build)]
    prog, marks = sass.WarpProgram.from_json(entry["loop"]), np.array(entry["marks"])
    model = model or issue.issue_model(simulator.load_gpu("h200-measured"))
    warps = 4 * (build[1] // 64)  # the consumers (the producer's loop is not replayed)
    turns = first_turn(prog)
    cta_of, group_of = warp_layout(warps, 1, model.sub_partitions)
    lag = start_stagger(prog, model, warps, turns=turns)
    out = execute_roles([prog], model, warps, 1, REPLAY_STEPS, cta_of, group_of, turns,
                        marks=marks, stagger=lag)  # fmt: skip
    return out[2]


def summary(stamps: np.ndarray) -> dict:
    """Per warpgroup the median cycles of a step's parts, and between warpgroups the phase:
    how far each one's S lands after warpgroup 0's, as a share of the step (``stamps``:
    (CTAs, warpgroups, steps, points), steps before ``SETTLED`` left out)."""
    s = stamps[:, :, SETTLED:, :].astype(np.float64)  # every one stamped
    step = np.diff(s[..., 0], axis=2)
    parts = {"s_wait": s[..., 1] - s[..., 0], "softmax": s[..., 2] - s[..., 1],
             "pv_wait": s[..., 3] - s[..., 2]}  # fmt: skip
    out = {"step": float(np.median(step)),
           "parts": {k: [float(np.median(v[:, g])) for g in range(s.shape[1])]
                     for k, v in parts.items()}}  # fmt: skip
    if s.shape[1] > 1:
        med = float(np.median(step))
        lag = (s[:, 1:, :, 1] - s[:, :1, :, 1]) / med  # S done, warpgroup g after warpgroup 0
        share = np.abs(lag - np.round(lag))  # 0: in step, 0.5: half a step apart
        out["phase"] = {
            "median": [float(np.median(share[:, g])) for g in range(share.shape[1])],
            "in_step": [float((share[:, g] < 0.1).mean()) for g in range(share.shape[1])],
        }
    return out


STAMPS = "hopper_phase_stamps.json.gz"
UNSTAMPED = -1


def relative(stamps: np.ndarray, overlap: str) -> np.ndarray:
    """Stamps (CTAs x warpgroups x steps x points, the SM clock or anything congruent to it
    modulo 2**32) as cycles from each CTA's first stamp. Builds with intra-warpgroup overlap
    stamp from their second key block on (the first is issued before the loop): their first
    is ``UNSTAMPED``."""
    x = np.asarray(stamps).astype(np.int64) % (1 << 32)
    stamped = np.ones(x.shape, bool)
    if overlap in ("intra-warpgroup", "both"):
        stamped[:, :, 0] = False
    ref = x[:, 0, 1, 0][:, None, None, None]  # a stamp of each CTA; a CTA spans < 2**31
    rel = (x - ref + (1 << 31)) % (1 << 32) - (1 << 31)
    rel -= (
        np.where(stamped, rel, np.iinfo(np.int64).max)
        .reshape(len(x), -1)
        .min(axis=1)[:, None, None, None]
    )
    return np.where(stamped, rel, UNSTAMPED)


def write_stamps(out_dir: Path, arrays: dict) -> None:
    """Each build's stamps (CTAs x warpgroups x steps x points, cycles from the CTA's first
    stamp), as nested lists."""
    with gzip.GzipFile(out_dir / STAMPS, "wb", mtime=0) as f:
        f.write(json.dumps({k: v.tolist() for k, v in arrays.items()}).encode())


def read_stamps(data_dir: Path) -> dict:
    with gzip.open(data_dir / STAMPS, "rt") as f:
        return {k: np.array(v, np.int64) for k, v in json.load(f).items()}


def run(out_dir: Path) -> dict:
    import cupy
    from isa import nvidia_smi, provenance

    prov = provenance()
    rng = np.random.default_rng(0)
    arrays, results = {}, {}
    for build in BUILDS:
        sched = schedule(build)
        plain = gpu.compile_schedule(sched)
        code = (gpu.CUDA_DIR / "hopper_fwd.cu").read_text()
        stamped = hopper.CompiledHopper(sched, gpu._module(code, stamped_options(sched)),
                                        plain.launches)  # fmt: skip
        sh = sched.shape
        x = rng.standard_normal((3, 1, sh.heads, sh.seq_len, sh.head_dim)).astype(np.float32)
        bits = [cupy.asarray(a.view(np.uint32) >> 16).astype(cupy.uint16) for a in x]
        times = {}
        for name, comp in (("plain", plain), ("stamped", stamped)):
            bufs = comp.alloc(*bits)
            ev = (cupy.cuda.Event(), cupy.cuda.Event())
            ms = []
            for k in range(2 + LAUNCHES):
                comp.launch(bufs, ev)
                ev[1].synchronize()
                if k >= 2:
                    ms.append(cupy.cuda.get_elapsed_time(*ev))
            times[name] = {"median_ms": statistics.median(ms), "ms": ms}
            if name == "stamped":
                ptr = comp.module.get_global("hopper_stamps")
                n = STAMP_CTAS * (build[1] // 64) * STAMP_STEPS * POINTS
                raw = cupy.ndarray((n,), cupy.uint64, memptr=ptr).get()
                st = raw.reshape(STAMP_CTAS, build[1] // 64, STAMP_STEPS, POINTS)
                steps = -(-SEQ_LEN // build[2])
                arrays[label(build)] = relative(st[:, :, :steps], build[3])
            del bufs
        cupy.get_default_memory_pool().free_all_blocks()
        results[label(build)] = {**times, "gpu": summary(arrays[label(build)])}
        print(
            label(build),
            json.dumps(results[label(build)]["gpu"]),
            {k: round(v["median_ms"], 4) for k, v in times.items()},
            flush=True,
        )
    prov["nvidia_smi_after"] = nvidia_smi()
    out_dir.mkdir(parents=True, exist_ok=True)
    write_stamps(out_dir, arrays)
    doc = {"provenance": prov,
           "config": {"builds": [list(b) for b in BUILDS], "seq_len": SEQ_LEN, "heads": HEADS,
                      "stamped_ctas": STAMP_CTAS, "launches": LAUNCHES, "settled": SETTLED},
           "results": results}  # fmt: skip
    (out_dir / "hopper_phase.json").write_text(json.dumps(doc, indent=1))
    return doc


def report(data_dir: Path) -> list[dict]:
    """Per build: the GPU's step, parts and phase (stamped CTAs) beside the replay's, its
    warpgroups started as the model starts them ("replay") and together
    ("replay_together")."""
    doc = json.loads((data_dir / "hopper_phase.json").read_text())
    programs = json.loads((data_dir / "hopper_phase_sass.json").read_text())
    stamps = read_stamps(data_dir)
    model = issue.issue_model(simulator.load_gpu("h200-measured"))
    together = dataclasses.replace(model, warpgroup_start="together")
    rows = []
    for build in (tuple(b) for b in doc["config"]["builds"]):
        name = label(build)
        res = doc["results"][name]
        rows.append({"build": name, "gpu": summary(stamps[name]),
                     "replay": summary(replayed_stamps(build, programs, model)[None]),
                     "replay_together": summary(replayed_stamps(build, programs, together)[None]),
                     "plain_ms": res["plain"]["median_ms"],
                     "stamped_ms": res["stamped"]["median_ms"]})  # fmt: skip
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--out", type=Path, help="run on the GPU; write OUT/hopper_phase*.json*")
    g.add_argument("--sass", type=Path, help="compile only; write SASS/hopper_phase_sass.json")
    g.add_argument("--report", type=Path, metavar="DIR", help="the GPU's stamps beside the replay")
    args = ap.parse_args(argv)
    if args.out:
        run(args.out)
        return 0
    if args.sass:
        args.sass.mkdir(parents=True, exist_ok=True)
        text = json.dumps(stamped_programs(), separators=(",", ":"))
        (args.sass / "hopper_phase_sass.json").write_text(text)
        return 0
    for r in report(args.report):
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
