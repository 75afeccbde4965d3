"""The machine code of PyTorch's eager-attention kernels (the elementwise scale, masked_fill
and the softmax kernels that data/impl/impl_measure.json's ``torch_eager`` rows launched),
taken from this machine's ``libtorch_cuda.so`` (its sm_90 images). Run under
data/gpu/runs/eager_run.sh.

Writes ``OUT/eager_sass.json.gz``: per kernel (the profiler's demangled name) its mangled name,
the image it came from, ``cuobjdump -res-usage`` (registers, stack, shared memory) and its
``cuobjdump -sass`` listing; with provenance. cuBLAS's GEMMs (``nvjet_*``) are not here: they
live in libcublasLt, and the model describes them from their launch (kernels.implementation,
``PYTORCH``).
"""

import argparse
import datetime
import gzip
import json
import re
import subprocess
import tempfile
from pathlib import Path

from benchmarks.impl_measure import cuobjdump_path, demangle, parse_res_usage, torch_cuda_lib

IMPL_RUN = Path("data/impl/impl_measure.json")


def wanted_kernels() -> list[str]:
    """The demangled names of the eager rows' kernels, cuBLAS's GEMMs left out."""
    rows = json.loads(IMPL_RUN.read_text())["rows"]
    names = [n for r in rows if r["impl"] == "torch_eager" for n in r["kernels"]]
    return sorted({n for n in names if not n.startswith("nvjet")})


def run(cmd: list[str]) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    import torch

    tool, lib = cuobjdump_path(), torch_cuda_lib()
    want = wanted_kernels()
    found: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([tool, "-xelf", "sm_90", str(lib)], cwd=tmp, check=True,
                       capture_output=True)  # fmt: skip
        for cubin in sorted(Path(tmp).glob("*.cubin")):
            funcs = parse_res_usage(run([tool, "-res-usage", str(cubin)]).splitlines())
            names = demangle([f["mangled"] for f in funcs])
            for f in funcs:
                full = names.get(f["mangled"], "")
                if full in want and full not in found:
                    sass = run([tool, "-sass", "-fun", f["mangled"], str(cubin)])
                    found[full] = {**f, "image": cubin.name, "sass": sass}
    missing = [n for n in want if n not in found]
    doc = {
        "provenance": {
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(0),
            "cuobjdump": run([tool, "--version"]).strip().splitlines()[-1],
            "library": re.sub(r"^.*/site-packages/", "<site-packages>/", str(lib)),
            "command": "python3 data/gpu/runs/eager_sass.py --out $OUT",
            "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        },
        "kernels": found,
        "missing": missing,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    with gzip.open(args.out / "eager_sass.json.gz", "wt") as f:
        json.dump(doc, f, indent=1)
    print(f"{len(found)} kernels found, {len(missing)} missing: {missing}")


if __name__ == "__main__":
    main()
