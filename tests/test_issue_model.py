"""The issue model: SASS control information, the warp replay, and the engine pricing steps by it.

The replay is checked on programs whose cycle counts follow by hand from the model's rules
(issue slot, stall counts, scoreboards, pipes, shared-memory port, barriers), exactly: all its
quantities are integers or exact binary fractions of the cycle, so no tolerance is needed.
"""

import numpy as np
import pytest

import simulator
from benchmarks import sass_census
from kernels import AttentionShape, schedule
from simulator import issue, sass
from simulator.sass import CLASS_ID, NO_BARRIER, WarpProgram
from simulator.simulate import ModelOptions
from simulator.warp_replay import IssueModel, replay
from tests._sim_common import REL
from tests.oracle_sim import simulate_oracle
from tests.test_simulator_oracle import assert_agrees

# a listing in cuobjdump -sass's layout: the LDC control words are from flash2_fwd's sm_90 code,
# the HMMA and BRA ones composed for the test (HMMA: stall 15, waits for scoreboard 1)
LISTING = """
        Function : flash2_fwd
    /*0000*/  LDC R1, c[0x0][0x28] ;  /* 0x00000a00ff017b82 */
        /* 0x000fe20000000800 */
    /*0010*/  LDC R9, c[0x0][0x23c] ;  /* 0x00008f00ff097b82 */
        /* 0x000e620000000800 */
    /*0020*/  HMMA.16816.F32.BF16 R4, R8, R12, R4 ;  /* 0x0000000c0804723c */
        /* 0x002fde0000041804 */
    /*0030*/  @P0 BRA 0x20 ;  /* 0xfffffffc00f00947 */
        /* 0x000fea000383ffff */
    /*0040*/  EXIT ;  /* 0x000000000000794d */
        /* 0x000fea0003800000 */
"""


def test_control_information_is_decoded():
    code = sass.parse(LISTING)["flash2_fwd"]
    ldc0, ldc1, hmma, bra, _ = code
    assert (ldc0.stall, ldc0.write_barrier, ldc0.read_barrier, ldc0.wait_mask) == (1, 7, 7, 0)
    assert (ldc1.stall, ldc1.write_barrier, ldc1.wait_mask) == (1, 1, 0)  # sets scoreboard 1
    assert hmma.opcode == "HMMA.16816.F32.BF16" and hmma.klass == "hmma"
    assert (hmma.stall, hmma.wait_mask) == (15, 0b10)  # waits for scoreboard 1
    assert bra.predicated and bra.klass == "control"
    # the loop is the backward branch to 0x20: HMMA and the branch
    lo, hi = sass.main_loop(code)
    assert [c.opcode for c in sass.straight_path(code, lo, hi)] == ["HMMA.16816.F32.BF16", "BRA"]


@pytest.mark.parametrize(
    ("opcode", "klass", "nbytes"),
    [
        ("LDSM.16.M88.4", "ldsm", 512),
        ("LDSM.16.MT88.2", "ldsm", 256),
        ("LDS.128", "lds", 512),
        ("LDS.U16", "lds", 64),
        ("STS.64", "sts", 256),
        ("LDGSTS.E.BYPASS.128", "ldgsts", 512),
        ("SHFL.BFLY", "shfl", 128),
        ("MUFU.EX2", "mufu", 0),
        ("IMAD.WIDE", "imad", 0),
        ("FMNMX", "alu", 0),
        ("ULDC.64", "uniform", 0),
        ("HGMMA.64x128x16.F32.BF16", "hgmma", 0),
        ("LDL.64", "local", 0),
        ("LDG.E.STRONG.GPU", "global", 0),
    ],
)
def test_classes_and_shared_bytes(opcode, klass, nbytes):
    ins = sass.Instruction(0, opcode, "", False, 1, False, 7, 7, 0)
    assert sass.classify(opcode) == klass
    assert sass.shared_bytes(ins) == nbytes


def test_spill_bytes_per_warp():
    ins = sass.Instruction(0, "STL.128", "", False, 1, False, 7, 7, 0)
    assert sass.local_bytes(ins) == (512, 0)
    ins = sass.Instruction(0, "LDL", "", False, 1, False, 1, 7, 0)
    assert sass.local_bytes(ins) == (0, 128)


def _prog(rows):
    """A WarpProgram from (class, stall, write barrier, read barrier, wait mask, bytes) rows."""
    a = np.array(rows, np.int64).reshape(-1, 6)
    return WarpProgram("hand", a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4], a[:, 5])


MODEL = IssueModel(
    interval={"fma": 1.0, "alu": 2.0, "hmma": 8.0, "mufu": 8.0},
    latency={"mufu": 20.0, "lds": 30.0},
    read_latency=4.0,
    smem_bytes_per_cycle_per_sm=128.0,
    bar_latency=10.0,
)
N = NO_BARRIER
FMA, ALU, HMMA, MUFU, LDS, BAR = (
    CLASS_ID[c] for c in ("fma", "alu", "hmma", "mufu", "lds", "bar")
)


def test_stall_counts_and_pipes_by_hand():
    # 10 FFMAs with stall 1: one per cycle; with stall 3: 3 cycles each
    assert replay(_prog([(FMA, 1, N, N, 0, 0)] * 10), MODEL, 1).alone == 10
    assert replay(_prog([(FMA, 3, N, N, 0, 0)] * 10), MODEL, 1).alone == 30
    # ALU instructions occupy their pipe 2 cycles: one warp issues every other cycle
    assert replay(_prog([(ALU, 1, N, N, 0, 0)] * 10), MODEL, 1).alone == 20
    # 8 warps per CTA = 2 per sub-partition: twice the pipe time per step
    assert replay(_prog([(HMMA, 1, N, N, 0, 0)] * 10), MODEL, 8).alone == 160


def test_scoreboard_waits_by_hand():
    # MUFU writes scoreboard 0; the FFMA waiting on it issues 20 cycles after it
    rows = [(MUFU, 1, 0, N, 0, 0), (FMA, 1, N, N, 0b1, 0)]
    assert replay(_prog(rows), MODEL, 1).alone == 21
    # LDS of 512 B: 16 cycles of a quarter of the 128 B/cycle port; the next LDS waits for it
    rows = [(LDS, 1, N, N, 0, 512)] * 4
    assert replay(_prog(rows), MODEL, 1).alone == 64


def test_barrier_and_latency_hiding_by_hand():
    rows = [(MUFU, 1, 0, N, 0, 0), (FMA, 1, N, N, 0b1, 0), (BAR, 1, N, N, 0, 0)]
    # one warp: 21 cycles to the barrier's issue, then 10 before the next step's first issue
    assert replay(_prog(rows), MODEL, 1).alone == 21 + 1 + 10 - 1
    # two CTAs of one warp: the second hides its MUFU latency under the first's
    st = replay(_prog(rows), MODEL, 1, ctas=2)
    assert st.together < 2 * st.alone


def test_more_ctas_share_the_pipes():
    prog = _prog([(HMMA, 1, N, N, 0, 0)] * 16)
    st = replay(prog, MODEL, 4, ctas=3)
    assert st.alone == 16 * 8
    assert st.together == 3 * 16 * 8  # the tensor pipe is the bound
    assert st.pipe_busy["tensor"] == pytest.approx(1.0, rel=0.02)  # warm-up and drain


def test_census_programs_load_and_count():
    prog = issue._program(issue.program_key("flash2_fwd", 64, 128, 128, 8, "bf16"))
    assert prog is not None
    n = prog.counts()
    # per warp and step: QK^T 16 rows x 128 keys x d 64 and PV, in m16n8k16 instructions
    assert n["hmma"] == 2 * (128 // 8) * (64 // 16)
    # one exp per score (16 x 128 / 32 per thread) and two rescale factors per thread
    assert n["mufu"] == 16 * 128 // 32 + 2
    assert prog.shared_bytes.sum() > 0


@pytest.mark.skipif(
    not sass_census.have_tools(),
    reason="needs nvcc and cuobjdump (pip install nvidia-cuda-nvcc nvidia-cuda-cuobjdump)",
)
def test_committed_census_is_what_the_sources_compile_to():
    progs = sass_census.census(sass_census.CONFIGS[:2], ("bf16",), log=lambda *_: None)
    committed = issue.census()
    for key, prog in progs.items():
        assert committed[key] == prog, key


def _small_flash2():
    shape = AttentionShape(batch=1, heads=2, seq_len=256, head_dim=64, dtype="bf16")
    return schedule("flash2", shape, block_q=64, block_kv=64, warps=4)


def test_engine_prices_steps_by_the_replay_and_agrees_with_the_oracle():
    sched = _small_flash2()
    gpu = simulator.load_gpu("h200")
    opts = ModelOptions(issue_model=True, prefetch_kernels=("flash2_fwd",))
    res = simulator.simulate(sched, gpu, options=opts)
    assert_agrees(res, simulate_oracle(sched.trace(), gpu, opts))
    occ = simulator.occupancy(sched.meta.kernels[0], gpu)
    step = issue.step_costs(
        gpu, issue.program_key("flash2_fwd", 64, 64, 64, 4, "bf16"), 4, occ.ctas_per_sm
    )
    # every CTA runs 4 steps of at least the replayed duration
    assert res.kernels[0].time_s >= 4 * step.duration_s * (1 - REL)
    base = simulator.simulate(sched, gpu, options=ModelOptions(prefetch_kernels=("flash2_fwd",)))
    # the issue model changes time only
    for f in ("global_read_bytes", "global_write_bytes", "hbm_read_bytes", "hbm_write_bytes"):
        assert getattr(res, f) == getattr(base, f), f


def test_kernels_outside_the_census_keep_the_pipe_rates():
    shape = AttentionShape(batch=1, heads=2, seq_len=256, head_dim=64, dtype="bf16")
    sched = schedule("flash2", shape, block_q=48, block_kv=48, warps=3)  # never compiled
    gpu = simulator.load_gpu("h200")
    on = simulator.simulate(sched, gpu, options=ModelOptions(issue_model=True))
    off = simulator.simulate(sched, gpu, options=ModelOptions())
    assert on.time_s == off.time_s


# --------------------------------------------------------------- the measured ISA and data


def test_isa_table_is_the_probe_summary():
    """HOPPER_ISA holds what data/gpu/probe/isa.json measured (rounded as written there)."""
    import json
    from pathlib import Path

    probe = json.loads(Path("data/gpu/probe/isa.json").read_text())["classes"]
    isa = issue.HOPPER_ISA
    lat = dict(isa["latency"])
    assert lat["mufu"] == probe["mufu_ex2"]["latency_cycles"]
    assert lat["ldsm"] == probe["ldsm_x4"]["latency_cycles"]
    assert lat["lds"] == probe["lds128"]["latency_cycles"]
    assert lat["shfl"] == probe["shfl_bfly"]["latency_cycles"]
    wg = probe["wgmma_n128"]
    assert lat["hgmma"] == pytest.approx(wg["latency_cycles"] - round(wg["issue_cycles_per_smsp"]))
    # ALU-class instructions: 2 cycles per warp instruction per sub-partition (to 2%)
    for name in ("fmnmx", "iadd3", "lop3", "imad", "f2fp_bf16"):
        assert probe[name]["issue_cycles_per_smsp"] == pytest.approx(
            4 * 32 / isa["alu_ops_per_cycle_per_sm"], rel=0.02
        ), name
    hmma = 4096 / probe["hmma_bf16"]["issue_cycles_per_smsp"] * 4  # FLOP/cycle/SM
    wgmma = 2 * 64 * 128 * 16 / 4 / probe["wgmma_n128"]["issue_cycles_per_smsp"] * 4
    assert isa["mma_sync_fraction"] == pytest.approx(hmma / wgmma, rel=0.01)
    bars = probe["bar_sync"]["by_warps"]
    for w, row in bars.items():
        w = int(w)
        assert row["cycles_per_barrier"] == pytest.approx(
            isa["bar_cycles_base"] + isa["bar_cycles_per_warp"] * w + -(-w // 4)
        )


def _ncu_instructions():
    """Per profiled launch of data/gpu/ncu_inst.csv: kernel, grid, instructions, HMMAs."""
    from pathlib import Path

    from analysis.gpu_data import parse_ncu_csv

    return parse_ncu_csv(Path("data/gpu/ncu_inst.csv").read_text())


def test_census_counts_the_instructions_the_gpu_executed():
    """The census's instructions per warp and step, times the steps and warps of each profiled
    launch, against Nsight Compute's count of executed warp instructions (data/gpu/
    ncu_inst.csv: the launches of data/gpu/ncu_launches.json of the kernels it profiled, in
    order). The census holds the main loop only, so the GPU executes more (prologue,
    epilogue), by less than 12% for these kernels of 32..64 steps. The forward's loop is
    straight-line code; the backward's has guarded stores whose branches the census falls
    through and the GPU may skip, so there the GPU may also execute a few percent fewer (3%
    allowed). HMMAs are counted exactly: every step is full."""
    import json
    from pathlib import Path

    profiled = ("flash2_fwd", "flash2_bwd", "std_qk", "std_pv")  # the ncu -k filter
    launches = json.loads(Path("data/gpu/ncu_launches.json").read_text())["launches"]
    order = [ln for ln in launches if ln["kernel"] in profiled]
    profiles = _ncu_instructions()
    assert [ln["kernel"] for ln in order] == [p["kernel"] for p in profiles]
    checked = []
    for ln, prof in zip(order, profiles, strict=True):
        kernel, m = ln["kernel"], prof["metrics"]
        if kernel not in ("flash2_fwd", "flash2_bwd") or "shape" not in ln or ln["causal"]:
            continue  # the forward run for a backward's inputs has no shape of its own
        _, _, n, d = ln["shape"]
        bq, bk, w = ln["tiles"]
        prog = issue._program(issue.program_key(kernel, d, bq, bk, w, "bf16"))
        steps = n // bk if kernel == "flash2_fwd" else n // bq
        warp_steps = ln["ctas"] * steps * w
        assert m["sm__inst_executed_pipe_tensor_op_hmma.sum"] == warp_steps * prog.counts()["hmma"]
        ratio = m["smsp__inst_executed.sum"] / (warp_steps * len(prog))
        low = 1.0 if kernel == "flash2_fwd" else 0.97
        assert low <= ratio < 1.12, (kernel, ln["tiles"], ratio)
        checked.append(kernel)
    assert checked.count("flash2_fwd") >= 3 and "flash2_bwd" in checked


def test_wgmma_groups_by_hand():
    """Two HGMMAs of 1024 FLOP at 64 FLOP/cycle hold the tensor pipe 16 cycles each, queued
    (issue does not wait); the second commits the group, which lands 10 cycles after the pipe
    finishes it; the wait issues then, and the next step begins."""
    model = IssueModel(
        interval={},
        latency={"hgmma": 10.0},
        read_latency=4.0,
        smem_bytes_per_cycle_per_sm=128.0,
        bar_latency=0.0,
        tensor_flops_per_cycle={"hgmma": 64.0},
    )
    hg, ctl = CLASS_ID["hgmma"], CLASS_ID["control"]
    a = np.array([[hg, 1, N, N, 0, 0], [hg, 1, N, N, 0, 0], [ctl, 1, N, N, 0, 0]], np.int64)
    prog = WarpProgram(
        "hand", a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4], a[:, 5],
        tensor_flops=np.array([1024, 1024, 0]), group=np.array([0, 1, -2]),
    )  # fmt: skip
    # per step: HGMMA at t, t+1; the pipe busy t..t+32; results at t+42; the wait issues at
    # t+42 and the next step's first HGMMA at t+43
    assert replay(prog, model, 4).alone == 43
