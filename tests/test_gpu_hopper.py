"""The Hopper kernels (kernels/cuda/hopper_fwd.cu and hopper_bwd.cu, run by kernels.hopper for
the ``flashio-hopper`` implementation) compute attention and its gradients under the
flash-attention error rule and write every output element, the forward with and without
ping-pong scheduling. Needs an sm_90 GPU."""

import dataclasses

import pytest

from flashio import kernels
from flashio.kernels import gpu, hopper
from tests._util import random_inputs
from tests.test_gpu_kernels import _fresh_seed, _shape, check_backward, check_forward

pytestmark = pytest.mark.gpu

OVERLAPS = ("none", "pingpong", "intra-warpgroup", "both")
# (head_dim, block_q, block_kv): the preset's tilings, 64- and 176-row key blocks, three
# consumer warpgroups
TILES = [(64, 128, 128), (128, 128, 128), (128, 128, 64), (128, 128, 176), (64, 192, 128),
         (256, 128, 64)]  # fmt: skip
# ragged N, causal with grouped heads, N below one block, one query
CASES = [(1000, False, None), (333, True, 2), (40, True, None), (1, False, 2), (2048, True, 1)]


@pytest.fixture(scope="module", autouse=True)
def _needs_sm90():
    import cupy

    if cupy.cuda.Device().compute_capability < "90":
        pytest.skip("the Hopper kernel needs an sm_90 GPU")


@pytest.mark.parametrize("overlap", OVERLAPS)
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("tiles", TILES, ids=[f"d{d}-{bq}x{bkv}" for d, bq, bkv in TILES])
@pytest.mark.parametrize(
    "case", CASES, ids=[f"n{n}{'-causal' if c else ''}-kv{k}" for n, c, k in CASES]
)
def test_hopper_forward(overlap, dtype, tiles, case):
    (d, bq, bkv), (n, causal, kvh) = tiles, case
    if overlap in ("pingpong", "both") and bq != 128:
        pytest.skip("ping-pong takes two consumer warpgroups")
    impl = hopper.description(bq, overlap)  # the build of these tiles with this overlap
    shape = _shape(d, n, causal, kvh, dtype)
    sched = kernels.schedule("flash2", shape, bq, bkv, 4 * (bq // 64 + 1), impl=impl)
    assert dict(hopper.defines(sched))["INTRA"] == (overlap in ("intra-warpgroup", "both"))
    seed = _fresh_seed()
    q, k, v = random_inputs(sched.shape, seed=seed)
    o, lse = gpu.run_schedule(sched, q, k, v)
    check_forward(o, lse, (q, k, v), causal, dtype, seed)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize(("bq", "stages"), [(128, 3), (128, 4), (192, 3)])
@pytest.mark.parametrize(
    "case", CASES, ids=[f"n{n}{'-causal' if c else ''}-kv{k}" for n, c, k in CASES]
)
def test_hopper_forward_with_more_kv_buffers(dtype, bq, stages, case):
    """d = 64 builds with three or four K and V buffers (the stage index wraps mod 3)."""
    n, causal, kvh = case
    impl = hopper.description(bq, "none", stages)
    sched = kernels.schedule("flash2", _shape(64, n, causal, kvh, dtype), bq, 128,
                             4 * (bq // 64 + 1), impl=impl)  # fmt: skip
    assert dict(hopper.defines(sched))["STAGES"] == stages
    seed = _fresh_seed()
    q, k, v = random_inputs(sched.shape, seed=seed)
    o, lse = gpu.run_schedule(sched, q, k, v)
    check_forward(o, lse, (q, k, v), causal, dtype, seed)


PERSISTENT_BUILDS = [(64, 128, 128, "none"), (64, 192, 128, "none"), (128, 128, 176, "both"),
                     (128, 128, 128, "pingpong"), (128, 128, 64, "intra-warpgroup")]  # fmt: skip


@pytest.mark.parametrize(
    "build", PERSISTENT_BUILDS, ids=[f"d{d}-{bq}x{bkv}-{o}" for d, bq, bkv, o in PERSISTENT_BUILDS]
)
@pytest.mark.parametrize(
    "case", CASES, ids=[f"n{n}{'-causal' if c else ''}-kv{k}" for n, c, k in CASES]
)
def test_persistent_forward(build, case):
    """The persistent build launches a CTA per SM (at most); run here on three CTAs, so that
    each takes several tiles in turn (the Q buffer, the K/V buffers' rounds and the ping-pong
    turns carried from tile to tile), against the float64 reference."""
    import cupy

    (d, bq, bkv, overlap), (n, causal, kvh) = build, case
    impl = hopper.description(bq, overlap, persistent=True)
    sched = kernels.schedule("flash2", _shape(d, n, causal, kvh, "bf16"), bq, bkv,
                             4 * (bq // 64 + 1), impl=impl)  # fmt: skip
    assert dict(hopper.defines(sched))["PERSISTENT"] == 1
    comp = gpu.compile_schedule(sched)
    (ln,) = comp.launches
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    assert ln.grid == min(sched.kernels[0].ctas, sms)
    few = dataclasses.replace(comp, launches=(dataclasses.replace(ln, grid=min(3, ln.grid)),))
    seed = _fresh_seed()
    q, k, v = random_inputs(sched.shape, seed=seed)
    bufs = few.alloc(q, k, v)
    few.launch(bufs)
    cupy.cuda.get_current_stream().synchronize()
    o, lse = few.outputs(bufs)
    check_forward(o, lse, (q, k, v), causal, "bf16", seed)


@pytest.mark.parametrize(
    ("d", "n", "tiles"),
    [(64, 1000, (128, 128, 12)), (64, 16384, (192, 128, 16)), (128, 1000, (128, 176, 12))],
)
def test_the_presets_tiles_run_and_launch_as_the_schedule_says(d, n, tiles):
    sched = kernels.schedule("flash2", _shape(d, n, True, 2, "bf16"), impl="flashio-hopper")
    assert (sched.block_q, sched.block_kv, sched.warps) == tiles
    (ln,) = gpu.compile_schedule(sched).launches
    assert (ln.grid, ln.block) == (sched.kernels[0].ctas, sched.warps * 32)
    assert ln.smem_bytes == hopper.smem_bytes(*tiles[:2], d, 2)
    if n > 4096:  # the tiles and the launch at long N; numerics at the short one
        return
    seed = _fresh_seed()
    q, k, v = random_inputs(sched.shape, seed=seed)
    o, lse = gpu.run_schedule(sched, q, k, v)
    check_forward(o, lse, (q, k, v), True, "bf16", seed)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize(
    "tiles", hopper.BWD_TILES, ids=[f"d{d}-{bq}x{bkv}" for d, bq, bkv in hopper.BWD_TILES]
)
@pytest.mark.parametrize(
    "case", CASES, ids=[f"n{n}{'-causal' if c else ''}-kv{k}" for n, c, k in CASES]
)
def test_hopper_backward(dtype, tiles, case):
    """dQ, dK and dV of hopper_bwd.cu (between flash2_bwd.cu's first and last kernels) under
    the error rule, against the float64 reference and the same-precision one."""
    (d, bq, bkv), (n, causal, kvh) = tiles, case
    sched = kernels.schedule(
        "flash2_bwd", _shape(d, n, causal, kvh, dtype), bq, bkv, 4 * (bkv // 64 + 1),
        impl="flashio-hopper",
    )  # fmt: skip
    check_backward(sched)


@pytest.mark.parametrize("d", [64, 128])
def test_the_backward_presets_launch_as_the_schedule_says(d):
    sched = kernels.schedule("flash2_bwd", _shape(d, 1000, True, 2, "bf16"), impl="flashio-hopper")
    assert not hopper.hopper_errors(sched)
    comp = gpu.compile_schedule(sched)
    assert [ln.grid for ln in comp.launches] == [k.ctas for k in sched.kernels]
    assert comp.launches[1].block == sched.warps * 32
    stages = dict(hopper.defines(sched))["STAGES"]  # the preset's: 3 at d = 128
    assert stages == sched.impl.specialize("flash2_bwd", sched.shape).stages
    smem = hopper.bwd_smem_bytes(sched.block_q, sched.block_kv, d, stages)
    assert comp.launches[1].smem_bytes == smem
