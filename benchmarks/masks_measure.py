"""Masked attention on the GPU, side by side in one run: this project's flash2 forward (the
MASKED build of kernels/cuda/flash2_fwd.cu) with sliding windows, packed documents and
decoding over a KV cache; torch flex_attention with the same window and document masks; and
PyTorch SDPA's flash backend (flash-attn 2, whose decoding path is split-KV FlashDecoding)
for decoding. Before timing, each pair of implementations is run on the same inputs and the
largest difference of their outputs recorded (both compute the same masked attention).

    python3 -m benchmarks.masks_measure --out $OUT/masks [--budget-s 300]
    python3 -m benchmarks.masks_measure --out $OUT/masks --backward
    python3 -m benchmarks.masks_measure --out $OUT/masks --decode
    python3 -m benchmarks.masks_measure --out $OUT/masks --block-sparse
    python3 -m benchmarks.masks_measure --out $OUT/masks --paged

Writes masks.json: provenance, the copy bandwidth, and a row per (implementation, case) with
the shape, the tiling (ours), the median/min/max of CUDA-event timings over inputs rotated
among sets larger than 3x the L2, and the output difference. ``--backward`` writes
masks_bwd.json the same way for the backward pass: this project's flash2_bwd (the MASKED build
of kernels/cuda/flash2_bwd.cu; its three kernels, after a forward that made O and L) against
flex_attention's backward (the gradients of its forward with the same mask), and the largest
difference of dQ, dK and dV. ``--decode`` writes masks_decode.json: this project's
flash_decode (flash2_fwd.cu's SPLIT_KV build and its combine, flash-attn's split heuristic and
tiles) against PyTorch SDPA's flash backend on decoding steps over 8k to 128k cached tokens.
``--block-sparse`` writes masks_block.json: block masks of 128 x 128 blocks (the BLOCK_SPARSE
builds), forward and backward, beside flex_attention with the same block mask, and the same
shapes without a mask. ``--paged`` writes masks_paged.json: flash_decode over a paged KV cache
(the PAGED build: pages of 16 and 256 tokens, shuffled and in order) beside the same decoding step
over a contiguous cache and PyTorch SDPA's flash backend (contiguous).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchmarks.gpu_measure import provenance
from benchmarks.gpu_timing import ceilings, n_sets_for, time_events, timed
from benchmarks.masks_cases import (
    BWD_TILES,
    DECODE_TILES,
    PAGE_SIZES,
    TILES,
    backward_cases,
    block_sparse_cases,
    cases,
    decode_cases,
    paged_cases,
)
from flashio import kernels
from flashio.kernels import gpu

REPS = 20


def measure_both(case: str, fields: dict, l2: int, flex_fn) -> list[dict]:
    """Forward and backward rows of one block-sparse case (``pass`` says which)."""
    rows = []
    for kind, run in (("fwd", measure), ("bwd", measure_backward)):
        for r in run(case, fields, l2, flex_fn):
            rows.append({"pass": kind, **r})
    return rows


def measure_paged(case: str, fields: dict, l2: int, flex_fn) -> list[dict]:
    """flash_decode over pages of each PAGE_SIZES, shuffled and in order, beside the same
    step over a contiguous cache and PyTorch SDPA's flash backend, on the same keys."""
    import cupy

    shape = kernels.AttentionShape(**fields)
    scheds = {"flashio": kernels.schedule("flash_decode", shape)}
    for ps in PAGE_SIZES:
        pk = kernels.PagedKV
        for suffix, table in (
            ("", pk.shuffled(shape.batch, shape.n_kv, ps, seed=ps)),  # pages in any order
            ("_in_order", pk.contiguous(shape.batch, shape.n_kv, ps)),
        ):
            paged = kernels.AttentionShape(**{**fields, "paged_kv": table})
            scheds[f"flashio_paged{ps}{suffix}"] = kernels.schedule("flash_decode", paged)
    rows = measure_decode(case, fields, l2, flex_fn)  # contiguous: ours and PyTorch's
    n_sets = rows[0]["rotate_buffers"]
    data = [_bits(shape) for _ in range(n_sets)]
    plain = gpu.compile_schedule(scheds["flashio"])
    plain.launch(ref := plain.alloc(*(x for x, _ in data[0])))
    for impl, sched in list(scheds.items())[1:]:
        c = gpu.compile_schedule(sched)
        ours = [c.alloc(*(x for x, _ in s)) for s in data]
        c.launch(ours[0])
        cupy.cuda.get_current_stream().synchronize()
        diff = float(cupy.abs(_as_float(ours[0]["o"]) - _as_float(ref["o"])).max())
        t = time_events(lambda i, ev, c=c, ours=ours: c.launch(ours[i], events=ev), n_sets, REPS,
                        len(c.launches) + 1)  # fmt: skip
        rows.append({"impl": impl, "block_q": sched.block_q, "block_kv": sched.block_kv,
                     "warps": sched.warps, "num_splits": sched.option("num_splits"),
                     "defines": dict(gpu.defines(sched)), **t, "case": case,
                     "shape": sched.shape.to_dict(), "rotate_buffers": n_sets,
                     "max_abs_diff": diff, "page_size": sched.shape.paged_kv.page_size,
                     "page_order": "contiguous" if impl.endswith("_in_order") else "shuffled",
                     "page_seed": sched.shape.paged_kv.page_size})  # fmt: skip
        del ours
    for r in rows:  # tables: PagedKV.shuffled(.., seed=page_seed), or .contiguous (in order)
        r["shape"] = {k: v for k, v in r["shape"].items() if k != "paged_kv"}
    return rows


def _as_float(bits):
    """bf16 bits (CuPy uint16) as float32."""
    import cupy

    return (bits.astype(cupy.uint32) << 16).view(cupy.float32)


def _bits(shape):
    """Random bf16 inputs as CuPy uint16 bits, and the same data as torch tensors."""
    import cupy
    import torch

    def make(dims):
        x = cupy.random.standard_normal(dims, dtype=cupy.float32)
        t = torch.from_dlpack(x).to(torch.bfloat16)
        return cupy.from_dlpack(t.view(torch.int16)).view(cupy.uint16), t

    q = make((shape.batch, shape.heads, shape.seq_len, shape.head_dim))
    kv = [make((shape.batch, shape.n_kv_heads, shape.n_kv, shape.head_dim)) for _ in "kv"]
    return [q, *kv]


def _flex_mask(shape):
    import torch
    from torch.nn.attention.flex_attention import create_block_mask

    n, w = shape.seq_len, shape.window
    bm = shape.block_mask
    if bm is not None:
        grid = torch.tensor(bm.array, device="cuda")
        gq, gk, causal = bm.block_q, bm.block_kv, shape.causal

        def mask(b, h, q, kv):
            keep = grid[q // gq, kv // gk]
            return keep & (q >= kv) if causal else keep
    elif not shape.causal:  # no mask at all

        def mask(b, h, q, kv):
            return q >= 0
    elif shape.segments:
        doc = torch.repeat_interleave(
            torch.arange(len(shape.segments), device="cuda"),
            torch.tensor(shape.segments, device="cuda"),
        )

        def mask(b, h, q, kv):
            return (q >= kv) & (doc[q] == doc[kv])
    elif w is not None:

        def mask(b, h, q, kv):
            return (q >= kv) & (q - kv < w)
    else:

        def mask(b, h, q, kv):
            return q >= kv

    return create_block_mask(mask, None, None, n, n, device="cuda")


def measure(case: str, fields: dict, l2: int, flex_fn) -> list[dict]:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    shape = kernels.AttentionShape(**fields)
    decode = shape.seq_len == 1
    tiles = DECODE_TILES if decode else TILES[shape.head_dim]
    sched = kernels.schedule("flash2", shape, *tiles)
    c = gpu.compile_schedule(sched)
    set_bytes = 2 * (
        shape.batch * shape.heads * shape.seq_len * shape.head_dim
        + 2 * shape.batch * shape.n_kv_heads * shape.n_kv * shape.head_dim
    )
    n_sets = n_sets_for(set_bytes, l2)
    data = [_bits(shape) for _ in range(n_sets)]
    ours = [c.alloc(*(x for x, _ in s)) for s in data]
    gqa = "native"
    if decode:

        def other(i):
            q, k, v = (t for _, t in data[i])
            if gqa == "native":
                return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            g = shape.group  # this torch's flash backend takes no GQA: K, V expanded
            k, v = (x.repeat_interleave(g, dim=1) for x in (k, v))
            return F.scaled_dot_product_attention(q, k, v)

        other_name, ctx = "torch_flash", sdpa_kernel(SDPBackend.FLASH_ATTENTION)
    else:
        bm = _flex_mask(shape)

        def other(i):
            q, k, v = (t for _, t in data[i])
            return flex_fn(q, k, v, block_mask=bm)

        other_name, ctx = "flex", torch.no_grad()
    rows = []
    with ctx:
        c.launch(ours[0])
        try:
            o_other = other(0)
        except RuntimeError:
            gqa = "expanded"
            o_other = other(0)
        torch.cuda.synchronize()
        o_ours = torch.from_dlpack(ours[0]["o"].view("int16")).view(torch.bfloat16)
        diff = float((o_ours.float() - o_other.float()).abs().max())
        t = time_events(lambda i, ev: c.launch(ours[i], events=ev), n_sets, REPS)
        rows.append({"impl": "flashio", "block_q": sched.block_q, "block_kv": sched.block_kv,
                     "warps": sched.warps, "defines": dict(gpu.defines(sched)), **t})  # fmt: skip

        t = time_events(lambda i, ev: timed(ev, lambda: other(i)), n_sets, REPS)
        rows.append({"impl": other_name, "gqa": gqa, **t, **_kernel_times(other, n_sets)})
    for r in rows:
        r.update(case=case, shape=shape.to_dict(), rotate_buffers=n_sets, max_abs_diff=diff)
    return rows


def measure_decode(case: str, fields: dict, l2: int, flex_fn) -> list[dict]:
    """flash_decode beside PyTorch SDPA's flash backend, on the same inputs."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    shape = kernels.AttentionShape(**fields)
    sched = kernels.schedule("flash_decode", shape)
    c = gpu.compile_schedule(sched)
    set_bytes = 2 * (
        shape.batch * shape.heads * shape.head_dim
        + 2 * shape.batch * shape.n_kv_heads * shape.n_kv * shape.head_dim
    )
    n_sets = n_sets_for(set_bytes, l2)
    data = [_bits(shape) for _ in range(n_sets)]
    ours = [c.alloc(*(x for x, _ in s)) for s in data]

    def other(i):
        q, k, v = (t for _, t in data[i])
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    rows = []
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        c.launch(ours[0])
        o_other = other(0)
        torch.cuda.synchronize()
        o_ours = torch.from_dlpack(ours[0]["o"].view("int16")).view(torch.bfloat16)
        diff = float((o_ours.float() - o_other.float()).abs().max())
        n_events = len(c.launches) + 1  # the split kernel and the combine apart
        t = time_events(lambda i, ev: c.launch(ours[i], events=ev), n_sets, REPS, n_events)
        rows.append({"impl": "flashio", "block_q": sched.block_q, "block_kv": sched.block_kv,
                     "warps": sched.warps, "num_splits": sched.option("num_splits"),
                     "defines": dict(gpu.defines(sched)), **t})  # fmt: skip
        t = time_events(lambda i, ev: timed(ev, lambda: other(i)), n_sets, REPS)
        rows.append({"impl": "torch_flash", **t, **_kernel_times(other, n_sets)})
    for r in rows:
        r.update(case=case, shape=shape.to_dict(), rotate_buffers=n_sets, max_abs_diff=diff)
    return rows


def measure_backward(case: str, fields: dict, l2: int, flex_fn) -> list[dict]:
    import cupy
    import torch

    shape = kernels.AttentionShape(**fields)
    sched = kernels.schedule("flash2_bwd", shape, *BWD_TILES)
    c = gpu.compile_schedule(sched)
    q_elems = shape.batch * shape.heads * shape.seq_len * shape.head_dim
    kv_elems = shape.batch * shape.n_kv_heads * shape.n_kv * shape.head_dim
    n_sets = n_sets_for(2 * (4 * q_elems + 2 * kv_elems), l2)
    data = []
    for _ in range(n_sets):
        (q, tq), (k, tk), (v, tv) = _bits(shape)
        do_bits, tdo = _bits(shape)[0]
        data.append(((q, k, v, do_bits), (tq, tk, tv, tdo)))
    ours = [c.alloc(*bits) for bits, _ in data]  # runs our forward for O and L
    bm = _flex_mask(shape)
    flex = []
    for _, (tq, tk, tv, tdo) in data:
        leaves = [x.detach().requires_grad_() for x in (tq, tk, tv)]
        flex.append((leaves, flex_fn(*leaves, block_mask=bm), tdo))

    def other(i):
        leaves, out, tdo = flex[i]
        return torch.autograd.grad(out, leaves, tdo, retain_graph=True)

    c.launch(ours[0])
    grads = other(0)
    torch.cuda.synchronize()
    diff = 0.0
    for name, g in zip(("dq", "dk", "dv"), grads, strict=True):
        mine = torch.from_dlpack(ours[0][name].view(cupy.int16)).view(torch.bfloat16)
        diff = max(diff, float((mine.float() - g.float()).abs().max()))
    rows = []
    # an event before each of our three kernels and after the last: their times as well
    n_events = len(c.launches) + 1
    t = time_events(lambda i, ev: c.launch(ours[i], events=ev), n_sets, REPS, n_events)
    rows.append({"impl": "flashio", "block_q": sched.block_q, "block_kv": sched.block_kv,
                 "warps": sched.warps, "defines": dict(gpu.defines(sched)), **t})  # fmt: skip
    t = time_events(lambda i, ev: timed(ev, lambda: other(i)), n_sets, REPS)
    rows.append({"impl": "flex", **t, **_kernel_times(other, n_sets)})
    for r in rows:
        r.update(case=case, shape=shape.to_dict(), rotate_buffers=n_sets, max_abs_diff=diff)
    return rows


def _kernel_times(run, n_sets: int, calls: int = 10) -> dict:
    """The kernels one call launches (torch.profiler), each one's median duration over
    ``calls`` calls, and their grids: GPU time without the host's share of a short call."""
    import numpy as np

    from benchmarks.impl_measure import profile_launches

    profiles = [profile_launches(run, i % n_sets) for i in range(calls)]
    kernels_ = [[e for e in p if e["cat"] == "kernel"] for p in profiles]
    if len({len(k) for k in kernels_}) != 1:
        return {"profile_note": "calls launched different kernels", "profile": profiles[0]}
    return {
        "kernels": [e["name"] for e in kernels_[0]],
        "kernel_us": [
            float(np.median([k[j]["dur_us"] for k in kernels_])) for j in range(len(kernels_[0]))
        ],
        "grids": [e["grid"] for e in kernels_[0]],
        "blocks": [e["block"] for e in kernels_[0]],
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget-s", type=float, default=300.0)
    what = ap.add_mutually_exclusive_group()
    what.add_argument(
        "--backward",
        action="store_true",
        help="the backward pass (masks_bwd.json) instead of the forward",
    )
    what.add_argument(
        "--decode",
        action="store_true",
        help="flash_decode beside PyTorch's decoding (masks_decode.json)",
    )
    what.add_argument(
        "--paged",
        action="store_true",
        help="flash_decode over a paged cache beside a contiguous one (masks_paged.json)",
    )
    what.add_argument(
        "--block-sparse",
        action="store_true",
        help="block masks, forward and backward, beside flex_attention (masks_block.json)",
    )
    args = ap.parse_args(argv)
    import cupy
    import torch
    import torch._dynamo
    from torch.nn.attention.flex_attention import flex_attention

    args.out.mkdir(parents=True, exist_ok=True)
    l2 = cupy.cuda.runtime.getDeviceProperties(0)["l2CacheSize"]
    # one compiled kernel per mask and shape: past dynamo's recompile limit flex_attention
    # would fall back to its unfused (dense) path
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 256)
    flex_fn = torch.compile(flex_attention, dynamic=False)
    doc = {"provenance": provenance(), "ceilings": ceilings(REPS), "rows": [], "skipped": []}
    t0 = time.time()
    name, todo, run = (
        ("masks_bwd.json", backward_cases(), measure_backward)
        if args.backward
        else ("masks_decode.json", decode_cases(), measure_decode)
        if args.decode
        else ("masks_paged.json", paged_cases(), measure_paged)
        if args.paged
        else ("masks_block.json", block_sparse_cases(), measure_both)
        if args.block_sparse
        else ("masks.json", cases(), measure)
    )
    for case, fields in todo:
        if time.time() - t0 > args.budget_s:
            doc["skipped"].append({"case": case, "shape": fields, "why": "time budget"})
            continue
        rows = run(case, fields, l2, flex_fn)
        doc["rows"] += rows
        print(case, fields.get("seq_len"), fields.get("head_dim"),
              *(f"{r['impl']} {r['median_ms']:.4f} ms" for r in rows),
              f"diff {rows[0]['max_abs_diff']:.2e}", flush=True)  # fmt: skip
    doc["wall_s"] = round(time.time() - t0, 1)
    path = args.out / name
    path.write_text(json.dumps(doc, indent=1, default=str))
    print(f"wrote {path} ({doc['wall_s']} s)")


if __name__ == "__main__":
    main()
