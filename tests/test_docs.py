"""``flashio docs``: the generated parts of docs/ are what the code renders today.

The blocks that take minutes (the cross-check, the implementation families, the demo) are
checked by CI's ``flashio docs --check`` (.ci/run); the rest here."""

import pytest

from flashio.analysis.cli import docs
from flashio.analysis.cli.main import main

SLOW = ("crosscheck", "families", "demo")
BLOCKS = docs.blocks()


def test_every_kind_of_block_is_found():
    names = [b.name for b in BLOCKS]
    assert {n.split(":")[0] for n in names} >= {"io", "dag", "paper-figure2", "tiling", *SLOW}
    assert sum(n.startswith("tiling: flashio tiling") for n in names) >= 6


@pytest.mark.parametrize(
    "block", [b for b in BLOCKS if not b.name.startswith(SLOW)], ids=lambda b: b.name
)
def test_block_is_current(block):
    why = docs.difference(block.current(), block.render(1).text)
    assert why is None, f"{block.page.name}, {block.name}: {why} (flashio docs --update)"


def test_the_figures_named_in_the_docs_exist():
    figures = docs.docs_dir() / "figures"
    for name in ("crosscheck.png", "sm_scaling.png", "demo.json", "demo_traffic_time.png"):
        assert (figures / name).is_file(), name


@pytest.mark.parametrize(
    ("page", "rendered", "stale"),
    [
        ("time 12.8 ms", "time 12.8 ms", False),
        ("time 12.8 ms", "time 12.9 ms", False),  # one unit of the last printed digit
        ("time 12.8 ms", "time 13.0 ms", True),
        ("545,259,520 bytes", "545,259,521 bytes", False),
        ("545,259,520 bytes", "545,259,600 bytes", True),
        ("0.0010346862218577329", "0.0010346862218577", False),  # 1e-6 relative
        ("0.0010346862218577329", "0.0010346962218577", True),
        ("| memory | 9.1% |", "| compute | 9.1% |", True),
        ("3 rows", "3 rows, 4", True),
    ],
)
def test_difference_allows_rounding_and_nothing_more(page, rendered, stale):
    assert (docs.difference(page, rendered) is not None) == stale


def _page_with_a_stale_table(tmp_path):
    from flashio.analysis.closed_form import flops

    table = flops.roofline_table()
    stale = table.replace("230.0", "231.0", 1)
    assert stale != table
    page = tmp_path / "page.md"
    marker = "<!-- generated: analysis.closed_form.flops:roofline_table -->"
    page.write_text(f"# A page\n\n{marker}\n{stale}\n<!-- generated:end -->\n\nprose 230.0\n")
    return page, table


def test_update_rewrites_only_the_stale_block_and_check_then_passes(tmp_path):
    page, table = _page_with_a_stale_table(tmp_path)
    (block,) = docs._blocks_in(page)
    (found,) = docs.check([block])
    assert found[0] is block and "231.0 on the page, 230.0 rendered" in found[1]
    assert docs.update([block]) == [page]
    text = page.read_text()
    assert table in text and text.endswith("prose 230.0\n")  # the prose is left alone
    assert docs.check(docs._blocks_in(page)) == []


def test_cli_check_exit_status_and_bad_only(capsys):
    assert main(["docs", "--check", "--only", "io: regime"]) == 0
    assert "1 of 1 generated blocks current" in capsys.readouterr().out
    assert main(["docs", "--check", "--only", "no-such-block"]) == 2
    assert "no generated block matches" in capsys.readouterr().err
    assert main(["docs", "--list"]) == 0
    assert "crosscheck" in capsys.readouterr().out


def test_a_block_never_reaches_into_the_next(tmp_path):
    """An empty block is refused with the fix, not read up to the next block's end marker
    (which would overwrite everything between them on --update)."""
    two = (
        "<!-- generated: m.a:f -->\n{}<!-- generated:end -->\n\ntext between\n\n"
        "<!-- generated: m.b:g -->\nold\n<!-- generated:end -->\n"
    )
    page = tmp_path / "page.md"
    page.write_text(two.format(""))
    with pytest.raises(docs.FileError, match=r"m\.a:f is empty; put a line"):
        docs._blocks_in(page)
    page.write_text(two.format("placeholder\n"))
    found = docs._blocks_in(page)
    assert [b.current() for b in found] == ["placeholder", "old"]
