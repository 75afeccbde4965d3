"""Launch PyTorch's eager attention (benchmarks/impl_measure/setups.py's ``torch_eager``: S = Q K^T
* scale, masked_fill when causal, softmax, P V) for Nsight Compute: bf16, B = 1, H = 16,
d = 64, N = 1024, 2048, 4096 and 8192 (4096 causal too), once to warm up and once to be
profiled. Run under data/gpu/runs/eager_run.sh; prints one line per profiled call."""

import json
import math

import torch

for n, causal in ((1024, False), (2048, False), (4096, False), (4096, True), (8192, False)):
    q, k, v = (torch.randn(1, 16, n, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    mask = torch.ones(n, n, dtype=torch.bool, device="cuda").triu(1) if causal else None
    with torch.no_grad():
        for rep in range(2):
            s = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(64))
            if mask is not None:
                s.masked_fill_(mask, float("-inf"))
            o = torch.matmul(torch.softmax(s, dim=-1), v)
            torch.cuda.synchronize()
            if rep:
                print(json.dumps({"shape": [1, 16, n, 64], "causal": causal}), flush=True)
    del q, k, v, s, o, mask
    torch.cuda.empty_cache()
