"""Paths as an experiment file writes them: relative to the file's folder. What an output dir records (its
experiment.json, the report, the spec and job digests) uses this form, so that it is the same in every clone.

A module of its own, importing nothing of the runner, so the spec, the store and the report can all use it."""

from __future__ import annotations

import os
from pathlib import Path


def relative_to_experiment_file(path: str | None, source: str | None) -> str | None:
    """An absolute `path` of an experiment (its data_dir, output_dir, a local encoder or zoo folder) as its
    experiment file `source` would write it: relative to the file's folder. A Hub id, 'shipped', a relative path, or
    any path of an experiment with no file is returned as given."""
    if path is None or source is None or not os.path.isabs(path):
        return path
    try:
        return Path(os.path.relpath(path, Path(source).parent)).as_posix()
    except ValueError:  # another drive (Windows): no relative path exists
        return path
