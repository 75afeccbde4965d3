"""Measure attention kernels of other implementations on a GPU, to validate flashio's time model.

flashio's time model was fitted on the project's own CUDA kernels (benchmarks/gpu_measure.py);
this program times kernels it was never fitted to, bf16, B=1, H=16 (and H=32 for N <= 4096 with
``--heads32``), N in 1024..16384, d in {64, 128}, causal and not:

torch_flash
    ``F.scaled_dot_product_attention`` under ``sdpa_kernel(SDPBackend.FLASH_ATTENTION)``
    (PyTorch's copy of the FlashAttention-2 sm80 code), forward and backward.
torch_cudnn
    The same under ``SDPBackend.CUDNN_ATTENTION`` (recorded as an error where unavailable).
flex
    ``flex_attention`` compiled by ``torch.compile(dynamic=False)`` with the default kernel
    options (a block mask for causal), forward and backward; the block sizes, warps and stages
    inductor chose are read from its compiled kernels (the template's constexprs and launcher).
triton_fa
    benchmarks/triton_attention.py, this project's Triton FlashAttention-2 forward, at the
    tilings ``TRITON_TILINGS``; each tiling is first checked against SDPA at N = 1024.
torch_eager
    S = q @ k^T * scale, softmax, P @ v in eager PyTorch (forward only, N <= 8192).

A forward row times one call; a backward row times the backward alone: autograd.grad with
``retain_graph`` from a forward saved per buffer set (where that fails, median(fwd+bwd) minus
median(fwd), said in the row's note). Timing follows gpu_measure.py: CUDA events around one call,
warm-up, the median of ``--reps``, inputs rotated among buffer sets whose total exceeds 3x the
L2 so that each launch starts cold; a ``torch.cuda._sleep`` is queued before each start event so
that host launch overhead (Python, guards, autograd) is not timed. One more call of each config
runs under torch.profiler (CUDA activity) for the kernels launched, with grid, block, registers
and shared memory (static + dynamic) as CUPTI reports them; Triton kernels add the compiled
kernel's registers, spills and shared memory.

Modes (several may be given; they run in the order time, resources, sass):

time (default)
    The grid above; ``impl_measure.csv`` and ``impl_measure.json`` (provenance, rows, errors,
    skipped configs, the Triton tilings' checks), rewritten after every row. ``--budget-s`` is
    shared among the implementations by weight (unused time passes on); flex comes last and is
    ordered so that a cut drops whole sequence lengths, not head dims or causal.
resources
    cuobjdump's resource usage (REG, STACK, SHARED, LOCAL) of the flash_fwd/flash_bwd kernels in
    libtorch_cuda.so for this GPU's architecture: the sm_XX ELFs are extracted and those holding
    flash kernels read (else ``--dump-resource-usage`` on the whole library), each call under
    ``--cuobjdump-timeout``, all under ``--cuobjdump-budget-s``. Writes ``impl_resources.json``
    and fills the torch_flash rows'
    spills (STACK + LOCAL bytes) when time ran in the same process.
sass
    ``sass/*.sass.gz`` and ``sass/sass_index.json``: the SASS (cuobjdump -sass) of every Triton
    kernel compiled in the run (triton_fa from the compiled kernels' cubins, flex and inductor's
    other kernels from the run's Triton cache) and of the torch flash forward/backward kernels
    that ran, with their Flash_*_kernel_traits. ``--sass-parts`` picks triton and/or torch.
    Without time in the same process it first compiles (triton, flex at N = 2048) or profiles
    (torch) what it needs.
merge (no GPU)
    Fill the spills of the rows of DIR/impl_measure.json from ``--resources-json``.

    python -m benchmarks.impl_measure --dry-run [--quick]
    python -m benchmarks.impl_measure --out DIR [--quick] [--mode time sass]
    python -m benchmarks.impl_measure --out DIR --mode resources sass \
        --sass-parts torch

``--help`` and ``--dry-run`` import neither torch nor triton.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import datetime
import gzip
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BATCH = 1
HEADS = 16
SEQ_LENS = (1024, 2048, 4096, 8192, 16384)
QUICK_SEQ_LENS = (2048, 8192)
HEAD_DIMS = (64, 128)
HEADS32_MAX_N = 4096
EAGER_MAX_N = 8192
# (BLOCK_M, BLOCK_N, num_warps, num_stages) of benchmarks/triton_attention.py
TRITON_TILINGS = (
    (128, 64, 4, 3),
    (128, 128, 8, 3),
    (64, 64, 4, 3),
    (128, 64, 8, 2),
    (64, 128, 4, 3),
)
IMPLS = ("torch_flash", "torch_cudnn", "torch_eager", "triton_fa", "flex")
GROUP_WEIGHT = {
    "torch_flash": 1.0,
    "torch_cudnn": 1.0,
    "torch_eager": 0.5,
    "triton_fa": 2.0,
    "flex": 4.0,
}
FLEX_N_ORDER = (4096, 16384, 1024, 8192, 2048)  # each N compiles anew: coverage first
CHECK_N = 1024  # the Triton kernel's check against SDPA
CHECK_TOL = 2e-2  # max |O - O_sdpa| for bf16 outputs of N(0, 1) inputs
GIVE_UP_AFTER = 4  # an implementation whose first configs all fail is skipped after this many
MINI_N = 2048  # what sass compiles or profiles when time did not run in the process
MAX_FUN_CALLS = 12  # cuobjdump -fun calls on the whole library (each reads all of it)
DEFAULT_L2_BYTES = 60 << 20
DEVICE = "cuda"  # where the inputs live (a CPU smoke test of the logic sets "cpu")
CSV_COLUMNS = (
    "impl",
    "pass",
    "batch",
    "heads",
    "seq_len",
    "head_dim",
    "dtype",
    "causal",
    "block_m",
    "block_n",
    "num_warps",
    "num_stages",
    "median_ms",
    "min_ms",
    "max_ms",
    "reps",
    "tflops",
    "kernels",
    "regs",
    "spills",
    "smem_bytes",
    "note",
)
COLUMN_NOTES = {
    "tflops": "4 N^2 d H B per forward, x2.5 for the backward, halved for causal",
    "kernels": "CUDA kernels in launch order (torch.profiler), ';'-joined",
    "regs": "registers per thread of each kernel (CUPTI; Triton's n_regs where no profile)",
    "spills": "local memory bytes per thread (spills and stack): Triton n_spills * 4 "
    "(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES); torch flash kernels cuobjdump STACK + LOCAL "
    "(resources mode); empty where unknown",
    "smem_bytes": "shared memory per block, static + dynamic (CUPTI; Triton's metadata.shared "
    "where no profile)",
    "block_m/block_n/num_warps/num_stages": "the tiling: triton_fa as run; torch_flash from the "
    "kernel's Flash_*_kernel_traits; flex from inductor's kernel (bwd: BLOCK_M1/BLOCK_N1, "
    "the dK/dV loop; BLOCK_M2/BLOCK_N2 in the note)",
}


class Skip(Exception):
    """A config that is not run (its tiling failed to compile, its backend is missing)."""


@dataclasses.dataclass(frozen=True)
class Config:
    impl: str
    pass_: str
    batch: int
    heads: int
    seq_len: int
    head_dim: int
    causal: bool
    tiling: tuple[int, int, int, int] | None = None

    @property
    def dims(self) -> tuple[int, int, int, int]:
        return (self.batch, self.heads, self.seq_len, self.head_dim)

    @property
    def flops(self) -> float:
        f = 4.0 * self.seq_len**2 * self.head_dim * self.heads * self.batch
        f *= 2.5 if self.pass_ == "bwd" else 1.0
        return f / 2 if self.causal else f

    def label(self) -> str:
        t = "" if self.tiling is None else " tiles=" + "/".join(map(str, self.tiling))
        return (
            f"{self.impl} {self.pass_} B={self.batch} H={self.heads} N={self.seq_len} "
            f"d={self.head_dim} causal={int(self.causal)}{t}"
        )


def shapes(args) -> list[tuple[int, int, int, int, bool]]:
    seqs = QUICK_SEQ_LENS if args.quick else SEQ_LENS
    out = [(BATCH, HEADS, n, d, c) for n in seqs for d in HEAD_DIMS for c in (False, True)]
    if args.heads32:
        out += [
            (BATCH, 32, n, d, c)
            for n in seqs
            if n <= HEADS32_MAX_N
            for d in HEAD_DIMS
            for c in (False, True)
        ]
    return out


def configs(args) -> list[Config]:
    """Every config of the time mode, in measurement order (grouped by implementation)."""
    out: list[Config] = []
    sh = shapes(args)
    for impl in args.impls:
        if impl in ("torch_flash", "torch_cudnn"):
            out += [Config(impl, p, *s) for s in sh for p in ("fwd", "bwd")]
        elif impl == "torch_eager":
            out += [Config(impl, "fwd", *s) for s in sh if s[2] <= EAGER_MAX_N]
        elif impl == "triton_fa":
            out += [
                Config(impl, "fwd", *s, tiling=t)
                for d in HEAD_DIMS
                for c in (False, True)
                for t in TRITON_TILINGS
                for s in sh
                if s[3] == d and s[4] == c
            ]
        elif impl == "flex":  # H=16 only: every shape is a compile
            rank = {n: i for i, n in enumerate(FLEX_N_ORDER)}
            fs = sorted(
                (s for s in sh if s[1] == HEADS), key=lambda s: (rank.get(s[2], 99), s[3:])
            )
            out += [Config(impl, p, *s) for s in fs for p in ("fwd", "bwd")]
    return out


# ---------------------------------------------------------------------------------------------
# state, provenance, output


class State:
    def __init__(self, args):
        self.args = args
        self.out = Path(args.out) if args.out else None
        self.start = time.monotonic()
        self.l2 = DEFAULT_L2_BYTES
        self.doc: dict = {
            "provenance": None,
            "settings": settings(args),
            "columns": COLUMN_NOTES,
            "rows": [],
            "errors": [],
            "skipped": [],
            "triton_tilings": [],
            "groups": {},
        }
        self.triton_status: dict = {}  # (d, causal, tiling) -> status dict
        self.triton_kernels: dict = {}  # (d, causal, tiling) -> Triton CompiledKernel
        self.flex_kernels: list = []  # inductor kernels seen, with the rows that ran them
        self.cuobjdump_log: list = []
        self.cuobjdump_deadline: float | None = None  # set at the first cuobjdump call
        self.flash_functions = None  # (functions, method), from resources or sass
        self.runtime_profile: list | None = None  # torch flash launches seen (mini profile)
        self._flex = None
        self._masks: dict = {}
        self._ta = None
        self.xelf_dir: Path | None = None

    def triton_module(self):
        if self._ta is None:
            from benchmarks import triton_attention

            self._ta = triton_attention
        return self._ta

    def flex_fn(self):
        if self._flex is None:
            import warnings

            import torch
            import torch._dynamo
            import torch._functorch.config
            from torch.nn.attention.flex_attention import flex_attention

            cfg = torch._dynamo.config
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for name, val in (
                    ("recompile_limit", 256),
                    ("cache_size_limit", 256),
                    ("accumulated_recompile_limit", 4096),
                    ("accumulated_cache_size_limit", 4096),
                ):
                    if hasattr(cfg, name):
                        setattr(cfg, name, val)
            # a backward compiled with donated buffers refuses retain_graph (the timed call)
            fcfg = torch._functorch.config
            if hasattr(fcfg, "donated_buffer"):
                fcfg.donated_buffer = False
            self._flex = torch.compile(flex_attention, dynamic=self.args.flex_dynamic)
        return self._flex

    def block_mask(self, n: int):
        if n not in self._masks:
            from torch.nn.attention.flex_attention import create_block_mask

            def causal(b, h, q_idx, kv_idx):
                return q_idx >= kv_idx

            self._masks[n] = create_block_mask(causal, None, None, n, n, device=DEVICE)
        return self._masks[n]


def settings(args) -> dict:
    return {
        "modes": args.mode,
        "impls": list(args.impls),
        "quick": args.quick,
        "heads32": args.heads32,
        "reps": args.reps,
        "warmup": args.warmup,
        "sleep_cycles": args.sleep_cycles,
        "budget_s": args.budget_s,
        "flex_dynamic": args.flex_dynamic,
        "flex_compile": "torch.compile(flex_attention, dynamic=flex_dynamic), default "
        "kernel options; torch._functorch.config.donated_buffer = False so that the backward "
        "can be re-run with retain_graph",
        "cuobjdump_budget_s": args.cuobjdump_budget_s,
        "triton_tilings": [list(t) for t in TRITON_TILINGS],
        "check": {"seq_len": CHECK_N, "tol_max_abs_vs_sdpa": CHECK_TOL},
        "dtype": "bf16",
        "inputs": "torch.randn (N(0, 1)), fresh per buffer set",
    }


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _driver_version():
    try:
        import ctypes

        lib, v = ctypes.CDLL("libcuda.so.1"), ctypes.c_int(0)
        return v.value if lib.cuDriverGetVersion(ctypes.byref(v)) == 0 else None
    except OSError:
        return None


def command_line() -> str:
    """gpu_measure's: this process's command, the script named relative to the repository."""
    try:
        from benchmarks.gpu_measure import command_line as gm_command_line

        return gm_command_line()
    except ImportError:
        root, script = Path(__file__).resolve().parents[1], Path(sys.argv[0]).resolve()
        rel = script.relative_to(root) if script.is_relative_to(root) else script
        return " ".join([str(rel), *sys.argv[1:]])


def provenance() -> dict:
    import torch

    props = torch.cuda.get_device_properties(0)
    here = Path(__file__).resolve().parent
    info = {
        "gpu": props.name,
        "compute_capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "smem_optin_bytes": getattr(props, "shared_memory_per_block_optin", None),
        "total_memory_bytes": props.total_memory,
        "cuda_driver_version": _driver_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "python": sys.version.split()[0],
        "command": command_line(),
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python_sources_sha256": {
            p.name: _sha256(p) for p in (here / "impl_measure.py", here / "triton_attention.py")
        },
    }
    for mod in ("triton", "cupy"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception as e:
            info[mod] = f"unavailable: {type(e).__name__}"
    for key, cmd in {
        "nvidia_smi": [
            "nvidia-smi",
            "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit",
            "--format=csv,noheader",
        ],
        "cuobjdump": [cuobjdump_path() or "cuobjdump", "--version"],
        "git_head": ["git", "rev-parse", "HEAD"],
    }.items():
        try:
            info[key] = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError) as e:
            info[key] = f"unavailable: {e}"
    return info


def _csv_value(v):
    if v is None:
        return ""
    if isinstance(v, (list, tuple)):
        return ";".join("" if x is None else str(x) for x in v)
    if isinstance(v, float):
        return f"{v:.6g}"
    return v


def save(st: State) -> None:
    """impl_measure.json and .csv; a run without the time mode (resources, sass alone) writes
    its provenance, errors and compile-only rows to impl_aux.json instead, so that its folder
    never holds an impl_measure.csv without the timings."""
    if st.out is None:
        return
    st.doc["wall_s"] = round(time.monotonic() - st.start, 1)
    timed = "time" in st.args.mode or "merge" in st.args.mode
    name = "impl_measure.json" if timed else "impl_aux.json"
    tmp = st.out / (name + ".tmp")
    tmp.write_text(json.dumps(st.doc, indent=1, default=str))
    tmp.replace(st.out / name)
    if not timed:
        return
    with open(st.out / "impl_measure.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for row in st.doc["rows"]:
            w.writerow([_csv_value(row.get(c)) for c in CSV_COLUMNS])


# ---------------------------------------------------------------------------------------------
# timing and profiling


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


def n_sets_for(set_bytes: int, l2_bytes: int) -> int:
    """gpu_measure's: enough buffer sets that their total exceeds 3x the L2 (3 to 64)."""
    try:
        from benchmarks.gpu_measure import n_sets_for as gm_n_sets_for

        return gm_n_sets_for(set_bytes, l2_bytes)
    except ImportError:
        return max(3, min(64, math.ceil(3 * l2_bytes / max(set_bytes, 1))))


# ---------------------------------------------------------------------------------------------
# implementations: each setup returns a Runner whose run(i) is one timed call on buffer set i


@dataclasses.dataclass
class Runner:
    run: object
    n_sets: int
    alt: tuple | None = None  # (fwd+bwd, fwd) for a backward that cannot retain its graph
    finish: object = None  # profile -> dict of row fields, after the calls
    notes: list = dataclasses.field(default_factory=list)


def _randn(dims, count: int, grad: bool = False):
    import torch

    return [
        torch.randn(dims, device=DEVICE, dtype=torch.bfloat16, requires_grad=grad)
        for _ in range(count)
    ]


def _n_sets(cfg: Config, st: State) -> int:
    per = math.prod(cfg.dims) * 2
    return n_sets_for(per * (5 if cfg.pass_ == "bwd" else 3), st.l2)


def _runner(cfg: Config, st: State, forward) -> Runner:
    """Buffer sets and the timed call: forward(q, k, v), or the backward of a saved forward."""
    import torch

    n_sets = _n_sets(cfg, st)
    if cfg.pass_ == "fwd":
        sets = [tuple(_randn(cfg.dims, 3)) for _ in range(n_sets)]
        return Runner(lambda i: forward(*sets[i]), n_sets)
    sets = []
    for _ in range(n_sets):
        q, k, v = _randn(cfg.dims, 3, grad=True)
        o = forward(q, k, v)
        sets.append((q, k, v, o, torch.randn_like(o)))

    def bwd(i):
        q, k, v, o, do = sets[i]
        torch.autograd.grad(o, (q, k, v), do, retain_graph=True)

    def fwd_bwd(i):
        q, k, v, _, do = sets[i]
        torch.autograd.grad(forward(q, k, v), (q, k, v), do)

    def fwd(i):
        forward(*sets[i][:3])

    return Runner(bwd, n_sets, alt=(fwd_bwd, fwd))


def setup_sdpa(cfg: Config, st: State, stack) -> Runner:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    name = "FLASH_ATTENTION" if cfg.impl == "torch_flash" else "CUDNN_ATTENTION"
    backend = getattr(SDPBackend, name, None)
    if backend is None:
        raise Skip(f"SDPBackend.{name} does not exist in torch {torch.__version__}")
    stack.enter_context(sdpa_kernel(backend))
    r = _runner(
        cfg, st, lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=cfg.causal)
    )
    if cfg.impl == "torch_flash":
        r.finish = flash_row_fields
    return r


def setup_eager(cfg: Config, st: State, stack) -> Runner:
    import torch

    stack.enter_context(torch.no_grad())
    scale = 1.0 / math.sqrt(cfg.head_dim)
    n = cfg.seq_len
    mask = torch.ones(n, n, dtype=torch.bool, device=DEVICE).triu(1) if cfg.causal else None

    def forward(q, k, v):
        s = torch.matmul(q, k.transpose(-2, -1)) * scale
        if mask is not None:
            s.masked_fill_(mask, float("-inf"))
        return torch.matmul(torch.softmax(s, dim=-1), v)

    r = _runner(cfg, st, forward)
    r.notes.append("S and P in bf16 (softmax accumulates in fp32)")
    if cfg.causal:
        r.notes.append(
            "causal by masking the full S: computes all N^2 scores; tflops halved by convention"
        )
    return r


def triton_kernel_fields(k) -> dict:
    if k is None or not hasattr(k, "metadata"):  # the interpreter returns no compiled kernel
        return {"name": "fa2_fwd"}
    md = k.metadata
    n_spills = getattr(k, "n_spills", None)
    return {
        "name": k.name,
        "regs": getattr(k, "n_regs", None),
        "n_spills": n_spills,
        "spills": None if n_spills is None else 4 * n_spills,
        "smem_bytes": getattr(md, "shared", None),
        "num_warps": getattr(md, "num_warps", None),
        "num_stages": getattr(md, "num_stages", None),
        "hash": getattr(k, "hash", None),
    }


def check_triton(cfg: Config, st: State) -> dict:
    """Compile the tiling and compare its O and LSE at N = CHECK_N with SDPA and fp32."""
    import torch
    import torch.nn.functional as F

    ta = st.triton_module()
    bm, bn, w, s = cfg.tiling
    rec = {
        "head_dim": cfg.head_dim,
        "causal": cfg.causal,
        "tiling": list(cfg.tiling),
        "check_shape": [cfg.batch, cfg.heads, CHECK_N, cfg.head_dim],
    }
    q, k, v = _randn((cfg.batch, cfg.heads, CHECK_N, cfg.head_dim), 3)
    t = time.perf_counter()
    try:
        o, lse, kern = ta.launch(q, k, v, cfg.causal, bm, bn, w, s)
        torch.cuda.synchronize()
    except Exception as e:
        rec.update(status="failed", why=f"{type(e).__name__}: {e}"[:2000])
        return rec
    rec["compile_and_first_call_s"] = round(time.perf_counter() - t, 2)
    st.triton_kernels[(cfg.head_dim, cfg.causal, cfg.tiling)] = kern
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=cfg.causal)
    o32, lse32 = ta.reference(q, k, v, cfg.causal)
    err = {
        "max_abs_err_vs_sdpa": (o.float() - ref.float()).abs().max().item(),
        "max_abs_err_vs_fp32": (o.float() - o32).abs().max().item(),
        "sdpa_max_abs_err_vs_fp32": (ref.float() - o32).abs().max().item(),
        "lse_max_abs_err_vs_fp32": (lse - lse32).abs().max().item(),
    }
    ok = all(math.isfinite(x) for x in err.values()) and err["max_abs_err_vs_sdpa"] <= CHECK_TOL
    rec.update(status="ok", check=err, check_passed=ok, kernel=triton_kernel_fields(kern))
    return rec


def setup_triton(cfg: Config, st: State, stack) -> Runner:
    key = (cfg.head_dim, cfg.causal, cfg.tiling)
    if key not in st.triton_status:
        rec = check_triton(cfg, st)
        st.triton_status[key] = rec
        st.doc["triton_tilings"].append(rec)
        err = rec.get("check", {}).get("max_abs_err_vs_sdpa")
        what = f"max|O - O_sdpa| = {err:.2e}" if err is not None else rec.get("why", "")[:150]
        if err is not None and not rec.get("check_passed"):
            what += f" > {CHECK_TOL}: check FAILED"
        print(
            f"  check d={cfg.head_dim} causal={int(cfg.causal)} tiles={cfg.tiling}: "
            f"{'compiled' if rec['status'] == 'ok' else rec['status']}, {what}",
            flush=True,
        )
    rec = st.triton_status[key]
    if rec["status"] != "ok":
        raise Skip(f"tiling does not run: {rec['why'][:300]}")
    ta = st.triton_module()
    bm, bn, w, s = cfg.tiling
    holder = {}

    def forward(q, k, v):
        o, _, holder["k"] = ta.launch(q, k, v, cfg.causal, bm, bn, w, s)
        return o

    r = _runner(cfg, st, forward)
    if not rec.get("check_passed", False):
        r.notes.append(f"numerics check FAILED at N={CHECK_N}: {rec.get('check')}")

    def finish(prof):
        f = triton_kernel_fields(holder["k"])
        return {
            "block_m": bm,
            "block_n": bn,
            "num_warps": w,
            "num_stages": s,
            "per_kernel": {f["name"]: f},
            "triton_kernel": f,
        }

    r.finish = finish
    return r


def setup_flex(cfg: Config, st: State, stack) -> Runner:
    fn = st.flex_fn()
    bm = st.block_mask(cfg.seq_len) if cfg.causal else None
    before = set(inductor_autotuners())
    t0 = time.time()
    r = _runner(cfg, st, lambda q, k, v: fn(q, k, v, block_mask=bm))
    r.finish = lambda prof: flex_row_fields(cfg, st, before, t0, prof)
    return r


SETUPS = {
    "torch_flash": setup_sdpa,
    "torch_cudnn": setup_sdpa,
    "torch_eager": setup_eager,
    "triton_fa": setup_triton,
    "flex": setup_flex,
}


# ---------------------------------------------------------------------------------------------
# what the kernels were: flash traits from names, inductor's choices for flex


def template_args(name: str, func: str) -> list[str] | None:
    """The top-level template arguments of ``func<...>`` in a demangled name."""
    i = name.find(func + "<")
    if i < 0:
        return None
    args, cur, depth = [], [], 1
    for ch in name[i + len(func) + 1 :]:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
            if depth == 0:
                args.append("".join(cur).strip())
                return args
        elif ch == "," and depth == 1:
            args.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    return None


_FWD_TRAITS = (
    "kHeadDim",
    "kBlockM",
    "kBlockN",
    "kNWarps",
    "Is_Q_in_regs",
    "Share_Q_K_smem",
    "elem_type",
    "Base",
)
_BWD_TRAITS = (
    "kHeadDim",
    "kBlockM",
    "kBlockN",
    "kNWarps",
    "AtomLayoutMSdP",
    "AtomLayoutNdKV",
    "AtomLayoutMdQ",
    "Is_V_in_regs",
    "No_double_buffer",
    "elem_type",
    "Base",
)
_KERNEL_ARGS = {  # the non-traits template parameters, by count, of PyTorch's FA2 versions
    "flash_fwd_kernel": {
        6: ("Is_dropout", "Is_causal", "Is_local", "Is_even_MN", "Is_even_K", "Return_softmax"),
        7: (
            "Is_dropout",
            "Is_causal",
            "Is_local",
            "Has_alibi",
            "Is_even_MN",
            "Is_even_K",
            "Return_softmax",
        ),
        8: (
            "Is_dropout",
            "Is_causal",
            "Is_local",
            "Has_alibi",
            "Is_even_MN",
            "Is_even_K",
            "Is_softcap",
            "Return_softmax",
        ),
    },
    "flash_fwd_splitkv_kernel": {
        6: ("Is_causal", "Is_local", "Is_even_MN", "Is_even_K", "Split", "Append_KV"),
        7: ("Is_causal", "Is_local", "Has_alibi", "Is_even_MN", "Is_even_K", "Split", "Append_KV"),
        8: (
            "Is_causal",
            "Is_local",
            "Has_alibi",
            "Is_even_MN",
            "Is_even_K",
            "Is_softcap",
            "Split",
            "Append_KV",
        ),
    },
    "flash_fwd_splitkv_combine_kernel": {3: ("kBlockM", "Log_max_splits", "Is_even_K")},
    "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel": {
        5: ("Is_dropout", "Is_causal", "Is_local", "Is_even_MN", "Is_even_K"),
        6: ("Is_dropout", "Is_causal", "Is_local", "Has_alibi", "Is_even_MN", "Is_even_K"),
        7: (
            "Is_dropout",
            "Is_causal",
            "Is_local",
            "Has_alibi",
            "Is_even_MN",
            "Is_even_K",
            "Is_softcap",
        ),
    },
    "flash_bwd_dot_do_o_kernel": {1: ("Clear_dQaccum",)},
}


def _literal(s: str):
    if s in ("true", "false", "True", "False"):
        return s in ("true", "True")
    if re.fullmatch(r"-?\d+", s):
        return int(s)
    return s


def flash_signature(demangled: str) -> dict | None:
    """Kernel, Flash_*_kernel_traits and the other template arguments of a flash kernel."""
    m = re.search(r"(flash_(?:fwd|bwd)\w*)<", demangled or "")
    if m is None:
        return None
    kernel = m.group(1)
    args = template_args(demangled, kernel) or []
    out: dict = {"kernel": kernel, "template_args": args}
    rest = []
    for a in args:
        kind = re.search(r"Flash_(fwd|bwd)_kernel_traits<", a)
        if kind and "traits" not in out:
            names = _FWD_TRAITS if kind.group(1) == "fwd" else _BWD_TRAITS
            vals = template_args(a, f"Flash_{kind.group(1)}_kernel_traits") or []
            out["traits_kind"] = kind.group(1)
            pairs = zip(names, vals, strict=False)
            out["traits"] = {n: _literal(v) for n, v in pairs if n != "Base"}
        else:
            rest.append(a)
    names = _KERNEL_ARGS.get(kernel, {}).get(len(rest))
    out["flags"] = (
        {n: _literal(v) for n, v in zip(names, rest, strict=True)}
        if names
        else {f"arg{i}": _literal(v) for i, v in enumerate(rest)}
    )
    return out


def _norm(name: str) -> str:
    return re.sub(r"\s+", "", name or "")


def flash_row_fields(prof) -> dict:
    """block_m/block_n/num_warps of a torch flash row from its main kernel's traits."""
    sigs = [flash_signature(e["name"]) for e in prof if e["cat"] == "kernel"]
    sigs = [s for s in sigs if s and "traits" in s]
    main = next(
        (
            s
            for s in sigs
            if s["kernel"].startswith(
                ("flash_fwd_kernel", "flash_fwd_splitkv_kernel", "flash_bwd_dq_dk_dv")
            )
        ),
        None,
    )
    if main is None:
        return {"flash_kernels": sigs}
    t = main["traits"]
    return {
        "block_m": t.get("kBlockM"),
        "block_n": t.get("kBlockN"),
        "num_warps": t.get("kNWarps"),
        "flash_kernels": sigs,
    }


def inductor_autotuners() -> dict:
    """id -> inductor's CachingAutotuner of every kernel compiled so far in this process."""
    try:
        from torch._inductor.codecache import PyCodeCache
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner
    except Exception:
        return {}
    mods = list(getattr(PyCodeCache, "modules", []) or [])
    mods += list((getattr(PyCodeCache, "modules_no_attr", {}) or {}).values())
    mods += list((getattr(PyCodeCache, "cache", {}) or {}).values())
    found = {}
    for m in mods:
        for v in list(vars(m).values()):
            if issubclass(type(v), CachingAutotuner):
                found[id(v)] = v
    if not found:  # kept elsewhere in some versions: look through the heap
        import gc

        # type(), not isinstance(): the heap holds dead weak proxies and lazy modules
        found = {id(o): o for o in gc.get_objects() if issubclass(type(o), CachingAutotuner)}
    return found


_CONSTEXPR = re.compile(r"^\s*([A-Za-z_]\w*)\s*:\s*tl\.constexpr\s*=\s*(.+?)\s*$", re.M)


def _jsonable(v):
    return v if isinstance(v, (int, float, str, bool)) or v is None else str(v)


def autotuner_fields(a) -> dict:
    fn = getattr(a, "fn", None)
    src = getattr(fn, "src", "") or ""
    info = {
        "name": getattr(fn, "__name__", None)
        or (getattr(a, "inductor_meta", {}) or {}).get("kernel_name"),
        "constexprs": {k: _literal(v) for k, v in _CONSTEXPR.findall(src)},
        "launchers": [],
    }
    for ln in getattr(a, "launchers", None) or []:
        c = getattr(ln, "config", None)
        n_spills = getattr(ln, "n_spills", None)
        info["launchers"].append(
            {
                "num_warps": getattr(c, "num_warps", None),
                "num_stages": getattr(c, "num_stages", None),
                "kwargs": {k: _jsonable(v) for k, v in (getattr(c, "kwargs", {}) or {}).items()},
                "regs": getattr(ln, "n_regs", None),
                "n_spills": n_spills,
                "spills": None if n_spills is None else 4 * n_spills,
                "smem_bytes": getattr(ln, "shared", None),
                "cache_hash": getattr(ln, "cache_hash", None),
            }
        )
    if not info["launchers"]:
        info["configs"] = [str(c) for c in getattr(a, "configs", []) or []]
    return info


def inductor_sources_since(t0: float) -> list[dict]:
    """Fallback: inductor's kernel sources written since t0 (its cache directory), parsed for
    the template's constexprs and the decorator's num_warps/num_stages."""
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        root = Path(cache_dir())
    except Exception:
        return []
    out = []
    for p in root.rglob("*.py"):
        try:
            if p.stat().st_mtime < t0 - 1:
                continue
            text = p.read_text(errors="replace")
        except OSError:
            continue
        if "tl.constexpr =" not in text or "template(" not in text:
            continue
        for m in re.finditer(r"template\((.*?)\)\s*@triton\.jit\s*def\s+(\w+)\(", text, re.S):
            deco, name = m.group(1), m.group(2)
            body = text[m.end() : m.end() + 20000]
            nw, ns = re.search(r"num_warps=(\d+)", deco), re.search(r"num_stages=(\d+)", deco)
            out.append(
                {
                    "name": name,
                    "constexprs": {k: _literal(v) for k, v in _CONSTEXPR.findall(body)},
                    "launchers": [
                        {
                            "num_warps": int(nw[1]) if nw else None,
                            "num_stages": int(ns[1]) if ns else None,
                        }
                    ],
                    "source": "inductor cache file",
                }
            )
    return out


def flex_row_fields(cfg: Config, st: State, before: set, t0: float, prof) -> dict:
    new = [a for i, a in inductor_autotuners().items() if i not in before]
    infos = [autotuner_fields(a) for a in new]
    how = "inductor's compiled kernels (CachingAutotuner: template constexprs, launcher config)"
    if not any(i["constexprs"] for i in infos):
        alt = inductor_sources_since(t0)
        if alt:
            infos, how = alt, "inductor's kernel sources in its cache directory"
    ran = [e["name"] for e in prof if e["cat"] == "kernel"]
    for info in infos:
        info["ran_in"] = [cfg.label()] if info["name"] in ran else []
    st.flex_kernels += infos
    fields: dict = {"inductor_kernels": infos, "per_kernel": {}}
    for info in infos:
        if info["name"] in ran and info["launchers"]:
            fields["per_kernel"][info["name"]] = info["launchers"][0]
    tem = [
        i
        for i in infos
        if i["name"] in ran and ("BLOCK_M" in i["constexprs"] or "BLOCK_M1" in i["constexprs"])
    ]
    if not tem:
        fields["notes"] = [
            "flex tiling not retrievable (no inductor template kernel of this "
            "config found among the compiled kernels or the cache sources)"
        ]
        return fields
    c, ln = tem[0]["constexprs"], (tem[0]["launchers"] or [{}])[0]
    if cfg.pass_ == "fwd" or "BLOCK_M1" not in c:
        fields.update(block_m=c.get("BLOCK_M"), block_n=c.get("BLOCK_N"))
    else:
        fields.update(block_m=c.get("BLOCK_M1"), block_n=c.get("BLOCK_N1"))
        fields["notes"] = [
            f"flex bwd: dK/dV loop BLOCK_M1 x BLOCK_N1 = {c.get('BLOCK_M1')} x "
            f"{c.get('BLOCK_N1')}, dQ loop BLOCK_M2 x BLOCK_N2 = "
            f"{c.get('BLOCK_M2')} x {c.get('BLOCK_N2')}"
        ]
    fields.update(
        num_warps=ln.get("num_warps"), num_stages=ln.get("num_stages"), flex_tiling_source=how
    )
    return fields


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


# ---------------------------------------------------------------------------------------------
# cuobjdump: libtorch's flash kernels, Triton cubins


def cuobjdump_path() -> str | None:
    p = shutil.which("cuobjdump")
    if p:
        return p
    try:
        import importlib.util

        spec = importlib.util.find_spec("triton")
        if spec and spec.origin:
            cand = Path(spec.origin).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
            if cand.exists():
                return str(cand)
    except (ImportError, ValueError):
        pass
    return None


def torch_cuda_lib() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        raise FileNotFoundError("torch is not installed")
    lib = Path(spec.origin).parent / "lib" / "libtorch_cuda.so"
    if not lib.exists():
        raise FileNotFoundError(f"{lib} does not exist")
    return lib


def run_tool(st: State, cmd: list, timeout: float, cwd=None, stdout_path=None):
    """Run a command (cuobjdump), logging its wall time and outcome; None on timeout/failure.
    subprocess.run kills the command itself when it overruns. All calls of a run share
    --cuobjdump-budget-s, counted from the first."""
    t = time.monotonic()
    if st.cuobjdump_deadline is None:
        st.cuobjdump_deadline = t + st.args.cuobjdump_budget_s
    timeout = min(timeout, st.cuobjdump_deadline - t)
    shown = " ".join(re.sub(r"^/.*/(lib/[^/]+|[^/]+)$", r"<...>/\1", str(c)) for c in cmd)
    entry = {"cmd": shown, "timeout_s": round(timeout, 1)}
    if timeout < 5:
        entry["rc"] = "not run: --cuobjdump-budget-s spent"
        st.cuobjdump_log.append(entry)
        print(f"  [not run: cuobjdump budget spent] {_short(shown, 100)}", flush=True)
        return None
    p = None
    try:
        if stdout_path is not None:
            with open(stdout_path, "w") as f:
                p = subprocess.run(
                    cmd,
                    stdout=f,
                    stderr=subprocess.PIPE,
                    text=True,
                    errors="replace",
                    timeout=timeout,
                    cwd=cwd,
                )
        else:
            p = subprocess.run(
                cmd, capture_output=True, text=True, errors="replace", timeout=timeout, cwd=cwd
            )
        entry.update(rc=p.returncode, stderr_tail=(p.stderr or "")[-1000:])
    except subprocess.TimeoutExpired:
        entry["rc"] = "timeout"
        p = None
    except OSError as e:
        entry["rc"] = f"OSError: {e}"
    entry["wall_s"] = round(time.monotonic() - t, 1)
    st.cuobjdump_log.append(entry)
    print(f"  [{entry['wall_s']:6.1f} s rc={entry['rc']}] {_short(shown, 110)}", flush=True)
    return p if p is not None and p.returncode == 0 else None


_RES_PAIR = re.compile(r"([A-Z]+(?:\[\d+\])?):(\d+)")


def parse_res_usage(lines, keep=None) -> list[dict]:
    """Functions of ``cuobjdump -res-usage`` output: name, arch, ELF index, REG, STACK, ..."""
    out, arch, elf, fn = [], None, 0, None
    for line in lines:
        s = line.strip()
        if s.startswith("Fatbin elf code"):
            elf += 1
        elif m := re.match(r"arch = (sm_\w+)", s):
            arch = m.group(1)
        elif m := re.match(r"Function (\S+):$", s):
            fn = m.group(1) if keep is None or keep(m.group(1)) else None
        elif fn and s.startswith("REG:"):
            out.append(
                {
                    "mangled": fn,
                    "arch": arch,
                    "elf_index": elf,
                    **{k: int(v) for k, v in _RES_PAIR.findall(s)},
                }
            )
            fn = None
    return out


def split_sass(text: str) -> dict[str, str]:
    """Function name -> its SASS, from ``cuobjdump -sass`` output."""
    funcs, cur, buf = {}, None, []
    for line in text.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m or (cur and (line.startswith("Fatbin") or re.match(r"\s*code for sm_", line))):
            if cur:
                funcs[cur] = "\n".join(buf) + "\n"
            cur, buf = (m.group(1), [line]) if m else (None, [])
            continue
        if cur:
            buf.append(line)
    if cur:
        funcs[cur] = "\n".join(buf) + "\n"
    return funcs


def sass_instructions(text: str) -> int:
    return len(re.findall(r"/\*[0-9a-f]{4,}\*/\s+[@A-Z]", text))


def demangle(names) -> dict[str, str]:
    """Mangled -> demangled C++ names: libstdc++'s __cxa_demangle, else cu++filt/c++filt."""
    names = list(dict.fromkeys(names))
    out: dict[str, str] = {}
    try:
        import ctypes
        import ctypes.util

        lib = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
        fn = getattr(lib, "__cxa_demangle")
        fn.restype = ctypes.c_void_p
        fn.argtypes = [
            ctypes.c_char_p,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_int),
        ]
        free = ctypes.CDLL(None).free
        free.argtypes = [ctypes.c_void_p]
        for n in names:
            status = ctypes.c_int(0)
            ptr = fn(n.encode(), None, None, ctypes.byref(status))
            if status.value == 0 and ptr:
                out[n] = ctypes.string_at(ptr).decode(errors="replace")
                free(ptr)
    except (OSError, AttributeError):
        pass
    missing = [n for n in names if n not in out]
    tool = shutil.which("cu++filt") or shutil.which("c++filt")
    if missing and tool:
        try:
            p = subprocess.run(
                [tool],
                input="\n".join(missing) + "\n",
                capture_output=True,
                text=True,
                timeout=120,
            )
            out.update(zip(missing, p.stdout.splitlines(), strict=False))
        except (OSError, subprocess.SubprocessError):
            pass
    return out


def _is_flash(mangled: str) -> bool:
    return "flash_fwd" in mangled or "flash_bwd" in mangled


def gpu_arch() -> str:
    try:
        import torch

        major, minor = torch.cuda.get_device_capability()
        return f"sm_{major}{minor}"
    except Exception:
        return "sm_90"


def extract_flash_cubins(st: State, work: Path) -> list[Path]:
    """The ELFs of libtorch_cuda.so for this GPU's arch that hold flash kernels, extracted."""
    args, cu = st.args, cuobjdump_path()
    lib, arch = torch_cuda_lib(), gpu_arch()
    p = run_tool(st, [cu, "-lelf", str(lib)], args.cuobjdump_timeout)
    if p is None:
        return []
    names = re.findall(r"ELF file\s+\d+:\s*(\S+)", p.stdout)
    if st.out is not None:
        with gzip.open(st.out / "libtorch_cuda_elfs.txt.gz", "wt") as f:
            f.write(p.stdout)
    mine = [n for n in names if arch in n]
    flash = [n for n in mine if "flash" in n.lower()]
    if not mine:
        st.doc.setdefault("notes", []).append(
            f"no ELF name of the {len(names)} that cuobjdump -lelf lists in libtorch_cuda.so "
            f"mentions {arch}: nothing extracted"
        )
        return []
    partial = ",".join(flash) if 0 < len(flash) <= 200 else arch
    if run_tool(st, [cu, "-xelf", partial, str(lib)], args.cuobjdump_timeout, cwd=work) is None:
        return []
    keep = []
    for f in sorted(work.iterdir()):
        if not f.is_file():
            continue
        data = f.read_bytes()
        if b"flash_fwd" in data or b"flash_bwd" in data:
            keep.append(f)
        else:
            f.unlink()
    print(f"  {len(keep)} of the {len(mine)} {arch} ELFs hold flash kernels", flush=True)
    return keep


def flash_functions(st: State) -> tuple[list[dict], str]:
    """Resource usage of every flash_fwd/flash_bwd function in libtorch_cuda.so for this arch:
    from the extracted ELFs (fast) or from --dump-resource-usage on the whole library."""
    if st.flash_functions is not None:
        return st.flash_functions
    args, cu = st.args, cuobjdump_path()
    if cu is None:
        raise FileNotFoundError("cuobjdump is neither on PATH nor in triton's wheel")
    funcs: list[dict] = []
    method = "none"
    if args.resources_method in ("auto", "extract"):
        work = Path(tempfile.mkdtemp(prefix="flashio_xelf_"))
        st.xelf_dir = work
        for cub in extract_flash_cubins(st, work):
            p = run_tool(st, [cu, "-res-usage", str(cub)], args.cuobjdump_timeout)
            if p is not None:
                for f in parse_res_usage(p.stdout.splitlines(), _is_flash):
                    f.update(elf=cub.name, cubin=str(cub))
                    funcs.append(f)
        method = "extract"
    if not funcs and args.resources_method in ("auto", "lib"):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "res_usage.txt"
            cmd = [cu, "-arch", gpu_arch(), "--dump-resource-usage", str(torch_cuda_lib())]
            if run_tool(st, cmd, args.cuobjdump_timeout, stdout_path=path) is not None:
                with open(path, errors="replace") as f:
                    funcs = parse_res_usage(f, _is_flash)
        method = "lib"
    names = demangle(f["mangled"] for f in funcs)
    for f in funcs:
        f["demangled"] = names.get(f["mangled"])
        f["signature"] = flash_signature(f["demangled"] or "")
        f["local_bytes"] = f.get("STACK", 0) + f.get("LOCAL", 0)
    st.flash_functions = (funcs, method)
    return st.flash_functions


def runtime_flash_launches(st: State) -> list[dict]:
    """The torch flash kernels this run launched: from the time rows, else profiled now (one
    call of each flash config of the grid, at MINI_N unless the grid is asked for)."""
    seen = []
    for row in st.doc["rows"]:
        if row["impl"] == "torch_flash":
            seen += [{"name": n, "row": _row_label(row)} for n in row["kernels"]]
    if seen:
        return seen
    if st.runtime_profile is None:
        import torch

        st.runtime_profile = []
        for d in HEAD_DIMS:
            for c in (False, True):
                for p in ("fwd", "bwd"):
                    cfg = Config("torch_flash", p, BATCH, HEADS, MINI_N, d, c)
                    try:
                        with contextlib.ExitStack() as stack:
                            r = setup_sdpa(cfg, st, stack)
                            r.run(0)
                            torch.cuda.synchronize()
                            st.runtime_profile += [
                                {"name": e["name"], "row": cfg.label()}
                                for e in profile_launches(r.run, 0)
                                if e["cat"] == "kernel"
                            ]
                    except Exception as e:
                        st.doc["errors"].append(
                            {
                                "config": cfg.label() + " (profile)",
                                "error": f"{type(e).__name__}: {e}"[:2000],
                            }
                        )
                    _cleanup()
    return st.runtime_profile


def _row_label(row: dict) -> str:
    t = row.get("block_m"), row.get("block_n"), row.get("num_warps"), row.get("num_stages")
    cfg = Config(
        row["impl"],
        row["pass"],
        row["batch"],
        row["heads"],
        row["seq_len"],
        row["head_dim"],
        row["causal"],
        t if row["impl"] == "triton_fa" else None,
    )
    return cfg.label()


def mark_ran(funcs: list[dict], launches: list[dict]) -> None:
    by_name: dict[str, list[str]] = {}
    for e in launches:
        by_name.setdefault(_norm(e["name"]), []).append(e["row"])
    for f in funcs:
        f["ran_in"] = sorted(set(by_name.get(_norm(f.get("demangled") or ""), [])))


def merge_resources(rows: list[dict], funcs: list[dict]) -> int:
    """Fill the torch_flash rows' spills (STACK + LOCAL bytes per thread) and cuobjdump's
    registers and static shared memory; returns the number of kernels matched."""
    by = {_norm(f.get("demangled") or ""): f for f in funcs}
    hits = 0
    for row in rows:
        if row["impl"] != "torch_flash":
            continue
        res = [by.get(_norm(n)) for n in row["kernels"]]
        if not any(res):
            continue
        row["spills"] = [
            f["local_bytes"] if f else s
            for f, s in zip(res, row.get("spills") or [None] * len(res), strict=False)
        ]
        row["cuobjdump"] = [
            None
            if f is None
            else {k: f.get(k) for k in ("REG", "STACK", "SHARED", "LOCAL", "elf")}
            for f in res
        ]
        hits += sum(f is not None for f in res)
    return hits


def main_resources(st: State) -> None:
    print("== resources: cuobjdump resource usage of libtorch_cuda.so's flash kernels", flush=True)
    t0 = time.monotonic()
    doc = {"provenance": st.doc["provenance"], "arch": gpu_arch(), "functions": [], "errors": []}
    try:
        funcs, method = flash_functions(st)
        launches = runtime_flash_launches(st)
        mark_ran(funcs, launches)
        doc.update(method=method, functions=funcs, runtime_launches=launches)
        if st.doc["rows"]:
            doc["rows_matched_kernels"] = merge_resources(st.doc["rows"], funcs)
            save(st)
    except Exception as e:
        doc["errors"].append(f"{type(e).__name__}: {e}")
        print(f"  FAIL resources: {type(e).__name__}: {e}", flush=True)
    doc["cuobjdump"] = st.cuobjdump_log
    doc["wall_s"] = round(time.monotonic() - t0, 1)
    (st.out / "impl_resources.json").write_text(json.dumps(doc, indent=1, default=str))
    ran = sum(bool(f.get("ran_in")) for f in doc["functions"])
    print(
        f"== resources: {len(doc['functions'])} flash functions ({ran} ran in this run) in "
        f"{doc['wall_s']:.1f} s",
        flush=True,
    )


# ---------------------------------------------------------------------------------------------
# sass mode


def _safe(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s)[:120]


def _write_gz(path: Path, text: str) -> dict:
    data = text.encode()
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(data)
    return {
        "file": path.name,
        "text_sha256": hashlib.sha256(data).hexdigest(),
        "text_bytes": len(data),
        "gz_bytes": path.stat().st_size,
        "instructions": sass_instructions(text),
    }


def sass_of_cubin(st: State, cubin: Path) -> tuple[str | None, list[dict]]:
    cu, t = cuobjdump_path(), st.args.cuobjdump_timeout
    p = run_tool(st, [cu, "-sass", str(cubin)], t)
    q = run_tool(st, [cu, "-res-usage", str(cubin)], t)
    return (p.stdout if p else None), (parse_res_usage(q.stdout.splitlines()) if q else [])


def mini_compile(st: State) -> None:
    """Compile what the sass mode dumps when time did not run here: every triton_fa tiling
    (its check at N = 1024) and flex forward/backward at N = MINI_N."""
    print(f"  compiling triton_fa tilings and flex at N={MINI_N} for their SASS", flush=True)
    if "triton_fa" in st.args.impls:
        for d in HEAD_DIMS:
            for c in (False, True):
                for t in TRITON_TILINGS:
                    cfg = Config("triton_fa", "fwd", BATCH, HEADS, CHECK_N, d, c, t)
                    key = (d, c, t)
                    if key not in st.triton_status:
                        st.triton_status[key] = rec = check_triton(cfg, st)
                        st.doc["triton_tilings"].append(rec)
                    _cleanup()
    if "flex" in st.args.impls:
        group = [
            Config("flex", p, BATCH, HEADS, MINI_N, d, c)
            for d in HEAD_DIMS
            for c in (False, True)
            for p in ("fwd", "bwd")
        ]
        rows = st.doc.setdefault("sass_compile_rows", [])  # JSON only: not timing rows
        st.doc["groups"]["flex_sass_compile"] = run_group("flex", group, st, math.inf, 3, rows)


def sass_triton(st: State, out: Path, index: dict) -> None:
    if "time" not in st.args.mode:
        mini_compile(st)
    seen: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        for (d, c, t), k in sorted(st.triton_kernels.items(), key=str):
            cub = k.asm.get("cubin") if hasattr(k, "asm") else None
            if not cub:
                index["errors"].append(f"triton_fa d={d} causal={c} {t}: no cubin in asm")
                continue
            seen.add(hashlib.sha256(cub).hexdigest())
            path = Path(tmp) / "k.cubin"
            path.write_bytes(cub)
            text, res = sass_of_cubin(st, path)
            entry = {
                "impl": "triton_fa",
                "head_dim": d,
                "causal": c,
                "tiling": list(t),
                "kernel": triton_kernel_fields(k),
                "cuobjdump": res,
                "cubin_sha256": hashlib.sha256(cub).hexdigest(),
            }
            if text:
                name = f"triton_fa_d{d}_c{int(c)}_m{t[0]}_n{t[1]}_w{t[2]}_s{t[3]}.sass.gz"
                entry.update(_write_gz(out / name, text))
            index["triton"].append(entry)
    cache = Path(os.environ.get("TRITON_CACHE_DIR", ""))
    by_hash: dict[str, list] = {}
    for info in st.flex_kernels:
        for ln in info.get("launchers", []):
            if ln.get("cache_hash"):
                by_hash.setdefault(ln["cache_hash"], []).append(info)
    for cub in sorted(cache.rglob("*.cubin")) if cache.is_dir() else []:
        data = cub.read_bytes()
        h = hashlib.sha256(data).hexdigest()
        if h in seen:
            continue
        seen.add(h)
        meta = {}
        with contextlib.suppress(OSError, ValueError):
            meta = json.loads(cub.with_suffix(".json").read_text())
        users = by_hash.get(cub.parent.name, [])
        text, res = sass_of_cubin(st, cub)
        entry = {
            "impl": "inductor" if users or cub.stem.startswith("triton_") else "triton",
            "name": cub.stem,
            "cache_dir_key": cub.parent.name,
            "metadata": {
                k: meta.get(k)
                for k in ("name", "num_warps", "num_stages", "shared", "num_ctas", "target")
            },
            "constexprs": users[0]["constexprs"] if users else None,
            "ran_in": sorted({r for u in users for r in u.get("ran_in", [])}),
            "cuobjdump": res,
            "cubin_sha256": h,
        }
        if text:
            entry.update(
                _write_gz(out / f"{_safe(cub.stem)}_{cub.parent.name[:10]}.sass.gz", text)
            )
        index["triton"].append(entry)


def _flash_file(f: dict, i: int) -> str:
    sig = f.get("signature") or {}
    t, fl = sig.get("traits", {}), sig.get("flags", {})
    kind = sig.get("kernel", "flash").replace("flash_", "").replace("_kernel", "")
    bits = [
        f"h{t.get('kHeadDim')}",
        f"m{t.get('kBlockM')}",
        f"n{t.get('kBlockN')}",
        f"w{t.get('kNWarps')}",
    ]
    for key, tag in (("Is_causal", "c"), ("Is_even_MN", "e")):
        if key in fl:
            bits.append(f"{tag}{int(bool(fl[key]))}")
    return _safe(f"torch_{kind}_{'_'.join(bits)}_{i}") + ".sass.gz"


def _wanted(f: dict) -> bool:
    """bf16 flash kernels of head dim 64/128 without dropout, local window or softmax output:
    the ones this grid can launch (used when no launch was profiled)."""
    sig = f.get("signature") or {}
    t, fl = sig.get("traits", {}), sig.get("flags", {})
    return (
        t.get("kHeadDim") in HEAD_DIMS
        and "bfloat16" in str(t.get("elem_type"))
        and not fl.get("Is_dropout")
        and not fl.get("Is_local")
        and not fl.get("Return_softmax")
        and fl.get("Is_even_K", True) is True
        and "splitkv" not in sig.get("kernel", "")
    )


def sass_torch(st: State, out: Path, index: dict) -> None:
    funcs, method = flash_functions(st)
    launches = runtime_flash_launches(st)
    mark_ran(funcs, launches)
    ran = [f for f in funcs if f.get("ran_in")]
    chosen = ran or [f for f in funcs if _wanted(f)]
    index["torch_flash_method"] = method
    index["torch_flash_functions_total"] = len(funcs)
    index["torch_flash_selection"] = (
        "the kernels profiled in this run"
        if ran
        else "no profiled launch matched: bf16 hdim 64/128 kernels "
        "without dropout/local/softmax output"
    )
    matched = {_norm(f.get("demangled") or "") for f in funcs}
    index["torch_flash_unmatched_launches"] = sorted(
        {e["name"] for e in launches if "flash" in e["name"] and _norm(e["name"]) not in matched}
    )
    cu, timeout = cuobjdump_path(), st.args.cuobjdump_timeout
    by_cubin: dict[str, list] = {}
    for f in chosen:
        by_cubin.setdefault(f.get("cubin") or "", []).append(f)
    i = 0
    for cubin, fs in by_cubin.items():
        if cubin:
            p = run_tool(st, [cu, "-sass", cubin], timeout)
            texts = split_sass(p.stdout) if p else {}
        else:  # no extracted ELF: ask the library for each function (slow: a few only)
            texts = {}
            for f in fs[:MAX_FUN_CALLS]:
                lib = str(torch_cuda_lib())
                p = run_tool(
                    st, [cu, "-arch", gpu_arch(), "-sass", "-fun", f["mangled"], lib], timeout
                )
                if p:
                    texts.update(split_sass(p.stdout))
        for f in fs:
            entry = {
                k: f.get(k)
                for k in (
                    "mangled",
                    "demangled",
                    "signature",
                    "arch",
                    "elf",
                    "REG",
                    "STACK",
                    "SHARED",
                    "LOCAL",
                    "ran_in",
                )
            }
            text = texts.get(f["mangled"])
            if text:
                entry.update(_write_gz(out / _flash_file(f, i), text))
                i += 1
            else:
                entry["sass"] = "not found in cuobjdump's output"
            index["torch_flash"].append(entry)


def main_sass(st: State) -> None:
    out = st.out / "sass"
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    print(f"== sass: {', '.join(st.args.sass_parts)}", flush=True)
    index = {
        "provenance": st.doc["provenance"],
        "arch": None,
        "triton": [],
        "torch_flash": [],
        "errors": [],
    }
    if cuobjdump_path() is None:
        index["errors"].append("cuobjdump is neither on PATH nor in triton's wheel")
    else:
        index["arch"] = gpu_arch()
        for part, fn in (("triton", sass_triton), ("torch", sass_torch)):
            if part not in st.args.sass_parts:
                continue
            try:
                fn(st, out, index)
            except Exception as e:
                index["errors"].append(f"{part}: {type(e).__name__}: {e}")
                print(f"  FAIL sass {part}: {type(e).__name__}: {e}", flush=True)
    index["cuobjdump"] = st.cuobjdump_log
    index["wall_s"] = round(time.monotonic() - t0, 1)
    (out / "sass_index.json").write_text(json.dumps(index, indent=1, default=str))
    save(st)
    n = sum(1 for e in index["triton"] + index["torch_flash"] if e.get("file"))
    print(f"== sass: {n} files in {index['wall_s']:.1f} s", flush=True)


def main_merge(args) -> None:
    out = Path(args.out)
    doc = json.loads((out / "impl_measure.json").read_text())
    res = json.loads(Path(args.resources_json).read_text())
    st = State(args)
    st.doc = doc
    hits = merge_resources(doc["rows"], res.get("functions", []))
    doc.setdefault("merged", []).append(
        {"resources_json": Path(args.resources_json).name, "kernels_matched": hits}
    )
    save(st)
    print(f"merged resource usage into {hits} torch_flash kernel launches")


# ---------------------------------------------------------------------------------------------


def dry_run(args) -> None:
    cfgs = configs(args)
    if "time" in args.mode:
        for c in cfgs:
            print(c.label())
        counts = {i: sum(c.impl == i for c in cfgs) for i in args.impls}
        print(f"{len(cfgs)} configs: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        print(
            f"budget {args.budget_s:.0f} s shared by weight "
            + ", ".join(f"{i} {GROUP_WEIGHT[i]:g}" for i in args.impls)
        )
    if "resources" in args.mode:
        print(
            "resources: cuobjdump -lelf / -xelf / -res-usage on libtorch_cuda.so "
            f"(each under {args.cuobjdump_timeout:.0f} s), impl_resources.json"
        )
    if "sass" in args.mode:
        print(f"sass ({', '.join(args.sass_parts)}): sass/*.sass.gz and sass/sass_index.json")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="See the module docstring (python -c 'import benchmarks.impl_measure as m; "
        "help(m)') for the modes and outputs.",
    )
    ap.add_argument(
        "--mode", nargs="+", default=["time"], choices=("time", "resources", "sass", "merge")
    )
    ap.add_argument("--out", help="output folder (required unless --dry-run)")
    ap.add_argument("--dry-run", action="store_true", help="print the configs and their count")
    ap.add_argument(
        "--quick",
        action="store_true",
        help=f"N in {QUICK_SEQ_LENS} only (d {HEAD_DIMS}, causal and not)",
    )
    ap.add_argument(
        "--heads32", action="store_true", help=f"also H=32 for N <= {HEADS32_MAX_N} (not for flex)"
    )
    ap.add_argument("--impls", nargs="+", choices=IMPLS, default=list(IMPLS))
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument(
        "--sleep-cycles",
        type=int,
        default=2_000_000,
        help="GPU cycles of torch.cuda._sleep before each timed call (0: none)",
    )
    ap.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="seconds for the time mode (default 420, 270 with --quick)",
    )
    ap.add_argument("--no-profile", action="store_true", help="skip the torch.profiler call")
    ap.add_argument(
        "--flex-dynamic",
        action="store_true",
        help="torch.compile(flex_attention, dynamic=True): one compile per (d, "
        "causal, pass) instead of one per shape",
    )
    ap.add_argument(
        "--sass-parts", nargs="+", choices=("triton", "torch"), default=["triton", "torch"]
    )
    ap.add_argument(
        "--resources-method",
        choices=("auto", "extract", "lib"),
        default="auto",
        help="extract: the sm_XX ELFs holding flash kernels; lib: "
        "--dump-resource-usage on the whole library; auto: extract, else lib",
    )
    ap.add_argument(
        "--cuobjdump-timeout", type=float, default=300.0, help="seconds for each cuobjdump call"
    )
    ap.add_argument(
        "--cuobjdump-budget-s",
        type=float,
        default=420.0,
        help="seconds for all cuobjdump calls of the run together",
    )
    ap.add_argument(
        "--triton-cache-dir",
        help="TRITON_CACHE_DIR for the run (default: a fresh temporary folder, so "
        "the sass mode finds exactly the run's kernels)",
    )
    ap.add_argument("--resources-json", help="merge mode: an impl_resources.json")
    args = ap.parse_args(argv)
    args.impls = [i for i in IMPLS if i in args.impls]
    args.mode = [m for m in ("time", "resources", "sass", "merge") if m in args.mode]
    if args.budget_s is None:
        args.budget_s = 270.0 if args.quick else 420.0
    if not args.dry_run and not args.out:
        ap.error("--out is required (or --dry-run)")
    if "merge" in args.mode and not args.resources_json:
        ap.error("--mode merge needs --resources-json")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.dry_run:
        dry_run(args)
        return
    if args.mode == ["merge"]:
        main_merge(args)
        return
    # before torch/triton are imported: the run's Triton kernels land in a folder of its own
    if args.triton_cache_dir:
        os.environ["TRITON_CACHE_DIR"] = args.triton_cache_dir
    else:
        os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="flashio_triton_"))
    st = State(args)
    st.out.mkdir(parents=True, exist_ok=True)
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device visible to torch")
    st.doc["provenance"] = provenance()
    st.l2 = st.doc["provenance"]["l2_bytes"] or DEFAULT_L2_BYTES
    st.doc["provenance"]["triton_cache_dir"] = Path(os.environ["TRITON_CACHE_DIR"]).name
    print(
        f"{st.doc['provenance']['gpu']}, torch {torch.__version__}, triton "
        f"{st.doc['provenance'].get('triton')}, modes {' '.join(args.mode)}",
        flush=True,
    )
    save(st)
    if "time" in args.mode:
        main_time(st)
    if "resources" in args.mode:
        main_resources(st)
    if "sass" in args.mode:
        main_sass(st)
    if getattr(st, "xelf_dir", None):
        shutil.rmtree(st.xelf_dir, ignore_errors=True)
    save(st)
    print(f"done in {time.monotonic() - st.start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
