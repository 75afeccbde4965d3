"""The time model against other implementations' kernels it was never fitted to.

The bounds are the achieved values of docs/validation.md ("By implementation"), rounded up to
the next percent: the simulation is deterministic (the same events, float64 arithmetic in a
fixed order, the replay in whole cycles), so they hold on any machine, and they catch a model
change that makes these predictions worse.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from flashio.analysis.validation import families, kernel_clock
from flashio.kernels import AttentionShape


@pytest.fixture(scope="module")
def fa2():
    return families.report(families=("flash-attn2",))


def test_flash_attn2_forward_and_backward_within_their_bounds(fa2):
    fwd = fa2["summary"]["flash-attn2 flash2"]
    bwd = fa2["summary"]["flash-attn2 flash2_bwd"]
    assert fwd["n"] == 20 and bwd["n"] == 20
    # achieved: forward 8.9% (max 20.6%; 9.4% without CTA drift), nearly every row too fast;
    # backward 5.0% (max 9.4%),
    # every row too slow: 1.6% before the loop's L and D loads stopped waiting the L2 twice
    # and the reductions took the SM's measured rate, two errors that had cancelled
    # (docs/model.md, "Reductions"); 4.8% before FFMA took one cycle and the interference
    # rates were refitted so (docs/model.md, "FFMA's cost beside wgmma is the FMA pipe's")
    assert fwd["mape"] <= 0.10 and fwd["max_error"] <= 0.21
    assert bwd["mape"] <= 0.06 and bwd["max_error"] <= 0.10


def test_rows_say_what_was_compared(fa2):
    for r in fa2["rows"]:
        assert r["family"] == "flash-attn2"
        assert r["error"] == pytest.approx(r["predicted_s"] / r["measured_s"] - 1)
    assert set(fa2["not_modelled"]) == {"flex", "torch_cudnn"}
    assert "flash-attn2 flash2 | 20 |" in families.markdown(fa2)


@pytest.fixture(scope="module")
def triton():
    return families.report(families=("triton",))


def test_triton_tilings_are_ranked_and_the_first_choice_is_near_the_best(triton):
    """Five Triton tilings for each of 20 shapes (d = 64 and 128, N = 1k..16k, causal and
    not): the model's ranking against the measured one, and the measured cost of taking its
    first choice."""
    rk = triton["ranking"]
    assert len(rk) == 20 and all(r["tilings"] == 5 for r in rk)
    rho = [r["spearman"] for r in rk]
    # achieved: mean 0.86, lowest 0.60 (0.855 and 0.50 with the 2-stage tiling's copies issued
    # where the trace has them, not at its P V product; 0.860 before the block scheduler's
    # turnaround, which
    # moved the causal d = 64 shapes at N = 8192 and 16384 from 0.9 and 0.8 to 0.7, three of
    # their five tilings measured within 2.2% of each other; 0.875 and 0.70 without CTA
    # drift, which reorders two tilings' near ties at N = 4096 and 16384, d = 64); the first
    # choice is
    # within 5% of the best for all 20 shapes, 3.8% slower at worst (with read barriers of 14
    # cycles on every class, not only MUFU's, 16 of 20: the d = 64 picks went to 128x64
    # with 8 warps, 8-14% slower). The 2-stage tiling's loads are issued at its P V product,
    # not a step ahead (its loop waits for them before any wgmma issued after them): a step
    # ahead it was predicted 16-27% too fast and picked, 30% slower than the best
    assert sum(rho) / len(rho) >= 0.85 and min(rho) >= 0.5
    picked = [r["picked_slower_than_best"] for r in rk]
    assert sum(p <= 0.05 for p in picked) == 20 and max(picked) <= 0.04
    for r in rk:  # a ranking of n tilings: Spearman in [-1, 1], the pick one of them
        assert -1 <= r["spearman"] <= 1 and r["tilings"] >= 3


def test_hopper_native_cudnn_forward_from_its_description():
    """cuDNN's forward (wgmma, TMA, warp specialized; its machine code unknown here) against
    the fa3 description at cuDNN's tiling, the consumer warps' program written by
    simulator.synth: achieved 3.4% (max 7.6%; 3.3% and 6.6% before its tiles' copies were
    priced as bulk copies, docs/model.md "Bulk copies"; 7.5% and 14.5% before FFMA took one
    cycle and its rate beside wgmma was fitted on the FFMA warpgroup's span)."""
    rep = families.report(families=("cudnn",))
    s = rep["summary"]["cudnn flash2"]
    assert s["n"] == 20 and s["mape"] <= 0.04 and s["max_error"] <= 0.08
    keys = {r["label"] for r in rep["rows"]}
    assert all("128x128 w12" in k for k in keys)
    assert rep["not_modelled"]["torch_cudnn"] == 20  # the backward


def test_flashio_rows_include_the_held_out_tilings():
    """This project's rows are both timing runs: the validation grid and the held-out tilings
    (data/gpu/heldout), e.g. the d = 128 forward at 128x128 with 4 warps, timed only there."""
    ms, _ = families.measurements(families=("flashio",))
    tiles = {(m.schedule, m.shape.head_dim, m.block_q, m.block_kv, m.warps) for m in ms}
    assert ("flash2", 128, 128, 128, 4) in tiles and ("flash2", 128, 128, 64, 8) in tiles
    assert all(m.family == "flashio" and m.harness for m in ms)


def test_forwards_priced_by_written_programs(fa2, triton):
    """Every forward the census holds code of, priced instead by the program the issue model
    writes for a tiling it has no code of, each written without its own tiling's code.
    Achieved: flash-attn 2 9.3% (max 18.0%; 8.0% and 15.9% without CTA drift): its kernels'
    own code never enters, the program
    takes the mix of this project's compiled tilings; Triton 34.5%, every row too fast: a
    wgmma forward is written from the FlashAttention-3 description (two consumer warpgroups
    overlapping softmax and products), which Triton's loop does not do."""
    w = fa2["written"]["flash-attn2 flash2"]
    assert w["n"] == 20 and w["mape"] <= 0.094 and w["max_error"] <= 0.18
    t = triton["written"]["triton flash2"]
    assert t["n"] == 100 and t["bias"] < 0 and t["mape"] <= 0.37
    assert "Forwards priced by written programs" in families.markdown(fa2)


@pytest.fixture(scope="module")
def flashio_rep():
    return families.report(families=("flashio",), jobs=2)


def test_flashio_forwards_priced_by_written_programs(flashio_rep):
    """This project's forwards, each tiling's program written from the other compiled
    tilings' mix, occupancy from the program's register line (103 rows of compiled tilings,
    54 of them the search grid's, data/gpu/search, and the 30 of tilings never compiled,
    data/gpu/unseen). Achieved 10.6% (max 56.4%): 128-row tiles with 8 warps that keep their
    registers within 5%, the tilings the compiler spills (d = 128 at 128x128; 4 warps at
    128-row tiles) 15-58% too fast, as the written program keeps every register
    (docs/model.md); 9.6% over the 79 rows before the search grid, whose nine tilings
    include every spilling one."""
    w = flashio_rep["written"]["flashio flash2"]
    assert w["n"] == 133 and w["mape"] <= 0.11 and w["bias"] < 0


SEARCH = Path("data/gpu/search")


def _search_shapes(rows, time_of):
    """Per shape of the search grid: the tilings (block_q, block_kv, warps) and a time."""
    out: dict[tuple, dict] = {}
    for r in rows:
        sh = r.get("shape", r)
        key = (sh["batch"], sh["seq_len"], sh["head_dim"], sh["causal"])
        tiles = tuple(r["tiles"]) if "tiles" in r else (r["block_q"], r["block_kv"], r["warps"])
        out.setdefault(key, {})[tiles] = time_of(r)
    return out


def test_compiled_tile_search_as_predicted_before_the_gpu_ran_it(flashio_rep):
    """The nine forward tilings the census holds at six shapes none had been timed at (d = 64
    and 128; 1 x 16 x 16384, causal and not, and 2 x 16 x 2048; data/gpu/search), the
    model's times committed before the GPU ran them (predicted.json): at every shape its
    first choice, 128x64 with 4 warps, ran fastest, and its order of the nine had a Spearman
    correlation of 0.83 to 0.95 with the measured one. The model as it is now picks the
    fastest at all six of these shapes (with the tilings of data/gpu/unseen where they share
    one; five before reads waited for fills in flight, when at 1 x 16 x 16384, d = 64 it put
    128x32 with 4 warps 0.4% ahead of 128x64 with 4 warps, which runs 5.2% faster). It ranks
    the d = 128 ones at 0.90 or more; the d = 64 ones, whose tilings lie closer together, at
    0.65 to 0.87 (0.70 to 0.87 before the block scheduler's turnaround, which moved the
    causal N = 16384 shape from 0.70 to 0.65; 0.63 to 0.80 before pending fills; 0.80 to
    0.83 before FFMA took one cycle and the interference rates were refitted so:
    docs/model.md)."""
    measured = _search_shapes(
        json.loads((SEARCH / "gpu_measure.json").read_text())["results"],
        lambda r: r["median_ms"],
    )
    predicted = _search_shapes(
        json.loads((SEARCH / "predicted.json").read_text())["rows"], lambda r: r["predicted_ms"]
    )
    assert len(measured) == 6 and measured.keys() == predicted.keys()
    for key, meas in measured.items():
        pred = predicted[key]
        assert len(meas) == 9 and meas.keys() == pred.keys()
        tiles = list(meas)
        m_rank = np.argsort(np.argsort([meas[t] for t in tiles]))
        p_rank = np.argsort(np.argsort([pred[t] for t in tiles]))
        rho = 1 - 6 * float(((m_rank - p_rank) ** 2).sum()) / (9 * 80)
        assert rho >= 0.83, key
        assert min(pred, key=pred.get) == min(meas, key=meas.get) == (128, 64, 4), key
    ranked = {
        (
            r["shape"]["batch"],
            r["shape"]["seq_len"],
            r["shape"]["head_dim"],
            r["shape"]["causal"],
        ): r
        for r in flashio_rep["ranking"]
        if r["schedule"] == "flash2"
    }
    picked = {key: ranked[key]["picked_slower_than_best"] for key in measured}
    assert all(p == 0 for p in picked.values())
    for key in measured:
        assert ranked[key]["spearman"] >= (0.9 if key[2] == 128 else 0.65), key


@pytest.fixture(scope="module")
def hopper_rep():
    return families.report(families=("flashio-hopper",), jobs=2)


def test_hopper_forward_of_this_project_from_its_compiled_code(hopper_rep):
    """This project's Hopper forward (kernels/cuda/hopper_fwd.cu), timed beside PyTorch's kernels
    (data/gpu/hopper), each build (tiling, softmax overlap) priced by its consumer warps'
    compiled loop (data/sass/flashio-hopper.json.gz). Achieved over the 120 builds launched
    with a CTA per tile: 11.9%, 11.7% too fast on average (max 24.2%, the 20-40-us launches at
    N = 1k and 2k; within 18.7% at N >= 8k): the steps within -13% to +8% of the GPU's
    (test_kernel_clock), a CTA's fixed cost short still (docs/model.md, "A CTA's fixed cost").
    With the 30 persistent builds' rows (a CTA per SM taking every grid-th tile:
    test_hopper_persistent_grids_follow_their_static_tile_scheduler): 12.3% over 150, 12.2%
    too fast, within 19.1% at N >= 8k. Before the block scheduler's turnaround (384 ns
    between a slot's CTAs), the 120: 12.4%, 12.2% too fast, max 25.0%, within 19.3% at N >=
    8k. Before its copies were priced as bulk copies (docs/model.md, "Bulk copies"): 13.5%,
    13.4% too fast, max 26.7%, within 20.1% at N >= 8k. The model's pick among the d = 128
    builds is the best at the causal shapes (0.5% slower at N = 1k); without a mask at N >= 2k
    it picks the persistent build, which it prices 0.2-0.7% faster than its build with a CTA a tile
    (the turnaround it saves) and the GPU ran 1.6-5.8% slower (before the persistent rows
    were priced: the best at 9 of 10 shapes, 2.3% slower at the tenth). Among the d = 64
    builds, where the GPU runs the builds without overlap fastest, it picks one without
    overlap at every shape, at most 6.6% slower than the best (N = 8k: 128x128 without
    overlap, whose persistent build the GPU ran 5.5% slower; 0.6-2.9% before the persistent
    rows). (With the warpgroups of the builds without overlap started together: 9.7%, 8.9%
    too fast, the d = 64 picks builds with both overlaps, 3-13% slower: docs/model.md,
    "Warpgroups started apart". With FFMA beside another warp's wgmma at the rate fitted on a
    dense stream's CTA time, before: 6.8%, the d = 128 builds with both overlaps 7-17% too
    slow.) Priced instead by the program simulator.synth writes from the description
    (written programs): 11.2%, 10.9% too fast on average over the 150."""
    rep = hopper_rep
    assert "flashio-hopper persistent" not in rep["not_modelled"]
    s = rep["summary"]["flashio-hopper flash2"]
    assert s["n"] == 150 and s["mape"] <= 0.125 and s["bias"] < -0.11
    fwd = [r for r in rep["rows"] if r["schedule"] == "flash2"]
    per_tile = [r for r in fwd if not r["label"].endswith("persistent")]
    errors = np.array([r["error"] for r in per_tile])
    assert len(per_tile) == 120 and np.abs(errors).mean() <= 0.12 and errors.mean() < -0.11
    big = [r for r in fwd if "N=8192" in r["label"] or "N=16384" in r["label"]]
    assert len(big) == 60 and all(abs(r["error"]) <= 0.195 for r in big)
    ranked = [r for r in rep["ranking"] if r["schedule"] == "flash2"]
    d128 = [r for r in ranked if r["shape"]["head_dim"] == 128]
    assert len(d128) == 10 and all(r["picked_slower_than_best"] <= 0.06 for r in d128)
    causal = [r for r in d128 if r["shape"]["causal"]]
    assert all(r["picked_slower_than_best"] <= 0.006 for r in causal)
    d64 = [r for r in ranked if r["shape"]["head_dim"] == 64]
    assert len(d64) == 10 and all(r["picked_slower_than_best"] <= 0.07 for r in d64)
    assert all(r["picked"][3] == "none" for r in d64)
    w = rep["written"]["flashio-hopper flash2"]
    assert w["n"] == 150 and w["mape"] <= 0.15 and w["bias"] < 0


def test_hopper_persistent_grids_follow_their_static_tile_scheduler(hopper_rep):
    """The persistent builds of the Hopper forward (``hopper.description(...,
    persistent=True)``: a CTA per SM taking tiles p, p + 132, ...) against the same builds
    launched with a CTA per tile, measured in one run (data/gpu/hopper/hopper_measure.json).
    Causal, the static scheduler leaves the grid as long as its busiest CTA: the GPU took
    1.22-1.54x the time of a CTA a tile at N >= 4k with 128-row tiles (1.08-1.42x with 192-row
    ones), and the replay, which gives slot p every 132nd CTA (docs/model.md, "Kernels, CTAs
    and occupancy"), follows each ratio within 7% (before, it handed the tiles to the first
    slot free and priced each persistent build as its build with a CTA a tile, less the
    turnaround). Without a mask the GPU ran the persistent builds from 3.7% faster to 7.3%
    slower (at d = 64 their loops' code is the same to within 5 of 490 instructions) and the
    replay within 1%: that 7.3% is the largest difference between persistent and not that
    the model does not explain, and the bound on each ratio (7.5%)."""
    rep = hopper_rep
    rows = {r["label"]: r for r in rep["rows"] if r["schedule"] == "flash2"}
    suffix = " persistent"
    pairs = [(r, rows[k[: -len(suffix)]]) for k, r in rows.items() if k.endswith(suffix)]
    assert len(pairs) == 30
    for persistent, per_tile in pairs:
        measured = persistent["measured_s"] / per_tile["measured_s"]
        predicted = persistent["predicted_s"] / per_tile["predicted_s"]
        assert predicted == pytest.approx(measured, rel=0.075), persistent["label"]
    imbalanced = [p for p, t in pairs if p["measured_s"] / t["measured_s"] > 1.3]
    assert len(imbalanced) == 7 and all("causal" in p["label"] for p in imbalanced)


def test_hopper_persistent_builds_cycles_alone(hopper_rep):
    """The same persistent builds and their builds with a CTA a tile, each launched alone under
    Nsight Compute (data/gpu/probe/hopper_persistent_*: an H100 SXM, whose SMs and L2 are the
    H200's): cycles, free of the power limit that the timings mix in. With 192-row tiles the
    replay's persistent/CTA-a-tile ratio is within 6% of the cycles' (causal 1.11-1.49x at
    N >= 2048). With 128-row tiles the persistent builds take 6.6-8.2% more cycles than their
    twins without a mask at N >= 4096, which the replay does not have (their loops' code is the
    same to within 5 instructions; the cause is not known), so its causal ratios there are
    4-12% under the cycles' (1.44x against 1.62x at d = 64, N = 16384)."""
    cycles = kernel_clock.gpu_cycles("hopper_persistent")
    assert len(cycles) == 60
    predicted = {r["label"]: r["predicted_s"] for r in hopper_rep["rows"]}
    twins = {}
    for c in cycles:
        key = (c["block_q"], c["block_kv"], c["head_dim"], c["causal"], c["seq_len"])
        twins.setdefault(key, {})[c["persistent"]] = c["cycles"]
    assert len(twins) == 30
    for (bq, bkv, d, causal, n), pair in twins.items():
        shape = AttentionShape(1, 16, n, d, "bf16", causal=causal)
        warps, overlap = 4 * (bq // 64 + 1), "none" if d == 64 else "both"
        twin = [
            families.Measured("flashio-hopper", "flash2", shape, bq, bkv, warps, 0.0, False,
                              overlap, persistent=p).label
            for p in (False, True)
        ]  # fmt: skip
        label = twin[0]
        model = predicted[twin[1]] / predicted[twin[0]]
        gpu = pair[True] / pair[False]
        if bq == 192:
            assert model == pytest.approx(gpu, rel=0.06), label
        elif n >= 4096 and not causal:
            assert 1.06 <= gpu <= 1.09 and model <= 1.0, label
        elif n >= 4096:
            assert -0.12 <= model / gpu - 1 <= -0.03, label


def test_hopper_persistent_builds_stall_at_barriers():
    """The non-causal twins of the test above at N = 4096 and 16384, under Nsight Compute with
    instructions and stall reasons (data/gpu/runs/hopper_persistent_stalls_run.sh, an H100
    SXM): the 128-row persistent builds issue no more instructions a tile-step than their
    twins (0.5-6% fewer) and take 4.5-8.2% more cycles, their warps stalled at barriers (the
    consumers' mbarrier waits for K and V; no named barrier runs in the d = 64 'none' loop)
    0.24-0.29 more per issued instruction and the MIO queue full more often (0.09-0.30 more);
    the 192-row build's barrier stalls fall (0.90 -> 0.79, 0.80 -> 0.69) with its cycles.
    Where the wait comes from (the producer's one thread, the order of its copies) is not
    known."""
    stall = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
    pairs = {}
    for o, m in kernel_clock.last_launches("hopper_persistent_stalls"):
        key = (o["block_q"], o["block_kv"], o["head_dim"], o["seq_len"])
        pairs.setdefault(key, {})[o["persistent"]] = m
    assert len(pairs) == 6
    for (bq, bkv, d, n), pair in pairs.items():
        steps = 16 * -(-n // bq) * -(-n // bkv)
        inst = {p: pair[p]["smsp__inst_executed.sum"] / steps for p in pair}
        cycles = pair[True]["sm__cycles_elapsed.max"] / pair[False]["sm__cycles_elapsed.max"]
        barrier = {p: pair[p][stall.format("barrier")] for p in pair}
        label = f"{bq}x{bkv} d={d} N={n}"
        if bq == 128:
            assert 0.93 < inst[True] / inst[False] <= 1.0, label
            assert 1.04 < cycles < 1.09, label
            assert 0.23 < barrier[True] - barrier[False] < 0.3, label
            assert pair[True][stall.format("mio_throttle")] > (
                pair[False][stall.format("mio_throttle")] + 0.08
            ), label
        else:
            assert barrier[True] < barrier[False] and cycles < 1.0, label


def test_hopper_backward_of_this_project_from_its_compiled_code(hopper_rep):
    """This project's Hopper backward (kernels/cuda/hopper_bwd.cu between flash2_bwd.cu's first
    and last kernels), timed beside PyTorch's backward (data/gpu/hopper/hopper_bwd_measure.json),
    each build (tiling, Q and dO buffers) priced by its consumer warps' compiled loop.
    Achieved: 3.9% (bias -1.3%, max 11.0%) with its Q and dO tiles copied a step ahead by
    its producer and its warps held while their dQ reductions leave at the rate one SM was
    measured to send them (docs/model.md, "Bulk copies", "Reductions"); 5.6% (bias +5.4%,
    max 14.7%) before, its next tiles waiting behind the reductions on the SM's path; 16.2%
    before the reductions' rate, every row too fast. The d = 64 tilings ranked at Spearman
    0.8 or more, the model's pick within 1.4% of the best."""
    rep = hopper_rep
    s = rep["summary"]["flashio-hopper flash2_bwd"]
    assert s["n"] == 36 and s["mape"] <= 0.04 and s["max_error"] <= 0.11
    ranked = [r for r in rep["ranking"] if r["schedule"] == "flash2_bwd"]
    assert len(ranked) == 6 and all(r["spearman"] >= 0.8 for r in ranked)
    assert all(r["picked_slower_than_best"] <= 0.015 for r in ranked)


def test_eager_pytorch_from_its_kernels_machine_code():
    """PyTorch's eager attention (GEMM, scale, masked_fill when causal, row softmax, GEMM:
    every kernel of the call summed) against standard attention with the pytorch preset
    (unfused), its elementwise and softmax kernels replayed from their machine code, their
    loads waiting the HBM's latency, its GEMMs a persistent grid (132 CTAs in the profile):
    achieved 9.4% (bias +7.8%, max 21.3%, N = 1024, d = 64); 8.0% (max 20.5%) before the
    block scheduler's turnaround, which its softmax kernels' many CTAs pay (the row softmax at
    N = 8192 runs 131,072 CTAs of 1,024 threads in 993 waves, a turnaround each);
    7.4% and 13.9% before its GEMMs' tiles were priced as bulk copies (docs/model.md "Bulk
    copies"; cuBLAS's epilogue is assumed to store by TMA as CUTLASS 3's does); the issue's
    bound is 15%."""
    rep = families.report(families=("pytorch",))
    s = rep["summary"]["pytorch standard"]
    assert s["n"] == 16 and s["mape"] <= 0.095 and s["max_error"] <= 0.215
    assert all("128x128 w12" in r["label"] for r in rep["rows"])


def test_spearman_shares_tied_ranks():
    """Without ties, 1 - 6 sum d^2 / (n (n^2 - 1)); tied values share their mean rank, so two
    builds the model cannot tell apart count the same whichever order their rows come in."""
    assert families.spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)
    assert families.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ranks 0, 1, 2, 3 against 0.5, 0.5, 2, 3: the Pearson correlation of the two, 0.9487
    tied = families.spearman([1, 2, 3, 4], [7, 7, 8, 9])
    assert tied == pytest.approx(4.5 / (5**0.5 * 4.5**0.5))
    assert families.spearman([2, 1, 3, 4], [7, 7, 8, 9]) == pytest.approx(tied)
    assert families.spearman([1, 2, 3], [5, 5, 5]) == 0.0
    shape = AttentionShape(1, 16, 4096, 64, "bf16")
    ms = [
        families.Measured("flashio", "flash2", shape, bq, 64, 4, t, False)
        for bq, t in ((64, 1.0), (128, 2.0), (192, 3.0))
    ]
    rk = families.tiling_ranking(ms, [1.0, 1.0, 3.0])  # the first two tied first
    assert rk[0]["picked_slower_than_best"] == pytest.approx(0.5)  # the mean of 1.0 and 2.0
