"""``flashio docs``: regenerate every generated table and figure of docs/, or check that none is
stale.

Three kinds of generated text live in the docs:

- **function blocks**: ``<!-- generated: MODULE:FUNCTION -->`` ... ``<!-- generated:end -->``;
  the text between is what ``FUNCTION()`` returns (found in every page, nothing to register);
- **command blocks**: a fenced ``text`` block whose first line is ``$ flashio VERB ARGS``; the
  rest is that command's output;
- **named blocks**, whose renderers take minutes or draw figures (:data:`NAMED`): the
  cross-check of docs/validation.md and its figure, the implementation families, the
  resident-CTA probe, the SM-scaling curves, and the demo's figures and ``demo.json``.

``--check`` renders each block and compares it with the page: the text must be equal and every
number equal within one unit of its last printed digit (a value on a rounding boundary may
print either way on another CPU), a float printed in full (``demo.json``) within 1e-6 of itself.
Figures are redrawn by ``--update`` only; ``--check`` checks the numbers they are drawn from.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import re
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from flashio.analysis.paths import ROOT, docs_dir
from flashio.simulator import FileError, UsageError, atomic_write

# a block's body never spans another marker: an empty body ("begin\nend") would otherwise
# reach the next block's end marker
FUNCTION = re.compile(
    r"(<!-- generated: ([\w.]+):(\w+) -->\n)((?:(?!<!-- generated).)*?)(\n<!-- generated:end -->)",
    re.S,
)
EMPTY = re.compile(r"<!-- generated: ([\w.]+:\w+) -->\n<!-- generated:end -->")
COMMAND = re.compile(r"(```text\n\$ (flashio [^\n]*)\n)(.*?)(\n```)", re.S)
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")
REL_TOL = 1e-6


@dataclass(frozen=True)
class Rendered:
    """A block's text as the code renders it now, and how to redraw its figures."""

    text: str
    draw: Callable[[], list[Path]] | None = None


@dataclass(frozen=True)
class Block:
    """One generated region of a page: ``page.read_text()[start:end]`` is its current text."""

    name: str
    page: Path
    start: int
    end: int
    render: Callable[[int], Rendered]  # jobs -> Rendered
    cost: str  # how long rendering takes, for --list

    def current(self) -> str:
        return self.page.read_text()[self.start : self.end]


# ---------------------------------------------------------------------------------------------
# comparing a page's text with the rendered one


def _unit(token: str) -> float:
    """One unit of the last printed digit of a number as written (``12.8`` -> 0.1)."""
    mantissa, _, exponent = token.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 10.0 ** (int(exponent or 0) - decimals)


def _value(token: str) -> float:
    return float(token.replace(",", ""))


def _tolerance(token: str) -> float:
    """One unit of the last printed digit; for a float printed in full (10 or more significant
    digits, as json writes them) 1e-6 of it, which no rounded figure of the docs can show."""
    digits = len(token.lower().partition("e")[0].replace(",", "").replace(".", "").lstrip("-0"))
    full_float = "." in token and digits >= 10
    return REL_TOL * abs(_value(token)) if full_float else _unit(token)


def difference(page: str, rendered: str) -> str | None:
    """None where ``rendered`` matches ``page`` (text equal, numbers within tolerance), else
    the first difference in words."""
    page_text, new_text = NUMBER.split(page), NUMBER.split(rendered)
    if page_text != new_text:
        pairs = zip(page_text, new_text, strict=False)
        i = next((i for i, (a, b) in enumerate(pairs) if a != b), len(new_text) - 1)
        near = lambda parts: parts[i].strip()[:60] if i < len(parts) else "<end>"  # noqa: E731
        return f"text differs: {near(page_text)!r} on the page, {near(new_text)!r} rendered"
    for m, b in zip(NUMBER.finditer(page), NUMBER.findall(rendered), strict=True):
        a = m.group()
        if abs(_value(a) - _value(b)) > _tolerance(a):
            end = page.find("\n", m.end())
            line = page[page.rfind("\n", 0, m.start()) + 1 : end if end >= 0 else None]
            return f"{a} on the page, {b} rendered, in: {line.strip()[:90]}"
    return None


# ---------------------------------------------------------------------------------------------
# finding the blocks


def _function_renderer(module: str, function: str) -> Callable[[int], Rendered]:
    def render(jobs: int) -> Rendered:
        return Rendered(getattr(importlib.import_module(f"flashio.{module}"), function)())

    return render


def _command_renderer(command: str) -> Callable[[int], Rendered]:
    def render(jobs: int) -> Rendered:
        from flashio.analysis.cli.main import main

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = main(shlex.split(command)[1:])
        if status:
            raise FileError(f"`{command}` exited with {status}")
        return Rendered(out.getvalue().rstrip("\n"))

    return render


def _blocks_in(page: Path) -> list[Block]:
    text, found = page.read_text(), []
    empty = EMPTY.search(text)
    if empty:
        raise FileError(
            f"{page}: the generated block {empty.group(1)} is empty; put a line (any text) "
            "between its markers, and flashio docs --update fills it in"
        )
    for m in FUNCTION.finditer(text):
        module, function = m.group(2), m.group(3)
        found.append(Block(f"{page.stem}: {function}", page, m.start(4), m.end(4),
                           _function_renderer(module, function), "seconds"))  # fmt: skip
    for m in COMMAND.finditer(text):
        found.append(Block(f"{page.stem}: {m.group(2)}", page, m.start(3), m.end(3),
                           _command_renderer(m.group(2)), "seconds"))  # fmt: skip
    return found


def _named_block(name: str, page: Path, begin: str, end: str, render, cost: str) -> Block:
    text = page.read_text()
    if begin not in text or end not in text:
        raise FileError(f"{page}: no generated block {begin} ... {end}")
    start = text.index(begin)
    return Block(name, page, start, text.index(end, start) + len(end), render, cost)


def _crosscheck(jobs: int) -> Rendered:
    from flashio.analysis.validation import crosscheck as cc
    from flashio.analysis.validation import doc
    from flashio.analysis.validation.calibration import load_calibration

    cal = load_calibration()  # the committed measurements, as flashio crosscheck --update-doc
    report = cc.crosscheck(None, cal, jobs=jobs, progress=_progress("crosscheck"), baseline=True)
    return Rendered(doc.markdown(report, cal), lambda: [doc.plot(report, doc.FIGURE)])


def _families(jobs: int) -> Rendered:
    from flashio.analysis.validation import families

    return Rendered(families.block(families.report(jobs=jobs)))


def _resident_ctas(jobs: int) -> Rendered:
    from flashio.analysis.validation import resident_ctas

    return Rendered(resident_ctas.block(resident_ctas.rows(), resident_ctas.cycles_rows()))


def _other_gpu(jobs: int) -> Rendered:
    from flashio.analysis.validation import other_gpu

    return Rendered(other_gpu.block(jobs=jobs))


def _sm_scaling(jobs: int) -> Rendered:
    from flashio.analysis.validation import sm_scaling

    rows = sm_scaling.scaling_report(sm_scaling.PROBES)
    return Rendered(sm_scaling.markdown(rows), lambda: [sm_scaling.plot(rows, sm_scaling.FIGURE)])


def _demo(jobs: int) -> Rendered:
    """The demo on its default GPU, run in a scratch folder: its demo.json is the text, its
    figures are copied into docs/figures/ by --update."""
    from flashio import simulator
    from flashio.analysis.cli.options import DEFAULT_GPU
    from flashio.analysis.explore.demo import run_demo

    # run where `flashio demo` would write: demo.json names its plots by that relative folder
    with tempfile.TemporaryDirectory(prefix="flashio-docs-demo-") as scratch:
        with contextlib.chdir(scratch), contextlib.redirect_stdout(io.StringIO()):
            run_demo(simulator.load_gpu(DEFAULT_GPU), Path("flashio-out"), as_json=True)
        out = Path(scratch) / "flashio-out"
        pngs = {png.name: png.read_bytes() for png in sorted(out.glob("*.png"))}
        text = (out / "demo.json").read_text()
    figures = docs_dir() / "figures"

    def draw() -> list[Path]:
        for name, data in pngs.items():
            with atomic_write(figures / name, "wb") as f:
                f.write(data)
        return [figures / name for name in pngs]

    return Rendered(text, draw)


def _demo_block() -> Block:
    page = docs_dir() / "figures" / "demo.json"
    if not page.is_file():
        raise FileError(f"{page}: missing; run flashio docs --update --only demo")
    return Block("demo: figures and demo.json", page, 0, len(page.read_text()), _demo, "~1 min")


# (name, page, markers, renderer, cost): the blocks whose renderers need the GPU data or draw
NAMED = (
    ("crosscheck", "validation.md", "crosscheck", _crosscheck, "~4 min with --jobs 2"),
    ("families", "validation.md", "families", _families, "~1 min with --jobs 2"),
    ("resident-ctas", "validation.md", "resident-ctas", _resident_ctas, "~20 s"),
    ("sm-scaling", "hypothetical-gpus.md", "sm-scaling", _sm_scaling, "~20 s"),
    ("other-gpu", "hypothetical-gpus.md", "other-gpu", _other_gpu, "~2 min with --jobs 2"),
)


def blocks() -> list[Block]:
    """Every generated block of docs/, in page order within each kind."""
    docs = docs_dir()
    found = [b for page in sorted(docs.glob("*.md")) for b in _blocks_in(page)]
    for name, page, marker, render, cost in NAMED:
        found.append(_named_block(name, docs / page, f"<!-- {marker}:begin -->",
                                  f"<!-- {marker}:end -->", render, cost))  # fmt: skip
    found.append(_demo_block())
    return found


def _progress(label: str):
    def say(done: int, total: int) -> None:
        if done == total or done % max(1, total // 10) == 0:
            print(f"  {label}: {done}/{total}", file=sys.stderr)

    return say


# ---------------------------------------------------------------------------------------------
# update and check


def _select(all_blocks: list[Block], only: list[str]) -> list[Block]:
    if not only:
        return all_blocks
    chosen = [b for b in all_blocks if any(o in b.name for o in only)]
    if not chosen:
        names = ", ".join(sorted({b.name.split(":")[0] for b in all_blocks}))
        raise UsageError(f"--only {' '.join(only)}: no generated block matches (blocks: {names})")
    return chosen


def check(selected: list[Block], jobs: int = 1) -> list[tuple[Block, str]]:
    """The stale blocks among ``selected``, each with its first difference."""
    stale = []
    for b in selected:
        t0 = time.perf_counter()
        why = difference(b.current(), b.render(jobs).text)
        state = "current" if why is None else f"STALE: {why}"
        print(f"{b.name}: {state} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
        if why is not None:
            stale.append((b, why))
    return stale


def update(selected: list[Block], jobs: int = 1) -> list[Path]:
    """Rewrite every selected block and redraw its figures; the changed files."""
    rendered = []
    for b in selected:  # render everything first: an error leaves no page half written
        t0 = time.perf_counter()
        rendered.append((b, b.render(jobs)))
        print(f"{b.name}: rendered ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    changed: list[Path] = []
    for page in dict.fromkeys(b.page for b, _ in rendered):
        text = page.read_text()
        # from the end, so that earlier offsets stay valid
        for b, r in sorted(((b, r) for b, r in rendered if b.page == page),
                           key=lambda br: -br[0].start):  # fmt: skip
            text = text[: b.start] + r.text + text[b.end :]
        if text != page.read_text():
            with atomic_write(page) as f:
                f.write(text)
            changed.append(page)
    for _, r in rendered:
        if r.draw is not None:
            changed += r.draw()
    return changed


DESCRIPTION = """\
Regenerate the generated tables and figures of docs/ (--update), or check that none is stale
(--check, exit status 1 if one is): the cross-check against the GPU measurements, the
implementation families, the SM-scaling curves, the closed-form tables, the paper's workload,
the tile search, the demo's figures. A checked block must render to the same text with every
number within one unit of its last printed digit. Needs a checkout (docs/ is not installed)."""

EPILOG = """\
examples:
  flashio docs --list                      the generated blocks, their pages and costs
  flashio docs --check --jobs 2            all of them (about 6 minutes on 2 cores)
  flashio docs --check --only io tiling    the blocks whose names contain 'io' or 'tiling'
  flashio docs --update --only crosscheck  regenerate docs/validation.md's cross-check"""


def add_docs_command(subparsers) -> None:
    p = subparsers.add_parser("docs", help="regenerate or check the generated parts of docs/",
                              description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--update", action="store_true", help="rewrite the blocks and figures")
    mode.add_argument("--check", action="store_true", help="exit 1 if a block is stale")
    mode.add_argument("--list", action="store_true", help="list the blocks")
    p.add_argument("--only", nargs="+", default=[], metavar="NAME",
                   help="only blocks whose name contains NAME (default: all)")  # fmt: skip
    p.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    p.set_defaults(func=cmd_docs)


def cmd_docs(a) -> int:
    if a.jobs < 1:
        raise UsageError(f"--jobs must be at least 1, got {a.jobs}")
    selected = _select(blocks(), a.only)
    if a.list:
        for b in selected:
            print(f"{b.name:70s} {b.page.name:22s} {b.cost}")
        return 0
    if a.check:
        stale = check(selected, a.jobs)
        sys.stderr.flush()
        print(f"{len(selected) - len(stale)} of {len(selected)} generated blocks current"
              + (f"; stale: {', '.join(b.name for b, _ in stale)} (flashio docs --update)"
                 if stale else ""))  # fmt: skip
        return 1 if stale else 0
    changed = update(selected, a.jobs)
    for path in changed:
        print(f"wrote {path.relative_to(ROOT)}")
    if not changed:
        print("nothing changed")
    return 0
