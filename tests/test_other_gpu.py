"""The H100 as the model's hypothetical H200 with the H100's memory (analysis.validation.
other_gpu; docs/hypothetical-gpus.md, "A real GPU the model was not built from")."""

import dataclasses
import json

import numpy as np

from flashio.analysis.validation import families, other_gpu
from flashio.analysis.validation.calibration import load_calibration
from flashio.analysis.validation.crosscheck import crosscheck, read_timings


def test_the_twin_takes_only_the_other_gpus_memory():
    cal = load_calibration()
    twin = other_gpu.twin("h100-sxm", cal)
    assert twin.options == cal.options and twin.harness == cal.harness
    changed = {
        f.name
        for f in dataclasses.fields(cal.gpu)
        if getattr(twin.gpu, f.name) != getattr(cal.gpu, f.name)
    }
    assert changed == {"name", *other_gpu.MEMORY_FIELDS}
    assert twin.gpu.l2_bytes == 50 * 2**20 and twin.gpu.hbm_bandwidth_bytes_per_s == 3.35e12


def test_the_h100_was_timed_on_the_h200s_grid():
    doc = json.loads(other_gpu.H100_TIMINGS.read_text())
    assert doc["provenance"]["gpu"].startswith("NVIDIA H100")
    labels = {c.label() for c, _ in read_timings(other_gpu.H100_TIMINGS)}
    assert labels == {c.label() for c, _ in read_timings(other_gpu.H200_TIMINGS)}
    assert len(labels) == 98


def test_the_twin_predicts_the_h100_as_the_model_predicts_the_h200():
    """The forward at N >= 4096 (28 configurations, 0.1-32 ms): on the twin, against the
    H100's times, the same MAPE as the cross-check's model against the H200's (2.2% each),
    nothing measured on the H100 in it. Bounds: 5% (below docs/validation.md's 8% goal for the
    cross-check's time MAPE), and no more than a point worse than on the model's own GPU,
    which is the claim."""

    def mape(path, calibration=None):
        rows = [(c, m) for c, m in read_timings(path)
                if c.schedule == "flash2" and c.shape.seq_len >= other_gpu.LONG]  # fmt: skip
        report = crosscheck(rows, calibration=calibration)
        return len(rows), float(np.mean([abs(r["error"]["time"]) for r in report.rows]))

    n, h100 = mape(other_gpu.H100_TIMINGS, other_gpu.twin())
    _, h200 = mape(other_gpu.H200_TIMINGS)
    assert n == 28 and h100 < 0.05
    assert h100 < h200 + 0.01


def test_the_twin_prices_flash_attn2_on_the_h100_as_on_the_h200():
    """flash-attn 2's forward (PyTorch SDPA's flash backend, 20 configurations) timed on the
    H100 (data/impl/h100/impl_measure.json) against the twin: 8.4% MAPE, against 9.1% on
    the H200 for the model of the H200 (docs/validation.md's families). Bound: no more than a
    point worse than on the model's own GPU."""
    from flashio.analysis.validation.family_rows import IMPL_TIMINGS

    def mape(errors):
        return float(np.mean([abs(r["error"]) for r in errors if r["family"] == "flash-attn2"
                              and r["schedule"] == "flash2"]))  # fmt: skip

    fa2 = ("flash-attn2",)
    h100 = mape(other_gpu.impl_errors(other_gpu.H100_IMPL, other_gpu.twin().gpu, only=fa2))
    h200 = mape(other_gpu.impl_errors(IMPL_TIMINGS, families.GPU, only=fa2))
    assert h100 < h200 + 0.01
