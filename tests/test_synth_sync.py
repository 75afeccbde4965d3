"""Written programs of mma.sync forwards (simulator.synth_sync) against the compiled code.

Two independent descriptions of one kernel's main loop: the program the census decoded from the
compiled machine code, and the program written from the algorithm with the instruction mix of
the implementation's *other* compiled tilings. Both are replayed by the same warp replay. The
bounds are the achieved figures (docs/model.md, "Kernels outside the census") rounded up: the
replay is deterministic and the least-squares lines are read from fixed integer counts, so they
hold on any machine.
"""

import json
from pathlib import Path

import numpy as np
import pytest

import flashio
from flashio.simulator import issue, sass
from flashio.simulator.simulate import ModelOptions
from flashio.simulator.synth_sync import (
    TERMS,
    _algorithm,
    _entries,
    instruction_mix,
    sync_forward_program,
    work_terms,
    xor_swizzle_ways,
)
from flashio.simulator.warp_replay import replay

GPU = flashio.load_gpu("h200-measured")
PROGRAMS = issue.census("flashio")
ENTRIES = _entries(PROGRAMS, "flash2_fwd")
HMMA_LATENCY = issue.HOPPER_ISA["latency"]["hmma"]


def _tiling(key):
    d, rest = key.split(" d=")[1].split(" ", 1)
    bq, bkv = rest.split(" ")[0].split("x")
    w = rest.split("w=")[1].split(" ")[0]
    return int(d), int(bq), int(bkv), int(w)


def test_the_mix_is_read_from_every_spill_free_tiling_once():
    keys = [k for k, *_ in ENTRIES]
    assert len(keys) == 11  # 17 compiled forward tilings, 6 of them spill
    assert len({_tiling(k) for k in keys}) == len(keys)  # fp16 and bf16 builds counted once
    for k in keys:
        assert sass.WarpProgram.from_json(PROGRAMS[k]).counts().get("local", 0) == 0


def test_written_counts_match_the_compiled_ones():
    """In each spill-free tiling, the written program issues the compiled loop's tensor-core
    and shared-memory work exactly, and within a few instructions of its count per class."""
    mix = instruction_mix(PROGRAMS, "flashio")
    for key, _, counts, _ in ENTRIES:
        d, bq, bkv, w = _tiling(key)
        written = sync_forward_program(bq, bkv, d, w, mix, HMMA_LATENCY).counts()
        for c in ("hmma", "ldsm", "ldgsts", "mufu", "shfl"):
            assert written.get(c, 0) == counts.get(c, 0), (key, c)
        for c in ("fma", "alu", "imad"):  # per-step bookkeeping varies between compilations
            assert abs(written.get(c, 0) - counts.get(c, 0)) <= 16, (key, c)
        total = sum(counts.values())
        assert abs(sum(written.values()) - total) <= 0.05 * total, key


def test_written_step_replays_like_the_compiled_one_held_out():
    """Leave one tiling out, read the mix from the others, write its program, and replay both
    at one and at two resident CTAs: achieved mean |error| 3.8%, worst 16.0% (d = 64,
    128x128, 8 warps, two CTAs: the compiled loop overlaps the two CTAs' softmax and products
    better than the written order does)."""
    model = issue.issue_model(GPU)
    errors = []
    for key, *_ in ENTRIES:
        d, bq, bkv, w = _tiling(key)
        mix = instruction_mix(PROGRAMS, "flashio", exclude=((d, bq, bkv, w),))
        assert key not in mix.entries
        written = sync_forward_program(bq, bkv, d, w, mix, HMMA_LATENCY)
        compiled = sass.WarpProgram.from_json(PROGRAMS[key])
        for ctas in (1, 2):
            a, b = replay(compiled, model, w, ctas), replay(written, model, w, ctas)
            errors.append(b.together / a.together - 1)
    errors = np.abs(errors)
    assert errors.mean() <= 0.04 and errors.max() <= 0.17


def test_algorithm_counts_follow_the_tiling():
    t = work_terms(128, 64, 128, 8)  # 16 rows a warp
    assert t["scores"] == 32 and t["accumulators"] == 64 and t["rows"] == 2
    assert t["copies"] == 2 * 64 * 128 * 2 / (16 * 32 * 8)
    own = _algorithm(t)
    assert own["mufu"] == 32 + 2 and own["shfl"] == 4 and own["fma"] == 2 * 32 + 64 + 4
    assert set(TERMS) <= set(t)
    # Q, K and V fragments of one k16 slice (16 rows, 64 keys, 128 columns), two buffers
    assert t["fragments"] == 2 * 16 * (16 + 64 + 128) * 2 / 128


def _compiled(key):
    comp = PROGRAMS[key]["compiled"]
    return comp["registers"], comp["stack_bytes"]


def test_register_line_tells_the_spilling_tilings_held_out():
    """Each forward tiling of the census, its register line read without it: the line exceeds
    the 255-register limit exactly where the compiler spills (32 bytes of stack or more), and
    below the cap it is within 22 registers of the compiler's count (the achieved figure)."""
    plain = {
        _tiling(k): k
        for k in PROGRAMS
        if k.startswith("flash2_fwd") and k.count(" ") == 4 and k.endswith("fp16")
    }
    assert len(plain) == 18
    for (d, bq, bkv, w), key in plain.items():
        regs, stack = _compiled(key)
        mix = instruction_mix(PROGRAMS, "flashio", exclude=((d, bq, bkv, w),))
        line = mix.register_demand(work_terms(bq, bkv, d, w))
        assert (line > 255) == (stack >= 32), key
        if regs < 248:  # below the compiler's cap: a count it needed, not one it filled
            assert abs(line - regs) <= 22, (key, line, regs)


def test_written_programs_take_their_occupancy_from_the_register_line():
    shape = flashio.AttentionShape(1, 16, 4096, 64, "bf16")
    sched = flashio.schedule("flash2", shape, 64, 64, 4)  # compiled: 166 registers, 3 CTAs/SM
    opts = ModelOptions(issue_model=True, written_programs=True)
    held = flashio.simulate(sched, GPU, options=opts).kernels[0].occupancy
    census = flashio.simulate(sched, GPU, options=ModelOptions(issue_model=True))
    assert held.ctas_per_sm == census.kernels[0].occupancy.ctas_per_sm == 3
    assert held.spilled_regs_per_thread == 0
    # a tiling whose line exceeds the limit says that its spills are not written
    big = flashio.schedule("flash2", flashio.AttentionShape(1, 16, 4096, 128, "bf16"), 128, 96, 4)
    res = flashio.simulate(big, GPU, options=ModelOptions(issue_model=True))
    assert "would spill, spills not written" in res.kernels[0].census_key
    assert res.kernels[0].occupancy.spilled_regs_per_thread == 0  # no invented traffic
    from flashio.analysis.present.report import result_text

    assert "its time is a lower bound" in result_text(big, res, GPU)


def test_too_few_tilings_give_no_mix():
    few = dict(list(PROGRAMS.items())[:3])
    assert instruction_mix(few, "flashio") is None
    assert issue.sync_mix("no-such-implementation") is None


def test_bad_tilings_are_refused():
    mix = issue.sync_mix()
    with pytest.raises(ValueError, match="multiple of 16"):
        sync_forward_program(64, 64, 64, 8, mix, HMMA_LATENCY)  # 8 rows a warp
    assert issue.synthetic_sync_step_costs(GPU, "flashio", 64, 64, 64, 8, 1) is None


def test_a_tiling_outside_the_census_is_priced_by_its_written_program():
    shape = flashio.AttentionShape(1, 16, 8192, 64, "bf16")
    sched = flashio.schedule("flash2", shape, 128, 96, 8)  # never compiled
    assert issue.lookup(sched.meta.params, "flash2_fwd", 8) is None
    pipes = flashio.simulate(sched, GPU)
    written = flashio.simulate(sched, GPU, options=ModelOptions(issue_model=True))
    assert written.kernels[0].census_key.startswith("synthetic mma.sync forward 128x96")
    # the pipe rates overlap every pipe perfectly; the written loop issues its instructions
    assert written.time_s > 1.3 * pipes.time_s
    assert written.global_read_bytes == pipes.global_read_bytes  # time only, never bytes


def test_written_programs_option_hides_the_compiled_code():
    shape = flashio.AttentionShape(1, 16, 4096, 64, "bf16")
    sched = flashio.schedule("flash2", shape, 128, 128, 8)  # compiled
    census = flashio.simulate(sched, GPU, options=ModelOptions(issue_model=True))
    opts = ModelOptions(issue_model=True, written_programs=True)
    held = flashio.simulate(sched, GPU, options=opts)
    assert census.kernels[0].census_key.startswith("flash2_fwd d=64 128x128 w=8")
    assert held.kernels[0].census_key.startswith("synthetic mma.sync forward 128x128")
    assert held.time_s != census.time_s


def test_xor_swizzle_ways_follow_the_kernels_layout():
    """The layout rule is the one kernels/cuda/mma_tiles.cu compiles (its SWZ line), and its
    ldmatrix phases are conflict-free exactly where a row holds a multiple of 8 chunks."""
    src = Path("kernels/cuda/mma_tiles.cu").read_text()
    assert "SWZ = CH % 8 == 0 ? 7 : CH % 4 == 0 ? 3 : CH % 2 == 0 ? 1 : 0;" in src
    assert "((chunk ^ (row & SWZ)) << 3)" in src
    for d in (64, 128, 192, 256):
        assert xor_swizzle_ways(d) == 1
    assert xor_swizzle_ways(96) == 2  # 12 chunks a row: rows r and r + 2 share a bank group


UNSEEN = Path("data/gpu/unseen")


def _unseen_rows():
    from flashio.analysis.validation import families

    doc = json.loads((UNSEEN / "gpu_measure.json").read_text())
    for r in doc["results"]:
        shape = flashio.AttentionShape(r["batch"], r["heads"], r["seq_len"], r["head_dim"], "bf16")
        m = families.Measured(
            "flashio", "flash2", shape, r["block_q"], r["block_kv"], r["warps"], 0.0, True
        )
        yield r, families.predict(m) * 1e3 / r["median_ms"] - 1


def test_unseen_tilings_against_the_gpu():
    """This project's forward at 15 tilings the census never held (head dims 64, 96, 128 and
    256), each priced by its written program, against the H200 (data/gpu/unseen). The
    predictions committed before the run (predicted.json) erred by 12.4% on average, 38% at
    worst (d = 96). Two facts read after those misses (docs/validation.md): the bank
    conflicts of the kernel's layout at d = 96 (the rule above) and how an SM deals warp
    slots to its sub-partitions (the 6-warp rows; data/gpu/probe/smsp_warps.json). With them
    the model erred by 7.6% on average and 32.2% at worst: 128x48 with 8 warps, whose
    register line (138) crosses the count at which two CTAs fit (compiled: 127). With the
    compiler's counts (the register table) 5.1% and 13.8% (d = 128, 128x96: a build that
    spills, its spills not written). Bounds: the achieved figures rounded up (the replay is
    deterministic)."""
    pre = json.loads((UNSEEN / "predicted.json").read_text())["rows"]
    before = {(p["shape"]["batch"], p["shape"]["seq_len"], p["shape"]["head_dim"],
               *p["tiles"]): p["predicted_ms"] for p in pre}  # fmt: skip
    errors, first = [], []
    for r, err in _unseen_rows():
        key = (r["batch"], r["seq_len"], r["head_dim"], r["block_q"], r["block_kv"], r["warps"])
        first.append(abs(before[key] / r["median_ms"] - 1))
        errors.append(abs(err))
    assert len(errors) == len(first) == 30
    assert 0.12 < np.mean(first) < 0.13 and 0.38 < max(first) < 0.39  # as committed
    assert np.mean(errors) <= 0.052 and max(errors) <= 0.139


def test_register_line_on_unseen_compiles():
    """The register line of each unseen tiling (read as for a tiling never compiled:
    ``hold_out``) against what NVRTC compiled for the GPU run (its num_regs, local memory):
    the line exceeds 255 exactly where the build uses local memory, and is within 33 registers
    of the compiled count elsewhere (the achieved figure: d = 96, 64x64, 4 warps, 193 against
    226)."""
    doc = json.loads((UNSEEN / "gpu_measure.json").read_text())
    seen = 0
    for v in doc["variants"].values():
        d = v["defines"]
        attrs = v["nvrtc_attributes"]["flash2_fwd"]
        tiling = (d["BLOCK_Q"], d["BLOCK_KV"], d["HEAD_DIM"], d["WARPS"])
        line = issue.written_registers("flashio", *tiling, hold_out=True)
        assert line.source == "register line"
        assert (line.registers > 255) == (attrs["local_size_bytes"] > 0), (tiling, line, attrs)
        if line.registers <= 255:
            assert abs(line.registers - attrs["num_regs"]) <= 33, (tiling, line, attrs)
        seen += 1
    assert seen == 15


REGISTER_TABLE = json.loads(issue.register_table_path("flashio").read_text())


def test_register_table_is_current():
    """The register table was compiled from the forward's sources as they are."""
    from benchmarks.register_table import sources_sha256

    assert REGISTER_TABLE["cuda_sources_sha256"] == sources_sha256()


def test_register_table_agrees_with_the_other_compiles():
    """The register table (benchmarks/register_table.py: NVRTC without a GPU) against two other
    compiles of the same kernel: the census's (benchmarks/sass_census.py), the same registers
    and spill stores at every tiling both hold; and the unseen tilings' builds that ran on the
    H200 (CuPy's NVRTC there: num_regs, local memory), the same registers and stack bytes."""
    table = issue.register_table("flashio")
    both = 0
    for key in PROGRAMS:
        if not (key.startswith("flash2_fwd") and key.count(" ") == 4 and key.endswith("bf16")):
            continue
        d, bq, bkv, w = _tiling(key)
        entry = table.get((d, bq, bkv, w))
        if entry is None:
            continue
        comp = PROGRAMS[key]["compiled"]
        assert entry["registers"] == comp["registers"], key
        assert entry["spill_store_bytes"] == comp.get("spill_store_bytes", 0), key
        both += 1
    assert both == 18  # every plain bf16 forward of the census
    doc = json.loads((UNSEEN / "gpu_measure.json").read_text())
    for v in doc["variants"].values():
        d, ran = v["defines"], v["nvrtc_attributes"]["flash2_fwd"]
        entry = table[d["HEAD_DIM"], d["BLOCK_Q"], d["BLOCK_KV"], d["WARPS"]]
        assert (entry["registers"], entry["stack_bytes"]) == (
            ran["num_regs"],
            ran["local_size_bytes"],
        ), d


def test_written_programs_take_the_compilers_registers_where_the_table_has_them():
    """128 x 48 with 8 warps at d = 64: the register line says 138 (one CTA an SM), the
    compiler 127 (two): a written program runs with the compiler's count unless it is priced as
    a tiling never compiled (``written_programs``), which keeps the line."""
    shape = flashio.AttentionShape(4, 16, 4096, 64, "bf16")
    sched = flashio.schedule("flash2", shape, 128, 48, 8)
    assert issue.lookup(sched.meta.params, "flash2_fwd", 8) is None  # not in the census
    compiled = issue.written_registers("flashio", 128, 48, 64, 8)
    line = issue.written_registers("flashio", 128, 48, 64, 8, hold_out=True)
    assert (compiled.source, compiled.registers) == ("compiler", 127)
    assert (line.source, line.registers) == ("register line", 138)
    occ = flashio.simulate(sched, GPU, options=ModelOptions(issue_model=True)).kernels[0]
    held = flashio.simulate(
        sched, GPU, options=ModelOptions(issue_model=True, written_programs=True)
    )
    assert occ.occupancy.ctas_per_sm == 2 and held.kernels[0].occupancy.ctas_per_sm == 1
