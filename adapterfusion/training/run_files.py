"""Reading the JSON files a run (or the store) writes, with one error type, RunFileError, that names the file,
what is wrong with it and the fix. A module of its own, importing nothing of the model, so the store and the zoo,
which io/ reads provenance from, can use it without an import circle through training/run.py."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from adapterfusion.io.paths import check_readable_file
from adapterfusion.training.errors import RunFileError

RUN_FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.json"
LOCK_FILE = "run.lock"  # held while a run trains (training/run_lock.py)


def read_json(path: str | os.PathLike, fix: str) -> Any:
    """The content of a JSON file a run (or the store) wrote; RunFileError naming the file, what is wrong with it
    and `fix` (what to do about it) when it is missing, unreadable or not JSON."""
    path = Path(path)
    if os.path.lexists(path):  # a folder, a device (/dev/zero would never end), a FIFO, a loop: said, never read
        check_readable_file(path, fix, error=RunFileError)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunFileError(f"{path} does not exist; {fix}") from None
    except OSError as err:
        raise RunFileError(f"{path} cannot be read ({err.strerror or err}); {fix}") from None
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
        raise RunFileError(f"{path} is not valid JSON ({err}); {fix}") from None


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
