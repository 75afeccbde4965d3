"""User GPU spec files and load_gpu: inheritance, the conversion of old chip totals, and the
errors that name the file and the key."""

import re
from pathlib import Path

import pytest

from flashio.simulator.gpu import DERIVED, GPUSpec, GPUSpecError
from flashio.simulator.specfiles import builtin_gpus, load_gpu
from tests._spec_util import BUILTINS, OLD_CHIP_TOTALS, approx, differences, write_spec


@pytest.fixture(scope="module")
def h200() -> GPUSpec:
    return load_gpu("h200")


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
    assert differences(gpu, h200) == {
        "name": "c",
        "description": "derived from sub/b.toml",
        "sm_count": 100,
        "clock_hz": 1e9,
        "hbm_bytes": 10**9,
    }


_NEW_KEYS = {stored for stored, _ in DERIVED.values()} | {
    "l2_partitions",
    "sm_memory_bytes_per_cycle_per_sm",
    "l1_bytes_per_sm",
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
        assert getattr(gpu, key) == approx(value), key
    # the old model: one L2 partition, and an SM may draw the whole L2's bandwidth
    assert gpu.l2_partitions == 1
    assert gpu.l2_bandwidth_bytes_per_cycle_per_partition == approx(5120)
    assert gpu.sm_memory_bytes_per_cycle_per_sm == approx(5120)
    assert "sm_memory_bytes_per_cycle_per_sm = 5120 (the whole L2's)" in message
    for stored, count in DERIVED.values():  # h200's per-SM rates; its 2 partitions as one
        scale = h200.l2_partitions if count == "l2_partitions" else 1
        assert getattr(gpu, stored) == approx(getattr(h200, stored) * scale), stored
    assert not any(k in message for k in ("l2_bytes", "hbm_"))
    assert gpu.l1_bytes_per_sm == 0  # optional: not known, no spill reload hits L1


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
    assert gpu.tensor_bf16_flops_per_s == approx(500e12)
    assert gpu.l2_bandwidth_bytes_per_s == approx(8e12)
    assert gpu.tensor_bf16_flops_per_cycle_per_sm == approx(500e12 / (100 * 1.98e9))
    assert gpu.l2_bandwidth_bytes_per_cycle_per_partition == approx(8e12 / (2 * 1.98e9))
    assert gpu.l2_partitions == 2
    # what the file does not set is h200's, per SM: its chip totals scale with the 100 SMs
    assert gpu.sm_memory_bytes_per_cycle_per_sm == h200.sm_memory_bytes_per_cycle_per_sm
    assert gpu.tensor_fp16_flops_per_cycle_per_sm == h200.tensor_fp16_flops_per_cycle_per_sm
    assert gpu.tensor_fp16_flops_per_s == approx(989e12 * 100 / 132)


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
    assert differences(gpu, h200).keys() == {"name", "description", "l2_bytes"}
    assert gpu.l2_bytes == 0
    assert str(builtin_gpus()) in docs  # the listing shown in the docs is current
