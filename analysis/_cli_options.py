"""The options every ``flashio`` verb shares, declared once: the attention shape, the tiling and
the GPU, with one set of defaults, and one list syntax (``--seq-len 1024 2048`` and
``--seq-len 1024,2048`` are the same list)."""

from __future__ import annotations

import argparse
import importlib.metadata
import tomllib
from pathlib import Path

import kernels
from kernels.schedules import DEFAULT_WARPS

# Every verb's default GPU: the validation H200 as its microbenchmarks measured it
# (simulator/specs/h200-measured.toml, which docs/validation.md checks); "h200": its datasheet.
DEFAULT_GPU = "h200-measured"
# The one default shape (DESIGN.md's example); a sweep's lists default to several lengths
SHAPE_DEFAULTS = {"batch": 1, "heads": 16, "seq_len": 4096, "head_dim": 64, "dtype": "fp16"}


def version() -> str:
    """flashio's version: the installed package's, else the checkout's pyproject.toml's."""
    try:
        return importlib.metadata.version("flashio")
    except importlib.metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        return tomllib.loads(pyproject.read_text())["project"]["version"]


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


def add_shape(p: argparse.ArgumentParser, lists: bool = False) -> None:
    """--batch, --heads, --kv-heads, --seq-len, --head-dim, --dtype, --causal; with ``lists``
    --seq-len and --head-dim take several values (a sweep)."""
    d = SHAPE_DEFAULTS
    g = p.add_argument_group("attention shape")
    g.add_argument(
        "--batch", type=int, default=d["batch"], help=f"batch size (default {d['batch']})"
    )
    g.add_argument(
        "--heads", type=int, default=d["heads"], help=f"query heads (default {d['heads']})"
    )
    g.add_argument(
        "--kv-heads", type=int, default=None, help="key/value heads (GQA; default = heads)"
    )
    if lists:
        g.add_argument(
            "--seq-len", type=listed(int), nargs="+", default=[(1024, 2048, 4096)],
            metavar="N", help="sequence lengths (default 1024 2048 4096)",
        )  # fmt: skip
        g.add_argument(
            "--head-dim", type=listed(int), nargs="+", default=[(d["head_dim"],)],
            metavar="D", help=f"head dimensions (default {d['head_dim']})",
        )  # fmt: skip
    else:
        g.add_argument(
            "--seq-len", type=int, default=d["seq_len"],
            help=f"sequence length N (default {d['seq_len']})",
        )  # fmt: skip
        g.add_argument(
            "--head-dim", type=int, default=d["head_dim"],
            help=f"head dimension d (default {d['head_dim']})",
        )  # fmt: skip
    g.add_argument(
        "--dtype", default=d["dtype"], choices=sorted(kernels.DTYPES),
        help=f"element type (default {d['dtype']})",
    )  # fmt: skip
    g.add_argument("--causal", action="store_true", help="causal mask (default: full attention)")


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
