"""The Hopper kernels without a GPU: what their runner refuses, in words; that their sources
build for sm_90a without spills or serialized wgmma at every tiling the GPU tests run (where
NVRTC is installed: pip install nvidia-cuda-nvrtc; CI lacks it and skips those tests); that the
description of each build is what the source builds; and that the committed Nsight Compute
bytes of the forward's preset builds are the trace's plus the TMA box rows past N, and the
backward's the trace's."""

import re

import numpy as np
import pytest

from flashio import kernels
from flashio.kernels import gpu, hopper
from tests._util import trace_traffic
from tests.test_gpu_hopper import OVERLAPS, TILES

HOPPER = kernels.implementation("flashio-hopper")


def _sched(name="flash2", d=128, bq=128, bkv=128, warps=12, impl=HOPPER, **shape):
    sh = kernels.AttentionShape(1, 4, shape.pop("seq_len", 1000), d, shape.pop("dtype", "bf16"),
                                **shape)  # fmt: skip
    return kernels.Schedule(name, sh, bq, bkv, warps, impl=impl)


def test_the_preset_runs_on_the_hopper_kernel_and_nothing_else_does():
    assert hopper.uses_hopper(kernels.schedule("flash2", _sched().shape, impl="flashio-hopper"))
    assert not hopper.uses_hopper(kernels.schedule("flash2", _sched().shape))
    assert not hopper.uses_hopper(kernels.schedule("flash2", _sched().shape, impl="fa3"))
    assert hopper.hopper_errors(_sched()) == []


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"name": "flash1"}, "'flash2' and 'flash2_bwd'"),
        ({"name": "flash2_bwd", "bq": 128}, "the Hopper backward builds d=64: 128x128"),
        ({"name": "flash2_bwd", "bq": 64, "warps": 8}, "2 consumer warpgroups (64 keys"),
        ({"name": "flash2_bwd", "bq": 64, "causal": True, "window": 64}, "full and causal"),
        ({"warps": 8}, "one producer and 2 consumer warpgroups make 12 warps"),
        ({"bq": 96, "warps": 12}, "64 rows per consumer warpgroup"),
        ({"bkv": 96}, "block_kv=96"),
        ({"d": 96}, "head_dim=96"),
        ({"dtype": "fp32"}, "fp16 and bf16"),
        ({"window": 64, "causal": True}, "full and causal"),
        ({"d": 256, "bkv": 128}, "shared memory"),
        ({"bq": 192, "warps": 16}, "ping-pong"),
    ],
)
def test_what_the_kernel_cannot_run_is_said(kwargs, words):
    errs = hopper.hopper_errors(_sched(**kwargs))
    assert any(words in e for e in errs), errs
    with pytest.raises(ValueError, match="Hopper kernel"):
        gpu.compile_schedule(_sched(**kwargs))


def test_shared_memory_is_the_tiles_the_barriers_and_the_alignment_slack():
    # Q 128x128 and two buffers each of K and V 128x128, 2 bytes an element
    assert hopper.smem_bytes(128, 128, 128, 2) == 1024 + (128 + 4 * 128) * 128 * 2 + 8 * 10


def _nvrtc():
    from benchmarks import nvrtc

    if not nvrtc.available():
        pytest.skip("NVRTC is not installed (pip install nvidia-cuda-nvrtc)")
    return nvrtc


@pytest.mark.parametrize("persistent", [False, True], ids=["per-tile", "persistent"])
@pytest.mark.parametrize("overlap", OVERLAPS)
@pytest.mark.parametrize("tiles", TILES, ids=[f"d{d}-{bq}x{bkv}" for d, bq, bkv in TILES])
def test_builds_for_sm90a_without_spills_or_serialized_wgmma(overlap, tiles, persistent):
    nvrtc = _nvrtc()
    d, bq, bkv = tiles
    impl = hopper.description(bq, overlap, persistent=persistent)
    sched = _sched(d=d, bq=bq, bkv=bkv, warps=4 * (bq // 64 + 1), impl=impl)
    if hopper.hopper_errors(sched):
        pytest.skip("; ".join(hopper.hopper_errors(sched)))
    opts = (*hopper.compile_options(hopper.defines(sched)), *gpu.CUPY_NVRTC_OPTIONS)
    src = (gpu.CUDA_DIR / "hopper_fwd.cu").read_text()
    _, log = nvrtc.compile_cubin(src, (*opts, "--ptxas-options=-v"), "hopper_fwd.cu")
    assert " 0 bytes spill stores, 0 bytes spill loads" in log, log
    assert "serialized" not in log, log


def test_backward_shared_memory_is_its_tiles_rows_barriers_and_slack():
    # K and V 128x128, two Q and two dO buffers 64x128, two dS^T buffers 128x64 (2 bytes an
    # element); two L and two D rows of 64 fp32; 7 mbarriers
    tiles = (2 * 128 * 128 + 4 * 64 * 128 + 2 * 128 * 64) * 2
    assert hopper.bwd_smem_bytes(64, 128, 128) == 1024 + tiles + 4 * 64 * 4 + 8 * 7
    for d, bq, bkv in hopper.BWD_TILES:
        assert hopper.bwd_smem_bytes(bq, bkv, d) <= gpu.SMEM_OPTIN_BYTES


def test_the_backward_presets_are_builds_of_the_kernel():
    for d in (64, 128):
        sh = kernels.AttentionShape(1, 4, 1000, d, "bf16")
        sched = kernels.schedule("flash2_bwd", sh, impl="flashio-hopper")
        assert (d, sched.block_q, sched.block_kv) in hopper.BWD_TILES
        assert hopper.hopper_errors(sched) == []
        desc = hopper.bwd_description(sched.block_kv)
        assert desc.consumer_warpgroups == sched.block_kv // 64
        assert desc.softmax_overlap == "none"


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize(
    "tiles", hopper.BWD_TILES, ids=[f"d{d}-{bq}x{bkv}" for d, bq, bkv in hopper.BWD_TILES]
)
def test_backward_builds_for_sm90a_without_spills_or_serialized_wgmma(tiles, stages):
    """Each backward build fits its consumers' 240 registers (hopper_bwd.cu's setmaxnreg):
    the dK and dV accumulators, S^T and dP^T, and a dQ tile."""
    nvrtc = _nvrtc()
    d, bq, bkv = tiles
    impl = hopper.bwd_description(bkv, stages)
    sched = _sched("flash2_bwd", d=d, bq=bq, bkv=bkv, warps=4 * (bkv // 64 + 1), impl=impl)
    assert dict(hopper.defines(sched))["STAGES"] == stages
    assert hopper.hopper_errors(sched) == []
    opts = (*hopper.compile_options(hopper.defines(sched)), *gpu.CUPY_NVRTC_OPTIONS)
    src = (gpu.CUDA_DIR / "hopper_bwd.cu").read_text()
    _, log = nvrtc.compile_cubin(src, (*opts, "--ptxas-options=-v"), "hopper_bwd.cu")
    assert " 0 bytes spill stores, 0 bytes spill loads" in log, log
    assert "serialized" not in log, log
    src_regs = re.search(r"CONSUMER_REGS = (\d+);", src).group(1)
    assert int(src_regs) == hopper.bwd_description(bkv).register_budget


def _rows_past_n(sched) -> int:
    """Rows the Hopper kernel's TMA boxes read past N (zeros the copy moves across the
    crossbar), from the kernel's loop bounds: each CTA's Q box, and the K and V boxes of the
    last key block it visits (hopper_fwd.cu: nblocks, causal up to its last row)."""
    n, bq, bkv = sched.shape.seq_len, sched.block_q, sched.block_kv
    tr, tc = -(-n // bq), -(-n // bkv)
    past = 0
    for i in range(tr):
        past += (i + 1) * bq - min(n, (i + 1) * bq)
        last_q = min(n, (i + 1) * bq) - 1
        blocks = min(tc, last_q // bkv + 1) if sched.shape.causal else tc
        if blocks == tc:
            past += 2 * (tc * bkv - n)  # K and V
    return past * sched.shape.heads * sched.shape.batch


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_nsight_compute_bytes_are_the_trace_and_the_box_rows_past_n(d, causal):
    """data/gpu/hopper/ncu: one launch of each preset build at N = 4096, H = 16 (d = 64:
    128 x 128, d = 128: 128 x 176). The SM side moves exactly the trace's global bytes plus
    the TMA box rows past N (docs/gpu.md, "The Hopper forward"): two independent counts, the
    replayed trace and the kernel's loop bounds."""
    from flashio.analysis.paths import DATA
    from flashio.analysis.validation.gpu_data import parse_ncu_csv

    sh = kernels.AttentionShape(1, 16, 4096, d, "bf16", causal=causal)
    sched = kernels.schedule("flash2", sh, impl="flashio-hopper")
    path = DATA / "gpu" / "hopper" / "ncu" / f"ncu_{d}_4096_{int(causal)}.csv"
    (launch,) = parse_ncu_csv(path.read_text())
    m = launch["metrics"]
    reads = m["l1tex__m_xbar2l1tex_read_bytes.sum"]
    writes = m["l1tex__m_l1tex2xbar_write_bytes.sum"]
    traffic = trace_traffic(sched)
    assert writes == sum(w for _, w in traffic.values())  # O and L, whole rows
    assert reads == sum(r for r, _ in traffic.values()) + _rows_past_n(sched) * d * 2


def test_the_forward_presets_are_the_fastest_measured_builds():
    """data/gpu/hopper/hopper_measure.json times every build and, as "hopper preset", the build
    the preset table picks at that shape. From N = 4k (kernels of 0.1 ms and more) the
    preset's build (the better of its two rows) is the fastest measured there, within the
    run's own repeat spread: the largest gap between the preset's row and the row of the same
    build, timed twice."""
    import json

    from flashio.analysis.paths import DATA
    from flashio.analysis.validation.family_rows import PRESET_LABEL

    rows = json.loads((DATA / "gpu" / "hopper" / "hopper_measure.json").read_text())["rows"]
    shapes = {(r["head_dim"], r["causal"], r["seq_len"]) for r in rows if r["seq_len"] >= 4096}
    spread, gaps = 0.0, {}
    for d, causal, n in sorted(shapes):
        at = [r for r in rows if (r["head_dim"], r["causal"], r["seq_len"]) == (d, causal, n)]
        builds = [r for r in at if r["kernel"].startswith("hopper ")]
        (preset,) = [r for r in builds if r["kernel"] == PRESET_LABEL]
        sh = kernels.AttentionShape(1, 16, n, d, "bf16", causal=causal)
        sched = kernels.schedule("flash2", sh, impl="flashio-hopper")
        overlap = sched.impl.specialize("flash2", sh).softmax_overlap
        build = (sched.block_q, sched.block_kv, overlap)
        assert (preset["block_q"], preset["block_kv"], preset["softmax_overlap"]) == build
        twin = [r for r in builds if r is not preset and r["stages"] == preset["stages"]
                and r["persistent"] == preset["persistent"]
                and (r["block_q"], r["block_kv"], r["softmax_overlap"]) == build]  # fmt: skip
        assert len(twin) == 1, (d, causal, n)
        spread = max(spread, abs(twin[0]["median_s"] / preset["median_s"] - 1))
        fastest = min(r["median_s"] for r in builds)
        gaps[(d, causal, n)] = min(preset["median_s"], twin[0]["median_s"]) / fastest - 1
    assert max(gaps.values()) <= spread, (gaps, spread)


@pytest.mark.parametrize("block_q", [64, 128, 192])
def test_description_is_the_build(block_q):
    """``hopper.description`` says what hopper_fwd.cu builds for ``block_q`` rows: its consumer
    warpgroups, and the registers its setmaxnreg gives consumers and producer (read from the
    source's constants), and no tiling row that would override them."""
    src = (gpu.CUDA_DIR / "hopper_fwd.cu").read_text()
    consumers = block_q // 64
    regs = {}
    for name in ("PRODUCER_REGS", "CONSUMER_REGS"):
        line = next(ln for ln in src.splitlines() if ln.startswith(f"constexpr int {name} ="))
        three, other = (int(x) for x in re.findall(r"\? (\d+) : (\d+)", line)[0])
        regs[name] = three if consumers == 3 else other
    impl = hopper.description(block_q, "none")
    assert impl.consumer_warpgroups == consumers and impl.producer_warps == 4
    assert impl.register_budget == regs["CONSUMER_REGS"]
    assert impl.producer_register_budget == regs["PRODUCER_REGS"]
    assert impl.softmax_overlap == "none" and all(not t.overrides for t in impl.tilings)
    assert all(t.block_q == block_q and t.warps == 4 * (consumers + 1) for t in impl.tilings)


@pytest.mark.parametrize(("d", "causal"), [(64, False), (64, True), (128, False), (128, True)])
def test_nsight_compute_bytes_of_the_backward_are_the_trace(d, causal):
    """data/gpu/hopper/ncu_bwd: one launch of the backward's main kernel (hopper_bwd.cu, the
    preset tiling) at N = 4096, H = 16. The SM side writes exactly the trace's dK, dV and dQ
    reductions, and reads the trace's bytes but for L1 hits of L_i and D_i, the only reads
    that are ordinary loads (Q, dO, K and V come by TMA, which L1 does not serve)."""
    from flashio.analysis.paths import DATA
    from flashio.analysis.validation.gpu_data import parse_ncu_csv
    from flashio.simulator import Op

    sh = kernels.AttentionShape(1, 16, 4096, d, "bf16", causal=causal)
    sched = kernels.schedule("flash2_bwd", sh, impl="flashio-hopper")
    path = DATA / "gpu" / "hopper" / "ncu_bwd" / f"ncu_bwd_{d}_4096_{int(causal)}.csv"
    (launch,) = parse_ncu_csv(path.read_text())
    m = launch["metrics"]
    ev = sched.trace().events
    main = ev[ev["kernel"] == 1]
    names = [t.name for t in sched.tensors]
    loads = main[main["op"] == Op.LOAD]
    rows = loads[np.isin(loads["tensor"], [names.index("L"), names.index("D")])]
    written = main[(main["op"] == Op.STORE) | (main["op"] == Op.REDUCE)]
    assert m["l1tex__m_l1tex2xbar_write_bytes.sum"] == written["bytes"].sum()
    reads = m["l1tex__m_xbar2l1tex_read_bytes.sum"]
    assert loads["bytes"].sum() - rows["bytes"].sum() <= reads <= loads["bytes"].sum()
