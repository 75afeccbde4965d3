"""The progress line of ``flashio demo``, ``sweep`` and ``tiling --search``
(analysis.present.progress): one line redrawn on a terminal, a few lines in a log, nothing
when quiet."""

import io

from flashio.analysis.present.progress import Progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_a_line_a_stage_and_a_tenth():
    log = io.StringIO()
    with Progress(stream=log) as progress:
        for i in range(3):
            progress("traffic against N", f"flash2 N={1024 << i}")  # one stage, one line
        for done in range(26):
            progress("points", f"point {done}", done, 25)
    lines = log.getvalue().splitlines()
    assert lines[0] == "  traffic against N: flash2 N=1024"
    # 0/25, then as 10 * done // 25 passes each tenth: at 3, 5, 8, 10, 13, ... and 25
    done = [int(line.split()[1].split("/")[0]) for line in lines[1:]]
    assert done == [0, 3, 5, 8, 10, 13, 15, 18, 20, 23, 25]
    assert lines[-1] == "  points: 25/25 point 25"
    assert "\r" not in log.getvalue()


def test_a_terminal_gets_one_line_redrawn():
    term = _Terminal()
    with Progress(stream=term) as progress:
        progress("the six schedules", "standard")
        progress("points", "h200-sms66", 5, 10)
        assert "\n" not in term.getvalue()  # redrawn in place until the end
    out = term.getvalue()
    assert out.endswith("\n") and out.count("\n") == 1
    draws = out.rstrip("\n").split("\r")[1:]
    assert draws[0] == "  the six schedules: standard\x1b[K"
    assert draws[1] == f"  points: [{'#' * 15}{'.' * 15}] 5/10 h200-sms66\x1b[K"


def test_quiet_writes_nothing_and_close_without_a_line_adds_none():
    for stream in (io.StringIO(), _Terminal()):
        with Progress(quiet=True, stream=stream) as progress:
            progress("points", "h200", 1, 2)
        assert stream.getvalue() == ""
    term = _Terminal()
    Progress(stream=term).close()
    assert term.getvalue() == ""
