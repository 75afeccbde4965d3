"""numba's cache directory per version of the jitted sources (flashio/_jit_cache.py): an edit of
any file the cached functions could inline starts a fresh cache; a user's NUMBA_CACHE_DIR wins."""

import importlib.util
import os
from pathlib import Path

import flashio
from flashio import _jit_cache


def _tree(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "a.py").write_text("x = 1\n")
    (root / "sub" / "b.py").write_text("y = 2\n")
    (root / "notes.txt").write_text("not code\n")
    return root


def test_the_digest_follows_every_python_file_and_nothing_else(tmp_path):
    root = _tree(tmp_path / "pkg")
    first = _jit_cache.source_digest([root])
    assert _jit_cache.source_digest([root]) == first
    (root / "notes.txt").write_text("still not code, longer\n")
    assert _jit_cache.source_digest([root]) == first
    b = root / "sub" / "b.py"
    st = b.stat()
    os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # touched: a new version
    assert _jit_cache.source_digest([root]) != first


def test_a_users_cache_directory_wins(monkeypatch, tmp_path):
    monkeypatch.setenv(_jit_cache.ENV, str(tmp_path / "mine"))
    monkeypatch.delenv(_jit_cache.OURS, raising=False)
    assert _jit_cache.configure([_tree(tmp_path / "pkg")]) is None
    assert os.environ[_jit_cache.ENV] == str(tmp_path / "mine")


def test_each_source_version_gets_its_own_directory(monkeypatch, tmp_path):
    import numba

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(_jit_cache.ENV, raising=False)
    monkeypatch.setattr(numba.config, "CACHE_DIR", numba.config.CACHE_DIR)
    root = _tree(tmp_path / "pkg")
    first = _jit_cache.configure([root])
    assert first and Path(first).is_dir() and numba.config.CACHE_DIR == first
    assert _jit_cache.configure([root]) == first  # ours, not the user's: looked at again
    (root / "a.py").write_text("x = 10\n")
    second = _jit_cache.configure([root])
    assert second != first and Path(second).is_dir()


def test_only_the_newest_directories_are_kept(tmp_path):
    for i in range(_jit_cache.KEEP + 3):
        d = tmp_path / f"{_jit_cache.PREFIX}{i:02d}"
        d.mkdir()
        os.utime(d, (i, i))
    (tmp_path / "other").mkdir()
    _jit_cache._prune(tmp_path)
    left = sorted(d.name for d in tmp_path.iterdir())
    assert left == [f"{_jit_cache.PREFIX}{i:02d}" for i in range(3, _jit_cache.KEEP + 3)] + [
        "other"
    ]


def test_every_jitted_module_is_in_a_digested_folder():
    """A module that compiles with numba outside these folders would keep stale code."""
    folders = [Path(f).resolve() for f in flashio._jitted_folders()]
    packages = [
        Path(location).resolve()
        for package, _ in flashio._JITTED
        for location in importlib.util.find_spec(f"flashio.{package}").submodule_search_locations
    ]
    jitted = [
        p
        for root in packages
        for p in root.rglob("*.py")
        if "@njit" in p.read_text() or "@jit" in p.read_text()
    ]
    assert jitted
    for p in jitted:
        assert any(f == p.parent or f in p.parents for f in folders), p
