"""Timing and profiling: CUDA-event timing, the profiler's launches, one measurement (measure,
make_row) and the time mode (Budget, run_group, main_time, flex_defaults).
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
from pathlib import Path

from benchmarks.impl_measure.config import (
    GIVE_UP_AFTER,
    GROUP_WEIGHT,
    HEAD_DIMS,
    Config,
    Skip,
    State,
    configs,
    save,
)
from benchmarks.impl_measure.setups import SETUPS


def time_cuda(run, n_sets: int, reps: int, warmup: int, sleep_cycles: int) -> dict:
    """Median/min/max milliseconds of ``run(set_index)`` between two CUDA events; the sets are
    used in turn. A sleep kernel queued before the start event lets the host enqueue the call
    while the GPU is busy, so the interval is GPU time, not launch overhead."""
    import torch

    for i in range(warmup):
        run(i % n_sets)
    torch.cuda.synchronize()
    samples = []
    for r in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if sleep_cycles:
            torch.cuda._sleep(sleep_cycles)
        a.record()
        run((warmup + r) % n_sets)
        b.record()
        b.synchronize()
        samples.append(a.elapsed_time(b))
    s = sorted(samples)
    mid = len(s) // 2
    median = s[mid] if len(s) % 2 else 0.5 * (s[mid - 1] + s[mid])
    return {
        "median_ms": median,
        "min_ms": s[0],
        "max_ms": s[-1],
        "reps": reps,
        "samples_ms": [round(x, 5) for x in samples],
    }


def profile_launches(run, i: int) -> list[dict]:
    """The kernels (and memsets/memcpys) of one ``run(i)``, from torch.profiler's CUDA activity:
    name, duration, grid, block, registers per thread, shared memory (static + dynamic)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run(i)
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    out = []
    for e in events:
        cat = str(e.get("cat", "")).lower()
        if cat not in ("kernel", "gpu_memset", "gpu_memcpy"):
            continue
        a = e.get("args") or {}
        out.append(
            {
                "name": e.get("name"),
                "cat": cat,
                "ts": e.get("ts"),
                "dur_us": e.get("dur"),
                "grid": a.get("grid"),
                "block": a.get("block"),
                "regs": a.get("registers per thread"),
                "smem_bytes": a.get("shared memory"),
                "blocks_per_sm": a.get("blocks per SM"),
                "warps_per_sm": a.get("warps per SM"),
                "est_occupancy_pct": a.get("est. achieved occupancy %"),
            }
        )
    out.sort(key=lambda e: e["ts"] or 0)
    return out


def try_profile(run, i: int, notes: list) -> list[dict]:
    """profile_launches, or [] with the reason in ``notes`` (the timing stands without it)."""
    try:
        return profile_launches(run, i)
    except Exception as e:
        notes.append(f"profiler failed: {type(e).__name__}: {str(e)[:200]}")
        return []


# ---------------------------------------------------------------------------------------------
# one measurement


def _cleanup() -> None:
    import gc

    import torch

    gc.collect()
    torch.cuda.empty_cache()


def measure(cfg: Config, st: State, reps: int | None = None) -> dict:
    import torch

    args = st.args
    reps = reps or args.reps
    timing_method = "CUDA events around one call, median of reps"
    with contextlib.ExitStack() as stack:
        t = time.perf_counter()
        r = SETUPS[cfg.impl](cfg, st, stack)
        torch.cuda.synchronize()
        setup_s = time.perf_counter() - t
        t = time.perf_counter()
        use_alt = False
        try:
            r.run(0)
            r.run(0)  # twice: a backward that cannot retain its graph fails the second time
            torch.cuda.synchronize()
        except RuntimeError as e:
            if r.alt is None:
                raise
            use_alt = True
            r.notes.append(
                f"backward with retain_graph failed ({type(e).__name__}: "
                f"{str(e)[:200]}); bwd = median(fwd+bwd) - median(fwd)"
            )
            r.alt[0](0)
            torch.cuda.synchronize()
        first_s = time.perf_counter() - t
        sleep = args.sleep_cycles
        if use_alt:
            fb, f = r.alt
            tfb = time_cuda(fb, r.n_sets, reps, args.warmup, sleep)
            tf = time_cuda(f, r.n_sets, reps, args.warmup, sleep)
            timing = {
                "median_ms": tfb["median_ms"] - tf["median_ms"],
                "min_ms": tfb["min_ms"] - tf["median_ms"],
                "max_ms": tfb["max_ms"] - tf["median_ms"],
                "reps": reps,
                "samples_ms": tfb["samples_ms"],
                "fwd_samples_ms": tf["samples_ms"],
            }
            timing_method = "median(fwd+bwd) - median(fwd), CUDA events"
            prof = [] if args.no_profile else try_profile(fb, 1 % r.n_sets, r.notes)
            n_fwd = 0 if args.no_profile else len(try_profile(f, 1 % r.n_sets, r.notes))
            prof = prof[n_fwd:]
        else:
            timing = time_cuda(r.run, r.n_sets, reps, args.warmup, sleep)
            prof = [] if args.no_profile else try_profile(r.run, 1 % r.n_sets, r.notes)
        fields = r.finish(prof) if r.finish else {}
    if not prof:
        r.notes.append(
            "not profiled (--no-profile)"
            if args.no_profile
            else "the profiler saw no kernel launch"
        )
    return make_row(cfg, r, timing, prof, fields, setup_s, first_s, timing_method)


def make_row(cfg, r, timing, prof, fields, setup_s, first_s, timing_method) -> dict:
    kernels = [e for e in prof if e["cat"] == "kernel"]
    names = [e["name"] for e in kernels]
    per = fields.pop("per_kernel", {}) or {}

    def col(key):
        return [
            e.get(key) if e.get(key) is not None else per.get(e["name"], {}).get(key)
            for e in kernels
        ]

    if not kernels and per:  # no profile: the compiled kernels' own figures
        names = list(per)
        regs = [per[n].get("regs") for n in names]
        smem = [per[n].get("smem_bytes") for n in names]
    else:
        regs, smem = col("regs"), col("smem_bytes")
    spills = [per.get(n, {}).get("spills") for n in names]
    notes = list(r.notes) + list(fields.pop("notes", []))
    others = [e for e in prof if e["cat"] != "kernel"]
    if others:
        notes.append(
            f"also {len(others)} memset/memcpy ({sum(e['dur_us'] or 0 for e in others):.1f} us)"
        )
    med = timing["median_ms"]
    row = {
        "impl": cfg.impl,
        "pass": cfg.pass_,
        "batch": cfg.batch,
        "heads": cfg.heads,
        "seq_len": cfg.seq_len,
        "head_dim": cfg.head_dim,
        "dtype": "bf16",
        "causal": cfg.causal,
        "block_m": fields.pop("block_m", None),
        "block_n": fields.pop("block_n", None),
        "num_warps": fields.pop("num_warps", None),
        "num_stages": fields.pop("num_stages", None),
        "median_ms": med,
        "min_ms": timing["min_ms"],
        "max_ms": timing["max_ms"],
        "reps": timing["reps"],
        "tflops": cfg.flops / (med * 1e-3) / 1e12 if med > 0 else None,
        "flops": cfg.flops,
        "kernels": names,
        "regs": regs,
        "spills": spills,
        "smem_bytes": smem,
        "note": "; ".join(notes),
        "grid": [e.get("grid") for e in kernels],
        "block": [e.get("block") for e in kernels],
        "kernel_us": [e.get("dur_us") for e in kernels],
        "rotate_buffers": r.n_sets,
        "timing_method": timing_method,
        "setup_s": round(setup_s, 3),
        "first_call_s": round(first_s, 3),
        "samples_ms": timing["samples_ms"],
        "profile": prof,
        **{k: v for k, v in timing.items() if k == "fwd_samples_ms"},
        **fields,
    }
    return row


# ---------------------------------------------------------------------------------------------
# time mode


class Budget:
    """The run's seconds shared among the implementation groups by weight; what a group leaves
    unused passes on to the groups after it."""

    def __init__(self, total_s: float, impls):
        self.deadline = time.monotonic() + total_s
        self.left = list(impls)

    def group_deadline(self, impl: str) -> float:
        now = time.monotonic()
        w = sum(GROUP_WEIGHT[i] for i in self.left)
        share = max(0.0, self.deadline - now) * GROUP_WEIGHT[impl] / w
        self.left.remove(impl)
        return now + share


def _short(name: str, n: int = 60) -> str:
    return name if len(name) <= n else name[: n - 3] + "..."


def run_group(
    impl: str, group: list[Config], st: State, deadline: float, reps=None, rows: list | None = None
) -> dict:
    """Measure a group's configs in order until the deadline; rows go to ``rows`` (default
    the run's rows, written to the CSV)."""
    doc = st.doc
    rows = doc["rows"] if rows is None else rows
    ok = fails = skipped = 0
    t0 = time.monotonic()
    for cfg in group:
        if time.monotonic() > deadline:
            doc["skipped"].append({"config": cfg.label(), "why": "time budget spent"})
            skipped += 1
            continue
        if ok == 0 and fails >= GIVE_UP_AFTER:
            doc["skipped"].append(
                {"config": cfg.label(), "why": f"the first {fails} {impl} configs failed"}
            )
            skipped += 1
            continue
        try:
            row = measure(cfg, st, reps)
        except Skip as e:
            doc["skipped"].append({"config": cfg.label(), "why": str(e)})
            skipped += 1
            print(f"  skip {cfg.label()}: {str(e)[:160]}", flush=True)
            _cleanup()
            continue
        except Exception as e:
            fails += 1
            doc["errors"].append(
                {"config": cfg.label(), "error": f"{type(e).__name__}: {e}"[:4000]}
            )
            print(f"  FAIL {cfg.label()}: {type(e).__name__}: {str(e)[:300]}", flush=True)
            _cleanup()
            save(st)
            continue
        ok += 1
        rows.append(row)
        tf = f"{row['tflops']:7.1f}" if row["tflops"] is not None else "      -"
        ks = ",".join(_short(k, 40) for k in dict.fromkeys(row["kernels"]))
        print(
            f"  {cfg.label():66s} {row['median_ms']:9.4f} ms {tf} TFLOP/s  "
            f"[{row['setup_s'] + row['first_call_s']:.1f} s setup] {ks}",
            flush=True,
        )
        _cleanup()
        save(st)
    return {
        "configs": len(group),
        "rows": ok,
        "errors": fails,
        "skipped": skipped,
        "elapsed_s": round(time.monotonic() - t0, 1),
    }


def main_time(st: State) -> None:
    import torch

    args = st.args
    torch.manual_seed(0)
    budget = Budget(args.budget_s, args.impls)
    all_cfgs = configs(args)
    for impl in args.impls:
        group = [c for c in all_cfgs if c.impl == impl]
        deadline = budget.group_deadline(impl)
        print(
            f"== {impl}: {len(group)} configs, up to {deadline - time.monotonic():.0f} s",
            flush=True,
        )
        g = run_group(impl, group, st, deadline)
        st.doc["groups"][impl] = g
        print(
            f"== {impl}: {g['rows']} rows, {g['errors']} errors, {g['skipped']} skipped in "
            f"{g['elapsed_s']:.1f} s (run so far {time.monotonic() - st.start:.1f} s)",
            flush=True,
        )
        save(st)
    flex_defaults(st)
    save(st)


def flex_defaults(st: State) -> None:
    """What inductor's heuristics return for flex's default configs here (a cross-check of the
    kernels' own constexprs)."""
    if "flex" not in st.args.impls:
        return
    try:
        import torch
        from torch._inductor.virtualized import V

        st.doc["flex_heuristic_configs"] = {
            f"{p}_d{d}": [
                str(c)
                for c in getattr(V.choices, f"get_flex_attention_{p}_configs")(
                    d, torch.bfloat16, "cuda"
                )
            ]
            for p in ("fwd", "bwd")
            for d in HEAD_DIMS
        }
    except Exception as e:
        st.doc["flex_heuristic_configs"] = f"unavailable: {type(e).__name__}: {e}"
