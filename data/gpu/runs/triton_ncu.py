"""Launch the Triton FA2 forward (benchmarks/triton_attention.py) once per tiling, for Nsight
Compute: d = 128, B = 1, H = 16, N = 4096, bf16, the five tilings of data/impl/impl_measure.json.
Run under data/gpu/runs/triton_ncu_run.sh; prints one line per launch, in launch order."""

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks import triton_attention as ta

TILINGS = [t["tiling"] for t in json.loads(Path("data/impl/impl_measure.json").read_text())[
    "triton_tilings"] if t["head_dim"] == 128 and not t["causal"]]  # fmt: skip
q, k, v = (torch.randn(1, 16, 4096, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
for bm, bn, w, st in TILINGS:
    ta.run(q, k, v, False, bm, bn, w, st)  # compile and warm outside the profiled launch
torch.cuda.synchronize()
for bm, bn, w, st in TILINGS:
    ta.run(q, k, v, False, bm, bn, w, st)
    torch.cuda.synchronize()
    print(json.dumps({"tiling": [bm, bn, w, st], "shape": [1, 16, 4096, 128]}), flush=True)
