"""What committed GPU data record of the command that made them: no machine paths."""

import sys

from benchmarks import _common


def test_command_line_is_repo_relative_and_writes_out_as_a_variable(monkeypatch):
    """The script named from the repository root, and the device's output folder (``$OUT``
    in data/gpu/runs/*.sh) written as the variable, wherever it lies on the machine; other
    arguments as given."""
    script = _common.REPO / "data" / "gpu" / "probe" / "overlap.py"
    monkeypatch.setenv("OUT", "/some/machine/out/")
    argv = [str(script), "--out", "/some/machine/out/probe16", "-k", "x"]
    monkeypatch.setattr(sys, "argv", argv)
    assert _common.command_line() == "data/gpu/probe/overlap.py --out $OUT/probe16 -k x"
    monkeypatch.delenv("OUT")
    assert _common.command_line().endswith("--out /some/machine/out/probe16 -k x")
