"""The sass mode: SASS dumps of the run's Triton kernels (triton_fa, flex/inductor) and of the
torch flash kernels.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import math
import os
import re
import tempfile
import time
from pathlib import Path

from benchmarks.impl_measure.config import (
    BATCH,
    CHECK_N,
    HEAD_DIMS,
    HEADS,
    MAX_FUN_CALLS,
    MINI_N,
    TRITON_TILINGS,
    Config,
    State,
    save,
)
from benchmarks.impl_measure.kernel_names import _norm
from benchmarks.impl_measure.resources import (
    cuobjdump_path,
    flash_functions,
    gpu_arch,
    mark_ran,
    parse_res_usage,
    run_tool,
    runtime_flash_launches,
    sass_instructions,
    split_sass,
    torch_cuda_lib,
)
from benchmarks.impl_measure.setups import check_triton, triton_kernel_fields
from benchmarks.impl_measure.timing import _cleanup, run_group


def _safe(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s)[:120]


def _write_gz(path: Path, text: str) -> dict:
    data = text.encode()
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(data)
    return {
        "file": path.name,
        "text_sha256": hashlib.sha256(data).hexdigest(),
        "text_bytes": len(data),
        "gz_bytes": path.stat().st_size,
        "instructions": sass_instructions(text),
    }


def sass_of_cubin(st: State, cubin: Path) -> tuple[str | None, list[dict]]:
    cu, t = cuobjdump_path(), st.args.cuobjdump_timeout
    p = run_tool(st, [cu, "-sass", str(cubin)], t)
    q = run_tool(st, [cu, "-res-usage", str(cubin)], t)
    return (p.stdout if p else None), (parse_res_usage(q.stdout.splitlines()) if q else [])


def mini_compile(st: State) -> None:
    """Compile what the sass mode dumps when time did not run here: every triton_fa tiling
    (its check at N = 1024) and flex forward/backward at N = MINI_N."""
    print(f"  compiling triton_fa tilings and flex at N={MINI_N} for their SASS", flush=True)
    if "triton_fa" in st.args.impls:
        for d in HEAD_DIMS:
            for c in (False, True):
                for t in TRITON_TILINGS:
                    cfg = Config("triton_fa", "fwd", BATCH, HEADS, CHECK_N, d, c, t)
                    key = (d, c, t)
                    if key not in st.triton_status:
                        st.triton_status[key] = rec = check_triton(cfg, st)
                        st.doc["triton_tilings"].append(rec)
                    _cleanup()
    if "flex" in st.args.impls:
        group = [
            Config("flex", p, BATCH, HEADS, MINI_N, d, c)
            for d in HEAD_DIMS
            for c in (False, True)
            for p in ("fwd", "bwd")
        ]
        rows = st.doc.setdefault("sass_compile_rows", [])  # JSON only: not timing rows
        st.doc["groups"]["flex_sass_compile"] = run_group("flex", group, st, math.inf, 3, rows)


def sass_triton(st: State, out: Path, index: dict) -> None:
    if "time" not in st.args.mode:
        mini_compile(st)
    seen: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        for (d, c, t), k in sorted(st.triton_kernels.items(), key=str):
            cub = k.asm.get("cubin") if hasattr(k, "asm") else None
            if not cub:
                index["errors"].append(f"triton_fa d={d} causal={c} {t}: no cubin in asm")
                continue
            seen.add(hashlib.sha256(cub).hexdigest())
            path = Path(tmp) / "k.cubin"
            path.write_bytes(cub)
            text, res = sass_of_cubin(st, path)
            entry = {
                "impl": "triton_fa",
                "head_dim": d,
                "causal": c,
                "tiling": list(t),
                "kernel": triton_kernel_fields(k),
                "cuobjdump": res,
                "cubin_sha256": hashlib.sha256(cub).hexdigest(),
            }
            if text:
                name = f"triton_fa_d{d}_c{int(c)}_m{t[0]}_n{t[1]}_w{t[2]}_s{t[3]}.sass.gz"
                entry.update(_write_gz(out / name, text))
            index["triton"].append(entry)
    cache = Path(os.environ.get("TRITON_CACHE_DIR", ""))
    by_hash: dict[str, list] = {}
    for info in st.flex_kernels:
        for ln in info.get("launchers", []):
            if ln.get("cache_hash"):
                by_hash.setdefault(ln["cache_hash"], []).append(info)
    for cub in sorted(cache.rglob("*.cubin")) if cache.is_dir() else []:
        data = cub.read_bytes()
        h = hashlib.sha256(data).hexdigest()
        if h in seen:
            continue
        seen.add(h)
        meta = {}
        with contextlib.suppress(OSError, ValueError):
            meta = json.loads(cub.with_suffix(".json").read_text())
        users = by_hash.get(cub.parent.name, [])
        text, res = sass_of_cubin(st, cub)
        entry = {
            "impl": "inductor" if users or cub.stem.startswith("triton_") else "triton",
            "name": cub.stem,
            "cache_dir_key": cub.parent.name,
            "metadata": {
                k: meta.get(k)
                for k in ("name", "num_warps", "num_stages", "shared", "num_ctas", "target")
            },
            "constexprs": users[0]["constexprs"] if users else None,
            "ran_in": sorted({r for u in users for r in u.get("ran_in", [])}),
            "cuobjdump": res,
            "cubin_sha256": h,
        }
        if text:
            entry.update(
                _write_gz(out / f"{_safe(cub.stem)}_{cub.parent.name[:10]}.sass.gz", text)
            )
        index["triton"].append(entry)


def _flash_file(f: dict, i: int) -> str:
    sig = f.get("signature") or {}
    t, fl = sig.get("traits", {}), sig.get("flags", {})
    kind = sig.get("kernel", "flash").replace("flash_", "").replace("_kernel", "")
    bits = [
        f"h{t.get('kHeadDim')}",
        f"m{t.get('kBlockM')}",
        f"n{t.get('kBlockN')}",
        f"w{t.get('kNWarps')}",
    ]
    for key, tag in (("Is_causal", "c"), ("Is_even_MN", "e")):
        if key in fl:
            bits.append(f"{tag}{int(bool(fl[key]))}")
    return _safe(f"torch_{kind}_{'_'.join(bits)}_{i}") + ".sass.gz"


def _wanted(f: dict) -> bool:
    """bf16 flash kernels of head dim 64/128 without dropout, local window or softmax output:
    the ones this grid can launch (used when no launch was profiled)."""
    sig = f.get("signature") or {}
    t, fl = sig.get("traits", {}), sig.get("flags", {})
    return (
        t.get("kHeadDim") in HEAD_DIMS
        and "bfloat16" in str(t.get("elem_type"))
        and not fl.get("Is_dropout")
        and not fl.get("Is_local")
        and not fl.get("Return_softmax")
        and fl.get("Is_even_K", True) is True
        and "splitkv" not in sig.get("kernel", "")
    )


def sass_torch(st: State, out: Path, index: dict) -> None:
    funcs, method = flash_functions(st)
    launches = runtime_flash_launches(st)
    mark_ran(funcs, launches)
    ran = [f for f in funcs if f.get("ran_in")]
    chosen = ran or [f for f in funcs if _wanted(f)]
    index["torch_flash_method"] = method
    index["torch_flash_functions_total"] = len(funcs)
    index["torch_flash_selection"] = (
        "the kernels profiled in this run"
        if ran
        else "no profiled launch matched: bf16 hdim 64/128 kernels "
        "without dropout/local/softmax output"
    )
    matched = {_norm(f.get("demangled") or "") for f in funcs}
    index["torch_flash_unmatched_launches"] = sorted(
        {e["name"] for e in launches if "flash" in e["name"] and _norm(e["name"]) not in matched}
    )
    cu, timeout = cuobjdump_path(), st.args.cuobjdump_timeout
    by_cubin: dict[str, list] = {}
    for f in chosen:
        by_cubin.setdefault(f.get("cubin") or "", []).append(f)
    i = 0
    for cubin, fs in by_cubin.items():
        if cubin:
            p = run_tool(st, [cu, "-sass", cubin], timeout)
            texts = split_sass(p.stdout) if p else {}
        else:  # no extracted ELF: ask the library for each function (slow: a few only)
            texts = {}
            for f in fs[:MAX_FUN_CALLS]:
                lib = str(torch_cuda_lib())
                p = run_tool(
                    st, [cu, "-arch", gpu_arch(), "-sass", "-fun", f["mangled"], lib], timeout
                )
                if p:
                    texts.update(split_sass(p.stdout))
        for f in fs:
            entry = {
                k: f.get(k)
                for k in (
                    "mangled",
                    "demangled",
                    "signature",
                    "arch",
                    "elf",
                    "REG",
                    "STACK",
                    "SHARED",
                    "LOCAL",
                    "ran_in",
                )
            }
            text = texts.get(f["mangled"])
            if text:
                entry.update(_write_gz(out / _flash_file(f, i), text))
                i += 1
            else:
                entry["sass"] = "not found in cuobjdump's output"
            index["torch_flash"].append(entry)


def main_sass(st: State) -> None:
    out = st.out / "sass"
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    print(f"== sass: {', '.join(st.args.sass_parts)}", flush=True)
    index = {
        "provenance": st.doc["provenance"],
        "arch": None,
        "triton": [],
        "torch_flash": [],
        "errors": [],
    }
    if cuobjdump_path() is None:
        index["errors"].append("cuobjdump is neither on PATH nor in triton's wheel")
    else:
        index["arch"] = gpu_arch()
        for part, fn in (("triton", sass_triton), ("torch", sass_torch)):
            if part not in st.args.sass_parts:
                continue
            try:
                fn(st, out, index)
            except Exception as e:
                index["errors"].append(f"{part}: {type(e).__name__}: {e}")
                print(f"  FAIL sass {part}: {type(e).__name__}: {e}", flush=True)
    index["cuobjdump"] = st.cuobjdump_log
    index["wall_s"] = round(time.monotonic() - t0, 1)
    (out / "sass_index.json").write_text(json.dumps(index, indent=1, default=str))
    save(st)
    n = sum(1 for e in index["triton"] + index["torch_flash"] if e.get("file"))
    print(f"== sass: {n} files in {index['wall_s']:.1f} s", flush=True)
