"""Launch the Hopper-native kernels whose machine code no library ships: PyTorch SDPA's cuDNN
backend (cuDNN compiles its SDPA kernels at run time), forward and backward, bf16, B = 1,
H = 16, N = 4096, d = 64 and 128, once to warm up and once to be profiled. Run under Nsight
Compute (overlap_run.sh), which records each profiled kernel's SASS."""

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

for d in (64, 128):
    q, k, v = (torch.randn(1, 16, 4096, d, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True) for _ in range(3))  # fmt: skip
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        for _ in range(2):
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v)
            o.backward(torch.ones_like(o))
    torch.cuda.synchronize()
print("done")
