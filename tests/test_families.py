"""The time model against other implementations' kernels it was never fitted to.

The bounds are the achieved values of docs/validation.md ("By implementation"), rounded up to
the next percent: the simulation is deterministic (the same events, float64 arithmetic in a
fixed order, the replay in whole cycles), so they hold on any machine, and they catch a model
change that makes these predictions worse.
"""

import pytest

from analysis import families


@pytest.fixture(scope="module")
def fa2():
    return families.report(families=("flash-attn2",))


def test_flash_attn2_forward_and_backward_within_their_bounds(fa2):
    fwd = fa2["summary"]["flash-attn2 flash2"]
    bwd = fa2["summary"]["flash-attn2 flash2_bwd"]
    assert fwd["n"] == 16 and bwd["n"] == 19
    assert fwd["mape"] <= 0.05 and fwd["max_error"] <= 0.10
    assert bwd["mape"] <= 0.06 and bwd["max_error"] <= 0.11


def test_rows_say_what_was_compared(fa2):
    for r in fa2["rows"]:
        assert r["family"] == "flash-attn2"
        assert r["error"] == pytest.approx(r["predicted_s"] / r["measured_s"] - 1)
    assert set(fa2["not_modelled"]) == {"flex", "torch_cudnn", "torch_eager"}
    assert "flash-attn2 flash2 | 16 |" in families.markdown(fa2)
