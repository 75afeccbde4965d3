"""The block scheduler's turnaround with many CTAs an SM (data/gpu/probe/cta_dispatch.py
--many, cta_dispatch_many.json.gz: an H100 SXM, whose SMs and block scheduler are the
H200's GH100). Spinning CTAs use no pipe, so an SM's slots cycle through a CTA of span L and
an idle gap g: over the middle of a launch an SM holds c L / (L + g) CTAs and starts
c / (L + g) a microsecond, two estimates of g that must agree (``gaps``)."""

import gzip
import importlib.util
import json
from pathlib import Path

import pytest

PROBE = Path("data/gpu/probe")


def _probe():
    spec = importlib.util.spec_from_file_location("cta_dispatch", PROBE / "cta_dispatch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def spins():
    probe = _probe()
    doc = json.loads(gzip.decompress((PROBE / "cta_dispatch_many.json.gz").read_bytes()))
    assert doc["provenance"]["command"].endswith("--many")
    return [probe.gaps(r) | {"cycles": r["iters"]} for r in doc["launches"] if r.get("spin")]


def test_a_slot_idles_the_same_turnaround_at_one_to_four_ctas_an_sm(spins):
    """At 1, 2 and 4 spinning CTAs of about 1.1 us an SM every slot idles 378-403 ns between
    CTAs by either estimate (the H200's 1-3 CTAs of cta_dispatch.json.gz: 384 ns median),
    within 7% of each other."""
    few = [g for g in spins if g["ctas_per_sm"] <= 4]
    assert len(few) == 9
    for g in few:
        by_resident, by_starts = g["gap_from_resident_ns"], g["gap_from_starts_ns"]
        assert 370 < by_resident < 410 and 370 < by_starts < 410, g
        assert by_resident == pytest.approx(by_starts, rel=0.07)


def test_an_sm_starts_at_most_about_five_ctas_a_microsecond(spins):
    """With 16 slots an SM and 1.7-us CTAs the SM starts 5.2 CTAs a microsecond and holds 8 of
    16: the scheduler's rate, not the turnaround, bounds it (16 / (1.7 + 0.38) would be 7.7
    a microsecond). With 4.2-us CTAs it starts 3.2 and holds 14 of 16, the turnaround's
    share (16 x 4.2 / (4.2 + 0.38) = 14.7) give or take the rate's queueing."""
    short = [g for g in spins if g["ctas_per_sm"] == 16 and g["cycles"] == 2000]
    long = [g for g in spins if g["ctas_per_sm"] == 16 and g["cycles"] == 8000]
    assert len(short) == 3 and len(long) == 3
    for g in short:
        assert 5.0 < g["mid_starts_per_us"] < 5.4 and 7.8 < g["mid_resident"] < 8.3, g
    for g in long:
        assert 3.1 < g["mid_starts_per_us"] < 3.4 and 13.8 < g["mid_resident"] < 14.4, g
