"""A task's further dev sets (`TaskSpec.extra_dev_splits`, e.g. MNLI's validation_mismatched): loaded from the same
source as its other splits, checked the same way, and scored only after training, with the checkpoint that the main
dev set selected. They never select anything, so each is an honest second dev number.

From the Hub the split is read from the same dataset; from a data folder, `<task>/<split>.jsonl.gz` (or any other
supported extension); from a task's own `data_files`, the file its entry of that split's name gives. A split that
is missing is left out with a note, so a demo pack without MNLI's mismatched dev set still trains.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from adapterfusion.tasks.carving import subsample_indices
from adapterfusion.tasks.checks import check_split
from adapterfusion.tasks.errors import TaskError
from adapterfusion.tasks.files import find_split_file, read_data_file
from adapterfusion.tasks.loading import _choose_source, check_max_examples
from adapterfusion.tasks.registry import resolve_task
from adapterfusion.tasks.spec import ROLES

_STREAM = len(ROLES)  # subsample stream after the roles', so the main splits' subsets do not change


class ExtraDevSplits(NamedTuple):
    """split name -> checked Dataset (labels as ids or scores), and notes on the splits that were not found."""

    splits: dict[str, Any]
    notes: tuple[str, ...]


def extra_dev_label(task: str, split: str) -> str:
    """How reports name the row of a further dev set: 'mnli mismatched' for MNLI's validation_mismatched."""
    return f"{task} {split.removeprefix('validation_')}"


def _raw_split(spec, kind: str, location: str, split: str, cache_dir: str | None) -> tuple[Any, str] | None:
    if kind == "hub":
        import datasets

        try:
            loaded = datasets.load_dataset(
                spec.hub_path, spec.hub_config, split=split, revision=spec.hub_revision, cache_dir=cache_dir
            )
        except Exception as err:  # a missing split or no network: the extra dev set is left out, with a note
            raise TaskError(f"{location}[{split}] could not be loaded ({type(err).__name__}: {err})") from err
        return loaded, f"{location}[{split}]"
    if kind == "local":
        path = find_split_file(Path(location) / spec.name, [split])
        return None if path is None else (read_data_file(path, cache_dir), str(path))
    if kind == "files":  # checked distinct from the main splits' files when those loaded (loading._file_splits)
        given = dict(spec.data_files).get(split)
        return None if given is None else (read_data_file(given, cache_dir), given)
    return None


def load_extra_dev_splits(
    task,
    data_dir: str | os.PathLike | None = None,
    seed: int = 42,
    *,
    source: str = "auto",
    max_examples: int | Mapping[str, int] | None = None,
    cache_dir: str | None = None,
) -> ExtraDevSplits:
    """The task's extra dev splits from where `load_task_data` (same arguments) reads its splits; `max_examples`
    limits each as it limits the validation split (a seeded subset)."""
    spec = resolve_task(task)
    check_max_examples(max_examples)
    if not spec.extra_dev_splits:
        return ExtraDevSplits({}, ())
    kind, location = _choose_source(spec, data_dir, source)
    limit = max_examples.get("validation") if isinstance(max_examples, Mapping) else max_examples
    splits: dict[str, Any] = {}
    notes: list[str] = []
    for i, split in enumerate(spec.extra_dev_splits):
        try:
            raw = _raw_split(spec, kind, location, split, cache_dir)
        except TaskError as err:
            notes.append(f"extra dev split {split!r} left out: {err}")
            continue
        if raw is None:
            files = kind == "files"
            why = f"the task's data_files give no file for it (key {split!r})" if files else f"{location} has none"
            notes.append(f"extra dev split {split!r} left out: {why}")
            continue
        checked = check_split(spec, raw[0], raw[1], "validation")
        dataset = checked.dataset
        if limit is not None:
            dataset = dataset.select(subsample_indices(len(dataset), limit, seed, _STREAM + i))
        splits[split] = dataset
    return ExtraDevSplits(splits, tuple(notes))
