"""The block scheduler's turnaround with many CTAs an SM (data/gpu/probe/cta_dispatch.py
--many, cta_dispatch_many.json.gz: an H100 SXM, whose SMs and block scheduler are the
H200's GH100). Spinning CTAs use no pipe, so an SM's slots cycle through a CTA of span L and
an idle gap g: over the middle of a launch an SM holds c L / (L + g) CTAs and starts
c / (L + g) a microsecond, two estimates of g that must agree (``gaps``). And the engine's
charge for it: a slot idles ``cta_turnaround_s`` between CTAs (docs/model.md, "Kernels, CTAs
and occupancy")."""

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
    16: a rate, not the turnaround, bounds these CTAs (16 / (1.7 + 0.38) would be 7.7 a
    microsecond). With 4.2-us CTAs it starts 3.2 and holds 14 of 16, the turnaround's share
    (16 x 4.2 / (4.2 + 0.38) = 14.7) give or take the rate's queueing. The rate is not the
    GPU's limit (eager PyTorch's scale kernel starts 8.0 CTAs a microsecond an SM:
    docs/model.md), so the model charges none."""
    short = [g for g in spins if g["ctas_per_sm"] == 16 and g["cycles"] == 2000]
    long = [g for g in spins if g["ctas_per_sm"] == 16 and g["cycles"] == 8000]
    assert len(short) == 3 and len(long) == 3
    for g in short:
        assert 5.0 < g["mid_starts_per_us"] < 5.4 and 7.8 < g["mid_resident"] < 8.3, g
    for g in long:
        assert 3.1 < g["mid_starts_per_us"] < 3.4 and 13.8 < g["mid_resident"] < 14.4, g


def _ctas_in_one_slot(persistent: bool):
    """Three CTAs of one FFMA event each, one slot on one SM: when each starts and ends."""
    import numpy as np

    from flashio import simulator
    from flashio.simulator import EVENT_DTYPE, KernelInfo, Op, Space, TensorInfo, Trace, TraceMeta

    ev = np.zeros(3, EVENT_DTYPE)
    for c in range(3):  # (kernel, cta, step, op, tensor, ..., flops)
        ev[c] = (0, c, -1, Op.ELEMENTWISE, 0, -1, -1, 0, 1, 0, 0, 0, 10**6)
    params = {"dtype": "fp32", "persistent_kernels": ["k"] if persistent else []}
    tensors = (TensorInfo("acc", Space.REGISTERS, (32,), 4),)
    trace = Trace(ev, TraceMeta("three", params, (KernelInfo("k", 3, 4, 0, 32),), tensors))
    gpu = simulator.load_gpu("h200").replace(sm_count=1, max_ctas_per_sm=1)
    res = simulator.simulate(trace, gpu, timeline=True)
    return gpu, res.timeline[0]


def test_a_slot_idles_the_turnaround_between_ctas_but_not_in_a_persistent_grid():
    """The engine starts a slot's next CTA ``cta_turnaround_s`` (384 ns on the H200, from
    cta_dispatch.json.gz) after its last one ends; a persistent grid's CTAs follow each other
    at once (their tiles run in one launch)."""
    gpu, spans = _ctas_in_one_slot(persistent=False)
    assert gpu.cta_turnaround_s == pytest.approx(384e-9)
    for c in (1, 2):
        assert spans[c, 0] - spans[c - 1, 1] == pytest.approx(gpu.cta_turnaround_s, rel=1e-9)
    _, spans = _ctas_in_one_slot(persistent=True)
    for c in (1, 2):
        assert spans[c, 0] == pytest.approx(spans[c - 1, 1], rel=1e-12)
