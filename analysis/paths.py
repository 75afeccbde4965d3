"""Where the package's committed data and the checkout's docs live.

Installed, ``flashio.data`` sits beside ``flashio.analysis`` in the package; in a checkout,
``data/`` sits beside ``analysis/``: the same relative path serves both."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
DOCS = ROOT / "docs"  # only in a checkout


def docs_dir() -> Path:
    """The checkout's docs/, or a clear error where flashio runs from an installed wheel."""
    from flashio.simulator.errors import FileError

    if not DOCS.is_dir():
        raise FileError(
            f"no docs/ beside the package ({ROOT}): regenerating the docs needs a checkout of "
            "flashio (git clone, then pip install -e .)"
        )
    return DOCS
