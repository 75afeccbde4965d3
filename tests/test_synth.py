"""simulator.synth: the warp program of a wgmma forward whose machine code is unknown."""

import numpy as np
import pytest

from flashio import kernels, simulator
from flashio.simulator import synth
from flashio.simulator.sass import CLASS_ID
from flashio.simulator.simulate import ModelOptions

ISSUE = ModelOptions(issue_model=True)


@pytest.mark.parametrize("overlap", ["none", "both"])
@pytest.mark.parametrize(("block_kv", "d"), [(128, 64), (176, 128), (80, 256)])
def test_program_counts_follow_the_algorithm(block_kv, d, overlap):
    """Per consumer warp and K/V block: d/16 + block_kv/16 wgmma holding the warp's quarter of
    4 * 64 * block_kv * d FLOPs; one MUFU per score of the thread's block_kv / 2 and two for the
    rescale factor; the shared-memory operand bytes of Q, K (S) and V (PV, P in registers)."""
    p = synth.flash_forward_program(block_kv, d, 2, overlap)
    n = p.counts()
    assert n["hgmma"] == d // 16 + block_kv // 16
    assert int(p.tensor_flops.sum()) == 4 * 64 * block_kv * d // 4
    assert n["mufu"] == block_kv // 2 + 2
    hg = p.klass == CLASS_ID["hgmma"]
    expected = (d // 16) * (64 + block_kv) * 16 * 2 // 4 + (block_kv // 16) * d * 16 * 2 // 4
    assert int(p.shared_bytes[hg].sum()) == expected
    # two committed groups; waits for at most 1 (S only) then 0 with the overlap, 0 twice without
    assert int((p.group == 1).sum()) == 2
    waits = sorted(int(g) for g in p.group if g < -1)
    assert waits == ([-3, -2] if overlap == "both" else [-2, -2])


def test_bad_tiles_are_refused():
    with pytest.raises(ValueError, match="multiples of 16"):
        synth.flash_forward_program(100, 64)


def test_fa3_forward_is_priced_by_its_written_program():
    """fa3 has no census: the issue model replays the written program for its forward (the
    key says so) and keeps the pipe rates for its backward; the written program makes the
    forward slower than the pipe rates' ideal overlap would and occupancy fits one CTA."""
    shape = kernels.AttentionShape(1, 16, 4096, 128, "bf16")
    fwd = simulator.simulate(kernels.schedule("flash2", shape, impl="fa3"), "h200-measured",
                             options=ISSUE)  # fmt: skip
    k = fwd.kernels[0]
    assert k.census_key.startswith("synthetic wgmma forward 176x128 both")
    assert k.occupancy.ctas_per_sm == 1 and k.occupancy.regs_per_thread == 168
    bwd = simulator.simulate(kernels.schedule("flash2_bwd", shape, impl="fa3"), "h200-measured",
                             options=ISSUE)  # fmt: skip
    assert all(r.census_key == "" for r in bwd.kernels)
    # this project's kernels keep their census programs
    own = simulator.simulate(kernels.schedule("flash2", shape, 128, 128, 8), "h200-measured",
                             options=ISSUE)  # fmt: skip
    assert own.kernels[0].census_key.startswith("flash2_fwd")


def test_intra_warpgroup_overlap_is_bounded_by_the_tensor_pipe():
    """The written programs on one SM: issuing the next S before the softmax (FA3's
    intra-warpgroup overlap) or not, the tensor pipe bounds both, and the overlap gains
    little where FFMA beside wgmma keeps a fifth of its rate (HOPPER_ISA): within 2% of each
    other. The GPU agrees that the overlap alone is no sure gain: this project's compiled
    d = 64, 192x128 builds take 2,856 cycles a step with it and 2,663 without
    (kernel_clock.cycle_parts on data/gpu/probe/hopper_cycles_ncu.csv). Each step as the
    model prices it (``synthetic_step_costs``: the program with both overlaps has no named
    barriers, so its warpgroups, which take turns, are not started apart)."""
    from flashio.simulator.issue import synthetic_step_costs

    gpu = simulator.load_gpu("h200-measured")
    t = {o: synthetic_step_costs(gpu, 128, 128, 2, o, 8, 1).replay.alone
         for o in ("none", "both")}  # fmt: skip
    per_smsp = gpu.tensor_bf16_flops_per_cycle_per_sm / gpu.sm_sub_partitions
    tensor = 2 * (4 * 64 * 128 * 128 / 4) / per_smsp  # two warps per SMSP, cycles
    assert tensor < t["both"] and tensor < t["none"]
    assert t["both"] == pytest.approx(t["none"], rel=0.02)
    assert np.isfinite(list(t.values())).all()
