"""Where the Hopper forward's warps wait: Nsight Compute's per-instruction warp-state samples
of its builds (data/gpu/runs/hopper_samples_run.sh: d = 64 and 128, N = 16384, B = 1,
H = 16, bf16, non-causal; each build launched twice by hopper_cycles.py, the second read)
beside the warp replay's cycles at the same code (``simulator.warp_replay.pc_cycles`` of
the consumer warps' census program, with the ping-pong's turns where the build has them).

    python data/gpu/probe/hopper_samples.py --summary data/gpu/probe/hopper_samples_source.csv.gz

prints, per build, each instruction class's share of the GPU's samples (all warps of the
CTA: the producer warpgroup's waits included) beside its share of the replay's consumer
cycles, and the instructions with the most samples. Runs without a GPU.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lone_cta import _samples, class_shares, read_launches, replay_shares, source_tables

HERE = Path(__file__).resolve().parent


def hopper_shares(row: dict) -> dict[str, float]:
    """Each instruction class's share of the replayed step of the build's consumer warps."""
    from flashio import kernels
    from flashio.simulator import issue
    from flashio.simulator.warp_replay import first_turn

    warps = 4 * (row["block_q"] // 64 + 1)
    key = issue.hopper_key(row["head_dim"], row["block_q"], row["block_kv"], warps, "bf16",
                           row["overlap"])  # fmt: skip
    consumers = warps - kernels.implementation("flashio-hopper").producer_warps
    turns = first_turn(issue._program(key, "flashio-hopper"))
    return replay_shares(key, 1, "flashio-hopper", consumers, turns)


def rows(path: Path = HERE / "hopper_samples_source.csv.gz", order_path: Path | None = None):
    """Per build (its launch-order row, the read launch): ``gpu``, each instruction class's
    share of the GPU's warp-state samples; ``replay``, its share of the replay's consumer
    cycles; ``top``, the instructions with the most samples."""
    raw = path.read_bytes()
    tables = source_tables((gzip.decompress(raw) if path.suffix == ".gz" else raw).decode())
    order_path = order_path or path.with_name("hopper_samples_launches.json")
    order = [{**r, "kernel": "hopper_fwd"} for r in json.loads(order_path.read_text())["launches"]]
    return [
        {**r, "gpu": class_shares(table), "replay": hopper_shares(r),
         "top": sorted(table, key=_samples, reverse=True)[:6]}
        for r, table in read_launches(tables, order)
    ]  # fmt: skip


def summary(path: Path) -> str:
    lines = []
    for r in rows(path):
        label = f"d={r['head_dim']} {r['block_q']}x{r['block_kv']} {r['overlap']} s{r['stages']}"
        gpu, model = r["gpu"], r["replay"]
        lines.append(f"{label}: class, GPU samples, replay cycles")
        for c in sorted(set(gpu) | set(model), key=lambda c: -gpu.get(c, 0.0)):
            lines.append(f"  {c:8s} {gpu.get(c, 0.0):6.1%} {model.get(c, 0.0):6.1%}")
        lines += [f"    {_samples(t):8.0f}  {t['Source'][:70]}" for t in r["top"]]
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--summary",
        type=Path,
        default=HERE / "hopper_samples_source.csv.gz",
        help="an exported source page (default: the committed run's)",
    )
    print(summary(ap.parse_args(argv).summary))


if __name__ == "__main__":
    main()
