"""Instruction census of this project's CUDA kernels: the warp program of each main loop.

Compiles kernels/cuda/*.cu for sm_90 as CuPy compiles the runner's RawModules (NVRTC, with the
runner's defines and the options CuPy adds: kernels.gpu.nvrtc_options), disassembles them with
``cuobjdump -sass``, and writes each kernel's main-loop program (simulator.sass_paths.program: the
path of a full, unmasked tile) with the compiler's register report to data/sass/flashio.json.gz,
keyed as simulator.issue.program_key names it. Needs NVRTC and cuobjdump of the GPU machine's
CUDA version (pip: nvidia-cuda-nvrtc==13.0.*, nvidia-cuda-cuobjdump); the simulator reads the
committed file and needs neither.

    python -m benchmarks.sass_census            # CONFIGS, their MASKED, PAGED, BLOCK_SPARSE builds
    python -m benchmarks.sass_census --check    # rebuild and compare with the committed file
    python -m benchmarks.sass_census --hopper [--check]   # the Hopper kernels' builds

The Hopper kernels (kernels/cuda/hopper_fwd.cu, hopper_bwd.cu) have a census of their own,
data/sass/flashio-hopper.json.gz: the consumer warps' main loop of each forward build per tiling,
dtype and softmax overlap (``HOPPER_BUILDS``) and of each backward build
(``kernels.hopper.BWD_TILES``), keyed with the overlap (``hopper_key``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import nvrtc
from benchmarks.ptxas import parse_ptxas
from flashio.kernels import AttentionShape, BlockMask, PagedKV, hopper, implementation, schedule
from flashio.kernels.gpu import (
    CUDA_DIR,
    CUPY_NVRTC_OPTIONS,
    defines,
    launches,
    nvrtc_options,
    source,
)
from flashio.simulator.issue import CENSUS_DIR, VARIANT_OPTIONS, hopper_key, program_key
from flashio.simulator.sass_paths import loop_copies_overlap, parts

# (schedule, head_dim, block_q, block_kv, warps): the tilings this project compiles and measures
# (benchmarks/gpu_measure.py, data/gpu/probe/sm_scaling.py) and the neighbours a tiling search
# visits; bf16 and fp16 each.
CONFIGS = tuple(
    [("flash2", d, bq, bk, w) for d in (64, 128) for bq, bk, w in (
        (64, 64, 4), (128, 64, 4), (128, 64, 8), (128, 128, 8), (64, 128, 4), (128, 128, 4),
        (64, 32, 4), (128, 32, 4), (128, 32, 8),
    )]
    + [("flash2_bwd", d, bq, bk, w) for d in (64, 128) for bq, bk, w in (
        (64, 64, 4), (64, 128, 8), (128, 128, 8), (64, 128, 4), (32, 64, 4), (64, 64, 8),
        (128, 128, 4),  # kernels.schedule's default tiling (flashio demo)
    )]
    + [("standard", 64, 128, 128, 8), ("standard", 128, 128, 64, 8), ("standard", 64, 64, 64, 4),
       ("standard", 128, 64, 64, 4), ("standard", 64, 128, 128, 4)]
    # FlashDecoding's split kernel (flash2_fwd.cu's SPLIT_KV build) at flash-attn's tiles
    + [("flash_decode", 64, 64, 256, 4), ("flash_decode", 128, 64, 128, 4)]
)  # fmt: skip
DTYPES = ("bf16", "fp16")
# the MASKED builds of the forward and the backward (windows, segments, kv_seq_len), at the
# tilings above (benchmarks/masks_measure.py times some of them)
MASKED_CONFIGS = tuple(c for c in CONFIGS if c[0] in ("flash2", "flash2_bwd"))
# flash_decode over a paged KV cache (the PAGED build) at vLLM's and flash-attn 2's page sizes
PAGED_CONFIGS = tuple(c for c in CONFIGS if c[0] == "flash_decode")
PAGE_SIZES = (16, 256)
# the BLOCK_SPARSE builds of the forward and the backward: a block mask of 128 x 128 blocks
# (flex_attention's), whose blocks hold whole tiles of every tiling here
SPARSE_CONFIGS = MASKED_CONFIGS
# kernels with a main loop of MMA steps; of the others, standard attention's softmax is in the
# census as one iteration of each of its two chunk loops (simulator.sass_paths.parts, every_loop),
# per number of passes over S, which stands for that many of the trace's steps
MMA_KERNELS = {"flash2_fwd", "flash2_bwd", "flash_decode", "std_qk", "std_pv"}
SOFTMAX_PASSES = (1, 2)


def have_tools() -> bool:
    """Whether NVRTC and cuobjdump can be found (the census needs both)."""
    try:
        _tool("cuobjdump")
    except SystemExit:
        return False
    return nvrtc.available()


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        try:  # the pip wheels (nvidia-cuda-*) put their tools under nvidia/cu13/bin
            import nvidia

            for root in nvidia.__path__:
                cand = Path(root, "cu13", "bin", name)
                if cand.exists():
                    return str(cand)
        except ImportError:
            pass
        raise SystemExit(f"{name} not found: pip install nvidia-cuda-cuobjdump")
    return path


# (head_dim, block_q, block_kv, softmax overlaps): the Hopper forward's builds the measurements
# time (benchmarks/hopper_measure.py) and the presets; ping-pong only with two consumers
HOPPER_BUILDS = (
    (64, 128, 128, ("none", "pingpong", "intra-warpgroup", "both")),
    (64, 128, 176, ("none", "pingpong", "intra-warpgroup", "both")),
    (64, 192, 128, ("none", "intra-warpgroup")),
    (128, 128, 128, ("none", "pingpong", "intra-warpgroup", "both")),
    (128, 128, 176, ("none", "pingpong", "intra-warpgroup", "both")),
    (256, 128, 64, ("none", "pingpong", "intra-warpgroup", "both")),
)
HOPPER_CENSUS_PATH = CENSUS_DIR / "flashio-hopper.json.gz"
HOPPER_PRESET = implementation("flashio-hopper")


def compile_sass(sched, workdir: Path, extra: tuple = ()) -> tuple[str, dict]:
    """The SASS listing and ptxas report of ``sched``'s kernels, compiled as CuPy compiles
    them on the H200 (sm_90; the Hopper forward for sm_90a); ``extra``: more (name, value)
    defines (a probe's build: ``DQ_TARGET`` of the mma.sync backward, ``STEP_CLOCK`` of the
    Hopper forward)."""
    if hopper.uses_hopper(sched):
        name = "hopper_bwd.cu" if sched.name == "flash2_bwd" else "hopper_fwd.cu"
        code = (CUDA_DIR / name).read_text()
        defs = (*hopper.defines(sched), *extra)
        options = (*hopper.compile_options(defs), *CUPY_NVRTC_OPTIONS)
        options += ("--ptxas-options=-v",)
    else:
        defs = (*defines(sched), *extra)
        code, options = source(sched), (*nvrtc_options(defs), "--ptxas-options=-v")
    cubin, log = nvrtc.compile_cubin(code, options)
    path = workdir / "k.cubin"
    path.write_bytes(cubin)
    tool = _tool("cuobjdump")
    # cuobjdump runs nvdisasm, which the pip wheels put beside it
    env = {**os.environ, "PATH": f"{Path(tool).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    out = subprocess.run(
        [tool, "-sass", str(path)], check=True, capture_output=True, text=True, env=env
    )
    return out.stdout, parse_ptxas(log)


def census(
    configs=CONFIGS, dtypes=DTYPES, log=print, masked=MASKED_CONFIGS, paged=PAGED_CONFIGS,
    sparse=SPARSE_CONFIGS,
) -> dict:  # fmt: skip
    out = {}
    # (config, build): "" as written, "masked", "sparse" or a page size
    todo = [(c, "") for c in configs] + [(c, "masked") for c in masked]
    todo += [(c, ps) for c in paged for ps in PAGE_SIZES] + [(c, "sparse") for c in sparse]
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in dtypes:
            for (name, d, bq, bk, w), build in todo:
                # a K/V length of its own (one that differs from the queries') is a mask beyond
                # causal: the MASKED build; a paged cache: the PAGED build; a block mask: the
                # BLOCK_SPARSE build
                is_masked, page = build == "masked", build if isinstance(build, int) else 0
                more = {"kv_seq_len": 8192} if is_masked else {}
                if page:
                    more = {"paged_kv": PagedKV.contiguous(1, 4096, page)}
                if build == "sparse":
                    more = {"block_mask": BlockMask.random(4096, 0.25, seed=0)}
                shape = AttentionShape(batch=1, heads=1, seq_len=4096, head_dim=d, dtype=dtype,
                                       **more)  # fmt: skip
                sched = schedule(name, shape, block_q=bq, block_kv=bk, warps=w)
                if is_masked and not dict(defines(sched)).get("MASKED"):
                    raise SystemExit(f"{sched.name} {shape}: not a MASKED build")
                try:
                    text, report = compile_sass(sched, Path(tmp))
                except nvrtc.NvrtcError as e:  # e.g. too much shared memory
                    log(f"skip {name} d={d} {bq}x{bk} w{w} {dtype}: {str(e).strip()[-200:]}")
                    continue
                functions = [ln.function for ln in launches(sched)]
                for fn, kinfo in zip(functions, sched.kernels, strict=True):
                    if fn not in MMA_KERNELS:
                        continue
                    # keyed by the trace's kernel name, which the simulator looks up
                    key = program_key(
                        kinfo.name, d, bq, bk, w, dtype, masked=is_masked, paged=page,
                        sparse=build == "sparse",
                    )  # fmt: skip
                    progs = parts(text, fn, name=key)
                    out[key] = {
                        **progs["loop"].to_json(),
                        "copies_overlap": loop_copies_overlap(text, fn),
                        "compiled": report[fn],
                        "prologue": progs["prologue"].to_json(),
                        "epilogue": progs["epilogue"].to_json(),
                    }
                    log(f"{key}: {len(out[key]['class'])} instructions per step")
                if name == "standard" and not build:
                    out.update(_softmax_entries(shape, bq, bk, w, Path(tmp), log))
    return out


def _softmax_entries(shape, bq: int, bk: int, w: int, tmp: Path, log) -> dict:
    """The std_softmax census entries of one standard tiling, for one and two passes."""
    out = {}
    for passes in SOFTMAX_PASSES:
        sched = schedule("standard", shape, block_q=bq, block_kv=bk, warps=w,
                         softmax_passes=passes)  # fmt: skip
        text, report = compile_sass(sched, tmp)
        options = tuple((k, sched.option(k)) for k in VARIANT_OPTIONS["softmax"])
        key = program_key("softmax", shape.head_dim, bq, bk, w, shape.dtype, options=options)
        progs = parts(text, "std_softmax", name=key, marker="MUFU.EX2", every_loop=True)
        out[key] = {
            **progs["loop"].to_json(),
            "loop_steps": passes,
            "compiled": report["std_softmax"],
            "prologue": progs["prologue"].to_json(),
            "epilogue": progs["epilogue"].to_json(),
        }
        log(f"{key}: {len(out[key]['class'])} instructions per {passes} step(s)")
    return out


CENSUS_PATH = CENSUS_DIR / "flashio.json.gz"


def hopper_census(
    builds=HOPPER_BUILDS, dtypes=DTYPES, log=print, bwd_builds=hopper.BWD_TILES
) -> dict:
    """The Hopper kernels' census: each forward build's and each backward build's
    (``bwd_builds``: (head_dim, block_q, block_kv)) consumer loop (the innermost loop holding
    its wgmma), prologue and epilogue, and ptxas's report, keyed by ``hopper_key``."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in dtypes:
            for d, bq, bk, overlaps in builds:
                for overlap in overlaps:
                    shape = AttentionShape(batch=1, heads=1, seq_len=4096, head_dim=d, dtype=dtype)
                    impl = hopper.description(bq, overlap)
                    sched = schedule("flash2", shape, bq, bk, 4 * (bq // 64 + 1), impl=impl)
                    key = hopper_key(d, bq, bk, sched.warps, dtype, overlap)
                    out[key] = _hopper_entry(sched, "hopper_fwd", key, Path(tmp))
                    log(f"{key}: {len(out[key]['class'])} instructions per step")
            for d, bq, bk in bwd_builds:  # the backward's main kernel, one build each
                shape = AttentionShape(batch=1, heads=1, seq_len=4096, head_dim=d, dtype=dtype)
                # the preset's Q and dO buffers for the head dim (the key does not name them)
                stages = HOPPER_PRESET.specialize("flash2_bwd", shape).stages
                impl = hopper.bwd_description(bk, stages)
                sched = schedule("flash2_bwd", shape, bq, bk, 4 * (bk // 64 + 1), impl=impl)
                key = hopper_key(d, bq, bk, sched.warps, dtype, "none", kernel="flash2_bwd")
                out[key] = _hopper_entry(sched, "hopper_bwd", key, Path(tmp))
                log(f"{key}: {len(out[key]['class'])} instructions per step")
    return out


def _hopper_entry(sched, function: str, key: str, workdir: Path) -> dict:
    """The census entry of one Hopper build: ``function``'s consumer loop (the innermost
    holding its wgmma), prologue and epilogue, and ptxas's report."""
    text, report = compile_sass(sched, workdir)
    progs = parts(text, function, name=key, marker="HGMMA")
    return {
        **progs["loop"].to_json(),
        "compiled": report[function],
        "prologue": progs["prologue"].to_json(),
        "epilogue": progs["epilogue"].to_json(),
    }


def write(progs: dict, path: Path = CENSUS_PATH, **about) -> None:
    """Write a census (``about``: what made it, stored beside the programs)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps({**about, "programs": progs}, sort_keys=True, separators=(",", ":"))
    tmp = path.with_suffix(".tmp")
    with gzip.GzipFile(tmp, "wb", mtime=0) as f:  # mtime 0: the same bytes for the same census
        f.write(data.encode())
    os.replace(tmp, path)


def main(argv=None) -> int:
    fmt = argparse.RawTextHelpFormatter
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=fmt)
    ap.add_argument("--check", action="store_true", help="compare with the committed census")
    ap.add_argument("--hopper", action="store_true", help="the Hopper kernels' census instead")
    args = ap.parse_args(argv)
    progs = hopper_census() if args.hopper else census()
    path = HOPPER_CENSUS_PATH if args.hopper else CENSUS_PATH
    if args.check:
        with gzip.open(path, "rt") as f:
            committed = json.load(f)["programs"]
        same = committed == progs
        print("census matches the committed file" if same else "census differs")
        return 0 if same else 1
    major, minor = nvrtc.version()
    write(
        progs,
        path,
        generated_by="python -m benchmarks.sass_census" + (" --hopper" if args.hopper else ""),
        compiler=f"NVRTC {major}.{minor}, the options of kernels.gpu.nvrtc_options"
        + (" with -arch=sm_90a (kernels.hopper.compile_options)" if args.hopper else ""),
    )
    print(f"wrote {len(progs)} programs to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
