"""The run's settings: the grid's constants, Config and the configs of the time mode, State,
settings, and the CSV/JSON output (columns, save).

``DEVICE`` is read here at call time by every module (``config.DEVICE``): set it on this
module.
"""

from __future__ import annotations

import csv
import dataclasses
import json
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
# state, output


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
