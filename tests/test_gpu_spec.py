"""GPUSpec and the built-in spec files: values, derived chip totals, validation and errors."""

import dataclasses
import math
import re
from importlib import resources

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashio.simulator.gpu import DERIVED, GPUSpec, GPUSpecError
from flashio.simulator.specfiles import builtin_gpus, load_gpu
from tests._spec_util import BUILTINS, OLD_CHIP_TOTALS, approx, differences


@pytest.fixture(scope="module")
def h200() -> GPUSpec:
    return load_gpu("h200")


# ---------------------------------------------------------------------------- built-in specs


def test_builtin_names():
    assert builtin_gpus() == BUILTINS


@pytest.mark.parametrize("name", BUILTINS)
def test_every_builtin_loads_and_is_consistent(name):
    gpu = load_gpu(name)
    assert isinstance(gpu, GPUSpec)
    assert gpu.name == name
    assert gpu.description
    # the SFU rate in every file is 16 results/clk/SM (cc 8.0 and 9.0), x SMs x clock per chip
    assert gpu.sfu_ops_per_cycle_per_sm == 16
    assert gpu.sfu_ops_per_s == pytest.approx(16 * gpu.sm_count * gpu.clock_hz, rel=1e-12)
    assert gpu.smem_per_cta_bytes <= gpu.smem_per_sm_bytes
    assert GPUSpec(**gpu.to_dict()) == gpu


def test_builtin_values(h200):
    assert (h200.sm_count, h200.clock_hz, h200.warp_size) == (132, 1.98e9, 32)
    assert (h200.smem_per_sm_bytes, h200.smem_per_cta_bytes) == (233_472, 232_448)
    assert h200.l2_bytes == 62_914_560
    assert h200.hbm_bandwidth_bytes_per_s == 4.8e12
    assert h200.effective_hbm_bandwidth_bytes_per_s == pytest.approx(4.3e12, rel=1e-3)
    a100 = load_gpu("a100-40gb")
    assert (a100.sm_count, a100.clock_hz, a100.l2_bytes) == (108, 1.41e9, 41_943_040)
    assert (a100.smem_per_sm_bytes, a100.smem_per_cta_bytes) == (167_936, 166_912)
    assert a100.hbm_bandwidth_bytes_per_s == 1.555e12
    assert load_gpu("a100-80gb").hbm_bandwidth_bytes_per_s == 2.039e12
    h100 = load_gpu("h100-sxm")
    assert (h100.l2_bytes, h100.hbm_bandwidth_bytes_per_s) == (52_428_800, 3.35e12)
    assert isinstance(h200.l2_bytes, int) and isinstance(h200.clock_hz, float)


@pytest.mark.parametrize("name", BUILTINS)
def test_every_builtin_value_names_its_source(name):
    text = (resources.files("simulator") / "specs" / f"{name}.toml").read_text()
    for line in text.splitlines():
        key = re.match(r"\s*(\w+)\s*=", line)
        if key and key.group(1) not in ("name", "description", "base"):
            assert "#" in line and len(line.split("#", 1)[1].strip()) > 5, line


def test_hypothetical_specs_inherit_from_h200(h200):
    sram = load_gpu("h200-2xsram")
    assert differences(sram, h200) == {
        "name": "h200-2xsram",
        "description": sram.description,
        "smem_per_sm_bytes": 2 * 233_472,
        "smem_per_cta_bytes": 2 * 232_448,
        # the unified L1 grows with it: the h200's 28 KiB beside its largest carve-out stay
        "l1_bytes_per_sm": 2 * 233_472 + 256 * 1024 - 228 * 1024,
    }
    hbm = load_gpu("h200-8tbs")
    assert differences(hbm, h200) == {
        "name": "h200-8tbs",
        "description": hbm.description,
        "hbm_bandwidth_bytes_per_s": 8e12,
    }
    assert hbm.effective_hbm_bandwidth_bytes_per_s == pytest.approx(8e12 * 0.896)


# ---------------------------------------------------------------------------- GPUSpec methods


def test_mma_flops_per_dtype(h200):
    # chip totals are per-cycle rates x SMs x clock: equal to the datasheet's up to rounding
    assert h200.mma_flops_per_s("fp16") == approx(989e12)
    assert h200.mma_flops_per_s("bf16") == approx(989e12)
    assert h200.mma_flops_per_s("fp32") == approx(67e12)  # plain FP32 FMA, no TF32
    assert h200.mma_flops_per_s("fp64") == approx(67e12)
    a100 = load_gpu("a100-40gb")
    assert a100.mma_flops_per_s("fp32") == approx(19.5e12)
    assert a100.mma_flops_per_s("fp64") == approx(19.5e12)
    assert a100.mma_flops_per_s("fp16") == approx(312e12)
    for dtype, field in [
        ("fp16", "tensor_fp16_flops_per_cycle_per_sm"),
        ("bf16", "tensor_bf16_flops_per_cycle_per_sm"),
        ("fp32", "fp32_flops_per_cycle_per_sm"),
        ("fp64", "tensor_fp64_flops_per_cycle_per_sm"),
    ]:
        assert h200.mma_flops_per_cycle_per_sm(dtype) == getattr(h200, field)
        want = getattr(h200, field) * 132 * 1.98e9
        assert h200.mma_flops_per_s(dtype) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("dtype", ["tf32", "int8", "FP16", "", None, 16])
def test_mma_flops_rejects_unknown_dtype(h200, dtype):
    with pytest.raises(ValueError, match=r"dtype must be one of fp16, bf16, fp32, fp64"):
        h200.mma_flops_per_s(dtype)
    with pytest.raises(GPUSpecError, match=r"dtype must be one of fp16, bf16, fp32, fp64"):
        h200.mma_flops_per_cycle_per_sm(dtype)


def test_spec_is_frozen_with_slots(h200):
    with pytest.raises(dataclasses.FrozenInstanceError):
        h200.sm_count = 1
    assert not hasattr(h200, "__dict__")


def test_cycle_conversions(h200):
    assert h200.cycles_to_s(1.98e9) == pytest.approx(1.0)
    assert h200.s_to_cycles(h200.cycles_to_s(12345)) == pytest.approx(12345)


def test_replace_returns_a_new_validated_spec(h200):
    bigger = h200.replace(smem_per_sm_bytes=2 * h200.smem_per_sm_bytes, name="h200-2x")
    assert bigger is not h200
    assert bigger.smem_per_sm_bytes == 466_944 and bigger.name == "h200-2x"
    assert h200.smem_per_sm_bytes == 233_472 and h200.name == "h200"
    with pytest.raises(GPUSpecError, match=r"smem_per_cta_bytes = 300000 exceeds"):
        h200.replace(smem_per_cta_bytes=300_000)
    assert h200.replace(clock_hz=2_000_000_000).clock_hz == 2e9
    assert isinstance(h200.replace(clock_hz=2_000_000_000).clock_hz, float)


def test_replace_rejects_unknown_field(h200):
    with pytest.raises(GPUSpecError, match=r"unknown key 'smem_per_sm'.*'smem_per_sm_bytes'"):
        h200.replace(smem_per_sm=1)
    with pytest.raises(
        GPUSpecError, match=r"Valid keys: .*hbm_efficiency.*sfu_ops_per_cycle_per_sm"
    ):
        h200.replace(bogus=1)


def test_l2_and_l1_bytes_are_the_only_zeros(h200):
    assert h200.replace(l2_bytes=0).l2_bytes == 0
    assert h200.replace(l1_bytes_per_sm=0).l1_bytes_per_sm == 0
    with pytest.raises(GPUSpecError, match=r"l2_bytes = -128 .*integer >= 0"):
        h200.replace(l2_bytes=-128)
    with pytest.raises(GPUSpecError, match=r"sm_count = 0 .*only l2_bytes, l1_bytes_per_sm"):
        h200.replace(sm_count=0)
    with pytest.raises(GPUSpecError, match=r"kernel_launch_s = 0.0 .*positive"):
        h200.replace(kernel_launch_s=0.0)


@pytest.mark.parametrize(
    ("smem_kib", "free_kib"),
    [(0, 256), (1, 248), (48, 192), (97.5, 156), (100, 156), (100.5, 124), (228, 28), (240, 16)],
)
def test_l1_left_beside_shared_memory(h200, smem_kib, free_kib):
    """The driver's carve-out is the smallest step of cc 9.0 (0, 8, 16, 32, 64, 100, 132, 164,
    196, 228 KiB) holding the shared memory; beyond the last (a hypothetical SM), the shared
    memory itself. The L1 is the rest of the 256 KiB; none where the spec gives no L1."""
    used = int(smem_kib * 1024)
    assert h200.l1_free_bytes(used) == free_kib * 1024
    assert h200.replace(l1_bytes_per_sm=0).l1_free_bytes(used) == 0


@pytest.mark.parametrize(
    ("changes", "pattern"),
    [
        ({"sm_count": True}, r"sm_count = True \(bool\) must be a positive integer"),
        ({"sm_count": 132.0}, r"sm_count = 132.0 .*not a float: write the integer 132"),
        ({"sm_count": 132.5}, r"sm_count = 132.5 .*positive integer"),
        (
            {"clock_hz": "1.98 GHz"},
            r"clock_hz = '1.98 GHz' \(str\) must be a positive number \(Hz\)",
        ),
        ({"clock_hz": math.inf}, r"clock_hz = inf .*finite"),
        ({"hbm_efficiency": 1.5}, r"hbm_efficiency = 1.5 .*in \(0, 1\]"),
        ({"name": " "}, r"name must be a non-empty string"),
        ({"description": 3}, r"description = 3 \(int\) must be a string"),
        ({"l2_line_bytes": 48}, r"l2_line_bytes = 48 must be a multiple of l2_sector_bytes = 32"),
        ({"l2_line_bytes": 96}, r"l2_line_bytes = 96 must be a power of two"),
        ({"l2_bytes": 1000}, r"l2_bytes = 1000 must be a multiple of l2_line_bytes = 128"),
        ({"max_threads_per_cta": 1000}, r"max_threads_per_cta = 1000 .*multiple of warp_size"),
        ({"max_warps_per_sm": 16}, r"max_threads_per_cta = 1024 exceeds max_warps_per_sm"),
        ({"regs_per_sm": 4096}, r"regs_per_thread_max = 255 .*exceeds regs_per_sm = 4096"),
    ],
)
def test_validation_messages(h200, changes, pattern):
    with pytest.raises(GPUSpecError, match=pattern):
        h200.replace(**changes)


_FREE_FLOAT_FIELDS = [
    f.name for f in dataclasses.fields(GPUSpec) if f.type is float and f.name != "hbm_efficiency"
]
_FREE_INT_FIELDS = [
    "sm_count",
    "hbm_bytes",
    "max_ctas_per_sm",
    "hbm_latency_cycles",
    "l2_partitions",
]


@settings(max_examples=200, deadline=None)
@given(
    field=st.sampled_from(_FREE_FLOAT_FIELDS + _FREE_INT_FIELDS),
    value=st.floats(min_value=1e-12, max_value=1e18),
)
def test_replace_with_positive_values_round_trips(field, value):
    gpu = load_gpu("h200")
    if field in _FREE_INT_FIELDS:
        value = max(1, int(value))
    new = gpu.replace(**{field: value})
    assert getattr(new, field) == value
    assert type(getattr(new, field)) is type(getattr(gpu, field))
    assert differences(new, gpu).keys() <= {field}
    assert GPUSpec(**new.to_dict()) == new
    assert gpu == load_gpu("h200")


@settings(max_examples=200, deadline=None)
@given(
    smem_sm=st.integers(min_value=-(2**20), max_value=2**21),
    smem_cta=st.integers(min_value=-(2**20), max_value=2**21),
    efficiency=st.floats(min_value=-1, max_value=2, allow_nan=False),
)
def test_replace_accepts_exactly_the_valid_values(smem_sm, smem_cta, efficiency):
    gpu = load_gpu("h200")
    valid = 0 < smem_cta <= smem_sm and 0 < efficiency <= 1
    changes = dict(
        smem_per_sm_bytes=smem_sm, smem_per_cta_bytes=smem_cta, hbm_efficiency=efficiency
    )
    if valid:
        new = gpu.replace(**changes)
        assert (new.smem_per_sm_bytes, new.smem_per_cta_bytes) == (smem_sm, smem_cta)
        assert new.effective_hbm_bandwidth_bytes_per_s == pytest.approx(4.8e12 * efficiency)
    else:
        with pytest.raises(GPUSpecError, match=r"smem_per_sm_bytes|smem_per_cta_bytes|hbm_eff"):
            gpu.replace(**changes)


# ----------------------------------------------------- chip totals, derived from stored fields


def test_old_chip_totals_cover_every_builtin_and_derived_key():
    assert tuple(OLD_CHIP_TOTALS) == BUILTINS
    assert all(d.keys() == DERIVED.keys() for d in OLD_CHIP_TOTALS.values())


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_chip_totals_are_unchanged(name):
    gpu = load_gpu(name)
    for key, old in OLD_CHIP_TOTALS[name].items():
        assert getattr(gpu, key) == approx(old), key


@pytest.mark.parametrize("name", BUILTINS)
def test_chip_totals_are_per_cycle_times_count_times_clock(name):
    gpu = load_gpu(name)
    for key, (stored, count) in DERIVED.items():
        want = getattr(gpu, stored) * getattr(gpu, count) * gpu.clock_hz
        assert getattr(gpu, key) == approx(want), key
    assert gpu.sm_memory_bandwidth_bytes_per_s == approx(
        gpu.sm_memory_bytes_per_cycle_per_sm * gpu.clock_hz
    )
    assert set(DERIVED).isdisjoint(GPUSpec.field_names())  # derived, never stored
    assert set(DERIVED).isdisjoint(gpu.to_dict())


def test_h200_per_sm_values(h200):
    assert h200.sm_memory_bytes_per_cycle_per_sm == 71.7  # data/gpu/probe/sm_scaling.json
    assert h200.sm_memory_bandwidth_bytes_per_s == approx(71.7 * 1.98e9)
    assert (h200.l2_partitions, h200.l2_bandwidth_bytes_per_cycle_per_partition) == (2, 2560)


@pytest.mark.parametrize("n", [1, 8, 66, 132, 264])
def test_replace_sm_count_keeps_per_sm_rates_and_scales_chip_totals(h200, n):
    small = h200.replace(sm_count=n)
    changed = differences(small, h200)
    assert changed.keys() <= {"sm_count"}  # no stored rate moves
    for key, (_, count) in DERIVED.items():
        scale = n / 132 if count == "sm_count" else 1.0  # the L2 is the chip's, not the SMs'
        assert getattr(small, key) == approx(getattr(h200, key) * scale), key
    for dtype in ("fp16", "bf16", "fp32", "fp64"):
        assert small.mma_flops_per_cycle_per_sm(dtype) == h200.mma_flops_per_cycle_per_sm(dtype)
        assert small.mma_flops_per_s(dtype) == approx(h200.mma_flops_per_s(dtype) * n / 132)
    # what each SM has, and what the chip has besides its SMs, is unchanged
    assert small.sm_memory_bandwidth_bytes_per_s == h200.sm_memory_bandwidth_bytes_per_s
    assert small.l2_bytes == h200.l2_bytes
    assert small.effective_hbm_bandwidth_bytes_per_s == h200.effective_hbm_bandwidth_bytes_per_s


def test_replace_l2_partitions_scales_only_the_l2_bandwidth(h200):
    one = h200.replace(l2_partitions=1)
    assert differences(one, h200).keys() == {"l2_partitions"}
    assert one.l2_bandwidth_bytes_per_s == approx(h200.l2_bandwidth_bytes_per_s / 2)
    assert one.l2_bytes == h200.l2_bytes  # capacity is per chip
    for key in DERIVED.keys() - {"l2_bandwidth_bytes_per_s"}:
        assert getattr(one, key) == getattr(h200, key), key


@pytest.mark.parametrize("key", list(DERIVED))
def test_replace_refuses_a_chip_total_and_names_the_stored_key(h200, key):
    stored, count = DERIVED[key]
    pattern = rf"{key} is a chip total, derived as {stored} x {count} x clock_hz.*set {stored}"
    with pytest.raises(GPUSpecError, match=pattern) as info:
        h200.replace(**{key: 1e12})
    assert info.value.key == key


def test_replace_tensor_bf16_chip_total_points_to_the_per_sm_key(h200):
    with pytest.raises(GPUSpecError, match=r"set tensor_bf16_flops_per_cycle_per_sm instead"):
        h200.replace(tensor_bf16_flops_per_s=500e12)


def test_an_integer_field_beyond_64_bits_is_refused():
    """(a sweep's --sram-scale 1e30 made one, which Parquet then could not hold)"""
    gpu = load_gpu("h200")
    with pytest.raises(GPUSpecError, match="too large"):
        gpu.replace(smem_per_sm_bytes=2**62)
    assert gpu.replace(hbm_bytes=2**62 - 1).hbm_bytes == 2**62 - 1
