"""The cross-check of simulator predictions against the committed GPU measurements.

1. The model options the calibrated model uses (one arithmetic server per SM, prefetching
   kernels, per-kernel issue efficiency) agree exactly with the oracle (tests/oracle_sim.py).
2. The calibration file's measured constants are what the probe data give.
3. The committed measurements are predicted within the bounds docs/validation.md states
   (a fast subset is re-simulated here; the whole table is checked for staleness).
4. ``flashio crosscheck`` reads the committed data or a user's Nsight Compute CSV.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashio import kernels, simulator
from flashio.analysis.cli.crosscheck import main
from flashio.analysis.validation import calibrate
from flashio.analysis.validation import crosscheck as cc
from flashio.analysis.validation.calibration import DEFAULT_PATH, Harness, load_calibration
from flashio.analysis.validation.doc import BOUNDS, bounds_lines, row_lines
from flashio.simulator.errors import FileError
from flashio.simulator.simulate import ModelOptions
from flashio.simulator.trace import EVENT_DTYPE, Op, Trace
from tests._sim_common import attention_schedules, gpu_specs, random_traces
from tests.oracle_sim import simulate_oracle
from tests.test_simulator_oracle import assert_agrees


# ------------------------------------------------------------------ 1. model options vs oracle
@st.composite
def model_options(draw, kernel_names):
    pf = tuple(k for k in kernel_names if draw(st.booleans()))
    return ModelOptions(
        shared_issue=draw(st.booleans()), prefetch_kernels=pf, pending_fills=draw(st.booleans())
    )


@st.composite
def stepped_traces(draw):
    """random_traces with outer-loop steps: per CTA a non-decreasing run of steps, some -1."""
    trace = draw(random_traces())
    ev = trace.events.copy()
    for key in np.unique(ev[["kernel", "cta"]]):
        idx = np.flatnonzero((ev["kernel"] == key[0]) & (ev["cta"] == key[1]))
        step, steps = -1, []
        for _ in idx:
            step = (
                draw(st.sampled_from([step, step + 1, -1]))
                if step >= 0
                else draw(st.sampled_from([-1, 0]))
            )
            steps.append(step)
        ev["step"][idx] = steps
    ev.flags.writeable = True
    return Trace(ev, trace.meta)


def _agree(trace, gpu, options):
    try:
        want = simulate_oracle(trace, gpu, options)
    except simulator.CapacityError:
        with pytest.raises(simulator.CapacityError):
            simulator.simulate(trace, gpu, options=options)
        return
    assert_agrees(simulator.simulate(trace, gpu, options=options), want)


@given(data=st.data())
def test_model_options_agree_with_oracle_on_schedules(data):
    sched = data.draw(
        attention_schedules(data.draw(st.sampled_from(["flash2", "flash2_bwd", "standard"])))
    )
    trace = sched.trace()
    names = [k.name for k in trace.meta.kernels]
    _agree(trace, data.draw(gpu_specs()), data.draw(model_options(names)))


@given(data=st.data())
def test_model_options_agree_with_oracle_on_random_traces(data):
    trace = data.draw(stepped_traces())
    names = [k.name for k in trace.meta.kernels]
    _agree(trace, data.draw(gpu_specs()), data.draw(model_options(names)))


def test_prefetch_hides_the_next_steps_loads():
    """Two steps of LOAD -> MMA on one SM without L2: with prefetch, step 1's load is issued
    when step 0's MMA begins, so the MMA of step 1 does not wait for it (docs/model.md)."""
    from flashio.simulator.trace import KernelInfo, Space, TensorInfo, TraceMeta

    gpu = simulator.load_gpu("h200").replace(sm_count=1, l2_bytes=0)
    rows = []
    for step in (0, 1):
        rows.append((0, 0, step, Op.LOAD, 0, -1, -1, step * 1000, 1, 1000, 1000, 1000, 0))
        rows.append((0, 0, step, Op.MMA, -1, -1, -1, 0, 0, 0, 0, 0, 10**9))
    ev = np.array(rows, dtype=EVENT_DTYPE)
    meta = TraceMeta(
        "hand",
        {"dtype": "fp16"},
        (KernelInfo("k", 1, 4, 0, 32),),
        (TensorInfo("X", Space.GLOBAL, (4096,), 1),),
    )
    trace = Trace(ev, meta)
    plain = simulator.simulate(trace, gpu)
    early = simulator.simulate(trace, gpu, options=ModelOptions(prefetch_kernels=("k",)))
    load = 1000 / gpu.effective_hbm_bandwidth_bytes_per_s + gpu.hbm_latency_cycles / gpu.clock_hz
    assert plain.time_s - early.time_s == pytest.approx(load, rel=1e-9)
    assert early.hbm_read_bytes == plain.hbm_read_bytes == 2000
    assert simulate_oracle(trace, gpu, ModelOptions(prefetch_kernels=("k",)))["time_s"] == (
        pytest.approx(early.time_s, rel=1e-12)
    )


def test_model_options_reject_bad_values():
    with pytest.raises(ValueError, match="tuple of kernel names"):
        ModelOptions(prefetch_kernels="flash2_fwd")
    with pytest.raises(TypeError):  # the fitted per-kernel efficiency is gone
        ModelOptions(issue_efficiency={"qk": 0.5})


# ------------------------------------------------------------------------ 2. the calibration
def test_measured_constants_are_what_the_probe_data_give():
    """h200-measured's memory-side constants and clock against the probe data; the spec file
    writes them to 4 significant digits or more, so they agree to 1e-3."""
    cal = load_calibration()
    assert cal.gpu.name == "h200-measured"
    measured = calibrate.probe_constants()
    assert set(measured) == set(calibrate.SPEC_SOURCES)
    for key, value in measured.items():
        assert getattr(cal.gpu, key) == pytest.approx(value, rel=1e-3), key
    assert cal.options.issue_model and cal.options.shared_issue and cal.options.cta_drift
    assert cal.options.prefetch_kernels == calibrate.PREFETCH_KERNELS


def test_the_committed_calibration_is_what_fit_writes_today():
    """The harness's launch costs are the tiny shapes' measured intervals less the model's
    kernel times, so a change of the model changes them: the committed file must be what
    ``flashio crosscheck --fit`` writes with today's model (it prints 4 significant digits)."""
    cal = load_calibration()
    assert Path(cal.path).read_text() == calibrate.render_calibration(calibrate.fit_harness(cal))


def test_the_committed_calibration_fits_nothing(tmp_path):
    cal = load_calibration()
    assert "[fit" not in Path(cal.path).read_text()
    # a file of the earlier format, with a per-kernel efficiency fitted to timings, is refused
    old = tmp_path / "old.toml"
    fit = '\n[fit.issue_efficiency]\n"qk d=64 64x64 w=4" = 0.5\n'
    old.write_text(Path(cal.path).read_text() + fit)
    with pytest.raises(FileError, match=r"\[fit\] table .* no longer read"):
        load_calibration(old)


def test_harness_model():
    h = Harness(first_launch_s=10e-6, launch_interval_s=12e-6)
    assert h.intervals([1e-6]) == pytest.approx((11e-6,))  # host launch, then the kernel
    # tiny kernels: the host is the bottleneck, one arrives every launch_interval_s
    assert h.intervals([1e-6, 1e-6, 1e-6]) == pytest.approx((11e-6, 12e-6, 12e-6))
    # long kernels run back to back; the event time is their sum plus the first launch
    assert h.intervals([100e-6, 50e-6]) == pytest.approx((110e-6, 50e-6))
    assert h.event_time([100e-6, 50e-6]) == pytest.approx(160e-6)
    with pytest.raises(ValueError, match="seconds >= 0"):
        Harness(first_launch_s=-1.0, launch_interval_s=0.0)


def test_calibration_file_errors_name_the_problem(tmp_path):
    bad = tmp_path / "cal.toml"
    bad.write_text('base = "h200"\n[spec]\n')
    with pytest.raises(ValueError, match="missing dict 'model'"):
        load_calibration(bad)
    bad.write_text(DEFAULT_PATH.read_text().replace("first_launch_s", "first_launch"))
    with pytest.raises(ValueError, match="first_launch"):
        load_calibration(bad)


# ------------------------------------------------------- 3. the committed measurements, bounds
DOC = Path(__file__).resolve().parents[1] / "docs" / "validation.md"
FAST_EVENTS = 150_000  # configurations re-simulated here: a few seconds in all


def _events(cfg) -> int:
    sched = cfg.build()
    ks = range(len(sched.kernels)) if cfg.kernel is None else [cfg.kernel]
    return sum(len(sched.cta_events(k, 0, 1)) * sched.kernels[k].ctas for k in ks)


def _doc_rows() -> list[tuple[str, str, float]]:
    """(subset, metric, error) of every row of the committed table in docs/validation.md."""
    out = []
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0] in ("train", "held-out") and cells[5].endswith("%"):
            out.append((cells[0], cells[2], float(cells[5][:-1]) / 100))
    return out


def test_fast_configurations_reproduce_the_doc_rows():
    """Re-simulate the small configurations: their rows must be in the committed table as they
    are (the table is current), and within the bounds."""
    configs = cc.read_timings(cc.DATA_DIR / "gpu_measure.json") + cc.read_ncu(
        cc.DATA_DIR / "ncu.csv"
    )
    fast = [c for c in configs if _events(c[0]) <= FAST_EVENTS]
    assert len(fast) >= 20
    report = cc.crosscheck(fast)
    text = DOC.read_text()
    for line in row_lines(report):
        assert line in text, f"not in docs/validation.md (stale?): {line}"
    for row in report.rows:
        for metric, err in row["error"].items():
            limit = BOUNDS.get((metric, "max error", "all"))
            if limit is not None:
                assert abs(err) <= limit, (row["label"], metric, err)


def test_committed_measurements_are_within_the_documented_bounds():
    rows = _doc_rows()
    assert len(rows) >= 100
    for (metric, stat, subset), limit in BOUNDS.items():
        errs = np.abs([e for s, m, e in rows if m == metric and subset in ("all", s)])
        assert errs.size, (metric, subset)
        value = errs.mean() if stat == "MAPE" else errs.max()
        assert value <= limit, (metric, stat, subset, value, limit)
    text = DOC.read_text()
    assert all(line in text for line in bounds_lines()), "the doc states other bounds"


# ------------------------------------------------------------------- 4. flashio crosscheck
NCU_HEAD = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
    '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
    '"Metric Value"'
)


def _ncu_csv(kernel: str, values: dict[str, tuple[str, float]]) -> str:
    lines = ["==PROF== Connected to process 1", NCU_HEAD]
    for name, (unit, v) in values.items():
        lines.append(
            f'"0","1","python3","host","{kernel}","1","7","(128, 1, 1)","(8, 1, 1)",'
            f'"0","9.0","Command line profiler metrics","{name}","{unit}","{v:,.0f}"'
        )
    return "\n".join(lines) + "\n"


def test_cli_checks_a_users_ncu_csv(tmp_path, capsys):
    shape = kernels.AttentionShape(1, 2, 256, 64, "bf16")
    cfg = cc.Config("flash2", shape, 64, 64, 4, kernel=0)
    pred = cc.predict(cfg, load_calibration())
    csv_path = tmp_path / "mine.csv"
    csv_path.write_text(
        _ncu_csv(
            "my_flash_kernel",
            {
                "l1tex__m_xbar2l1tex_read_bytes.sum": ("byte", pred["global_bytes"] * 0.5),
                "l1tex__m_l1tex2xbar_write_bytes.sum": ("byte", pred["global_bytes"] * 0.5),
                "dram__bytes_read.sum": ("byte", pred["hbm_bytes"] * 2),
                "dram__bytes_write.sum": ("byte", 0),
                "gpu__time_duration.sum": ("ns", 1e5),
            },
        )
    )
    args = [
        str(csv_path),
        "--json",
        "--schedule",
        "flash2",
        "--heads",
        "2",
        "--seq-len",
        "256",
        "--head-dim",
        "64",
        "--block-q",
        "64",
        "--block-kv",
        "64",
        "--warps",
        "4",
    ]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"rows", "summary"}
    assert {"time_mape", "global_bytes_mape", "hbm_bytes_mape"} <= set(out["summary"])
    (row,) = out["rows"]
    assert row["kernel"] == "flash2_fwd"  # matched by position: one kernel
    assert row["error"]["global_bytes"] == pytest.approx(0, abs=1e-6)
    assert row["error"]["hbm_bytes"] == pytest.approx(-0.5, rel=1e-6)
    assert out["summary"]["hbm_bytes_mape"] == pytest.approx(0.5, rel=1e-6)
    # the same launch as flash-attn 2's kernel would run it: the schedule's bytes, its time
    # that implementation's (a written program from its instruction mix)
    assert main([*args, "--impl", "flash-attn2"]) == 0
    theirs = json.loads(capsys.readouterr().out)["rows"][0]
    assert theirs["error"]["global_bytes"] == pytest.approx(0, abs=1e-6)
    assert theirs["predicted"]["kernel_time_s"] != row["predicted"]["kernel_time_s"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--schedule", "flash2"], "needs the ncu CSV"),
        (["no/such/file.csv"], "no such measurement file"),
        (["--jobs", "0"], "--jobs must be at least 1"),
        (["pyproject.toml"], "neither gpu_measure output"),
    ],
)
def test_cli_errors(args, message, capsys):
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_ncu_csv_units_and_header_are_checked():
    text = _ncu_csv("k", {"dram__bytes_read.sum": ("Kbyte", 3.0)})
    with pytest.raises(ValueError, match="--print-units base"):
        cc.parse_ncu_csv(text)
    with pytest.raises(ValueError, match="not an Nsight Compute CSV"):
        cc.parse_ncu_csv("a,b\n1,2\n")
