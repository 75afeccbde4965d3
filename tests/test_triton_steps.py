"""The Triton forward's key-block step over N (analysis.validation.triton_steps: an H100 SXM under
Nsight Compute, data/gpu/runs/triton_scaling_run.sh), against the replay."""

import pytest

from flashio.analysis.validation import triton_steps


@pytest.fixture(scope="module")
def rows():
    """gpu_steps's rows, each with the replay's cycles a step (``replay``)."""
    rows = triton_steps.gpu_steps()
    for r, p in zip(rows, triton_steps.replay_steps(rows), strict=True):
        r["replay"] = p
    return rows


def _by(rows, d, tiling):
    return {r["seq_len"]: r for r in rows if r["head_dim"] == d and
            (r["block_q"], r["block_kv"], r["warps"], r["stages"]) == tiling}  # fmt: skip


def test_the_run_holds_every_configuration(rows):
    assert len(rows) == 30
    assert {r["seq_len"] for r in rows if r["head_dim"] == 128} == {2048, 4096, 8192, 16384}
    assert all(r["ms"] > 0 and 0.5 < r["l2_hit"] < 1.05 for r in rows)


def test_the_two_stage_step_waits_for_the_l2_at_short_n(rows):
    """Triton's 128x64 tiling with 8 warps and 2 stages (one CTA an SM at d = 128) waits at the
    top of each step for the copies it issued, behind its P V wgmma, at the end of the last.
    From N = 2048 to 16384 its step falls from 3,011 to 2,231 cycles (26%) with the same
    instructions (3,106 -> 2,922: the CTA's own code spread over more steps), as the L2's
    sector hit rate rises from 71% to 100% and its warps' long-scoreboard stalls fall from
    2.17 to 1.32 an instruction (at short N most heads start within a wave, its CTAs asking
    for each K and V block while the L2 fills it; at long N a head spans waves, and the later
    ones find its blocks in the L2). The prefetching tilings (3 stages, no spills) fall 15%
    over the same N. The replay, which issues the copies at each step's last product as the
    machine code does (``sass_paths.copies_behind_product``), falls 9% (2,361 -> 2,137): short
    at every N, 22% at 2048 and 4% at 16384, as it is 3-13% short of the prefetching
    tilings' at every N (not a lone tile's copy, which tile_copy.py times at about the
    replay's: docs/validation.md, "By implementation"). Before,
    with the loads where the trace has them, it fell 7% (2,942 -> 2,735), right at N <= 4096
    and 23% long at 16384."""
    two = _by(rows, 128, (128, 64, 8, 2))
    gpu = two[16384]["cycles_per_step"] / two[2048]["cycles_per_step"]
    model = two[16384]["replay"] / two[2048]["replay"]
    assert gpu < 0.76 and model < 0.95
    inst = two[16384]["instructions_per_step"] / two[2048]["instructions_per_step"]
    assert 0.92 < inst <= 1.0
    assert two[2048]["l2_hit"] < 0.75 and two[16384]["l2_hit"] > 0.99
    assert two[16384]["long_scoreboard"] < 0.65 * two[2048]["long_scoreboard"]
    for n, r in two.items():
        assert 0.75 < r["replay"] / r["cycles_per_step"] < 1.0, n
    for tiling in ((128, 128, 8, 3), (64, 64, 4, 3), (64, 128, 4, 3)):
        pre = _by(rows, 128, tiling)
        assert 0.84 < pre[16384]["cycles_per_step"] / pre[2048]["cycles_per_step"] < 0.9
        assert all(0.85 < r["replay"] / r["cycles_per_step"] < 1.0 for r in pre.values())


def test_the_64x64_tiling_runs_at_the_l2_slices_limit():
    """The L2's slices serve Triton's 64x64, 4-warp tiling more bytes a second than any other
    tiling at every shape, 5.9-6.4 TB/s at N >= 8192: near what ld.global.cg reads of distinct
    lines reach (6.9-7.0 TB/s, data/gpu/probe/probe.json), half the spec's 13.87 TB/s, and no
    tiling beyond 7.0. Its SMs receive more than the slices serve (up to 7.8 TB/s): part of it
    was served once for several SMs. The one tiling the families find too fast at nearly every
    shape (docs/model.md, "The L2's rate is that of shared lines")."""
    rows = triton_steps.gpu_steps()
    assert all(r["l2_slice_tb_s"] < 7.0 for r in rows)
    for d, n in {(r["head_dim"], r["seq_len"]) for r in rows}:
        shape = [r for r in rows if (r["head_dim"], r["seq_len"]) == (d, n)]
        top = max(shape, key=lambda r: r["l2_slice_tb_s"])
        assert (top["block_q"], top["block_kv"], top["warps"]) == (64, 64, 4), (d, n)
        assert top["delivered_tb_s"] > top["l2_slice_tb_s"], (d, n)
        if n >= 8192:
            assert top["l2_slice_tb_s"] > 5.8, (d, n)
