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
from pathlib import Path
from typing import Any

from adapterfusion.io.paths import check_readable_file
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
        found = (task_dir / f"{stem}{ext}" for ext in (*EXTENSIONS, *CONLL_EXTENSIONS))
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
    with _open(path) as handle:
        return not handle.read(4096).strip()


def _csv_header(path: Path) -> list[str]:
    """A CSV file's column names as pandas names them (an empty name becomes "Unnamed: <i>"); a TaskError for a name
    used twice, which pandas would silently rename to "<name>.1"."""
    try:
        with _open(path) as handle:
            text = io.TextIOWrapper(handle, encoding="utf-8-sig", newline="")
            header = next(csv.reader(text), [])
    except (OSError, EOFError, UnicodeDecodeError, csv.Error) as err:
        raise TaskError(
            f"data file {str(path)!r}: the header row cannot be read ({err}); save it as UTF-8 CSV."
        ) from err
    names = [name or f"Unnamed: {i}" for i, name in enumerate(header)]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise TaskError(
            f"data file {str(path)!r}, line 1: column name(s) {twice} appear more than once in the header "
            f"{header}; give every column its own name."
        )
    return names


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    twice = sorted({key for key in keys if keys.count(key) > 1})
    if twice:
        raise ValueError(f"key(s) {twice} appear more than once in one object; give every field its own name")
    return dict(pairs)


def _json_problem(path: Path) -> str | None:
    """Where a JSON data file first goes wrong ("line 6: Expecting ',' delimiter (column 31)"), found by reading it
    ourselves: the `datasets` builder says only that generating the dataset failed."""
    try:
        with _open(path) as handle:
            lines = handle.read().split(b"\n")
    except (OSError, EOFError):
        return None
    for number, raw in enumerate(lines, 1):
        try:
            lines[number - 1] = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            return f"line {number}: not UTF-8 text ({err.reason} at column {err.start + 1})"
    if "\n".join(lines).lstrip().startswith("["):  # one JSON list of objects, not JSON Lines
        try:
            json.loads("\n".join(lines), object_pairs_hook=_no_duplicate_keys)
        except json.JSONDecodeError as err:
            return f"line {err.lineno}: {err.msg} (column {err.colno})"
        except ValueError as err:
            return str(err)
        return None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line, object_pairs_hook=_no_duplicate_keys)
        except json.JSONDecodeError as err:
            return f"line {number}: {err.msg} (column {err.colno})"
        except ValueError as err:
            return f"line {number}: {err}"
        if not isinstance(row, dict):
            return f"line {number}: a JSON {type(row).__name__}, not an object holding the example's fields"
    return None


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
        header = _csv_header(path)
        features = datasets.Features({name: datasets.Value("string") for name in header})
        options = {"features": features, "keep_default_na": False, "na_values": [""]}
    try:
        dataset = datasets.load_dataset(builder, data_files=str(path), split="train", cache_dir=cache_dir, **options)
    except Exception as err:  # the builders raise many types; all mean "this file does not parse"
        if "corresponds to no data" in str(err):  # a CSV header alone, or an empty JSON list (datasets' words)
            raise TaskError(
                f"data file {str(path)!r} has no rows (only a header, or an empty list); it must hold at least one "
                "example."
            ) from err
        problem = _json_problem(path) if builder == "json" else None
        if problem is not None:
            raise TaskError(
                f"data file {str(path)!r}, {problem}; each line must be one JSON object (JSON Lines), "
                "or the whole file one JSON list of objects."
            ) from err
        raise TaskError(
            f"data file {str(path)!r} could not be parsed as {builder.upper()} ({type(err).__name__}: {err}); "
            "JSON files need one object per line (or a list of objects), CSV files a header row."
        ) from err
    if len(dataset) == 0:
        raise TaskError(f"data file {str(path)!r} has no rows; it must hold at least one example.")
    return dataset
