"""Find and read a task's split files: `<data_dir>/<task>/<split>.jsonl.gz` (or .jsonl/.json/.csv, gzip'd or not;
SQuAD's JSON and CoNLL's text files for span tasks, tasks/span_files.py).

Files are read with the `datasets` json/csv builders so they get Arrow cache files, which is what lets
`Dataset.map` cache tokenisation between runs. CSV cells are read as the text they hold (pandas would read "007" as 7,
"NA" and "null" as missing and "True" as a bool); only an empty cell is missing.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from adapterfusion.io.documents import repeated_keys
from adapterfusion.io.paths import check_readable_file, describe
from adapterfusion.tasks.errors import TaskError
from adapterfusion.tasks.span_files import (
    CONLL_EXTENSIONS,
    is_conll_file,
    is_squad_file,
    read_conll_file,
    read_squad_file,
)

EXTENSIONS = (".jsonl.gz", ".jsonl", ".json.gz", ".json", ".csv.gz", ".csv")


def find_split_file(task_dir: Path, stems: list[str]) -> Path | None:
    """The one file in `task_dir` named `<stem><ext>` for the first stem that has any; None if none has."""
    for stem in stems:
        found = [task_dir / f"{stem}{ext}" for ext in (*EXTENSIONS, *CONLL_EXTENSIONS)]
        for path in found:
            if path.exists() and not path.is_file():  # skipped, it would leave the split to a silent carve-out
                raise TaskError(f"{path} is {describe(path)}, not a data file; replace it with the {stem} split's file")
        hits = [path for path in found if path.is_file()]
        if len(hits) > 1:
            raise TaskError(f"{task_dir}: several files for split {stem!r}: {[h.name for h in hits]}; keep only one.")
        if hits:
            return hits[0]
    return None


def _builder(path: Path) -> str:
    name = path.name.lower().removesuffix(".gz")
    if name.endswith((".jsonl", ".json")):
        return "json"
    if name.endswith(".csv"):
        return "csv"
    raise TaskError(f"{path}: unsupported data file type; use one of {list(EXTENSIONS)}.")


def _open(path: Path):
    return (gzip.open if path.name.lower().endswith(".gz") else open)(path, "rb")


def _is_empty(path: Path) -> bool:
    """Nothing but whitespace, however long the file (its first 4096 bytes being blank say nothing of the rest)."""
    with _open(path) as handle:
        while chunk := handle.read(1 << 16):
            if chunk.strip():
                return False
    return True


def _no_rows(path: Path) -> TaskError:
    return TaskError(
        f"data file {str(path)!r} has no rows (only a header, or an empty list); it must hold at least one example."
    )


def _first_non_utf8_line(path: Path) -> str | None:
    """'line 6: not UTF-8 text (...)' for the first line that does not decode; None when every line does."""
    with _open(path) as handle:
        for number, raw in enumerate(handle, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as err:
                return f"line {number}: not UTF-8 text ({err.reason} at column {err.start + 1})"
    return None


def _csv_records(text: Iterable[str]) -> Iterator[tuple[int, list[str]]]:
    """(first line number, cells) of every CSV record, leaving out the lines pandas skips: empty ones and unquoted
    whitespace-only ones (a quoted "  " is a row)."""
    last = [""]

    def lines() -> Iterator[str]:
        for line in text:
            last[0] = line
            yield line

    reader = csv.reader(lines())
    start = 1
    for record in reader:
        blank = reader.line_num == start and len(record) == 1 and not last[0].strip()
        if record and not blank:
            yield start, record
        start = reader.line_num + 1


def _header_names(path: Path, header: list[str]) -> list[str]:
    """Column names as pandas names them (an empty name becomes "Unnamed: <i>"); a TaskError for a name used twice,
    which pandas would silently rename to "<name>.1"."""
    names = [name or f"Unnamed: {i}" for i, name in enumerate(header)]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise TaskError(
            f"data file {str(path)!r}, line 1: column name(s) {twice} appear more than once in the header "
            f"{header}; give every column its own name."
        )
    return names


def _csv_layout(path: Path) -> tuple[list[str], int]:
    """A CSV file's column names and number of rows, read here, before pandas, so that each problem is named by its
    line: a name used twice, and a row with more or fewer cells than the header (pandas fills missing cells in, so
    the row's last field looks empty, and a cell too many on every row makes the first cell an index, shifting
    every column)."""
    limit = csv.field_size_limit(2**31 - 1)  # pandas reads a long text cell; the csv module stops at 128 KiB
    header: list[str] | None = None
    names: list[str] = []
    rows = 0
    try:
        with _open(path) as handle:
            for line, record in _csv_records(io.TextIOWrapper(handle, encoding="utf-8-sig", newline="")):
                if header is None:
                    header, names = record, _header_names(path, record)
                    continue
                if len(record) != len(header):
                    raise TaskError(
                        f"data file {str(path)!r}, line {line} (row {rows}): {len(record)} cell(s) where the header "
                        f"has {len(header)} columns {header}; give every row one cell per column (quote a text that "
                        "holds a comma, and leave a missing value as an empty cell between commas)."
                    )
                rows += 1
    except UnicodeDecodeError as err:
        where = _first_non_utf8_line(path) or f"not UTF-8 text ({err.reason})"
        raise TaskError(f"data file {str(path)!r}, {where}; save it as UTF-8 CSV.") from err
    except (OSError, EOFError, csv.Error) as err:
        raise TaskError(f"data file {str(path)!r} cannot be read as CSV ({err}); save it as UTF-8 CSV.") from err
    finally:
        csv.field_size_limit(limit)
    return names, rows


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    twice = sorted(repeated_keys(pairs))
    if twice:
        raise ValueError(f"key(s) {twice} appear more than once in one object; give every field its own name")
    return dict(pairs)


def _json_type(value: Any) -> str:
    """A parsed JSON value's type as JSON names it (a Python list is a JSON array, a str a string)."""
    names = {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return names.get(type(value), type(value).__name__)


def _json_rows(path: Path) -> int | None:
    """How many examples a JSON data file holds, read ourselves when the `datasets` builder fails (it says only that
    generating the dataset failed); a ValueError saying where the file first goes wrong ("line 6: Expecting ','
    delimiter (column 31)"); None when the file cannot be read."""
    try:
        problem = _first_non_utf8_line(path)
        with _open(path) as handle:
            text = handle.read().decode("utf-8", errors="replace")
    except (OSError, EOFError):
        return None
    if problem is not None:
        raise ValueError(problem)
    if text.lstrip().startswith("["):  # one JSON list of objects, not JSON Lines
        try:
            rows = json.loads(text, object_pairs_hook=_no_duplicate_keys)
        except json.JSONDecodeError as err:
            raise ValueError(f"line {err.lineno}: {err.msg} (column {err.colno})") from None
        if not isinstance(rows, list):
            return None
        for index, row in enumerate(rows):  # `datasets` says only that generating the dataset failed
            if row is not None and not isinstance(row, dict):
                raise ValueError(
                    f"item {index} of the list (row {index}): a JSON {_json_type(row)}, not an object holding the "
                    "example's fields"
                )
        return len(rows)
    count = 0
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line, object_pairs_hook=_no_duplicate_keys)
        except json.JSONDecodeError as err:
            raise ValueError(f"line {number}: {err.msg} (column {err.colno})") from None
        except ValueError as err:
            raise ValueError(f"line {number}: {err}") from None
        if not isinstance(row, dict):
            raise ValueError(f"line {number}: a JSON {_json_type(row)}, not an object holding the example's fields")
        count += 1
    return count


def read_data_file(path: str | Path, cache_dir: str | None = None):
    """Read one split file into a `datasets.Dataset`, turning parser failures into a TaskError naming the file."""
    import datasets

    path = Path(path)
    if not os.path.lexists(path):
        raise TaskError(f"data file {str(path)!r} does not exist; check the path or the task's data_files.")
    check_readable_file(path, "check the path or the task's data_files.", "data file", TaskError)
    if is_conll_file(path):  # span tasks' own formats (tasks/span_files.py)
        return read_conll_file(path)
    if is_squad_file(path):
        return read_squad_file(path)
    builder = _builder(path)
    try:
        empty = _is_empty(path)
    except (OSError, EOFError) as err:
        raise TaskError(f"data file {str(path)!r} cannot be read ({err}); is it a valid (gzip) file?") from err
    if empty:
        raise TaskError(f"data file {str(path)!r} is empty; it must hold at least one example.")
    options: dict[str, Any] = {}
    if builder == "csv":
        header, rows = _csv_layout(path)
        if rows == 0:
            raise _no_rows(path)
        features = datasets.Features({name: datasets.Value("string") for name in header})
        options = {"features": features, "keep_default_na": False, "na_values": [""]}
    try:
        dataset = datasets.load_dataset(builder, data_files=str(path), split="train", cache_dir=cache_dir, **options)
    except Exception as err:  # the builders raise many types; all mean "this file does not parse"
        if builder == "json":
            try:
                count = _json_rows(path)
            except ValueError as problem:
                raise TaskError(
                    f"data file {str(path)!r}, {problem}; each line must be one JSON object (JSON Lines), "
                    "or the whole file one JSON list of objects."
                ) from err
            if count == 0:  # an empty JSON list
                raise _no_rows(path) from err
        raise TaskError(
            f"data file {str(path)!r} could not be parsed as {builder.upper()} ({type(err).__name__}: {err}); "
            "JSON files need one object per line (or a list of objects), CSV files a header row."
        ) from err
    if len(dataset) == 0:
        raise _no_rows(path)
    return dataset
