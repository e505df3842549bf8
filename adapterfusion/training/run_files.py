"""Reading the JSON files a run (or the store) writes, with one error type, RunFileError, that names the file,
what is wrong with it and the fix (through io/documents.py's `read_json`, the one JSON reader). A module of its own,
importing nothing of the model, so the store can use it without an import circle through training/run.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from adapterfusion.errors import RunFileError
from adapterfusion.io import documents
from adapterfusion.run_layout import CONFIG_FILE, METRICS_FILE

RUN_FORMAT_VERSION = 1
LOCK_FILE = "run.lock"  # held while a run trains (training/run_lock.py)


def read_json(path: str | os.PathLike, fix: str) -> Any:
    """io/documents.py's `read_json` raising RunFileError: the content of a JSON file a run (or the store) wrote."""
    return documents.read_json(path, fix, RunFileError)


def read_run_json(path: Path) -> dict[str, Any]:
    """config.json or metrics.json of a run folder, with a message that says what is wrong."""
    if not path.is_file():
        what = (
            f"{CONFIG_FILE}: it is not a run folder written by train()"
            if path.name == CONFIG_FILE
            else f"{METRICS_FILE}: the run has not finished (or failed); train it again to completion"
        )
        raise RunFileError(f"{path.parent} has no {what}")
    data = read_json(path, "the run folder is damaged; train the run again")
    if not isinstance(data, dict) or data.get("format_version") != RUN_FORMAT_VERSION:
        raise RunFileError(f"{path} is not a run file of format_version {RUN_FORMAT_VERSION}")
    return data
