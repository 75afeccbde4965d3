"""The implementations: each setup (SDPA, eager, Triton and its check, flex) returns a Runner
whose run(i) is one timed call on buffer set i; SETUPS maps an implementation to its setup.
"""

from __future__ import annotations

import dataclasses
import math
import time

from benchmarks.impl_measure import config
from benchmarks.impl_measure.config import CHECK_N, CHECK_TOL, Config, Skip, State
from benchmarks.impl_measure.kernel_names import (
    flash_row_fields,
    flex_row_fields,
    inductor_autotuners,
)


def n_sets_for(set_bytes: int, l2_bytes: int) -> int:
    """gpu_measure's: enough buffer sets that their total exceeds 3x the L2 (3 to 64)."""
    try:
        from benchmarks.gpu_timing import n_sets_for as gm_n_sets_for

        return gm_n_sets_for(set_bytes, l2_bytes)
    except ImportError:
        return max(3, min(64, math.ceil(3 * l2_bytes / max(set_bytes, 1))))


@dataclasses.dataclass
class Runner:
    run: object
    n_sets: int
    alt: tuple | None = None  # (fwd+bwd, fwd) for a backward that cannot retain its graph
    finish: object = None  # profile -> dict of row fields, after the calls
    notes: list = dataclasses.field(default_factory=list)


def _randn(dims, count: int, grad: bool = False):
    import torch

    return [
        torch.randn(dims, device=config.DEVICE, dtype=torch.bfloat16, requires_grad=grad)
        for _ in range(count)
    ]


def _n_sets(cfg: Config, st: State) -> int:
    per = math.prod(cfg.dims) * 2
    return n_sets_for(per * (5 if cfg.pass_ == "bwd" else 3), st.l2)


def _runner(cfg: Config, st: State, forward) -> Runner:
    """Buffer sets and the timed call: forward(q, k, v), or the backward of a saved forward."""
    import torch

    n_sets = _n_sets(cfg, st)
    if cfg.pass_ == "fwd":
        sets = [tuple(_randn(cfg.dims, 3)) for _ in range(n_sets)]
        return Runner(lambda i: forward(*sets[i]), n_sets)
    sets = []
    for _ in range(n_sets):
        q, k, v = _randn(cfg.dims, 3, grad=True)
        o = forward(q, k, v)
        sets.append((q, k, v, o, torch.randn_like(o)))

    def bwd(i):
        q, k, v, o, do = sets[i]
        torch.autograd.grad(o, (q, k, v), do, retain_graph=True)

    def fwd_bwd(i):
        q, k, v, _, do = sets[i]
        torch.autograd.grad(forward(q, k, v), (q, k, v), do)

    def fwd(i):
        forward(*sets[i][:3])

    return Runner(bwd, n_sets, alt=(fwd_bwd, fwd))


def setup_sdpa(cfg: Config, st: State, stack) -> Runner:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    name = "FLASH_ATTENTION" if cfg.impl == "torch_flash" else "CUDNN_ATTENTION"
    backend = getattr(SDPBackend, name, None)
    if backend is None:
        raise Skip(f"SDPBackend.{name} does not exist in torch {torch.__version__}")
    stack.enter_context(sdpa_kernel(backend))
    r = _runner(
        cfg, st, lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=cfg.causal)
    )
    if cfg.impl == "torch_flash":
        r.finish = flash_row_fields
    return r


def setup_eager(cfg: Config, st: State, stack) -> Runner:
    import torch

    stack.enter_context(torch.no_grad())
    scale = 1.0 / math.sqrt(cfg.head_dim)
    n = cfg.seq_len
    mask = torch.ones(n, n, dtype=torch.bool, device=config.DEVICE).triu(1) if cfg.causal else None

    def forward(q, k, v):
        s = torch.matmul(q, k.transpose(-2, -1)) * scale
        if mask is not None:
            s.masked_fill_(mask, float("-inf"))
        return torch.matmul(torch.softmax(s, dim=-1), v)

    r = _runner(cfg, st, forward)
    r.notes.append("S and P in bf16 (softmax accumulates in fp32)")
    if cfg.causal:
        r.notes.append(
            "causal by masking the full S: computes all N^2 scores; tflops halved by convention"
        )
    return r


def triton_kernel_fields(k) -> dict:
    if k is None or not hasattr(k, "metadata"):  # the interpreter returns no compiled kernel
        return {"name": "fa2_fwd"}
    md = k.metadata
    n_spills = getattr(k, "n_spills", None)
    return {
        "name": k.name,
        "regs": getattr(k, "n_regs", None),
        "n_spills": n_spills,
        "spills": None if n_spills is None else 4 * n_spills,
        "smem_bytes": getattr(md, "shared", None),
        "num_warps": getattr(md, "num_warps", None),
        "num_stages": getattr(md, "num_stages", None),
        "hash": getattr(k, "hash", None),
    }


def check_triton(cfg: Config, st: State) -> dict:
    """Compile the tiling and compare its O and LSE at N = CHECK_N with SDPA and fp32."""
    import torch
    import torch.nn.functional as F

    ta = st.triton_module()
    bm, bn, w, s = cfg.tiling
    rec = {
        "head_dim": cfg.head_dim,
        "causal": cfg.causal,
        "tiling": list(cfg.tiling),
        "check_shape": [cfg.batch, cfg.heads, CHECK_N, cfg.head_dim],
    }
    q, k, v = _randn((cfg.batch, cfg.heads, CHECK_N, cfg.head_dim), 3)
    t = time.perf_counter()
    try:
        o, lse, kern = ta.launch(q, k, v, cfg.causal, bm, bn, w, s)
        torch.cuda.synchronize()
    except Exception as e:
        rec.update(status="failed", why=f"{type(e).__name__}: {e}"[:2000])
        return rec
    rec["compile_and_first_call_s"] = round(time.perf_counter() - t, 2)
    st.triton_kernels[(cfg.head_dim, cfg.causal, cfg.tiling)] = kern
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=cfg.causal)
    o32, lse32 = ta.reference(q, k, v, cfg.causal)
    err = {
        "max_abs_err_vs_sdpa": (o.float() - ref.float()).abs().max().item(),
        "max_abs_err_vs_fp32": (o.float() - o32).abs().max().item(),
        "sdpa_max_abs_err_vs_fp32": (ref.float() - o32).abs().max().item(),
        "lse_max_abs_err_vs_fp32": (lse - lse32).abs().max().item(),
    }
    ok = all(math.isfinite(x) for x in err.values()) and err["max_abs_err_vs_sdpa"] <= CHECK_TOL
    rec.update(status="ok", check=err, check_passed=ok, kernel=triton_kernel_fields(kern))
    return rec


def setup_triton(cfg: Config, st: State, stack) -> Runner:
    key = (cfg.head_dim, cfg.causal, cfg.tiling)
    if key not in st.triton_status:
        rec = check_triton(cfg, st)
        st.triton_status[key] = rec
        st.doc["triton_tilings"].append(rec)
        err = rec.get("check", {}).get("max_abs_err_vs_sdpa")
        what = f"max|O - O_sdpa| = {err:.2e}" if err is not None else rec.get("why", "")[:150]
        if err is not None and not rec.get("check_passed"):
            what += f" > {CHECK_TOL}: check FAILED"
        print(
            f"  check d={cfg.head_dim} causal={int(cfg.causal)} tiles={cfg.tiling}: "
            f"{'compiled' if rec['status'] == 'ok' else rec['status']}, {what}",
            flush=True,
        )
    rec = st.triton_status[key]
    if rec["status"] != "ok":
        raise Skip(f"tiling does not run: {rec['why'][:300]}")
    ta = st.triton_module()
    bm, bn, w, s = cfg.tiling
    holder = {}

    def forward(q, k, v):
        o, _, holder["k"] = ta.launch(q, k, v, cfg.causal, bm, bn, w, s)
        return o

    r = _runner(cfg, st, forward)
    if not rec.get("check_passed", False):
        r.notes.append(f"numerics check FAILED at N={CHECK_N}: {rec.get('check')}")

    def finish(prof):
        f = triton_kernel_fields(holder["k"])
        return {
            "block_m": bm,
            "block_n": bn,
            "num_warps": w,
            "num_stages": s,
            "per_kernel": {f["name"]: f},
            "triton_kernel": f,
        }

    r.finish = finish
    return r


def setup_flex(cfg: Config, st: State, stack) -> Runner:
    fn = st.flex_fn()
    bm = st.block_mask(cfg.seq_len) if cfg.causal else None
    before = set(inductor_autotuners())
    t0 = time.time()
    r = _runner(cfg, st, lambda q, k, v: fn(q, k, v, block_mask=bm))
    r.finish = lambda prof: flex_row_fields(cfg, st, before, t0, prof)
    return r


SETUPS = {
    "torch_flash": setup_sdpa,
    "torch_cudnn": setup_sdpa,
    "torch_eager": setup_eager,
    "triton_fa": setup_triton,
    "flex": setup_flex,
}
