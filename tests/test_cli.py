"""The flashio command: every verb runs, --json parses, bad input exits 2 with a message."""

import json

import pytest

from flashio import kernels, simulator
from flashio.analysis.cli.main import main
from flashio.analysis.cli.options import DEFAULT_GPU
from flashio.analysis.explore.demo import run_demo
from flashio.analysis.explore.search import COMPILED


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_gpus_lists_every_builtin(capsys):
    specs = _json(capsys, ["gpus", "--json"])
    assert [s["name"] for s in specs] == list(simulator.builtin_gpus())
    assert main(["gpus"]) == 0
    assert "h200" in capsys.readouterr().out


def test_simulate_json_matches_library(capsys):
    argv = [
        "simulate",
        "flash2",
        "--batch",
        "1",
        "--heads",
        "2",
        "--seq-len",
        "300",
        "--head-dim",
        "64",
        "--block-q",
        "64",
        "--block-kv",
        "32",
        "--json",
    ]
    out = _json(capsys, argv)
    shape = kernels.AttentionShape(1, 2, 300, 64, "fp16")
    sched = kernels.schedule("flash2", shape, 64, 32)
    res = simulator.simulate(sched, DEFAULT_GPU, options=COMPILED)  # the CLI's defaults
    assert out["result"]["global_read_bytes"] == res.global_read_bytes
    assert out["result"]["hbm_write_bytes"] == res.hbm_write_bytes
    assert (out["result"]["bound"], out["result"]["time_s"]) == (res.bound, res.time_s)
    pipe = _json(capsys, [*argv, "--pipe-rates"])["result"]
    assert pipe["time_s"] == simulator.simulate(sched, DEFAULT_GPU).time_s != res.time_s


def test_simulate_table_and_saved_trace(capsys, tmp_path):
    path = tmp_path / "t.npz"
    argv = [
        "simulate",
        "flash1",
        "--batch",
        "1",
        "--heads",
        "1",
        "--seq-len",
        "128",
        "--save-trace",
        str(path),
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "global bytes" in text and "flash1_fwd" in text
    trace = simulator.Trace.load(path)
    assert trace.meta.schedule == "flash1" and len(trace) > 0


def test_simulate_another_implementation(capsys):
    """--impl runs the schedule as that implementation runs it: its own tiling for the shape
    (FA3 at d = 128: 128 x 176, 12 warps), priced with --compiled by the program written for
    it, and the table says so."""
    base = ["simulate", "flash2", "--batch", "1", "--heads", "2", "--seq-len", "1024"]
    base += ["--head-dim", "128", "--dtype", "bf16", "--impl", "fa3", "--compiled"]
    out = _json(capsys, [*base, "--json"])
    assert (out["block_q"], out["block_kv"], out["warps"], out["impl"]) == (128, 176, 12, "fa3")
    shape = kernels.AttentionShape(1, 2, 1024, 128, "bf16")
    sched = kernels.schedule("flash2", shape, impl="fa3")
    res = simulator.simulate(sched, DEFAULT_GPU, options=COMPILED)
    assert out["result"]["time_s"] == pytest.approx(res.time_s)
    assert main(base) == 0
    text = capsys.readouterr().out
    assert "implementation fa3" in text and "written program" in text
    with pytest.raises(SystemExit) as exc:
        main([*base[:-3], "--impl", "fa4"])
    assert exc.value.code == 2 and "invalid choice" in capsys.readouterr().err
    # an implementation without a tiling for the shape says what it provides
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main([*base[:-3], "--impl", "flash-attn2", "--dtype", "fp32"]))
    assert exc.value.code == 2 and "flash-attn2" in capsys.readouterr().err


def test_compare_rows(capsys):
    argv = [
        "compare",
        "--batch",
        "1",
        "--heads",
        "2",
        "--seq-len",
        "256",
        "--backward",
        "--gpu",
        "a100-40gb",
        "--block-q",
        "64",
        "--block-kv",
        "64",
        "--json",
    ]
    out = _json(capsys, argv)
    assert not any(r["error"] for r in out["rows"])
    names = [r["schedule"] for r in out["rows"]]
    assert names == ["standard", "flash1", "flash2", "standard_bwd", "flash1_bwd", "flash2_bwd"]
    by = {r["schedule"]: r for r in out["rows"]}
    assert by["flash2"]["global_bytes"] < by["standard"]["global_bytes"]
    assert by["flash2_bwd"]["mma_flops"] == 2.5 * by["flash2"]["mma_flops"]
    assert by["standard_bwd"]["mma_flops"] == 2 * by["standard"]["mma_flops"]


def test_compare_reports_a_schedule_that_does_not_fit(capsys):
    # FA1's split-K exchange buffer (4 warps x 128 rows x (64+2) fp32) exceeds the A100's 163 KiB
    argv = [
        "compare",
        "--batch",
        "1",
        "--heads",
        "2",
        "--seq-len",
        "256",
        "--gpu",
        "a100-40gb",
        "--block-q",
        "128",
        "--block-kv",
        "128",
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "does not fit" in text and "split_k" in text and "166,912 B" in text


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["simulate", "flash3"], "invalid choice"),
        (["simulate", "flash2", "--seq-len", "0"], "seq_len"),
        (["simulate", "flash2", "--seq-len", "64", "--block-q", "0"], "block_q"),
        (["simulate", "flash2", "--gpu", "h300"], "h300"),
        (["simulate", "flash2", "--gpu", "missing.toml"], "missing.toml"),
        (
            [
                "simulate",
                "flash2",
                "--seq-len",
                "4096",
                "--head-dim",
                "256",
                "--block-q",
                "512",
                "--block-kv",
                "512",
            ],
            "shared memory",
        ),
        (["compare", "--heads", "6", "--kv-heads", "4"], "kv_heads"),
        (["tiling", "--search", "--compiled", "--pipe-rates"], "not allowed with argument"),
    ],
)
def test_bad_input_exits_2_with_message(capsys, argv, needle):
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main(argv))
    assert exc.value.code == 2
    assert needle in capsys.readouterr().err


def test_demo_writes_json_and_plots(tmp_path, capsys):
    shape = kernels.AttentionShape(1, 2, 512, 64, "fp16")
    assert run_demo(simulator.load_gpu("h200"), tmp_path, shape=shape, seq_lens=(128, 256)) == 0
    summary = json.loads((tmp_path / "demo.json").read_text())
    assert len(summary["rows"]) == 6
    for p in summary["plots"]:
        assert (tmp_path / p.split("/")[-1]).stat().st_size > 10_000
    assert len(summary["plots"]) == 7
    claims = " ".join(summary["claims"])
    assert "M = " in claims and "recompute" in claims and "V2" in claims and "SMs" in claims
    out = capsys.readouterr().out
    assert "faster" in out
    # flash2 at its default 128x128, 4 warps is in the instruction census (fp16): its compiled
    # main loop prices the headline time, and the row says so, the pipe-rate time beside it;
    # flash1 has no such kernel and keeps the pipe rates
    assert summary["compiled"]["flash2"]["kernels"] == ["flash2_fwd"]
    assert "flash1" not in summary["compiled"] and "pipe-rate ms" in out
    pipe = next(r for r in summary["rows"] if r["schedule"] == "flash2")
    assert summary["compiled"]["flash2"]["time_s"] != pipe["time_s"]
    lines = {ln.split()[0]: ln for ln in out.splitlines() if ln.startswith(("flash1 ", "flash2 "))}
    headline = f"{summary['compiled']['flash2']['time_s'] * 1e3:.3f}"
    assert lines["flash2"].split()[6] == headline and "compiled loop" in lines["flash2"]
    assert "pipe rates" in lines["flash1"]
    # long context: a window moves less than causal, causal less than full; a decoding step
    # reads its whole KV cache (K and V, 16 heads, 128k tokens of d = 64 in fp16) from HBM
    full, causal, window, decode, split = summary["masks"]
    assert window["global_bytes"] < causal["global_bytes"] < full["global_bytes"]
    assert decode["hbm_bytes"] >= 2 * 16 * 131072 * 64 * 2
    assert split["schedule"] == "flash_decode" and split["time_s"] < decode["time_s"]
    assert "long context" in out and "decoding" in out


def test_simulate_prices_the_census_kernel_by_its_compiled_loop(capsys):
    """By default (and with --compiled) the kernel the census holds at this tiling is priced
    by its compiled main loop, and the report says so; --pipe-rates prices it at the pipe
    rates, faster; bytes are the same either way; the two flags exclude each other."""
    argv = "simulate flash2 --batch 1 --heads 2 --seq-len 512 --head-dim 64 --dtype bf16"
    argv += " --block-q 64 --block-kv 64 --warps 4 --json"
    default = _json(capsys, argv.split())["result"]
    on = _json(capsys, [*argv.split(), "--compiled"])["result"]
    off = _json(capsys, [*argv.split(), "--pipe-rates"])["result"]
    assert default == on
    assert on["kernels"][0]["census_key"] == "flash2_fwd d=64 64x64 w=4 bf16"
    assert off["kernels"][0]["census_key"] == ""
    assert off["time_s"] < on["time_s"]
    assert on["global_read_bytes"] == off["global_read_bytes"]
    assert main(argv.split()[:-1]) == 0
    assert "compiled loop (flash2_fwd d=64 64x64 w=4 bf16)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main([*argv.split(), "--compiled", "--pipe-rates"])
    assert exc.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_compare_keeps_one_model_for_the_three_schedules(capsys):
    """compare prices standard, flash1 and flash2 at the pipe rates unless --compiled: flash1
    has no compiled kernel, so the default keeps the three comparable."""
    argv = "compare --batch 1 --heads 2 --seq-len 256 --head-dim 64 --json".split()
    rows = _json(capsys, argv)["rows"]
    assert rows and not any(r["compiled_kernels"] for r in rows)
    rows = _json(capsys, [*argv, "--compiled"])["rows"]
    priced = {r["schedule"]: r["compiled_kernels"] for r in rows}
    assert priced["flash2"] == ["flash2_fwd"] and not priced["flash1"]


def test_sweep_writes_csv_and_plot(tmp_path, capsys):
    out = tmp_path / "s.csv"
    argv = [
        *"sweep --seq-len 128 256 --heads 2 --schedule flash2 --schedule standard".split(),
        *"--block 64 --json --out".split(),
        str(out),
    ]
    summary = _json(capsys, argv)
    rows = summary["rows"]
    assert len(rows) == 4 and not any(r["error"] for r in rows)
    assert out.read_text().count("\n") == 5  # header + 4 rows
    assert (tmp_path / "s.png").stat().st_size > 10_000
    by = {(r["schedule"], r["seq_len"]): r for r in rows}
    assert by[("flash2", 256)]["global_bytes"] < by[("standard", 256)]["global_bytes"]


def test_sweep_hypothetical_gpus(tmp_path, capsys):
    out = tmp_path / "h.csv"
    argv = [
        *"sweep --seq-len 256 --heads 2 --schedule flash2 --block 128 --json".split(),
        *"--sram-scale 0.2 1 --hbm-scale 1 2 --out".split(),
        str(out),
    ]
    rows = _json(capsys, argv)["rows"]
    names = sorted({r["gpu"] for r in rows})
    assert names == [f"{DEFAULT_GPU}{s}" for s in ("", "-hbm2x", "-sram0.2x", "-sram0.2x-hbm2x")]
    small = [r for r in rows if r["gpu"].startswith(f"{DEFAULT_GPU}-sram0.2x")]
    # 128-row blocks of Q, K, V at d=64 need 48 KiB; a fifth of 227 KiB is 45.4 KiB
    assert all("shared memory" in r["error"] for r in small)


def test_compare_keeps_a_row_for_a_schedule_that_does_not_fit():
    """FA1 at 128x128, d=128 needs 356 KiB of shared memory: its row says so, with zero figures,
    and the schedules that fit are still simulated."""
    from flashio.analysis.explore.comparison import compare

    shape = kernels.AttentionShape(batch=1, heads=2, seq_len=1024, head_dim=128)
    gpu = simulator.load_gpu("h200").replace(smem_per_cta_bytes=96 * 1024)
    rows = {r.schedule: r for r in compare(shape, gpu, block_q=128, block_kv=128)}
    fa1 = rows["flash1"]
    assert "shared memory" in fa1.error and fa1.result is None
    assert (fa1.time_s, fa1.mma_flops, fa1.hbm_bytes, fa1.sram_peak_bytes) == (0.0, 0, 0, 0)
    for name in ("standard", "flash2"):
        r = rows[name]
        assert r.error == "" and r.result is not None
        assert (r.time_s, r.hbm_bytes) == (r.result.time_s, r.result.hbm_bytes) and r.time_s > 0


# -- one grammar: shared options, one set of defaults, one list syntax -------------------------
def _parsed(argv):
    from flashio.analysis.cli.main import build_parser

    return build_parser().parse_args(argv)


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    from flashio.analysis.cli.options import version

    assert capsys.readouterr().out.strip() == f"flashio {version()}" != "flashio "


def test_every_verb_has_the_same_shape_defaults():
    from flashio.analysis.cli.options import SHAPE_DEFAULTS

    verbs = {
        "simulate": ["simulate", "flash2"],
        "compare": ["compare"],
        "sweep": ["sweep"],
        "tiling": ["tiling"],
        "crosscheck": ["crosscheck"],
    }
    for verb, argv in verbs.items():
        a = _parsed(argv)
        got = {k: getattr(a, k) for k in ("batch", "heads", "dtype")}
        assert got == {k: SHAPE_DEFAULTS[k] for k in got}, verb
        if verb != "sweep":  # a sweep's lengths are a list of several
            assert (a.seq_len, a.head_dim) == (SHAPE_DEFAULTS["seq_len"], 64), verb
        if verb != "sweep" and verb != "tiling":
            assert a.kv_heads is None and a.causal is False, verb
        if hasattr(a, "gpu") and verb != "sweep":
            assert a.gpu == DEFAULT_GPU, verb


def test_lists_take_commas_or_spaces():
    from flashio.analysis.cli.options import flatten

    spaced = _parsed(["sweep", "--seq-len", "512", "1024", "--sram-scale", "0.5", "1"])
    commas = _parsed(["sweep", "--seq-len", "512,1024", "--sram-scale", "0.5,1"])
    mixed = _parsed(["sweep", "--seq-len", "512,", "1024", "--sram-scale", "0.5", "1,"])
    for a in (spaced, commas, mixed):
        assert flatten(a.seq_len) == [512, 1024] and flatten(a.sram_scale) == [0.5, 1.0]
    t1 = _parsed(["tiling", "--search", "--block-sizes", "64", "128", "--warps", "4,8"])
    t2 = _parsed(["tiling", "--search", "--block-sizes", "64,128", "--warps", "4", "8"])
    assert flatten(t1.block_sizes) == flatten(t2.block_sizes) == [64, 128]
    assert flatten(t1.warps) == flatten(t2.warps) == [4, 8]


def test_every_option_says_what_it_does_and_its_default():
    import argparse

    from flashio.analysis.cli.main import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for verb, p in sub.choices.items():
        for action in p._actions:
            if action.option_strings and action.dest != "help":
                flag = f"flashio {verb} {action.option_strings[0]}"
                assert action.help, f"{flag}: no help"
                valued = not isinstance(action, argparse._StoreTrueAction)
                if valued and action.default not in (None, False):
                    assert "default" in action.help, f"{flag}: help does not give its default"


def test_default_blocks_follow_the_gpus_rule(capsys, tmp_path):
    """Without --block-q/--block-kv a schedule gets B = M/(4d) on the chosen GPU: 32 on a GPU
    of 16 KiB per CTA (8,192 fp16 elements / 256), 128 on the H200; one block given, the other
    follows it."""
    spec = tmp_path / "small.toml"
    spec.write_text('base = "h200"\nname = "small"\nsmem_per_sm_bytes = 65536\n'
                    "smem_per_cta_bytes = 16384\n")  # fmt: skip
    small = _json(capsys, ["simulate", "flash2", "--seq-len", "256", "--gpu", str(spec), "--json"])
    assert (small["block_q"], small["block_kv"]) == (32, 32)
    h200 = _json(capsys, ["simulate", "flash2", "--seq-len", "256", "--json"])
    assert (h200["block_q"], h200["block_kv"]) == (128, 128)
    one = _json(capsys, ["simulate", "flash2", "--seq-len", "256", "--block-kv", "64", "--json"])
    assert (one["block_q"], one["block_kv"]) == (64, 64)


def test_a_list_value_below_one_exits_2(capsys):
    assert main(["sweep", "--seq-len", "0,1024"]) == 2
    assert "--seq-len: expected positive values" in capsys.readouterr().err


def test_the_cli_does_not_import_what_simulate_does_not_use():
    """networkx (the schedule DAG), hypothesis (the strategies) and matplotlib (plots) load
    where they are used, not with the flashio command."""
    import subprocess
    import sys

    code = (
        "import sys, flashio.analysis.cli.main; "
        "print(sorted(m for m in ('hypothesis', 'networkx', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    from flashio import analysis

    assert analysis.strategies.__name__ == "flashio.analysis.strategies"
    assert analysis.schedule_dag.__module__ == "flashio.analysis.dag.graph"


def test_mask_flags_reach_the_schedule(capsys):
    """--window, --segments and --kv-seq-len build the shape the library builds; the report
    says what the mask leaves, and the tile search takes them too."""
    base = ["simulate", "flash2", "--heads", "2", "--seq-len", "512", "--head-dim", "32"]
    out = _json(capsys, [*base, "--causal", "--window", "128", "--json"])
    want = kernels.AttentionShape(1, 2, 512, 32, causal=True, window=128)
    assert out["shape"] == want.to_dict()
    sched = kernels.schedule("flash2", want, out["block_q"], out["block_kv"], out["warps"])
    res = simulator.simulate(sched, DEFAULT_GPU)
    assert out["result"]["global_read_bytes"] == res.global_read_bytes
    assert main([*base, "--segments", "100,412", "--causal"]) == 0
    text = capsys.readouterr().out
    assert "segments=(100, 412)" in text and "query-key pairs per head" in text
    argv = ["tiling", "--search", "--seq-len", "1", "--kv-seq-len", "2048", "--head-dim", "64"]
    assert main([*argv, "--block-sizes", "64", "128", "--warps", "4", "--top", "2"]) == 0
    assert "N_kv=2048" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--segments", "100,100"], "segments sum to 200, not seq_len=512"),
        (["--window", "1,2,3"], "expected W"),
        (["--window", "64"], "without causal=True"),
        (["--kv-seq-len", "0"], "kv_seq_len must be a positive integer"),
    ],
)
def test_bad_mask_flags_exit_2_with_the_reason(capsys, flags, message):
    argv = ["simulate", "flash2", "--seq-len", "512", *flags]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own type errors
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err
