"""What the kernels were: template arguments and Flash_*_kernel_traits from flash kernels'
names, inductor's compiled kernels (autotuners, cache sources) and the flex row fields.
"""

from __future__ import annotations

import re
from pathlib import Path

from benchmarks.impl_measure.config import Config, State


def template_args(name: str, func: str) -> list[str] | None:
    """The top-level template arguments of ``func<...>`` in a demangled name."""
    i = name.find(func + "<")
    if i < 0:
        return None
    args, cur, depth = [], [], 1
    for ch in name[i + len(func) + 1 :]:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
            if depth == 0:
                args.append("".join(cur).strip())
                return args
        elif ch == "," and depth == 1:
            args.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    return None


_FWD_TRAITS = (
    "kHeadDim",
    "kBlockM",
    "kBlockN",
    "kNWarps",
    "Is_Q_in_regs",
    "Share_Q_K_smem",
    "elem_type",
    "Base",
)
_BWD_TRAITS = (
    "kHeadDim",
    "kBlockM",
    "kBlockN",
    "kNWarps",
    "AtomLayoutMSdP",
    "AtomLayoutNdKV",
    "AtomLayoutMdQ",
    "Is_V_in_regs",
    "No_double_buffer",
    "elem_type",
    "Base",
)
_KERNEL_ARGS = {  # the non-traits template parameters, by count, of PyTorch's FA2 versions
    "flash_fwd_kernel": {
        6: ("Is_dropout", "Is_causal", "Is_local", "Is_even_MN", "Is_even_K", "Return_softmax"),
        7: (
            "Is_dropout",
            "Is_causal",
            "Is_local",
            "Has_alibi",
            "Is_even_MN",
            "Is_even_K",
            "Return_softmax",
        ),
        8: (
            "Is_dropout",
            "Is_causal",
            "Is_local",
            "Has_alibi",
            "Is_even_MN",
            "Is_even_K",
            "Is_softcap",
            "Return_softmax",
        ),
    },
    "flash_fwd_splitkv_kernel": {
        6: ("Is_causal", "Is_local", "Is_even_MN", "Is_even_K", "Split", "Append_KV"),
        7: ("Is_causal", "Is_local", "Has_alibi", "Is_even_MN", "Is_even_K", "Split", "Append_KV"),
        8: (
            "Is_causal",
            "Is_local",
            "Has_alibi",
            "Is_even_MN",
            "Is_even_K",
            "Is_softcap",
            "Split",
            "Append_KV",
        ),
    },
    "flash_fwd_splitkv_combine_kernel": {3: ("kBlockM", "Log_max_splits", "Is_even_K")},
    "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel": {
        5: ("Is_dropout", "Is_causal", "Is_local", "Is_even_MN", "Is_even_K"),
        6: ("Is_dropout", "Is_causal", "Is_local", "Has_alibi", "Is_even_MN", "Is_even_K"),
        7: (
            "Is_dropout",
            "Is_causal",
            "Is_local",
            "Has_alibi",
            "Is_even_MN",
            "Is_even_K",
            "Is_softcap",
        ),
    },
    "flash_bwd_dot_do_o_kernel": {1: ("Clear_dQaccum",)},
}


def _literal(s: str):
    if s in ("true", "false", "True", "False"):
        return s in ("true", "True")
    if re.fullmatch(r"-?\d+", s):
        return int(s)
    return s


def flash_signature(demangled: str) -> dict | None:
    """Kernel, Flash_*_kernel_traits and the other template arguments of a flash kernel."""
    m = re.search(r"(flash_(?:fwd|bwd)\w*)<", demangled or "")
    if m is None:
        return None
    kernel = m.group(1)
    args = template_args(demangled, kernel) or []
    out: dict = {"kernel": kernel, "template_args": args}
    rest = []
    for a in args:
        kind = re.search(r"Flash_(fwd|bwd)_kernel_traits<", a)
        if kind and "traits" not in out:
            names = _FWD_TRAITS if kind.group(1) == "fwd" else _BWD_TRAITS
            vals = template_args(a, f"Flash_{kind.group(1)}_kernel_traits") or []
            out["traits_kind"] = kind.group(1)
            pairs = zip(names, vals, strict=False)
            out["traits"] = {n: _literal(v) for n, v in pairs if n != "Base"}
        else:
            rest.append(a)
    names = _KERNEL_ARGS.get(kernel, {}).get(len(rest))
    out["flags"] = (
        {n: _literal(v) for n, v in zip(names, rest, strict=True)}
        if names
        else {f"arg{i}": _literal(v) for i, v in enumerate(rest)}
    )
    return out


def _norm(name: str) -> str:
    return re.sub(r"\s+", "", name or "")


def flash_row_fields(prof) -> dict:
    """block_m/block_n/num_warps of a torch flash row from its main kernel's traits."""
    sigs = [flash_signature(e["name"]) for e in prof if e["cat"] == "kernel"]
    sigs = [s for s in sigs if s and "traits" in s]
    main = next(
        (
            s
            for s in sigs
            if s["kernel"].startswith(
                ("flash_fwd_kernel", "flash_fwd_splitkv_kernel", "flash_bwd_dq_dk_dv")
            )
        ),
        None,
    )
    if main is None:
        return {"flash_kernels": sigs}
    t = main["traits"]
    return {
        "block_m": t.get("kBlockM"),
        "block_n": t.get("kBlockN"),
        "num_warps": t.get("kNWarps"),
        "flash_kernels": sigs,
    }


def inductor_autotuners() -> dict:
    """id -> inductor's CachingAutotuner of every kernel compiled so far in this process."""
    try:
        from torch._inductor.codecache import PyCodeCache
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner
    except Exception:
        return {}
    mods = list(getattr(PyCodeCache, "modules", []) or [])
    mods += list((getattr(PyCodeCache, "modules_no_attr", {}) or {}).values())
    mods += list((getattr(PyCodeCache, "cache", {}) or {}).values())
    found = {}
    for m in mods:
        for v in list(vars(m).values()):
            if issubclass(type(v), CachingAutotuner):
                found[id(v)] = v
    if not found:  # kept elsewhere in some versions: look through the heap
        import gc

        # type(), not isinstance(): the heap holds dead weak proxies and lazy modules
        found = {id(o): o for o in gc.get_objects() if issubclass(type(o), CachingAutotuner)}
    return found


_CONSTEXPR = re.compile(r"^\s*([A-Za-z_]\w*)\s*:\s*tl\.constexpr\s*=\s*(.+?)\s*$", re.M)


def _jsonable(v):
    return v if isinstance(v, (int, float, str, bool)) or v is None else str(v)


def autotuner_fields(a) -> dict:
    fn = getattr(a, "fn", None)
    src = getattr(fn, "src", "") or ""
    info = {
        "name": getattr(fn, "__name__", None)
        or (getattr(a, "inductor_meta", {}) or {}).get("kernel_name"),
        "constexprs": {k: _literal(v) for k, v in _CONSTEXPR.findall(src)},
        "launchers": [],
    }
    for ln in getattr(a, "launchers", None) or []:
        c = getattr(ln, "config", None)
        n_spills = getattr(ln, "n_spills", None)
        info["launchers"].append(
            {
                "num_warps": getattr(c, "num_warps", None),
                "num_stages": getattr(c, "num_stages", None),
                "kwargs": {k: _jsonable(v) for k, v in (getattr(c, "kwargs", {}) or {}).items()},
                "regs": getattr(ln, "n_regs", None),
                "n_spills": n_spills,
                "spills": None if n_spills is None else 4 * n_spills,
                "smem_bytes": getattr(ln, "shared", None),
                "cache_hash": getattr(ln, "cache_hash", None),
            }
        )
    if not info["launchers"]:
        info["configs"] = [str(c) for c in getattr(a, "configs", []) or []]
    return info


def inductor_sources_since(t0: float) -> list[dict]:
    """Fallback: inductor's kernel sources written since t0 (its cache directory), parsed for
    the template's constexprs and the decorator's num_warps/num_stages."""
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir

        root = Path(cache_dir())
    except Exception:
        return []
    out = []
    for p in root.rglob("*.py"):
        try:
            if p.stat().st_mtime < t0 - 1:
                continue
            text = p.read_text(errors="replace")
        except OSError:
            continue
        if "tl.constexpr =" not in text or "template(" not in text:
            continue
        for m in re.finditer(r"template\((.*?)\)\s*@triton\.jit\s*def\s+(\w+)\(", text, re.S):
            deco, name = m.group(1), m.group(2)
            body = text[m.end() : m.end() + 20000]
            nw, ns = re.search(r"num_warps=(\d+)", deco), re.search(r"num_stages=(\d+)", deco)
            out.append(
                {
                    "name": name,
                    "constexprs": {k: _literal(v) for k, v in _CONSTEXPR.findall(body)},
                    "launchers": [
                        {
                            "num_warps": int(nw[1]) if nw else None,
                            "num_stages": int(ns[1]) if ns else None,
                        }
                    ],
                    "source": "inductor cache file",
                }
            )
    return out


def flex_row_fields(cfg: Config, st: State, before: set, t0: float, prof) -> dict:
    new = [a for i, a in inductor_autotuners().items() if i not in before]
    infos = [autotuner_fields(a) for a in new]
    how = "inductor's compiled kernels (CachingAutotuner: template constexprs, launcher config)"
    if not any(i["constexprs"] for i in infos):
        alt = inductor_sources_since(t0)
        if alt:
            infos, how = alt, "inductor's kernel sources in its cache directory"
    ran = [e["name"] for e in prof if e["cat"] == "kernel"]
    for info in infos:
        info["ran_in"] = [cfg.label()] if info["name"] in ran else []
    st.flex_kernels += infos
    fields: dict = {"inductor_kernels": infos, "per_kernel": {}}
    for info in infos:
        if info["name"] in ran and info["launchers"]:
            fields["per_kernel"][info["name"]] = info["launchers"][0]
    tem = [
        i
        for i in infos
        if i["name"] in ran and ("BLOCK_M" in i["constexprs"] or "BLOCK_M1" in i["constexprs"])
    ]
    if not tem:
        fields["notes"] = [
            "flex tiling not retrievable (no inductor template kernel of this "
            "config found among the compiled kernels or the cache sources)"
        ]
        return fields
    c, ln = tem[0]["constexprs"], (tem[0]["launchers"] or [{}])[0]
    if cfg.pass_ == "fwd" or "BLOCK_M1" not in c:
        fields.update(block_m=c.get("BLOCK_M"), block_n=c.get("BLOCK_N"))
    else:
        fields.update(block_m=c.get("BLOCK_M1"), block_n=c.get("BLOCK_N1"))
        fields["notes"] = [
            f"flex bwd: dK/dV loop BLOCK_M1 x BLOCK_N1 = {c.get('BLOCK_M1')} x "
            f"{c.get('BLOCK_N1')}, dQ loop BLOCK_M2 x BLOCK_N2 = "
            f"{c.get('BLOCK_M2')} x {c.get('BLOCK_N2')}"
        ]
    fields.update(
        num_warps=ln.get("num_warps"), num_stages=ln.get("num_stages"), flex_tiling_source=how
    )
    return fields
