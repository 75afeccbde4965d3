"""The H200's clock for kernels of different kinds (data/gpu/probe/kernel_clock.py), and the
replay's cycles against the GPU's (docs/model.md, "One SM clock for every kernel")."""

import importlib.util
import statistics

import numpy as np
import pytest

from flashio.analysis.validation import kernel_clock


@pytest.fixture(scope="module")
def rows():
    return {(r["label"], r["head_dim"]): r for r in kernel_clock.rows()}


def test_each_profiled_launch_is_the_kernel_its_row_names(rows):
    assert len(rows) == 9
    for (label, _), r in rows.items():
        want = {"flashio": "flash2_fwd", "hopper": "hopper_fwd", "sdpa-flash": "flash_fwd",
                "sdpa-cudnn": "cudnn"}[label.split(" ")[0]]  # fmt: skip
        assert want in r["kernel"], (label, r["kernel"])


def test_wgmma_kernels_and_flash_attn2_run_at_the_power_limit(rows):
    """Back to back, this project's mma.sync forwards draw 561-601 W and keep their clock
    (1.82 GHz implied); flash-attn 2 and every wgmma kernel draw 690-692 W (the board's limit
    is 700 W) and run at 1.50-1.72 GHz, 4-13% slower than alone."""
    mma = [rows["flashio 128x64 w8", 128], rows["flashio 128x128 w8", 64]]
    limited = [r for k, r in rows.items() if not k[0].startswith("flashio")]
    assert all(r["sustained_watts"] < 610 and r["sustained_clock_hz"] > 1.80e9 for r in mma)
    assert all(r["sustained_watts"] > 680 and r["sustained_clock_hz"] < 1.73e9 for r in limited)
    for r in limited:
        assert 1.04 < r["sustained_s"] * r["clock_alone_hz"] / r["cycles"] < 1.14


def test_replayed_cycles_against_the_gpus(rows):
    """The replay's cycles against Nsight Compute's for each kernel run alone. Achieved (the
    bounds round them up; the replay is deterministic): this project's mma.sync forwards
    within 1.4%, flash-attn 2's 11.2% short, cuDNN's 11.1% over (its written program), the
    Hopper builds at d = 128 within 2% (14.2% and 24.8% over with both overlaps before FFMA
    took one cycle and its rate beside wgmma was fitted on the FFMA warpgroup's span:
    docs/model.md, "FFMA's cost beside wgmma is the FMA pipe's"), the d = 64 build without
    overlap 8.1% short (its warpgroups started apart, as the GPU runs them; 5-6% over
    started together: a CTA's fixed cost is what it lacks)."""
    err = {k: r["cycles_error"] for k, r in rows.items()}
    assert abs(err["flashio 128x64 w8", 128]) <= 0.01
    assert abs(err["flashio 128x128 w8", 64]) <= 0.02
    assert abs(err["sdpa-flash", 128]) <= 0.12 and abs(err["sdpa-cudnn", 128]) <= 0.12
    d128 = ("128x176 pingpong", "128x128 none", "128x128 both", "128x176 both")
    assert max(abs(err[f"hopper {b}", 128]) for b in d128) <= 0.02
    assert -0.09 <= err["hopper 128x128 none", 64] < -0.07


def test_hopper_builds_in_cycles():
    """Every build of the Hopper forward at every validation shape, alone under Nsight Compute
    (data/gpu/probe/hopper_cycles.py): in cycles, where the clock drops out, the GPU orders
    the d = 128 builds as it does in time (128x176 with both overlaps fewest at N >= 2048,
    then 128x128 with both). The replay's cycles: 11.2% off over the 120 rows, 11.0% short
    on average (a CTA's fixed cost: the next test; 12.4% and 12.2% before the copies were
    priced as bulk copies; 8.6% and 7.7% with the warpgroups started together, the d = 64
    steps too long there); at d = 128 and N >= 4096 within 9.2% for
    every build, and it orders the first two as the GPU does at each of those shapes (with
    the rate fitted on a dense FFMA stream's CTA time, before: the builds with both overlaps
    9-24% over, ranked wrong). At d = 64 its fewest cycles are the GPU's at 8 of the 10
    shapes (started together: at none). The bounds are the achieved figures rounded (the
    replay is deterministic)."""
    rows = kernel_clock.hopper_cycles(jobs=2)
    assert len(rows) == 120
    err = [r["cycles_error"] for r in rows]
    assert sum(abs(e) for e in err) / len(err) <= 0.113
    assert -0.115 < sum(err) / len(err) < -0.105
    d64 = [r for r in rows if r["head_dim"] == 64]
    shapes = {(r["seq_len"], r["causal"]) for r in d64}
    agree = 0
    for shape in shapes:
        at = [r for r in d64 if (r["seq_len"], r["causal"]) == shape]
        fewest = min(at, key=lambda r: r["cycles"])
        agree += fewest is min(at, key=lambda r: r["model_cycles"])
    assert len(shapes) == 10 and agree == 8
    big = [r for r in rows if r["head_dim"] == 128 and r["seq_len"] >= 4096]
    for n, causal in {(r["seq_len"], r["causal"]) for r in big}:
        at = {r["label"]: r for r in big if (r["seq_len"], r["causal"]) == (n, causal)}
        first = ["hopper 128x176 both", "hopper 128x128 both"]
        assert sorted(at, key=lambda k: at[k]["cycles"])[:2] == first, (n, causal)
        assert sorted(at, key=lambda k: at[k]["model_cycles"])[:2] == first, (n, causal)
        assert all(abs(at[k]["cycles_error"]) <= 0.1 for k in at)


def test_hopper_cycles_split_into_steps_and_a_fixed_cost():
    """The same 120 launches, cycles per round of CTAs (one CTA an SM) against steps a CTA,
    a line through N = 1k..16k per non-causal build (``kernel_clock.cycle_parts``): the GPU
    spends 8.9-13.2 thousand cycles a CTA besides its steps, the replay 2.3-6.4 thousand
    fewer for every build (2.6-6.6 before the block scheduler's 384-ns turnaround, 3.2-7.5
    before its copies were priced as bulk copies: docs/model.md, "Bulk copies"), while its
    step is within -1% to +3% of the GPU's at d = 128 and
    -13% to +8% at d = 64 (-5% to +11% with the warpgroups started together; 1-28% over
    with the rate fitted on a dense FFMA stream's CTA time: docs/model.md, "FFMA's cost
    beside wgmma is the FMA pipe's"). A documented limit, pinned so that a model that lifts
    it says so."""
    parts = kernel_clock.cycle_parts(kernel_clock.hopper_cycles(jobs=2))
    assert len(parts) == 12 and all(p["shapes"] == 5 for p in parts)
    for p in parts:
        assert 8_500 < p["gpu_fixed"] < 13_500, p
        assert 2_000 < p["gpu_fixed"] - p["model_fixed"] < 7_000, p
        assert abs(p["model_step"] / p["gpu_step"] - 1) < (0.04 if p["head_dim"] == 128 else 0.13)


def test_a_ctas_fixed_cost_is_its_copies_and_stores():
    """data/gpu/probe/hopper_cycles.py --cta-cost: three builds at N = 128..2816 (1 to 22
    steps a CTA) with one round of 132 CTAs and ten, alone under Nsight Compute. A line per
    build and round count (``cycle_parts(..., by_rounds=True)``): the replay's step is within
    11% of the GPU's (-10% and -8% for the d = 64 build without overlap, whose replayed step
    is short on the validation shapes too), while a CTA's fixed cost after the first round is
    6.1-8.9 thousand cycles on the GPU and 4.0-5.2 thousand in the replay (3.4-4.7 before
    the block scheduler's turnaround, 2.7-4.1 before its copies were priced as bulk copies:
    docs/model.md, "Bulk copies"), 2.1-3.7 thousand short. Built without
    arithmetic (``--skeleton``: every copy, barrier and store) the same CTAs cost 4.7-8.6
    thousand cycles a round besides their steps, at 1.97 GHz instead of 1.7-1.8: in seconds
    the whole kernel's fixed cost is within 1.1 us of its skeleton's (docs/model.md, "A
    CTA's fixed cost"). A documented limit of the replay, pinned so that a model that lifts
    it says so."""
    rows = kernel_clock.hopper_cycles(jobs=2, run="hopper_cta_cost")
    bare_rows = kernel_clock.gpu_cycles("hopper_skeleton")
    parts = kernel_clock.cycle_parts(rows, by_rounds=True)
    skeleton = {
        (p["head_dim"], p["block_kv"], p["rounds"]): p
        for p in kernel_clock.cycle_parts(bare_rows, by_rounds=True)
    }

    def clock(rs, d, bkv):  # the median SM clock of a build's launches
        return statistics.median(
            r["clock_hz"] for r in rs if (r["head_dim"], r["block_kv"]) == (d, bkv)
        )

    assert len(parts) == 6 and len(skeleton) == 6
    for p in parts:
        assert abs(p["model_step"] / p["gpu_step"] - 1) < 0.11, p
        if p["rounds"] == 10:
            assert 2_000 < p["gpu_fixed"] - p["model_fixed"] < 4_000, p
            bare = skeleton[(p["head_dim"], p["block_kv"], 10)]
            # cycles to seconds at each run's clock (the skeleton runs at 1.97 GHz)
            d, bkv = p["head_dim"], p["block_kv"]
            whole_s = p["gpu_fixed"] / clock(rows, d, bkv)
            bare_s = bare["gpu_fixed"] / clock(bare_rows, d, bkv)
            assert abs(whole_s - bare_s) < 1.1e-6, (p, bare)


def test_the_replayed_step_keeps_the_tensor_pipes_as_busy_as_the_gpu():
    """Run 11 (data/gpu/probe/hopper_pipes_ncu.csv): the d = 128 Hopper builds at N = 16384
    under Nsight Compute. The share of cycles their tensor pipes are busy (68-81%) and their
    sub-partitions issue (37-43%) against the replayed step's (``kernel_clock.pipe_activity``):
    within 3 points each. The GPU's shares are over the whole kernel, whose CTAs' fixed cost
    is 3-5% of its cycles here, the replay's over a steady step, so they may differ by that
    much where the step is right."""
    rows = kernel_clock.pipe_activity("hopper_pipes")
    assert len(rows) == 4
    for r in rows:
        assert 0.6 < r["gpu_tensor"] < 0.85 and 0.3 < r["gpu_issue"] < 0.5, r
        assert abs(r["model_tensor"] - r["gpu_tensor"]) < 0.03, r
        assert abs(r["model_issue"] - r["gpu_issue"]) < 0.03, r


def test_at_d64_the_replayed_step_keeps_the_tensor_pipes_busy_in_the_gpus_order():
    """data/gpu/probe/hopper_pipes64_ncu.csv (an H100 SXM, the same SM as the H200's): the
    d = 64 builds at N = 16384. Their tensor pipes are busy 48-56% of the cycles, and the GPU
    keeps them busier without overlap (128x128: 48-51%; 192x128: 54-56%) than with both
    overlaps (47-49%). So does the replayed step, its warpgroups without turns started apart
    (none: 53% and 55%; both: 50-51%), each build within 5 points of the GPU; started
    together it had it the other way (none 48% and 51%), the ordering error behind the
    d = 64 ranking misses of docs/validation.md before the spread start."""
    rows = kernel_clock.pipe_activity("hopper_pipes64")
    assert len(rows) == 8
    for r in rows:
        assert 0.45 < r["gpu_tensor"] < 0.6 and abs(r["model_tensor"] - r["gpu_tensor"]) < 0.05
    for side in ("gpu_tensor", "model_tensor"):
        both = max(r[side] for r in rows if r["overlap"] == "both")
        plain = [r[side] for r in rows if r["overlap"] == "none" and r["stages"] == 2]
        assert min(plain) > both, side


def test_at_d64_the_gpus_order_is_in_the_cycles_not_the_clock():
    """data/gpu/probe/kernel_clock.py --set d64 (an H100 SXM, whose SMs are the H200's): the
    d = 64 Hopper builds, alone under Nsight Compute and back to back with the board power.
    Alone, every build runs at 1.81-1.82 GHz and 192x128 without overlap takes 12-15% fewer
    cycles than the builds with both overlaps; back to back, all draw 690-701 W, and the
    power limit takes more clock from the builds without overlap (1.66-1.71 GHz implied)
    than from those with both (1.77-1.80), so it narrows the gap (7% in time) rather than
    making it. The replay gives 192x128 without overlap the fewest cycles too, every build
    3.9-7.8% short but the intra-warpgroup one (6% over; 4-9% and 6% before the block
    scheduler's turnaround was charged); started together (docs/model.md,
    "Warpgroups started apart") the builds without overlap were 6-10% over and 128x176 with
    both overlaps came first: the order is in the cycles, not in the one clock the model
    takes for every kernel."""
    rows = {r["label"]: r for r in kernel_clock.rows("kernel_clock_d64")}
    hopper = {k: r for k, r in rows.items() if k.startswith("hopper")}
    assert len(rows) == 6 and len(hopper) == 5
    assert all(1.80e9 < r["clock_alone_hz"] < 1.83e9 for r in hopper.values())
    best = rows["hopper 192x128 none"]
    assert min(hopper.values(), key=lambda r: r["cycles"]) is best
    assert min(hopper.values(), key=lambda r: r["model_cycles"]) is best
    both = [rows["hopper 128x176 both"], rows["hopper 128x128 both"]]
    for r in both:
        assert r["cycles"] > 1.12 * best["cycles"], r
        assert r["sustained_clock_hz"] > best["sustained_clock_hz"] + 0.05e9, r
        assert r["sustained_s"] / best["sustained_s"] < r["cycles"] / best["cycles"], r
    assert all(r["sustained_watts"] > 685 for r in hopper.values())
    for label, r in hopper.items():
        low, high = (0.05, 0.07) if "intra" in label else (-0.08, -0.035)
        assert low < r["cycles_error"] < high, r


def _probe(name: str):
    """The probe script data/gpu/probe/``name``.py as a module."""
    spec = importlib.util.spec_from_file_location(name, f"data/gpu/probe/{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _hopper_samples():
    return _probe("hopper_samples").rows()


def _mufu_share(shares: dict) -> float:
    """MUFU's share of the softmax's classes (consumer warps only: the producer warpgroup's
    waits fall in other classes)."""
    return shares["mufu"] / (shares["mufu"] + shares["alu"] + shares["fma"])


def test_at_d64_the_replay_waits_at_mufu_about_as_the_gpu_does():
    """data/gpu/probe/hopper_samples_source.csv.gz (data/gpu/runs/hopper_samples_run.sh, an
    H100 SXM: the H200's SMs): Nsight Compute's per-instruction warp-state samples of the
    Hopper forward's builds at N = 16384, d = 64 and 128, against the replay's consumer
    cycles at the same code (``warp_replay.pc_cycles``). Of the softmax's time (MUFU, ALU
    and FP32 classes), the replay puts 1.06-1.18x the GPU's share at MUFU in the d = 64
    builds without overlap (0.76x for 128x128 with 3 stages, whose GPU samples differ from
    its 2- and 4-stage twins'), and 0.92-1.01x in those with overlaps. With the warpgroups
    without overlap started together it was 1.35-1.58x (1.12x): in step, they contended for
    the MUFU pipe together, where the GPU's do not
    (``test_warpgroups_without_turns_settle_in_the_phase_they_start_in``)."""
    rows = [r for r in _hopper_samples() if r["head_dim"] == 64]
    assert len(rows) == 8
    for r in rows:
        ratio = _mufu_share(r["replay"]) / _mufu_share(r["gpu"])
        if r["overlap"] != "none":
            assert 0.9 < ratio < 1.02, r
        elif r["stages"] == 3 and r["block_q"] == 128:
            assert 0.7 < ratio < 0.8, r
        else:
            assert 1.0 < ratio < 1.2, r


def test_warpgroups_without_turns_settle_in_the_phase_they_start_in():
    """The replayed step of warpgroups that nothing makes take turns depends on the phase
    they start in (``warp_replay.replay(..., stagger=)``): the d = 64, 128x128 build
    without overlap takes 2,113 cycles a step started together and
    1,846 (12.7% fewer) with its second warpgroup started 700 cycles after the first (16
    steps). The GPU's 4.15 M cycles for it (kernel_clock_d64) lie between the model's 4.39 M
    with the first and what the shorter step gives (3.81 M with the spread start, the model's
    default since: ``test_warpgroups_started_spread_order_the_d64_builds_as_the_gpu``). The
    builds whose warpgroups take turns (both overlaps) do not depend on it."""
    from flashio import kernels, simulator
    from flashio.simulator import issue
    from flashio.simulator.warp_replay import first_turn, replay

    model = issue.issue_model(simulator.load_gpu("h200-measured"))
    consumers = 12 - kernels.implementation("flashio-hopper").producer_warps

    def step(overlap, stagger):
        key = issue.hopper_key(64, 128, 128, 12, "bf16", overlap)
        prog = issue._program(key, "flashio-hopper")
        return replay(prog, model, consumers, 1, 16, first_turn(prog), stagger).alone

    together, apart = step("none", 0.0), step("none", 700.0)
    assert apart < 0.9 * together
    assert step("both", 700.0) == pytest.approx(step("both", 0.0), rel=1e-9)


def test_a_round_robin_issue_order_takes_three_warpgroups_out_of_step():
    """``IssueModel.issue_order``: with the first ready warp after the last issued one
    ("round-robin") instead of the replay's greedy pick, the d = 64, 192x128 build without
    overlap (three consumer warpgroups, the GPU's fastest d = 64 build: 3.84 M cycles
    against the model's 4.24 M, kernel_clock_d64) steps 2,548 cycles instead of 2,912
    (-12.5%, 16 steps), where the builds whose warpgroups take turns move by 2-3% (128x176
    with both overlaps 2,701 -> 2,749), all started together. Not adopted: the overlap rates
    were fitted with the greedy pick in the loop (docs/model.md, "Warpgroups started
    apart")."""
    import dataclasses

    from flashio import kernels, simulator
    from flashio.simulator import issue
    from flashio.simulator.warp_replay import first_turn, replay

    spread = issue.issue_model(simulator.load_gpu("h200-measured"))
    assert spread.issue_order == "greedy"
    greedy = dataclasses.replace(spread, warpgroup_start="together")
    with pytest.raises(ValueError, match="issue_order"):
        dataclasses.replace(greedy, issue_order="oldest")
    fair = dataclasses.replace(greedy, issue_order="round-robin")
    producer = kernels.implementation("flashio-hopper").producer_warps

    def step(block_q, block_kv, overlap, model):
        warps = 4 * (block_q // 64 + 1)
        key = issue.hopper_key(64, block_q, block_kv, warps, "bf16", overlap)
        prog = issue._program(key, "flashio-hopper")
        return replay(prog, model, warps - producer, 1, 16, first_turn(prog)).alone

    assert step(192, 128, "none", fair) < 0.9 * step(192, 128, "none", greedy)
    both = step(128, 176, "both", fair) / step(128, 176, "both", greedy)
    assert 1.0 < both < 1.03


def test_the_gpus_warpgroups_without_turns_run_apart():
    """data/gpu/probe/hopper_phase.py (data/gpu/runs/hopper_phase_run.sh, an H100 SXM): the
    Hopper forward built with STEP_CLOCK=1, each consumer warpgroup stamping the SM clock at
    four points of every key block (first round of CTAs, N = 16384). Without overlap the GPU's
    two consumer warpgroups run half a step apart (S lands 0.47-0.48 of a step after the other
    one's, within a tenth of a step of it in 1% of the steps or fewer), and three spread over
    the step. The replay of the same stamped code, started together, keeps them near step
    (0.11-0.14) and steps 2.6-3.9% short of the GPU; so does the compiled code without stamps
    (0.09-0.19), which takes 15% more cycles than started half a step apart. Started as the
    model starts them (spread), the two keep 0.39-0.40 of a step apart and step 13-14% short
    of the GPU, while the three of 192x128 fall back near step (0.08-0.09; docs/model.md,
    "Warpgroups started apart")."""
    from pathlib import Path

    from flashio import kernels, simulator
    from flashio.simulator import issue
    from flashio.simulator.warp_replay import execute_roles, replay, warp_layout

    hp = _probe("hopper_phase")
    rows = {r["build"]: r for r in hp.report(Path("data/gpu/probe"))}
    assert len(rows) == len(hp.BUILDS)
    for name in ("d=64 128x128 none s2", "d=64 128x128 none s3"):
        gpu, rep = rows[name]["gpu"], rows[name]["replay_together"]
        assert gpu["phase"]["median"][0] > 0.45 and gpu["phase"]["in_step"][0] < 0.02, name
        assert rep["phase"]["median"][0] < 0.2, name
        spread = rows[name]["replay"]  # the model's start
        assert 0.35 < spread["phase"]["median"][0] < 0.45, name
        assert 0.85 < spread["step"] / gpu["step"] < 0.88, name
    three = rows["d=64 192x128 none s2"]["gpu"]["phase"]["median"]
    assert min(three) > 0.15 and max(three) > 0.3
    assert max(rows["d=64 192x128 none s2"]["replay"]["phase"]["median"]) < 0.1
    for name in ("d=64 128x128 none s2", "d=64 128x128 none s3", "d=64 192x128 none s2"):
        r = rows[name]
        assert 0.95 < r["replay_together"]["step"] / r["gpu"]["step"] < 0.98, name

    model = issue.issue_model(simulator.load_gpu("h200-measured"))
    consumers = 12 - kernels.implementation("flashio-hopper").producer_warps
    prog = issue._program(issue.hopper_key(64, 128, 128, 12, "bf16", "none"), "flashio-hopper")
    cta_of, group_of = warp_layout(consumers, 1, model.sub_partitions)
    _, _, ends = execute_roles([prog], model, consumers, 1, 32, cta_of, group_of, step_ends=True)
    together = replay(prog, model, consumers, 1, 16, stagger=0.0).alone
    lag = (ends[1, 16:] - ends[0, 16:]) / together
    assert (abs(lag - lag.round()) < 0.25).all()
    assert replay(prog, model, consumers, 1, 16, stagger=together / 2).alone < together / 1.12


def test_warpgroups_started_spread_order_the_d64_builds_as_the_gpu():
    """``IssueModel.warpgroup_start="spread"`` starts a CTA's G warpgroups that do not take
    turns g / G of their together step apart, where the GPU runs them
    (``test_the_gpus_warpgroups_without_turns_run_apart``). At d = 64 the build without
    overlap then steps fewer cycles than the one with both overlaps, as on the GPU (lines
    through five shapes, ``kernel_clock.cycle_parts``: 1,949 against 2,093 cycles), where
    started together it steps more (2,113 against 2,034); the builds that take turns do not
    move. ``HOPPER_ISA``'s start, so the model's default: priced in docs/model.md,
    "Warpgroups started apart"."""
    import dataclasses

    from flashio import kernels, simulator
    from flashio.simulator import issue
    from flashio.simulator.warp_replay import first_turn, replay

    spread = issue.issue_model(simulator.load_gpu("h200-measured"))
    assert spread.warpgroup_start == "spread"
    with pytest.raises(ValueError, match="warpgroup_start"):
        dataclasses.replace(spread, warpgroup_start="staggered")
    together = dataclasses.replace(spread, warpgroup_start="together")
    producer = kernels.implementation("flashio-hopper").producer_warps

    def step(overlap, model):
        key = issue.hopper_key(64, 128, 128, 12, "bf16", overlap)
        prog = issue._program(key, "flashio-hopper")
        return replay(prog, model, 12 - producer, 1, 16, first_turn(prog)).alone

    assert step("none", together) > step("both", together)
    assert step("none", spread) < 0.95 * step("both", spread)
    assert step("both", spread) == step("both", together)
    prog = issue._program(issue.hopper_key(64, 128, 128, 12, "bf16", "none"), "flashio-hopper")
    half = replay(prog, together, 8, 1, 16, stagger=step("none", together) / 2).alone
    assert step("none", spread) == half


def test_a_written_ping_pong_program_is_not_spread(monkeypatch):
    """``simulator.synth`` writes a consumer program without named barriers, so the replay
    cannot see that a description with ping-pong (or both overlaps) takes turns: the spread
    start leaves such programs together, and moves the others (at d = 64, 128-key blocks and
    two consumer warpgroups, the program without overlap steps 4.9% fewer cycles)."""
    import dataclasses

    from flashio import simulator
    from flashio.simulator import issue

    gpu = simulator.load_gpu("h200-measured")
    spread = issue.issue_model(gpu)
    together = dataclasses.replace(spread, warpgroup_start="together")

    def steps(model):
        issue.synthetic_step_costs.cache_clear()
        monkeypatch.setattr(issue, "issue_model", lambda _: model)
        return {o: issue.synthetic_step_costs(gpu, 128, 64, 2, o, 8, 1).replay.alone
                for o in ("both", "pingpong", "none")}  # fmt: skip

    before, after = steps(together), steps(spread)
    issue.synthetic_step_costs.cache_clear()
    assert after["both"] == before["both"] and after["pingpong"] == before["pingpong"]
    assert after["none"] < 0.96 * before["none"]  # 2,190 -> 2,083 cycles a step


def test_stamps_become_cycles_from_each_ctas_first():
    """hopper_phase.relative: the SM clock, read to 64 bits or kept to 32, becomes cycles
    from each CTA's first stamp, across the 32-bit wrap; a build with intra-warpgroup overlap
    does not stamp its first key block."""
    hp = _probe("hopper_phase")
    cycles = np.arange(2 * 3 * 4).reshape(1, 2, 3, 4) * 100 + 7
    for start in (5, (1 << 32) - 250):  # the second crosses the wrap
        raw = (start + cycles) % (1 << 32)
        assert (hp.relative(raw, "none") == cycles - 7).all()
        intra = hp.relative(raw.astype(np.int32), "intra-warpgroup")
        assert (intra[:, :, 0] == hp.UNSTAMPED).all()
        assert (intra[:, :, 1:] == cycles[:, :, 1:] - cycles[:, :, 1:].min()).all()


def test_rounds_are_each_sms_ctas_in_start_order():
    """hopper_rounds.summary: a CTA's round is its place among its SM's CTAs by start; per
    round the start spread, the medians of the Q wait, loop and store, and the gap from the
    SM's previous CTA having stored to the next one's start (records: sm, then four times)."""
    hr = _probe("hopper_rounds")
    records = np.array([[1, 125, 135, 210, 220], [0, 0, 10, 100, 110],
                        [1, 5, 12, 105, 115], [0, 120, 130, 200, 214]])  # fmt: skip
    assert hr.rounds(records).tolist() == [1, 0, 0, 1]
    first, second = hr.summary(records)["rounds"]
    assert first["ctas"] == 2 and first["gap_ns"] is None
    assert first["q_wait_ns"] == pytest.approx(8.5) and first["loop_ns"] == pytest.approx(91.5)
    assert second["gap_ns"] == pytest.approx(10.0) and second["store_ns"] == pytest.approx(12.0)
    assert second["first_start_ns"] == 120 and second["start_spread_ns"] == pytest.approx(4.0)


def test_the_gpus_rounds_of_ctas_drift_apart():
    """data/gpu/probe/hopper_rounds.py (data/gpu/runs/hopper_rounds_run.sh, an H100 SXM): the
    Hopper forward's CTAs, built with CTA_CLOCK=1, at N = 2048 and 16384. The first round
    starts within 0.2 us, and the later ones drift apart (at N = 16384 their starts spread
    over 2.8-7.7 us in the second round and 11.9-86 us by the fifteenth), so a later round's
    copies are not one burst; yet in every later round a CTA waits 0.9-2.2 us for its Q tile,
    stores its first warpgroup's rows of O in 0.77-1.38 us, and the next CTA on its SM starts
    0.19-0.64 us after that store (the model's next CTA starts as the last one ends)."""
    from pathlib import Path

    hr = _probe("hopper_rounds")
    launches = hr.read_clock(Path("data/gpu/probe"))
    assert len(launches) == 8
    for name, records in launches.items():
        got = hr.summary(records)
        rounds = got["rounds"]
        assert got["sms"] == 132 and rounds[0]["start_spread_ns"] < 250, name
        for r in rounds[1:]:
            assert 900 < r["q_wait_ns"] < 2300 and 150 < r["gap_ns"] < 700, (name, r)
        assert all(700 < r["store_ns"] < 1400 for r in rounds), name
        if "N=16384" in name:
            assert rounds[1]["start_spread_ns"] > 2_500, name
            assert rounds[-2]["start_spread_ns"] > 10_000, name
