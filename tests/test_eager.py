"""Standard attention as eager PyTorch runs it (``unfused=1``, kernels/_standard_unfused.py)
and the census of its kernels' machine code.

The path ``simulator.sass_paths.taken_path`` walks through each kernel is checked against the
instructions Nsight Compute counted per warp when the kernel ran (data/impl/eager/
eager_ncu.csv.gz, data/gpu/runs/eager_run.sh): two independent counts of the same thing.
The trace's bytes against the closed form and the executor against float64 are the property
tests of every schedule (analysis.strategies draws ``unfused``)."""

import csv
import dataclasses
import gzip
import io
import json
from collections import defaultdict

import numpy as np
import pytest

from flashio import kernels, simulator
from flashio.analysis.paths import DATA
from flashio.kernels._standard_unfused import softmax_launch
from flashio.simulator import issue, sass, sass_paths
from flashio.simulator.simulate import ModelOptions

EAGER = DATA / "impl" / "eager"


def _ncu_instructions_per_warp() -> dict[str, list[float]]:
    """Nsight's executed instructions per warp of each profiled launch, by kernel name."""
    lines = [ln for ln in gzip.open(EAGER / "eager_ncu.csv.gz", "rt") if ln.startswith('"')]
    metrics = defaultdict(dict)
    for r in csv.DictReader(io.StringIO("".join(lines))):
        value = float(r["Metric Value"].replace(",", ""))
        metrics[(r["ID"], r["Kernel Name"])][r["Metric Name"]] = value
    out = defaultdict(list)
    for (_, name), m in metrics.items():
        out[name].append(m["smsp__inst_executed.sum"] / m["smsp__warps_launched.sum"])
    return out


# census key -> a substring of Nsight Compute's name for the kernel
NAMES = {
    "scale bf16": "vectorized_elementwise_kernel<8, at::AUnaryFunctor",
    "masked_fill bf16": "masked_fill_kernel",
    "row_softmax warp log2=10 bf16": "float, 10, 0, 0>",
    "row_softmax warp log2=11 bf16": "float, 11, 0, 0>",
    "row_softmax block ilp=4 bf16": "long, 4>",
    "row_softmax block ilp=8 bf16": "long, 8>",
}


def test_taken_paths_are_the_instructions_the_gpu_executed():
    """The elementwise kernels and the warp softmax: exactly Nsight's count per warp. The
    block softmax: the path is warp 0's, which alone runs the second level of each block
    reduction; the other 31 warps skip it, so the GPU's mean per warp is the path less about
    31/32 of that part (28 of 647 and of 346 instructions). Causal rows take more than the
    path (ilp=4 at N = 4096: 386 a warp against 318 without the mask; exponentials of -inf
    branch off the fast path), which the census does not follow (docs/model.md)."""
    census = issue.census("pytorch")
    ncu = _ncu_instructions_per_warp()
    for key, pattern in NAMES.items():
        path = len(census[key]["class"])
        counts = sorted({c for name, cs in ncu.items() if pattern in name for c in cs})
        if "block" in key:
            assert 0 < path - counts[0] < 32, (key, path, counts)
            assert counts[1:] in ([], [386.4345703125]), (key, counts)  # ilp=4's causal run
        else:
            assert counts == [path], (key, path, counts)


def test_taken_path_refuses_loops_and_follows_known_parameters():
    listing = json.load(gzip.open(EAGER / "eager_sass.json.gz", "rt"))["kernels"]
    (fill,) = [k for name, k in listing.items() if "masked_fill" in name]
    code = next(iter(sass.parse(fill["sass"]).values()))
    # OffsetCalculator's loop over dims, unrolled to 25: each further dim costs instructions
    lengths = [len(sass_paths.taken_path(code, {0x218: d})) for d in (1, 2, 3)]
    assert lengths[0] < lengths[1] < lengths[2]
    assert len(sass_paths.taken_path(code)) > lengths[2]  # unknown dims: every unrolled step
    flash = next(iter(sass.parse(_flash_listing()).values()))
    with pytest.raises(simulator.FlashioError, match=r"loop|call"):
        sass_paths.taken_path(flash)


def _flash_listing() -> str:
    index = json.loads((DATA / "impl" / "sass" / "torch_sass_index.json").read_text())
    entry = next(e for e in index["torch_flash"] if e["signature"]["kernel"] == "flash_fwd_kernel")
    return gzip.open(DATA / "impl" / "sass" / entry["file"], "rt").read()


@pytest.mark.parametrize(
    ("n", "rows", "warps", "key"),
    [
        (1024, 4, 4, "row_softmax warp log2=10 bf16"),
        (2048, 4, 4, "row_softmax warp log2=11 bf16"),
        (4096, 1, 32, "row_softmax block ilp=4 bf16"),
        (8192, 1, 32, "row_softmax block ilp=8 bf16"),
    ],
)
def test_row_softmax_launch_follows_pytorch_dispatch(n, rows, warps, key):
    """The launches the profiler recorded (data/impl/impl_measure.json: 128 threads at 1k and
    2k, 1024 at 4k and 8k) and the census entry each row length is priced by."""
    assert softmax_launch(n, 2) == (rows, warps)
    params = {"seq_len": n, "dtype": "bf16"}
    assert issue.eager_key("row_softmax", warps, params) == key
    assert key in issue.census("pytorch")


def test_pytorch_preset_runs_standard_unfused():
    causal = kernels.AttentionShape(1, 16, 1024, 64, "bf16", causal=True)
    s = kernels.schedule("standard", causal, impl="pytorch")
    assert dict(s.options)["unfused"] == 1
    assert [k.name for k in s.kernels] == ["qk", "scale", "masked_fill", "row_softmax", "pv"]
    full = kernels.schedule("standard", dataclasses.replace(causal, causal=False), impl="pytorch")
    assert [k.name for k in full.kernels] == ["qk", "scale", "row_softmax", "pv"]
    fused = kernels.schedule("standard", causal, impl="pytorch", unfused=0)
    assert [k.name for k in fused.kernels] == ["qk", "softmax", "pv"]
    # the extra passes over S: scale reads and writes it, masked_fill too (and the mask)
    nn = 16 * 1024 * 1024 * 2
    by = {t.name: t for t in simulator.simulate(s, "h200").tensors}
    assert (by["S"].global_read_bytes, by["S"].global_write_bytes) == (3 * nn, 3 * nn)
    assert by["mask"].global_read_bytes == nn // 2
    with pytest.raises(kernels.TilingError, match="unfused must be 0 or 1"):
        kernels.schedule("standard", causal, unfused=2)


def test_eager_kernels_priced_by_their_census_entries():
    sh = kernels.AttentionShape(1, 16, 4096, 64, "bf16", causal=True)
    res = simulator.simulate(
        kernels.schedule("standard", sh, impl="pytorch"), "h200-measured",
        options=ModelOptions(issue_model=True),
    )  # fmt: skip
    keys = {k.name: k.census_key for k in res.kernels}
    assert keys["scale"] == "scale bf16" and keys["masked_fill"] == "masked_fill bf16"
    assert keys["row_softmax"] == "row_softmax block ilp=4 bf16"
    assert np.isfinite(res.time_s) and res.time_s > 0


def test_streaming_loads_wait_for_hbm():
    """Eager kernels read each score once: their replayed loads wait the HBM's latency, which
    masked_fill (four dependent round trips a thread) feels most."""
    gpu = simulator.load_gpu("h200-measured")
    assert all(entry["streams"] for entry in issue.census("pytorch").values())
    params = {"impl": "pytorch", "dtype": "bf16", "seq_len": 4096}
    comp = issue.lookup(params, "masked_fill", 4)
    assert comp is not None and comp.streams
    l2 = issue.step_costs(gpu, comp.key, 4, 16, "pytorch")
    hbm = issue.step_costs(gpu, comp.key, 4, 16, "pytorch", streams=True)
    assert gpu.hbm_latency_cycles > gpu.l2_latency_cycles
    assert hbm.occupancy_s > 1.2 * l2.occupancy_s
