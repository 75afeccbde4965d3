"""Shared helpers of the benchmarks: run one measurement in a fresh process for its peak RSS."""

from __future__ import annotations

import json
import resource
import subprocess
import sys


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_isolated(module: str, *args: str) -> dict:
    """Run ``python -m module args`` and parse the JSON line it prints last."""
    out = subprocess.run(
        [sys.executable, "-m", module, *args], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])
