"""Small checks shared by configs and the model so every message reads the same way."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from collections.abc import Iterable, Iterator, Mapping

from adapterfusion.errors import ConfigError, NameNotFoundError

_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_\-]+$")


def check_name(name: object, what: str) -> str:
    """Names become module keys and folder names, so they must be plain identifiers."""
    if not isinstance(name, str) or not _NAME_PATTERN.match(name):
        raise ConfigError(
            f"invalid {what} name {name!r}: use letters, digits, '_' or '-' only "
            "(it becomes a module key and a file name)"
        )
    return name


def require_loaded(kind: str, name: str, known: Iterable[str]) -> None:
    """Refuse a `kind` (adapter, fusion, head) named `name` that is not among the `known` (loaded) ones."""
    known = list(known)
    if name not in known:
        raise NameNotFoundError(
            f"no {kind} named {name!r} is loaded; loaded {kind}s: {known or 'none'}. "
            f"Add it with add_{kind}() or load it with load_{kind}()"
        )


def check_choice(value: object, allowed: Iterable[object], field: str) -> None:
    allowed = tuple(allowed)
    if value not in allowed:
        raise ConfigError(f"{field}={value!r} is not allowed; choose one of {', '.join(map(repr, allowed))}")


def check_positive(value: object, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(f"{field}={value!r} must be a positive number")


def reject_unknown_keys(data: dict, known: Iterable[str], what: str) -> None:
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown} in {what}; known keys are {sorted(known)}")


def versioned_fields(data: object, cls: type, version: int, what: str) -> dict:
    """The keyword arguments of dataclass `cls` from a JSON object written with format_version `version`:
    a clear error for a non-object, another format version or an unknown key."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{what} must be a JSON object, got {type(data).__name__}")
    fields = dict(data)
    found = fields.pop("format_version", version)
    if found != version:
        raise ConfigError(f"{what} format_version {found!r} is not supported (expected {version})")
    reject_unknown_keys(fields, [f.name for f in dataclasses.fields(cls)], what)
    return fields


@contextlib.contextmanager
def naming_file(path: str | os.PathLike) -> Iterator[None]:
    """A ConfigError raised inside names `path` first: a bad value read from a file is fixed in that file."""
    try:
        yield
    except ConfigError as error:
        raise type(error)(f"{path}: {error}") from None
