"""GPUSpec, the built-in spec files and load_gpu: values, inheritance, validation and errors."""

import dataclasses
import json
import math
import re
from importlib import resources
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.gpu import DERIVED, GPUSpec, GPUSpecError
from simulator.specfiles import builtin_gpus, load_gpu

BUILTINS = ("a100-40gb", "a100-80gb", "h100-sxm", "h200", "h200-2xsram", "h200-8tbs")


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def write_spec(path: Path, **keys) -> Path:
    """Write a TOML spec file with ``keys`` (in order) and return its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{k} = {_toml_value(v)}\n" for k, v in keys.items()))
    return path


@pytest.fixture(scope="module")
def h200() -> GPUSpec:
    return load_gpu("h200")


def _approx(value):
    """Chip totals are products (per cycle x SMs x clock): equal to a few ulps."""
    return pytest.approx(value, rel=1e-12)


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


def _differences(a: GPUSpec, b: GPUSpec) -> dict:
    return {k: v for k, v in a.to_dict().items() if b.to_dict()[k] != v}


def test_hypothetical_specs_inherit_from_h200(h200):
    sram = load_gpu("h200-2xsram")
    assert _differences(sram, h200) == {
        "name": "h200-2xsram",
        "description": sram.description,
        "smem_per_sm_bytes": 2 * 233_472,
        "smem_per_cta_bytes": 2 * 232_448,
    }
    hbm = load_gpu("h200-8tbs")
    assert _differences(hbm, h200) == {
        "name": "h200-8tbs",
        "description": hbm.description,
        "hbm_bandwidth_bytes_per_s": 8e12,
    }
    assert hbm.effective_hbm_bandwidth_bytes_per_s == pytest.approx(8e12 * 0.896)


# ---------------------------------------------------------------------------- GPUSpec methods


def test_mma_flops_per_dtype(h200):
    # chip totals are per-cycle rates x SMs x clock: equal to the datasheet's up to rounding
    assert h200.mma_flops_per_s("fp16") == _approx(989e12)
    assert h200.mma_flops_per_s("bf16") == _approx(989e12)
    assert h200.mma_flops_per_s("fp32") == _approx(67e12)  # plain FP32 FMA, no TF32
    assert h200.mma_flops_per_s("fp64") == _approx(67e12)
    a100 = load_gpu("a100-40gb")
    assert a100.mma_flops_per_s("fp32") == _approx(19.5e12)
    assert a100.mma_flops_per_s("fp64") == _approx(19.5e12)
    assert a100.mma_flops_per_s("fp16") == _approx(312e12)
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


def test_l2_bytes_zero_is_the_only_zero(h200):
    assert h200.replace(l2_bytes=0).l2_bytes == 0
    with pytest.raises(GPUSpecError, match=r"l2_bytes = -128 .*integer >= 0"):
        h200.replace(l2_bytes=-128)
    with pytest.raises(GPUSpecError, match=r"sm_count = 0 .*only l2_bytes may be 0"):
        h200.replace(sm_count=0)
    with pytest.raises(GPUSpecError, match=r"kernel_launch_s = 0.0 .*positive"):
        h200.replace(kernel_launch_s=0.0)


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
    assert _differences(new, gpu).keys() <= {field}
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

# The chip totals each built-in file stored before rates were stored per SM (git history of
# simulator/specs/*.toml): the datasheets' numbers, and 16 exp2/clk/SM x SMs x clock for the SFU.
_HOPPER = {
    "tensor_fp16_flops_per_s": 989e12,  # [H200 DS], [H100 DS], dense
    "tensor_bf16_flops_per_s": 989e12,
    "tensor_tf32_flops_per_s": 494.5e12,
    "tensor_fp64_flops_per_s": 67e12,
    "fp32_flops_per_s": 67e12,
    "fp64_flops_per_s": 34e12,
    "sfu_ops_per_s": 4.18176e12,  # 16 x 132 x 1.98 GHz
    "l2_bandwidth_bytes_per_s": 1.01376e13,  # A100's 5120 B/clk x 1.98 GHz (assumed)
}
_AMPERE = {
    "tensor_fp16_flops_per_s": 312e12,  # [A100 DS], dense
    "tensor_bf16_flops_per_s": 312e12,
    "tensor_tf32_flops_per_s": 156e12,
    "tensor_fp64_flops_per_s": 19.5e12,
    "fp32_flops_per_s": 19.5e12,
    "fp64_flops_per_s": 9.7e12,
    "sfu_ops_per_s": 2.43648e12,  # 16 x 108 x 1.41 GHz
    "l2_bandwidth_bytes_per_s": 7.2192e12,  # [A100 WP] 5120 B/clk x 1.41 GHz
}
OLD_CHIP_TOTALS = {
    "a100-40gb": _AMPERE,
    "a100-80gb": _AMPERE,
    "h100-sxm": _HOPPER,
    "h200": _HOPPER,
    "h200-2xsram": _HOPPER,
    "h200-8tbs": _HOPPER,
}


def test_old_chip_totals_cover_every_builtin_and_derived_key():
    assert tuple(OLD_CHIP_TOTALS) == BUILTINS
    assert all(d.keys() == DERIVED.keys() for d in OLD_CHIP_TOTALS.values())


@pytest.mark.parametrize("name", BUILTINS)
def test_builtin_chip_totals_are_unchanged(name):
    gpu = load_gpu(name)
    for key, old in OLD_CHIP_TOTALS[name].items():
        assert getattr(gpu, key) == _approx(old), key


@pytest.mark.parametrize("name", BUILTINS)
def test_chip_totals_are_per_cycle_times_count_times_clock(name):
    gpu = load_gpu(name)
    for key, (stored, count) in DERIVED.items():
        want = getattr(gpu, stored) * getattr(gpu, count) * gpu.clock_hz
        assert getattr(gpu, key) == _approx(want), key
    assert gpu.sm_memory_bandwidth_bytes_per_s == _approx(
        gpu.sm_memory_bytes_per_cycle_per_sm * gpu.clock_hz
    )
    assert set(DERIVED).isdisjoint(GPUSpec.field_names())  # derived, never stored
    assert set(DERIVED).isdisjoint(gpu.to_dict())


def test_h200_per_sm_values(h200):
    assert h200.sm_memory_bytes_per_cycle_per_sm == 71.7  # data/gpu/probe/sm_scaling.json
    assert h200.sm_memory_bandwidth_bytes_per_s == _approx(71.7 * 1.98e9)
    assert (h200.l2_partitions, h200.l2_bandwidth_bytes_per_cycle_per_partition) == (2, 2560)


@pytest.mark.parametrize("n", [1, 8, 66, 132, 264])
def test_replace_sm_count_keeps_per_sm_rates_and_scales_chip_totals(h200, n):
    small = h200.replace(sm_count=n)
    changed = _differences(small, h200)
    assert changed.keys() <= {"sm_count"}  # no stored rate moves
    for key, (_, count) in DERIVED.items():
        scale = n / 132 if count == "sm_count" else 1.0  # the L2 is the chip's, not the SMs'
        assert getattr(small, key) == _approx(getattr(h200, key) * scale), key
    for dtype in ("fp16", "bf16", "fp32", "fp64"):
        assert small.mma_flops_per_cycle_per_sm(dtype) == h200.mma_flops_per_cycle_per_sm(dtype)
        assert small.mma_flops_per_s(dtype) == _approx(h200.mma_flops_per_s(dtype) * n / 132)
    # what each SM has, and what the chip has besides its SMs, is unchanged
    assert small.sm_memory_bandwidth_bytes_per_s == h200.sm_memory_bandwidth_bytes_per_s
    assert small.l2_bytes == h200.l2_bytes
    assert small.effective_hbm_bandwidth_bytes_per_s == h200.effective_hbm_bandwidth_bytes_per_s


def test_replace_l2_partitions_scales_only_the_l2_bandwidth(h200):
    one = h200.replace(l2_partitions=1)
    assert _differences(one, h200).keys() == {"l2_partitions"}
    assert one.l2_bandwidth_bytes_per_s == _approx(h200.l2_bandwidth_bytes_per_s / 2)
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


# ---------------------------------------------------------------------------- user spec files


def test_user_file_with_builtin_base(tmp_path, h200):
    path = write_spec(tmp_path / "mine.toml", base="h200", name="mine", l2_bytes=0)
    for arg in (path, str(path)):
        gpu = load_gpu(arg)
        assert gpu == h200.replace(name="mine", description="derived from h200", l2_bytes=0)


def test_full_user_file_without_base(tmp_path, h200):
    path = write_spec(tmp_path / "full.toml", **h200.replace(name="copy").to_dict())
    assert load_gpu(path) == h200.replace(name="copy")


def test_base_paths_are_relative_to_the_file_naming_them(tmp_path, monkeypatch, h200):
    write_spec(tmp_path / "a.toml", base="h200", name="a", sm_count=100, description="A")
    write_spec(tmp_path / "sub" / "b.toml", base="../a.toml", name="b", clock_hz=1e9)
    top = write_spec(tmp_path / "c.toml", base="sub/b.toml", name="c", hbm_bytes=10**9)
    monkeypatch.chdir(tmp_path / "sub")  # the bases must not be looked up from the cwd
    gpu = load_gpu(top)
    assert _differences(gpu, h200) == {
        "name": "c",
        "description": "derived from sub/b.toml",
        "sm_count": 100,
        "clock_hz": 1e9,
        "hbm_bytes": 10**9,
    }


_NEW_KEYS = {stored for stored, _ in DERIVED.values()} | {
    "l2_partitions",
    "sm_memory_bytes_per_cycle_per_sm",
}


def test_old_full_file_converts_chip_totals_with_a_warning(tmp_path, h200):
    """A file written before per-SM rates: chip totals, no l2_partitions, no SM memory path."""
    keys = {k: v for k, v in h200.to_dict().items() if k not in _NEW_KEYS}
    keys.update(name="old", **OLD_CHIP_TOTALS["h200"])
    path = write_spec(tmp_path / "old.toml", **keys)
    with pytest.warns(FutureWarning) as record:
        gpu = load_gpu(path)
    (warning,) = record
    message = str(warning.message)
    assert message.startswith(f"{path}: chip totals are derived now")
    assert "sm_count = 132 and clock_hz = 1980000000.0" in message
    assert "tensor_bf16_flops_per_s -> tensor_bf16_flops_per_cycle_per_sm = 3784.05" in message
    assert "Write the new keys" in message
    for key, value in OLD_CHIP_TOTALS["h200"].items():
        assert getattr(gpu, key) == _approx(value), key
    # the old model: one L2 partition, and an SM may draw the whole L2's bandwidth
    assert gpu.l2_partitions == 1
    assert gpu.l2_bandwidth_bytes_per_cycle_per_partition == _approx(5120)
    assert gpu.sm_memory_bytes_per_cycle_per_sm == _approx(5120)
    assert "sm_memory_bytes_per_cycle_per_sm = 5120 (the whole L2's)" in message
    for stored, count in DERIVED.values():  # h200's per-SM rates; its 2 partitions as one
        scale = h200.l2_partitions if count == "l2_partitions" else 1
        assert getattr(gpu, stored) == _approx(getattr(h200, stored) * scale), stored
    assert not any(k in message for k in ("l2_bytes", "hbm_"))


def test_old_keys_over_a_base_convert_with_the_files_own_counts(tmp_path, h200):
    path = write_spec(
        tmp_path / "old.toml",
        base="h200",
        name="old",
        sm_count=100,  # converted with this file's sm_count, and h200's clock and 2 partitions
        tensor_bf16_flops_per_s=500e12,
        l2_bandwidth_bytes_per_s=8e12,
    )
    with pytest.warns(FutureWarning, match=r"converted with sm_count = 100 and clock_hz"):
        gpu = load_gpu(path)
    assert gpu.tensor_bf16_flops_per_s == _approx(500e12)
    assert gpu.l2_bandwidth_bytes_per_s == _approx(8e12)
    assert gpu.tensor_bf16_flops_per_cycle_per_sm == _approx(500e12 / (100 * 1.98e9))
    assert gpu.l2_bandwidth_bytes_per_cycle_per_partition == _approx(8e12 / (2 * 1.98e9))
    assert gpu.l2_partitions == 2
    # what the file does not set is h200's, per SM: its chip totals scale with the 100 SMs
    assert gpu.sm_memory_bytes_per_cycle_per_sm == h200.sm_memory_bytes_per_cycle_per_sm
    assert gpu.tensor_fp16_flops_per_cycle_per_sm == h200.tensor_fp16_flops_per_cycle_per_sm
    assert gpu.tensor_fp16_flops_per_s == _approx(989e12 * 100 / 132)


def test_new_files_load_without_a_warning(tmp_path, h200, recwarn):
    path = write_spec(tmp_path / "full.toml", **h200.replace(name="copy").to_dict())
    load_gpu(path)
    for name in BUILTINS:
        load_gpu(name)
    assert not [w for w in recwarn if issubclass(w.category, FutureWarning)]


@pytest.mark.parametrize("key", list(DERIVED))
def test_a_file_setting_old_and_new_key_is_refused(tmp_path, key):
    stored, _ = DERIVED[key]
    path = write_spec(tmp_path / "both.toml", base="h200", name="both", **{key: 1e12, stored: 2})
    msg = _raises(path, "^" + re.escape(f"{path}: sets both {key} and {stored}; keep {stored}"))
    assert "Valid keys" not in msg


@pytest.mark.parametrize("value", [0, -1e12, "989e12", True])
def test_an_old_chip_total_must_be_positive(tmp_path, value):
    path = write_spec(tmp_path / "neg.toml", base="h200", name="neg", fp32_flops_per_s=value)
    _raises(path, re.escape(f"{path}: fp32_flops_per_s = {value!r} must be a positive number"))


def _raises(path_or_name, *patterns: str) -> str:
    with pytest.raises(GPUSpecError) as info:
        load_gpu(path_or_name)
    message = str(info.value)
    for pattern in patterns:
        assert re.search(pattern, message), (pattern, message)
    return message


def test_unknown_key_suggests_the_closest(tmp_path):
    path = write_spec(tmp_path / "u.toml", base="h200", name="u", smem_per_sm=1)
    _raises(path, re.escape(str(path)), r"unknown key 'smem_per_sm'", r"'smem_per_sm_bytes'\?")


def test_missing_keys_are_listed(tmp_path):
    path = write_spec(tmp_path / "m.toml", name="m", sm_count=4)
    msg = _raises(path, re.escape(str(path)), r"missing keys clock_hz, warp_size, ")
    assert "sm_count" not in msg.split("missing keys")[1].split(".")[0]
    path = write_spec(tmp_path / "n.toml", base="h200", sm_count=4)
    _raises(path, re.escape(str(path)), r"missing key 'name'")


@pytest.mark.parametrize(
    ("keys", "pattern"),
    [
        ({"clock_hz": "1.98 GHz"}, r"clock_hz = '1.98 GHz' \(str\) must be a positive number"),
        (
            {"l2_bytes": 6.291456e7},
            r"l2_bytes = 62914560.0 .*write the integer 62914560 \(or 62_914_560\)",
        ),
        ({"sm_count": 0}, r"sm_count = 0 .*positive integer"),
        (
            {"hbm_bandwidth_bytes_per_s": -1},
            r"hbm_bandwidth_bytes_per_s = -1 \(int\) must be a positive",
        ),
        ({"sm_count": True}, r"sm_count = True \(bool\)"),
        ({"smem_per_cta_bytes": 240_000}, r"smem_per_cta_bytes = 240000 exceeds .* 233472"),
        ({"base": 3}, r"base = 3 must be a string"),
    ],
)
def test_bad_values_name_file_and_key(tmp_path, keys, pattern):
    path = write_spec(tmp_path / "bad.toml", **{"base": "h200", "name": "bad", **keys})
    _raises(path, "^" + re.escape(f"{path}: "), pattern)


def test_error_in_a_base_names_the_base_file(tmp_path):
    base = write_spec(tmp_path / "base.toml", base="h200", name="base", warp_size=-32)
    top = write_spec(tmp_path / "top.toml", base="base.toml", name="top")
    _raises(top, "^" + re.escape(f"{base}: warp_size = -32"), re.escape(f"(loading {top})"))


def test_missing_base(tmp_path):
    path = write_spec(tmp_path / "x.toml", base="nope.toml", name="x")
    _raises(path, re.escape(f"{path}: base = 'nope.toml'"), r"no such file", r"relative")
    path = write_spec(tmp_path / "y.toml", base="h300", name="y")
    _raises(path, r"base = 'h300' is not a built-in GPU", r"a100-40gb, ", r"Did you mean 'h200'")


def test_base_loop_shows_the_chain(tmp_path):
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    write_spec(a, base="b.toml", name="a")
    write_spec(b, base="a.toml", name="b")
    _raises(a, re.escape(f"base loop: {a} -> {b} -> {a}"))
    write_spec(a, base="a.toml", name="a")
    _raises(a, re.escape(f"base loop: {a} -> {a}"))


def test_toml_syntax_error_names_the_file(tmp_path):
    path = tmp_path / "syntax.toml"
    path.write_text('name = "s"\nsm_count = = 3\n')
    _raises(path, "^" + re.escape(f"{path}: not valid TOML"), r"line 2")


def test_unknown_builtin_and_missing_file(tmp_path):
    msg = _raises("h300", r"unknown GPU 'h300'", r"Did you mean 'h200'", r"\.toml")
    assert all(name in msg for name in BUILTINS)
    with pytest.raises(ValueError, match="built-ins are"):  # GPUSpecError is a ValueError
        load_gpu("not-a-gpu")
    missing = tmp_path / "missing.toml"
    _raises(missing, re.escape(f"{missing}: no such GPU spec file"))
    _raises(str(missing), re.escape(f"{missing}: no such GPU spec file"))
    with pytest.raises(GPUSpecError, match="built-in name or a path"):
        load_gpu(200)


def test_docs_what_scales_with_what_example_runs():
    docs = (Path(__file__).parents[1] / "docs" / "gpus.md").read_text()
    section = docs.split("## What scales with what", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    exec(compile(code, "docs/gpus.md", "exec"), {})  # its asserts are the checks


def test_docs_old_spec_warning_is_the_real_one(tmp_path):
    docs = (Path(__file__).parents[1] / "docs" / "gpus.md").read_text()
    section = docs.split("## Spec files written before per-SM rates", 1)[1]
    (shown,) = re.findall(r"```text\n(.*?)```", section, re.S)
    path = write_spec(tmp_path / "old.toml", base="h200", name="old", tensor_bf16_flops_per_s=8e14)
    with pytest.warns(FutureWarning) as record:
        load_gpu(path)
    got = str(record[0].message).replace(str(path), "old.toml")
    assert " ".join(shown.split()) == got


def test_docs_example_spec_loads(tmp_path, h200):
    docs = (Path(__file__).parents[1] / "docs" / "gpus.md").read_text()
    example = re.search(r"```toml\n(.*?)```", docs, re.S).group(1)
    path = tmp_path / "my-gpu.toml"
    path.write_text(example)
    gpu = load_gpu(path)
    assert _differences(gpu, h200).keys() == {"name", "description", "l2_bytes"}
    assert gpu.l2_bytes == 0
    assert str(builtin_gpus()) in docs  # the listing shown in the docs is current
