"""Provenance of a run: GPU, driver, library versions, the command, the sources' hashes."""

from __future__ import annotations

import datetime
import hashlib
import sys
from pathlib import Path

from benchmarks._common import command_line, tool_versions
from benchmarks.impl_measure.resources import cuobjdump_path


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _driver_version():
    try:
        import ctypes

        lib, v = ctypes.CDLL("libcuda.so.1"), ctypes.c_int(0)
        return v.value if lib.cuDriverGetVersion(ctypes.byref(v)) == 0 else None
    except OSError:
        return None


def provenance() -> dict:
    import torch

    props = torch.cuda.get_device_properties(0)
    here = Path(__file__).resolve().parents[1]  # benchmarks/
    info = {
        "gpu": props.name,
        "compute_capability": f"{props.major}.{props.minor}",
        "sm_count": props.multi_processor_count,
        "l2_bytes": getattr(props, "L2_cache_size", None),
        "smem_optin_bytes": getattr(props, "shared_memory_per_block_optin", None),
        "total_memory_bytes": props.total_memory,
        "cuda_driver_version": _driver_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "python": sys.version.split()[0],
        "command": command_line(),
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python_sources_sha256": {
            # this package's modules (impl_measure/*.py) and triton_attention.py
            str(p.relative_to(here)): _sha256(p)
            for p in (*sorted((here / "impl_measure").glob("*.py")), here / "triton_attention.py")
        },
    }
    for mod in ("triton", "cupy"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception as e:
            info[mod] = f"unavailable: {type(e).__name__}"
    info |= tool_versions({"cuobjdump": [cuobjdump_path() or "cuobjdump", "--version"]})
    return info
