"""A simulation's timeline as trace-event JSON (simulator.perfetto): the file loads back, holds
one slice per CTA on a track of its SM, no two slices of a track overlap, and its counters add
up to the result's bytes."""

import itertools
import json

import numpy as np
import pytest

from flashio import kernels, simulator
from flashio.analysis.cli.main import main
from flashio.simulator import perfetto

GPU = simulator.load_gpu("h200-measured")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    shape = kernels.AttentionShape(1, 4, 1024, 64, "fp16", causal=True)
    sched = kernels.schedule("flash2_bwd", shape, 64, 64, 4)
    res = simulator.simulate(sched, GPU, timeline=True)
    path = perfetto.write(res, sched, tmp_path_factory.mktemp("p") / "t.json")
    return sched, res, json.loads(path.read_text())


def test_one_slice_per_cta_on_its_sms_track(run):
    sched, res, doc = run
    ev = doc["traceEvents"]
    slices = [e for e in ev if e["ph"] == "X" and e["cat"] == "cta"]
    assert len(slices) == sum(k.ctas for k in sched.kernels)
    names = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e.get("pid") == 1
             and "tid" in e}  # fmt: skip
    t0 = min(float(s[:, 0].min()) for s in res.timeline)
    by_kernel = {}
    for e in slices:
        by_kernel.setdefault(e["name"], []).append(e)
    for kres, span in zip(res.kernels, res.timeline, strict=True):
        got = sorted(by_kernel[kres.name], key=lambda e: e["args"]["cta"])
        assert [e["args"]["cta"] for e in got] == list(range(kres.ctas))
        for e, (start, end, sm) in zip(got, span, strict=True):
            assert e["ts"] == pytest.approx((start - t0) * 1e6, abs=1e-6)
            assert e["dur"] == pytest.approx((end - start) * 1e6, abs=1e-6)
            assert names[e["tid"]].startswith(f"SM {int(sm)} slot ")
    tracks = {}
    for e in slices:
        tracks.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in tracks.values():  # a slot runs one CTA at a time
        spans.sort()
        assert all(a[1] <= b[0] + 1e-6 for a, b in itertools.pairwise(spans))
    slots = {names[t].split(" slot ")[1] for t in tracks}
    assert max(int(s) for s in slots) < max(k.occupancy.ctas_per_sm for k in res.kernels)


def test_counters_add_up_to_the_results_bytes(run):
    _, res, doc = run
    ev = doc["traceEvents"]
    cta = [e for e in ev if e["ph"] == "X" and e["cat"] == "cta"]
    assert sum(e["args"]["global_bytes"] for e in cta) == (
        res.global_read_bytes + res.global_write_bytes
    )
    kern = {e["name"]: e for e in ev if e["ph"] == "X" and e["cat"] == "kernel"}
    # the HBM counter integrates to the bytes moved by the last CTA's end: the run's HBM bytes
    # but for dirty lines the L2 still held then (written back later, or never)
    hbm = [e for e in ev if e["ph"] == "C" and e["name"] == "HBM GB/s"]
    per = np.array([e["args"]["GB/s"] for e in hbm]).reshape(len(res.kernels), perfetto.BINS + 1)
    moved = sum(row[:-1].sum() * kern[k.name]["dur"] / perfetto.BINS * 1e3
                for row, k in zip(per, res.kernels, strict=True))  # fmt: skip
    last = res.memory_timeline[-1]
    assert moved == pytest.approx(last[:, 1].max(), rel=1e-3)
    total = res.hbm_read_bytes + res.hbm_write_bytes
    assert total - res.l2_dirty_bytes_at_end <= last[:, 1].max() <= total
    for memory in res.memory_timeline:  # what the L2 holds fits in it; dirty lines are held
        assert (memory[:, 2] <= GPU.l2_bytes).all() and (memory[:, 3] <= memory[:, 2]).all()
    dirty = [e["args"]["MB"] for e in ev if e["ph"] == "C" and e["name"] == "L2 dirty MB"]
    assert max(dirty) > 0  # the backward's dQ accumulation and dK, dV stores dirty the L2
    # the global counter, sample by sample, integrates to each kernel's global bytes
    glob = [e for e in ev if e["ph"] == "C" and e["name"] == "global traffic GB/s"]
    per = np.array([e["args"]["GB/s"] for e in glob]).reshape(len(res.kernels), perfetto.BINS)
    for row, kres in zip(per, res.kernels, strict=True):
        width_us = kern[kres.name]["dur"] / perfetto.BINS
        got = row.sum() * width_us * 1e3
        assert got == pytest.approx(kres.global_read_bytes + kres.global_write_bytes, rel=1e-3)


def test_without_a_timeline_or_too_large_it_says_what_to_do(run, monkeypatch):
    sched, res, _ = run
    plain = simulator.simulate(sched, GPU)
    with pytest.raises(simulator.UsageError, match="timeline=True"):
        perfetto.trace_events(plain, sched)
    monkeypatch.setattr(perfetto, "MAX_TIMELINE_CTAS", 10)
    with pytest.raises(simulator.UsageError, match="smaller batch"):
        perfetto.trace_events(res, sched)


def test_above_max_ctas_slices_aggregate_consecutive_ctas_of_a_slot(monkeypatch):
    # a GPU of 4 SMs, so that each slot runs many CTAs in turn
    sched = kernels.schedule("flash2", kernels.AttentionShape(1, 8, 1024, 64), 64, 64, 4)
    res = simulator.simulate(sched, GPU.replace(sm_count=4), timeline=True)
    whole = perfetto.trace_events(res, sched)
    total = sum(k.ctas for k in sched.kernels)
    monkeypatch.setattr(perfetto, "MAX_CTAS", total // 8)
    doc = perfetto.trace_events(res, sched)
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "cta"]
    group = -(-total // (total // 8))
    assert doc["otherData"]["aggregated"].startswith(f"a slice is up to {group} ")
    counts = [e["args"].get("ctas", 1) for e in slices]
    assert sum(counts) == total and max(counts) == group
    tracks = {(e["tid"]) for e in slices}
    assert len(slices) <= total // group + len(tracks) * len(sched.kernels)
    assert sum(e["args"]["global_bytes"] for e in slices) == (
        res.global_read_bytes + res.global_write_bytes
    )
    by_track = {}
    for e in slices:  # still one slice at a time per slot
        by_track.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_track.values():
        spans.sort()
        assert all(a[1] <= b[0] + 1e-6 for a, b in itertools.pairwise(spans))
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]  # not aggregated
    assert counters == [e for e in whole["traceEvents"] if e["ph"] == "C"]


def test_the_cli_writes_it(tmp_path, capsys):
    out = tmp_path / "t.json"
    argv = ["simulate", "flash2", "--heads", "2", "--seq-len", "512", "--perfetto", str(out)]
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    assert any(e["ph"] == "X" and e["cat"] == "cta" for e in doc["traceEvents"])
    assert doc["otherData"]["schedule"] == "flash2"


def test_the_cli_refuses_a_timeline_too_large_before_simulating(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(perfetto, "MAX_TIMELINE_CTAS", 10)
    out = tmp_path / "t.json"
    assert main(["simulate", "flash2", "--seq-len", "4096", "--perfetto", str(out)]) == 2
    assert "smaller batch" in capsys.readouterr().err and not out.exists()
