"""cuobjdump: libtorch's flash kernels (tools, resource usage, demangling, ELF extraction, the
flash functions and their merge into the rows) and the resources mode.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.impl_measure.config import BATCH, HEAD_DIMS, HEADS, MINI_N, Config, State, save
from benchmarks.impl_measure.kernel_names import _norm, flash_signature
from benchmarks.impl_measure.setups import setup_sdpa
from benchmarks.impl_measure.timing import _cleanup, _short, profile_launches


def cuobjdump_path() -> str | None:
    p = shutil.which("cuobjdump")
    if p:
        return p
    try:
        import importlib.util

        spec = importlib.util.find_spec("triton")
        if spec and spec.origin:
            cand = Path(spec.origin).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
            if cand.exists():
                return str(cand)
    except (ImportError, ValueError):
        pass
    return None


def torch_cuda_lib() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        raise FileNotFoundError("torch is not installed")
    lib = Path(spec.origin).parent / "lib" / "libtorch_cuda.so"
    if not lib.exists():
        raise FileNotFoundError(f"{lib} does not exist")
    return lib


def run_tool(st: State, cmd: list, timeout: float, cwd=None, stdout_path=None):
    """Run a command (cuobjdump), logging its wall time and outcome; None on timeout/failure.
    subprocess.run kills the command itself when it overruns. All calls of a run share
    --cuobjdump-budget-s, counted from the first."""
    t = time.monotonic()
    if st.cuobjdump_deadline is None:
        st.cuobjdump_deadline = t + st.args.cuobjdump_budget_s
    timeout = min(timeout, st.cuobjdump_deadline - t)
    shown = " ".join(re.sub(r"^/.*/(lib/[^/]+|[^/]+)$", r"<...>/\1", str(c)) for c in cmd)
    entry = {"cmd": shown, "timeout_s": round(timeout, 1)}
    if timeout < 5:
        entry["rc"] = "not run: --cuobjdump-budget-s spent"
        st.cuobjdump_log.append(entry)
        print(f"  [not run: cuobjdump budget spent] {_short(shown, 100)}", flush=True)
        return None
    p = None
    try:
        if stdout_path is not None:
            with open(stdout_path, "w") as f:
                p = subprocess.run(
                    cmd,
                    stdout=f,
                    stderr=subprocess.PIPE,
                    text=True,
                    errors="replace",
                    timeout=timeout,
                    cwd=cwd,
                )
        else:
            p = subprocess.run(
                cmd, capture_output=True, text=True, errors="replace", timeout=timeout, cwd=cwd
            )
        entry.update(rc=p.returncode, stderr_tail=(p.stderr or "")[-1000:])
    except subprocess.TimeoutExpired:
        entry["rc"] = "timeout"
        p = None
    except OSError as e:
        entry["rc"] = f"OSError: {e}"
    entry["wall_s"] = round(time.monotonic() - t, 1)
    st.cuobjdump_log.append(entry)
    print(f"  [{entry['wall_s']:6.1f} s rc={entry['rc']}] {_short(shown, 110)}", flush=True)
    return p if p is not None and p.returncode == 0 else None


_RES_PAIR = re.compile(r"([A-Z]+(?:\[\d+\])?):(\d+)")


def parse_res_usage(lines, keep=None) -> list[dict]:
    """Functions of ``cuobjdump -res-usage`` output: name, arch, ELF index, REG, STACK, ..."""
    out, arch, elf, fn = [], None, 0, None
    for line in lines:
        s = line.strip()
        if s.startswith("Fatbin elf code"):
            elf += 1
        elif m := re.match(r"arch = (sm_\w+)", s):
            arch = m.group(1)
        elif m := re.match(r"Function (\S+):$", s):
            fn = m.group(1) if keep is None or keep(m.group(1)) else None
        elif fn and s.startswith("REG:"):
            out.append(
                {
                    "mangled": fn,
                    "arch": arch,
                    "elf_index": elf,
                    **{k: int(v) for k, v in _RES_PAIR.findall(s)},
                }
            )
            fn = None
    return out


def split_sass(text: str) -> dict[str, str]:
    """Function name -> its SASS, from ``cuobjdump -sass`` output."""
    funcs, cur, buf = {}, None, []
    for line in text.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m or (cur and (line.startswith("Fatbin") or re.match(r"\s*code for sm_", line))):
            if cur:
                funcs[cur] = "\n".join(buf) + "\n"
            cur, buf = (m.group(1), [line]) if m else (None, [])
            continue
        if cur:
            buf.append(line)
    if cur:
        funcs[cur] = "\n".join(buf) + "\n"
    return funcs


def sass_instructions(text: str) -> int:
    return len(re.findall(r"/\*[0-9a-f]{4,}\*/\s+[@A-Z]", text))


def demangle(names) -> dict[str, str]:
    """Mangled -> demangled C++ names: libstdc++'s __cxa_demangle, else cu++filt/c++filt."""
    names = list(dict.fromkeys(names))
    out: dict[str, str] = {}
    try:
        import ctypes
        import ctypes.util

        lib = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
        fn = getattr(lib, "__cxa_demangle")
        fn.restype = ctypes.c_void_p
        fn.argtypes = [
            ctypes.c_char_p,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_int),
        ]
        free = ctypes.CDLL(None).free
        free.argtypes = [ctypes.c_void_p]
        for n in names:
            status = ctypes.c_int(0)
            ptr = fn(n.encode(), None, None, ctypes.byref(status))
            if status.value == 0 and ptr:
                out[n] = ctypes.string_at(ptr).decode(errors="replace")
                free(ptr)
    except (OSError, AttributeError):
        pass
    missing = [n for n in names if n not in out]
    tool = shutil.which("cu++filt") or shutil.which("c++filt")
    if missing and tool:
        try:
            p = subprocess.run(
                [tool],
                input="\n".join(missing) + "\n",
                capture_output=True,
                text=True,
                timeout=120,
            )
            out.update(zip(missing, p.stdout.splitlines(), strict=False))
        except (OSError, subprocess.SubprocessError):
            pass
    return out


def _is_flash(mangled: str) -> bool:
    return "flash_fwd" in mangled or "flash_bwd" in mangled


def gpu_arch() -> str:
    try:
        import torch

        major, minor = torch.cuda.get_device_capability()
        return f"sm_{major}{minor}"
    except Exception:
        return "sm_90"


def extract_flash_cubins(st: State, work: Path) -> list[Path]:
    """The ELFs of libtorch_cuda.so for this GPU's arch that hold flash kernels, extracted."""
    args, cu = st.args, cuobjdump_path()
    lib, arch = torch_cuda_lib(), gpu_arch()
    p = run_tool(st, [cu, "-lelf", str(lib)], args.cuobjdump_timeout)
    if p is None:
        return []
    names = re.findall(r"ELF file\s+\d+:\s*(\S+)", p.stdout)
    if st.out is not None:
        with gzip.open(st.out / "libtorch_cuda_elfs.txt.gz", "wt") as f:
            f.write(p.stdout)
    mine = [n for n in names if arch in n]
    flash = [n for n in mine if "flash" in n.lower()]
    if not mine:
        st.doc.setdefault("notes", []).append(
            f"no ELF name of the {len(names)} that cuobjdump -lelf lists in libtorch_cuda.so "
            f"mentions {arch}: nothing extracted"
        )
        return []
    partial = ",".join(flash) if 0 < len(flash) <= 200 else arch
    if run_tool(st, [cu, "-xelf", partial, str(lib)], args.cuobjdump_timeout, cwd=work) is None:
        return []
    keep = []
    for f in sorted(work.iterdir()):
        if not f.is_file():
            continue
        data = f.read_bytes()
        if b"flash_fwd" in data or b"flash_bwd" in data:
            keep.append(f)
        else:
            f.unlink()
    print(f"  {len(keep)} of the {len(mine)} {arch} ELFs hold flash kernels", flush=True)
    return keep


def flash_functions(st: State) -> tuple[list[dict], str]:
    """Resource usage of every flash_fwd/flash_bwd function in libtorch_cuda.so for this arch:
    from the extracted ELFs (fast) or from --dump-resource-usage on the whole library."""
    if st.flash_functions is not None:
        return st.flash_functions
    args, cu = st.args, cuobjdump_path()
    if cu is None:
        raise FileNotFoundError("cuobjdump is neither on PATH nor in triton's wheel")
    funcs: list[dict] = []
    method = "none"
    if args.resources_method in ("auto", "extract"):
        work = Path(tempfile.mkdtemp(prefix="flashio_xelf_"))
        st.xelf_dir = work
        for cub in extract_flash_cubins(st, work):
            p = run_tool(st, [cu, "-res-usage", str(cub)], args.cuobjdump_timeout)
            if p is not None:
                for f in parse_res_usage(p.stdout.splitlines(), _is_flash):
                    f.update(elf=cub.name, cubin=str(cub))
                    funcs.append(f)
        method = "extract"
    if not funcs and args.resources_method in ("auto", "lib"):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "res_usage.txt"
            cmd = [cu, "-arch", gpu_arch(), "--dump-resource-usage", str(torch_cuda_lib())]
            if run_tool(st, cmd, args.cuobjdump_timeout, stdout_path=path) is not None:
                with open(path, errors="replace") as f:
                    funcs = parse_res_usage(f, _is_flash)
        method = "lib"
    names = demangle(f["mangled"] for f in funcs)
    for f in funcs:
        f["demangled"] = names.get(f["mangled"])
        f["signature"] = flash_signature(f["demangled"] or "")
        f["local_bytes"] = f.get("STACK", 0) + f.get("LOCAL", 0)
    st.flash_functions = (funcs, method)
    return st.flash_functions


def runtime_flash_launches(st: State) -> list[dict]:
    """The torch flash kernels this run launched: from the time rows, else profiled now (one
    call of each flash config of the grid, at MINI_N unless the grid is asked for)."""
    seen = []
    for row in st.doc["rows"]:
        if row["impl"] == "torch_flash":
            seen += [{"name": n, "row": _row_label(row)} for n in row["kernels"]]
    if seen:
        return seen
    if st.runtime_profile is None:
        import torch

        st.runtime_profile = []
        for d in HEAD_DIMS:
            for c in (False, True):
                for p in ("fwd", "bwd"):
                    cfg = Config("torch_flash", p, BATCH, HEADS, MINI_N, d, c)
                    try:
                        with contextlib.ExitStack() as stack:
                            r = setup_sdpa(cfg, st, stack)
                            r.run(0)
                            torch.cuda.synchronize()
                            st.runtime_profile += [
                                {"name": e["name"], "row": cfg.label()}
                                for e in profile_launches(r.run, 0)
                                if e["cat"] == "kernel"
                            ]
                    except Exception as e:
                        st.doc["errors"].append(
                            {
                                "config": cfg.label() + " (profile)",
                                "error": f"{type(e).__name__}: {e}"[:2000],
                            }
                        )
                    _cleanup()
    return st.runtime_profile


def _row_label(row: dict) -> str:
    t = row.get("block_m"), row.get("block_n"), row.get("num_warps"), row.get("num_stages")
    cfg = Config(
        row["impl"],
        row["pass"],
        row["batch"],
        row["heads"],
        row["seq_len"],
        row["head_dim"],
        row["causal"],
        t if row["impl"] == "triton_fa" else None,
    )
    return cfg.label()


def mark_ran(funcs: list[dict], launches: list[dict]) -> None:
    by_name: dict[str, list[str]] = {}
    for e in launches:
        by_name.setdefault(_norm(e["name"]), []).append(e["row"])
    for f in funcs:
        f["ran_in"] = sorted(set(by_name.get(_norm(f.get("demangled") or ""), [])))


def merge_resources(rows: list[dict], funcs: list[dict]) -> int:
    """Fill the torch_flash rows' spills (STACK + LOCAL bytes per thread) and cuobjdump's
    registers and static shared memory; returns the number of kernels matched."""
    by = {_norm(f.get("demangled") or ""): f for f in funcs}
    hits = 0
    for row in rows:
        if row["impl"] != "torch_flash":
            continue
        res = [by.get(_norm(n)) for n in row["kernels"]]
        if not any(res):
            continue
        row["spills"] = [
            f["local_bytes"] if f else s
            for f, s in zip(res, row.get("spills") or [None] * len(res), strict=False)
        ]
        row["cuobjdump"] = [
            None
            if f is None
            else {k: f.get(k) for k in ("REG", "STACK", "SHARED", "LOCAL", "elf")}
            for f in res
        ]
        hits += sum(f is not None for f in res)
    return hits


def main_resources(st: State) -> None:
    print("== resources: cuobjdump resource usage of libtorch_cuda.so's flash kernels", flush=True)
    t0 = time.monotonic()
    doc = {"provenance": st.doc["provenance"], "arch": gpu_arch(), "functions": [], "errors": []}
    try:
        funcs, method = flash_functions(st)
        launches = runtime_flash_launches(st)
        mark_ran(funcs, launches)
        doc.update(method=method, functions=funcs, runtime_launches=launches)
        if st.doc["rows"]:
            doc["rows_matched_kernels"] = merge_resources(st.doc["rows"], funcs)
            save(st)
    except Exception as e:
        doc["errors"].append(f"{type(e).__name__}: {e}")
        print(f"  FAIL resources: {type(e).__name__}: {e}", flush=True)
    doc["cuobjdump"] = st.cuobjdump_log
    doc["wall_s"] = round(time.monotonic() - t0, 1)
    (st.out / "impl_resources.json").write_text(json.dumps(doc, indent=1, default=str))
    ran = sum(bool(f.get("ran_in")) for f in doc["functions"])
    print(
        f"== resources: {len(doc['functions'])} flash functions ({ran} ran in this run) in "
        f"{doc['wall_s']:.1f} s",
        flush=True,
    )
