"""Helpers of the GPU spec tests (tests/test_gpu_spec.py, tests/test_spec_files.py)."""

import json
from pathlib import Path

import pytest

from flashio.simulator.gpu import GPUSpec

BUILTINS = (
    "a100-40gb", "a100-80gb", "h100-sxm", "h200", "h200-2xsram", "h200-8tbs", "h200-measured"
)  # fmt: skip


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


def approx(value):
    """Chip totals are products (per cycle x SMs x clock): equal to a few ulps."""
    return pytest.approx(value, rel=1e-12)


def differences(a: GPUSpec, b: GPUSpec) -> dict:
    return {k: v for k, v in a.to_dict().items() if b.to_dict()[k] != v}


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
_SM, _CLK = 132, 1.778e9  # h200-measured: the SM clock under attention load
_MEASURED = {  # per-cycle rates of simulator/specs/h200-measured.toml x 132 SMs x 1.778 GHz
    "tensor_fp16_flops_per_s": 4087.0 * _SM * _CLK,
    "tensor_bf16_flops_per_s": 4087.0 * _SM * _CLK,
    "tensor_tf32_flops_per_s": 494.5e12 / 1.98e9 * _CLK,  # h200's per-cycle rate, kept
    "tensor_fp64_flops_per_s": 67e12 / 1.98e9 * _CLK,
    "fp32_flops_per_s": 256.0 * _SM * _CLK,  # one FFMA a cycle (was 244.3: isa.py loop overhead)
    "fp64_flops_per_s": 34e12 / 1.98e9 * _CLK,
    "sfu_ops_per_s": 16.0 * _SM * _CLK,
    "l2_bandwidth_bytes_per_s": 3899.4 * 2 * _CLK,
}
OLD_CHIP_TOTALS = {
    "a100-40gb": _AMPERE,
    "a100-80gb": _AMPERE,
    "h100-sxm": _HOPPER,
    "h200": _HOPPER,
    "h200-2xsram": _HOPPER,
    "h200-8tbs": _HOPPER,
    "h200-measured": _MEASURED,
}
