"""One SM's bulk copy while the other SMs stream (data/gpu/probe/loaded_copy.py,
loaded_copy.json: an H100 SXM, whose SMs, L2 and TMA are the H200's; its HBM3 reaches about
3.2 TB/s). A copy's time under load against alone: how much of the Hopper forward's later
rounds' Q tile wait (0.9-2.2 us, about twice a lone copy: hopper_rounds.py) the load beside
it explains."""

import importlib.util
import json
from pathlib import Path

import pytest

PROBE = Path("data/gpu/probe")


@pytest.fixture(scope="module")
def cases():
    spec = importlib.util.spec_from_file_location("loaded_copy", PROBE / "loaded_copy.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    doc = json.loads((PROBE / "loaded_copy.json").read_text())
    assert doc["provenance"]["command"] == "data/gpu/probe/loaded_copy.py --out $OUT"
    rows = module.summary(doc)
    assert len(rows) == len(module.CASES) == 28
    return {(r["bytes"] >> 10, r["where"], r["background"], r["bg_ctas"]): r for r in rows}


def _slowdown(cases, kib, where, background, n):
    alone = cases[(kib, where, "none", 0)]["cycles_median"]
    return cases[(kib, where, background, n)]["cycles_median"] / alone


def test_a_copy_under_the_l2_load_of_every_other_sm_takes_at_most_two_thirds_longer(cases):
    """With 131 SMs reading the L2 at 6.7 TB/s, a copy from the L2 takes 1.65x its lone time
    at 16 KiB (561 -> 927 cycles) and 1.19x at 96 KiB, one from HBM 1.24x and 1.10x: the
    L2 load the Hopper forward's K and V copies put beside a CTA's Q tile adds a fraction of
    a lone copy, not the lone copy again that the GPU's later rounds wait."""
    rates = [cases[(16, "l2", "l2", n)]["bg_tb_per_s"] for n in (33, 66, 131)]
    assert 2.0 < rates[0] < rates[1] < rates[2] and rates[2] > 6.5  # 2.1, 4.3, 6.7 TB/s
    assert 1.5 < _slowdown(cases, 16, "l2", "l2", 131) < 1.8
    assert 1.1 < _slowdown(cases, 96, "l2", "l2", 131) < 1.3
    for kib in (16, 96):
        assert _slowdown(cases, kib, "hbm", "l2", 131) < 1.3


def test_copies_from_hbm_wait_once_hbm_nears_its_peak(cases):
    """With the other SMs reading fresh HBM, a copy from HBM takes 1.0-1.2x its lone time at
    1.4 TB/s (33 SMs), 1.2-1.3x at 2.4 TB/s (66) and 1.8-2.2x at 3.2 TB/s (131, about the
    H100's peak): the latency of a loaded memory, which climbs as its load nears the peak."""
    for kib in (16, 96):
        low, mid, high = (_slowdown(cases, kib, "hbm", "hbm", n) for n in (33, 66, 131))
        assert low < mid < high, kib
        assert low < 1.15 and mid < 1.35 and 1.7 < high < 2.3, kib
    assert 3.0 < cases[(16, "hbm", "hbm", 131)]["bg_tb_per_s"] < 3.4
