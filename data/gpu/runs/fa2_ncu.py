"""Launch PyTorch SDPA's flash kernels (flash-attn 2) for Nsight Compute: forward and backward,
bf16, B = 1, H = 16, N = 4096, d = 64 and 128, non-causal, once to warm up and once to be
profiled. Run under data/gpu/runs/fa2_ncu_run.sh; prints one line per profiled pass."""

import json

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

for d in (64, 128):
    q, k, v = (torch.randn(1, 16, 4096, d, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True) for _ in range(3))  # fmt: skip
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        for rep in range(2):
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
            o.backward(torch.ones_like(o))
            torch.cuda.synchronize()
            if rep:
                print(
                    json.dumps({"shape": [1, 16, 4096, d], "passes": ["fwd", "bwd"]}), flush=True
                )
