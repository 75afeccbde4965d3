"""Reading GPU spec files: built-in specs by name, user TOML files by path, ``base`` inheritance.

Every error names the file, the key and what is expected (``GPUSpecError``).
"""

import dataclasses
import difflib
import functools
import numbers
import os
import sys
import tomllib
import warnings
from importlib import resources
from pathlib import Path
from typing import Any

from flashio.simulator.gpu import (
    _FIELD_NAMES,
    DERIVED,
    OPTIONAL_FIELDS,
    GPUSpec,
    GPUSpecError,
    _unknown_key,
)

__all__ = ["builtin_gpus", "load_gpu"]


def builtin_gpus() -> tuple[str, ...]:
    """Names of the built-in GPU specs (file stems in ``simulator/specs``), sorted."""
    specs = resources.files(__package__) / "specs"
    return tuple(sorted(p.name[:-5] for p in specs.iterdir() if p.name.endswith(".toml")))


def load_gpu(name_or_path: str | os.PathLike[str]) -> GPUSpec:
    """Load a built-in GPU spec by name, or a user's TOML spec file by path.

    Parameters
    ----------
    name_or_path : str or os.PathLike
        A built-in name (see :func:`builtin_gpus`, e.g. ``"h200"``), or the path of a TOML file:
        any ``os.PathLike``, or a string that ends in ``.toml`` or names an existing file. A
        built-in name wins over a file of the same name that does not end in ``.toml``.

    Returns
    -------
    GPUSpec

    Raises
    ------
    GPUSpecError
        Unknown built-in, missing file, TOML syntax error, unknown or missing key, wrong type or
        value, or a ``base`` that is missing or loops; the message names the file and the key.
    """
    if isinstance(name_or_path, str) and name_or_path in builtin_gpus():
        return _load_builtin(name_or_path)
    if not isinstance(name_or_path, str | os.PathLike):
        raise GPUSpecError(
            f"load_gpu expects a built-in name or a path to a .toml file, got {name_or_path!r}"
        )
    text = os.fspath(name_or_path)
    if isinstance(name_or_path, os.PathLike) or text.endswith(".toml") or Path(text).is_file():
        if Path(text).is_dir():
            raise GPUSpecError(f"{text}: is a folder; give the path of a GPU spec file (.toml)")
        if not Path(text).is_file():
            raise GPUSpecError(f"{text}: no such GPU spec file")
        return _load(_file_source(Path(text)))
    close = difflib.get_close_matches(text, builtin_gpus(), n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    raise GPUSpecError(
        f"unknown GPU {text!r}: built-ins are {', '.join(builtin_gpus())}.{hint} "
        "For your own GPU, pass the path of a .toml spec file (see docs/gpus.md)."
    )


@dataclasses.dataclass(frozen=True, slots=True)
class _Source:
    label: str  # how messages name this file
    ident: str  # identity for loop detection
    path: Path | None  # None for a built-in
    builtin: str | None = None


def _file_source(path: Path) -> _Source:
    return _Source(label=os.path.normpath(path), ident=str(path.resolve()), path=path)


def _builtin_source(name: str) -> _Source:
    return _Source(label=f"built-in '{name}'", ident=f"builtin:{name}", path=None, builtin=name)


@functools.cache
def _load_builtin(name: str) -> GPUSpec:
    return _load(_builtin_source(name))


def _load(top: _Source) -> GPUSpec:
    values, origin = _merged(top, ())
    missing = [k for k in _FIELD_NAMES if k not in values and k not in OPTIONAL_FIELDS]
    if missing:
        raise GPUSpecError(
            f"{top.label}: missing keys {', '.join(missing)}. A file without base sets every key;"
            ' or set base = "h200" (a built-in or another file) and override only what differs.'
        )
    try:
        return GPUSpec(**values)
    except GPUSpecError as err:
        where = origin.get(err.key, top.label)
        via = f" (loading {top.label})" if where != top.label else ""
        raise GPUSpecError(f"{where}: {err}{via}", key=err.key) from None


def _merged(src: _Source, chain: tuple[_Source, ...]) -> tuple[dict, dict]:
    """Values of ``src`` over those of its bases, and for each key the file that set it."""
    if any(s.ident == src.ident for s in chain):
        loop = " -> ".join(s.label for s in (*chain, src))
        raise GPUSpecError(f"base loop: {loop}. A spec may not be its own base, even indirectly.")
    data = _read(src)
    for key in data:
        if key not in _FIELD_NAMES and key != "base" and key not in DERIVED:
            raise GPUSpecError(f"{src.label}: {_unknown_key(key)}", key=key)
    if "name" not in data:
        raise GPUSpecError(
            f"{src.label}: missing key 'name'; every spec file names its GPU, even with a base",
            key="name",
        )
    base = data.pop("base", None)
    values: dict[str, Any] = {"description": ""}
    origin: dict[str, str] = {}
    if base is not None:
        values, origin = _merged(_base_source(base, src), (*chain, src))
        values["description"] = f"derived from {base}"  # a base's description is not inherited
    values.update(data)
    origin.update(dict.fromkeys(data, src.label))
    _convert_chip_totals(values, data, origin, src)
    return values, origin


def _convert_chip_totals(values: dict, data: dict, origin: dict, src: _Source) -> None:
    """Spec files written before rates were stored per SM set chip totals
    (``tensor_bf16_flops_per_s``, ``l2_bandwidth_bytes_per_s``, ...): convert each to its
    per-SM or per-partition field with this file's counts and clock, and say so."""
    old = [k for k in DERIVED if k in data]
    if not old:
        return
    notes = []
    for key in old:
        stored, count = DERIVED[key]
        if stored in data:
            msg = f"{src.label}: sets both {key} and {stored}; keep {stored}"
            raise GPUSpecError(msg, key=key)
        value = values.pop(key)
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
            msg = f"{src.label}: {key} = {value!r} must be a positive number"
            raise GPUSpecError(msg, key=key)
        if count == "l2_partitions":
            values.setdefault(count, 1)  # an old file's L2 bandwidth: one partition
        missing = [k for k in (count, "clock_hz") if not isinstance(values.get(k), numbers.Real)]
        if missing:
            raise GPUSpecError(
                f"{src.label}: converting the chip total {key} needs {' and '.join(missing)}",
                key=key,
            )
        values[stored] = value / (values[count] * values["clock_hz"])
        origin[stored] = src.label
        notes.append(f"{key} -> {stored} = {values[stored]:.6g}")
    if "sm_memory_bytes_per_cycle_per_sm" not in values:
        # the model before per-SM limits: one SM could draw the whole L2 bandwidth
        per_cycle = values["l2_partitions"] * values["l2_bandwidth_bytes_per_cycle_per_partition"]
        values["sm_memory_bytes_per_cycle_per_sm"] = per_cycle
        notes.append(f"sm_memory_bytes_per_cycle_per_sm = {per_cycle:.6g} (the whole L2's)")
    warnings.warn(
        f"{src.label}: chip totals are derived now (docs/gpus.md, 'What scales with what'); "
        f"converted with sm_count = {values.get('sm_count')} and clock_hz = "
        f"{values.get('clock_hz')}: {'; '.join(notes)}. Write the new keys to silence this.",
        FutureWarning,
        stacklevel=_outside_simulator(),
    )


def _outside_simulator() -> int:
    """The ``stacklevel`` of the first caller outside this package (the user's load_gpu)."""
    frame, level = sys._getframe(1), 1
    package = os.path.dirname(__file__)
    while frame is not None and os.path.dirname(frame.f_code.co_filename) == package:
        frame, level = frame.f_back, level + 1
    return level


def _read(src: _Source) -> dict[str, Any]:
    try:
        if src.builtin is not None:
            text = (resources.files(__package__) / "specs" / f"{src.builtin}.toml").read_text(
                "utf-8"
            )
        else:
            text = src.path.read_text(encoding="utf-8")
    except OSError as err:
        raise GPUSpecError(f"{src.label}: cannot read the file: {err}") from None
    except UnicodeDecodeError as err:
        raise GPUSpecError(f"{src.label}: not a text file (TOML is UTF-8): {err}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise GPUSpecError(f"{src.label}: not valid TOML: {err}") from None


def _base_source(base: Any, referrer: _Source) -> _Source:
    where = f"{referrer.label}: base = {base!r}"
    if not isinstance(base, str):
        raise GPUSpecError(f"{where} must be a string: a built-in name or a path", key="base")
    if base.endswith(".toml") or "/" in base or os.sep in base:
        if referrer.path is None:
            raise GPUSpecError(f"{where}: a built-in spec may only name another built-in")
        path = Path(base).expanduser()
        path = path if path.is_absolute() else referrer.path.parent / path
        if not path.is_file():
            raise GPUSpecError(
                f"{where}: no such file ({os.path.normpath(path)}); a path in base is relative "
                "to the file that names it",
                key="base",
            )
        return _file_source(path)
    if base not in builtin_gpus():
        close = difflib.get_close_matches(base, builtin_gpus(), n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise GPUSpecError(
            f"{where} is not a built-in GPU (built-ins: {', '.join(builtin_gpus())}).{hint} "
            "To inherit from a file, give its path ending in .toml.",
            key="base",
        )
    return _builtin_source(base)
