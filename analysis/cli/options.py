"""The options every ``flashio`` verb shares, declared once: the attention shape, the tiling and
the GPU, with one set of defaults, and one list syntax (``--seq-len 1024 2048`` and
``--seq-len 1024,2048`` are the same list)."""

from __future__ import annotations

import argparse

from flashio import kernels
from flashio.kernels.block_mask import parse_block_mask
from flashio.kernels.paged_kv import parse_paged_kv
from flashio.kernels.schedules import DEFAULT_WARPS

# Every verb's default GPU: the validation H200 as its microbenchmarks measured it
# (simulator/specs/h200-measured.toml, which docs/validation.md checks); "h200": its datasheet.
DEFAULT_GPU = "h200-measured"
# The one default shape (DESIGN.md's example); a sweep's lists default to several lengths
SHAPE_DEFAULTS = {"batch": 1, "heads": 16, "seq_len": 4096, "head_dim": 64, "dtype": "fp16"}


def version() -> str:
    """flashio's version, as installed (pip install -e . in a checkout)."""
    from flashio import __version__

    return __version__


def listed(kind):
    """An argparse type for one item of a list option: ``2,4`` is two items, so that with
    ``nargs="+"`` both ``--warps 2 4`` and ``--warps 2,4`` give [2, 4] (``flatten``)."""
    name = {int: "integers", float: "numbers"}.get(kind, kind.__name__)

    def parse(text: str) -> tuple:
        try:
            values = tuple(kind(x) for x in text.split(",") if x.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {name} separated by commas or spaces, e.g. 2,4 or 2 4; got {text!r}"
            ) from None
        if not values:
            raise argparse.ArgumentTypeError(f"expected {name}, got {text!r}")
        return values

    return parse


def flatten(groups) -> list | None:
    """The values of a ``listed`` option with ``nargs="+"``, in order (None if not given)."""
    return None if groups is None else [v for g in groups for v in g]


def positive(groups, flag: str) -> list | None:
    """``flatten`` that refuses values below 1 (block sizes, warps, lengths)."""
    values = flatten(groups)
    if values is not None and min(values) < 1:
        raise argparse.ArgumentTypeError(f"{flag}: expected positive values, got {values}")
    return values


def window(text: str) -> int | tuple[int, int]:
    """An argparse type for --window: ``W`` (causal) or ``LEFT,RIGHT``."""
    values = listed(int)(text)
    if len(values) == 1:
        return values[0]
    if len(values) == 2:
        return values
    raise argparse.ArgumentTypeError(
        f"expected W (with --causal: the W keys ending at the query) or LEFT,RIGHT, got {text!r}"
    )


def add_gpu(p: argparse.ArgumentParser, repeatable: bool = False) -> None:
    more = "; repeatable" if repeatable else ""
    p.add_argument(
        "--gpu",
        action="append" if repeatable else "store",
        default=None if repeatable else DEFAULT_GPU,
        metavar="NAME|PATH",
        help=f"built-in GPU name (see 'flashio gpus') or a TOML spec file{more} "
        f"(default {DEFAULT_GPU})",
    )


# one declaration per shape flag: (flag, argparse keywords), the defaults from SHAPE_DEFAULTS
_D = SHAPE_DEFAULTS
SHAPE_FLAGS = {
    "batch": ("--batch", {"type": int, "default": _D["batch"],
                          "help": f"batch size (default {_D['batch']})"}),
    "heads": ("--heads", {"type": int, "default": _D["heads"],
                          "help": f"query heads (default {_D['heads']})"}),
    "kv_heads": ("--kv-heads", {"type": int, "default": None,
                                "help": "key/value heads (GQA; default = heads)"}),
    "seq_len": ("--seq-len", {"type": int, "default": _D["seq_len"],
                              "help": f"sequence length N (default {_D['seq_len']})"}),
    "head_dim": ("--head-dim", {"type": int, "default": _D["head_dim"],
                                "help": f"head dimension d (default {_D['head_dim']})"}),
    "dtype": ("--dtype", {"default": _D["dtype"], "choices": sorted(kernels.DTYPES),
                          "help": f"element type (default {_D['dtype']})"}),
    "causal": ("--causal", {"action": "store_true",
                            "help": "causal mask (default: full attention)"}),
    "kv_seq_len": ("--kv-seq-len", {"type": int, "default": None, "metavar": "N_KV",
                                    "help": "keys and values per sequence, e.g. a KV cache "
                                    "(decoding: --seq-len 1); queries align to the end of the "
                                    "keys (default = --seq-len)"}),
    "window": ("--window", {"type": window, "default": None, "metavar": "W|LEFT,RIGHT",
                            "help": "sliding window: with --causal the W keys ending at each "
                            "query; without, LEFT keys before and RIGHT after it (default: "
                            "none)"}),
    "segments": ("--segments", {"type": listed(int), "default": None, "metavar": "L1,L2,...",
                                "help": "packed documents: their lengths, summing to "
                                "--seq-len; a query sees only its own document (default: "
                                "one sequence)"}),
    "block_mask": ("--block-mask", {"default": None, "metavar": "SPEC",
                                    "help": "block-sparse attention: random:DENSITY[:SEED] "
                                    "(that share of the blocks, drawn with SEED), "
                                    "local:WIDTH[:GLOBAL] (key blocks within WIDTH of the "
                                    "diagonal, GLOBAL leading blocks seen by and seeing all) or "
                                    "a .npy grid of query x key blocks (default: none)"}),
    "mask_block": ("--mask-block", {"type": int, "default": 128, "metavar": "B",
                                    "help": "block size of --block-mask, queries and keys "
                                    "(default 128, flex_attention's)"}),
    "paged_kv": ("--paged-kv", {"default": None, "metavar": "SPEC",
                                "help": "flash_decode over a paged KV cache (vLLM, FlashInfer): "
                                "PAGE_SIZE[:shuffled[:SEED]] (pages of that many tokens in a "
                                "random order), PAGE_SIZE:contiguous, or TABLE.npy:PAGE_SIZE "
                                "(a saved block table, sequences x pages) (default: K and V "
                                "contiguous)"}),
}  # fmt: skip
VARIANT_FLAGS = ("kv_seq_len", "window", "segments", "block_mask", "mask_block", "paged_kv")
# a sweep's lists: several lengths and head dims
SWEEP_LISTS = {
    "seq_len": {"type": listed(int), "nargs": "+", "default": [(1024, 2048, 4096)],
                "metavar": "N", "help": "sequence lengths (default 1024 2048 4096)"},
    "head_dim": {"type": listed(int), "nargs": "+", "default": [(_D["head_dim"],)],
                 "metavar": "D", "help": f"head dimensions (default {_D['head_dim']})"},
}  # fmt: skip


def add_shape_flags(g, *names: str, lists: bool = False) -> None:
    """Add the shape flags ``names`` (keys of SHAPE_FLAGS) to parser or group ``g``; with
    ``lists`` the sweep's several-valued --seq-len and --head-dim."""
    for name in names:
        flag, kw = SHAPE_FLAGS[name]
        g.add_argument(flag, **(SWEEP_LISTS[name] if lists and name in SWEEP_LISTS else kw))


def add_shape(p: argparse.ArgumentParser, lists: bool = False) -> None:
    """--batch, --heads, --kv-heads, --seq-len, --head-dim, --dtype, --causal, --kv-seq-len,
    --window, --segments, --block-mask, --mask-block, --paged-kv; with ``lists`` --seq-len and
    --head-dim take several values (a sweep)."""
    add_shape_flags(p.add_argument_group("attention shape"), *SHAPE_FLAGS, lists=lists)


def shape_of(a: argparse.Namespace, **fields) -> kernels.AttentionShape:
    """The AttentionShape the parsed shape flags describe; ``fields`` replace some (a sweep's
    seq_len and head_dim). Flags a verb does not have take their defaults."""
    names = ("kv_heads", "kv_seq_len", "window", "segments")
    given = {name: getattr(a, name, None) for name in names}
    given = {k: v for k, v in given.items() if v is not None}
    f = {
        "batch": a.batch,
        "heads": a.heads,
        "seq_len": a.seq_len,
        "head_dim": a.head_dim,
        "dtype": a.dtype,
        "causal": getattr(a, "causal", False),
        **given,
        **fields,
    }
    spec = getattr(a, "block_mask", None)
    if spec is not None:  # drawn for the shape's lengths (a sweep's each N)
        f["block_mask"] = parse_block_mask(
            spec, f["seq_len"], f.get("kv_seq_len"), getattr(a, "mask_block", 128)
        )
    spec = getattr(a, "paged_kv", None)
    if spec is not None:
        f["paged_kv"] = parse_paged_kv(spec, f["batch"], f.get("kv_seq_len") or f["seq_len"])
    return kernels.AttentionShape(**f)


def add_impl(p, what: str) -> None:
    """--impl NAME: an implementation preset (kernels.IMPLEMENTATIONS); ``what`` ends the help:
    how the command uses it."""
    names = ", ".join(sorted(kernels.IMPLEMENTATIONS))
    p.add_argument(
        "--impl",
        default=None,
        choices=sorted(kernels.IMPLEMENTATIONS),
        metavar="NAME",
        help=f"{names} (docs/implementations.md): {what} (default: this project's kernels)",
    )


def add_tiling(p: argparse.ArgumentParser) -> None:
    """--block-q, --block-kv, --warps for one tiling."""
    t = p.add_argument_group("tiling")
    rule = "default: B = M/(4d) with M the GPU's shared memory per CTA, a power of 2 in 16..128"
    t.add_argument("--block-q", type=int, default=None, help=f"Br, rows of Q per block ({rule})")
    t.add_argument(
        "--block-kv", type=int, default=None, help="Bc, rows of K/V per block (default as Br)"
    )
    t.add_argument(
        "--warps", type=int, default=None,
        help=f"warps per CTA (default {DEFAULT_WARPS})",
    )  # fmt: skip


def default_block(shape: kernels.AttentionShape, gpu) -> int:
    """Br = Bc when none is given: the seed's rule on ``gpu``'s shared memory per CTA."""
    return kernels.default_block(shape, gpu.smem_per_cta_bytes)


def add_pricing(p: argparse.ArgumentParser, compiled: bool) -> None:
    """The pricing pair, --compiled and --pipe-rates (``compiled``: the default)."""
    pricing = p.add_mutually_exclusive_group()
    pricing.add_argument(
        "--compiled",
        action="store_true",
        default=compiled,
        help="price each kernel the instruction census holds at this tiling (this project's "
        "CUDA kernels, and other implementations' where measured) by its compiled main loop, "
        "and a forward outside it by a written program (an mma.sync forward from the "
        "instruction mix of the compiled tilings, a wgmma forward from its description): the "
        "issue model, validated against the H200 (docs/validation.md); the others keep the "
        "pipe rates; the report says which priced each kernel"
        + (". This is the default" if compiled else ""),
    )
    pricing.add_argument(
        "--pipe-rates",
        action="store_false",
        dest="compiled",
        help="price every kernel at the pipe rates: one idealized model for all (times 2-3x "
        "below what the kernels run)"
        + (" (default: --compiled)" if compiled else " (the default)"),
    )
