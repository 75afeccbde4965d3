"""The compiler's report on a kernel: registers, stack and spill bytes per entry function from
``ptxas -v``, run by NVRTC (the build CuPy runs) and by nvcc."""

from __future__ import annotations

import re
import subprocess

from flashio.kernels import gpu

__all__ = ["nvrtc_report", "parse_ptxas", "ptxas_report"]


def parse_ptxas(log: str) -> dict:
    """Registers, stack and spill bytes per entry function from a ptxas -v log."""
    out, fn = {}, None
    for line in log.splitlines():
        if m := re.search(r"Compiling entry function '(\w+)'", line):
            fn = m.group(1)
        elif fn and (
            m := re.search(
                r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                line,
            )
        ):
            out.setdefault(fn, {}).update(
                stack_bytes=int(m[1]), spill_store_bytes=int(m[2]), spill_load_bytes=int(m[3])
            )
        elif fn and (m := re.search(r"Used (\d+) registers", line)):
            out.setdefault(fn, {})["registers"] = int(m[1])
    return out


def nvrtc_report(sched, kernel: str = "flash2_fwd") -> dict | None:
    """NVRTC's ptxas report of ``kernel`` at ``sched``'s tiling, compiled as CuPy compiles it
    (the options of ``gpu.nvrtc_options``), through NVRTC's library without a GPU
    (benchmarks/nvrtc.py); None where NVRTC is not installed. Raises ``nvrtc.NvrtcError``
    where the source does not compile."""
    from benchmarks import nvrtc

    if not nvrtc.available():
        return None
    options = (*gpu.nvrtc_options(tuple(gpu.defines(sched))), "--ptxas-options=-v")
    _, log = nvrtc.compile_cubin(gpu.source(sched), options)
    return parse_ptxas(log).get(kernel)


def ptxas_report(sched) -> dict:
    """Registers, spills and stack per function, from ptxas -v run two ways with the runner's
    source and defines: by NVRTC (the compiler CuPy uses; the build that ran) and by nvcc
    (the two front ends were seen to allocate registers differently)."""
    opts = [*gpu.compile_options(gpu.defines(sched)), "--gpu-architecture=sm_90"]
    rep = {"nvrtc_options": opts}
    try:
        from cupy_backends.cuda.libs import nvrtc

        prog = nvrtc.createProgram(gpu.source(sched), "kernel.cu", (), ())
        try:
            nvrtc.compileProgram(prog, [*opts, "--ptxas-options=-v"])
            rep["nvrtc"] = parse_ptxas(nvrtc.getProgramLog(prog))
        finally:
            nvrtc.destroyProgram(prog)
    except Exception as e:  # the report is auxiliary: keep measuring
        rep["nvrtc_error"] = f"{type(e).__name__}: {e}"
    src = gpu.CUDA_DIR / gpu._SOURCES[sched.name]
    defs = [f"-D{k}={v}" for k, v in gpu.defines(sched)]
    cmd = ["nvcc", "-arch=sm_90", "-cubin", "-o", "/dev/null", "-Xptxas", "-v",
           f"-I{gpu.CUDA_DIR}", *defs, str(src)]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True)
    rep.update(nvcc_command=" ".join(cmd), nvcc_returncode=p.returncode,
               nvcc=parse_ptxas(p.stderr))  # fmt: skip
    return rep
