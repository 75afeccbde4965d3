"""One progress line on stderr for the long commands (``flashio demo``, ``sweep``, ``tiling``).

On a terminal the line is redrawn in place: the stage, a bar where the stage counts its steps,
and what is being simulated. Elsewhere (a log, CI) it writes a line as each stage begins and as
a counted stage passes each tenth, so a log holds a few dozen lines, not one per simulation.
stdout, which holds the results, is never written."""

from __future__ import annotations

import sys
from typing import TextIO

BAR_WIDTH = 30
DETAIL_WIDTH = 48


class Progress:
    """``progress(stage, detail, done=None, total=None)`` reports; ``close()``, or leaving a
    ``with Progress(...) as progress:`` block however it ends, ends the line. Silent when
    ``quiet`` (``--json``: stderr stays clean for the caller). ``stream``: where to write
    (default: ``sys.stderr`` as it is at each call)."""

    def __init__(self, quiet: bool = False, stream: TextIO | None = None):
        self.quiet, self.stream = quiet, stream
        self.stage, self.tenth, self.open = "", -1, False

    def __call__(
        self, stage: str, detail: str = "", done: int | None = None, total: int | None = None
    ) -> None:
        if self.quiet:
            return
        out = self.stream or sys.stderr
        counted = done is not None and total is not None
        tenth = 10 * done // max(total, 1) if counted else -1
        if out.isatty():
            bar = ""
            if counted:
                fill = BAR_WIDTH * done // max(total, 1)
                bar = f"[{'#' * fill}{'.' * (BAR_WIDTH - fill)}] {done}/{total} "
            # \x1b[K clears what a longer line before left to the right
            line = f"\r  {stage}: {bar}{detail:.{DETAIL_WIDTH}}\x1b[K"
            print(line, end="", file=out, flush=True)
            self.open = True
        elif stage != self.stage or tenth != self.tenth:
            count = f" {done}/{total}" if counted else ""
            print(f"  {stage}:{count} {detail}".rstrip(), file=out, flush=True)
        self.stage, self.tenth = stage, tenth

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """End the progress line (a redrawn line needs its newline) and forget the stage."""
        if self.open:
            print(file=self.stream or sys.stderr, flush=True)
        self.stage, self.tenth, self.open = "", -1, False
