"""Shared helpers of the benchmarks: run one measurement in a fresh process for its peak RSS;
the GPU machine's tool versions for a run's provenance."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_isolated(module: str, *args: str) -> dict:
    """Run ``python -m module args`` and parse the JSON line it prints last."""
    out = subprocess.run(
        [sys.executable, "-m", module, *args], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def tool_versions(tools: dict[str, list[str]]) -> dict[str, str]:
    """What nvidia-smi says of the GPU, the checkout's git HEAD and each of ``tools`` (key ->
    command line) prints, for a measurement's provenance; "unavailable: ..." where a command
    cannot run."""
    commands = {
        "nvidia_smi": [
            "nvidia-smi",
            "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit",
            "--format=csv,noheader",
        ],
        **tools,
        "git_head": ["git", "rev-parse", "HEAD"],
    }
    info = {}
    for key, cmd in commands.items():
        try:
            info[key] = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError) as e:
            info[key] = f"unavailable: {e}"
    return info


REPO = Path(__file__).resolve().parents[1]


def command_line() -> str:
    """This process's command as committed data records it: the script named relative to the
    repository when it lies inside it, and the device's output folder (the ``OUT`` variable
    of data/gpu/runs/*.sh) written ``$OUT``, so that the data hold no machine paths."""
    script = Path(sys.argv[0]).resolve()
    rel = script.relative_to(REPO) if script.is_relative_to(REPO) else script
    out = os.environ.get("OUT", "").rstrip("/")
    args = [a.replace(out, "$OUT") if out else a for a in sys.argv[1:]]
    return " ".join([str(rel), *args])
