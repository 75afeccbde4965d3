"""The Hopper backward's runner: hopper_bwd.cu as the main kernel of a ``flash2_bwd`` schedule
of the ``flashio-hopper`` preset, between flash2_bwd.cu's first and last kernels (D =
rowsum(dO * O) with dQ_acc zeroed; dQ rounded from dQ_acc). Its description, refusals and
shared memory are kernels.hopper's, which also compiles it (``compile_hopper``).

Needs an sm_90 GPU and CuPy, like kernels.hopper.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flashio.kernels import gpu
from flashio.kernels.hopper import _stages, bwd_smem_bytes, compile_options, defines, tensor_map
from flashio.kernels.schedules import Schedule

__all__ = ["CompiledHopperBwd", "compile_bwd"]


@dataclass(frozen=True, slots=True)
class CompiledHopperBwd:
    """The three kernels of a ``flash2_bwd`` schedule with hopper_bwd.cu as the main one, with
    kernels/gpu.py's interface. ``pre_post`` is flash2_bwd.cu built for the schedule's block_q
    (4 warps), for its first and last kernels; ``forward`` makes O and L."""

    sched: Schedule
    module: object
    pre_post: object
    launches: tuple[gpu.Launch, ...]
    forward: gpu.CompiledSchedule

    def function(self, name: str):
        return (self.module if name == "hopper_bwd" else self.pre_post).get_function(name)

    def alloc(self, q, k, v, grad_out=None) -> dict:
        """kernels/gpu.py's backward buffers (O and L from the forward, outputs poisoned with
        NaN) and the tensor maps of the main kernel, in device memory."""
        cp, bq = gpu._cupy(), self.sched.block_q
        bufs = gpu.CompiledSchedule(self.sched, None, (), self.forward).alloc(q, k, v, grad_out)
        rows = {"q": bq, "do": bq, "k": self.sched.block_kv, "v": self.sched.block_kv}
        for x, r in {**rows, "dk": 64, "dv": 64}.items():
            bufs[f"tm_{x}"] = cp.asarray(tensor_map(bufs[x], r))
        return bufs

    def launch(self, bufs: dict, events=None) -> None:
        sh, i32 = self.sched.shape, np.int32
        args = {
            "flash2_bwd_pre": ("o", "do", "dvec", "dq_acc", i32(sh.seq_len)),
            "hopper_bwd": (
                "tm_q", "tm_k", "tm_v", "tm_do", "lse", "dvec", "tm_dk", "tm_dv", "dq_acc",
                i32(sh.heads), i32(sh.n_kv_heads), i32(sh.seq_len), np.float32(sh.scale),
                i32(sh.causal),
            ),
            "flash2_bwd_post": ("dq_acc", "dq", i32(sh.seq_len)),
        }  # fmt: skip
        for i, ln in enumerate(self.launches):
            if events is not None:
                events[i].record()
            fn = self.function(ln.function)
            if fn.max_dynamic_shared_size_bytes < ln.smem_bytes:
                fn.max_dynamic_shared_size_bytes = ln.smem_bytes
            a = tuple(bufs[x] if isinstance(x, str) else x for x in args[ln.function])
            fn((ln.grid,), (ln.block,), a, shared_mem=ln.smem_bytes)
        if events is not None:
            events[len(self.launches)].record()

    def outputs(self, bufs: dict) -> tuple[np.ndarray, ...]:
        """(dQ, dK, dV) in the storage dtype (bf16 values as float32)."""
        return tuple(gpu._from_bits(bufs[x], self.sched.shape.dtype) for x in ("dq", "dk", "dv"))


def compile_bwd(sched: Schedule) -> CompiledHopperBwd:
    """hopper_bwd.cu for ``sched``'s main kernel, flash2_bwd.cu for its first and last."""
    s, d = sched, sched.shape.head_dim
    pre, main, post = (k.ctas for k in s.kernels)
    smem = bwd_smem_bytes(s.block_q, s.block_kv, d, _stages(s))
    launches = (
        gpu.Launch("flash2_bwd_pre", pre, 128, 0),
        gpu.Launch("hopper_bwd", main, s.warps * 32, smem),
        gpu.Launch("flash2_bwd_post", post, 128, 0),
    )
    # flash2_bwd.cu for its first and last kernels: block_q rows a CTA, 4 warps (its main
    # kernel's constraints met by a 64-key block it never launches)
    ampere = Schedule("flash2_bwd", s.shape, s.block_q, 64, 4)
    pre_post = gpu._module(gpu.source(ampere), gpu.compile_options(gpu.defines(ampere)))
    fwd = gpu.compile_schedule(Schedule("flash2", s.shape, 64, 64, 4))
    code = (gpu.CUDA_DIR / "hopper_bwd.cu").read_text()
    module = gpu._module(code, compile_options(defines(s)))
    return CompiledHopperBwd(s, module, pre_post, launches, fwd)
