"""Read a JSON or YAML document strictly: UTF-8 text only, a key written twice in one mapping is an error
naming the key and both lines, and so are nesting too deep to parse and aliases that expand past
MAX_DOCUMENT_VALUES. `json.loads` and `yaml.safe_load` keep the last value of a repeated key without a
word, so a setting the user wrote (say a learning rate two lines up) would be dropped silently.

`read_json` is the one reader of the JSON files adapterfusion itself wrote (run files, store entries, piece configs,
the zoo manifest): not strict about repeated keys, since we never write one, and raising the caller's error type."""

from __future__ import annotations

import functools
import json
import json.decoder
import json.scanner
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from adapterfusion._validation import past_digit_limit
from adapterfusion.errors import AdapterFusionError, ConfigError, SerializationError
from adapterfusion.io.paths import DENIED_ERRNOS, check_readable_file, describe, permission_denied

Error = type[AdapterFusionError]
_CORRUPT = "the file is corrupt or truncated"  # what read_json says of a file it cannot parse, unless told the fix
# A file a user writes (an experiment, a task description) holds a few hundred values; YAML aliases (&a, *a) can make
# a short file stand for billions (each alias repeats its anchor), which every walk of it, a repr in a message
# included, would then take hours over.
MAX_DOCUMENT_VALUES = 100_000


class _DuplicateKey(Exception):
    """`key` repeated at `where` (a "line L, column C" text), first given at `first`."""

    def __init__(self, key: object, where: str, first: str) -> None:
        super().__init__(key)
        self.key, self.where, self.first = key, where, first

    def describe(self, path: str | os.PathLike) -> str:
        return (
            f"{path}, {self.where}: key {self.key!r} is given twice in one mapping (first at {self.first}); "
            "the last one would silently win, so keep only one of them"
        )


def _position(text: str, index: int) -> str:
    line = text.count("\n", 0, index) + 1
    column = index - text.rfind("\n", 0, index)
    return f"line {line}, column {column}"


def read_document(path: str | os.PathLike, error: Error = ConfigError) -> Any:
    """The parsed content of a `.json` file (anything else is read as YAML); every problem raises `error` naming
    the file and, where it has one, the line."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as err:  # unreadable (permissions), a folder, a file gone since it was found
        if err.errno in DENIED_ERRNOS:
            raise permission_denied(path, error=error) from None
        raise error(f"{path} cannot be read ({err.strerror or err}); check that it is a file you may read") from None
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark (Windows editors write one) is no part of the text
    except UnicodeDecodeError as err:
        where = _position(raw.decode("latin-1"), err.start)  # one character per byte, so the offsets agree
        raise error(
            f"{path} is not UTF-8 text: byte {raw[err.start]:#04x} at {where} ({err.reason}); save the file as UTF-8"
        ) from None
    try:
        data = _parse_json(text, path, error) if path.suffix.lower() == ".json" else _parse_yaml(text, path, error)
        expanded = _value_count(data)
    except _DuplicateKey as duplicate:
        raise error(duplicate.describe(path)) from None
    except ValueError as err:  # not a parse error of theirs: an integer past Python's str -> int digit limit
        if not past_digit_limit(err):
            raise
        raise error(
            f"{path} holds an integer of more than {sys.get_int_max_str_digits()} digits, more than Python reads; "
            "no setting takes such a number: write the value you meant"
        ) from None
    except RecursionError:  # both parsers recurse once per level of nesting: a raw RecursionError
        raise error(
            f"{path} nests its lists or mappings too deeply to be read (a bracket left open, or generated text?); a "
            "settings file needs a few levels"
        ) from None
    if expanded > MAX_DOCUMENT_VALUES:
        raise error(
            f"{path} stands for more than {MAX_DOCUMENT_VALUES:,} values once its YAML aliases (*name) are expanded; "
            "a settings file needs a few hundred: write the values out, or use an alias only for a small mapping"
        )
    return data


def _value_count(data: Any) -> int:
    """The values of a parsed document, each alias counted as the copy a reader sees (at most MAX_DOCUMENT_VALUES
    + 1); counted once per shared object, so the count itself is quick."""
    sizes: dict[int, int] = {}

    def size(value: Any) -> int:
        if not isinstance(value, (Mapping, list)):
            return 1
        if id(value) not in sizes:
            sizes[id(value)] = 1  # a value that holds itself (&a [*a]) counts once
            items = [*value.keys(), *value.values()] if isinstance(value, Mapping) else value
            sizes[id(value)] = min(1 + sum(size(item) for item in items), MAX_DOCUMENT_VALUES + 1)
        return sizes[id(value)]

    return size(data)


def read_json(path: str | os.PathLike, fix: str | None = None, error: Error = SerializationError) -> Any:
    """The content of a JSON file adapterfusion wrote; `error` naming the file, what is wrong with it and `fix` (what
    to do about it; by default, for a file that is not JSON, that it is corrupt or truncated) when it is missing,
    unreadable or not JSON. A file this user may not read is said as such (io/paths.py permission_denied)."""
    path = Path(path)
    if os.path.lexists(path):  # a folder, a device (/dev/zero would never end), a FIFO, a loop: said, never read
        check_readable_file(path, fix or _CORRUPT, error=error)
    raw = read_bytes(path, fix, error)  # outside the try: the library's errors are ValueErrors too
    try:
        return json.loads(raw.decode("utf-8"))
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
        raise error(f"{path} is not valid JSON ({err}); {fix or _CORRUPT}") from None


def read_bytes(path: str | os.PathLike, fix: str | None = None, error: Error = SerializationError) -> bytes:
    """The bytes of a file adapterfusion reads; `error` naming the file and what happened when it is gone or cannot
    be read (this user may not: permission_denied, or the OS says why), with `fix` appended where given."""
    path = Path(path)
    then = f"; {fix}" if fix else ""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise error(f"{path} does not exist{then}") from None
    except OSError as err:
        if err.errno in DENIED_ERRNOS:
            raise permission_denied(path, error=error) from None
        raise error(f"{path} cannot be read ({err.strerror or err}){then}") from None
    except ValueError:  # the OS takes no path with a NUL in it
        raise error(f"{str(path)!r} is {describe(path)}; {fix or 'give the path without it'}") from None


# ---- JSON --------------------------------------------------------------------------------------------------
_WHITESPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace: json.decoder.WHITESPACE, which its stub lacks


def _skip_whitespace(text: str, index: int) -> int:
    """Where the first character after the whitespace at `index` is."""
    match = _WHITESPACE.match(text, index)
    assert match is not None  # `*` matches the empty string anywhere
    return match.end()


def repeated_keys(pairs: Sequence[tuple[str, Any]]) -> list[str]:
    """The keys a JSON object's pairs (json.loads' object_pairs_hook) give more than once, in the order they repeat:
    json.loads would keep the last of each without a word."""
    seen: set[str] = set()
    repeated: list[str] = []
    for key, _ in pairs:
        if key in seen and key not in repeated:
            repeated.append(key)
        seen.add(key)
    return repeated


def as_written(document: Mapping[str, Any]) -> dict[str, Any]:
    """`document` as it reads back once written as JSON (tuples as lists, other values as their str), so that it
    compares equal to what an earlier write left in a file."""
    return json.loads(json.dumps(dict(document), default=str))


def changed_keys(before: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """The keys, sorted, whose values differ between two JSON objects (a key one side lacks counts as null there):
    one read back from a file and one about to be written, taken `as_written`."""
    return sorted(key for key in before.keys() | now.keys() if before.get(key) != now.get(key))


class _StrictJSONDecoder(json.JSONDecoder):
    """A JSONDecoder whose objects refuse a repeated key. object_pairs_hook alone sees the keys but not where they
    are, so each object is parsed by the pure-Python scanner (the C one parses objects itself) with a scan function
    that records where every value ends, which tells where the next key starts."""

    def __init__(self) -> None:
        super().__init__()
        self.parse_object = _parse_object
        # typeshed declares only json.scanner.make_scanner; py_make_scanner is the documented-in-source pure one.
        self.scan_once = json.scanner.py_make_scanner(self)  # type: ignore[attr-defined]


def _parse_object(
    s_and_end: tuple[str, int], strict: bool, scan_once, object_hook, object_pairs_hook, memo: dict | None = None
):
    text, start = s_and_end
    value_ends: list[int] = []

    def scan_value(string: str, index: int):
        value, end = scan_once(string, index)
        value_ends.append(end)
        return value, end

    def key_start(i: int) -> int:
        """Where the i-th key's opening quote is: after the '{' or after the ',' that ends the previous pair."""
        index = _skip_whitespace(text, start if i == 0 else value_ends[i - 1])
        return index if i == 0 else _skip_whitespace(text, index + 1)

    def unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, str] = {}
        for i, (key, _) in enumerate(pairs):
            where = _position(text, key_start(i))
            if key in seen:
                raise _DuplicateKey(key, where, seen[key])
            seen[key] = where
        return dict(pairs)

    # JSONObject is json.decoder's object parser, which typeshed does not declare.
    return json.decoder.JSONObject(  # type: ignore[attr-defined]
        s_and_end, strict, scan_value, object_hook, unique_pairs, memo
    )


def _parse_json(text: str, path: Path, error: Error) -> Any:
    try:
        return _StrictJSONDecoder().decode(text)
    except json.JSONDecodeError as err:
        raise error(f"{path} is not valid JSON: {err}") from None


# ---- YAML --------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _strict_yaml_loader() -> type:
    """A yaml.SafeLoader whose mappings refuse a repeated key (merge keys `<<` excepted: an explicit key overrides
    a merged one on purpose). Built on first use, as PyYAML is an optional dependency."""
    import yaml

    class StrictSafeLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen: dict[Any, str] = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        first = seen.get(key)
                    except TypeError:  # an unhashable key: SafeLoader reports it itself
                        continue
                    mark = key_node.start_mark
                    where = f"line {mark.line + 1}, column {mark.column + 1}"
                    if first is not None:
                        raise _DuplicateKey(key, where, first)
                    seen[key] = where
            return super().construct_mapping(node, deep)

    return StrictSafeLoader


def _parse_yaml(text: str, path: Path, error: Error) -> Any:
    try:
        import yaml
    except ImportError:  # pragma: no cover - depends on the environment
        raise error(
            f"reading {path} needs PyYAML: pip install 'adapterfusion[experiments]' (or write it as .json)"
        ) from None
    try:
        return yaml.load(text, Loader=_strict_yaml_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:  # one line: where, then what PyYAML found (its own text spans several lines)
        mark = getattr(err, "problem_mark", None)
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(err, "problem", None) or err).split())
        raise error(f"{path}{where} is not valid YAML: {problem}") from None
