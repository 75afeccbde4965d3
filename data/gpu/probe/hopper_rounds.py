"""The rounds of the Hopper forward's CTAs on the GPU: when each CTA starts, gets its Q tile,
ends its loop and has stored its output, on which SM.

The replay is short of the GPU by 3.2-7.5 thousand cycles a CTA besides its steps, and the
skeleton builds put that cost in a CTA's copies and store (docs/model.md, "A CTA's fixed
cost"). One mechanism would explain it: on the GPU the CTAs of a round start together, every
one's first copies end near the end of the burst they make together, so they end together and
the next round starts together again; the engine serves whole requests first come, first
served, so it staggers the first round and the later ones start apart. This probe reads the
rounds off the GPU.

Each build is compiled twice: as it runs, and with ``CTA_CLOCK=1`` (kernels/cuda/hopper_fwd.cu),
where each CTA records its %smid and %globaltimer at four points: 0 its start, 1 its Q tile
arrived, 2 its last key block done, 3 its first warpgroup's rows of O stored. Both are timed
(CUDA events, the median of ``LAUNCHES``); the clocked build's records are those of its last
launch. B = 1, H = 16, bf16, non-causal, N = 2048 (256 CTAs) and 16384 (2048 CTAs).

    python data/gpu/probe/hopper_rounds.py --out DIR     # on the GPU: DIR/hopper_rounds.json,
                                                         # DIR/hopper_rounds_clock.json.gz
    python data/gpu/probe/hopper_rounds.py --report DIR  # the rounds, summarised
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from flashio import kernels
from flashio.kernels import gpu, hopper

# (head dim, block_q, block_kv, softmax overlap, K/V stages, skeleton): the builds of
# hopper_cycles.py --cta-cost, and the last tiling without arithmetic (SKELETON=1: no softmax,
# so no overlap)
BUILDS = (
    (64, 128, 128, "none", 2, False),
    (128, 128, 128, "both", 2, False),
    (128, 128, 176, "both", 2, False),
    (128, 128, 176, "none", 2, True),
)
SEQ_LENS, HEADS = (2048, 16384), 16
CLOCK_CTAS, FIELDS = 4096, 5  # as hopper_fwd.cu's CTA_CLOCK block: %smid, then four times
POINTS = ("start", "q_arrived", "loop_done", "stored")
LAUNCHES = 10  # timed launches of each kernel, after two that warm up
CLOCK = "hopper_rounds_clock.json.gz"


def label(build, n: int) -> str:
    d, bq, bkv, overlap, stages, skeleton = build
    return f"d={d} {bq}x{bkv} {overlap} s{stages}{' skeleton' if skeleton else ''} N={n}"


def schedule(build, n: int) -> kernels.Schedule:
    d, bq, bkv, overlap, stages, _ = build
    sh = kernels.AttentionShape(1, HEADS, n, d, "bf16")
    impl = hopper.description(bq, overlap, stages, False)
    return kernels.Schedule("flash2", sh, bq, bkv, 4 * (bq // 64 + 1), impl=impl)


def options(sched, skeleton: bool, clocked: bool) -> tuple[str, ...]:
    extra = (("SKELETON", 1),) if skeleton else ()
    extra += (("CTA_CLOCK", 1),) if clocked else ()
    return hopper.compile_options((*hopper.defines(sched), *extra))


def rounds(records: np.ndarray) -> np.ndarray:
    """Each CTA's round: its place among the CTAs of its SM by start (``records``: CTAs x
    (sm, start, q_arrived, loop_done, stored))."""
    out = np.zeros(len(records), np.int64)
    for sm in np.unique(records[:, 0]):
        mine = np.flatnonzero(records[:, 0] == sm)
        out[mine[np.argsort(records[mine, 1], kind="stable")]] = np.arange(len(mine))
    return out


def summary(records: np.ndarray) -> dict:
    """Per round: how many CTAs, the spread of their starts (10th to 90th percentile, ns), the
    medians of a CTA's span (start to stored), of its wait for its Q tile, its loop and its
    store, and of the gap from the CTA before it on its SM having stored to its own start (its
    first round: none). ``records``: CTAs x (sm, start, q_arrived, loop_done, stored); the
    model's have start and end only (``model_records``), and no parts."""
    r = rounds(records)
    t = records[:, 1:].astype(np.float64)
    parts = records.shape[1] == FIELDS
    prev_end = np.full(len(records), np.nan)
    for sm in np.unique(records[:, 0]):
        mine = np.flatnonzero(records[:, 0] == sm)
        order = mine[np.argsort(t[mine, 0], kind="stable")]
        prev_end[order[1:]] = t[order[:-1], -1]
    out = []
    for k in range(int(r.max()) + 1):
        m = r == k
        starts = t[m, 0]
        row = {
            "round": k,
            "ctas": int(m.sum()),
            "start_spread_ns": float(np.percentile(starts, 90) - np.percentile(starts, 10)),
            "first_start_ns": float(starts.min()),
            "span_ns": float(np.median(t[m, -1] - t[m, 0])),
            "gap_ns": None if k == 0 else float(np.nanmedian(t[m, 0] - prev_end[m])),
        }
        if parts:
            row["q_wait_ns"] = float(np.median(t[m, 1] - t[m, 0]))
            row["loop_ns"] = float(np.median(t[m, 2] - t[m, 1]))
            row["store_ns"] = float(np.median(t[m, 3] - t[m, 2]))
        out.append(row)
    return {"sms": len(np.unique(records[:, 0])), "rounds": out}


def model_records(build, n: int) -> np.ndarray | None:
    """The model's CTAs of the same launch (``simulate(..., timeline=True)`` on h200-measured
    with the validated options): CTAs x (sm, start, end) in ns; None for a skeleton, which the
    model does not replay."""
    if build[5]:
        return None
    from flashio import simulator

    res = simulator.simulate(schedule(build, n), "h200-measured", options=simulator.VALIDATED,
                             timeline=True)  # fmt: skip
    tl = res.timeline[0]  # start s, end s, SM
    t = np.rint((tl[:, :2] - tl[:, 0].min()) * 1e9).astype(np.int64)
    return np.column_stack([tl[:, 2].astype(np.int64), t])


def write_clock(out_dir: Path, arrays: dict) -> None:
    """Each launch's records (CTAs x (sm, four times in ns from the launch's first start))."""
    with gzip.GzipFile(out_dir / CLOCK, "wb", mtime=0) as f:
        f.write(json.dumps({k: v.tolist() for k, v in arrays.items()}).encode())


def read_clock(data_dir: Path) -> dict:
    with gzip.open(data_dir / CLOCK, "rt") as f:
        return {k: np.array(v, np.int64) for k, v in json.load(f).items()}


def run(out_dir: Path) -> dict:
    import cupy
    from isa import nvidia_smi, provenance

    prov = provenance()
    rng = np.random.default_rng(0)
    arrays, results = {}, {}
    code = (gpu.CUDA_DIR / "hopper_fwd.cu").read_text()
    for n in SEQ_LENS:
        for build in BUILDS:
            sched, skeleton, name = schedule(build, n), build[5], label(build, n)
            launches = gpu.compile_schedule(sched).launches
            plain, clocked = (
                hopper.CompiledHopper(sched, gpu._module(code, opts), launches)
                for opts in (options(sched, skeleton, c) for c in (False, True))
            )
            sh = sched.shape
            x = rng.standard_normal((3, 1, sh.heads, n, sh.head_dim)).astype(np.float32)
            bits = [cupy.asarray(a.view(np.uint32) >> 16).astype(cupy.uint16) for a in x]
            times = {}
            for kind, comp in (("plain", plain), ("clocked", clocked)):
                bufs = comp.alloc(*bits)
                ev = (cupy.cuda.Event(), cupy.cuda.Event())
                ms = []
                for k in range(2 + LAUNCHES):
                    comp.launch(bufs, ev)
                    ev[1].synchronize()
                    if k >= 2:
                        ms.append(cupy.cuda.get_elapsed_time(*ev))
                times[kind] = {"median_ms": statistics.median(ms), "ms": ms}
                if kind == "clocked":
                    grid = sh.heads * (-(-n // sched.block_q))
                    ptr = comp.module.get_global("hopper_cta_clock")
                    raw = cupy.ndarray((CLOCK_CTAS * FIELDS,), cupy.uint64, memptr=ptr).get()
                    rec = raw.reshape(CLOCK_CTAS, FIELDS)[:grid].astype(np.int64)
                    rec[:, 1:] -= rec[:, 1].min()
                    arrays[name] = rec
                del bufs
            cupy.get_default_memory_pool().free_all_blocks()
            results[name] = {**times, "gpu": summary(arrays[name])}
            first = results[name]["gpu"]["rounds"][:3]
            print(name, {k: round(v["median_ms"], 4) for k, v in times.items()},
                  json.dumps(first), flush=True)  # fmt: skip
    prov["nvidia_smi_after"] = nvidia_smi()
    out_dir.mkdir(parents=True, exist_ok=True)
    write_clock(out_dir, arrays)
    doc = {"provenance": prov,
           "config": {"builds": [list(b) for b in BUILDS], "seq_lens": list(SEQ_LENS),
                      "heads": HEADS, "launches": LAUNCHES, "points": list(POINTS)},
           "results": results}  # fmt: skip
    (out_dir / "hopper_rounds.json").write_text(json.dumps(doc, indent=1))
    return doc


def report(data_dir: Path) -> list[dict]:
    """Per launch: its times and its rounds from the committed records, beside the model's."""
    doc = json.loads((data_dir / "hopper_rounds.json").read_text())
    arrays = read_clock(data_dir)
    builds = {label(tuple(b), n): (tuple(b), n) for b in doc["config"]["builds"]
              for n in doc["config"]["seq_lens"]}  # fmt: skip
    out = []
    for k, v in doc["results"].items():
        model = model_records(*builds[k])
        out.append({"launch": k, "plain_ms": v["plain"]["median_ms"],
                    "clocked_ms": v["clocked"]["median_ms"], "gpu": summary(arrays[k]),
                    "model": None if model is None else summary(model)})  # fmt: skip
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--out", type=Path, help="run on the GPU; write OUT/hopper_rounds*.json*")
    g.add_argument("--report", type=Path, metavar="DIR", help="the rounds, summarised")
    args = ap.parse_args(argv)
    if args.out:
        run(args.out)
        return 0
    for r in report(args.report):
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
