"""Names that come from files — experiment files, task descriptions, a run's or a saved piece's JSON — become folder
names under an output dir or a store. `path_part` makes sure such a name stays one folder name, so that none can
write outside that root ('..', an absolute path, a separator)."""
from __future__ import annotations

from pathlib import PurePosixPath, PureWindowsPath

from adapterfusion.errors import ConfigError

_SEPARATORS = ("/", "\\", "\0")


def path_part(value: object, what: str) -> str:
    """`value` if it is one plain folder name; else ConfigError naming `what`, the value and the rule."""
    if (not isinstance(value, str) or value.strip() in ("", ".", "..") or any(s in value for s in _SEPARATORS)
            or PurePosixPath(value).is_absolute() or PureWindowsPath(value).drive):
        raise ConfigError(
            f"{what} {value!r} cannot be a folder name: it must be one plain name without '/', '\\', '..' or a "
            "drive, or it would lead outside the folder it is written to"
        )
    return value
