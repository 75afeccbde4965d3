"""A sweep's rows on disk: CSV (appended point by point, for resuming) and Parquet, and the key
that tells a written row's point."""

from __future__ import annotations

import csv
from dataclasses import asdict
from pathlib import Path

from flashio import simulator
from flashio.analysis.explore.sweep import PRICING, SweepRow

__all__ = ["LEGACY_COLUMNS", "append_csv", "read_rows", "row_key", "write_csv", "write_parquet"]

# columns a sweep CSV of an earlier flashio lacks, and what its rows meant by them
LEGACY_COLUMNS = {"pricing": PRICING[False], "compiled_kernels": ""}


def row_key(row: dict) -> tuple:
    """The key of a written row (CSV values are strings), comparable with ``SweepPoint.key``."""
    causal = row["causal"] if isinstance(row["causal"], bool) else row["causal"] == "True"
    return (row["gpu"], row["schedule"], int(row["batch"]), int(row["heads"]),
            int(row["seq_len"]), int(row["head_dim"]), row["dtype"], causal, row["mask"],
            int(row["block_q"]), int(row["block_kv"]), int(row["warps"]),
            row["mode"], row.get("pricing", LEGACY_COLUMNS["pricing"]))  # fmt: skip


def write_csv(rows: list[SweepRow], path: Path) -> None:
    fields = list(SweepRow.__dataclass_fields__)
    with simulator.atomic_write(path, newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow(asdict(r))


def write_parquet(rows: list[SweepRow], path: Path) -> None:
    """The rows as a Parquet table (pyarrow), whole or not at all."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise simulator.UsageError(
            "Parquet output needs pyarrow: pip install 'flashio[sweep]'"
        ) from None
    fields = list(SweepRow.__dataclass_fields__)
    table = pa.table({f: [getattr(r, f) for r in rows] for f in fields})
    with simulator.atomic_write(path, "wb") as f:
        pq.write_table(table, f)


_CAST = {"int": int, "float": float, "str": str, "bool": lambda v: v == "True"}


def read_rows(path: Path) -> list[SweepRow]:
    """The rows of a sweep's CSV, or [] where there is none yet."""
    path = Path(path)
    if not path.is_file():
        return []
    fields = SweepRow.__dataclass_fields__
    legacy = [f for f in fields if f not in LEGACY_COLUMNS]
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        header = list(reader.fieldnames or [])
        if header not in (list(fields), legacy):
            raise simulator.FileError(f"{path}: not a sweep CSV of this flashio (other columns)")
        return [
            SweepRow(**{**LEGACY_COLUMNS, **{k: _CAST[fields[k].type](v) for k, v in d.items()}})
            for d in reader
        ]


def append_csv(row: SweepRow, path: Path) -> None:
    """Append one row to ``path`` (the header first when the file is new): a sweep saves each
    point as it finishes, so that an interrupted one resumes where it stopped."""
    new = not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(SweepRow.__dataclass_fields__))
        if new:
            w.writeheader()
        w.writerow(asdict(row))
