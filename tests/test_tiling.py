"""The tiling rule B = M/(4d) in both forms, its capacity check, the tile search and its CLI."""

import argparse
import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashio import kernels, simulator
from flashio.analysis.cli import tiling as cli
from flashio.analysis.closed_form.tiling import tile_capacity, tiling_rule
from flashio.analysis.explore.search import plan_search, search_notes, search_tiles

H200 = simulator.load_gpu("h200")
A100 = simulator.load_gpu("a100-40gb")
DOC = Path(__file__).resolve().parent.parent / "docs" / "tiling.md"


# -- the rule -------------------------------------------------------------------------------
def test_the_papers_example_196608_bytes_d64_fp16():
    rule = tiling_rule(H200, head_dim=64, dtype="fp16", sram_bytes=196608)
    assert rule.m_elements == 98304  # bytes / 2: M counts fp16 elements
    assert rule.ratio == 384
    assert (rule.block_kv, rule.block_q, rule.seed_block) == (384, 64, 384)
    assert (rule.form("seed").block_q, rule.form("seed").block_kv) == (384, 384)
    assert (rule.form("paper").block_q, rule.form("paper").block_kv) == (64, 384)


def test_m_defaults_to_the_gpus_shared_memory_per_cta():
    rule = tiling_rule("h200", 64)
    assert rule.sram_bytes == H200.smem_per_cta_bytes == 232_448
    assert rule.m_elements == 116_224 and rule.seed_block == 454  # 116,224 / 256 = 454 exactly


@pytest.mark.parametrize(
    "gpu, d, dtype, floor_b, ceil_b",
    [
        # 232,448 B / 2 = 116,224 elements; / 384 = 302.67
        (H200, 96, "fp16", 302, 303),
        # 232,448 B / 4 = 58,112 elements; / 1024 = 56.75
        (H200, 256, "fp32", 56, 57),
        # 166,912 B / 8 = 20,864 elements; / 512 = 40.75
        (A100, 128, "fp64", 40, 41),
    ],
)
def test_floor_and_ceil_forms_differ_when_4d_does_not_divide_m(gpu, d, dtype, floor_b, ceil_b):
    rule = tiling_rule(gpu, d, dtype)
    assert rule.m_elements % (4 * d) != 0
    assert rule.seed_block == floor_b and rule.block_kv == ceil_b
    assert rule.block_q == min(ceil_b, d)
    assert any("differ by rounding" in n for n in rule.notes)


@given(m=st.integers(1, 1 << 20), d=st.integers(1, 512), dtype=st.sampled_from(["fp16", "fp32"]))
def test_forms_against_integer_arithmetic(m, d, dtype):
    eb = kernels.DTYPES[dtype][0]
    if m < 4 * d:
        with pytest.raises(ValueError, match="fewer than 4d"):
            tiling_rule(H200, d, dtype, sram_bytes=m * eb)
        return
    rule = tiling_rule(
        H200, d, dtype, sram_bytes=m * eb + eb - 1
    )  # a partial element is no element
    assert rule.m_elements == m
    assert rule.seed_block * 4 * d <= m < (rule.seed_block + 1) * 4 * d
    assert rule.block_kv - rule.seed_block == (0 if m % (4 * d) == 0 else 1)
    assert rule.block_q == min(rule.block_kv, d)


@given(m=st.integers(4, 1 << 22), d=st.integers(1, 1024))
def test_seed_form_always_fits_its_four_blocks(m, d):
    b = m // (4 * d)
    if b == 0:
        return
    cap = tile_capacity(b, b, d, "fp16", sram_bytes=2 * m)
    assert cap.m_elements == m
    assert cap.seed_elements == 4 * b * d <= m
    # and floor is the largest B that fits: one more row per block would not
    assert tile_capacity(b + 1, b + 1, d, "fp16", sram_bytes=2 * m).seed_elements > m


# -- the capacity check ---------------------------------------------------------------------
def test_papers_form_exceeds_m_by_rounding_alone():
    # H200, d = 256, fp32: M = 58,112, M/(4d) = 56.75 -> Br = Bc = 57 (57 <= d), and the four
    # blocks Q, K, V, O need 4 x 57 x 256 = 58,368 elements: 256 more than M.
    rule = tiling_rule(H200, 256, "fp32")
    paper = rule.form("paper").capacity
    assert (paper.block_q, paper.block_kv) == (57, 57)
    assert paper.seed_elements == 58_368 > rule.m_elements == 58_112
    seed = rule.form("seed").capacity
    assert seed.seed_elements == 4 * 56 * 256 <= rule.m_elements
    assert any("58,368 > M = 58,112" in n for n in rule.notes)


def test_papers_form_exceeds_m_when_s_is_counted_on_h200_d128():
    # M = 116,224, Bc = 227, Br = 128: Q, O 128 x 128; K, V 227 x 128; S 128 x 227; l, m 2 x 128
    rule = tiling_rule(H200, 128)
    cap = rule.form("paper").capacity
    expected = 2 * 128 * 128 + 2 * 227 * 128 + 128 * 227 + 2 * 128
    assert cap.live_elements == expected == 120_192 > rule.m_elements
    assert cap.seed_elements == 90_880 <= rule.m_elements


def test_seed_block_overflows_once_s_is_counted():
    rule = tiling_rule(H200, 64, sram_bytes=196608)
    cap = rule.form("seed").capacity
    assert cap.seed_elements == 98_304 == rule.m_elements  # exactly full
    assert cap.live_elements == 98_304 + 384 * 384 + 2 * 384  # S_ij and l, m on top
    assert [t.name for t in cap.tiles if not t.seed_block] == ["S_ij/P_ij", "l_i, m_i"]


def test_double_buffering_adds_one_more_k_and_v_block():
    cap = tile_capacity(64, 384, 64, "fp16", 196608)
    assert cap.double_buffered_elements - cap.live_elements == 2 * 384 * 64
    by_name = {t.name: t for t in cap.tiles}
    assert by_name["S_ij/P_ij"].elements == 64 * 384 and by_name["l_i, m_i"].elements == 128
    assert cap.to_dict()["totals"][2]["bytes"] == 2 * cap.double_buffered_elements


def test_fa1_holds_four_more_row_vectors():
    fa1 = tile_capacity(64, 128, 64, "fp16", 196608, algorithm="flash1")
    fa2 = tile_capacity(64, 128, 64, "fp16", 196608, algorithm="flash2")
    assert fa1.live_elements - fa2.live_elements == 4 * 64


def test_kernel_check_uses_the_projects_schedule():
    rule = tiling_rule(H200, 64, sram_bytes=196608)
    for form in rule.forms:
        shape = kernels.AttentionShape(1, 1, max(form.block_q, form.block_kv), 64)
        info = kernels.schedule("flash2", shape, form.block_q, form.block_kv).kernels[0]
        (fit,) = form.kernels
        assert fit.smem_bytes == info.smem_bytes == (form.block_q + 2 * form.block_kv) * 64 * 2
        assert fit.regs_per_thread == info.regs_per_thread and fit.fits
        occ = simulator.occupancy(info, H200)
        assert fit.ctas_per_sm == occ.ctas_per_sm and fit.limiter == occ.limiter
    # 384 x 384 keeps O_i and S_ij in fp32 registers: far above 255 per thread
    assert rule.form("seed").kernels[0].spilled_regs_per_thread > 0


def test_an_m_larger_than_the_gpu_gives_blocks_that_do_not_fit_it():
    rule = tiling_rule(A100, 128, sram_bytes=2 * A100.smem_per_cta_bytes)
    (fit,) = rule.form("seed").kernels
    assert fit.smem_bytes > A100.smem_per_cta_bytes and not fit.fits
    assert "shared memory" in fit.error and fit.ctas_per_sm == 0


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"head_dim": 0}, "head_dim"),
        ({"head_dim": 64, "dtype": "fp8"}, "dtype"),
        ({"head_dim": 64, "sram_bytes": -1}, "sram_bytes"),
        ({"head_dim": 64, "sram_bytes": 511}, "fewer than 4d"),
    ],
)
def test_bad_arguments_say_what_is_wrong(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        tiling_rule(H200, **kwargs)


# -- the search -----------------------------------------------------------------------------
SMALL = kernels.AttentionShape(1, 2, 256, 128, "fp16")


@pytest.fixture(scope="module")
def small_search():
    calls = []
    results = search_tiles(
        "flash2",
        SMALL,
        A100,
        block_sizes=(32, 64, 128, 256),
        warps=(4, 8),
        progress=lambda done, total, r: calls.append((done, total)),
        compiled=False,  # every tiling, at the pipe rates: the search's own mechanics
    )
    return results, calls


def test_search_ranks_sorted_and_complete(small_search):
    results, calls = small_search
    ok = [r for r in results if r.feasible]
    assert [r.rank_time for r in ok] == list(range(1, len(ok) + 1))
    assert [r.time_s for r in ok] == sorted(r.time_s for r in ok)
    assert sorted(r.rank_hbm for r in ok) == list(range(1, len(ok) + 1))
    by_hbm = sorted(ok, key=lambda r: r.rank_hbm)
    assert [r.hbm_bytes for r in by_hbm] == sorted(r.hbm_bytes for r in ok)
    assert ok[0].slowdown == 1.0 and all(r.slowdown >= 1.0 for r in ok)
    assert results[: len(ok)] == ok  # feasible first
    assert calls[-1] == (len(results), len(results))
    assert [c[0] for c in calls] == list(range(1, len(results) + 1))


def test_search_infeasible_tilings_carry_the_capacity_message(small_search):
    results, _ = small_search
    limit = A100.smem_per_cta_bytes
    for r in results:
        needs = (r.block_q + 2 * r.block_kv) * SMALL.head_dim * 2  # Q_i, K_j, V_j in fp16
        assert r.feasible == (needs <= limit), (r.block_q, r.block_kv)
        if not r.feasible:
            assert "shared memory" in r.error and f"{limit:,} B" in r.error
            assert r.rank_time == 0 and r.time_s == 0
    assert any(not r.feasible for r in results)  # 256 x 256 at d = 128 needs 196,608 B


def test_search_results_are_what_simulate_reports(small_search):
    results, _ = small_search
    ok = [r for r in results if r.feasible]
    for r in (ok[0], ok[-1]):
        res = simulator.simulate(
            kernels.schedule("flash2", SMALL, r.block_q, r.block_kv, r.warps), A100
        )
        assert r.time_s == res.time_s and r.hbm_bytes == res.hbm_bytes
        assert r.global_bytes == res.global_bytes and r.ctas_per_sm == res.occupancy.ctas_per_sm


def test_search_marks_the_rules_choice(small_search):
    results, _ = small_search
    rule = tiling_rule(A100, SMALL.head_dim)  # M = 83,456, M/(4d) = 163
    seed = [r for r in results if "seed" in r.rule.split(", ")]
    paper = [r for r in results if "paper" in r.rule.split(", ")]
    assert {(r.block_q, r.block_kv) for r in seed} == {(rule.seed_block, rule.seed_block)}
    assert {(r.block_q, r.block_kv) for r in paper} == {(rule.block_q, rule.block_kv)}
    assert all(r.feasible and r.rank_time >= 1 for r in seed + paper)
    notes = " ".join(search_notes(results))
    assert "The seed's B = floor(M/(4d))" in notes and "rank" in notes


def test_search_explains_a_slower_bigger_block():
    # h200, N = 512, d = 64: 256 x 256 leaves SMs idle and spills, 64 x 64 does not
    shape = kernels.AttentionShape(1, 4, 512, 64)
    results = search_tiles(
        "flash2", shape, H200, (64, 256), (4,), include_rule=False, compiled=False
    )
    big = next(r for r in results if (r.block_q, r.block_kv) == (256, 256))
    best = results[0]
    assert big.time_s > best.time_s and big.resident_warps_per_sm < best.resident_warps_per_sm
    assert "resident warps/SM" in big.why and "grid of 8 CTAs" in big.why
    assert "spilled" in big.why


def test_plan_estimates_events_without_simulating():
    """A plan counts the events of the candidates its search would simulate: every feasible
    one at the pipe rates; by default those the issue model prices (at d = 128, 4 warps: the
    census's 64-row tilings; 32-row tiles, 8 rows a warp, it prices neither way)."""
    plan = plan_search("flash2", SMALL, A100, (32, 64), (4,), include_rule=False)
    events = {
        (c.block_q, c.block_kv): kernels.schedule("flash2", SMALL, c.block_q, c.block_kv, 4)
        .n_events() for c in plan.candidates
    }  # fmt: skip
    assert plan.priced == ("", "", "compiled", "compiled") and plan.compiled
    assert [(c.block_q, c.block_kv) for c in plan.simulated()] == [(64, 32), (64, 64)]
    assert plan.events == events[64, 32] + events[64, 64] and plan.estimated_s > 0
    assert sum(c.events for c in plan.simulated(False)) == sum(events.values())


def test_search_prices_by_the_issue_model_by_default():
    """Without ``compiled`` the search prices by the kernels' main loops wherever the issue
    model prices a candidate (flash2: this project's census), leaving out what it cannot
    price, and at the pipe rates where it prices none (flash1); ``compiled=False`` gives the
    pipe rates for every tiling."""
    shape = kernels.AttentionShape(1, 2, 512, 64, "bf16")
    calls = []
    auto = search_tiles("flash2", shape, "h200-measured", (16, 64), (4,), include_rule=False,
                        progress=lambda done, total, r: calls.append((done, total)))  # fmt: skip
    assert calls == [(i, len(auto)) for i in range(1, len(auto) + 1)]  # what ran, not 4
    pipe = search_tiles("flash2", shape, "h200-measured", (16, 64), (4,), include_rule=False,
                        compiled=False)  # fmt: skip
    by = {(r.block_q, r.block_kv): r for r in auto}
    assert by[64, 64].priced_by == "compiled" and (16, 16) not in by  # 4 rows a warp: unpriced
    assert {(r.block_q, r.block_kv) for r in pipe} == {(16, 16), (16, 64), (64, 16), (64, 64)}
    assert all(r.priced_by == "" for r in pipe)
    slow = {(r.block_q, r.block_kv): r.time_s for r in pipe}
    assert by[64, 64].time_s > slow[64, 64]  # the compiled loop is slower than the pipe rates
    flash1 = search_tiles("flash1", shape, "h200-measured", (64,), (4,), include_rule=False)
    assert flash1 and all(r.priced_by == "" for r in flash1)
    assert not plan_search("flash1", shape, simulator.load_gpu("h200-measured"), (64,), (4,),
                           include_rule=False).compiled  # fmt: skip


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"block_sizes": ()}, "block_sizes"),
        ({"warps": (0,)}, "warps"),
    ],
)
def test_search_bad_arguments(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        search_tiles("flash2", SMALL, A100, **kwargs)


def test_compiled_search_ranks_the_kernels_as_the_gpu_does():
    """--compiled prices the tilings of this project's compiled kernels by their compiled main
    loops; on the H200 (data/gpu/gpu_measure.json) the forward at d = 128 ran 128x64 faster
    than 128x128 (8 warps) at every shape measured with both, and so does the compiled
    search. Tilings with fewer than 16 rows a warp can be neither compiled here nor written:
    they are left out."""
    import csv

    rows = list(csv.DictReader(open("data/gpu/gpu_measure.csv")))
    by = {}
    for r in rows:
        if r["impl"] == "flash2" and r["head_dim"] == "128" and r["causal"] == "False":
            key = (int(r["batch"]), int(r["heads"]), int(r["seq_len"]), r["dtype"])
            by.setdefault(key, {})[int(r["block_kv"])] = float(r["median_ms"])
    shapes = [k for k, v in by.items() if {64, 128} <= set(v) and k[2] >= 2048]
    assert shapes
    for b, h, n, dtype in shapes[:2]:
        measured = by[b, h, n, dtype]
        assert measured[64] < measured[128]
        shape = kernels.AttentionShape(b, h, n, 128, dtype)
        res = search_tiles("flash2", shape, "h200-measured", (32, 64, 128), (8,),
                           include_rule=False, compiled=True)  # fmt: skip
        assert all(simulator.issue.lookup(
            kernels.schedule("flash2", shape, r.block_q, r.block_kv, r.warps).meta.params,
            "flash2_fwd", r.warps) for r in res)  # fmt: skip
        assert {r.priced_by for r in res} == {"compiled"}
        t = {(r.block_q, r.block_kv): r.time_s for r in res}
        assert t[128, 64] < t[128, 128], (shape, t)


def test_compiled_search_prices_other_forward_tilings_by_written_programs():
    """Forward tilings the census lacks are priced by their written programs; those the
    compiler spills give lower bounds and rank after every priced tiling, with the compiler's
    spill stores in regs(spill)."""
    shape = kernels.AttentionShape(1, 16, 4096, 128, "bf16")
    res = search_tiles("flash2", shape, "h200-measured", (48, 64, 96, 128), (4, 8),
                       include_rule=False, compiled=True)  # fmt: skip
    priced = {(r.block_q, r.block_kv, r.warps): r for r in res if r.feasible}
    assert priced[128, 64, 8].priced_by == "compiled"
    assert priced[64, 48, 4].priced_by == "written"  # 16 rows a warp, never compiled
    bound = priced[128, 96, 4]  # 32 rows a warp of 96 keys at d = 128: the compiler spills
    assert bound.priced_by == "written, would spill"
    # the compiler's count and spill stores (data/sass/flashio-registers.json)
    regs = simulator.issue.written_registers("flashio", 128, 96, 128, 4)
    assert regs.source == "compiler" and regs.spilled(255) == bound.spilled_regs_per_thread > 0
    assert bound.regs_per_thread == 255 + bound.spilled_regs_per_thread
    order = [r.priced_by.endswith("would spill") for r in sorted(res, key=lambda r: r.rank_time)]
    assert order == sorted(order)  # every lower bound after every priced tiling
    assert (64, 64, 8) not in priced  # 8 rows a warp: neither compiled nor writable
    notes = " ".join(search_notes(res))
    assert "lower bounds, ranked after every priced tiling" in notes


def test_search_keeps_blocks_larger_than_seq_len():
    """A decoding step (N = 1) is searched over 64- and 128-row tiles, each one partial block:
    the same global bytes, the whole tiles' shared memory."""
    shape = kernels.AttentionShape(1, 2, 1, 64, "fp16")
    results = search_tiles(
        "flash2", shape, A100, block_sizes=(64, 128), warps=(4,), include_rule=False,
        compiled=False,
    )  # fmt: skip
    assert {(r.block_q, r.block_kv) for r in results} == {
        (64, 64),
        (64, 128),
        (128, 64),
        (128, 128),
    }
    assert all(r.feasible for r in results)
    assert len({r.global_bytes for r in results}) == 1
    assert len({r.smem_bytes for r in results}) == 4


# -- the CLI --------------------------------------------------------------------------------
def test_cli_registers_on_a_fresh_parser(capsys):
    parser = argparse.ArgumentParser(prog="flashio")
    cli.add_tiling_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["tiling", "--head-dim", "64", "--sram-bytes", "196608", "--json"])
    assert args.func(args) == 0
    out = json.loads(capsys.readouterr().out)["rule"]
    assert (out["block_kv"], out["block_q"], out["m_elements"]) == (384, 64, 98304)
    assert out["forms"][0]["capacity"]["totals"][0]["fits"] is True


def test_cli_table_names_both_forms(capsys):
    assert cli.main(["--gpu", "a100-40gb", "--head-dim", "128"]) == 0
    text = capsys.readouterr().out
    assert "floor(M/(4d))" in text and "ceil(M/(4d))" in text and "EXCEEDS" in text
    assert "83,456 elements" in text  # 166,912 B / 2


def test_cli_search_json_and_progress(capsys):
    argv = ["--gpu", "a100-40gb", "--head-dim", "128", "--seq-len", "256", "--heads", "2"]
    argv += ["--search", "--block-sizes", "64,256", "--warps", "4", "--json"]
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    search = json.loads(captured.out)["search"]
    assert search["shape"]["seq_len"] == 256 and search["notes"]
    assert any(not r["feasible"] and r["error"] for r in search["results"])
    assert "tiling" in captured.err and "M events" in captured.err


SMALL_SEARCH = ["--heads", "2", "--seq-len", "256", "--search", "--block-sizes", "16,64"]
SMALL_SEARCH += ["--warps", "4", "--json"]


def _search(capsys, argv):
    assert cli.main(argv) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out)["search"], captured.err


def _estimate(err: str) -> tuple[int, float]:
    """Tilings and M events of the stderr line 'simulating N tilings, M M events, ...'."""
    m = re.search(r"simulating (\d+) tilings, ([\d.]+) M events", err)
    return int(m[1]), float(m[2])


def test_cli_search_prices_by_the_issue_model_where_it_prices_a_tiling(capsys):
    """flash2 by default: the issue model, the tilings it cannot price (16 rows, 4 a warp)
    left out, and the stderr estimate counts only what ran; flash1 has no kernel the issue
    model prices, so the default falls back to the pipe rates and says so."""
    auto, err = _search(capsys, SMALL_SEARCH)
    ran = [r for r in auto["results"] if r["feasible"]]
    assert auto["compiled"] is True and auto["left_out"] == 2
    assert {r["priced_by"].split(",")[0] for r in ran} == {"compiled", "written"}
    assert not any(r["block_q"] == 16 for r in ran)
    gpu, shape = simulator.load_gpu(auto["gpu"]), kernels.AttentionShape(1, 2, 256, 64)
    plan = plan_search("flash2", shape, gpu, (16, 64), (4,))
    events = sum(c.events for c in plan.simulated())
    assert _estimate(err) == (len(ran), round(events / 1e6, 1)) and len(ran) == 5
    assert "priced by their kernels' main loops" in err

    pipe, err = _search(capsys, [*SMALL_SEARCH, "--pipe-rates"])
    assert pipe["compiled"] is False and pipe["left_out"] == 0
    assert _estimate(err)[0] == len(plan.candidates) == 7 and "at the pipe rates" in err

    flash1, _ = _search(capsys, [*SMALL_SEARCH, "--schedule", "flash1"])
    assert flash1["compiled"] is False and flash1["results"]
    assert all(r["priced_by"] == "" for r in flash1["results"])
    assert cli.main([*SMALL_SEARCH[:-1], "--schedule", "flash1"]) == 0
    out = capsys.readouterr().out
    assert "at the pipe rates: the issue model prices no candidate of flash1" in out


def test_cli_pipe_rates_gives_the_librarys_pipe_rate_ranking(capsys):
    """--pipe-rates is the ranking of search_tiles(..., compiled=False), row for row; the
    default differs from it (times and which tilings rank)."""
    pipe, _ = _search(capsys, [*SMALL_SEARCH, "--pipe-rates"])
    gpu, shape = simulator.load_gpu(pipe["gpu"]), kernels.AttentionShape(1, 2, 256, 64)
    want = search_tiles("flash2", shape, gpu, (16, 64), (4,), compiled=False)
    assert pipe["results"] == [r.to_dict() for r in want]
    auto, _ = _search(capsys, SMALL_SEARCH)
    assert auto["results"] != pipe["results"]


def test_cli_compiled_and_pipe_rates_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([*SMALL_SEARCH, "--compiled", "--pipe-rates"])
    assert exc.value.code == 2
    assert "argument --pipe-rates: not allowed with argument --compiled" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--head-dim", "0"], "head_dim"),
        (["--gpu", "h300"], "h300"),
        (["--sram-bytes", "100"], "fewer than 4d"),
        (["--search", "--seq-len", "0"], "seq_len"),
    ],
)
def test_cli_bad_input_exits_2(capsys, argv, needle):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "error" in err and needle in err


def test_cli_bad_list_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--search", "--block-sizes", "16,x"])
    assert exc.value.code == 2
    assert "separated by commas or spaces" in capsys.readouterr().err


# -- the docs' example runs (its tables: flashio docs --check, tests/test_docs.py) -----------
def test_docs_python_example_runs(capsys):
    (code,) = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    exec(compile(code, str(DOC), "exec"), {})
    assert "98,304 elements" in capsys.readouterr().out


def test_the_searchs_default_block_is_the_clis_on_that_gpu():
    """The 'default' candidate of a search is what flashio simulate picks without blocks: the
    seed's rule on the searched GPU's M (32 at d = 64, fp16, 16 KiB per CTA), not the A100's."""
    from flashio.analysis import plan_search

    gpu = simulator.load_gpu("h200-measured").replace(
        smem_per_cta_bytes=16384, smem_per_sm_bytes=65536
    )
    shape = kernels.AttentionShape(1, 16, 1024, 64, "fp16")
    plan = plan_search("flash2", shape, gpu, (64,), (4,))
    default = [c for c in plan.candidates if "default" in c.rule.split(", ")]
    assert {(c.block_q, c.block_kv) for c in default} == {(32, 32)}
    assert kernels.default_block(shape) == 128  # without a GPU: the paper's 192 KiB


def test_search_grid_is_the_censuss_forward_tilings():
    """The GPU run that judges the compiled search (benchmarks.gpu_measure's SEARCH_TILES,
    data/gpu/search) times exactly the forward tilings the instruction census holds, at d = 64
    and 128, bf16 and causal among them."""
    import re

    from benchmarks.measure_grids import SEARCH_TILES

    keys = simulator.issue.census("flashio")
    for d in (64, 128):
        held = {
            (int(m[1]), int(m[2]), int(m[3]))
            for k in keys
            if (m := re.fullmatch(rf"flash2_fwd d={d} (\d+)x(\d+) w=(\d+) bf16( masked)?", k))
        }
        assert held == set(SEARCH_TILES), d


def test_compiled_search_keeps_the_rules_blocks_at_the_pipe_rates():
    """The rule's blocks are what the search is about: where the issue model prices no kernel
    at them (454 rows at d = 64 on the H200), a compiled search still simulates them, at the
    pipe rates, says so, and ranks them after every priced tiling as lower bounds."""
    from flashio.analysis.explore.search import PIPE_RATES_BOUND

    shape = kernels.AttentionShape(1, 2, 1024, 64, "fp16")
    res = search_tiles("flash2", shape, "h200-measured", (64, 128), (4, 8))
    ok = [r for r in res if r.feasible]
    rule = [r for r in ok if {"seed", "paper"} & set(r.rule.split(", "))]
    assert rule and all(r.priced_by == PIPE_RATES_BOUND for r in rule)
    assert all("no kernel: at the pipe rates" in r.why for r in rule)
    priced = [r for r in ok if r.priced_by in ("compiled", "written")]
    assert priced and max(r.rank_time for r in priced) < min(r.rank_time for r in rule)
    notes = " ".join(search_notes(res))
    assert "of the rule's tilings have no kernel the issue model prices" in notes
    assert "The seed's B = floor(M/(4d))" in notes
    gpu = simulator.load_gpu("h200-measured")
    header = cli.search_text(res, shape, "flash2", gpu, 0, compiled=True).splitlines()[1]
    assert header.endswith("main loop, the rule's blocks without one at the pipe rates)")


def test_search_names_the_tilings_too_close_to_call():
    """Priced tilings predicted within 5% of the fastest are named beside it (the validation's
    criterion for the model's pick); lower bounds and slower tilings are not, and a fastest
    that is itself a lower bound names none."""
    from flashio.analysis.explore.search import TileResult

    def tile(bq, bk, time_s, rank, priced_by="compiled"):
        return TileResult(
            block_q=bq, block_kv=bk, warps=4, rule="", error="", events=1, kernel="flash2_fwd",
            smem_bytes=0, regs_per_thread=128, spilled_regs_per_thread=0, ctas=1024,
            ctas_per_sm=2, waves=4, resident_warps_per_sm=8.0, time_s=time_s, global_bytes=1,
            hbm_bytes=1, bound="compute", rank_time=rank, rank_hbm=1, slowdown=1.0, why="",
            priced_by=priced_by,
        )  # fmt: skip

    res = [tile(128, 64, 1.00, 1), tile(64, 64, 1.04, 2), tile(128, 32, 1.06, 3),
           tile(64, 32, 0.90, 4, "written, would spill")]  # fmt: skip
    notes = " ".join(search_notes(res))
    assert "Within 5% of it: 64 x 64, 4 warps (+4.0%)." in notes
    assert "128 x 32, 4 warps (+" not in notes and "64 x 32, 4 warps (+" not in notes
    alone = " ".join(search_notes([tile(128, 64, 1.0, 1), tile(64, 64, 1.2, 2)]))
    assert "Within 5%" not in alone
    bound = [tile(128, 64, 1.0, 1, "pipe rates (no kernel)"), tile(64, 64, 1.01, 2)]
    assert "Within 5%" not in " ".join(search_notes(bound))


def test_the_ranking_s_reasons_are_cut_to_a_terminal_s_width():
    """The table's last column keeps the first reasons that fit (never cutting inside
    parentheses) and says how many more --json has; a short reason is kept whole."""
    from flashio.analysis.explore.search_reading import WHY_WIDTH, short_why

    assert short_why("global traffic x1.97") == "global traffic x1.97"
    why = (
        "7.8 resident warps/SM vs 8.0 (2 warps/CTA; grid of 512 CTAs fills 97% of the 528 "
        "slots); 678 regs/thread, 423 spilled to local memory; global traffic x1.97"
    )
    cell = short_why(why)
    assert cell.startswith("7.8 resident warps/SM vs 8.0 (2 warps/CTA; grid of 512 CTAs")
    assert cell.endswith("528 slots); +2 more (--json)")
    short = short_why("no kernel: at the pipe rates; global traffic x1.97; 4 waves vs 2")
    assert short == "no kernel: at the pipe rates; global traffic x1.97; 4 waves vs 2"
    assert len(short) <= WHY_WIDTH


def test_search_counts_the_near_ties_beyond_the_first_four():
    from flashio.analysis.explore.search import TileResult

    def tile(bk, time_s, rank):
        return TileResult(
            block_q=128, block_kv=bk, warps=4, rule="", error="", events=1, kernel="flash2_fwd",
            smem_bytes=0, regs_per_thread=128, spilled_regs_per_thread=0, ctas=1024,
            ctas_per_sm=2, waves=4, resident_warps_per_sm=8.0, time_s=time_s, global_bytes=1,
            hbm_bytes=1, bound="compute", rank_time=rank, rank_hbm=1, slowdown=1.0, why="",
            priced_by="compiled",
        )  # fmt: skip

    res = [tile(16 * (k + 1), 1.0 + 0.005 * k, k + 1) for k in range(7)]
    notes = " ".join(search_notes(res))
    assert "128 x 80, 4 warps (+2.0%) and 2 more." in notes
