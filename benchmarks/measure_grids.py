"""What ``benchmarks.gpu_measure --mode time`` measures: the validation grid of this project's
kernels and PyTorch's, and the held-out, unseen and tile-search tilings, each a generator of
(schedule name, shape, tiles) in measurement order."""

from __future__ import annotations

from flashio import kernels

SMS = 132  # H200 multiprocessors; (batch, heads) pairs below and above one CTA per SM at N=512
BATCH_HEADS = ((1, 8), (4, 16))
SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384)
# (head_dim, block_q, block_kv, warps) per schedule
FWD_TILES = {64: ((128, 128, 8), (64, 64, 4)), 128: ((128, 64, 8), (128, 128, 8))}
BWD_TILES = {64: ((64, 64, 4),), 128: ((64, 64, 4),)}
STD_TILES = {64: ((128, 128, 8),), 128: ((128, 64, 8),)}
STD_MAX_S_BYTES = 8 << 30  # standard attention only where S (and P) fit in 8 GiB each


def grid():
    """(schedule name, shape, tiles) in measurement order: small N first."""
    for n in SEQ_LENS:
        for d in (64, 128):
            for b, h in BATCH_HEADS:
                shape = kernels.AttentionShape(b, h, n, d, "bf16")
                for t in FWD_TILES[d]:
                    yield "flash2", shape, t
                yield "torch_fwd", shape, None
                for t in BWD_TILES[d]:
                    yield "flash2_bwd", shape, t
                yield "torch_bwd", shape, None
                if b * h * n * n * 2 <= STD_MAX_S_BYTES:
                    for t in STD_TILES[d]:
                        yield "standard", shape, t
    for n in (4096, 16384):  # causal and fp16 at the shapes the forward target is set on
        for shape in (
            kernels.AttentionShape(4, 16, n, 128, "bf16", causal=True),
            kernels.AttentionShape(4, 16, n, 128, "fp16"),
        ):
            yield "flash2", shape, FWD_TILES[128][0]
            yield "torch_fwd", shape, None


# Tilings of this project's kernels never timed before, for held-out checks of the model: the
# spill rule (simulator.issue.spills_fit_l1) predicts the reloads of the first five miss L1
# and those of the last two hit it; bf16, B x H = 1 x 16 and 4 x 16, N = 4096.
HELDOUT_TILES = (
    ("flash2", 128, (128, 128, 4)),
    ("flash2_bwd", 64, (128, 128, 4)),
    ("flash2_bwd", 128, (64, 128, 4)),
    ("flash2_bwd", 128, (128, 128, 8)),
    ("flash2_bwd", 128, (128, 128, 4)),
    ("flash2", 64, (128, 128, 4)),
    ("flash2", 128, (128, 64, 4)),
)


def heldout_grid():
    """(schedule name, shape, tiles) of HELDOUT_TILES."""
    for name, d, tiles in HELDOUT_TILES:
        for b, h in ((1, 16), (4, 16)):
            yield name, kernels.AttentionShape(b, h, 4096, d, "bf16"), tiles


# Forward tilings whose machine code the instruction census has never held, head dims 96 and
# 256 among them: the model prices them by written programs (simulator.synth_sync), and its
# predictions are committed before they run (benchmarks/unseen_predict.py,
# data/gpu/unseen/predicted.json).
UNSEEN_TILES = tuple(
    [(64, t) for t in ((128, 96, 8), (64, 96, 4), (96, 64, 6), (192, 64, 12), (128, 48, 8),
                       (64, 48, 4))]
    + [(128, t) for t in ((128, 96, 8), (64, 48, 4), (96, 64, 6), (128, 48, 8))]
    + [(96, t) for t in ((128, 64, 8), (64, 64, 4), (128, 32, 8))]
    + [(256, t) for t in ((64, 32, 4), (128, 32, 8))]
)  # fmt: skip
UNSEEN_SHAPES = ((4, 16, 4096), (1, 16, 16384))  # batch, heads, seq_len; bf16


def unseen_grid():
    """(schedule name, shape, tiles) of UNSEEN_TILES."""
    for d, tiles in UNSEEN_TILES:
        for b, h, n in UNSEEN_SHAPES:
            yield "flash2", kernels.AttentionShape(b, h, n, d, "bf16"), tiles


# The forward's tilings the instruction census holds (data/sass/flashio.json.gz; a test checks
# the list against it), at shapes none of them was timed at: the candidates `flashio tiling
# --search` prices by their compiled loops. The model's ranking is committed before they run
# (benchmarks/unseen_predict.py --grid search, data/gpu/search/predicted.json).
SEARCH_TILES = (
    (128, 128, 4), (128, 128, 8), (128, 64, 4), (128, 64, 8), (128, 32, 4), (128, 32, 8),
    (64, 128, 4), (64, 64, 4), (64, 32, 4),
)  # fmt: skip
SEARCH_SHAPES = ((1, 16, 16384, False), (1, 16, 16384, True), (2, 16, 2048, False))  # bf16


def search_grid():
    """(schedule name, shape, tiles) of SEARCH_TILES at head dims 64 and 128."""
    for d in (64, 128):
        for b, h, n, causal in SEARCH_SHAPES:
            for tiles in SEARCH_TILES:
                yield "flash2", kernels.AttentionShape(b, h, n, d, "bf16", causal=causal), tiles
