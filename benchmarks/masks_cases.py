"""The cases benchmarks/masks_measure.py times: masked prefill (windows, packed documents),
the masked backward, block masks, and decoding over contiguous and paged KV caches, each a list
of (case, shape fields)."""

from __future__ import annotations

from flashio import kernels

__all__ = ["BWD_TILES", "DECODE_TILES", "DTYPE", "PAGE_SIZES", "TILES", "backward_cases",
           "block_sparse_cases", "cases", "decode_cases", "paged_cases"]  # fmt: skip

DTYPE = "bf16"
TILES = {64: (128, 128, 8), 128: (128, 64, 8)}  # ours, prefill; no spills in the MASKED build
DECODE_TILES = (64, 128, 4)  # ours for one query: a 64-row tile, 4 warps
BWD_TILES = (64, 128, 8)  # ours, backward, d = 64 and 128: 12-32 bytes of spills (ptxas)


def cases() -> list[tuple[str, dict]]:
    """(case, shape fields): windows and documents at 16k and 32k tokens, d = 64 and 128,
    against full causal attention; decoding steps over 8k to 128k cached tokens, GQA 32/8."""
    out = []
    for d in (64, 128):
        base = {"batch": 1, "heads": 16, "head_dim": d, "dtype": DTYPE, "causal": True}
        out.append(("causal", {**base, "seq_len": 16384}))
        for n in (16384, 32768):
            for w in (1024, 4096):
                out.append((f"window {w}", {**base, "seq_len": n, "window": w}))
        for docs in (4, 16):
            out.append((f"{docs} documents", {**base, "seq_len": 16384,
                                               "segments": (16384 // docs,) * docs}))  # fmt: skip
    for cache in (8192, 32768, 131072):
        out.append((f"decode {cache}", {"batch": 1, "heads": 32, "kv_heads": 8, "seq_len": 1,
                                         "kv_seq_len": cache, "head_dim": 128,
                                         "dtype": DTYPE}))  # fmt: skip
    return out


def backward_cases() -> list[tuple[str, dict]]:
    """(case, shape fields) of the backward: a window and packed documents at 16k tokens next
    to full causal attention, d = 64 and 128."""
    out = []
    for d in (64, 128):
        base = {"batch": 1, "heads": 16, "head_dim": d, "dtype": DTYPE, "causal": True,
                "seq_len": 16384}  # fmt: skip
        out += [("causal", base), ("window 4096", {**base, "window": 4096}),
                ("4 documents", {**base, "segments": (4096,) * 4})]  # fmt: skip
    return out


def block_sparse_cases() -> list[tuple[str, dict]]:
    """(case, shape fields) of the block masks at 16k tokens, d = 64 and 128: random blocks,
    local and global blocks (BigBird's pattern without its random blocks), random blocks with
    causal, and no mask for scale; 128 x 128 blocks, flex_attention's default."""
    bm, n, out = kernels.BlockMask, 16384, []
    for d in (64, 128):
        base = {"batch": 1, "heads": 16, "head_dim": d, "dtype": DTYPE, "seq_len": n}
        out += [
            ("full", base),
            ("random 25%", {**base, "block_mask": bm.random(n, 0.25, seed=0)}),
            ("local 4 + 2 global", {**base, "block_mask": bm.local(n, 4, global_blocks=2)}),
            ("causal, random 50%", {**base, "causal": True,
                                    "block_mask": bm.random(n, 0.5, seed=0)}),
        ]  # fmt: skip
    return out


def decode_cases() -> list[tuple[str, dict]]:
    """(case, shape fields) of the decoding comparison: GQA 32/8, d = 128, one query."""
    base = {"batch": 1, "heads": 32, "kv_heads": 8, "seq_len": 1, "head_dim": 128, "dtype": DTYPE}
    return [(f"decode {c}", {**base, "kv_seq_len": c}) for c in (8192, 32768, 65536, 131072)]


PAGE_SIZES = (16, 256)  # vLLM's default page, flash-attn 2's smallest


def paged_cases() -> list[tuple[str, dict]]:
    """(case, shape fields) of the paged decoding comparison: decode_cases' shapes."""
    return decode_cases()
