"""flashio: a GPU memory-hierarchy simulator and IO-complexity analyzer for attention kernels.

The shallow surface: ``flashio.load_gpu``, ``flashio.AttentionShape``, ``flashio.schedule``,
``flashio.simulate``; the subpackages ``flashio.simulator``, ``flashio.kernels`` and
``flashio.analysis`` hold the rest (docs/architecture.md). Names load on first use, so
``import flashio`` costs nothing until one is asked for."""

import importlib
import importlib.util
import os
from importlib.metadata import PackageNotFoundError, version

from flashio import _jit_cache

try:
    __version__ = version("flashio")
except PackageNotFoundError:  # a checkout on sys.path without an install
    __version__ = "0+unknown"

_SURFACE = {
    "load_gpu": "flashio.simulator",
    "simulate": "flashio.simulator",
    "GPUSpec": "flashio.simulator",
    "SimResult": "flashio.simulator",
    "AttentionShape": "flashio.kernels",
    "BlockMask": "flashio.kernels",
    "schedule": "flashio.kernels",
    "execute": "flashio.kernels",
    "io_counts": "flashio.analysis",
    "tiling_rule": "flashio.analysis",
}
_SUBPACKAGES = ("simulator", "kernels", "analysis")
# the folders whose code numba compiles and caches (flashio/_jit_cache.py)
_JITTED = (("simulator", ""), ("kernels", ""), ("analysis", "dag"))


def _jitted_folders():
    for package, sub in _JITTED:
        spec = importlib.util.find_spec(f"flashio.{package}")  # without importing it
        for location in spec.submodule_search_locations or ():
            yield os.path.join(location, sub)


_jit_cache.configure(list(_jitted_folders()))

__all__ = ["__version__", *_SURFACE, *_SUBPACKAGES]


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        return importlib.import_module(f"flashio.{name}")
    if name in _SURFACE:
        return getattr(importlib.import_module(_SURFACE[name]), name)
    raise AttributeError(f"module 'flashio' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
