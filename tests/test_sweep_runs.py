"""How a sweep runs: on a local Dask cluster, resumed after an interruption, into CSV and Parquet;
the rows are the same whichever way it ran."""

import pyarrow.parquet as pq

import flashio
from flashio.analysis.cli.main import main
from flashio.analysis.explore import sweep, sweep_files

GRID = "sweep --seq-len 256 512 --heads 2 --schedule flash2 --schedule standard --sram-scale 0.5 1"


def _run(tmp_path, name, *extra):
    out = tmp_path / f"{name}.csv"
    assert main([*GRID.split(), "--out", str(out), *extra]) == 0
    return out


def test_workers_give_the_rows_of_the_serial_run(tmp_path, capsys):
    serial = _run(tmp_path, "serial")
    dask = _run(tmp_path, "dask", "--workers", "2")
    assert serial.read_text() == dask.read_text()
    a, b = (
        pq.read_table(serial.with_suffix(".parquet")),
        pq.read_table(dask.with_suffix(".parquet")),
    )
    assert a.num_rows == 8 and a.equals(b)
    assert set(a.column_names) >= {"gpu", "schedule", "impl", "seq_len", "block_q", "time_s"}


def test_an_interrupted_sweep_resumes_where_it_stopped(tmp_path, capsys, monkeypatch):
    fresh = _run(tmp_path, "fresh")
    done = []
    real = sweep.simulate_point

    def interrupted(point):
        if len(done) == 3:
            raise KeyboardInterrupt
        done.append(point)
        return real(point)

    monkeypatch.setattr(sweep, "simulate_point", interrupted)
    out = tmp_path / "resumed.csv"
    assert main([*GRID.split(), "--out", str(out)]) == 130  # interrupted: no CSV yet
    assert not out.exists() and len(sweep_files.read_rows(tmp_path / "resumed.csv.partial")) == 3
    calls = []
    monkeypatch.setattr(sweep, "simulate_point", lambda p: calls.append(p) or real(p))
    capsys.readouterr()
    assert main([*GRID.split(), "--out", str(out), "--resume"]) == 0
    assert len(calls) == 5 and "3 kept from the earlier run" in capsys.readouterr().out
    assert out.read_text() == fresh.read_text()
    assert not (tmp_path / "resumed.csv.partial").exists()


def test_bad_running_options_exit_2(tmp_path, capsys):
    out = str(tmp_path / "x.csv")
    assert main([*GRID.split(), "--out", out, "--workers", "0"]) == 2
    assert "--workers must be at least 1" in capsys.readouterr().err
    assert main([*GRID.split(), "--out", out, "--workers", "2", "--scheduler", "tcp://x:1"]) == 2
    assert "not both" in capsys.readouterr().err
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    assert main([*GRID.split(), "--out", out, "--resume"]) == 2
    assert "not a sweep CSV" in capsys.readouterr().err


def test_rows_read_back_equal_the_rows_written(tmp_path):
    shape = flashio.AttentionShape(1, 2, 256, 64)
    points = sweep.sweep_points([flashio.load_gpu("h200")], ["flash2", "standard"], [shape],
                                [(None, None), (64, 64)])  # fmt: skip
    rows = [sweep.simulate_point(p) for p in points]
    sweep_files.write_csv(rows, tmp_path / "r.csv")
    assert sweep_files.read_rows(tmp_path / "r.csv") == rows


def test_several_scaled_resources_plot_time_against_each(tmp_path, capsys):
    out = tmp_path / "r.csv"
    argv = ["sweep", "--seq-len", "512", "--heads", "2", "--schedule", "flash2",
            "--sram-scale", "0.5", "1", "--l2-scale", "0.25", "1", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert out.with_suffix(".png").is_file()
    rows = sweep_files.read_rows(out)
    h200 = flashio.load_gpu("h200-measured")
    assert {r.l2_bytes for r in rows} == {h200.l2_bytes // 4, h200.l2_bytes}
    names = {"", "-sram0.5x", "-l2x0.25", "-sram0.5x-l2x0.25"}
    assert {r.gpu for r in rows} == {f"h200-measured{n}" for n in names}


def test_resuming_a_narrower_sweep_keeps_the_earlier_rows(tmp_path, capsys):
    out = _run(tmp_path, "wide")
    assert main(["sweep", "--seq-len", "256", "--heads", "2", "--schedule", "flash2",
                 "--out", str(out), "--resume"]) == 0  # fmt: skip
    assert "8 kept from the earlier run" in capsys.readouterr().out
    assert len(sweep_files.read_rows(out)) == 8


def test_rows_record_the_mask_and_the_split_count(tmp_path, capsys):
    """A row says which mask and options it ran with, so that a resumed sweep with another
    window, or flash_decode on a GPU of fewer SMs, never reuses a row that is not its own."""
    base = "sweep --seq-len 512 --heads 2 --schedule flash2 --causal".split()
    out = tmp_path / "w.csv"
    assert main([*base, "--window", "64", "--out", str(out)]) == 0
    assert main([*base, "--window", "400", "--out", str(out), "--resume"]) == 0
    rows = {r.mask: r for r in sweep_files.read_rows(out)}  # the new grid's row, then the kept one
    assert sorted(rows) == ["window=400", "window=64"]
    assert rows["window=64"].global_bytes < rows["window=400"].global_bytes
    dec = "sweep --schedule flash_decode --seq-len 1 --kv-seq-len 8192 --heads 8".split()
    assert main([*dec, "--sm-scale", "0.25", "1", "--out", str(tmp_path / "d.csv")]) == 0
    small, full = sweep_files.read_rows(tmp_path / "d.csv")
    assert "split_heuristic=1" in small.options and small.options != full.options
    assert (small.sm_count, full.sm_count) == (33, 132)


def test_pareto_front_keeps_the_gpus_nothing_beats(tmp_path, capsys):
    """A GPU is on the front unless another has no more of any resource and is no slower
    (one of them strictly); checked against the definition over every pair of a real sweep."""
    argv = "sweep --seq-len 2048 --heads 4 --schedule flash2 --hbm-scale 0.5 1 2 --sm-scale 0.5 1"
    assert main([*argv.split(), "--out", str(tmp_path / "p.csv")]) == 0
    assert "Pareto front, flash2 N=2048" in capsys.readouterr().out
    rows = sweep_files.read_rows(tmp_path / "p.csv")
    (front,) = sweep.pareto_front(rows).values()

    def beats(a, b):
        le = all(getattr(a, f) <= getattr(b, f) for f in sweep.RESOURCES) and a.time_s <= b.time_s
        return le and (a != b) and (a.time_s < b.time_s or any(
            getattr(a, f) < getattr(b, f) for f in sweep.RESOURCES))  # fmt: skip

    assert [r for r in rows if not any(beats(o, r) for o in rows)] == sorted(
        front, key=lambda r: rows.index(r)
    )
    assert 0 < len(front) < len(rows)
    assert [r.time_s for r in front] == sorted(r.time_s for r in front)


def test_a_sampled_sweep_says_so_and_keeps_its_rows_apart(tmp_path, capsys):
    """--sampled: each row records the mode; these small grids are replayed whole, so the
    figures equal the exact run's; a resumed sweep in the other mode simulates its points
    anew (the mode is part of a point's key)."""
    exact = _run(tmp_path, "exact")
    sampled = _run(tmp_path, "sampled", "--sampled")
    rows_e, rows_s = sweep_files.read_rows(exact), sweep_files.read_rows(sampled)
    assert {r.mode for r in rows_e} == {"exact"} and {r.mode for r in rows_s} == {"sampled"}
    assert [r.time_s for r in rows_e] == [r.time_s for r in rows_s]
    both = _run(tmp_path, "exact", "--sampled", "--resume")  # the exact rows kept beside
    assert {r.mode for r in sweep_files.read_rows(both)} == {"exact", "sampled"}


def test_a_sweep_prices_as_simulate_does_and_says_how(tmp_path, capsys):
    """By default a sweep prices each kernel the issue model can by its compiled loop, as
    ``flashio simulate`` does (its rows equal simulate() with search.COMPILED on the same
    GPU, the unscaled and a scaled one); --pipe-rates prices every kernel at the pipe rates.
    The pricing is part of a point's key: a resumed sweep at the other pricing keeps the
    earlier rows and adds its own."""
    from flashio.analysis.explore.search import COMPILED

    out = tmp_path / "p.csv"
    grid = "sweep --seq-len 1024 --heads 2 --schedule flash2 --block 128 --sm-scale 0.25 1"
    assert main([*grid.split(), "--out", str(out)]) == 0
    compiled = sweep_files.read_rows(out)
    assert [r.pricing for r in compiled] == ["compiled"] * 2
    assert all(r.compiled_kernels == "flash2_fwd" for r in compiled)
    base = flashio.load_gpu("h200-measured")
    for row, gpu in zip(compiled, sweep.gpu_variants(base, sm_scales=(0.25, 1)), strict=True):
        sched = flashio.schedule("flash2", flashio.AttentionShape(1, 2, 1024, 64),
                                 block_q=128, block_kv=128, warps=row.warps)  # fmt: skip
        assert row.gpu == gpu.name
        assert row.time_s == flashio.simulate(sched, gpu, options=COMPILED).time_s
        assert row.time_s != flashio.simulate(sched, gpu).time_s
    assert main([*grid.split(), "--out", str(out), "--pipe-rates", "--resume"]) == 0
    rows = sweep_files.read_rows(out)
    assert [r.pricing for r in rows] == ["pipe rates"] * 2 + ["compiled"] * 2
    assert rows[2:] == compiled and all(r.compiled_kernels == "" for r in rows[:2])
    assert "2 kept from the earlier run" in capsys.readouterr().out


def test_a_sweep_csv_of_an_earlier_flashio_reads_as_priced_at_the_pipe_rates(tmp_path):
    """Rows written before sweeps had the pricing columns were priced at the pipe rates: they
    read back so, under the key of a point at the pipe rates."""
    import csv

    shape = flashio.AttentionShape(1, 2, 256, 64)
    (p,) = sweep.sweep_points([flashio.load_gpu("h200")], ["flash2"], [shape], [(64, 64)])
    row = sweep.simulate_point(p)
    path = tmp_path / "old.csv"
    sweep_files.write_csv([row], path)
    with path.open(newline="") as f:
        (d,) = list(csv.DictReader(f))
    old = {k: v for k, v in d.items() if k not in sweep_files.LEGACY_COLUMNS}
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(old))
        w.writeheader()
        w.writerow(old)
    (back,) = sweep_files.read_rows(path)
    assert back == row and back.pricing == "pipe rates"
    compiled = {**old, "pricing": "compiled"}
    assert sweep_files.row_key(old) == p.key() != sweep_files.row_key(compiled)


def test_a_resumed_sweep_keeps_an_old_partial_file_one_csv(tmp_path, capsys, monkeypatch):
    """An interrupted sweep's ``OUT.partial`` written before the pricing columns: resuming
    keeps its rows (priced at the pipe rates) and appends the new ones in this version's
    columns, so that the file stays one CSV when the resumed sweep is interrupted too."""
    import csv

    out = tmp_path / "r.csv"
    grid = "sweep --seq-len 256 --heads 2 --schedule flash2 --block 64 --sram-scale 0.5 1 2"
    assert main([*grid.split(), "--pipe-rates", "--out", str(out)]) == 0
    with out.open(newline="") as f:
        first = next(csv.DictReader(f))
    old = {k: v for k, v in first.items() if k not in sweep_files.LEGACY_COLUMNS}
    partial = tmp_path / "r.csv.partial"
    with partial.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(old))
        w.writeheader()
        w.writerow(old)
    out.unlink()
    real, done = sweep.simulate_point, []

    def interrupted(point):
        if done:
            raise KeyboardInterrupt
        done.append(point)
        return real(point)

    monkeypatch.setattr(sweep, "simulate_point", interrupted)
    assert main([*grid.split(), "--pipe-rates", "--out", str(out), "--resume"]) == 130
    kept = sweep_files.read_rows(partial)  # the earlier row and the new one, in one CSV
    assert len(kept) == 2 and [r.pricing for r in kept] == ["pipe rates"] * 2
    monkeypatch.setattr(sweep, "simulate_point", real)
    capsys.readouterr()
    assert main([*grid.split(), "--pipe-rates", "--out", str(out), "--resume"]) == 0
    assert "2 kept from the earlier run" in capsys.readouterr().out
    assert len(sweep_files.read_rows(out)) == 3 and not partial.exists()
