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

from benchmarks.impl_measure.config import TRITON_TILINGS
from benchmarks.impl_measure.resources import (
    cuobjdump_path,
    demangle,
    parse_res_usage,
    torch_cuda_lib,
)
from benchmarks.impl_measure.timing import profile_launches

__all__ = [
    "TRITON_TILINGS",
    "cuobjdump_path",
    "demangle",
    "parse_res_usage",
    "profile_launches",
    "torch_cuda_lib",
]
