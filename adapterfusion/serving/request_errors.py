"""How the server refuses a request: RequestError, the HTTP status and message a client gets, and how a message
quotes what the client sent (never the megabyte it sent; JSON's names for JSON's values)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from adapterfusion._validation import short_repr
from adapterfusion.errors import ConfigError

# What a message quotes of a client's string: a refusal never echoes the megabyte a client sent.
SHOWN_CHARS = 60


class RequestError(ConfigError):
    """A request the server refuses, with the HTTP status that says why and any headers the answer needs (429 and 503
    carry Retry-After)."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


def as_json(value: Any) -> str:
    """A client's JSON value as a message quotes it, in JSON, cut to SHOWN_CHARS."""
    text = json.dumps(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def as_shown(value: Any) -> str:
    """A name (or list of names) the client sent as a message quotes it: repr, cut to SHOWN_CHARS."""
    return short_repr(value, SHOWN_CHARS)


def as_given(value: Any) -> str:
    """A field's value as a message quotes it: a string as names are quoted ('x'), anything else in JSON (null)."""
    return as_shown(value) if isinstance(value, str) else as_json(value)


def json_kind(value: Any) -> str:
    """The JSON name of a parsed value's type, as the client wrote it (not Python's: NoneType, dict, str)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    kinds = ((str, "a string"), ((int, float), "a number"), (list, "an array"), (dict, "an object"))
    return next((name for kind, name in kinds if isinstance(value, kind)), type(value).__name__)


def is_json_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value  # not NaN


def require_loaded(kind: str, name: Any, loaded: list[str]) -> None:
    if not isinstance(name, str):
        raise RequestError(422, f"'{kind}' is {as_json(name)}; give the name of a loaded {kind}")
    if name not in loaded:
        raise RequestError(404, f"no {kind} named {as_shown(name)} is loaded; loaded {kind}s: {loaded or 'none'}")
