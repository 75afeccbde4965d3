"""mkdocs hook: the API reference reads the sources through the package layout they install
as (flashio.simulator is the folder simulator/, ...), so link that layout into build/ before
mkdocstrings looks for it."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREE = ROOT / "build" / "api-src" / "flashio"


def on_startup(command, dirty):
    TREE.mkdir(parents=True, exist_ok=True)
    for name in ("__init__.py", "__main__.py"):
        link = TREE / name
        if not link.exists():
            link.symlink_to(ROOT / "flashio" / name)
    for folder in ("simulator", "kernels", "analysis", "data"):
        link = TREE / folder
        if not link.exists():
            link.symlink_to(ROOT / folder, target_is_directory=True)
