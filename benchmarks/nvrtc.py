"""NVRTC without a GPU: compile CUDA C++ to a cubin as CuPy compiles a RawModule.

The kernels that run are CuPy RawModules, which CuPy compiles with NVRTC, not nvcc; the two
allocate registers differently (flash2_fwd at d=128, 128x128 tiles, 8 warps: 238 registers
without spills from nvcc, 255 registers and 284 bytes of spills from NVRTC). The instruction
census must see the code that runs, so it compiles with NVRTC and the options CuPy adds.
NVRTC needs no driver: ``pip install nvidia-cuda-nvrtc`` (of the GPU machine's CUDA version)
makes this work on any Linux machine.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache
from pathlib import Path

__all__ = ["NvrtcError", "available", "compile_cubin", "version"]


class NvrtcError(RuntimeError):
    """NVRTC is missing or rejected the source (the message holds its log)."""


def _candidates() -> list[Path]:
    paths = []
    try:  # the pip wheel (nvidia-cuda-nvrtc) puts it under nvidia/cu13/lib
        import nvidia

        for root in nvidia.__path__:
            paths += sorted(Path(root).glob("cu*/lib/libnvrtc.so.*"))
    except ImportError:
        pass
    found = ctypes.util.find_library("nvrtc")
    if found:
        paths.append(Path(found))
    return [p for p in paths if ".alt." not in p.name]


@cache
def _lib() -> ctypes.CDLL:
    for path in _candidates():
        # NVRTC opens its builtins library by name at compile time: load it first, globally
        for builtins in sorted(path.parent.glob("libnvrtc-builtins.so.*")):
            if ".alt." not in builtins.name:
                ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
        try:
            return ctypes.CDLL(str(path))
        except OSError:
            continue
    raise NvrtcError("NVRTC not found: pip install nvidia-cuda-nvrtc")


def available() -> bool:
    try:
        _lib()
    except NvrtcError:
        return False
    return True


def version() -> tuple[int, int]:
    major, minor = ctypes.c_int(), ctypes.c_int()
    _lib().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


def compile_cubin(
    source: str, options: tuple[str, ...], name: str = "kern.cu"
) -> tuple[bytes, str]:
    """The cubin NVRTC makes of ``source`` with ``options`` (which must name a real
    architecture, ``-arch=sm_XX``), and the compile log (ptxas's report with
    ``--ptxas-options=-v``)."""
    lib = _lib()
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None):
        raise NvrtcError("nvrtcCreateProgram failed")
    try:
        opts = (ctypes.c_char_p * len(options))(*(o.encode() for o in options))
        status = lib.nvrtcCompileProgram(prog, len(options), opts)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, buf)
        log = buf.value.decode(errors="replace")
        if status:
            raise NvrtcError(f"NVRTC could not compile {name}:\n{log}")
        if lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)) or size.value == 0:
            raise NvrtcError(f"NVRTC made no cubin of {name}: give a real arch (-arch=sm_XX)")
        cubin = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetCUBIN(prog, cubin)
        return cubin.raw, log
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
