"""Errors that tell the truth: the ``flashio`` command fed malformed arguments and files.

Bad input (wrong types, negative, zero and huge values, unknown flags and keys, truncated or
binary spec files, missing paths, folders as paths) must end with exit status 2 and a message,
never a traceback, and must leave no output file behind; a bug inside flashio must end with
exit status 1 and its traceback, not look like bad input.
"""

import contextlib
import io
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashio import kernels, simulator
from flashio.analysis.cli.main import main
from flashio.simulator.gpu import _FIELD_NAMES

H200_TOML = (Path(simulator.__file__).parent / "specs" / "h200.toml").read_text()

# Integers flashio must refuse (or, for sizes that are legal, handle fast on a tiny shape).
BAD_INTS = ("abc", "", "1.5", "1e30", "nan", "-inf", "0x10", "-1", "0", "-0", str(-(2**70)))
HUGE_INTS = (str(2**31), str(2**63), str(2**70), str(10**30))
EDGE_INTS = ("1", "2", "3", "33", str(2**31 - 1))  # legal for some flags, and fast on tiny shapes
BAD_FLOATS = ("abc", "", "nan", "inf", "-inf", "-1", "0", "1e-30", "1e30", "1e300", "-1e300")
UNKNOWN_FLAGS = ("--no-such-flag", "--seq_len", "-x", "--gpu=", "--json=1", "--out")

# A tiny valid base per verb; the fuzzer replaces values and adds flags.
SHAPE = {"--batch": "1", "--heads": "1", "--seq-len": "16", "--head-dim": "16"}
TILES = {"--block-q": "16", "--block-kv": "16", "--warps": "4"}
VERBS = {
    "simulate": (
        ["simulate", "flash2"],
        {**SHAPE, **TILES, "--kv-heads": "1", "--kv-seq-len": "24", "--window": "3,2"},
    ),
    "compare": (["compare"], {**SHAPE, **TILES, "--kv-heads": "1"}),
    "tiling": (["tiling"], {"--head-dim": "16", "--sram-bytes": "65536", "--top": "3"}),
    "tiling-search": (
        ["tiling", "--search"],
        {**SHAPE, "--block-sizes": "16", "--warps": "4", "--top": "3"},
    ),
    "sweep": (
        ["sweep", "--schedule", "flash2"],
        {
            **SHAPE,
            "--block": "16",
            "--warps": "4",
            "--sram-scale": "1",
            "--hbm-scale": "1",
            "--sm-scale": "1",
        },
    ),
    "gpus": (["gpus"], {}),
    "crosscheck": (["crosscheck"], {"--jobs": "1"}),
}
FLOAT_FLAGS = {"--sram-scale", "--hbm-scale", "--sm-scale"}
OUT_FLAG = {"simulate": "--save-trace", "sweep": "--out", "crosscheck": "--plot"}
OUT_NAME = {"simulate": "trace.npz", "sweep": "sweep.csv", "crosscheck": "plot.png"}


def toml_values():
    """TOML right-hand sides of every kind, most of them wrong for any spec key."""
    return st.sampled_from(
        (
            "-1",
            "0",
            "1.5",
            "1e30",
            "-1e30",
            "nan",
            "inf",
            "-inf",
            str(2**40),
            str(2**70),
            str(-(2**63)),
            '"abc"',
            '""',
            "true",
            "[1, 2]",
            "{ a = 1 }",
            "1979-05-27",
            '"h200"',
        )
    )


@st.composite
def spec_texts(draw, *, invalid: bool = False):
    """A GPU spec file's text: h200 with keys changed, unknown keys, truncated, garbage, or a
    legal spec with too little shared memory for any tiling.

    ``invalid`` adds an unknown key to the texts that could otherwise happen to be valid.
    """
    kind = draw(st.sampled_from(("override", "truncated", "garbage", "base", "tiny")))
    if kind == "tiny":  # a legal spec on which no tiling fits: capacity errors
        text = 'base = "h200"\nname = "tiny"\nsmem_per_sm_bytes = 4096\nsmem_per_cta_bytes = 2048'
    elif kind == "override":
        keys = st.sampled_from((*_FIELD_NAMES, "base", "sm_count_", "smem_per_sm", "Name"))
        lines = [
            f"{k} = {v}" for k, v in draw(st.dictionaries(keys, toml_values(), max_size=3)).items()
        ]
        name = draw(st.sampled_from(('name = "x"', "", "name = 3")))
        text = "\n".join(['base = "h200"', name, *lines])
    elif kind == "truncated":
        text = H200_TOML[: draw(st.integers(0, len(H200_TOML) - 1))]
    elif kind == "base":
        base = draw(st.sampled_from(('"nope"', '"nope.toml"', '"."', "3", '"spec.toml"')))
        text = f'name = "x"\nbase = {base}\n'
    else:
        raw = draw(st.binary(max_size=64))
        return raw + (b"\nbogus_key = 1\n" if invalid else b"")
    return (text + ("\nbogus_key = 1\n" if invalid else "\n")).encode("utf-8")


@st.composite
def gpu_paths(draw, folder: Path, *, invalid: bool = False) -> str:
    """A ``--gpu`` value: a spec file written into ``folder``, a missing path, the folder."""
    kind = draw(st.sampled_from(("file", "file", "file", "missing", "folder", "name")))
    if kind == "missing":
        return str(folder / "missing.toml")
    if kind == "folder":
        return str(folder)
    if kind == "name":
        return draw(st.sampled_from(("h300", "", "H200", "h200.toml", "../h200")))
    path = folder / "spec.toml"
    path.write_bytes(draw(spec_texts(invalid=invalid)))
    return str(path)


@st.composite
def measurement_files(draw, folder: Path) -> str:
    """A malformed measurement file for ``crosscheck`` (never the committed data)."""
    good_json = '{"results": [{"impl": "flash2", "batch": 1}]}'
    texts = (
        "",
        "{",
        good_json[: draw(st.integers(0, len(good_json) - 1))],
        '{"results": 3}',
        '{"results": [{"impl": "flash2", "batch": "x"}]}',
        "impl,batch\nflash2,1\n",
        '"ID","Kernel Name"\n1,k\n',
        "==PROF== nothing\n",
        "\xff\xfe garbage",
    )
    kind = draw(st.sampled_from(("text", "text", "missing", "folder")))
    if kind == "missing":
        return str(folder / "no-such.json")
    if kind == "folder":
        return str(folder)
    suffix = draw(st.sampled_from((".json", ".csv", "")))
    path = folder / f"m{suffix}"
    path.write_bytes(draw(st.sampled_from(texts)).encode("utf-8", "surrogateescape"))
    return str(path)


@st.composite
def cli_cases(draw, verb: str, folder: Path):
    """``(argv, out_path or None)``: a tiny valid ``verb`` command with a few things broken."""
    head, options = VERBS[verb]
    options = dict(options)
    extra: list[str] = []
    broken = st.lists(st.sampled_from(sorted(options)), max_size=2, unique=True)
    for flag in draw(broken) if options else ():
        pool = BAD_FLOATS if flag in FLOAT_FLAGS else BAD_INTS + HUGE_INTS + EDGE_INTS
        options[flag] = draw(st.sampled_from(pool))
    if draw(st.booleans()):
        extra.append(draw(st.sampled_from(UNKNOWN_FLAGS)))
    if verb not in ("gpus", "crosscheck") and draw(st.booleans()):
        extra += ["--gpu", draw(gpu_paths(folder))]
    if verb == "crosscheck":
        # always a malformed file, so that the committed measurements (minutes) never run
        extra.append(draw(measurement_files(folder)))
        if draw(st.booleans()):
            extra += ["--calibration", draw(gpu_paths(folder))]
        if draw(st.booleans()):
            option = draw(st.sampled_from(("x", "a=b", "=1")))
            extra += ["--schedule", "flash2", "--option", option]
    out = None
    if verb in OUT_FLAG and (verb == "sweep" or draw(st.booleans())):  # sweep: never the CWD
        out = folder / "out" / OUT_NAME[verb]
        if draw(st.booleans()):  # an output that exists already must survive a failure
            out.parent.mkdir(exist_ok=True)
            out.write_text("old content")
        extra += [OUT_FLAG[verb], str(out)]
    argv = [*head, *(x for kv in options.items() for x in kv), *extra]
    return argv, out


def run_cli(argv: list[str]) -> tuple[int, str]:
    """Exit status and stderr of ``flashio argv``, in-process; other exceptions propagate."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's own errors
            code = exc.code
    return code, err.getvalue()


@pytest.mark.parametrize("verb", sorted(VERBS))
@given(data=st.data())
def test_malformed_input_exits_2_with_a_message_and_writes_nothing(verb, data):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        argv, out = data.draw(cli_cases(verb, folder), label="argv, out")
        before = out.read_bytes() if out is not None and out.exists() else None
        code, err = run_cli(argv)  # any exception other than SystemExit fails the test
        assert code in (0, 2), (argv, code, err)
        assert "Traceback" not in err, err
        if code == 2:
            assert "error:" in err and err.split("error:", 1)[1].strip(), err
            if out is not None:
                now = out.read_bytes() if out.exists() else None
                assert now == before, f"{out} was written by a failed {verb}"
        leftovers = [p.name for p in folder.rglob(".*.tmp")]
        assert not leftovers, f"temporary files left behind: {leftovers}"


TINY_GPU = 'base = "h200"\nname = "tiny"\nsmem_per_sm_bytes = 4096\nsmem_per_cta_bytes = 2048\n'


@given(
    schedule=st.sampled_from(kernels.SCHEDULES),
    existing=st.booleans(),
    json=st.booleans(),
)
def test_a_command_that_fails_after_validation_writes_no_output(schedule, existing, json):
    """Legal arguments and a legal GPU on which these tiles do not fit: the failure comes
    late. (Without --block-q/--block-kv the blocks follow the tiny GPU's own rule and fit.)"""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "tiny.toml").write_text(TINY_GPU)
        out = folder / "t.npz"
        if existing:
            out.write_bytes(b"old")
        argv = f"simulate {schedule} --batch 1 --heads 1 --seq-len 32 --head-dim 32".split()
        argv += ["--block-q", "32", "--block-kv", "32"]
        argv += ["--gpu", str(folder / "tiny.toml"), "--save-trace", str(out)]
        code, err = run_cli([*argv, "--json"] if json else argv)
        assert code == 2 and "shared memory" in err, err
        assert (out.read_bytes() if out.exists() else None) == (b"old" if existing else None)


@settings(max_examples=10)
@given(data=st.data())
def test_demo_with_a_bad_spec_exits_2_and_leaves_no_folder(data):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        gpu = data.draw(gpu_paths(folder, invalid=True), label="gpu")
        out = folder / "demo-out"
        code, err = run_cli(["demo", "--gpu", gpu, "--out", str(out)])
        assert code == 2 and "error:" in err, err
        assert not out.exists()


def test_output_path_that_is_a_folder_or_a_file_in_the_way(tmp_path):
    code, err = run_cli(["sweep", "--seq-len", "16", "--heads", "1", "--out", str(tmp_path)])
    assert code == 2 and "is a folder" in err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, err = run_cli(["demo", "--out", str(blocker)])
    assert code == 2 and "is a file" in err
    trace = blocker / "t.npz"  # a folder that cannot be made, because a file has its name
    argv = ["simulate", "flash2", "--seq-len", "16", "--heads", "1", "--save-trace", str(trace)]
    code, err = run_cli(argv)
    assert code == 2 and str(trace) in err
    assert blocker.read_text() == "x"


def test_atomic_write_leaves_the_old_file_when_the_writer_fails(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError), simulator.atomic_write(path) as f:
        f.write("half")
        raise RuntimeError("writer failed")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]
    with simulator.atomic_write(path) as f:
        f.write("new")
    assert path.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_library_errors_are_flashio_errors_and_value_errors():
    for cls in (simulator.GPUSpecError, simulator.CapacityError, kernels.ShapeError):
        assert issubclass(cls, simulator.FlashioError) and issubclass(cls, ValueError)
    with pytest.raises(kernels.ShapeError):
        kernels.AttentionShape(1, 1, 0, 64)
    with pytest.raises(kernels.TilingError):
        kernels.schedule("flash2", kernels.AttentionShape(1, 1, 64, 64), 0, 16)
    with pytest.raises(simulator.FileError, match=r"missing\.npz"):
        simulator.Trace.load("missing.npz")


@pytest.mark.parametrize("exc", [RuntimeError, ValueError, KeyError])
def test_internal_error_propagates_from_main(monkeypatch, exc):
    """A plain exception from inside is a bug: main() does not turn it into exit status 2."""

    def broken():
        raise exc("planted internal bug")

    monkeypatch.setattr(simulator, "builtin_gpus", broken)
    with pytest.raises(exc, match="planted internal bug"):
        main(["gpus"])


def test_internal_error_exits_1_with_traceback_from_the_console_script(tmp_path):
    """The installed ``flashio`` command: a planted ValueError gives exit 1 and a traceback."""
    (tmp_path / "sitecustomize.py").write_text(
        "from flashio import simulator\n"
        "def _broken():\n"
        "    raise ValueError('planted internal bug')\n"
        "simulator.builtin_gpus = _broken\n"
    )
    script = Path(sys.executable).with_name("flashio")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "flashio"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    run = subprocess.run([*cmd, "gpus"], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 1, run.stderr
    assert "Traceback" in run.stderr and "planted internal bug" in run.stderr
    assert "flashio gpus: error:" not in run.stderr


def test_a_sequence_too_long_to_trace_exits_2_before_allocating():
    """The tracers keep two int64 per query row (``kernels.mask.key_ranges``): a legal
    seq_len of 2**31 - 1 would need 32 GiB of them, so ``simulate`` refuses it with the reason
    instead of running out of memory (``test_malformed_input_exits_2...`` draws that value
    at random); the closed forms of an unmasked shape take longer sequences still."""
    argv = "simulate flash2 --batch 1 --heads 1 --seq-len 2147483647 --head-dim 16".split()
    mask = ["--kv-seq-len", "24", "--window", "3,2"]  # few scores: only the tables are large
    code, err = run_cli([*argv, "--block-q", "16", "--block-kv", "16", *mask])
    assert code == 2 and "2**26" in err and "32 GiB" in err, err
    from flashio import analysis

    shape = kernels.AttentionShape(1, 1, 2**28, 128, "fp16")  # four times the tables' limit
    q = next(t for t in analysis.io_counts("flash2", shape, 16 * 1024).tensors if t.name == "Q")
    assert q.read_elements == 2**28 * 128
