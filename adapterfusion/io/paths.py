"""Paths the library writes to. Names that come from files — experiment files, task descriptions, a run's or a
saved piece's JSON — become folder names under an output dir or a store: `path_part` makes sure such a name stays
one folder name, so that none can write outside that root ('..', an absolute path, a separator). Output paths a
user gives are checked up front (`check_writable_folder`, `check_writable_file`): a file where a folder goes, a
folder where a file goes, or a read-only place is a clear error before any work, not a traceback after it."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath, PureWindowsPath

from adapterfusion.errors import ConfigError

_SEPARATORS = ("/", "\\", "\0")


def path_part(value: object, what: str) -> str:
    """`value` if it is one plain folder name; else ConfigError naming `what`, the value and the rule."""
    if (
        not isinstance(value, str)
        or value.strip() in ("", ".", "..")
        or any(s in value for s in _SEPARATORS)
        or PurePosixPath(value).is_absolute()
        or PureWindowsPath(value).drive
    ):
        raise ConfigError(
            f"{what} {value!r} cannot be a folder name: it must be one plain name without '/', '\\', '..' or a "
            "drive, or it would lead outside the folder it is written to"
        )
    return value


def check_writable_folder(path: str | os.PathLike, what: str) -> Path:
    """`path` as a Path if it is, or can be created as, a folder this process may write in; else ConfigError
    naming `what`. Checked before any work, so a bad output path fails at once instead of after a computation."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{what} {str(path)!r} is a file, not a folder; choose a folder path (or remove the file)")
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(
            f"{what} {str(path)!r} cannot be created: {str(existing)!r} is a file, not a folder; choose another path"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        state = "is" if existing == path else f"would be created in {str(existing)!r}, which is"
        raise ConfigError(
            f"{what} {str(path)!r} {state} read-only for this user; choose a folder you can write "
            "in, or change its permissions"
        )
    return path


def check_writable_file(path: str | os.PathLike, what: str) -> Path:
    """`path` as a Path if a file can be written there: not a folder, in a folder that is (or can be) writable."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{what} {str(path)!r} is a folder; give a file path, e.g. {str(path / 'result.json')!r}")
    check_writable_folder(path.parent, f"the folder of {what}")
    return path
