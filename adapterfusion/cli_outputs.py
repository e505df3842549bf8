"""Which files the command line may write: a --json result only where nothing is, or where a result of ours is
(marked with the command that wrote it), never a record of a folder of ours (a run, an experiment, a store entry, a
saved setup, a prune output), and a default heatmap only inside a run folder. We never overwrite what we did not
write."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from adapterfusion.errors import ConfigError
from adapterfusion.experiments.store import DB_FILE
from adapterfusion.io.atomic import atomic_write_json
from adapterfusion.io.paths import check_writable_file
from adapterfusion.piece import SETUP_FILE
from adapterfusion.pruning import PRUNING_FILE
from adapterfusion.run_layout import CONFIG_FILE, ENTRY_FILE, METRICS_FILE

# What marks a folder whose files we wrote and read back: a file of one, named as --json, is refused as that folder's.
RECORD_MARKERS = (
    ((DB_FILE,), "an experiment's output dir"),
    ((ENTRY_FILE,), "an AdapterStore entry"),
    ((CONFIG_FILE, METRICS_FILE), "a run folder"),
    ((SETUP_FILE,), "a saved setup"),
    ((PRUNING_FILE,), "a prune output"),
)


def check_default_heatmap_ours(heatmap: Path) -> None:
    """The default heatmap beside a fusion_attention.json is replaced only in a run folder (its config.json beside
    it), where it is analyze-fusion's own output; elsewhere a file of that name may be the user's."""
    if not (heatmap.parent / CONFIG_FILE).is_file():
        raise ConfigError(
            f"{str(heatmap)!r} exists, and {str(heatmap.parent)!r} is not a run folder, so it may not be ours; we "
            "never overwrite a file you did not name: pass --output with the file to write (that path, to replace it)"
        )


def _record_owner(path: Path, run_dir: str) -> str | None:
    """What holds the existing file `path` as one of its own records: the run being evaluated or pruned, or any
    folder of ours above it (RECORD_MARKERS). None for a new file, or one no folder of ours holds (which --json
    still replaces only if it is a result of ours: _is_our_result)."""
    if not os.path.lexists(path):
        return None
    target = path.resolve()
    if target.is_relative_to(Path(run_dir).resolve()):
        return f"the run folder {run_dir!r} itself"
    for folder in target.parents:
        for markers, owner in RECORD_MARKERS:
            if all((folder / marker).is_file() for marker in markers):
                return f"{owner} ({str(folder)!r})"
    return None


# In each --json result: the command that wrote it. Only a file holding it is replaced by a later --json: any other
# file there (a saved piece's config, another tool's JSON, the user's own) is not ours to overwrite.
RESULT_MARK = "written_by"
RESULT_COMMANDS = ("evaluate", "prune")


def _result_writer(command: str) -> str:
    """The RESULT_MARK value of a result `adapterfusion <command> --json` writes: one spelling for writing and
    for recognising it."""
    return f"adapterfusion {command} --json"


RESULT_WRITERS = tuple(_result_writer(command) for command in RESULT_COMMANDS)
_RESULT_BYTES = 1 << 24  # a result is a few kilobytes: a larger file is not one, and is not read whole to find out


def _is_our_result(path: Path) -> bool:
    """Whether `path` is a --json result this CLI wrote: a regular file (we never write a link) holding a JSON object
    whose RESULT_MARK names one of RESULT_WRITERS."""
    try:
        if os.path.islink(path) or not path.is_file() or path.stat().st_size > _RESULT_BYTES:
            return False
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(document, dict) and document.get(RESULT_MARK) in RESULT_WRITERS


def json_writer(path: str | None, run_dir: str, command: str) -> Callable[[Any], None]:
    """For `adapterfusion <command> --json PATH`: check now, before the long work, that PATH can be written (so a
    mistyped folder fails in a second, not after an evaluation) and that an existing file there is a result of ours
    (_is_our_result) and no file of the run's or of another folder of ours (a tab-completed RUN/config.json would
    make the run unreadable), and return what writes the result there at the end, marked as ours (no-op without
    it)."""
    if path is None:
        return lambda result: None

    target = check_writable_file(path, "--json")  # '' is refused as no path, as every empty path is
    owner = _record_owner(target, run_dir)
    if owner is not None:
        raise ConfigError(
            f"--json {path!r} is a file of {owner}, which we wrote and read back; the result would replace it. "
            "Give a path outside it, e.g. result.json in the current folder"
        )
    _check_ours_if_there(target, path, "")
    writer = _result_writer(command)

    def write(result: Any) -> None:
        _check_ours_if_there(target, path, " since the command began (the result above was not written)")
        atomic_write_json(target, {**result, RESULT_MARK: writer})
        print(f"written to {path}")

    return write


def _check_ours_if_there(target: Path, path: str, when: str) -> None:
    """Refuse a --json target where something is that is not a result of ours (_is_our_result)."""
    if os.path.lexists(target) and not _is_our_result(target):
        found = "a symbolic link" if os.path.islink(target) else "a file"
        raise ConfigError(
            f"--json {path!r} is {found}{when} that no adapterfusion evaluate or prune --json wrote (it holds no "
            f"{RESULT_MARK!r} mark of ours: a saved piece's config, another tool's file or your own); we never "
            "overwrite a file we did not write. Give a new path, e.g. result.json in the current folder, or move "
            "that file away first"
        )
