"""The package layout of docs/architecture.md, checked on the source: one installed top-level
name (flashio), and imports that go one way between packages and between analysis's
subpackages."""

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"simulator": "flashio.simulator", "kernels": "flashio.kernels",
           "analysis": "flashio.analysis", "flashio": "flashio"}  # fmt: skip
# each layer may import those below it (and itself)
PACKAGE_ORDER = ("flashio.simulator", "flashio.kernels", "flashio.analysis", "flashio")
ANALYSIS_ORDER = ("closed_form", "dag", "present", "validation", "explore", "cli")
STANDALONE = ("strategies", "paths")  # import no other analysis module
GENERIC = ("simulator", "kernels", "analysis", "data")


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = [FOLDERS[rel.parts[0]], *rel.parts[1:]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
            names += [f"{node.module}.{a.name}" for a in node.names]
    return names


SOURCES = [p for folder in FOLDERS for p in sorted((ROOT / folder).rglob("*.py"))]
CHECKOUT_CODE = SOURCES + sorted((ROOT / "tests").rglob("*.py"))
CHECKOUT_CODE += sorted((ROOT / "benchmarks").rglob("*.py"))
CHECKOUT_CODE += sorted((ROOT / "data").rglob("*.py"))


def test_the_wheel_installs_only_flashio():
    """Every package pyproject.toml lists lives under flashio; no generic top-level name."""
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert {p.split(".")[0] for p in tool["packages"]} == {"flashio"}
    assert set(tool["package-dir"]) <= set(tool["packages"])
    script = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["flashio"]
    assert script.startswith("flashio.")


@pytest.mark.parametrize("path", CHECKOUT_CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_imports_a_generic_top_level_name(path):
    """``import simulator`` would load a second copy of the package from the checkout (or
    someone else's package of that name): everything imports through flashio."""
    bad = [n for n in _imports(path) if n.split(".")[0] in GENERIC]
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def _layer(module: str) -> tuple[int, int]:
    """(package index in PACKAGE_ORDER, analysis subpackage index or -1)."""
    parts = module.split(".")
    named = len(parts) > 1 and parts[1] in ("simulator", "kernels", "analysis")
    package = ".".join(parts[:2]) if named else "flashio"
    in_order = package == "flashio.analysis" and len(parts) > 2 and parts[2] in ANALYSIS_ORDER
    return PACKAGE_ORDER.index(package), ANALYSIS_ORDER.index(parts[2]) if in_order else -1


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_go_one_way(path):
    """simulator <- kernels <- analysis <- flashio, and inside analysis
    closed_form <- dag <- present <- validation <- explore <- cli."""
    me = _module_name(path)
    my_package, my_sub = _layer(me)
    standalone = me.removeprefix("flashio.analysis.") in STANDALONE
    for name in _imports(path):
        if not name.startswith("flashio.") or name.startswith(("flashio.data", "flashio.__")):
            continue
        package, sub = _layer(name)
        assert package <= my_package, f"{me} imports {name}, a layer above it"
        if standalone:
            assert not name.startswith("flashio.analysis.") or name.startswith(me), (me, name)
        elif package == my_package and my_sub >= 0 and sub >= 0:
            assert sub <= my_sub, f"{me} ({ANALYSIS_ORDER[my_sub]}) imports {name}"


def test_the_layers_checked_are_the_folders_present():
    """A new analysis subpackage must be placed in the order above (and in the docs)."""
    subpackages = {p.parent.name for p in (ROOT / "analysis").glob("*/__init__.py")}
    assert subpackages == set(ANALYSIS_ORDER)
    text = (ROOT / "docs" / "architecture.md").read_text()
    assert all(f"`analysis.{s}`" in text for s in (*ANALYSIS_ORDER, *STANDALONE))
