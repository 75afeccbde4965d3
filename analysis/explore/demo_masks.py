"""The demo's long-context part: FA2's forward under full, causal and sliding-window masks,
and one decoding step over a long KV cache, whole and split over the keys (``flashio demo``'s
last table and the seeds' decoding claim)."""

from __future__ import annotations

from flashio import kernels, simulator
from flashio.analysis.closed_form.bounds import work
from flashio.analysis.explore.search import COMPILED
from flashio.analysis.present import report

__all__ = ["DECODE", "LONG", "MASKS", "decode_claim", "masks", "masks_table"]

# Long context: FA2's forward under each mask (docs/io.md, "Masks"), 128 x 128 tiles, 4 warps,
# priced by this project's compiled loop (COMPILED)
LONG = kernels.AttentionShape(batch=1, heads=16, seq_len=16384, head_dim=64, dtype="fp16")
DECODE = {"seq_len": 1, "kv_seq_len": 131072}
MASKS = {  # label: (schedule, shape fields)
    "full": ("flash2", {}),
    "causal": ("flash2", {"causal": True}),
    "causal, window 4096": ("flash2", {"causal": True, "window": 4096}),
    "decoding, 128k cache": ("flash2", DECODE),
    "decoding, split-KV": ("flash_decode", DECODE),
}


def masks(gpu, say) -> list[dict]:
    """FA2's forward at long context under each of MASKS, priced by the compiled loop, and a
    decoding step split over the keys (FlashDecoding, flash-attn's heuristic for the GPU's SMs):
    bytes, time, TFLOP/s over the pairs the mask allows, and the HBM bandwidth drawn."""
    rows = []
    for label, (name, fields) in MASKS.items():
        say("masks at long context", label)
        shape = kernels.AttentionShape(**{**LONG.to_dict(), **fields})
        if name == "flash_decode":  # flash-attn's split-KV tiles and split count
            sched = kernels.schedule(name, shape, sm_count=gpu.sm_count)
        else:
            sched = kernels.schedule(name, shape, 128, 128, 4)
        res = simulator.simulate(sched, gpu, options=COMPILED)
        rows.append(
            {
                "mask": label,
                "schedule": name,
                "options": dict(sched.options),
                "ctas": sched.kernels[0].ctas,
                "block_kv": sched.block_kv,
                "shape": shape.to_dict(),
                "pairs_per_head": work(shape),
                "global_bytes": res.global_bytes,
                "hbm_bytes": res.hbm_bytes,
                "time_s": res.time_s,
                "tflops_per_s": shape.forward_flops() / res.time_s / 1e12,
                "hbm_tb_per_s": res.hbm_bytes / res.time_s / 1e12,
            }
        )
    return rows


def decode_claim(rows) -> str:
    """The seeds' decoding claims: the KV cache stays in HBM and is read again for every new
    token (FlashAttention removes S and P, not this), and the Decoding variant speeds it up."""
    one, split = rows[-2], rows[-1]
    sh = kernels.AttentionShape(**one["shape"])
    cache = 2 * sh.batch * sh.n_kv_heads * sh.n_kv * sh.head_dim * sh.elem_bytes
    return (
        f"'the KV cache stays in HBM and is re-read for every token': one decoding step over "
        f"a {sh.n_kv:,}-token cache reads {split['hbm_bytes'] / 1e9:.3f} GB from HBM, the "
        f"cache itself ({cache / 1e9:.3f} GB of K and V); FlashAttention removes S and P, not "
        f"this. Split over the keys (the Decoding variant) the step draws "
        f"{split['hbm_tb_per_s']:.2f} TB/s instead of {one['hbm_tb_per_s']:.2f} with one CTA "
        f"per head: {one['time_s'] / split['time_s']:.1f}x faster."
    )


def masks_table(rows, gpu) -> str:
    head = ["mask", "pairs/head", "global GB", "HBM GB", "time ms", "TFLOP/s", "HBM TB/s"]

    def rate(x: float) -> str:
        return f"{x:.0f}" if x >= 10 else f"{x:.2f}"

    body = [
        [r["mask"], f"{r['pairs_per_head']:,}", f"{r['global_bytes'] / 1e9:.3f}",
         f"{r['hbm_bytes'] / 1e9:.3f}", f"{r['time_s'] * 1e3:.3f}", rate(r["tflops_per_s"]),
         f"{r['hbm_tb_per_s']:.2f}"]
        for r in rows
    ]  # fmt: skip
    sh, decode, split = LONG, rows[-2], rows[-1]
    return (
        f"long context, flash2 forward, 128x128 tiles, 4 warps, priced by its compiled loop: "
        f"batch={sh.batch}, heads={sh.heads}, N={sh.seq_len}, d={sh.head_dim}, {sh.dtype}\n\n"
        + report.table(head, body)
        + f"\ndecoding with flash2: {decode['ctas']} CTAs (one per head) on {gpu.sm_count} "
        "SMs, each computing a whole 128-row Q tile for its one query; split-KV "
        f"(flash_decode, {split['options']['num_splits']} splits by flash-attn's heuristic, "
        f"{split['ctas']} CTAs of 64 x {split['block_kv']} tiles) spreads the cache over the "
        "SMs (priced by the pipe rates: no compiled kernel)"
    )
